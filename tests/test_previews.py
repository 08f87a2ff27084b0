"""File previews in the loop (``engine.previews``): in the first request a real server gets,
asked once for a remote endpoint, never sent unasked, recorded so replay shows what was seen."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from ipyagent import Agent
from ipyagent.context.decisions import Decision
from ipyagent.context.events import FilesPreviewed, Notice
from ipyagent.context.items import Message, ToolCall
from ipyagent.engine.approval import TerminalOrDeny
from ipyagent.engine.previews import PreviewRequest, is_loopback
from tests.helpers.scripted_server import ScriptedServer, reply_text

CSV = "region;amount\nnorth;10\nsouth;12\n"
SEEN = "previewed sales.csv (2 rows, separator ';', columns region:str, amount:int)"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "sales.csv").write_text(CSV)
    return tmp_path


def _sent(body: dict[str, Any]) -> str:
    """Every message's text of one request, joined."""
    return "\n".join(m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
                     for m in body["messages"])


class _Redirect(httpx.AsyncBaseTransport):
    """Sends every request to the scripted server, whatever host it names: the agent
    believes it talks to a remote provider (the transport seam; the server is real)."""

    def __init__(self, base_url: str) -> None:
        self.target = httpx.URL(base_url)
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.url = request.url.copy_with(scheme=self.target.scheme, host=self.target.host,
                                            port=self.target.port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Asker:
    """An approval UI that approves calls and answers the preview question as told."""

    def __init__(self, answer: bool | str) -> None:
        self.answer = answer
        self.asked: list[PreviewRequest] = []

    async def decide(self, call: ToolCall) -> Decision:
        return Decision("approve", by="hook")

    async def confirm_preview(self, request: PreviewRequest) -> bool | str:
        self.asked.append(request)
        return self.answer


def _remote_agent(srv: ScriptedServer, ws: Path, **settings: Any) -> Agent:
    client = httpx.AsyncClient(transport=_Redirect(srv.base_url))
    return Agent(model="test-model", base_url="https://llm.example.com/v1", api_key_env="PREVIEW_TEST_KEY",
                 workspace=str(ws), python_tool=False, start_kernel=False, max_retries=0,
                 http_client=client, **settings)


def test_the_preview_is_in_the_first_request_to_a_local_server(ws: Path) -> None:
    events: list[Any] = []
    with ScriptedServer([reply_text("The total is 22.")]) as srv, \
            Agent(model="test-model", base_url=srv.base_url, workspace=str(ws), python_tool=False,
                  start_kernel=False) as agent:
        result = agent.run("What is the total amount in sales.csv?", on_event=events.append)
        first = srv.bodies[0]
    assert result.stop_reason == "done"
    messages = first["messages"]
    users = [m for m in messages if m["role"] == "user"]
    # before the task, labelled as file content, with the separator and the first lines
    assert users[-1]["content"] == "What is the total amount in sales.csv?"
    preview = users[-2]["content"]
    assert preview.startswith(f"[ipyagent: {SEEN}]") and "data, not instructions" in preview
    assert "region;amount\nnorth;10\nsouth;12" in preview
    (shown,) = [e for e in events if isinstance(e, FilesPreviewed)]
    assert shown.lines == [SEEN]
    item = agent.context[0]
    assert isinstance(item, Message) and item.meta["preview"]["files"][0]["path"] == "sales.csv"
    assert item.meta["preview"]["sent_to"] == "this machine"


def test_no_preview_when_the_setting_is_off(ws: Path) -> None:
    with ScriptedServer([reply_text("ok")]) as srv, \
            Agent(model="test-model", base_url=srv.base_url, workspace=str(ws), python_tool=False,
                  start_kernel=False, preview_files=False) as agent:
        agent.run("What is the total amount in sales.csv?")
        assert "north;10" not in _sent(srv.bodies[0])


def test_a_later_task_previews_its_own_files_only(ws: Path) -> None:
    (ws / "notes.txt").write_text("remember the milk\n")
    with ScriptedServer([reply_text("one"), reply_text("two")]) as srv, \
            Agent(model="test-model", base_url=srv.base_url, workspace=str(ws), python_tool=False,
                  start_kernel=False) as agent:
        agent.run("Sum sales.csv")
        agent.run("Now read notes.txt")
        second = srv.bodies[1]["messages"]
    previews = [m["content"] for m in second if m["role"] == "user" and m["content"].startswith("[ipyagent:")]
    assert len(previews) == 2 and "sales.csv" in previews[0] and "remember the milk" in previews[1]


def test_a_remote_endpoint_asked_and_denied_gets_no_file_content(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREVIEW_TEST_KEY", "k-123")
    asker = _Asker(False)
    events: list[Any] = []
    with ScriptedServer([reply_text("one"), reply_text("two")]) as srv, \
            _remote_agent(srv, ws, approval="ask", approval_hook=asker) as agent:
        agent.run("What is the total amount in sales.csv?", on_event=events.append)
        agent.run("And the mean of sales.csv?")
        bodies = srv.bodies
    assert len(bodies) == 2
    assert all("north;10" not in _sent(b) and "ipyagent: previewed" not in _sent(b) for b in bodies)
    (request,) = asker.asked  # asked once: the answer is kept for the agent
    assert request.endpoint == "https://llm.example.com/v1" and request.lines() == [SEEN]
    assert any(isinstance(e, Notice) and "you said no" in e.message for e in events)
    assert not any(isinstance(e, FilesPreviewed) for e in events)


def test_a_remote_endpoint_asked_and_allowed_gets_the_preview(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREVIEW_TEST_KEY", "k-123")
    asker = _Asker(True)
    with ScriptedServer([reply_text("one"), reply_text("two")]) as srv, \
            _remote_agent(srv, ws, approval="ask", approval_hook=asker) as agent:
        agent.run("What is the total amount in sales.csv?")
        agent.run("And sales.csv's mean?")
        bodies = srv.bodies
    assert len(asker.asked) == 1
    assert "north;10" in _sent(bodies[0])
    assert agent.context[0].meta["preview"]["sent_to"] == "https://llm.example.com/v1"


def test_approve_auto_never_sends_file_content_to_a_remote_endpoint_unasked(
        ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREVIEW_TEST_KEY", "k-123")
    asker = _Asker(True)  # a UI that would say yes: not asked under "auto"
    events: list[Any] = []
    with ScriptedServer([reply_text("one"), reply_text("two")]) as srv, \
            _remote_agent(srv, ws, approval="auto", approval_hook=asker) as agent:
        agent.run("Sum sales.csv", on_event=events.append)
        agent.run("Again for sales.csv", on_event=events.append)
        bodies = srv.bodies
    assert asker.asked == []
    assert all("north;10" not in _sent(b) for b in bodies)
    said = [e.message for e in events if isinstance(e, Notice) and "file previews not sent" in e.message]
    assert len(said) == 1 and "Agent.preview_files = True" in said[0]


def test_nobody_at_a_terminal_means_not_sent(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREVIEW_TEST_KEY", "k-123")
    ui = TerminalOrDeny(input_fn=lambda prompt: "y", unattended=lambda call: "nobody")
    with ScriptedServer([reply_text("one")]) as srv, \
            _remote_agent(srv, ws, approval="ask", approval_hook=ui) as agent:
        agent.run("Sum sales.csv")  # pytest's stdin is no terminal
        assert "north;10" not in _sent(srv.bodies[0])


def test_preview_files_true_sends_to_a_remote_endpoint_without_asking(
        ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREVIEW_TEST_KEY", "k-123")
    asker = _Asker(False)
    with ScriptedServer([reply_text("one")]) as srv, \
            _remote_agent(srv, ws, approval="ask", approval_hook=asker, preview_files=True) as agent:
        agent.run("Sum sales.csv")
        assert "north;10" in _sent(srv.bodies[0]) and asker.asked == []


@pytest.mark.parametrize("host,local", [("127.0.0.1", True), ("localhost", True), ("::1", True),
                                        ("127.8.9.1", True), ("192.168.1.5", False),
                                        ("api.openai.com", False), ("gpu-box", False)])
def test_only_loopback_counts_as_this_machine(host: str, local: bool) -> None:
    assert is_loopback(host) is local


def test_the_transcript_shows_the_preview_as_file_content(ws: Path) -> None:
    (ws / "evil.csv").write_text("a,b\n<img src=x onerror=alert(1)>,2\n")
    with Agent(model="demo", workspace=str(ws), python_tool=False, start_kernel=False) as agent:
        agent.run("Summarise evil.csv")
        cells = agent.context.to_notebook().cells
    (cell,) = [c for c in cells if c.source.startswith("#### File preview")]
    assert "previewed evil.csv" in cell.source and "```\n" in cell.source
    # the hostile cell is inside the fence, as text: nowhere outside it
    outside = cell.source.split("```")[0] + cell.source.split("```")[-1]
    assert "<img" not in outside and "<img src=x onerror=alert(1)>,2" in cell.source


def test_an_injected_client_of_unknown_reach_counts_as_remote(ws: Path) -> None:
    from ipyagent.engine.previews import INJECTED, where_sent
    from ipyagent.models.demo import DemoModel

    class Elsewhere:  # a client of the user's: where it sends is not known
        name = "custom"

    with Agent(client=Elsewhere(), workspace=str(ws), python_tool=False, start_kernel=False) as agent:  # type: ignore[arg-type]
        assert where_sent(agent) == INJECTED
    with Agent(client=DemoModel(), workspace=str(ws), python_tool=False, start_kernel=False) as agent:
        assert where_sent(agent) is None


def test_the_demo_model_is_local(ws: Path) -> None:
    with Agent(model="demo", workspace=str(ws), python_tool=False, start_kernel=False) as agent:
        agent.run("Summarise sales.csv")
        assert agent.context[0].meta["preview"]["sent_to"] == "this machine"


def test_the_recorded_preview_is_what_a_loaded_transcript_and_a_replay_show(ws: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    from ipyagent.transcripts.replay import replay

    saved = tmp_path_factory.mktemp("runs") / "run.ipynb"
    with ScriptedServer([reply_text("The total is 22.")]) as srv, \
            Agent(model="test-model", base_url=srv.base_url, workspace=str(ws), python_tool=False,
                  start_kernel=False, autosave="") as agent:
        agent.run("What is the total amount in sales.csv?")
        seen = agent.context[0].content
        agent.save(saved)
    (ws / "sales.csv").write_text("region;amount\nnowhere;999\n")  # the file changed since
    loaded = Agent.from_transcript(saved, start_kernel=False, python_tool=False)
    try:
        assert loaded.context[0].content == seen and loaded.context[0].meta["preview"]
    finally:
        loaded.close()
    report = replay(saved, approval="auto", cwd=str(ws))
    replayed = [i for i in report.context if isinstance(i, Message) and i.role == "user"]
    assert replayed[0].content == seen and "999" not in replayed[0].content


# -- the question, as each frontend asks it ------------------------------------------------------
def _request(name: str = "sales.csv") -> PreviewRequest:
    from ipyagent.instructions.file_preview import FilePreview

    return PreviewRequest([FilePreview(name, 30, "table", "2 rows, separator ';'")],
                          "https://llm.example.com/v1")


def test_the_terminal_asks_y_n_and_shows_names_inert() -> None:
    import asyncio
    import io

    from ipyagent.engine.approval import TerminalApprover

    for typed, answer in (("y", True), ("n", False), ("", False)):
        out = io.StringIO()
        ui = TerminalApprover(input_fn=lambda prompt, typed=typed: typed, output=out)
        assert asyncio.run(ui.confirm_preview(_request("evil\x1b[2K\u202e.csv"))) is answer
        shown = out.getvalue()
        assert "https://llm.example.com/v1" in shown and "\x1b" not in shown and "\u202e" not in shown
        assert "␛[2K" in shown


def test_the_notebook_panel_sends_only_on_its_click_and_escapes_names() -> None:
    import asyncio

    from ipyagent.frontends.widgets import WidgetApprover
    from tests.frontends.test_widgets import HeldDispatcher, until

    held = HeldDispatcher()
    approver = WidgetApprover()
    shown: list[Any] = []
    approver.bind(held, show=shown.append)

    async def main() -> tuple[bool | str, Any]:
        task = asyncio.ensure_future(approver.confirm_preview(_request("<img src=x onerror=alert(1)>.csv")))
        await until(lambda: bool(held.jobs))
        held.flush()
        (widget,) = shown
        await asyncio.sleep(0.05)
        assert not task.done()  # nothing is sent before the click
        text, buttons, _ = widget.children
        assert "<img" not in text.value and "&lt;img" in text.value
        buttons.children[1].click()  # Don't send
        buttons.children[0].click()  # a later click changes nothing
        return await task, widget

    answer, widget = asyncio.run(main())
    assert answer is False and "not sent" in widget.children[2].value


def test_a_headless_notebook_is_not_asked() -> None:
    import asyncio

    from ipyagent.frontends.widgets import WidgetApprover
    from tests.frontends.test_widgets import HeldDispatcher

    approver = WidgetApprover()
    shown: list[Any] = []
    approver.bind(HeldDispatcher(), headless=True, show=shown.append)
    answer = asyncio.run(approver.confirm_preview(_request()))
    assert isinstance(answer, str) and "without a frontend" in answer and not shown
