"""%agent in an in-process IPython shell: parsing, config, subcommands, step-through,
the input transformers, and the notebook display and widget approver on a real loop."""

from __future__ import annotations

import asyncio
import io
import time
from contextlib import redirect_stderr, redirect_stdout
from typing import Any, Iterator

import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.error import UsageError

import ipyagent
from ipyagent import Agent, Tool, ToolCall, ToolResult
from ipyagent.frontends import magics
from ipyagent.frontends.notebook import NotebookDisplay
from ipyagent.frontends.transformer import protect_question_marks
from ipyagent.frontends.widgets import WidgetApprover
from ipyagent.models.base import TextDelta, Turn, TurnComplete
from ipyagent.transcripts.transcript import read
from tests.helpers.scripted_model import ScriptedModel, calls, text


@pytest.fixture
def loaded(ip: Any) -> Iterator[Any]:
    """The extension loaded with tool calls auto-approved (terminal mode: no kernel)."""
    out = io.StringIO()
    with redirect_stdout(out):
        ip.run_line_magic("load_ext", "ipyagent")
    assert "model demo" in out.getvalue()
    ip.run_line_magic("config", "Agent.approval = 'auto'")
    ipyagent.current().autosave = ""  # the magics' default writes .ipyagent/runs/ in the cwd
    yield ip
    ip.run_line_magic("unload_ext", "ipyagent")
    ip.config.pop("Agent", None)


def run(ip: Any, cell: str) -> tuple[str, str, Any]:
    """Run a cell; returns (stdout, stderr, result)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        result = ip.run_cell(cell)
    return out.getvalue(), err.getvalue(), result


# -- parsing -----------------------------------------------------------------------
def test_parse_options_task_and_subcommands(loaded: Any) -> None:
    m = magics._MAGICS
    cmd = m.parse("--max-steps 3 --approve auto what's 2**100? -- not an option", None)
    assert (cmd.action, cmd.task, cmd.options.max_steps, cmd.options.approve) == (
        "run", "what's 2**100? -- not an option", 3, "auto")
    cmd = m.parse("--model 'qwen 2' --step  compute  it", None)
    assert (cmd.action, cmd.task, cmd.options.model) == ("step", "compute  it", "qwen 2")
    assert m.parse("step", None).action == "step"
    assert m.parse("context", None).action == "context"
    assert m.parse("context -50:", None).args == ("-50", "")
    assert m.parse("context of the run", None).action == "run"  # a task
    assert m.parse("reset --kernel", None).kernel is True
    assert m.parse("save 'my runs/a.ipynb'", None).path == "my runs/a.ipynb"
    # Subcommand words inside a longer task are the task; `--` forces a task.
    assert m.parse("step through the data", None).action == "run"
    assert m.parse("load the sales data and plot it", None).action == "run"
    cmd = m.parse("load 'my run.ipynb' --rerun", None)
    assert (cmd.action, cmd.path, cmd.rerun) == ("load", "my run.ipynb", True)
    assert m.parse("-- reset", None).task == "reset"
    cmd = m.parse("--new", "Load sales.csv\nplot it\n")
    assert (cmd.action, cmd.task, cmd.options.new) == ("run", "Load sales.csv\nplot it", True)


@pytest.mark.parametrize("line, cell, message", [
    ("", None, "give a task"),
    ("   ", None, "give a task"),
    ("--bogus task", None, "unrecognized arguments: --bogus"),
    ("--approve maybe x", None, "invalid choice"),
    ("--max-steps many x", None, "invalid int value"),
    ("", "  \n", "give a task"),
    ("do this", "and that", "%%agent takes options on its line"),
    ("save", None, "needs a path"),
    ("save my run.ipynb", None, "quote a path with spaces"),
])
def test_bad_input_raises_one_line_usage_errors(loaded: Any, line: str, cell: str | None,
                                                message: str) -> None:
    with pytest.raises(UsageError, match=message) as info:
        magics._MAGICS.parse(line, cell)
    assert "\n" not in str(info.value)


def test_bad_input_in_cells_prints_one_line_never_a_traceback(loaded: Any, tmp_path: Any) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for cell, message in [
        ("%agent", "give a task"),
        ("%agent --unknown x", "unrecognized arguments"),
        ("%agent step", "nothing to continue"),
        (f"%agent save {blocker}/sub/run.ipynb", "%agent save"),
        ("%agent --max-steps -1 hi", "max_steps must be at least 1"),
    ]:
        out, err, result = run(loaded, cell)
        assert not result.success
        lines = [ln for ln in (out + err).splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("UsageError:"), (cell, out + err)
        assert message in lines[0]
    # max_steps was only tried for one run: the setting is unchanged.
    assert ipyagent.current().max_steps == 20


def test_config_rejects_bad_values_in_one_line(loaded: Any, caplog: Any) -> None:
    out, err, _ = run(loaded, "%config Agent.max_steps = -1")
    assert ipyagent.current().max_steps == 20
    messages = [r.getMessage() for r in caplog.records] + (out + err).splitlines()
    assert any("max_steps must be at least 1" in m for m in messages)
    assert "Traceback" not in out + err
    out, err, _ = run(loaded, "%config Agent.base_url = 'localhost:11434/v1'")
    messages = [r.getMessage() for r in caplog.records] + (out + err).splitlines()
    assert any("did you mean 'http://localhost:11434/v1'" in m for m in messages)
    assert ipyagent.current().base_url == "" and "Traceback" not in out + err


# -- configuration -------------------------------------------------------------------
def test_every_trait_is_settable_with_config(loaded: Any) -> None:
    agent = ipyagent.current()
    assert agent in loaded.configurables
    run(loaded, "%config Agent.max_steps = 7")
    run(loaded, "%config Agent.allow = ['python']")
    run(loaded, "%config Agent.approval_timeout = 2.5")
    assert (agent.max_steps, agent.allow, agent.approval_timeout) == (7, ["python"], 2.5)
    configurable = {n for n, t in Agent.class_traits(config=True).items()}
    assert {"model", "base_url", "approval", "allow", "approval_timeout"} <= configurable


def test_notebooks_ask_by_default_unless_configured(ip: Any) -> None:
    with redirect_stdout(io.StringIO()) as out:
        ip.run_line_magic("load_ext", "ipyagent")
    try:
        assert "approval ask" in out.getvalue()
        assert ipyagent.current().approval == "ask"
    finally:
        ip.run_line_magic("unload_ext", "ipyagent")
    ip.config.Agent.approval = "deny"  # as ipython_config.py would set it
    try:
        with redirect_stdout(io.StringIO()):
            ip.run_line_magic("load_ext", "ipyagent")
        assert ipyagent.current().approval == "deny"
    finally:
        ip.run_line_magic("unload_ext", "ipyagent")
        ip.config.pop("Agent", None)


def test_help_documents_the_options(loaded: Any) -> None:
    text = loaded.object_inspect_text("%agent")
    for word in ("--model", "--base-url", "--provider", "--api", "--approve", "--max-steps",
                 "--new", "--step",
                 "%agent step", "%agent context", "%agent reset", "%config Agent"):
        assert word in text


def test_a_trailing_comment_on_the_magic_line_is_a_comment(loaded: Any) -> None:
    m = magics._MAGICS
    assert m.parse("Use Python to compute 2**100        # the cell stays busy", None).task == (
        "Use Python to compute 2**100")
    assert m.parse("--step go  #", None).task == "go"
    assert m.parse("--approve auto  # no asking", "Plot it.  # in the task\n").task == (
        "Plot it.  # in the task")  # a %%agent cell's body is the task, word for word
    for task in ("look at issue #12", "count the a # b lines", "print('x  #y')"):
        assert m.parse(task, None).task == task  # a # that is no comment stays in the task
    assert m.parse("save run.ipynb  # for later", None).path == "run.ipynb"


def test_a_comment_after_an_agent_line_is_not_part_of_the_task(loaded: Any) -> None:
    out, err, result = run(loaded, "%agent Use Python to compute 2**10        # the cell stays busy\n"
                                   "%agent what is 2**3?  # a question, then a note\n")
    assert result.success, err
    tasks = [i.content for i in ipyagent.current().context if i.label == "user"]
    assert tasks[-2:] == ["Use Python to compute 2**10", "what is 2**3?"]
    assert "the cell stays busy" not in out and "1024" in out
    out, err, result = run(loaded, "%%agent --new  # a fresh start\nUse Python to compute 2**5  # kept\n")
    assert result.success, err
    assert [i.content for i in ipyagent.current().context if i.label == "user"][-1] == (
        "Use Python to compute 2**5  # kept")


def test_unload_removes_magics_transformers_and_the_kernel(ip: Any) -> None:
    with redirect_stdout(io.StringIO()):
        ip.run_line_magic("load_ext", "ipyagent")
    agent = ipyagent.current()
    kernel = agent.kernel
    assert "agent" in ip.magics_manager.magics["line"]
    assert protect_question_marks in ip.input_transformers_cleanup
    ip.run_line_magic("unload_ext", "ipyagent")
    assert "agent" not in ip.magics_manager.magics["line"]
    assert "agent" not in ip.magics_manager.magics["cell"]
    assert protect_question_marks not in ip.input_transformers_cleanup
    assert agent not in ip.configurables
    assert not kernel.is_alive()
    with pytest.raises(RuntimeError, match="load_ext"):
        ipyagent.current()


# -- running ---------------------------------------------------------------------------
def test_conversation_persists_across_cells_and_reset_starts_over(loaded: Any) -> None:
    out, _, _ = run(loaded, "%agent Use Python to compute 2**100")
    assert "1267650600228229401496703205376" in out and "done" in out
    first = len(ipyagent.current().context)
    out, _, _ = run(loaded, "%%agent\nUse Python to compute 3**3\n")
    assert "27" in out
    assert len(ipyagent.current().context) > first  # continued, not replaced
    out, _, result = run(loaded, "%agent context")
    assert result.result is ipyagent.current().context
    _, _, result = run(loaded, "%agent context 1:3")
    assert (result.result.start, result.result.stop) == (1, 3)
    assert result.result.context is ipyagent.current().context
    run(loaded, "%agent reset")
    assert len(ipyagent.current().context) == 0


def test_agent_audit_lists_how_each_call_was_decided(loaded: Any) -> None:
    run(loaded, "%agent Use Python to compute 2**100")
    out, _, result = run(loaded, "%agent audit")
    audit = result.result
    assert repr(audit).startswith("<Audit: ") and len(audit) >= 1
    assert all((row.by, row.detail, row.ran) == ("policy", "auto", True) for row in audit)
    assert "<table>" in audit._repr_html_()
    assert "%agent audit" in loaded.object_inspect_text("%agent")


def test_options_override_for_one_run_only(loaded: Any) -> None:
    agent = ipyagent.current()
    out, _, _ = run(loaded, "%agent --approve deny Use Python to compute 2**100")
    assert "denied" in out
    assert agent.approval == "auto"
    run(loaded, "%agent --new --max-steps 1 Use Python to compute 2**100")
    assert agent.max_steps == 20
    # The task, the step and its call's result, then ipyagent's word at the limit and the
    # answer to it (Agent.answer_at_limit).
    assert [i.label for i in agent.context][0] == "user" and len(agent.context) == 6
    assert "the step limit is reached (Agent.max_steps = 1)" in agent.context[4].content


def test_step_through_uses_the_edited_context(loaded: Any) -> None:
    agent = ipyagent.current()
    out, _, _ = run(loaded, "%agent --new --step Use Python to compute 2**100")
    assert "2**100" in out
    assert agent.pending()  # one iteration: the tool ran, the model has not answered
    n = len(agent.context)
    agent.context.add_user("Use Python to compute 7**3")  # edit between steps
    out, _, _ = run(loaded, "%agent step")
    assert "7**3" in out  # the next step planned from the edited context
    assert isinstance(agent.context[n + 2], ToolCall) and "7**3" in agent.context[n + 2].arguments["code"]
    while agent.pending():
        run(loaded, "%agent step")
    assert "343" in agent.context[-1].content
    _, err, result = run(loaded, "%agent step")
    assert not result.success and "nothing to continue" in err


def test_the_stepped_run_keeps_the_one_run_options_of_its_first_step(loaded: Any) -> None:
    """Seen by a new user: ``%agent --new --step --approve auto TASK``, then ``%agent step``
    asked for approval: the options of the step that began the run go on with it."""
    m = magics._MAGICS
    first = m.parse("--new --step --approve auto --max-steps 4 Use Python to compute 2**10", None)
    assert first.action == "step" and first.options.approve == "auto"
    later = m.parse("step", None)
    assert (later.action, later.options.approve, later.options.max_steps) == ("step", "auto", 4)
    assert m.parse("--approve ask step", None).options.approve == "ask"  # said again: that one
    assert m.parse("Use Python to compute 3**3", None).action == "run"  # a new run ends it
    assert m.parse("step", None).options.approve is None
    # Options after the word would have made it a task ("step --approve ask"): said instead.
    with pytest.raises(UsageError, match=r"options go before the subcommand, as in %agent "
                                         r"--approve ask step"):
        m.parse("step --approve ask", None)
    assert m.parse("step through the data, please", None).task == "step through the data, please"
    assert m.parse("changes --all", None).args == ("--all",)


def test_question_mark_tasks_are_tasks_not_help(loaded: Any) -> None:
    out, _, _ = run(loaded, "%agent what is 2**10?")
    assert "1024" in out


def test_save_and_load_subcommands(loaded: Any, tmp_path: Any) -> None:
    run(loaded, "%agent Use Python to compute 2**5")
    path = tmp_path / "run.ipynb"
    out, err, result = run(loaded, f"%agent save {path}")
    assert result.success and path.exists(), err
    n = len(ipyagent.current().context)
    run(loaded, "%agent reset")
    out, err, result = run(loaded, f"%agent load {path}")
    assert result.success, err
    assert len(ipyagent.current().context) == n
    assert "ran with" not in out  # same model, same endpoint: nothing to say
    run(loaded, "%config Agent.model = 'other-model'")
    out, err, result = run(loaded, f"%agent load {path}")
    assert ("ipyagent: this conversation ran with the demo model (built in, offline); it goes on "
            "with other-model") in out, out
    run(loaded, "%config Agent.model = 'demo'")
    out, err, result = run(loaded, f"%agent replay {path}")
    assert result.success, err
    assert type(result.result).__name__ == "ReplayReport"
    _, err, result = run(loaded, f"%agent load {tmp_path / 'missing.ipynb'}")
    assert not result.success and err.count("\n") == 1 and "UsageError: %agent load" in err


def test_replay_subcommand_runs_in_a_temp_dir_or_cwd_and_approves_as_told(loaded: Any,
                                                                         tmp_path: Any) -> None:
    run(loaded, "%agent Use Python to compute 2**5")
    path = tmp_path / "run.ipynb"
    run(loaded, f"%agent save {path}")
    cmd = magics._MAGICS.parse(f"replay {path} --cwd {tmp_path} --approve ask", None)
    assert (cmd.action, cmd.path, cmd.cwd, cmd.options.approve) == (
        "replay", str(path), str(tmp_path), "ask")
    _, err, result = run(loaded, f"%agent replay {path} --cwd {tmp_path}")
    assert result.success, err
    assert result.result.cwd == str(tmp_path) and result.result.reproduced, result.result
    # --approve ask at a terminal-less prompt: nothing runs, and the report says why in a line.
    _, err, result = run(loaded, f"%agent replay {path} --approve ask")
    report = result.result
    assert result.success and not report.reproduced and report.cwd != str(tmp_path)
    assert any(n.startswith("2 calls not approved, so not run: nobody could approve")
               for n in report.notes), report.notes
    with pytest.raises(UsageError, match="--approve takes auto, ask or deny"):
        magics._MAGICS.parse(f"replay {path} --approve sometimes", None)


# -- the notebook display on a real loop -------------------------------------------------
@pytest.fixture
def published(ip: Any) -> Iterator[list[dict[str, Any]]]:
    """What the display sends to the frontend (IPython's capturing publisher)."""
    saved = ip.display_pub
    ip.display_pub = CapturingDisplayPublisher()
    try:
        yield ip.display_pub.outputs
    finally:
        ip.display_pub = saved


class Streamer(ScriptedModel):
    """Streams one long answer as many tiny deltas, with a little pause now and then."""

    def __init__(self, n: int) -> None:
        super().__init__([])
        self.n = n

    async def stream(self, request: Any) -> Any:
        for i in range(self.n):
            if i % 500 == 0:
                await asyncio.sleep(0.01)
            yield TextDelta(f"w{i} ")
        yield TurnComplete(Turn(text="".join(f"w{i} " for i in range(self.n)),
                                finish_reason="stop"))


def test_streamed_markdown_is_throttled(published: list[dict[str, Any]]) -> None:
    agent = Agent(client=Streamer(10_000), python_tool=False)

    async def main() -> tuple[NotebookDisplay, float]:
        display = NotebookDisplay(interval=0.1)
        started = time.monotonic()
        await agent.arun("write a lot", on_event=display)
        await asyncio.sleep(0.05)  # let the last queued callbacks run
        return display, time.monotonic() - started

    display, elapsed = asyncio.run(main())
    texts = [o for o in published if "text/markdown" in o["data"]]
    # One render per interval at most (+ the first and the final one), not 10,000.
    assert len(texts) == display.renders
    assert display.renders <= elapsed / 0.1 + 3
    assert texts[-1]["data"]["text/markdown"] == "".join(f"w{i} " for i in range(10_000))
    assert all(o["update"] for o in texts[1:])  # one output, updated in place
    assert "done" in published[-1]["data"]["text/plain"]  # the footer


def test_tool_outputs_render_as_real_outputs(published: list[dict[str, Any]]) -> None:
    png = "iVBORw0KGgo="
    outputs = [{"output_type": "stream", "name": "stdout", "text": "hello\n"},
               {"output_type": "display_data", "data": {"image/png": png, "text/plain": "<Figure>"},
                "metadata": {"image/png": {"width": 10}}}]

    async def show(call: ToolCall) -> ToolResult:  # a raw handler, like the python tool's
        return ToolResult(call.id, "hello", name=call.name, outputs=outputs)

    agent = Agent(client=ScriptedModel([calls(("show", {"code": "plot()"})), text("ok")]),
                  python_tool=False)
    agent.tools.add(Tool("show", "Plot.", {"type": "object", "properties": {
        "code": {"type": "string"}}}, handler=show))

    async def main() -> None:
        await agent.arun("plot", on_event=NotebookDisplay())
        await asyncio.sleep(0.05)

    asyncio.run(main())
    kinds = [sorted(o["data"]) for o in published if not o["update"]]
    assert ["image/png", "text/plain"] in kinds
    image = next(o for o in published if "image/png" in o["data"])
    assert image["metadata"] == {"image/png": {"width": 10}}
    card = [o for o in published if "**show**" in o["data"].get("text/markdown", "")]
    assert "writing the call" in card[0]["data"]["text/markdown"]  # while it streams in
    assert "▶ running" in card[1]["data"]["text/markdown"] and card[1]["update"]
    assert "✓ done" in card[-1]["data"]["text/markdown"] and card[-1]["update"]
    # What it printed is inside the card's frame (issue 30); the figure follows the card.
    assert "<pre" in card[-1]["data"]["text/html"] and ">hello</pre>" in card[-1]["data"]["text/html"]
    assert "```\nhello\n```" in card[-1]["data"]["text/plain"]
    assert published.index(card[-1]) < published.index(image)


# -- the widget approver -------------------------------------------------------------------
def test_ask_never_runs_a_call_nobody_approved(published: list[dict[str, Any]]) -> None:
    ran: list[int] = []

    @ipyagent.tool
    def add(a: int, b: int) -> int:
        """Add."""
        ran.append(1)
        return a + b

    approver = WidgetApprover(timeout=0.3)
    agent = Agent(client=ScriptedModel([calls(("add", {"a": 1, "b": 2})), text("ok")]),
                  python_tool=False, tools=[add], approval="ask", approval_hook=approver)

    async def main() -> Any:
        approver.bind()
        result = await agent.arun("add", on_event=NotebookDisplay(asks=lambda c: True))
        await asyncio.sleep(0.05)
        return result

    result = asyncio.run(main())
    assert ran == []
    assert result.stop_reason == "denied"
    assert "nobody approved this call within 0.3 s" in result.error
    assert "Agent.allow = ['add']" in result.error  # says how to allow it
    panel = approver.panels[0]
    assert panel.approve.disabled and panel.deny.disabled
    assert "no answer" in panel.status.value
    assert "no answer" in repr(panel.widget)  # the saved notebook's plain-text fallback


def test_headless_denies_without_showing_buttons() -> None:
    approver = WidgetApprover()
    agent = Agent(client=ScriptedModel([calls(("python", {"code": "1"}))]),
                  python_tool=True, approval="ask", approval_hook=approver)

    async def main() -> Any:
        approver.bind(headless=True)
        return await agent.arun("x")

    result = asyncio.run(main())
    assert result.stop_reason == "denied" and "nobody could approve" in result.error
    assert approver.panels == []
    agent.close()


def test_an_unbound_widget_approver_says_what_to_do() -> None:
    agent = Agent(client=ScriptedModel([calls(("python", {"code": "1"}))]), python_tool=True,
                  approval="ask", approval_hook=WidgetApprover())
    with pytest.raises(ipyagent.errors.ApprovalError, match="approver.bind"):
        asyncio.run(agent.arun("x"))
    # and a blocking run inside a loop refuses instead of hanging
    async def blocking() -> None:
        agent.run("again")
    with pytest.raises(ipyagent.errors.ApprovalError, match="await agent.arun"):
        asyncio.run(blocking())
    agent.close()


def test_terminal_without_a_tty_denies_with_how_to_allow(loaded: Any) -> None:
    run(loaded, "%config Agent.approval = 'ask'")
    out, _, result = run(loaded, "%agent --new Use Python to compute 2**100")  # stdin: not a tty
    assert result.success
    assert "nobody could approve this call: stdin is not a terminal" in out
    assert "%config Agent.approval = 'auto'" in out
    assert "1267650600228229401496703205376" not in out


def test_provider_option_points_one_run_at_the_preset(loaded: Any) -> None:
    agent = ipyagent.current()
    out, err, _ = run(loaded, "%agent --provider lmstudio --model m hello")
    # Nothing listens on LM Studio's port here: the run ends in one error line naming it.
    assert "127.0.0.1:1234/v1/chat/completions" in out + err
    assert "Traceback" not in out + err
    assert agent.provider is None and agent.model == "demo"  # restored after the run
    _, err, result = run(loaded, "%agent --provider nope hello")
    assert not result.success and "provider" in err and "Traceback" not in err


def test_compactions_and_the_token_meter_show_in_the_cell(published: list[dict[str, Any]]) -> None:
    agent = Agent(model="demo", context_window=1200, request_max_tokens=100, file_tools=False)
    meter = lambda: (agent.context.tokens, agent.context_window)  # noqa: E731

    async def main() -> None:
        for task in ("compute 2**10", "compute 3**7", "compute 5**5"):
            await agent.arun(task, on_event=NotebookDisplay(meter=meter))
        await asyncio.sleep(0.05)

    asyncio.run(main())
    agent.close()
    html = "\n".join(str(o["data"].get("text/html", "")) for o in published)
    assert "context compacted before the request" in html and "compaction_preview" in html
    assert "title='estimated tokens of the next request: the context, the system prompt and the " \
        "tool specs (agent.context shows them item by item) / Agent.context_window'" in html
    assert "next request <span" in html and "/ 1,200" in html
    # A summary, or (compaction's first resort) older tool results cleared.
    assert any(type(i).__name__ == "Summary" or "cleared_output" in i.meta for i in agent.context)


def test_the_meter_counts_what_compaction_counts() -> None:
    from ipyagent.engine.compaction import plan, settings_for
    from ipyagent.frontends.cellrun import request_meter

    with Agent(model="demo", context_window=4096, python_tool=False) as agent:
        agent.context.add_user("hello")
        tokens, window = request_meter(agent)
        # The tool specs (file tools, load_skill) count: the request holds them.
        assert window == 4096 and tokens > agent.context.tokens + 100
        assert tokens == plan(agent.context, **settings_for(agent)).prompt_tokens


def test_ctrl_c_in_a_pumped_prompt_cancels_the_run_and_the_engine_survives() -> None:
    """Ctrl-C in the main thread's input() must reach the engine as a cancellation.

    Before: the waiting worker re-raised KeyboardInterrupt inside the engine's task,
    which escaped asyncio's loop and killed the engine thread (the terminal hung).
    """
    import concurrent.futures
    import threading

    from ipyagent import Agent
    from ipyagent._util import eventloop as _eventloop
    from ipyagent._util.mainthread import PumpDispatcher
    from ipyagent.engine.approval import TerminalApprover

    def ctrl_c(prompt: str) -> str:
        raise KeyboardInterrupt

    pump = PumpDispatcher()
    engine = _eventloop.engine_loop()
    agent = Agent(model="demo", approval="ask", python_tool=True)
    agent.approval_hook = TerminalApprover(
        input_fn=lambda prompt: pump.call_and_wait(ctrl_c, prompt), show_call=False)
    done = threading.Event()

    async def run() -> Any:
        try:
            return await agent.arun("Use Python to compute 2**100")
        finally:
            done.set()

    future = _eventloop.submit(run())
    with pytest.raises(KeyboardInterrupt):
        pump.pump(future)  # the prompt runs here, on the main thread, and raises
    assert done.wait(10)  # not cancelled by us: the engine must end the run by itself
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(timeout=10)
    assert [i.label for i in agent.context][-1] == "tool error"  # the open call was answered
    assert _eventloop.engine_loop() is engine  # the same engine thread, still alive
    assert _eventloop.run_sync(asyncio.sleep(0, "alive"), timeout=10) == "alive"
    agent.close()


def test_load_says_the_kernel_is_empty_and_rerun_rebuilds_it(loaded: Any, tmp_path: Any) -> None:
    run(loaded, "%agent --approve auto Use Python to compute 2**100")
    path = tmp_path / "run.ipynb"
    run(loaded, f"%agent save {path}")
    run(loaded, "%agent reset --kernel")
    out, err, result = run(loaded, f"%agent load {path}")
    assert result.success, err
    assert f"`%agent load {path} --rerun` re-runs its 2 python calls" in out
    assert ipyagent.current().kernel.execute("value").status == "error"
    out, err, result = run(loaded, f"%agent load {path} --rerun")
    assert result.success, err
    # The demo's first call printed the value, then failed on len(int): it fails again,
    # as recorded.
    assert ("re-ran 2 python calls in the sibling kernel; 1 call ended in an error as "
            "recorded (expected) — call 1: TypeError") in out
    assert "1267650600228229401496703205376" in ipyagent.current().kernel.execute("value").text


def test_load_rerun_in_terminal_ipython_shows_each_step_and_asks(loaded: Any, tmp_path: Any) -> None:
    """Under approval 'ask' the re-run is asked like a live run; with no terminal to answer
    on, it is denied in one line, after the code was shown; `--approve auto` re-runs it."""
    marker = tmp_path / "RERAN"
    code = f"open({str(marker)!r}, 'w').write('x')"
    model = ScriptedModel([calls(("python", {"code": code})), text("Done.")])
    with Agent(client=model, approval="auto", file_tools=False, cwd=str(tmp_path)) as agent:
        agent.run("mark it")
        path = agent.save(tmp_path / "marker.ipynb")
    marker.unlink()
    loaded.run_line_magic("config", "Agent.approval = 'ask'")
    try:
        out, err, result = run(loaded, f"%agent load {path} --rerun")
        assert result.success, err
        assert not marker.exists()
        assert code in out  # shown before it was asked about
        [line] = [x for x in out.splitlines() if "re-ran" in x]
        assert line.startswith("ipyagent: re-ran 0 python calls in the sibling kernel; stopped "
                               "at step 1 of 1 (python call ") and "stdin is not a terminal" in line
        assert len(ipyagent.current().context) == len(read(path).items)  # the conversation loaded
        out, err, result = run(loaded, f"%agent load {path} --rerun --approve auto --cwd {tmp_path}")
        assert result.success, err
        assert marker.exists() and "re-ran 1 python call in the sibling kernel" in out
        assert ipyagent.current().cwd == str(tmp_path)
        with pytest.raises(UsageError, match="--cwd and --approve go with --rerun"):
            magics._MAGICS.parse(f"load {path} --cwd {tmp_path}", None)
    finally:
        loaded.run_line_magic("config", "Agent.approval = 'auto'")


def test_the_magics_autosave_under_ipyagent_runs_and_say_so(ip: Any, tmp_path: Any,
                                                          monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    with redirect_stdout(io.StringIO()):
        ip.run_line_magic("load_ext", "ipyagent")
    try:
        agent = ipyagent.current()
        assert agent.autosave == ".ipyagent/runs/"
        out, err, result = run(ip, "%agent --approve auto Use Python to compute 2**10")
        assert result.success, err
        files = list((tmp_path / ".ipyagent" / "runs").glob("run-*.ipynb"))
        assert len(files) == 1 and len(read(files[0]).items) == len(agent.context)
        assert (out + err).count("autosaving this conversation to .ipyagent/runs/run-") == 1
    finally:
        ip.run_line_magic("unload_ext", "ipyagent")
        ip.config.pop("Agent", None)


def test_load_says_rerun_also_recreates_the_agents_files(loaded: Any, tmp_path: Any) -> None:
    model = ScriptedModel([calls(("write_file", {"path": "notes.txt", "content": "hi\n"})),
                           text("Written.")])
    with Agent(client=model, approval="auto", python_tool=False, cwd=str(tmp_path)) as agent:
        agent.run("write it")
        path = agent.save(tmp_path / "files.ipynb")
    out, err, result = run(loaded, f"%agent load {path}")
    assert result.success, err
    assert f"`%agent load {path} --rerun` re-creates the 1 file the agent wrote where missing" in out


def test_agent_help_reads_as_plain_text() -> None:
    from ipyagent.frontends.magics import AgentMagics

    doc = AgentMagics.agent.__doc__ or ""
    assert "%agent context" in doc and "%agent replay PATH.ipynb" in doc  # the commands table
    assert "::" not in doc and "``" not in doc  # no reStructuredText markup in the pager


def test_an_unknown_option_gets_a_did_you_mean() -> None:
    import argparse

    from ipyagent.frontends.magics import _did_you_mean

    known = argparse.ArgumentParser()
    for name in ("--approve", "--model", "--persona", "--max-steps"):
        known.add_argument(name)
    known.add_argument("--new", action="store_true")
    with pytest.raises(UsageError, match=r"unrecognized arguments: --aprove; did you mean --approve\?"):
        _did_you_mean(["--aprove", "auto"], known)
    with pytest.raises(UsageError, match="unrecognized arguments: --maxsteps; did you mean --max-steps"):
        _did_you_mean(["--maxsteps=3"], known)
    _did_you_mean(["--appr", "auto", "--max-steps", "-1", "--new"], known)  # for argparse


def test_the_banner_says_whether_the_shell_tool_is_on_and_why(ip: Any) -> None:
    from ipyagent.kernel.sandbox import probe

    out = io.StringIO()
    ip.run_line_magic("config", "Agent.shell_tool = 'auto'")
    try:
        with redirect_stdout(out):
            ip.run_line_magic("load_ext", "ipyagent")
        lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("ipyagent: shell tool: ")]
        assert len(lines) == 1
        assert lines[0].startswith("ipyagent: shell tool: on (") == (probe()[0] is not None)
        assert ("shell" in ipyagent.current().tools) == (probe()[0] is not None)
    finally:
        ip.run_line_magic("unload_ext", "ipyagent")
        ip.config.pop("Agent", None)
