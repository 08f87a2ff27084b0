"""MCP configuration: parsing mcpServers entries, finding the config file, tool names."""

from __future__ import annotations

import json
from pathlib import Path

from ipyagent.tools.mcp.config import load_configs, parse_servers, tool_name


def test_parse_accepts_the_mcpServers_value_or_a_dict_holding_it() -> None:
    inner = {"fs": {"command": "npx", "args": ["-y", "server-fs", "."], "env": {"N": 1}},
             "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer x"}}}
    for raw in (inner, {"mcpServers": inner}, {"servers": inner, "inputs": []}):  # VS Code's
        configs, problems = parse_servers(raw, "test")
        assert problems == []
        assert configs["fs"].transport == "stdio" and configs["fs"].args == ["-y", "server-fs", "."]
        assert configs["fs"].env == {"N": "1"}  # env values become strings
        assert configs["web"].transport == "http" and configs["web"].describe() == inner["web"]["url"]
        assert "Bearer" not in configs["web"].describe()


def test_parse_reports_each_bad_entry_and_keeps_the_good_ones() -> None:
    configs, problems = parse_servers({
        "ok": {"command": "x"},
        "both": {"command": "x", "url": "http://h/mcp"},
        "neither": {"args": []},
        "old": {"type": "sse", "url": "http://h/sse"},
        "args": {"command": "x", "args": "not a list"},
        "off": {"command": "x", "disabled": True},
        "str": "python server.py",
    }, "cfg")
    assert list(configs) == ["ok"]
    joined = "\n".join(problems)
    assert len(problems) == 5
    assert "'both'" in joined and "either `command`" in joined
    assert "SSE transport is not supported" in joined
    assert all(p.startswith("cfg: MCP server") for p in problems)


def test_config_file_beside_the_notebook_and_the_trait_wins(tmp_path: Path) -> None:
    (tmp_path / ".ipyagent").mkdir()
    (tmp_path / ".ipyagent" / "mcp.json").write_text(json.dumps({"mcpServers": {
        "a": {"command": "from-file"}, "b": {"command": "from-file"}}}))
    (tmp_path / "mcp.json").write_text("{not json")  # .ipyagent/mcp.json comes first
    configs, problems = load_configs({"b": {"command": "from-trait"}}, tmp_path)
    assert problems == [f"{tmp_path / 'mcp.json'} is not read: {tmp_path / '.ipyagent' / 'mcp.json'} "
                        "is (the first found wins; merge them)"]
    assert configs["a"].command == "from-file" and configs["a"].source.endswith("mcp.json")
    assert configs["b"].command == "from-trait" and configs["b"].source == "Agent.mcp_servers"
    (tmp_path / ".ipyagent" / "mcp.json").unlink()
    configs, problems = load_configs({}, tmp_path)
    assert configs == {} and "not readable as JSON" in problems[0]


def test_tool_names_fit_every_api() -> None:
    assert tool_name("github", "create_issue") == "github__create_issue"
    assert tool_name("my server", "do.thing/now") == "my_server__do_thing_now"
    assert len(tool_name("s" * 40, "t" * 40)) == 64
