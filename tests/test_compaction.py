"""Compaction keeps every request inside the window, against a real local server."""

from __future__ import annotations

import json

import pytest

from ipyagent import Agent, Message, Summary, ToolCall, ToolResult, tool
from ipyagent.compaction import SUMMARY_PROMPT, plan, turn_groups
from ipyagent.context import Context
from ipyagent.events import ContextCompacted, Notice
from ipyagent.tokens import TokenCounter

from scripted_server import ScriptedServer, http_error, reply_text, reply_tool_calls

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
        if body["messages"][0]["content"] == SUMMARY_PROMPT:
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
                      context_window=WINDOW, request_max_tokens=256, max_steps=200,
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
    with ScriptedServer([reply_text("hi", usage={"prompt_tokens": 5000, "completion_tokens": 1})]) as server:
        agent = Agent(model="m", base_url=server.base_url, python_tool=False)
        agent.context.counter = TokenCounter(use_tokenizer=False)
        before = agent.context.tokens
        agent.run("hello")
        agent.close()
    assert agent.context.counter.scale == 4.0  # clamped: a wildly different tokenizer
    assert agent.context.tokens > before
