"""What a rewind costs beside the re-execution of the kept python calls (issue 31's "cheap").

A 200-step run (each step one python call that sets a variable and writes a small file,
through the staged workspace where this machine has one) against an in-process model, then,
side by side in one process:

* ``agent.rewind(100)``: the branch that keeps steps 101-200, the undo of their 100 change
  sets, the cut, a fresh sibling re-running the 100 kept calls with outputs compared;
* the floor: a fresh sibling started and the same 100 pieces of code executed in it.

and ``agent.fork()`` (no re-execution). Prints the times and the ratio rewind / floor.
Run: ``python bench/rewind.py``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ipyagent import Agent, ToolCall  # noqa: E402
from ipyagent.kernel.sibling import SiblingKernel  # noqa: E402
from ipyagent.models.base import ToolCallDelta, Turn, TurnComplete  # noqa: E402

STEPS = 200
KEEP = 100


def code(i: int) -> str:
    return f"v{i} = {i}\nopen('f{i}.txt', 'w').write('{i}')"


class Calls:
    """Calls python once a step (step i runs ``code(i)``), then answers."""

    name = "bench"

    def __init__(self) -> None:
        self.i = 0

    async def aclose(self) -> None:
        return None

    async def stream(self, request):  # type: ignore[no-untyped-def]
        self.i += 1
        if self.i > STEPS:
            yield TurnComplete(Turn(text="done", finish_reason="stop"))
            return
        call = ToolCall(f"c{self.i}", "python", {"code": code(self.i)})
        yield ToolCallDelta(0, id=call.id, name=call.name, arguments="{}")
        yield TurnComplete(Turn(tool_calls=[call], finish_reason="tool_calls"))


def main() -> None:
    folder = tempfile.mkdtemp(prefix="ipyagent-bench-rewind-")
    with Agent(client=Calls(), approval="auto", cwd=folder, max_steps=STEPS + 5,
               file_tools=False, shell_tool="off") as agent:
        started = time.perf_counter()
        agent.run("make files")
        run = time.perf_counter() - started
        started = time.perf_counter()
        fork = agent.fork()
        forked = time.perf_counter() - started
        fork.close()
        started = time.perf_counter()
        report = agent.rewind(KEEP)
        rewind = time.perf_counter() - started
        assert report.rebuild is not None and report.rebuild.ran == KEEP, report
        assert len(report.restored) == STEPS - KEEP, report.restored[:3]
        agent.branches.close()
    floor_dir = tempfile.mkdtemp(prefix="ipyagent-bench-floor-")
    started = time.perf_counter()
    kernel = SiblingKernel(cwd=floor_dir)
    try:
        kernel.start()
        for i in range(1, KEEP + 1):
            assert kernel.execute(code(i)).status == "ok"
        floor = time.perf_counter() - started
    finally:
        kernel.shutdown()
    print(f"a {STEPS}-step run: {run:.2f} s")
    print(f"fork: {forked * 1000:.1f} ms (no re-execution)")
    print(f"rewind to step {KEEP}: {rewind:.2f} s  (undid {STEPS - KEEP} change sets)")
    print(f"floor (fresh sibling + {KEEP} kept calls): {floor:.2f} s")
    print(f"rewind / floor: {rewind / floor:.2f}x")


if __name__ == "__main__":
    main()
