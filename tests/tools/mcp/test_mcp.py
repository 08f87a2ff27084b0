"""MCP: configuration, result conversion, and real servers (stdio and streamable HTTP).

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
from ipyagent.approval import Decision
from ipyagent.events import Notice
from ipyagent.items import ToolResult
from ipyagent.tools.mcp.client import MISSING, MCPUnavailable, sdk_available
from ipyagent.tools.mcp.config import load_configs, parse_servers, tool_name
from ipyagent.tools.mcp.session import to_tool_result
from tests.helpers.scripted_model import ScriptedModel, calls, text

SERVER = str(Path(__file__).parents[2] / "helpers" / "mcp_servers" / "demo_server.py")
STDIO = {"demo": {"command": sys.executable, "args": [SERVER]}}
needs_sdk = pytest.mark.skipif(not sdk_available(), reason="the mcp extra is not installed")


# -- configuration (no SDK needed) -------------------------------------------------------
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


def test_no_servers_says_how_to_add_one(tmp_path: Path) -> None:
    with Agent(model="demo", python_tool=False, cwd=str(tmp_path)) as agent:
        agent.mcp.list()
        assert repr(agent.mcp).startswith("MCP servers: none configured — set Agent.mcp_servers")
        assert "none configured" in agent.mcp._repr_html_()


def test_tool_names_fit_every_api() -> None:
    assert tool_name("github", "create_issue") == "github__create_issue"
    assert tool_name("my server", "do.thing/now") == "my_server__do_thing_now"
    assert len(tool_name("s" * 40, "t" * 40)) == 64


def test_results_text_images_errors_and_structured_content() -> None:
    res = to_tool_result({"content": [{"type": "text", "text": "caption"},
                                      {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                                      {"type": "text", "text": "after"}]}, send_images=True)
    assert res.output == "caption\n[image/png image, 3 bytes]\nafter" and not res.error
    kinds = [o["output_type"] for o in res.outputs]
    assert kinds == ["stream", "display_data", "stream"]  # the notebook shows them in order
    assert res.outputs[1]["data"]["image/png"] == "AAAA"
    assert res.meta["images"] == [{"mime": "image/png", "data": "AAAA"}]
    assert "images" not in to_tool_result({"content": [
        {"type": "image", "data": "AAAA", "mimeType": "image/png"}]}).meta
    err = to_tool_result({"content": [{"type": "text", "text": "boom"}], "isError": True})
    assert err.error and err.output == "Error: boom" and err.outputs == []
    assert to_tool_result({"content": [], "structuredContent": {"n": 1}}).output == '{"n": 1}'
    assert to_tool_result({"content": [{"type": "resource", "resource": {
        "uri": "file:///a.txt", "text": "inside"}}]}).output == "inside"
    assert to_tool_result({"content": []}).output == "(no output)"


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
    from ipyagent import _eventloop
    from ipyagent.items import ToolCall

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
    from ipyagent import _eventloop
    from ipyagent.items import ToolCall

    return _eventloop.run_sync(agent.tools.execute(ToolCall("c1", name, args)))


# -- %agent mcp ------------------------------------------------------------------------
@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``%load_ext ipyagent`` in an in-process shell, in a directory holding an mcp.json."""
    import io
    from contextlib import redirect_stdout

    from IPython.testing.globalipapp import get_ipython

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": STDIO}))
    ip = get_ipython()
    with redirect_stdout(io.StringIO()):
        ip.run_line_magic("load_ext", "ipyagent")
    yield ip
    ip.run_line_magic("unload_ext", "ipyagent")
    ip.config.pop("Agent", None)


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


# -- a directory's mcp.json starts nothing until you agree to it ---------------------------
@pytest.fixture(autouse=True)
def trust_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A trust list of the test's own, so your real ~/.ipyagent/trusted-mcp.json is never read."""
    path = tmp_path / "config" / "trusted-mcp.json"
    monkeypatch.setenv("IPYAGENT_MCP_TRUST_FILE", str(path))  # mcp_trust.TRUST_ENV
    return path


def plant(folder: Path, extra_arg: str = "") -> tuple[Path, Path]:
    """An mcp.json whose server (the real demo server) first writes a marker file."""
    marker = folder / "started.marker"
    code = (f"import pathlib, runpy, sys; pathlib.Path({str(marker)!r}).write_text('started'); "
            f"sys.argv = [{SERVER!r}]; runpy.run_path({SERVER!r}, run_name='__main__')")
    args = ["-c", code] + ([extra_arg] if extra_arg else [])
    path = folder / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"demo": {"command": sys.executable, "args": args}}}))
    return path, marker


class Asker:
    """An approval hook with a ``confirm_mcp`` that answers as told and records each question."""

    def __init__(self, answer: bool | str) -> None:
        self.answer = answer
        self.asked: list = []

    async def decide(self, call):
        return Decision("approve", by="hook")

    async def confirm_mcp(self, request):
        self.asked.append(request)
        return self.answer


def _run(tmp_path: Path, hook=None, replies: int = 1) -> tuple[Agent, list[str]]:
    notices: list[str] = []
    agent = Agent(client=ScriptedModel([text("ok")] * replies), python_tool=False,
                  file_tools=False, cwd=str(tmp_path), approval="ask", approval_hook=hook)
    agent.run("hi", on_event=lambda e: isinstance(e, Notice) and notices.append(e.message))
    return agent, notices


@needs_sdk
def test_a_directory_mcp_json_never_starts_its_server_unasked(tmp_path: Path) -> None:
    path, marker = plant(tmp_path)
    agent, notices = _run(tmp_path, hook=lambda call: False)  # a hook that cannot be asked
    with agent:
        assert "demo__add" not in agent.tools
        listing = agent.mcp.list()  # listing does not start it either
        assert listing.connections == {} and "not trusted yet" in repr(listing)
        assert "not trusted yet" in listing._repr_html_()
    assert not marker.exists()  # the program never ran
    assert len(notices) == 1 and notices[0].startswith(f"MCP servers of {path} not started — "
                                                       "nothing here can ask you")
    assert "To allow this file as it is: %agent mcp trust (or: ipyagent mcp trust" in notices[0]
    assert "\n" not in notices[0] and sys.executable in notices[0]


@needs_sdk
def test_agreement_shows_the_command_is_remembered_by_hash_and_a_change_asks_again(
        tmp_path: Path, trust_list: Path) -> None:
    import hashlib

    path, marker = plant(tmp_path)
    yes = Asker(True)
    agent, notices = _run(tmp_path, yes, replies=2)
    with agent:
        assert marker.exists() and "demo__add" in agent.tools
        request = yes.asked[0]
        assert request.path == path and not request.changed
        import shlex

        assert request.lines() == ["demo: " + shlex.join(
            [sys.executable, *json.loads(path.read_text())["mcpServers"]["demo"]["args"]])]
        agent.run("again")
        assert len(yes.asked) == 1  # asked once per session
    stored = json.loads(trust_list.read_text())["files"][str(path.resolve())]
    assert stored["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    marker.unlink()
    again = Asker(False)
    agent, _ = _run(tmp_path, again)  # a new session: the same content is still trusted
    with agent:
        assert again.asked == [] and marker.exists()
    marker.unlink()
    plant(tmp_path, extra_arg="\x1b[2K")  # the file changed (and hides a control character)
    agent, notices = _run(tmp_path, again)
    with agent:
        assert len(again.asked) == 1 and again.asked[0].changed
        assert "\\x1b[2K" in again.asked[0].lines()[0] and "\x1b" not in again.asked[0].question()
        assert "demo__add" not in agent.tools
    assert not marker.exists()
    assert notices[0].startswith(f"MCP servers of {path} (changed since you trusted it) not "
                                 "started — the answer was no: demo: ")


def test_a_corrupt_trust_list_trusts_nothing_and_says_so(tmp_path: Path, trust_list: Path) -> None:
    from ipyagent.tools.mcp.trust import TrustRequest, is_trusted, trust

    path, _ = plant(tmp_path)
    trust_list.parent.mkdir(parents=True)
    trust_list.write_text('{"files": {"' + str(path.resolve()) + '": {"sha256": "x"')
    trusted, problem = is_trusted(path, "x")
    assert not trusted and problem.startswith(f"{trust_list} cannot be read (")
    assert "no MCP config file counts as trusted" in problem and "\n" not in problem
    note = trust(TrustRequest(path, "abc"))
    assert note == f"the unreadable trust list was moved to {trust_list}.corrupt"
    assert is_trusted(path, "abc") == (True, None)
    assert not list(trust_list.parent.glob("*.tmp"))  # the write was atomic, nothing left over


def test_terminal_prompt_shows_the_command_and_headless_says_how_to_allow(
        tmp_path: Path) -> None:
    import asyncio
    import io

    from ipyagent.approval import TerminalApprover, TerminalOrDeny
    from ipyagent.frontends.widgets import WidgetApprover
    from ipyagent.tools.mcp.config import load_configs
    from ipyagent.tools.mcp.trust import requests_for

    plant(tmp_path, extra_arg="\u202egnp.exe")
    request = requests_for(load_configs({}, tmp_path)[0])[0]
    out = io.StringIO()
    prompts: list[str] = []
    ask = TerminalApprover(input_fn=lambda p: prompts.append(p) or "y", output=out)
    assert asyncio.run(ask.confirm_mcp(request)) is True
    shown = out.getvalue()
    assert sys.executable in shown and "\\u202egnp.exe" in shown and "\u202e" not in shown
    assert prompts == ["Start them? [y]es / [N]o: "]
    assert asyncio.run(TerminalApprover(input_fn=lambda p: "", output=out).confirm_mcp(
        request)) == "you answered no"  # Enter (or end of input) is no
    # pytest's stdin is not a terminal: as for `ipyagent run` in a script or CI
    assert asyncio.run(TerminalOrDeny(input, lambda c: "").confirm_mcp(request)) == (
        "nobody could agree: stdin is not a terminal")
    widget = WidgetApprover()

    async def headless() -> bool | str:
        widget.bind(headless=True)
        return await widget.confirm_mcp(request)

    why = asyncio.run(headless())
    assert "without a frontend" in why
    assert "%agent mcp trust" in request.refused(why)


def test_notebook_buttons_ask_and_a_click_agrees(tmp_path: Path) -> None:
    import asyncio

    from ipyagent.frontends.widgets import WidgetApprover
    from ipyagent.tools.mcp.config import load_configs
    from ipyagent.tools.mcp.trust import requests_for

    plant(tmp_path)
    request = requests_for(load_configs({}, tmp_path)[0])[0]
    shown: list = []
    approver = WidgetApprover()

    async def main() -> bool | str:
        approver.bind(show=shown.append)
        asking = asyncio.ensure_future(approver.confirm_mcp(request))
        while not shown:
            await asyncio.sleep(0.01)
        html = shown[0].children[0].value
        assert sys.executable in html and str(tmp_path / "mcp.json") in html
        shown[0].children[1].children[0].click()  # Trust and start
        shown[0].children[1].children[0].click()  # a second click changes nothing
        return await asking

    assert asyncio.run(main()) is True
    assert "trusted" in shown[0].children[2].value


def test_the_cli_trusts_a_file_and_prints_what_it_agreed_to(
        tmp_path: Path, trust_list: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ipyagent.frontends.cli import main
    from ipyagent.tools.mcp.trust import is_trusted

    path, _ = plant(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["mcp", "trust"]) == 0
    out = capsys.readouterr().out
    assert f"trusted {path}" in out and f"demo: {sys.executable} -c" in out
    import hashlib

    assert is_trusted(path, hashlib.sha256(path.read_bytes()).hexdigest())[0]
    assert main(["mcp", "untrust", str(path)]) == 0
    assert "no longer trusted" in capsys.readouterr().out
    assert main(["mcp", "trust", str(tmp_path / "other.json")]) == 2


@needs_sdk
def test_magic_untrust_stops_the_servers(shell) -> None:
    shell.run_line_magic("agent", "mcp trust")
    listing = shell.run_line_magic("agent", "mcp untrust")
    assert listing.connections == {} and "not trusted yet" in repr(listing)
