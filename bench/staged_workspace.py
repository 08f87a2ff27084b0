"""The staged workspace's cost, side by side with what it replaces, in one run.

* Tool round trip: the python tool (``1+1``, through ``Agent.tools`` so each call's change
  scan is counted) on a sibling with the staged workspace and the sealed network (overlay in
  its own user, mount and network namespaces, then bubblewrap), beside the bubblewrap sibling
  as it was before it (the folder bound read-write, no staging helper, no scan).
  Target: within 1.3x.
* Listing a call's changes: a folder of 20,000 files in which one call changes 3;
  ``Stage.scan`` walks only the overlay's upper directory, beside the O(files) way (walking
  and stat-ing the whole folder, the floor of any snapshot-and-compare design).
  Target: <= 20 ms.

Usage: ``python bench/staged_workspace.py [--n 200] [--files 20000]``. Needs bubblewrap and
overlayfs in user namespaces (it says so and exits otherwise).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ipyagent import Agent
from ipyagent._util import eventloop as _eventloop
from ipyagent.context.items import ToolCall
from ipyagent.kernel import sandbox
from ipyagent.kernel.sandbox import SandboxPlan
from ipyagent.kernel.sibling import SiblingKernel
from ipyagent.kernel.staging import probe_overlay


class _DirectBwrap(SiblingKernel):
    """The sibling before the staged workspace: bubblewrap with the folder bound read-write."""

    def _stage_argv(self) -> list[str]:
        return []

    def _plan(self, private: Any = ()) -> SandboxPlan:
        return SandboxPlan(writable=self._writable(), network=False, paths=self.sandbox_paths,
                           private=private, readonly=False)


def _median_ms(fn: Any, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def roundtrip(n: int) -> None:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        agent = Agent(file_tools=False, cwd=a, sandbox="bwrap")
        staged_call = ToolCall("c", "python", {"code": "1+1"})
        agent.kernel.start()
        old = _DirectBwrap(cwd=b, sandbox="bwrap")
        old.start()
        for _ in range(10):  # warm both
            _eventloop.run_sync(agent.tools.execute(staged_call))
            old.execute("1+1")
        staged, direct = [], []
        for _ in range(5):  # interleaved, so both meet the same machine load
            staged.append(_median_ms(lambda: _eventloop.run_sync(agent.tools.execute(staged_call)), n // 5))
            direct.append(_median_ms(lambda: old.execute("1+1"), n // 5))
        s, d = statistics.median(staged), statistics.median(direct)
        print(f"tool round trip 1+1: staged + sealed {s:.2f} ms, direct bwrap {d:.2f} ms "
              f"-> {s / d:.2f}x (target <= 1.3x)")
        old.shutdown()
        agent.close()


def scan(files: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        for i in range(files):
            sub = Path(root, f"d{i // 500}")
            sub.mkdir(exist_ok=True)
            (sub / f"f{i}.txt").write_text("x")
        kernel = SiblingKernel(cwd=root, sandbox="bwrap")
        kernel.start()
        assert kernel.stage is not None
        kernel.execute("open('d1/f501.txt','w').write('y'); open('new.csv','w').write('a,b'); "
                       "import os; os.remove('d2/f1000.txt')")
        t = time.perf_counter()
        found = kernel.stage.scan()
        ours = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        seen = 0
        for dirpath, _dirs, names in os.walk(root):
            for name in names:
                os.lstat(os.path.join(dirpath, name))
                seen += 1
        walk = (time.perf_counter() - t) * 1000
        print(f"changes of one call ({len(found)} of {seen} files): Stage.scan {ours:.2f} ms, "
              f"walking the folder {walk:.2f} ms -> {ours / walk:.3f}x (target <= 20 ms)")
        kernel.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--files", type=int, default=20_000)
    args = parser.parse_args()
    flags, why = sandbox.probe()
    why = why or probe_overlay()
    if flags is None or why:
        sys.exit(f"no staged sandbox here: {why}")
    roundtrip(args.n)
    scan(args.files)


if __name__ == "__main__":
    main()
