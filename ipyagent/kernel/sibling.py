"""The sibling kernel: a second Jupyter kernel process where the model's code runs.

The promise: the model's Python never runs in the user's kernel, a runaway or crashing
snippet never takes the user's session down, and the isolation costs nothing noticeable.

Design, modelled on jupyter_client's manager/client split: a ``_Handle``
(``process.py``) owns the ``AsyncKernelManager`` (the process) and its
``AsyncKernelClient`` (the sockets); both
are created and used only on the engine loop (``_util.eventloop``), so every async method here runs
there via ``run_async`` and every sync one via ``run_sync``. Faults (timeouts, crashes,
memory bombs) come back as ``Execution`` values; only a kernel that cannot be started or
reached raises ``KernelError``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import shutil
import tempfile
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import zmq
from jupyter_client.kernelspec import KernelSpecManager

from .._util import eventloop as _eventloop
from ..errors import KernelError
from . import notes
from ._sync import SyncForms
from .command import CommandRun, run_command
from .outputs import Execution, OutputCollector, Status, finish
from .process import (
    LimitedKernelManager,
    SandboxedKernelManager,
    _finalize,
    _Handle,
    _Limits,
    _private_ipython_dir,
    parse_memory,
    process_limit,
    sandbox_env,
    scrub_env,
)
from .sandbox import MAX_PROCESSES, SandboxPlan, check_mode, check_paths, resolve_mode
from .staging import Stage, helper_argv, probe_overlay

__all__ = ["SiblingKernel", "Execution", "scrub_env", "parse_memory"]

log = logging.getLogger("ipyagent.kernel.sibling")

NO_NETWORK_STACK = (
    "Agent.sandbox_network = True needs a user-mode network stack that keeps the host's "
    "loopback out of reach, and slirp4netns is not installed (Debian/Ubuntu: apt install "
    "slirp4netns; Fedora: dnf install slirp4netns); ipyagent never falls back to the host's "
    "network. Or set Agent.sandbox_network = False")

_POLL = 0.15  # seconds between liveness checks: a dead kernel is noticed within a second
_SETTLE = 5.0  # seconds a cancelled request's cell may take to start, beyond interrupt_grace


class SiblingKernel(SyncForms):
    """A separate kernel process that runs the model's code, with faults returned as values."""

    _kernel_word = 'the sibling kernel'

    # Channels of a sandboxed kernel: IPC sockets work with the network off too, and are
    # no slower than TCP with it on (bench/kernel_roundtrip.py measures both).
    _sandbox_transport = "ipc"

    def __init__(
        self,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float | None = 60,
        memory_limit: str | int | None = None,
        kernel_name: str = "python3",
        *,
        cpu_limit: int | None = None,
        env: Mapping[str, str] | None = None,
        secret_env_vars: Iterable[str] = (),
        max_output_bytes: int = 2_000_000,
        max_model_chars: int = 10_000,
        max_transfer_bytes: int = 100 * 1024 * 1024,
        startup_timeout: float = 60,
        interrupt_grace: float = 3.0,
        log_path: str | os.PathLike[str] | None = None,
        kernel_spec_manager: KernelSpecManager | None = None,
        sandbox: str = "auto",
        sandbox_network: bool = False,
        sandbox_paths: Mapping[str, str] | None = None,
        workspace: str | os.PathLike[str] | None = None,
        sandbox_env: Iterable[str] = (),
        staged: bool = True,
    ) -> None:
        self.cwd = os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd())
        # The sandbox (see sandbox.py): "auto" is bubblewrap where it works, else none.
        self.sandbox = check_mode(sandbox)
        self.sandbox_network = sandbox_network
        self.sandbox_paths = check_paths(sandbox_paths or {})
        self.workspace = os.path.abspath(os.fspath(workspace)) if workspace is not None else None
        self.sandbox_env = tuple(sandbox_env)
        # The staged workspace (staging.py): made at the first sandboxed start, kept across
        # restarts (its change set lives on), removed at shutdown.
        self.staged = staged
        self.stage: Stage | None = None
        self.stage_note = ""  # why the workspace is not staged (then it is read-only)
        self.timeout = timeout
        self.memory_limit = parse_memory(memory_limit)
        self.cpu_limit = cpu_limit
        self.kernel_name = kernel_name
        self.env_overrides = dict(env or {})
        self.secret_env_vars = tuple(secret_env_vars)
        self.max_output_bytes = max_output_bytes
        self.max_model_chars = max_model_chars
        self.max_transfer_bytes = max_transfer_bytes
        self.startup_timeout = startup_timeout
        self.interrupt_grace = interrupt_grace
        self._log_path = os.fspath(log_path) if log_path is not None else None
        self._ksm = kernel_spec_manager
        self._handle = _Handle()
        self._state = "not started"
        self._on_stream: Callable[[str, str], None] | None = None
        # A request given up (cancelled) before its cell finished, and whether it had started.
        self._abandoned: tuple[str, bool] | None = None
        self._started: str | None = None  # the msg_id whose cell the kernel said it began
        self._ended: str | None = None  # the msg_id whose cell the kernel said it ended
        self._settle_note = ""  # what settling a cancelled request did, for the next result
        self._lock: asyncio.Lock | None = None  # made on the engine loop
        self._closed = False
        self._finalizer = weakref.finalize(self, _finalize, self._handle)

    # ---- lifecycle -------------------------------------------------------------

    async def _ensure_ready(self) -> None:
        if self._closed:
            raise KernelError("the sibling kernel was shut down; create a new SiblingKernel")
        if self._lock is None:
            self._lock = asyncio.Lock()
        handle = self._handle
        if handle.start_task is None:
            if handle.km is not None:
                return  # started; a kernel that died since is restarted by _run_locked
            task = handle.start_task = asyncio.ensure_future(self._start())
            # Dropped when done: the task holds self, and the finalizer holds the handle.
            task.add_done_callback(lambda _: setattr(handle, "start_task", None))
        await asyncio.shield(handle.start_task)

    def _environment(self) -> dict[str, str]:
        """The kernel's (and the shell's) environment: an allow-list in the sandbox."""
        if self._handle.sandboxed:
            return sandbox_env(names=self.sandbox_env)
        return scrub_env(extra_secrets=self.secret_env_vars)

    def _launch_kwargs(self, handle: _Handle) -> dict[str, Any]:
        env = self._environment()
        env["IPYAGENT_SIBLING"] = "1"  # so ipyagent loaded in the sibling (a user config) does not nest
        if handle.tmpdir is not None:
            env["IPYTHONDIR"] = _private_ipython_dir(handle.tmpdir)
        env.update(self.env_overrides)
        return {"cwd": self.cwd, "env": env, "stdout": handle.log, "stderr": handle.log}

    def _limits(self, handle: _Handle) -> _Limits | None:
        """The kernel's resource limits (POSIX), applied by an exec wrapper at each (re)start."""
        processes = cgroup = None
        if handle.sandboxed:
            if handle.cgroup is None:
                handle.nproc, handle.cgroup = process_limit(MAX_PROCESSES)
            processes, cgroup = handle.nproc, handle.cgroup
        limits = _Limits(self.memory_limit, self.cpu_limit, processes, cgroup)
        return limits if os.name == "posix" and limits else None

    @property
    def sandboxed(self) -> bool:
        """True when the kernel runs (or will run) inside bubblewrap."""
        try:
            return resolve_mode(self.sandbox)[0] == "bwrap"
        except RuntimeError:
            return False

    def _manager(self, handle: _Handle, **kw: Any) -> LimitedKernelManager:
        """The kernel manager: plain, or one that wraps the kernel command in bubblewrap."""
        try:
            mode, _ = resolve_mode(self.sandbox)
        except RuntimeError as exc:
            raise KernelError(f"could not start the sibling kernel: {exc}") from None
        handle.sandboxed = mode == "bwrap"
        if mode == "none":
            return LimitedKernelManager(**kw)
        assert handle.tmpdir is not None
        run = os.path.join(handle.tmpdir, "run")  # the connection file and the IPC sockets
        os.makedirs(run, mode=0o700)
        km = SandboxedKernelManager(**kw)
        km.transport = self._sandbox_transport
        if km.transport == "ipc":
            km.ip = os.path.join(run, "k")
        km.connection_file = os.path.join(run, "kernel.json")
        km.stage_argv = self._stage_argv()  # first: it makes the stage the plan binds
        km.plan = self._plan(private=[(os.path.join(handle.tmpdir, "ipython"), "rw"), (run, "rw")])
        return km

    def _writable(self) -> list[str]:
        return [self.cwd] + ([self.workspace] if self.workspace and self.workspace != self.cwd else [])

    def _plan(self, private: Iterable[tuple[str, str]] = ()) -> SandboxPlan:
        # IPYTHONDIR read-write: IPython ignores one it cannot write (and our config with it).
        return SandboxPlan(writable=self._writable(), network=self.sandbox_network,
                           paths=self.sandbox_paths, private=private, readonly=self.stage is None,
                           masked=[self.stage.base] if self.stage is not None else [])

    def _stage_argv(self) -> list[str]:
        """The staging helper's command line: the overlay (when it can be made) and the network."""
        network = None
        if self.sandbox_network:
            network = shutil.which("slirp4netns")
            if network is None:
                raise KernelError(NO_NETWORK_STACK)
        if self.stage is None and self.staged and not self.stage_note:
            why = probe_overlay()
            if why:
                self.stage_note = (f"{why}: the workspace is READ-ONLY in the sandbox (the model's "
                                   "code cannot change your files; a staged copy needs overlayfs in "
                                   "user namespaces, Linux 5.11+)")
            else:
                self.stage = Stage(self._writable())
                # Gone with this object too (garbage-collected or at exit without close()):
                # its upper and undo folders hold copies of your files.
                weakref.finalize(self, self.stage.close)
        elif not self.staged and not self.stage_note:
            self.stage_note = "staging is off: the workspace is READ-ONLY in the sandbox"
        if self.stage is not None:
            return self.stage.argv(network)
        # No overlay: still the helper for its own namespaces (the sealed network). Its pid
        # file goes in the kernel's private directory, never a shared one like /tmp.
        if self._handle.tmpdir is None:
            raise KernelError("the sibling kernel is not running; try again")
        return helper_argv(os.path.join(self._handle.tmpdir, "stage.pid"), network)

    async def _start(self) -> None:
        handle = self._handle
        await handle.aclose(now=True)  # leftovers of an earlier failed attempt
        handle.cleanup_files()
        self._state = "starting"
        if not os.path.isdir(self.cwd):
            self._state = "dead"
            raise KernelError(f"sibling kernel cwd does not exist: {self.cwd}")
        handle.tmpdir = tempfile.mkdtemp(prefix="ipyagent-sibling-")
        handle.log_path = self._log_path or os.path.join(handle.tmpdir, "kernel.log")
        handle.log = open(handle.log_path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the kernel
        kw: dict[str, Any] = {"kernel_name": self.kernel_name}
        if self._ksm is not None:
            kw["kernel_spec_manager"] = self._ksm
        km = handle.km = self._manager(handle, **kw)  # assigned first, so a failure can kill the process
        km.shutdown_wait_time = 2.0
        if zmq.has("curve"):
            # CurveZMQ when the kernelspec supports it: other local users cannot read the traffic.
            km.transport_encryption = "auto"

        async def launch() -> None:
            kwargs = self._launch_kwargs(handle)
            km.limits = self._limits(handle)
            await km.start_kernel(**kwargs)
            handle.kc = km.client()
            handle.kc.start_channels()

        await self._bring_up(launch, f"start the sibling kernel {self.kernel_name!r}")

    async def _bring_up(self, launch: Callable[[], Awaitable[None]], what: str) -> None:
        """Run ``launch`` (a start or a restart) and wait until the kernel answers.

        On any failure the kernel is marked dead and closed: the next call starts from
        scratch rather than reuse a half-started kernel.
        """
        handle = self._handle
        self._state = "starting"
        try:
            try:
                await launch()
            except Exception as exc:
                raise KernelError(f"could not {what}: {exc}") from exc
            if handle.pid:
                handle.pids.append(handle.pid)
            await self._wait_ready(handle)
        except BaseException:
            self._state = "dead"
            await handle.aclose(now=True)
            raise

    async def _wait_ready(self, handle: _Handle) -> None:
        """wait_for_ready, but noticing a kernel that dies while starting within a poll interval."""
        assert handle.km is not None and handle.kc is not None
        ready = asyncio.ensure_future(handle.kc.wait_for_ready(timeout=self.startup_timeout))
        try:
            while not ready.done():
                await asyncio.wait({ready}, timeout=_POLL)
                if not ready.done() and not await handle.km.is_alive():
                    ready.cancel()
                    raise KernelError(self._startup_failure(handle, f"died while starting ({handle.exit_cause()})"))
            ready.result()
        except RuntimeError as exc:
            raise KernelError(self._startup_failure(handle, str(exc))) from exc
        except KernelError:
            raise
        finally:
            if not ready.done():
                ready.cancel()
        self._state = "idle"

    def _startup_failure(self, handle: _Handle, what: str) -> str:
        self._state = "dead"
        hint = ""
        if self.memory_limit is not None:
            hint = f" (memory_limit={self.memory_limit} bytes may be too small for the kernel to start)"
        tail = handle.log_tail().replace("\n", " | ")
        return f"sibling kernel {self.kernel_name!r} {what}{hint}" + (f"; log: {tail}" if tail else "")

    async def _close(self) -> None:
        self._closed = True
        await self._handle.close_all()
        self._finalizer.detach()
        if self.stage is not None:
            self.stage.close()
            self.stage = None

    # ---- a fresh process per command (the shell tool) ----------------------------------

    async def run_command_async(self, command: str, timeout: float | None = None,
                                on_stream: Callable[[str, str], None] | None = None) -> CommandRun:
        """``bash -c command`` as a fresh process: in its own bubblewrap sandbox inside the
        staged workspace (the python sibling's files, network and limits), never through the
        sibling's interpreter; unsandboxed, a plain child process with the scrubbed environment."""
        return await _eventloop.run_async(self._run_command(command, timeout, on_stream))

    async def _run_command(self, command: str, timeout: float | None,
                           on_stream: Callable[[str, str], None] | None) -> CommandRun:
        await self._ensure_ready()  # the stage lives with the kernel: it must be up
        shell = shutil.which("bash") or "/bin/sh"
        cmd = [shell, "-c", command]
        if self._handle.sandboxed:
            join = self.stage.join_argv(self.cwd) if self.stage is not None else None
            if join is None and self.stage is not None:
                raise KernelError("the staged workspace is not running (the sibling kernel is "
                                  "down); try again")
            plan = self._plan()
            cmd = (join or []) + plan.argv(cmd)
            if join is None:  # no stage: its own namespaces, and no network unless asked
                cmd = self._stage_argv() + cmd
        # Sandboxed: the sibling's own limits, its task limit too (shared with the kernel),
        # or a fork loop in the shell could take every pid of the machine.
        limits = self._limits(self._handle) if self._handle.sandboxed else \
            _Limits(self.memory_limit, self.cpu_limit)
        if os.name == "posix" and limits:
            cmd = limits.argv() + cmd
        return await run_command(cmd, env=self._environment(), cwd=self.cwd, timeout=timeout,
                                 on_stream=on_stream, max_bytes=self.max_output_bytes)

    async def _interrupt_busy(self) -> None:
        if self._handle.km is not None:
            await self._handle.km.interrupt_kernel()

    async def _restart(self) -> None:
        km = self._handle.km
        assert km is not None
        await self._bring_up(lambda: km.restart_kernel(now=True), "restart the sibling kernel")

    def is_alive(self) -> bool:
        """True while the kernel process is running."""
        km = self._handle.km
        proc = getattr(km.provisioner, "process", None) if km is not None else None
        return proc is not None and proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The kernel process id (changes on restart)."""
        return self._handle.pid

    @property
    def pids(self) -> list[int]:
        """Every process id this kernel has had (one per start or restart)."""
        return list(self._handle.pids)

    @property
    def log_path(self) -> str | None:
        """Where the kernel's own stdout/stderr chatter goes."""
        return self._handle.log_path

    def __repr__(self) -> str:
        return f"<SiblingKernel {self.kernel_name} {self.state} pid={self.pid} cwd={self.cwd!r}>"

    # ---- execution -------------------------------------------------------------

    async def _run(
        self,
        code: str,
        timeout: float | None,
        *,
        silent: bool = False,
        user_expressions: dict[str, str] | None = None,
        on_stream: Callable[[str, str], None] | None = None,
    ) -> tuple[Execution, dict[str, Any]]:
        """Run one request on the engine loop; returns the Execution and the reply content."""
        await self._ensure_ready()
        assert self._lock is not None
        async with self._lock:  # one request at a time, so the callback is this request's
            self._on_stream = on_stream
            try:
                return await self._run_locked(code, timeout, silent, user_expressions)
            finally:
                self._on_stream = None

    async def _run_locked(
        self, code: str, timeout: float | None, silent: bool, user_expressions: dict[str, str] | None
    ) -> tuple[Execution, dict[str, Any]]:
        handle = self._handle
        km, kc = handle.km, handle.kc
        pre_note = ""
        if km is None or kc is None or not await km.is_alive():
            # Died while idle (a background thread, the CPU limit): run in a fresh kernel, say so.
            pre_note = notes.died_idle(handle.exit_cause())
            await self._restart() if km is not None else await self._start()
            km, kc = handle.km, handle.kc
            assert km is not None and kc is not None
        if self._abandoned is not None:  # its own settling has not had the lock yet
            pre_note = await self._settle_abandoned() or pre_note
        if self._settle_note:
            pre_note, self._settle_note = self._settle_note, ""
        started = time.monotonic()
        collector = OutputCollector(self.max_output_bytes)
        msg_id = kc.execute(
            code,
            silent=silent,
            store_history=not silent,
            user_expressions=user_expressions or {},
            allow_stdin=False,
            stop_on_error=False,  # or the request after an error comes back "aborted"
        )
        self._state = "busy"
        try:
            deadline = None if timeout is None else started + timeout
            outcome = await self._collect(msg_id, collector, deadline)
            reply: dict[str, Any] = {}
            note = ""
            restarted = bool(pre_note)
            status: Status = "died"
            if outcome == "timeout":
                assert timeout is not None  # no deadline, no timeout
                await km.interrupt_kernel()
                outcome = await self._collect(msg_id, collector, time.monotonic() + self.interrupt_grace)
                if outcome == "idle":
                    reply = await self._reply(msg_id)
                    status, note = "timeout", notes.interrupted(timeout)
                elif outcome == "timeout":
                    status, restarted = "timeout", True
                    note = notes.stuck_restarted(timeout)
                    await self._restart()
            elif outcome == "idle":
                reply = await self._reply(msg_id)
                failed = reply.get("status") in ("error", "aborted") if reply else collector.has_error
                status = "error" if failed else "ok"
            if outcome == "died":
                status, restarted = "died", True
                cause = handle.exit_cause()
                note = notes.died_running(cause)
                try:
                    await self._restart()
                except KernelError as exc:
                    note += notes.restart_failed(exc)
        except asyncio.CancelledError:
            # The caller gave up (Ctrl-C, a stopped run): do not leave the code running. An
            # interrupt that lands before the cell starts is lost, so the next request first
            # settles this one (``_settle_abandoned``).
            began = self._started == msg_id
            if km.has_kernel and began:
                asyncio.ensure_future(km.interrupt_kernel())
            if self._ended != msg_id:  # given up while its reply was read: nothing runs
                # One interrupt per cell: a second one can land on the next cell (seen: a
                # KeyboardInterrupt in the compile of the request after).
                self._abandoned = (msg_id, began)
                asyncio.ensure_future(self._settle_soon())
            self._state = "idle"
            raise
        if self._state == "busy":
            self._state = "idle"
        return finish(collector, status, reply, note=note, pre_note=pre_note, started=started,
                      restarted=restarted, max_model_chars=self.max_model_chars), reply

    async def _collect(self, msg_id: str, collector: OutputCollector, deadline: float | None) -> str:
        """Feed IOPub messages of ``msg_id`` to ``collector``: 'idle', 'timeout' or 'died'."""
        km, kc = self._handle.km, self._handle.kc
        assert km is not None and kc is not None
        next_check = time.monotonic() + _POLL
        while True:
            now = time.monotonic()
            wait = _POLL if deadline is None else max(0.0, min(_POLL, deadline - now))
            try:
                msg = await kc.get_iopub_msg(timeout=wait)
            except queue.Empty:
                msg = None
            except ValueError as exc:
                # A message failing its signature check (seen from a kernel near its
                # memory limit): skip it and say so, rather than lose the whole call.
                collector.unreadable += 1
                log.debug("skipped an unreadable IOPub message: %s", exc)
                continue
            now = time.monotonic()
            if msg is None or now >= next_check:
                # Checked on quiet waits and, during an output flood, at least every _POLL.
                next_check = now + _POLL
                if not await km.is_alive():
                    return "died"
                if deadline is not None and now >= deadline:
                    return "timeout"
            if msg is None or msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status":
                state = msg["content"].get("execution_state")
                if state == "idle":
                    self._ended = msg_id
                    return "idle"
                if state == "busy":
                    self._started = msg_id
                continue
            try:
                collector.add(msg)
            except (KeyError, TypeError, AttributeError, ValueError):
                # Fields of the wrong type (the model's code can send its own messages):
                # skipped and counted, as a remote kernel's are.
                collector.unreadable += 1
                continue
            if self._on_stream is not None and msg["msg_type"] == "stream":
                try:
                    self._on_stream(msg["content"].get("name", "stdout"), msg["content"].get("text", ""))
                except Exception:  # a display problem must not lose the output
                    log.debug("on_stream callback failed", exc_info=True)

    async def _settle_abandoned(self) -> str:
        """End the request given up earlier: a cell that had not started is interrupted once
        it does (an interrupt sent to an idle kernel is lost; the cell then ran whole, seen
        when a rewind's re-run was stopped under load); one that had, got its interrupt when
        it was given up. Wait for it to end; restart the kernel if it will not (the note
        says so, "" otherwise)."""
        assert self._abandoned is not None
        msg_id, began = self._abandoned
        self._abandoned = None
        km, kc = self._handle.km, self._handle.kc
        if km is None or kc is None:
            return ""
        give_up = time.monotonic() + self.interrupt_grace + _SETTLE
        while time.monotonic() < give_up:
            try:
                msg = await kc.get_iopub_msg(timeout=_POLL)
            except (queue.Empty, ValueError):
                if not await km.is_alive():
                    return ""  # the next request restarts it and says so
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id or msg["msg_type"] != "status":
                continue
            state = msg["content"].get("execution_state")
            if state == "busy" and not began:
                began = True
                await km.interrupt_kernel()
            elif state == "idle":
                return ""
        await self._restart()
        return notes.stopped_call_restarted()

    async def _reply(self, msg_id: str, patience: float = 5.0) -> dict[str, Any]:
        """The execute_reply content for ``msg_id`` (stale replies of earlier requests skipped)."""
        kc = self._handle.kc
        assert kc is not None
        give_up = time.monotonic() + patience
        while time.monotonic() < give_up:
            try:
                msg = await kc.get_shell_msg(timeout=_POLL)
            except (queue.Empty, ValueError):  # ValueError: a bad signature, as above
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return dict(msg["content"])
        return {}
