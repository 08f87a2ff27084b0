"""Attacks on the staged workspace (issue 28) from inside a real sandbox and from a
hostile repository: each test is one hole that was found open, with the attack as the
model (or a file already in the folder) would make it.

The model's code runs through ``agent.tools.execute`` with a real Agent, bubblewrap and
the overlay; a few attacks on ``Stage`` itself write its upper directory directly, which
is exactly what the sandbox's writes become.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipyagent import Agent, _eventloop
from ipyagent.items import ToolCall, ToolResult
from ipyagent.kernel import sandbox
from ipyagent.kernel.sandbox import MAX_PROCESSES
from ipyagent.kernel.staging import probe_overlay

FLAGS, WHY = sandbox.probe()
STAGE_WHY = probe_overlay() if FLAGS is not None else WHY
needs_stage = pytest.mark.skipif(FLAGS is None or bool(STAGE_WHY),
                                 reason=f"no staged sandbox here: {WHY or STAGE_WHY}")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Agent, Path]]:
    """An agent whose sandboxed sibling works in ``ws``."""
    if FLAGS is None or STAGE_WHY:
        pytest.skip(f"no staged sandbox here: {WHY or STAGE_WHY}")
    ws = tmp_path_factory.mktemp("attacks") / "ws"
    ws.mkdir()
    with Agent(file_tools=False, cwd=str(ws), tool_timeout=60, sandbox="bwrap") as agent:
        agent.kernel.start()
        yield agent, ws


def call(agent: Agent, code: str, tool: str = "python") -> ToolResult:
    args = {"code": code} if tool == "python" else {"command": code}
    return _eventloop.run_sync(agent.tools.execute(ToolCall("c1", tool, args)))


def changes(result: ToolResult) -> dict[str, dict]:
    return {c["path"]: c for c in result.meta.get("changes", [])}


@needs_stage
@pytest.mark.skipif(shutil.which("python3") is None, reason="no python3 on PATH")
def test_the_shell_tool_has_the_siblings_process_limit(world: tuple[Agent, Path]) -> None:
    # A fork loop in the shell tool once had no limit at all (the python sibling stopped
    # at MAX_PROCESSES): it could take every pid of the machine from the user's kernel.
    agent, _ = world
    n = MAX_PROCESSES + 150
    spawn = ("import subprocess\nps = []\ntry:\n"
             f"    for _ in range({n}): ps.append(subprocess.Popen(['sleep', '20']))\n"
             "except OSError:\n    pass\nprint('started', len(ps))\nfor p in ps: p.kill()\n")
    out = call(agent, f"python3 -c \"{spawn}\"", "shell").output
    started = int(out.split("started ")[1].split()[0])
    assert started <= MAX_PROCESSES, out
