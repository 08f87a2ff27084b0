"""One command as a fresh process (the shell tool's): its output streamed, bounded and
decoded, its exit code from the process itself (nothing the command prints can forge it),
and the whole process group killed at the time limit or when the caller gives up."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["CommandRun", "run_command"]


@dataclass
class CommandRun:
    """What one command did: its output in order, how it ended."""

    chunks: list[tuple[str, str]] = field(default_factory=list)  # (stdout|stderr, text)
    exit_code: int | None = None
    status: str = "ok"  # ok | timeout | interrupted | failed
    dropped: int = 0  # bytes past max_bytes, not kept
    problem: str = ""  # why it could not be run

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.chunks)


async def run_command(argv: list[str], *, env: Mapping[str, str], cwd: str,
                      timeout: float | None, on_stream: Callable[[str, str], None] | None = None,
                      max_bytes: int = 2_000_000) -> CommandRun:
    """Run ``argv`` with no stdin; kill its process group at ``timeout`` or on cancel."""
    run = CommandRun()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=dict(env), cwd=cwd, start_new_session=True)
    except OSError as exc:
        run.status, run.problem = "failed", f"{type(exc).__name__}: {exc}"
        return run
    kept = 0

    async def pump(name: str, stream: asyncio.StreamReader) -> None:
        nonlocal kept
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        while True:
            chunk = await stream.read(65536)
            text = decoder.decode(chunk, final=not chunk)
            if text:
                size = len(text.encode())
                if kept + size > max_bytes:
                    run.dropped += size
                else:
                    kept += size
                    run.chunks.append((name, text))
                    if on_stream is not None:
                        with contextlib.suppress(Exception):  # a display problem loses nothing
                            on_stream(name, text)
            if not chunk:
                return

    assert proc.stdout is not None and proc.stderr is not None
    pumps = asyncio.gather(pump("stdout", proc.stdout), pump("stderr", proc.stderr))
    try:
        run.exit_code = await asyncio.wait_for(proc.wait(), timeout)
        try:  # what it left running in the background goes with it (as in the sandbox)
            await asyncio.wait_for(asyncio.shield(pumps), 1.0)
        except asyncio.TimeoutError:
            await _kill(proc)
    except asyncio.TimeoutError:
        run.status = "timeout"
        await _kill(proc)
        run.exit_code = proc.returncode
    except asyncio.CancelledError:
        run.status = "interrupted"
        await _kill(proc)
        raise
    finally:
        if not pumps.done():
            pumps.cancel()
            await asyncio.gather(pumps, return_exceptions=True)
    return run


async def _kill(proc: asyncio.subprocess.Process) -> None:
    """The whole group: the sandbox (bubblewrap) and everything in it goes with it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(proc.wait(), 5)
