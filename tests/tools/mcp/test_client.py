"""The MCP client without its SDK: one clear message, and the agent runs without it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ipyagent import Agent
from ipyagent.context.events import Notice
from ipyagent.tools.mcp.client import MISSING, MCPUnavailable
from tests.helpers.mcp import STDIO
from tests.helpers.scripted_model import ScriptedModel, text


def test_missing_sdk_is_one_clear_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # `import mcp` now fails, as when not installed
    notices: list[str] = []
    model = ScriptedModel([text("fine without it")])
    with Agent(client=model, python_tool=False, file_tools=False, cwd=str(tmp_path),
               mcp_servers=STDIO) as agent:
        result = agent.run("hi", on_event=lambda e: isinstance(e, Notice) and notices.append(e.message))
        assert result.stop_reason == "done"
        assert notices == [f"{MISSING} (configured: demo)"]
        with pytest.raises(MCPUnavailable, match=r"pip install 'ipyagent\[mcp\]'"):
            agent.mcp.list()
