"""Compaction keeps every request inside the window, against a real local server."""

from __future__ import annotations

import asyncio
import json

import nbformat
import pytest

from ipyagent import Agent, Message, Summary, ToolCall, ToolResult, tool
from ipyagent.context.buffer import Context
from ipyagent.context.events import ContextCompacted, Notice, StepFinished
from ipyagent.context.tokens import TokenCounter
from ipyagent.engine.compaction import (
    fit_window,
    plan,
    replaced_items,
    truncation_summary,
    turn_groups,
)
from ipyagent.models.base import ModelRequest
from ipyagent.models.base import asks_summary as asks_summary_request
from ipyagent.models.demo import DemoModel
from tests.helpers.scripted_apis import asks_summary
from tests.helpers.scripted_model import ScriptedModel, calls, text
from tests.helpers.scripted_server import ScriptedServer, http_error, reply_text, reply_tool_calls

WINDOW = 4096


def server_tokens(body: dict) -> int:
    """The server's own count — a different tokenizer from the client's (3.5 chars/token
    over the JSON it received), so the client must calibrate from reported usage."""
    sent = json.dumps(body.get("messages", [])) + json.dumps(body.get("tools", []))
    return int(len(sent) / 3.5) + 1


@tool
def work(i: int) -> str:
    """Do step i of the job."""
    return f"result {i}: " + ("lorem ipsum dolor sit amet " * 15)


def conversation(n_turns: int) -> Context:
    items = [Message("user", "the task")]
    for i in range(n_turns):
        items += [Message("assistant", f"turn {i}"), ToolCall(f"c{i}", "work", {"i": i}),
                  ToolCall(f"d{i}", "work", {"i": i}), ToolResult(f"c{i}", "x" * 400),
                  ToolResult(f"d{i}", "y" * 400)]
    return Context(items, system="sys", counter=TokenCounter(use_tokenizer=False))


def test_turn_groups_never_split_a_call_from_its_result():
    ctx = conversation(5)
    groups = turn_groups(list(ctx))
    assert groups[0] == [0]
    for g in groups[1:]:
        ids = {ctx[i].id for i in g if isinstance(ctx[i], ToolCall)}
        answered = {ctx[i].call_id for i in g if isinstance(ctx[i], ToolResult)}
        assert ids == answered


def test_plan_keeps_task_and_recent_turns():
    ctx = conversation(20)
    assert not plan(ctx, window=100_000).needed
    p = plan(ctx, window=2000, threshold=0.8, reserve=200, force=True)
    assert p.needed and p.head == [0]
    assert p.tail[-1] == len(ctx) - 1 and p.middle and p.middle[0] == 1
    assert sorted(p.head + p.middle + p.tail) == list(range(len(ctx)))
    assert "summarise" in p._repr_html_() and "CompactionPlan needed" in repr(p)


def test_the_task_is_kept_even_after_memory_notes_came_first():
    ctx = conversation(20)
    ctx.insert(0, Message("user", "notes from memory", meta={"memory": {"notes": 1}}))
    p = plan(ctx, window=2000, threshold=0.8, reserve=200, force=True)
    assert p.needed and p.head == [1] and ctx[1].content == "the task"
    assert 0 in p.middle  # the notes may be summarised; the task never is


def test_the_current_task_is_kept_however_long_its_turn_grew():
    ctx = conversation(3)
    ctx.append(Message("user", "the second task"))
    current = len(ctx) - 1
    more = conversation(20)
    for item in list(more)[1:]:
        ctx.append(item)
    p = plan(ctx, window=2000, threshold=0.8, reserve=200, force=True)
    assert p.needed and p.head == [0, current]  # the first task and the one being worked on
    assert p.middle and max(p.middle) > current and p.tail[-1] == len(ctx) - 1
    assert sorted(p.head + p.middle + p.tail) == list(range(len(ctx)))


def test_compaction_preview_changes_nothing():
    ctx = conversation(10)
    before = ctx.to_dicts()
    p = ctx.compaction_preview(window=1000)
    assert p.needed and p.middle
    assert ctx.to_dicts() == before


def make_server(fail_summary: bool = False) -> tuple[ScriptedServer, dict]:
    stats = {"max": 0, "requests": 0, "summaries": 0, "over": []}

    def reply(body):
        stats["requests"] += 1
        used = server_tokens(body) + (body.get("max_tokens") or 0)
        stats["max"] = max(stats["max"], used)
        if used > WINDOW:
            stats["over"].append(used)
            return http_error(400, {"error": {"message": f"context length exceeded: {used}"}})
        usage = {"prompt_tokens": server_tokens(body), "completion_tokens": 20}
        if asks_summary(body):
            stats["summaries"] += 1
            if fail_summary:
                return http_error(400, {"error": {"message": "summaries are broken today"}})
            return reply_text("- did the work steps so far; each returned lorem ipsum", usage=usage)
        step = sum(1 for m in body["messages"] if m["role"] == "tool")
        return reply_tool_calls([("work", {"i": step})], text=f"Doing step {step}.", usage=usage)

    return ScriptedServer(fallback=reply), stats


@pytest.mark.parametrize("fail_summary", [False, True], ids=["summary", "summary-fails"])
def test_200_steps_in_a_4096_window(fail_summary):
    server, stats = make_server(fail_summary)
    events = []
    with server:
        agent = Agent(model="m", base_url=server.base_url, python_tool=False, tools=[work],
                      context_window=WINDOW, request_max_tokens=256, max_steps=200, answer_at_limit=False,
                      max_retries=0)
        agent.context.counter = TokenCounter(use_tokenizer=False)
        agent.context._recount()
        result = agent.run("do the 200-step job", on_event=events.append)
        agent.close()
    assert stats["over"] == [], f"requests over the window: {stats['over']}"
    assert result.stop_reason == "max_steps", result
    assert stats["max"] <= WINDOW
    compactions = [e for e in events if isinstance(e, ContextCompacted)]
    assert len(compactions) >= 5
    summaries = [i for i in agent.context if isinstance(i, Summary)]
    assert summaries, "the compaction is visible in the context"
    # Lossless: the replaced items are kept inside the summaries (and so in transcripts).
    assert summaries[0].replaced
    assert agent.context[0].content == "do the 200-step job"  # the task is kept verbatim
    if fail_summary:
        assert summaries[0].meta["method"] == "truncate"
        assert any(isinstance(e, Notice) and "Summarising for compaction failed" in e.message
                   and "summaries are broken today" in e.message for e in events)
    else:
        assert summaries[0].meta["method"] == "summary"
        assert "lorem ipsum" in summaries[0].content
    # Every request was valid: no tool result without its call.
    for body in server.bodies:
        called = {c["id"] for m in body["messages"] for c in m.get("tool_calls") or []}
        for m in body["messages"]:
            if m["role"] == "tool":
                assert m["tool_call_id"] in called


def test_huge_latest_result_is_cut_for_the_model_not_the_notebook():
    @tool
    def dump() -> str:
        """Print a lot."""
        return "z" * 50_000

    server, stats = make_server()
    with server:
        server.script([reply_tool_calls([("dump", {})]), reply_text("ok")])
        agent = Agent(model="m", base_url=server.base_url, python_tool=False, file_tools=False, tools=[dump],
                      context_window=WINDOW, request_max_tokens=256, tool_output_limit=40_000)
        result = agent.run("dump")
        agent.close()
    assert result.stop_reason == "done" and stats["over"] == []
    res = [i for i in agent.context if isinstance(i, ToolResult)][0]
    assert res.meta.get("cut_chars") and "characters cut to fit" in res.output


def test_tool_output_limit_caps_what_the_model_sees():
    @tool
    def dump() -> str:
        """Print a lot."""
        return "a" * 1000 + "b" * 1000

    with ScriptedServer([reply_tool_calls([("dump", {})]), reply_text("ok")]) as server:
        agent = Agent(model="m", base_url=server.base_url, python_tool=False, file_tools=False, tools=[dump],
                      tool_output_limit=100)
        agent.run("go")
        agent.close()
        sent = server.bodies[1]["messages"][-1]["content"]
    assert sent.startswith("a" * 50) and sent.endswith("b" * 50) and "1900 characters omitted" in sent


def test_length_continue_and_stop():
    with ScriptedServer([reply_text("The answer is", finish_reason="length"),
                         reply_text(" 42.")]) as server:
        events = []
        agent = Agent(model="m", base_url=server.base_url, python_tool=False,
                      request_max_tokens=5)
        result = agent.run("go", on_event=events.append)
        assert result.stop_reason == "done" and len(result.steps) == 2
        assert any(isinstance(e, Notice) and "cut off" in e.message for e in events)
        assert "Continue exactly where you stopped" in server.bodies[1]["messages"][-1]["content"]
        server.script([reply_text("cut", finish_reason="length")])
        agent.on_length = "stop"
        assert agent.run("again").stop_reason == "length"
        agent.close()


def test_calibration_follows_the_server():
    replies = [reply_text("hi", usage={"prompt_tokens": 1800, "completion_tokens": 1}),
               reply_text("hi", usage={"prompt_tokens": 50_000, "completion_tokens": 1})]
    with ScriptedServer(replies) as server:
        agent = Agent(model="m", base_url=server.base_url, python_tool=False)
        agent.context.counter = TokenCounter(use_tokenizer=False)
        before = agent.context.tokens
        agent.run("hello")
        scale = agent.context.counter.scale
        assert 1.5 < scale <= 4.0  # a denser tokenizer than chars/4
        assert agent.context.tokens > before
        agent.run("again")  # 50,000 tokens for a few hundred characters: not believed
        agent.close()
    assert agent.context.counter.scale == scale


# -- long sessions: bounded summaries, flat nesting, every request fits -------------------
def power_tool(doc_chars: int):
    """A power tool whose description makes the tool specs ``doc_chars`` long: big specs
    leave the conversation little room, as the kernel's python tool does."""
    def power(base: int, exp: int) -> str:
        v = base ** exp
        return f"{base}**{exp} = {v} ({len(str(v))} digits)"

    power.__doc__ = "Compute base ** exp. " + "Exact integers, any size. " * (doc_chars // 26)
    return tool(power)


class RecordingDemo(DemoModel):
    """The demo model, recording the estimated size of every request it is sent."""

    def __init__(self, agent_ref: list) -> None:
        super().__init__()
        self.agent_ref, self.sizes = agent_ref, []

    async def stream(self, request):
        agent = self.agent_ref[0]
        self.sizes.append(request_size(agent, request))
        async for event in super().stream(request):
            yield event


def request_size(agent: Agent, request) -> int:
    """Tokens a request occupies in the window, by the agent's own estimate."""
    counter = agent.context.counter
    prompt = Context(request.items, system=request.system, counter=counter).tokens
    tools = counter.scaled(counter.raw(json.dumps(request.tools))) if request.tools else 0
    reserve = request.max_tokens or min(2048, agent.context_window // 4)
    return prompt + tools + reserve


def replaced_depth(data: dict) -> int:
    """How deep ``replaced`` lists nest (iteratively: the bug made it thousands deep)."""
    depth, level = 0, [data]
    while level:
        level = [d for item in level for d in item.get("replaced") or []]
        depth += bool(level)
    return depth


@pytest.mark.parametrize("window", [2048, 4096])
def test_many_short_tasks_keep_one_flat_summary(window, tmp_path):
    ref: list = []
    model = RecordingDemo(ref)
    agent = Agent(client=model, python_tool=False, file_tools=False, approval="auto",
                  tools=[power_tool(1800 if window == 2048 else 5000)], context_window=window)
    ref.append(agent)
    tasks = 45
    for k in range(tasks):
        result = agent.run(f"Compute {k + 2} to the power {(k + 2) * 7}")
        assert result.stop_reason == "done", (k, result.error)
    assert max(model.sizes) <= window, f"a request passed the window: {max(model.sizes)}"
    summaries = [i for i in agent.context if isinstance(i, Summary)]
    assert len(summaries) == 1 and summaries[0].replaced
    assert replaced_depth(summaries[0].to_dict()) == 1
    assert not any(d["type"] == "summary" for d in summaries[0].replaced)
    # Lossless: every task's items are in the context or inside the summary, in order.
    history = [d for i in agent.context
               for d in (i.replaced if isinstance(i, Summary) else [i.to_dict()])]
    users = [d["content"] for d in history if d.get("role") == "user"]
    assert users == [f"Compute {k + 2} to the power {(k + 2) * 7}" for k in range(tasks)]
    assert agent.context[0].content == users[0]  # the original task stays verbatim
    nb = nbformat.read(agent.save(tmp_path / "long.ipynb"), as_version=4)
    agent.close()
    kinds = [c.metadata.get("ipyagent", {}).get("kind") for c in nb.cells]
    assert kinds.count("summary") == 1
    assert len(nb.cells) <= 2 * len(history) + 10  # proportional to the real items


def test_only_an_old_summary_in_the_middle_is_not_wrapped_again():
    """The request is too big, and the part to compact is just the earlier summary: the
    tail must shrink (the old loop wrapped the summary in a new one, 50 times a step)."""
    model = ScriptedModel([text("ok")])
    agent = Agent(client=model, python_tool=False, file_tools=False, tools=[work],
                  context_window=2048, request_max_tokens=256)
    agent.context.counter = TokenCounter(use_tokenizer=False)
    old = [Message("user", "step 0"), Message("assistant", "done 0")]
    items = [Message("user", "the task"),
             Summary("[2 earlier items were removed]", replaced=[i.to_dict() for i in old],
                     meta={"method": "truncate"})]
    for i in range(12):
        items += [ToolCall(f"c{i}", "work", {"i": i}), ToolResult(f"c{i}", "r" * 400)]
    agent.context[:] = items
    events: list = []
    assert asyncio.run(fit_window(agent, events.append)) is None
    summaries = [i for i in agent.context if isinstance(i, Summary)]
    assert len(summaries) == 1 and replaced_depth(summaries[0].to_dict()) == 1
    assert summaries[0].replaced[:2] == [i.to_dict() for i in old]  # oldest first, kept
    assert request_size(agent, ModelRequest(system=agent.context.system,
                                            items=list(agent.context),
                                            tools=agent.tools.specs(),
                                            max_tokens=256)) <= 2048
    assert isinstance(agent.context[-1], ToolResult) and agent.context[-1].call_id == "c11"
    ids = {i.id for i in agent.context if isinstance(i, ToolCall)}
    assert all(i.call_id in ids for i in agent.context if isinstance(i, ToolResult))
    agent.close()


def test_a_deeply_nested_old_summary_is_flattened_without_recursion():
    """Transcripts saved before the fix hold summaries nested thousands deep."""
    nested: dict = {"type": "message", "role": "user", "content": "first"}
    for n in range(5000):
        nested = {"type": "summary", "content": f"s{n}", "meta": {},
                  "replaced": [nested, {"type": "message", "role": "assistant",
                                        "content": f"a{n}", "meta": {}}]}
    old = Summary(nested["content"], replaced=nested["replaced"])
    new = truncation_summary([old, Message("user", "latest")], "test")
    assert replaced_depth({"replaced": new.replaced}) == 1
    contents = [d["content"] for d in new.replaced]
    assert contents == ["first", *(f"a{n}" for n in range(5000)), "latest"]
    assert json.loads(new.to_json())["replaced"][-1]["content"] == "latest"


def test_merging_reuses_the_replaced_dicts():
    """A new summary takes the old one's dicts as they are: no re-serialising per step."""
    older = [Message("user", f"m{i}").to_dict() for i in range(3)]
    merged = replaced_items([Summary("s", replaced=older), Message("assistant", "x")])
    assert all(a is b for a, b in zip(merged, older)) and merged[-1]["content"] == "x"


def test_300_steps_stay_in_a_2048_window_at_a_flat_cost():
    def reply(request):
        if asks_summary_request(request):
            return text("- ran the work steps; each returned lorem ipsum")
        n = sum(isinstance(i, ToolCall) for i in request.items)
        return calls(("work", {"i": n}), text=f"Step {n}.")

    steps = 300
    model = ScriptedModel([reply] * (steps * 3))
    agent = Agent(client=model, python_tool=False, file_tools=False, tools=[work],
                  context_window=2048, max_steps=steps,
                  answer_at_limit=False)
    agent.context.counter = TokenCounter(use_tokenizer=False)
    agent.context._recount()
    events: list = []
    timings: list[float] = []
    agent.listeners.append(lambda e: isinstance(e, StepFinished) and timings.append(
        e.step.duration))
    result = agent.run("do the long job", on_event=events.append)
    agent.close()
    assert result.stop_reason == "max_steps" and len(result.steps) == steps
    sizes = [request_size(agent, r) for r in model.requests]
    assert max(sizes) <= 2048, max(sizes)
    compactions = sum(isinstance(e, ContextCompacted) for e in events)
    summaries = [i for i in agent.context if isinstance(i, Summary)]
    assert compactions >= 10 and len(summaries) == 1
    assert replaced_depth(summaries[0].to_dict()) == 1
    # Nothing lost: every step's call is in the summary or still in the context.
    kept = sum(isinstance(i, ToolCall) for i in agent.context)
    assert kept + sum(d["type"] == "tool_call" for d in summaries[0].replaced) == steps
    # Flat cost: the late steps (big summary) take about as long as the early ones.
    early, late = sorted(timings[20:80])[30], sorted(timings[-60:])[30]
    assert late <= 4 * early + 0.005, (early, late)


def test_a_model_summary_survives_a_huge_latest_result():
    """The newest result alone is too big: it is cut, the summary just paid for is kept
    (it used to be dropped for a bare 'N items were removed' note at once)."""
    model = ScriptedModel([text("- v holds the 30000 numbers; the file is data.csv")])
    agent = Agent(client=model, python_tool=False, file_tools=False, tools=[work],
                  context_window=2048, request_max_tokens=256)
    agent.context.counter = TokenCounter(use_tokenizer=False)
    items: list = [Message("user", "the task")]
    for i in range(6):
        items += [ToolCall(f"c{i}", "work", {"i": i}), ToolResult(f"c{i}", "r" * 400)]
    items += [ToolCall("big", "work", {"i": 9}), ToolResult("big", "z" * 20_000)]
    agent.context[:] = items
    assert asyncio.run(fit_window(agent, lambda e: None)) is None
    summaries = [i for i in agent.context if isinstance(i, Summary)]
    assert len(summaries) == 1 and "data.csv" in summaries[0].content
    assert summaries[0].meta["method"] == "summary"
    assert "characters cut to fit" in agent.context[-1].output
    agent.close()


def test_truncating_after_a_summary_keeps_its_text():
    summary = Summary("- x is 42", replaced=[Message("user", "old").to_dict()],
                      meta={"method": "summary"})
    cut = truncation_summary([summary, Message("assistant", "later")], "still too large")
    assert cut.content.startswith("- x is 42") and "2 items replaced" in cut.content
    again = truncation_summary([cut, Message("user", "more")], "still too large")
    assert again.content.count("- x is 42") == 1 and again.meta["kept_text"] == "- x is 42"
    bare = truncation_summary([again], "still too large", keep_text=False)
    assert "x is 42" not in bare.content


def test_preview_follows_the_agents_settings_before_any_step():
    agent = Agent(client=ScriptedModel([]), python_tool=False, file_tools=False,
                  tools=[work], context_window=2048, request_max_tokens=256)
    agent.context.counter = TokenCounter(use_tokenizer=False)
    agent.context[:] = list(conversation(10))
    p = agent.context.compaction_preview()
    assert p.window == 2048 and p.reserve == 256 and p.needed and p.middle
    agent.context_window = 100_000  # a changed setting shows at once
    p = agent.context.compaction_preview()
    assert p.window == 100_000 and not p.needed and "not needed" in repr(p)
    agent.reset()  # a new conversation is bound too
    assert agent.context.compaction_preview().window == 100_000
    agent.context_window = 0
    assert "no context_window set" in repr(agent.context.compaction_preview())
    agent.close()


def test_a_cut_tool_call_is_said_even_when_its_failure_ends_the_run():
    """The cut call's broken arguments trip the breaker: the user still learns why."""
    from tests.helpers.scripted_server import Completion

    cut = Completion(tool_calls=[("work", '{"i": 1')], finish_reason="length")
    with ScriptedServer([cut]) as server:
        events: list = []
        agent = Agent(model="m", base_url=server.base_url, python_tool=False,
                      file_tools=False, tools=[work], request_max_tokens=5, circuit_breaker=1)
        result = agent.run("go", on_event=events.append)
        agent.close()
    assert result.stop_reason == "circuit_breaker"
    assert any(isinstance(e, Notice) and "cut off at the output limit" in e.message
               for e in events)


# -- the server says the prompt is too long: count denser, compact, ask once more ---------
LLAMA_TOO_LONG = {"error": {"code": 400, "type": "exceed_context_size_error", "n_ctx": 3072,
                            "n_prompt_tokens": 3100,
                            "message": "the request exceeds the available context size, try increasing it"}}


def _long_history(agent: Agent) -> None:
    for i in range(6):  # ~1,400 estimated tokens: fits 0.8 × 3000 by the estimate alone
        agent.context.add_user(f"note {i}: " + "lorem ipsum dolor " * 44)
        agent.context.append(Message("assistant", f"noted {i}"))


def test_a_refused_over_long_request_is_compacted_and_asked_again():
    with ScriptedServer([http_error(400, LLAMA_TOO_LONG), reply_text("Summary of the notes."),
                         reply_text("Done.")]) as server:
        agent = Agent(model="m", base_url=server.base_url, python_tool=False, file_tools=False,
                      context_window=3000, skills_enabled=False)  # sized without them
        agent.context.counter = TokenCounter(use_tokenizer=False)
        _long_history(agent)
        events: list = []
        result = agent.run("and now?", on_event=events.append)
        agent.close()
    assert result.stop_reason == "done" and result.text == "Done.", result
    notices = [e.message for e in events if isinstance(e, Notice)]
    assert any("refused the request as longer than its context window (it counted 3,100 tokens)"
               in n for n in notices), notices
    assert any(isinstance(e, ContextCompacted) for e in events)
    assert len(server.bodies) == 3  # refused, the summary request, the retry
    assert len(json.dumps(server.bodies[2])) < len(json.dumps(server.bodies[0])) / 2
    assert agent.context.counter.scale > 1.5  # it counts as the server does from now on


def test_a_server_that_says_its_window_sets_the_one_compaction_fits():
    """llama-cpp-python reports no n_ctx anywhere but in its refusal (measured: a 0.5B run
    that printed 998 lines outgrew the server's 8192 tokens and ended in an error). With
    ``context_window`` 0, the window the refusal names is fitted from then on, for this
    endpoint and model; the setting itself stays 0."""
    too_long = {"error": {"message": "This model's maximum context length is 3072 tokens. However, "
                          "you requested 3500 tokens (3100 in the messages, 400 in the completion). "
                          "Please reduce the length of the messages or completion.",
                          "type": "invalid_request_error", "code": "context_length_exceeded"}}
    with ScriptedServer([http_error(400, too_long), reply_text("Summary of the notes."),
                         reply_text("Done."), reply_text("Again.")]) as server:
        agent = Agent(model="m", base_url=server.base_url, python_tool=False, file_tools=False,
                      skills_enabled=False)
        agent.context.counter = TokenCounter(use_tokenizer=False)
        _long_history(agent)
        events: list = []
        result = agent.run("and now?", on_event=events.append)
        assert agent.context_window == 0 and agent.window_in_force == 3072
        agent.model = "another"  # another model: not known there
        assert agent.window_in_force == 0
        agent.close()
    assert result.stop_reason == "done" and result.text == "Done.", result
    notices = [e.message for e in events if isinstance(e, Notice)]
    assert any("refused the request as longer than its context window of 3,072 tokens; "
               "Agent.context_window is 0 (unknown), so the context is compacted to fit 3,072 "
               "from now on (set Agent.context_window to choose) (it counted 3,100 tokens)" in n
               for n in notices), notices
    assert any(isinstance(e, ContextCompacted) for e in events)
    assert len(json.dumps(server.bodies[2])) < len(json.dumps(server.bodies[0])) / 2


@pytest.mark.parametrize("claimed", [1, 512, 10**9])
def test_an_implausible_window_is_not_believed(claimed: int) -> None:
    """A server cannot shrink the window to nothing (every result would be cleared) nor
    claim one no model has: the run ends with the refusal, as without a window."""
    too_long = {"error": {"message": f"This model's maximum context length is {claimed} tokens."}}
    with ScriptedServer([http_error(400, too_long)]) as server:
        agent = Agent(model="m", base_url=server.base_url, python_tool=False, file_tools=False)
        result = agent.run("hello")
        assert agent.window_in_force == 0
        agent.close()
    assert result.stop_reason == "error" and len(server.bodies) == 1


def test_without_a_window_the_refusal_says_to_set_one():
    too_long = {"error": {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 3100,
                          "message": "the request exceeds the available context size, try increasing it"}}
    with ScriptedServer([http_error(400, too_long)]) as server:
        agent = Agent(model="m", base_url=server.base_url, python_tool=False, file_tools=False)
        result = agent.run("hello")
        agent.close()
    assert result.stop_reason == "error" and len(server.bodies) == 1
    assert "exceeds the available context size" in result.error
    assert "set Agent.context_window to the model's window" in result.error
