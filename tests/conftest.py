"""Shared fixtures: real parts wherever the test claims to check them."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

# The browser tests' fixture (``browser``) and page helpers, written once for every
# tests/test_e2e_*.py (a plugin, so no test module imports another for a fixture).
pytest_plugins = ["tests.helpers.browser"]


def _raise_open_file_limit() -> None:
    """The suite starts hundreds of kernels in one process; each jupyter_client context holds
    descriptors until it is collected, and zmq reports EMFILE in a heartbeat thread when the
    soft limit (1024 on many machines) is reached. Use the hard limit the machine allows."""
    try:
        import resource
    except ImportError:  # not on Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 65536
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, 65536), hard))


_raise_open_file_limit()


def _kernel_processes() -> list:
    """ipykernel processes started (directly or not) by this test process."""
    psutil = pytest.importorskip("psutil")
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "ipykernel" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


@pytest.fixture(scope="session", autouse=True)
def no_orphan_kernels():
    """After the whole suite, no kernel started by the tests may still be alive."""
    yield
    gc.collect()  # agents and kernels that were dropped shut their kernels down when collected
    deadline = time.monotonic() + 10
    while _kernel_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = [f"{p.pid}: {' '.join(p.cmdline())[:120]}" for p in _kernel_processes()]
    assert not alive, f"orphaned kernel processes: {alive}"


def _untracked() -> set[str] | None:
    """The checkout's files git does not know and does not ignore (None outside a checkout)."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                             cwd=root, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return {line[3:] for line in out.stdout.splitlines() if line.startswith("??")}


@pytest.fixture(scope="session", autouse=True)
def no_files_left_in_the_checkout():
    """A test writes in its own temporary folder, never in the checkout (a kernel whose
    working folder is the checkout once left ``fr_test.csv`` there, and it was committed)."""
    before = _untracked()
    yield
    after = _untracked()
    if before is not None and after is not None:
        assert not after - before, f"tests left files in the checkout: {sorted(after - before)}"


@pytest.fixture
def scripted_server():
    """A real OpenAI-compatible server on 127.0.0.1 replaying scripted replies."""
    from tests.helpers.scripted_server import ScriptedServer

    with ScriptedServer() as srv:
        yield srv


@pytest.fixture(scope="session")
def ip() -> Iterator[Any]:
    """The one in-process IPython shell of the test process (``globalipapp``'s)."""
    # globalipapp.get_ipython is replaced by the real one once the shell is up.
    from IPython.testing import globalipapp

    globalipapp.start_ipython()
    yield globalipapp.get_ipython()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A real model on one thread of a busy 2-core machine needs minutes, not the default 120 s
    (the limit stays: a hung server still fails the test)."""
    for item in items:
        if item.get_closest_marker("real_server") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(600))


_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave with pytest's own status, skipping the interpreter's teardown: since the issue-33
    merges, libzmq sometimes aborts in it after every result is reported ("Bad file
    descriptor (src/signaler.cpp:157)", rc 134; cause not found yet, see the stop note), which
    would turn a passing run red. Results and the status are pytest's, unchanged."""
    if _EXIT_STATUS and os.environ.get("IPYAGENT_TEST_CLEAN_EXIT", "1") == "1":
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])
