"""ipyagent.engine.step: the phases of one step, the StepRun they share, the Executor seam."""

from __future__ import annotations

import logging
from typing import Any

from ipyagent import Agent, Toolbox, ToolCall, ToolResult, tool
from ipyagent.context.events import Notice, StepFinished, StepStarted, ToolCallFinished
from ipyagent.engine.step import CircuitBreaker, StepRun, emit
from ipyagent.tools.base import Executor
from tests.helpers.scripted_model import ScriptedModel, calls, text


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Counting(Toolbox):
    """A Toolbox that counts the calls the loop hands it."""

    def __init__(self, tools: list) -> None:
        super().__init__(tools)
        self.seen: list[str] = []

    async def execute(self, call: ToolCall) -> ToolResult:
        self.seen.append(call.name)
        return await super().execute(call)


def test_the_toolbox_is_the_executor_every_approved_call_goes_through() -> None:
    assert isinstance(Toolbox(), Executor)
    model = ScriptedModel([calls(("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})), text("10")])
    agent = Agent(client=model, python_tool=False, file_tools=False,
                  approval="ask", approval_hook=lambda call: call.arguments["a"] == 1)
    agent.tools = Counting([add])
    result = agent.run("add")
    assert agent.tools.seen == ["add"]  # the denied call never reached the executor
    outputs = [r.output for r in result.steps[0].results]
    assert outputs[0] == "3" and "denied" in outputs[1]
    # The step's audit record is put around the one execute call.
    assert result.steps[0].results[0].meta["decision"]["by"] == "hook"
    agent.close()


def test_a_step_run_binds_its_listeners_and_finishes_once() -> None:
    agent = Agent(client=ScriptedModel([]), python_tool=False, file_tools=False)
    heard: list = []
    run = StepRun(agent, 7, [heard.append])
    run.emit(StepStarted(7))
    step = run.finish("error", "it broke")
    assert step.index == 7 and step.stop_reason == "error" and step.error == "it broke"
    assert step.duration >= 0
    assert [type(e) for e in heard] == [StepStarted, Notice, StepFinished]
    assert heard[1].level == "error" and heard[1].message == "it broke"
    agent.close()


def test_a_failing_listener_is_logged_and_the_others_still_hear(caplog) -> None:
    heard: list = []

    def broken(event: object) -> None:
        raise RuntimeError("display gone")

    with caplog.at_level(logging.WARNING):
        emit([broken, heard.append], Notice("hi"), logging.getLogger("test"))
    assert len(heard) == 1 and "display gone" in caplog.text


def test_the_circuit_breaker_counts_one_tool_in_a_row() -> None:
    breaker = CircuitBreaker()
    a, b = ToolCall("1", "a", {}), ToolCall("2", "b", {})
    bad, good = ToolResult("x", "no", error=True), ToolResult("x", "ok")
    assert not breaker.count(a, bad, 2)
    assert not breaker.count(b, bad, 2)  # another tool starts a new row
    assert breaker.count(b, bad, 2)
    breaker.reset()
    assert not breaker.count(b, bad, 2)
    assert not breaker.count(b, good, 2) and breaker.row == ("", 0)
    assert not breaker.count(b, bad, 0)  # 0: no breaker
    denied = ToolResult("x", "no", error=True, meta={"denied": True})
    assert not breaker.count(a, denied, 1)


def test_a_run_ends_each_step_with_one_step_finished_after_its_results() -> None:
    model = ScriptedModel([calls(("add", {"a": 1, "b": 1})), text("2")])
    agent = Agent(client=model, tools=[add], python_tool=False, file_tools=False)
    events: list = []
    agent.run("go", on_event=events.append)
    kinds = [type(e).__name__ for e in events
             if isinstance(e, (StepStarted, StepFinished, ToolCallFinished))]
    assert kinds == ["StepStarted", "ToolCallFinished", "StepFinished", "StepStarted", "StepFinished"]
    agent.close()


def test_tool_arguments_nested_past_the_bound_are_an_error_and_the_run_still_saves(tmp_path, monkeypatch):
    """A model whose call's arguments nest 500 deep (the wire's JSON allows ~1,000): the call
    is not run (an error value the model can act on) and every later autosave still works
    (the writers recurse per level: each save of the run failed from then on)."""
    from ipyagent.transcripts.transcript import read
    from tests.helpers.scripted_apis import any_api_reply
    from tests.helpers.scripted_server import ScriptedServer

    monkeypatch.setenv("IPYAGENT_TEST_KEY", "k")
    @tool
    def python(code: str) -> str:
        """Never called: the arguments are refused."""
        raise AssertionError(code)

    deep: Any = "leaf"
    for _ in range(500):
        deep = [deep]
    script = [any_api_reply("", [("python", {"code": deep})]), any_api_reply("all saved")]
    auto = tmp_path / "a.ipynb"
    with ScriptedServer(script) as srv:
        agent = Agent(model="m", base_url=srv.base_url, api_key_env="IPYAGENT_TEST_KEY",
                      approval="auto", file_tools=False, python_tool=False, autosave=str(auto),
                      tools=[python], verify_answers=False)  # "all saved" ignores the error
        agent.run("go")
        agent.close()
    results = [i for i in agent.context if isinstance(i, ToolResult)]
    assert len(results) == 1 and results[0].error and "nested over 100 levels" in results[0].output
    saved = read(auto)
    assert saved.items == list(agent.context) and "all saved" in saved.items[-1].text()


def test_a_finish_reason_nested_deep_does_not_stop_the_run_s_saves(tmp_path, monkeypatch):
    """A broken or hostile endpoint's finish_reason that is not a string (here a list nested
    500 deep) raised TypeError out of the run (unhashable, in the final-reply check), and in
    the turn's meta would have made every later save fail."""
    import json

    from ipyagent.transcripts.transcript import read
    from tests.helpers.scripted_server import RawSSE, ScriptedServer

    monkeypatch.setenv("IPYAGENT_TEST_KEY", "k")
    deep: Any = "stop"
    for _ in range(500):
        deep = [deep]
    chunk = {"id": "x", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "the answer"},
                          "finish_reason": deep}]}
    auto = tmp_path / "a.ipynb"
    with ScriptedServer([RawSSE(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n")]) as srv:
        agent = Agent(model="m", base_url=srv.base_url, api_key_env="IPYAGENT_TEST_KEY",
                      approval="auto", file_tools=False, python_tool=False, autosave=str(auto))
        agent.run("go")
        agent.close()
    assert "the answer" in read(auto).items[-1].text()


def test_a_python_call_the_server_parsed_gets_the_repairs_a_written_one_gets(tmp_path) -> None:
    r"""A small model behind native tool calling writes a regex's ``\b`` with one backslash
    (JSON reads a backspace) and a date's ``06`` too: the call is mended as a written one is,
    said in a notice, and what runs (and goes back to the server) is the mended code."""
    from ipyagent.models.written_calls import REPAIRED
    from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls

    raw = ('{"code": "import re, datetime\\nprint(len(re.findall(r\'\\b\\w+\\b\', \'a bc d\')))\\n'
           'print(datetime.date(2026, 12, 06).day)"}')
    heard: list = []
    with ScriptedServer([reply_tool_calls([("python", raw)]), reply_text("3 words; day 6")]) as srv, \
            Agent(model="m", base_url=srv.base_url, approval="auto", file_tools=False,
                  tool_mode="native", cwd=str(tmp_path)) as agent:
        agent.run("Count the words with a regex.", on_event=heard.append)
        call, result = [i for i in agent.context if isinstance(i, (ToolCall, ToolResult))]
        sent_back = next(m for m in srv.requests[-1].body["messages"]
                         if m.get("tool_calls"))["tool_calls"][0]["function"]["arguments"]
    assert call.arguments["code"] == ("import re, datetime\nprint(len(re.findall(r'\\b\\w+\\b', "
                                      "'a bc d')))\nprint(datetime.date(2026, 12, 6).day)")
    assert call.meta[REPAIRED] == ("\\b and \\f that JSON read as control characters written "
                                   "back; leading zeros taken off whole numbers (06 is 6)")
    assert result.output.split() == ["3", "6"] and not result.error
    assert "\\\\b\\\\w+\\\\b" in sent_back and "12, 6)" in sent_back
    assert any(isinstance(e, Notice) and "leading zeros" in e.message for e in heard)
