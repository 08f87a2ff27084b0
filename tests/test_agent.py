"""The loop: stop reasons, breaker, parallel calls, approval, context validity."""

from __future__ import annotations

import asyncio

import pytest
from traitlets import TraitError

from ipyagent import Agent, Decision, Message, Tool, ToolCall, ToolResult, tool
from ipyagent.context.events import RunFinished, StepFinished
from ipyagent.errors import ApprovalError, ConfigError, ModelConnectionError
from tests.helpers.scripted_model import ScriptedModel, calls, text
from tests.helpers.tools import add


@tool
def flaky(x: int) -> int:
    """Always fails."""
    raise RuntimeError(f"flaky broke on {x}")


def make(replies, **kw) -> tuple[Agent, ScriptedModel]:
    model = ScriptedModel(replies)
    kw.setdefault("python_tool", False)
    kw.setdefault("file_tools", False)
    kw.setdefault("skills_enabled", False)
    agent = Agent(client=model, tools=[add, flaky], **kw)
    return agent, model


def assert_valid(agent: Agent) -> None:
    """Every tool call is answered by exactly one result, after it."""
    open_calls: dict[str, ToolCall] = {}
    for item in agent.context:
        if isinstance(item, ToolCall):
            open_calls[item.id] = item
        elif isinstance(item, ToolResult):
            assert item.call_id in open_calls, f"result without call: {item}"
            del open_calls[item.call_id]
    assert not open_calls, f"unanswered calls: {list(open_calls)}"


def test_multi_step_run_with_tool_calls():
    agent, model = make([calls(("add", {"a": 2, "b": 3}), text="adding"),
                         text("The sum is 5.", prompt_tokens=50, completion_tokens=5)])
    result = agent.run("what is 2+3?")
    assert result.stop_reason == "done"
    assert result.text == "The sum is 5."
    assert len(result.steps) == 2
    kinds = [type(i).__name__ for i in agent.context]
    assert kinds == ["Message", "Message", "ToolCall", "ToolResult", "Message"]
    assert agent.context[3].output == "5"
    # The second request carried the call and its result.
    second = model.requests[1].items
    assert isinstance(second[-1], ToolResult) and second[-1].output == "5"
    assert [s["name"] for s in model.requests[0].tools] == ["add", "flaky"]
    assert_valid(agent)


def test_parallel_calls_answered_in_order():
    agent, _ = make([calls(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2}),
                           ("nope", {})), text("ok")])
    result = agent.run("go")
    results = [i for i in agent.context if isinstance(i, ToolResult)]
    assert [r.output for r in results[:2]] == ["2", "4"]
    assert results[2].error and "unknown tool 'nope'" in results[2].output
    assert result.stop_reason == "done"
    assert_valid(agent)


def test_bad_arguments_become_error_results():
    bad_json = ToolCall("c1", "add", {}, raw_arguments='{"a": 1,')
    from ipyagent.models.base import Turn

    agent, _ = make([Turn(tool_calls=[bad_json]),
                     calls(("add", {"a": "x", "b": 2})),
                     calls(("add", {"a": 1})),
                     text("gave up")], circuit_breaker=0)
    result = agent.run("go")
    outs = [i.output for i in agent.context if isinstance(i, ToolResult)]
    assert "not valid JSON" in outs[0]
    assert "should be integer" in outs[1]
    assert "missing required argument(s): b" in outs[2]
    assert result.stop_reason == "done"


def test_max_steps():
    agent, model = make([calls(("add", {"a": 1, "b": 1}))] * 10, max_steps=3,
                        answer_at_limit=False)
    result = agent.run("loop forever")
    assert result.stop_reason == "max_steps"
    assert len(model.requests) == 3
    assert_valid(agent)


def test_at_max_steps_the_model_is_asked_for_its_answer_once():
    """Measured at 1.5B (hottest-day, order-total): the call at the last step printed the
    answer, and the run ended with none. One request more, for words; its calls never run."""
    from ipyagent.context.evidence import LIMIT_KEY, run_items

    ran: list[int] = []

    @tool
    def count(n: int) -> int:
        """Counts."""
        ran.append(n)
        return n

    model = ScriptedModel([calls(("count", {"n": 1})), calls(("count", {"n": 2})),
                           text("The count reached 2.")])
    heard: list = []
    with Agent(client=model, tools=[count], python_tool=False, file_tools=False,
               skills_enabled=False, max_steps=2) as agent:
        result = agent.run("count", on_event=heard.append)
        assert (result.stop_reason, result.text, len(result.steps)) == (
            "max_steps", "The count reached 2.", 3)
        asked = model.requests[2].items[-1]
        assert isinstance(asked, Message) and asked.meta[LIMIT_KEY] is True
        assert "(Agent.max_steps = 2), so no more tool calls can run" in asked.content
        assert asked.content.endswith("The task was: count")  # its form, far above by now
        assert run_items(list(agent.context))[0] == "count"  # ipyagent's words, not a task
        assert "the model answered from what its calls returned" in result.steps[-1].error
        assert any("asked the model for its answer" in getattr(e, "message", "") for e in heard)
    # A call in that reply is answered "not run", and the run still ends max_steps.
    model = ScriptedModel([calls(("count", {"n": 1})), calls(("count", {"n": 3}))])
    with Agent(client=model, tools=[count], python_tool=False, file_tools=False,
               skills_enabled=False, max_steps=1) as agent:
        result = agent.run("count")
        assert result.stop_reason == "max_steps" and ran == [1, 2, 1]  # 3 never ran
        last = agent.context[-1]
        assert isinstance(last, ToolResult) and last.meta["skipped"].startswith("the step limit")
        assert_valid(agent)
    # The card hears the call asked, then its result (found by a review: no card was made).
    from ipyagent.context.events import ToolCallFinished, ToolCallRequested

    model = ScriptedModel([calls(("count", {"n": 1})), calls(("count", {"n": 4}))])
    heard = []
    with Agent(client=model, tools=[count], python_tool=False, file_tools=False,
               skills_enabled=False, max_steps=1, tool_choice="required") as agent:
        agent.run("count", on_event=heard.append)
        kinds = [type(e).__name__ for e in heard if isinstance(e, (ToolCallRequested, ToolCallFinished))]
        assert kinds == ["ToolCallRequested", "ToolCallFinished"] * 2
        # A call demanded of every reply ('required') is not demanded of this one.
        assert [r.tool_choice for r in model.requests] == ["required", "none"]
    # That request failing leaves the run at max_steps, without ipyagent's word as its end.
    model = ScriptedModel([calls(("count", {"n": 1})), ModelConnectionError("gone")])
    with Agent(client=model, tools=[count], python_tool=False, file_tools=False,
               skills_enabled=False, max_steps=1, max_retries=0) as agent:
        result = agent.run("count")
        assert result.stop_reason == "max_steps" and "asking for the answer failed" in result.error
        assert isinstance(agent.context[-1], ToolResult)
        assert_valid(agent)
    # A run that ends on an answer, or one step asked with step(), asks nothing more.
    model = ScriptedModel([calls(("count", {"n": 5})), text("5")])
    with Agent(client=model, tools=[count], python_tool=False, file_tools=False,
               skills_enabled=False, max_steps=1) as agent:
        assert agent.step("count").tool_calls and len(model.requests) == 1


def test_circuit_breaker_after_exactly_n_failures():
    agent, model = make([calls(("flaky", {"x": i})) for i in range(10)], circuit_breaker=3)
    result = agent.run("try")
    assert result.stop_reason == "circuit_breaker"
    assert len(model.requests) == 3
    assert "'flaky' failed 3 times in a row" in result.error
    assert "flaky broke on 2" in agent.context[-1].output


def test_breaker_resets_on_success():
    replies = [calls(("flaky", {"x": 1})), calls(("flaky", {"x": 2})),
               calls(("add", {"a": 1, "b": 1})), calls(("flaky", {"x": 3})),
               calls(("flaky", {"x": 4})), text("done")]
    agent, _ = make(replies, circuit_breaker=3)
    assert agent.run("go").stop_reason == "done"


def test_the_same_call_with_the_same_result_is_pointed_out_then_stops_the_run():
    """A small model that has its answer often calls the tool again (and again): the
    model is told so on the first repeat, and the run stops after circuit_breaker repeats."""
    agent, model = make([calls(("add", {"a": 2, "b": 2}))] * 10, circuit_breaker=3)
    result = agent.run("what is 2+2?")
    assert result.stop_reason == "circuit_breaker" and len(model.requests) == 4
    assert "same 'add' call 4 times in a row" in result.error
    results = [i for i in agent.context if isinstance(i, ToolResult)]
    assert "note" not in results[0].meta
    assert "reply to the user with it now" in results[1].for_model()
    assert "the run stops here" in results[3].for_model()
    # Another call (or another result) starts the count again.
    other, _ = make([calls(("add", {"a": 2, "b": 2})), calls(("add", {"a": 2, "b": 2})),
                     calls(("add", {"a": 1, "b": 2})), calls(("add", {"a": 2, "b": 2})),
                     calls(("add", {"a": 2, "b": 2})), text("4")], circuit_breaker=3)
    assert other.run("go").stop_reason == "done"


def test_the_same_failing_call_again_is_told_to_change_not_to_answer():
    """A repeated failure is not an answer (0.5B ran the same KeyError three times): the note
    says to change what the error points at, or to say that it failed."""
    agent, _ = make([calls(("flaky", {"x": 1}))] * 2 + [text("it failed")], circuit_breaker=3)
    assert agent.run("go").stop_reason == "done"
    results = [i for i in agent.context if isinstance(i, ToolResult)]
    assert results[1].error and "failed the same way" in results[1].for_model()
    assert "reply to the user with it now" not in results[1].for_model()


def test_the_failing_call_made_again_after_a_check_is_not_run():
    """Measured at 1.5B: asked to fix its failing call, the model wrote it again word for
    word. With answer checks in force it is not run; the model is told why, once more."""
    replies = [calls(("flaky", {"x": 1})), text("7"), calls(("flaky", {"x": 1})),
               calls(("flaky", {"x": 2})), text("it failed")]
    agent, model = make(replies, verify_answers=True, repeat_temperature=0, circuit_breaker=5)
    assert agent.run("go").stop_reason == "done"
    results = [i for i in agent.context if isinstance(i, ToolResult)]
    first, again, other = results
    assert again.error and again.meta["skipped"] == "the same failing call again"
    assert again.output.startswith("Not run: this is the call that failed just before")
    assert "flaky broke on 1" in again.output and "flaky broke on 1" in first.output
    assert again.meta["repeat_of"] == first.call_id
    assert "flaky broke on 2" in other.output  # another call runs
    assert_valid(agent)
    # The transcript and the audit say why it did not run.
    from ipyagent.context.audit import audit_rows

    rows = audit_rows(agent.context)
    assert [r.note for r in rows if not r.ran] == ["not run: the same failing call again"]
    # A new task is a new run: its first call runs, whatever the last one was.
    model.replies += [calls(("flaky", {"x": 2})), text("no")]
    agent.run("again")
    assert "skipped" not in [i for i in agent.context if isinstance(i, ToolResult)][-1].meta


@tool
def quiet(x: int) -> None:
    """Prints nothing."""


def test_a_call_not_run_again_is_no_failure_for_the_circuit_breaker():
    """Measured at 1.5B: fail, not run, the same failing call run again: counted as three
    failures the breaker ended the run with no answer, where the model answered next."""
    replies = [calls(("flaky", {"x": 1})), text("7"), calls(("flaky", {"x": 1})),
               calls(("flaky", {"x": 1})), text("fun")]
    agent, _ = make(replies, verify_answers=True, circuit_breaker=3)
    result = agent.run("go")
    assert (result.stop_reason, result.text) == ("done", "fun")
    # one real failure and two calls not run; two more real failures trip it
    agent, _ = make([*replies[:4], calls(("flaky", {"x": 3})), calls(("flaky", {"x": 4})),
                     text("x")], verify_answers=True, circuit_breaker=3)
    assert agent.run("go").stop_reason == "circuit_breaker"


def test_the_call_not_run_written_yet_again_is_not_run_either():
    """Seen at 1.5B in a terminal: fail, not run, the same call a third time ran, failed the
    same way, and the person was asked to approve it again. Written again and again, the
    same result each time ends the run."""
    replies = [calls(("flaky", {"x": 1})), text("7"), *[calls(("flaky", {"x": 1}))] * 2,
               text("it failed")]
    agent, _ = make(replies, verify_answers=True, repeat_temperature=0, circuit_breaker=3)
    assert agent.run("go").text == "it failed"
    first, *again = [i for i in agent.context if isinstance(i, ToolResult)]
    assert "flaky broke on 1" in first.output and len(again) == 2
    assert all(r.meta["skipped"] == "the same failing call again" and r.meta["repeat_of"] == first.call_id
               for r in again)
    assert_valid(agent)
    looping, _ = make([calls(("flaky", {"x": 1})), text("7"), *[calls(("flaky", {"x": 1}))] * 5,
                       text("never")], verify_answers=True, repeat_temperature=0, circuit_breaker=3, max_steps=10)
    assert looping.run("go").stop_reason == "circuit_breaker"


def test_the_silent_call_made_again_after_a_check_is_not_run():
    """Measured at 1.5B: asked to print the value it answered with, it ran the same silent
    code again."""
    model = ScriptedModel([calls(("quiet", {"x": 1})), text("27.0"), calls(("quiet", {"x": 1})),
                           calls(("quiet", {"x": 2})), text("22.2")])
    agent = Agent(client=model, tools=[quiet], python_tool=False, file_tools=False,
                  skills_enabled=False, verify_answers=True, repeat_temperature=0)
    assert agent.run("go").stop_reason == "done"
    first, again, other = [i for i in agent.context if isinstance(i, ToolResult)]
    assert first.output == "(no output)" and not first.error
    assert again.meta["skipped"] == "the same silent call again" and again.error
    assert "printed nothing and would print nothing again" in again.output
    assert "skipped" not in other.meta
    assert_valid(agent)


def made_again(python: Tool, code: str, answer: str, task: str) -> tuple[Agent, ToolResult]:
    """The same python call made twice, the answer between them checked: the agent and the
    second call's result (not run, saying what to print)."""
    model = ScriptedModel([calls(("python", {"code": code})), text(answer),
                           calls(("python", {"code": code})), text("0")])
    agent = Agent(client=model, tools=[python], python_tool=False, file_tools=False,
                  skills_enabled=False, verify_answers=True, repeat_temperature=0)
    agent.run(task)
    return agent, [i for i in agent.context if isinstance(i, ToolResult)][-1]


def test_a_silent_loop_made_again_is_told_to_print_what_its_condition_tests():
    """Measured at 1.5B: a loop whose test held for no line (``'34\\n'.isdigit()``) wrote
    nothing, and the same call came again: what the test sees is what to print."""

    @tool
    def python(code: str) -> None:
        """Runs nothing, prints nothing."""

    loop = ("with open('people.csv') as f:\n    for line in f:\n"
            "        if line.split(',')[1].isdigit(): print(line)")
    agent, again = made_again(python, loop, "2", "go")
    assert again.output.endswith(
        "Print what you need to see: if the loop's condition held for nothing, print what it "
        "tests for each item, as in print(repr(line.split(',')[1])) inside the loop.")
    assert_valid(agent)



def test_a_call_whose_output_the_check_questioned_made_again_is_told_what_to_print():
    """Measured at 1.5B: counting the Mondays of March over the first days of three months
    printed 0; told a zero often means a slip, it wrote the same call again and answered 0."""
    printed: list[str] = []

    @tool
    def python(code: str) -> str:
        """Prints the count."""
        printed.append(code)
        return "0" if "monts" in code or "year" in code else "5"

    count = ("monts_in_march = [datetime.date(2026, i, 1) for i in range(1, 4)]\n"
             "print(sum(1 for d in monts_in_march if d.weekday() == 0))")
    model = ScriptedModel([calls(("python", {"code": count})), text("0"),
                           calls(("python", {"code": count})),
                           calls(("python", {"code": "print(5)"})), text("5")])
    agent = Agent(client=model, tools=[python], python_tool=False, file_tools=False,
                  skills_enabled=False, verify_answers=True, repeat_temperature=0)
    assert agent.run("Use Python to count the Mondays in March 2026.").text == "5"
    first, again, fixed = [i for i in agent.context if isinstance(i, ToolResult)]
    assert again.meta["skipped"] == "the same checked call again" and again.error
    assert again.output == (
        "Not run: this is the call made just before, word for word; it printed '0' and would "
        "print the same again. If that is right, answer with it; if not, print the values it "
        "computes from: if a condition held for nothing, see what it tests for the first "
        "items, as in print([(d, d.weekday()) for _, d in zip(range(5), monts_in_march)]), "
        "look at them, and write the call that fixes the code.")
    assert len(printed) == 2 and "skipped" not in fixed.meta
    assert_valid(agent)
    # Seen at 1.5B: leap years counted by each year's ISO week; 0 twice. With no filter on
    # the item, what the loop goes over is what to print.
    for code, shown in [
            ("print(sum(1 for year in range(1900, 2001) if datetime.date(year, 2, 28)"
             ".isocalendar()[1] == 2))",
             "as in print([(year, datetime.date(year, 2, 28).isocalendar()[1]) for _, year in "
             "zip(range(5), range(1900, 2001))])"),
            ("print(sum(d.weekday() for d in monts_in_march))", "as in print(monts_in_march)")]:
        _, again = made_again(python, code, "0",
                              "Use Python to count the leap years from 1900 to 2000.")
        assert again.meta["skipped"] == "the same checked call again" and shown in again.output
    # Without a check between them (the model's own second look), the call runs again.
    printed.clear()
    model = ScriptedModel([calls(("python", {"code": count})), calls(("python", {"code": count})),
                           text("The count is 0 both times.")])
    agent = Agent(client=model, tools=[python], python_tool=False, file_tools=False,
                  skills_enabled=False, verify_answers=True, repeat_temperature=0)
    agent.run("Use Python to count the Mondays in March 2026.")
    assert len(printed) == 2
    # Code that may print something else a second time (found by a review: a poll, a
    # readline, a random draw) runs again; so does a call after a check on something else.
    for code, answer in [("print(queue.pop())", "0"), ("print(f.readline())", "0"),
                         ("n += 1\nprint(n)", "0"), ("print(sorted(['b', 'A']))", "b, A")]:
        printed.clear()
        model = ScriptedModel([calls(("python", {"code": code})), text(answer),
                               calls(("python", {"code": code})), text("done")])
        agent = Agent(client=model, tools=[python], python_tool=False, file_tools=False,
                      skills_enabled=False, verify_answers=True, repeat_temperature=0)
        agent.run("Use Python to sort the names alphabetically, ignoring case, and reply "
                  "with them" if "sorted" in code else "Use Python: how many jobs are pending?")
        assert len(printed) == 2, code

def test_the_same_failing_call_runs_again_without_answer_checks():
    agent, _ = make([calls(("flaky", {"x": 1}))] * 2 + [text("it failed")], verify_answers=False)
    agent.run("go")
    results = [i for i in agent.context if isinstance(i, ToolResult)]
    assert "skipped" not in results[1].meta and "flaky broke on 1" in results[1].output


def test_budget_stop():
    agent, model = make([calls(("add", {"a": 1, "b": 1}), prompt_tokens=80, completion_tokens=30)] * 5,
                        max_tokens=200)
    result = agent.run("go")
    assert result.stop_reason == "budget"
    assert len(model.requests) == 2
    assert result.usage.total == 220


def test_model_error_stops_with_one_line_and_valid_context():
    agent, _ = make([calls(("add", {"a": 1, "b": 1})),
                     ModelConnectionError("connection refused", url="http://127.0.0.1:9/v1")])
    result = agent.run("go")
    assert result.stop_reason == "error"
    assert "connection refused" in result.error and "\n" not in result.error
    assert isinstance(agent.context[-1], ToolResult)
    assert_valid(agent)
    # The run can continue once the endpoint is back.
    agent.client.replies.append(text("back"))  # type: ignore[attr-defined]
    assert agent.run().text == "back"


def test_policy_deny_stops_and_tells_the_model():
    agent, model = make([calls(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2})), text("x")],
                        approval="deny")
    result = agent.run("go")
    assert result.stop_reason == "denied"
    results = [i for i in agent.context if isinstance(i, ToolResult)]
    assert results[0].meta["denied"] and "not approved" in results[0].output
    assert results[1].meta.get("skipped")
    assert_valid(agent)
    assert len(model.requests) == 1


def test_ask_without_a_ui_denies_with_how_to_allow():
    agent, _ = make([calls(("add", {"a": 1, "b": 1}))], approval="ask")
    result = agent.run("go")
    assert result.stop_reason == "denied"
    assert "Agent.allow" in result.error and "Agent.approval" in result.error


def test_allow_list_skips_asking():
    asked = []
    agent, _ = make([calls(("add", {"a": 1, "b": 1})), text("ok")], approval="ask",
                    allow=["add"])
    agent.approval_hook = lambda call: asked.append(call) or False
    assert agent.run("go").stop_reason == "done"
    assert asked == []


def test_hook_deny_with_reason_continues_and_edit_records_what_ran():
    decisions = iter([Decision("deny", reason="use smaller numbers", by="user"),
                      Decision("edit", arguments={"a": 10, "b": 20}, by="user")])
    agent, model = make([calls(("add", {"a": 1000, "b": 1})), calls(("add", {"a": 1, "b": 2})),
                         text("fine")], approval="ask")
    agent.approval_hook = lambda call: next(decisions)
    result = agent.run("go")
    assert result.stop_reason == "done"
    denied = agent.context[2]
    assert denied.error and "use smaller numbers" in denied.output
    # The model saw the denial reason in its next request.
    assert "use smaller numbers" in model.requests[1].items[-1].output
    edited_call = agent.context[3]
    assert edited_call.arguments == {"a": 10, "b": 20}
    assert edited_call.meta["original_arguments"] == {"a": 1, "b": 2}
    assert agent.context[4].output.endswith("30") and agent.context[4].meta["edited"]
    # The edit note is ipyagent's, labelled apart, never part of what the tool printed.
    assert agent.context[4].output == "30"
    for_model = agent.context[4].for_model()
    assert for_model.startswith("30\n\nNote from ipyagent (not tool output): the user edited this call")
    assert for_model.count("\n") == 2  # the note is one line, after the output


def test_bare_user_deny_stops_the_run():
    agent, model = make([calls(("add", {"a": 1, "b": 1})), text("never")], approval="ask")
    agent.approval_hook = lambda call: Decision("deny", by="user")
    assert agent.run("go").stop_reason == "denied"
    assert len(model.requests) == 1


def test_always_approves_the_tool_for_the_rest_of_the_conversation_only():
    seen = []

    def hook(call):
        seen.append(call.name)
        return Decision("approve", scope="always", by="user")

    agent, _ = make([calls(("add", {"a": 1, "b": 1})), calls(("add", {"a": 2, "b": 2})),
                     text("ok"), calls(("add", {"a": 3, "b": 3})), text("ok")], approval="ask")
    agent.approval_hook = hook
    agent.run("go")
    assert seen == ["add"]
    # The scope the buttons and the prompt name: a new conversation (%agent --new) asks again.
    agent.reset()
    agent.run("another task")
    assert seen == ["add", "add"]


def test_always_does_not_carry_into_a_loaded_conversation(tmp_path):
    seen = []

    def hook(call):
        seen.append(call.name)
        return Decision("approve", scope="always", by="user")

    saved, _ = make([calls(("add", {"a": 1, "b": 1})), text("ok")], approval="auto")
    saved.run("go")
    path = saved.save(tmp_path / "other.ipynb")
    agent, _ = make([calls(("add", {"a": 1, "b": 1})), text("ok"),
                     calls(("add", {"a": 2, "b": 2})), text("ok")], approval="ask")
    agent.approval_hook = hook
    agent.run("go")
    assert agent.policy.always and seen == ["add"]
    agent.load(path)  # %agent load: another conversation
    assert agent.policy.always == {}
    agent.run("go on")
    assert seen == ["add", "add"]


def test_step_by_step_and_edited_context():
    agent, model = make([calls(("add", {"a": 1, "b": 1})), text("two"), text("again")])
    step = agent.step("compute")
    assert step.stop_reason is None and step.tool_calls[0].name == "add"
    assert agent.pending()
    # Edit the context between steps; the next request sees the edit.
    agent.context.add_user("also say hello")
    step2 = agent.step()
    assert step2.stop_reason == "done"
    assert model.requests[1].items[-1].content == "also say hello"
    with pytest.raises(ConfigError, match="nothing to continue"):
        agent.step()


def test_events_reach_listeners_in_order():
    events = []
    agent, _ = make([calls(("add", {"a": 1, "b": 1})), text("ok")])
    agent.run("go", on_event=events.append)
    names = [type(e).__name__ for e in events]
    assert names[0] == "RunStarted" and names[-1] == "RunFinished"
    assert names.index("ToolCallRequested") < names.index("ToolCallDecided") < names.index("ToolCallFinished")
    assert sum(isinstance(e, StepFinished) for e in events) == 2
    assert isinstance(events[-1], RunFinished)


def test_broken_listener_does_not_break_the_run():
    def broken(event):
        raise ValueError("display bug")

    agent, _ = make([text("fine")])
    agent.listeners.append(broken)
    assert agent.run("go").stop_reason == "done"


def test_sync_run_inside_a_running_loop():
    agent, _ = make([calls(("add", {"a": 1, "b": 1})), text("ok")])

    async def inside():
        return agent.run("go")  # as a notebook cell would call it

    assert asyncio.run(inside()).stop_reason == "done"


async def test_arun_and_blocking_run_refused_with_click_ui():
    class ClickUI:
        needs_event_loop = True

        async def decide(self, call):
            return Decision("approve", by="user")

    agent, _ = make([calls(("add", {"a": 1, "b": 1})), text("ok"), text("x")], approval="ask")
    agent.approval_hook = ClickUI()
    with pytest.raises(ApprovalError, match="await agent.arun"):
        agent.run("go")
    result = await agent.arun("go")
    assert result.stop_reason == "done"


def test_traits_validate():
    with pytest.raises(TraitError, match="max_steps must be at least 1"):
        Agent(max_steps=-1, python_tool=False)
    with pytest.raises(TraitError):
        Agent(approval="sometimes", python_tool=False)
    a = Agent(temperature="0.2", python_tool=False)
    assert a.temperature == 0.2


def test_every_trait_has_help():
    for name, trait in Agent.class_traits(config=True).items():
        assert trait.help and len(trait.help) > 10, name


def test_reset_and_repr():
    agent, _ = make([text("hi")])
    agent.run("go")
    assert "items=2" in repr(agent) and "scripted" in repr(agent)
    agent.reset()
    assert len(agent.context) == 0
    assert "<b>ipyagent Agent</b>" in agent._repr_html_()


def test_context_manager_closes():
    with make([text("hi")])[0] as agent:
        agent.run("go")
    with pytest.raises(ConfigError, match="closed"):
        agent.run("again")


def test_message_items_round_trip_through_context():
    agent, _ = make([calls(("add", {"a": 1, "b": 1})), text("ok")])
    agent.run("go")
    copy = agent.context.copy()
    assert copy == agent.context
    assert isinstance(copy[0], Message)


def test_usage_shapes_of_every_api():
    from ipyagent.context.events import Usage

    assert Usage.from_server({"prompt_tokens": 10, "completion_tokens": 2}).total == 12
    assert Usage.from_server({"input_tokens": 10, "output_tokens": 2}).total == 12
    cached = Usage.from_server({"input_tokens": 3, "cache_read_input_tokens": 900,
                                "cache_creation_input_tokens": 100, "output_tokens": 5})
    assert (cached.input, cached.output) == (1003, 5)
    assert Usage.from_server({}) is None and Usage.from_server({"cost": 0}) is None


def test_tool_timeout_zero_means_no_limit_and_a_new_value_applies_at_once():
    """Agent.tool_timeout is read per python call; 0 lets a call run (it interrupted at once)."""
    sleepy = "import time; time.sleep(0.5); print('slept')"
    model = ScriptedModel([calls(("python", {"code": sleepy})), text("ok"),
                           calls(("python", {"code": "import time; time.sleep(30)"})), text("ok")])
    with Agent(client=model, tool_timeout=0) as agent:
        agent.run("sleep")
        first = [i for i in agent.context if isinstance(i, ToolResult)][-1]
        assert first.meta["status"] == "ok" and "slept" in first.output
        agent.tool_timeout = 0.5
        agent.run("sleep longer")
        second = [i for i in agent.context if isinstance(i, ToolResult)][-1]
        assert second.meta["status"] == "timeout"


def test_a_base_url_set_for_the_demo_model_is_said_to_be_ignored_once():
    """Issue 17, finding 10: with model='demo' a base_url you set was silently ignored."""
    from ipyagent.context.events import Notice

    seen: list[str] = []

    def listener(event):
        if isinstance(event, Notice):
            seen.append(event.message)

    with Agent(model="demo", base_url="http://127.0.0.1:59999/v1", python_tool=False,
               file_tools=False) as agent:
        agent.run("compute 6*7", on_event=listener)
        agent.run("compute 6*8", on_event=listener)
    said = [m for m in seen if "demo model" in m]
    assert said == ["the demo model is built in and offline: Agent.base_url "
                    "(http://127.0.0.1:59999/v1) is not used; set Agent.model to a model "
                    "that endpoint serves to use it"]
    with Agent(model="demo", python_tool=False, file_tools=False) as agent:
        seen.clear()
        agent.run("compute 6*7", on_event=listener)
    assert not [m for m in seen if "demo model" in m]  # nothing set: nothing to say


def test_the_model_is_told_not_to_repeat_a_long_output_and_nothing_of_a_short_one():
    """The user sees each output under its call: a long one the model is asked not to
    repeat (in its own labelled note, not in the output); a short result gets no note."""
    long_tool_called = []

    @tool
    def lines(n: int) -> str:
        """n lines."""
        long_tool_called.append(n)
        return "\n".join(f"line {i}" for i in range(n))

    model = ScriptedModel([calls(("lines", {"n": 200})), calls(("lines", {"n": 3})), text("ok")])
    agent = Agent(client=model, tools=[lines], python_tool=False, file_tools=False, approval="auto")
    agent.run("go")
    long, short = [i for i in agent.context if isinstance(i, ToolResult)]
    assert "do not repeat it in your answer" in long.for_model() and "200 lines" in long.for_model()
    assert long.output.count("\n") == 199  # the output itself is untouched
    assert short.for_model() == short.output == "line 0\nline 1\nline 2"
    assert "repeat" not in agent.context.system  # not in the prompt: it silenced small models


def test_the_time_a_person_takes_to_answer_is_not_the_models() -> None:
    """Issue 30: 'done in 16.9 s' counted the time the person took to click. The run's
    time is split: model (its replies), tools (their runs), waiting for you (approval)."""
    import time

    answering: list[float] = []

    async def person(call: ToolCall) -> bool:
        began = time.perf_counter()
        await asyncio.sleep(0.2)  # a person reading the card
        answering.append(time.perf_counter() - began)
        return True

    agent = Agent(client=ScriptedModel([calls(("add", {"a": 2, "b": 3})), text("5")]),
                  tools=[add], python_tool=False, approval="ask", approval_hook=person)
    result = agent.run("add")
    agent.close()
    first = result.steps[0]
    # Containment, not speed: the hook's own time is inside the step's waiting time, and
    # the three parts never overlap (their sum is within the run's time).
    assert first.wait_time >= answering[0] > 0
    assert first.model_time > 0 and first.tool_time > 0 and result.steps[1].wait_time == 0
    assert result.model_time + result.tool_time + result.wait_time <= result.duration
    line = result.footer()
    assert (f"(model {result.model_time:.1f}s · tools {result.tool_time:.1f}s · waiting for you "
            f"{result.wait_time:.1f}s)") in line, line


def test_the_same_call_not_to_be_run_is_asked_once_more_at_a_temperature(tmp_path) -> None:
    """Measured at 1.5B (greedy): told its call was not run and why, the model wrote it three
    and four more times, until the circuit breaker. The reply is set aside and asked once
    more at ``repeat_temperature`` with a fixed seed; what comes back is kept."""
    from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls

    bad = "data = {'Rome': 13}\ncity = 'Oslo'\nprint(data[city])"
    good = "print('Oslo')"
    script = [reply_tool_calls([("python", {"code": bad})]), reply_text("Rome"),
              reply_tool_calls([("python", {"code": bad})]),      # set aside
              reply_tool_calls([("python", {"code": good})]), reply_text("Oslo")]
    events: list = []
    with ScriptedServer(script) as srv, Agent(model="m", base_url=srv.base_url, approval="auto",
                                              file_tools=False, verify_answers=True, temperature=0,
                                              cwd=str(tmp_path)) as agent:
        result = agent.run("Use Python to find the coldest city.", on_event=events.append)
        bodies = [r.body for r in srv.requests]
        results = [i for i in agent.context if isinstance(i, ToolResult)]
    assert result.text == "Oslo"
    assert [b.get("temperature") for b in bodies] == [0, 0, 0, 0.7, 0]
    assert [b.get("seed") for b in bodies] == [None, None, None, 33, None]
    assert bodies[3]["messages"] == bodies[2]["messages"]  # the same prompt: all of it cached
    assert len(results) == 2 and not results[1].error and results[1].output.strip() == "Oslo"
    lines = [e.line for e in events if type(e).__name__ == "Discarded"]
    assert lines == ["discarded: the model wrote again a python call ipyagent would not run; "
                     "asked once more at temperature 0.7; asking again"]
    # Asked once a step: the same call again after the re-ask is kept, and not run.
    script = [reply_tool_calls([("python", {"code": bad})]), reply_text("Rome"),
              *[reply_tool_calls([("python", {"code": bad})])] * 2, reply_text("It fails.")]
    with ScriptedServer(script) as srv, Agent(model="m", base_url=srv.base_url, approval="auto",
                                              file_tools=False, verify_answers=True,
                                              cwd=str(tmp_path)) as agent:
        agent.run("Use Python to find the coldest city.")
        results = [i for i in agent.context if isinstance(i, ToolResult)]
    assert [r.meta.get("skipped") for r in results] == [None, "the same failing call again"]
    # A later step's re-ask sees the failing call once: the copies not run are folded out of
    # its prompt (each was one more example of that call), and it is sampled with another
    # seed (the folded prompt is the first re-ask's again). The context keeps every copy.
    script = [reply_tool_calls([("python", {"code": bad})]), reply_text("Rome"),
              *[reply_tool_calls([("python", {"code": bad})])] * 3,
              reply_tool_calls([("python", {"code": good})]), reply_text("Oslo")]
    with ScriptedServer(script) as srv, Agent(model="m", base_url=srv.base_url, approval="auto",
                                              file_tools=False, verify_answers=True,
                                              temperature=0, cwd=str(tmp_path)) as agent:
        assert agent.run("Use Python to find the coldest city.").text == "Oslo"
        bodies = [r.body for r in srv.requests]
        results = [i for i in agent.context if isinstance(i, ToolResult)]
    assert [b.get("seed") for b in bodies] == [None, None, None, 33, None, 34, None]
    tools_seen = [sum(m["role"] == "tool" for m in b["messages"]) for b in bodies]
    assert tools_seen == [0, 1, 1, 1, 2, 1, 3], tools_seen
    assert [r.meta.get("skipped") for r in results] == [None, "the same failing call again", None]
    # Found by a review: a copy whose reply also had text is folded with it (no half turn
    # ends the prompt), and an earlier task's copies stay (its prompt is what the server holds).
    script = [reply_tool_calls([("python", {"code": bad})]), reply_text("Rome"),
              reply_tool_calls([("python", {"code": bad})]),
              reply_tool_calls([("python", {"code": bad})], text="Let me retry that.\n\n"),
              reply_tool_calls([("python", {"code": bad})]),
              reply_tool_calls([("python", {"code": good})]), reply_text("Oslo"),
              reply_tool_calls([("python", {"code": bad})]), reply_text("Rome"),
              reply_tool_calls([("python", {"code": bad})]),
              reply_tool_calls([("python", {"code": good})]), reply_text("Oslo")]
    with ScriptedServer(script) as srv, Agent(model="m", base_url=srv.base_url, approval="auto",
                                              file_tools=False, verify_answers=True,
                                              temperature=0, cwd=str(tmp_path)) as agent:
        assert agent.run("Use Python to find the coldest city.").text == "Oslo"
        assert agent.run("And again, please.").text == "Oslo"
        bodies = [r.body for r in srv.requests]
    folded = bodies[5]["messages"]
    assert folded[-1]["role"] != "assistant" and not any(
        "Let me retry" in str(m.get("content")) for m in folded)
    assert [b.get("seed") for b in bodies][9:] == [None, 33, None]  # the new task's first re-ask
    assert bodies[10]["messages"] == bodies[9]["messages"]  # all of it in the server's cache
    # Off where answers are not checked, and with repeat_temperature 0.
    for settings in ({"verify_answers": False}, {"verify_answers": True, "repeat_temperature": 0}):
        script = [reply_tool_calls([("python", {"code": bad})]), reply_text("Rome"),
                  reply_tool_calls([("python", {"code": bad})]), reply_text("It fails.")]
        with ScriptedServer(script) as srv, Agent(model="m", base_url=srv.base_url,
                                                  approval="auto", file_tools=False,
                                                  cwd=str(tmp_path), **settings) as agent:
            agent.run("Use Python to find the coldest city.")
            assert all("seed" not in r.body for r in srv.requests), settings


def test_a_repeat_is_told_by_the_latest_call_of_its_id():
    """Found by a review: the call repeated was looked up by id from the start of the
    context, so a client that reuses ids (this scripted model: ``call_0_flaky`` each turn)
    hid a repeat behind an older call of the same id."""
    replies = [calls(("flaky", {"x": 1})), calls(("flaky", {"x": 2})), calls(("flaky", {"x": 2})),
               text("it failed")]
    agent, _ = make(replies, verify_answers=True, repeat_temperature=0, circuit_breaker=5)
    agent.run("go")
    results = [i for i in agent.context if isinstance(i, ToolResult)]
    assert results[-1].meta.get("skipped") == "the same failing call again"
