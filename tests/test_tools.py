"""@tool schemas and Toolbox execution: every failure of a call is a value."""

from __future__ import annotations

from typing import Literal, Optional

import pytest

from ipyagent import ToolCall, ToolResult, Toolbox, tool


@tool
def search(query: str, limit: int = 5, mode: Literal["fast", "full"] = "fast",
           tags: Optional[list[str]] = None) -> list[str]:
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
