"""A directory's mcp.json starts nothing until you agree to it: the trust list, the prompts.

The server is the real demo server (``tests/helpers/mcp_servers/demo_server.py``); the
model is scripted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ipyagent import Agent
from ipyagent.context.events import Notice
from ipyagent.engine.approval import Decision
from tests.helpers.mcp import SERVER, needs_sdk
from tests.helpers.scripted_model import ScriptedModel, text


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

    from ipyagent.engine.approval import TerminalApprover, TerminalOrDeny
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


def test_an_mcp_json_edited_mid_session_is_read_at_the_next_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What each step found is reused while the file's stamp holds; an edit that keeps the
    size and puts the old modification time back still shows (its change time moved), and so
    does one right after it, and a removal. (Why an edit within one clock tick of a read is
    not lost either: a file changed that recently is never reused, see test_stamps.)"""
    import hashlib
    import os
    import time

    from ipyagent._util import stamps as _stamps

    monkeypatch.setattr(_stamps, "SETTLE_NS", 200_000_000)  # 0.2 s instead of 2 s, to wait less
    path, marker = plant(tmp_path, extra_arg="AAAA")
    agent = Agent(client=ScriptedModel([text("ok")] * 5), python_tool=False, file_tools=False,
                  cwd=str(tmp_path), approval="ask", approval_hook=lambda call: False)
    seen = []

    def step() -> None:
        agent.run("hi")
        seen.append([r.sha256 for r in agent.mcp.untrusted])

    def rewrite(arg: str) -> str:
        old = os.stat(path)
        plant(tmp_path, extra_arg=arg)
        os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))  # the old modification time
        assert os.stat(path).st_size == old.st_size
        return hashlib.sha256(path.read_bytes()).hexdigest()

    with agent:
        first = hashlib.sha256(path.read_bytes()).hexdigest()
        time.sleep(0.25)
        step()
        step()  # settled: reused
        second = rewrite("BBBB")
        step()
        third = rewrite("CCCC")  # at once
        step()
        time.sleep(0.25)
        path.unlink()
        step()
    assert seen == [[first], [first], [second], [third], []]
    assert not marker.exists()
