"""The ``remember`` tool: the model keeps a fact for later sessions, approved like any call.

Offered only while ``Agent.memory`` is on and ``Agent.memory_tool`` is True. It writes to
the project's store only (never the user's global one), as source "the agent"; a
secret's value is refused as a value the model can read, like any tool error.
"""

from __future__ import annotations

from typing import Callable

from ..context.items import ToolCall, ToolResult
from ..tools.base import Tool
from .notes import Memory, MemoryRefused

__all__ = ["remember_tool", "TOOL_NAME"]

TOOL_NAME = "remember"


def remember_tool(memory: Callable[[], Memory]) -> Tool:
    """The tool, storing into ``memory()`` (read at each call: settings may change)."""

    async def handler(call: ToolCall) -> ToolResult:
        text = call.arguments.get("text") if isinstance(call.arguments, dict) else None
        if not isinstance(text, str) or not text.strip():
            return ToolResult(call.id, "remember needs a non-empty `text` string", error=True,
                              name=TOOL_NAME)
        try:
            added = memory().remember(text, source="model")
        except MemoryRefused as exc:
            return ToolResult(call.id, str(exc), error=True, name=TOOL_NAME)
        what = "updated note" if added.merged else "remembered as note"
        return ToolResult(call.id, f"{what} #{added.entry.label}", name=TOOL_NAME,
                          meta={"memory": {"id": added.entry.label, "merged": added.merged}})

    return Tool(
        name=TOOL_NAME,
        description=("Keep one short fact for later sessions with this user (where data "
                     "lives, a preference, what failed and why). It is shown to the user "
                     "and may need their approval. Never store secrets."),
        parameters={"type": "object", "properties": {"text": {
            "type": "string", "description": "the fact, in one or two sentences"}},
            "required": ["text"]},
        handler=handler)
