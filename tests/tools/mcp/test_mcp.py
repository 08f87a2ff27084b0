"""MCP with real servers (stdio and streamable HTTP), and ``%agent mcp``.

The servers are real: ``tests/helpers/mcp_servers/demo_server.py`` is written with the SDK's own
server API and runs as a subprocess; the model is scripted (the seam), so each test says
exactly which MCP tool the "model" calls.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ipyagent import Agent
from ipyagent.context.events import Notice
from ipyagent.context.items import ToolResult
from ipyagent.engine.approval import Decision
from tests.helpers.mcp import SERVER, STDIO, needs_sdk
from tests.helpers.scripted_model import ScriptedModel, calls, text


def test_no_servers_says_how_to_add_one(tmp_path: Path) -> None:
    with Agent(model="demo", python_tool=False, cwd=str(tmp_path)) as agent:
        agent.mcp.list()
        assert repr(agent.mcp).startswith("MCP servers: none configured — set Agent.mcp_servers")
        assert "none configured" in agent.mcp._repr_html_()


# -- real servers ------------------------------------------------------------------------
def agent_with(replies: list, tmp_path: Path, servers: dict | None = None, **kw) -> tuple[Agent, ScriptedModel]:
    model = ScriptedModel(replies)
    kw.setdefault("approval", "auto")
    agent = Agent(client=model, python_tool=False, file_tools=False, cwd=str(tmp_path),
                  mcp_servers=STDIO if servers is None else servers, **kw)
    return agent, model


def results(agent: Agent) -> list[ToolResult]:
    return [i for i in agent.context if isinstance(i, ToolResult)]


@needs_sdk
def test_stdio_tools_are_offered_approved_called_and_used(tmp_path: Path) -> None:
    asked: list[str] = []

    def approve(call):  # the user approves each MCP call
        asked.append(f"{call.name}{json.dumps(call.arguments)}")
        return True

    agent, model = agent_with([calls(("demo__add", {"a": 2, "b": 40})),
                               lambda req: text(f"The answer is {req.items[-1].output}.")],
                              tmp_path, approval="ask", approval_hook=approve)
    with agent:
        result = agent.run("add 2 and 40")
    offered = {t["name"]: t for t in model.requests[0].tools}
    assert {"demo__add", "demo__shout", "demo__pixel", "demo__crash"} <= set(offered)
    assert offered["demo__add"]["parameters"]["required"] == ["a", "b"]
    assert "MCP server 'demo'" in offered["demo__add"]["description"]
    assert asked == ['demo__add{"a": 2, "b": 40}']
    assert results(agent)[0].output == "42" and results(agent)[0].meta["mcp"] == "demo"
    assert result.text == "The answer is 42."


@needs_sdk
def test_denied_call_never_reaches_the_server_and_failures_are_values(tmp_path: Path) -> None:
    decisions = iter([Decision("deny", reason="not that one", by="user"), True, True])
    agent, _ = agent_with([calls(("demo__shout", {"text": "no"})),
                           calls(("demo__fail", {"reason": "testing"})),
                           calls(("demo__add", {"a": "two", "b": 1})),
                           text("done")],
                          tmp_path, approval="ask", approval_hook=lambda call: next(decisions))
    with agent:
        result = agent.run("go")
    denied, failed, bad = results(agent)
    assert denied.meta["denied"] and "not that one" in denied.output
    assert failed.error and "failed on purpose: testing" in failed.output
    assert bad.error and "argument 'a' should be integer" in bad.output  # checked before sending
    assert result.stop_reason == "done"


@needs_sdk
def test_images_reach_the_notebook_and_vision_models(tmp_path: Path) -> None:
    agent, _ = agent_with([calls(("demo__pixel", {})), text("a pixel")], tmp_path,
                          send_images=True)
    with agent:
        agent.run("show me")
    res = results(agent)[0]
    assert res.output.startswith("one red pixel\n[image/png image, ")
    assert [o["output_type"] for o in res.outputs] == ["stream", "display_data"]
    assert res.meta["images"][0]["data"].startswith("iVBOR")


@needs_sdk
def test_server_env_is_the_configured_one_without_the_users_keys(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    servers = {"demo": {**STDIO["demo"], "env": {"GREETING": "hello"}}}
    agent, _ = agent_with([calls(("demo__secret_env", {"name": "GREETING"}),
                                 ("demo__secret_env", {"name": "OPENAI_API_KEY"})), text("ok")],
                          tmp_path, servers)
    with agent:
        agent.run("env")
    assert [r.output for r in results(agent)] == ["hello", "<unset>"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def _wait_dead(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


@needs_sdk
def test_a_dead_server_is_reported_then_restarted_on_next_use(tmp_path: Path) -> None:
    notices: list[str] = []
    agent, _ = agent_with([calls(("demo__pid", {})),
                           calls(("demo__crash", {}), ("demo__pid", {})),  # same turn: restarts
                           calls(("demo__crash", {})),
                           calls(("demo__pid", {})),  # next step: restarted before the request
                           text("done")], tmp_path)
    with agent:
        result = agent.run("go", on_event=lambda e: isinstance(e, Notice) and notices.append(e.message))
        first, died, second, died_again, third = results(agent)
        assert died.error and "died during this call" in died.output
        assert "crashing on purpose" in died.output  # the server's stderr says why
        assert "restarted on the next call" in died.output
        assert not second.error and second.output != first.output  # a new process answered
        assert died_again.error and not third.error and third.output != second.output
        assert any("restarted (it had died" in n for n in notices)
        assert result.stop_reason == "done"
        assert agent.mcp.connections["demo"].starts == 3
        pid = int(third.output)
        assert _alive(pid)
    assert _wait_dead(pid), "agent.close() must stop the MCP server"


@needs_sdk
def test_a_server_that_exits_while_idle_is_restarted_before_its_next_call(tmp_path: Path) -> None:
    notices: list[str] = []
    agent, _ = agent_with([calls(("demo__pid", {})), text("one"),
                           calls(("demo__add", {"a": 1, "b": 2})), text("two")], tmp_path)
    with agent:
        agent.run("go")
        pid = int(results(agent)[0].output)
        os.kill(pid, 9)  # killed from outside (OOM killer, a crash) between runs
        assert _wait_dead(pid)
        deadline = time.monotonic() + 5
        while agent.mcp.connections["demo"].state != "dead" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert agent.mcp.connections["demo"].state == "dead"
        result = agent.run("again", on_event=lambda e: isinstance(e, Notice)
                           and notices.append(e.message))
        added = results(agent)[1]
        assert not added.error and added.output == "3"  # the call did not pay for the death
        assert result.stop_reason == "done"
        assert any("restarted (it had died: it exited" in n for n in notices), notices


@needs_sdk
def test_a_server_that_cannot_start_is_a_notice_not_a_failure(tmp_path: Path) -> None:
    notices: list[str] = []
    servers = {**STDIO, "broken": {"command": sys.executable, "args": ["-c", "import sys; "
               "print('no such module: fancy_mcp', file=sys.stderr); sys.exit(2)"]}}
    agent, model = agent_with([calls(("demo__shout", {"text": "hi"})), text("ok")], tmp_path,
                              servers)
    with agent:
        result = agent.run("go", on_event=lambda e: isinstance(e, Notice) and notices.append(e.message))
        assert result.stop_reason == "done" and results(agent)[0].output == "HI!"
        assert len(notices) == 1 and "'broken' failed to start" in notices[0]
        assert "no such module: fancy_mcp" in notices[0]  # its stderr says why
        assert not any(t["name"].startswith("broken__") for t in model.requests[0].tools)
        listing = agent.mcp.list()
        assert listing.connections["broken"].state == "failed"
        assert "failed" in repr(listing) and "demo__shout" in listing._repr_html_()


@needs_sdk
def test_listing_starts_lazily_and_config_changes_stop_servers(tmp_path: Path) -> None:
    agent, _ = agent_with([], tmp_path)
    with agent:
        assert agent.mcp.connections == {} and "demo__add" not in agent.tools  # nothing started
        listing = agent.mcp.list()
        conn = listing.connections["demo"]
        assert conn.state == "running" and "demo__add" in agent.tools
        html = listing._repr_html_()
        assert "<table" in html and "demo__add" in html and "Add two integers." in html
        pid = int(_call(agent, "demo__pid"))
        agent.mcp_servers = {}
        agent.mcp.list()
        assert "demo__add" not in agent.tools and _wait_dead(pid)


def _call(agent: Agent, name: str) -> str:
    from ipyagent._util import eventloop as _eventloop
    from ipyagent.context.items import ToolCall

    return _eventloop.run_sync(agent.tools.execute(ToolCall("c1", name, {}))).output


@pytest.fixture
def http_server():
    """The demo server over streamable HTTP on 127.0.0.1 (a free port), killed afterwards."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, SERVER, "http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the HTTP MCP server did not start: {proc.stderr.read().decode()[-500:]}")
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp", proc
    proc.kill()
    proc.wait(10)


@needs_sdk
def test_streamable_http_server(tmp_path: Path, http_server) -> None:
    url, proc = http_server
    agent, model = agent_with([calls(("web__shout", {"text": "over http"})),
                               lambda req: text(req.items[-1].output)],
                              tmp_path, {"web": {"url": url, "headers": {"X-Test": "1"}}},
                              tool_timeout=5)  # mcp 1.x notices a vanished HTTP server only then
    with agent:
        assert agent.mcp.list().connections["web"].config.transport == "http"
        result = agent.run("shout")
        assert result.text == "OVER HTTP!"
        assert "web__add" in [t["name"] for t in model.requests[0].tools]
        proc.kill()  # the server goes away: the next call says so, as a value
        proc.wait(10)
        outcome = _call_with(agent, "web__add", {"a": 1, "b": 2})
        assert outcome.error and "MCP server 'web' died during this call" in outcome.output


def _call_with(agent: Agent, name: str, args: dict) -> ToolResult:
    from ipyagent._util import eventloop as _eventloop
    from ipyagent.context.items import ToolCall

    return _eventloop.run_sync(agent.tools.execute(ToolCall("c1", name, args)))


# -- %agent mcp ------------------------------------------------------------------------
@needs_sdk
def test_magic_lists_the_servers_of_mcp_json_once_trusted(shell) -> None:
    import ipyagent

    listing = shell.run_line_magic("agent", "mcp")
    assert listing.connections == {} and "not trusted yet" in repr(listing)  # nothing started
    listing = shell.run_line_magic("agent", "mcp trust")
    assert listing.connections["demo"].state == "running"
    assert listing.connections["demo"].config.source.endswith("mcp.json")
    assert "demo__add" in listing._repr_html_() and "demo__add" in ipyagent.current().tools
    pid = int(_call(ipyagent.current(), "demo__pid"))
    shell.run_line_magic("unload_ext", "ipyagent")  # shuts the servers down with the agent
    assert _wait_dead(pid)


def test_magic_without_the_sdk_is_one_line(shell, monkeypatch: pytest.MonkeyPatch) -> None:
    from IPython.core.error import UsageError

    from ipyagent.tools.mcp.config import load_configs
    from ipyagent.tools.mcp.trust import requests_for, trust

    trust(requests_for(load_configs({}, Path.cwd())[0])[0])  # trusted: the SDK is what is missing
    monkeypatch.setitem(sys.modules, "mcp", None)
    with pytest.raises(UsageError, match=r"^%agent mcp: MCP servers need the mcp package: "
                                         r"pip install 'ipyagent\[mcp\]' \(configured: demo\)$"):
        shell.run_line_magic("agent", "mcp")
