"""What the staged-workspace tests share: run one tool call, read its change set."""

from __future__ import annotations

from ipyagent import Agent
from ipyagent._util import eventloop as _eventloop
from ipyagent.context.items import ToolCall, ToolResult

__all__ = ["call", "changes"]


def call(agent: Agent, code: str, tool: str = "python") -> ToolResult:
    """Run ``code`` through the agent's python (or shell) tool, as the model would."""
    args = {"code": code} if tool == "python" else {"command": code}
    return _eventloop.run_sync(agent.tools.execute(ToolCall("c1", tool, args)))


def changes(result: ToolResult) -> dict[str, dict]:
    """The call's change set, by path."""
    return {c["path"]: c for c in result.meta.get("changes", [])}
