"""@tool schemas and Toolbox execution: every failure of a call is a value."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Literal

import pytest

import ipyagent
from ipyagent import Toolbox, ToolCall, ToolResult, tool


@tool
def search(query: str, limit: int = 5, mode: Literal["fast", "full"] = "fast",
           tags: list[str] | None = None) -> list[str]:
    """Search the docs.

    Args:
        query: what to look for
        limit: how many hits
    """
    return [query] * limit


async def fetch(url: str) -> str:
    """Fetch a URL (async)."""
    return f"got {url}"


def test_schema_from_signature_and_docstring():
    assert search.name == "search"
    assert search.description == "Search the docs."
    params = search.parameters
    assert params["required"] == ["query"]
    assert params["properties"]["query"] == {"type": "string", "description": "what to look for"}
    assert params["properties"]["limit"] == {"type": "integer", "description": "how many hits",
                                             "default": 5}
    assert params["properties"]["mode"]["enum"] == ["fast", "full"]
    assert params["properties"]["tags"]["type"] == "array"
    assert search("x", limit=1) == ["x"]  # still callable


def test_numpy_and_sphinx_docstrings():
    def f(a: float, b: bool):
        """Do it.

        Parameters
        ----------
        a : the a
        """

    def g(a: int):
        """Do g.

        :param a: the a
        """

    assert tool(f).parameters["properties"]["a"]["description"] == "the a"
    assert tool(g).parameters["properties"]["a"]["description"] == "the a"


async def run(box: Toolbox, name: str, args: dict, raw: str | None = None) -> ToolResult:
    return await box.execute(ToolCall("c", name, args, raw_arguments=raw))


async def test_execute_paths():
    box = Toolbox([search, fetch])
    ok = await run(box, "search", {"query": "q", "limit": 2})
    assert not ok.error and ok.output == '["q", "q"]'
    assert (await run(box, "fetch", {"url": "u"})).output == "got u"
    unknown = await run(box, "nope", {})
    assert unknown.error and "available tools: search, fetch" in unknown.output
    bad = await run(box, "search", {"query": 1})
    assert bad.error and "'query' should be string" in bad.output
    extra = await run(box, "search", {"query": "q", "x": 1})
    assert extra.error and "unknown argument(s): x" in extra.output
    enum = await run(box, "search", {"query": "q", "mode": "slow"})
    assert enum.error and "must be one of" in enum.output
    raw = await run(box, "search", {}, raw="{oops")
    assert raw.error and "not valid JSON" in raw.output


async def test_raising_tool_is_a_value():
    @tool
    def boom(x: int) -> None:
        """Explode."""
        raise ZeroDivisionError("no")

    res = await run(Toolbox([boom]), "boom", {"x": 1})
    assert res.error and res.output == "Error: boom raised ZeroDivisionError: no"


def test_toolbox_add_remove():
    box = Toolbox()
    box.add(fetch)  # a plain function gets wrapped
    assert "fetch" in box and box.names == ["fetch"]
    assert box.specs()[0]["name"] == "fetch"
    box.remove("fetch")
    assert len(box) == 0
    with pytest.raises(KeyError):
        box.remove("fetch")


async def test_a_tool_past_its_timeout_is_an_error_value_and_its_thread_is_left() -> None:
    release = threading.Event()

    @tool
    def stuck(timeout: int = 0) -> str:  # an argument called 'timeout' is the tool's own
        """Wait for a release that comes late."""
        release.wait()
        return "finished"

    @tool
    async def stuck_async() -> str:
        """Wait, asynchronously, forever."""
        await asyncio.Event().wait()
        return "finished"

    stuck.timeout = stuck_async.timeout = lambda: 0.2
    box = Toolbox([stuck, stuck_async])
    try:
        for name, args in [("stuck", {"timeout": 5}), ("stuck_async", {})]:
            res = await asyncio.wait_for(run(box, name, args), 60)  # not forever, if broken
            assert res.error and res.output.startswith(
                f"Error: {name} did not finish within 0.2 s (Agent.tool_timeout) and was abandoned")
    finally:
        release.set()
    stuck.timeout = lambda: 0  # 0: no limit
    assert (await run(box, "stuck", {})).output == "finished"


def test_a_blocked_tool_thread_never_keeps_python_from_exiting() -> None:
    # asyncio's default executor joins its threads at exit: one tool stuck there (a read
    # of a FIFO, a dead network share) used to hang the interpreter's exit forever.
    script = textwrap.dedent("""
        import threading, time
        from ipyagent import Toolbox, ToolCall
        from ipyagent._util import eventloop as _eventloop

        def stuck() -> str:
            \"\"\"Never returns.\"\"\"
            threading.Event().wait()
            return ""

        _eventloop.submit(Toolbox([stuck]).execute(ToolCall("c", "stuck", {})))
        time.sleep(0.5)
        print("exiting", flush=True)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(ipyagent.__file__).parents[1])}  # this copy
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=False, timeout=60, env=env)
    assert done.returncode == 0 and done.stdout == "exiting\n", done.stderr
