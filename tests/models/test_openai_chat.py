"""OpenAIChatModel against a real HTTP server on 127.0.0.1 (tests/helpers/scripted_server.py)."""

from __future__ import annotations

import json
import logging
import socket
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from ipyagent.context.items import Message, Reasoning, Summary, ToolCall, ToolResult
from ipyagent.errors import (
    ModelConnectionError,
    ModelResponseError,
    ModelStreamError,
    ModelTimeoutError,
    RequestRejected,
    ServerError,
)
from ipyagent.models.base import (
    Discarded,
    Model,
    ModelRequest,
    ReasoningDelta,
    Retrying,
    TextDelta,
    ToolCallDelta,
    TurnComplete,
)
from ipyagent.models.openai_chat import OpenAIChatModel, parse_arguments
from ipyagent.models.sse import aiter_events_from_text
from ipyagent.models.timeouts import Timeouts
from tests.helpers.scripted_server import (
    Reset,
    collect,
    drop_connection_mid_stream,
    http_error,
    json_reply,
    raw_sse,
    reply_text,
    reply_tool_calls,
    sse_event,
    stream_error,
)

KEY = "sk-SENTINEL-abc123"


def ask(*items: Any, **options: Any) -> ModelRequest:
    return ModelRequest("You are terse.", list(items) or [Message("user", "hi")], **options)


class SleepRecorder:
    """Stands in for asyncio.sleep: records the waits, waits not."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


# ------------------------------------------------------------------ streaming


async def test_text_streams_as_deltas_then_one_turn(scripted_server, make_model) -> None:
    scripted_server.script([reply_text("The answer is 42.", usage={"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14})])
    model = make_model()
    assert isinstance(model, Model) and model.name == "test-model"
    events, turn = await collect(model.stream(ask()))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) == 4 and "".join(deltas) == "The answer is 42."
    assert isinstance(events[-1], TurnComplete) and sum(isinstance(e, TurnComplete) for e in events) == 1
    assert (turn.text, turn.tool_calls, turn.finish_reason) == ("The answer is 42.", [], "stop")
    assert turn.usage == {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}
    assert turn.model == "scripted-model"


async def test_one_tool_call_in_fragments(scripted_server, make_model) -> None:
    scripted_server.script([reply_tool_calls([("python", {"code": "print(2**100)"}, "call_abc")], fragments=6)])
    events, turn = await collect(make_model().stream(ask()))
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert len(deltas) == 6
    assert (deltas[0].id, deltas[0].name) == ("call_abc", "python")
    assert all(d.id is None and d.name is None for d in deltas[1:])
    assert json.loads("".join(d.arguments for d in deltas)) == {"code": "print(2**100)"}
    (call,) = turn.tool_calls
    assert (call.id, call.name, call.arguments, call.raw_arguments) == ("call_abc", "python", {"code": "print(2**100)"}, None)
    assert turn.finish_reason == "tool_calls"


async def test_parallel_tool_calls_with_text(scripted_server, make_model) -> None:
    calls = [("python", {"code": "1+1"}), ("search", {"q": "ISS altitude"}), ("noargs", {})]
    scripted_server.script([reply_tool_calls(calls, text="Let me check.", fragments=3)])
    events, turn = await collect(make_model().stream(ask()))
    assert turn.text == "Let me check."
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [(n, a) for n, a in calls]
    assert [c.id for c in turn.tool_calls] == ["call_1_0", "call_1_1", "call_1_2"]
    assert {e.index for e in events if isinstance(e, ToolCallDelta)} == {0, 1, 2}


QUIRKS: dict[str, dict[str, Any]] = {
    "id-and-name-on-every-chunk": dict(fragments=5, repeat_id_name=True),
    "no-index": dict(fragments=4, omit_index=True),
    "no-index-id-and-name-repeated": dict(fragments=4, omit_index=True, repeat_id_name=True),
    "whole-arguments": dict(fragments=1),
    "usage-on-every-chunk": dict(fragments=3, usage_on="every"),
    "usage-on-finish-chunk": dict(fragments=3, usage_on="finish"),
    "finish-on-last-delta": dict(fragments=2, finish_own_chunk=False),
    "no-done": dict(fragments=2, done=False),
    "comments-and-pings": dict(fragments=2, keepalives=True),
    "json-body-not-stream": dict(stream=False),
}


@pytest.mark.parametrize("options", QUIRKS.values(), ids=QUIRKS.keys())
async def test_quirk_shapes_assemble_the_same_turn(scripted_server, make_model, options) -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}
    calls = [("python", {"code": "x = 'é🌤️'"}), ("search", {"q": "a b", "n": 3})]
    scripted_server.script([reply_tool_calls(calls, text="Running.", usage=usage, **options)])
    events, turn = await collect(make_model().stream(ask()))
    assert turn.text == "Running."
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [
        ("call_1_0", "python", {"code": "x = 'é🌤️'"}),
        ("call_1_1", "search", {"q": "a b", "n": 3}),
    ]
    assert turn.usage == usage  # repeated usage is taken, never summed
    assert turn.finish_reason == "tool_calls"
    named = [e for e in events if isinstance(e, ToolCallDelta) and e.name]
    assert [e.name for e in named] == ["python", "search"]  # a repeated name is announced once


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_fields(scripted_server, make_model, field) -> None:
    scripted_server.script([reply_text("4", reasoning="2+2 is 4, plainly.", reasoning_field=field)])
    events, turn = await collect(make_model().stream(ask()))
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "2+2 is 4, plainly."
    assert turn.reasoning is not None and turn.reasoning.content == "2+2 is 4, plainly."
    assert turn.text == "4"


ARGUMENTS = {
    "empty-string": ("", {}, None),
    "whitespace-padded": ('  \n{"a": 1}\t ', {"a": 1}, None),
    "encoded-twice": (json.dumps(json.dumps({"a": 1})), {"a": 1}, None),
    "invalid-json": ('{"code": "print(1)"', {}, '{"code": "print(1)"'),
    "not-an-object": ("[1, 2]", {}, "[1, 2]"),
}


@pytest.mark.parametrize("raw, parsed, kept", ARGUMENTS.values(), ids=ARGUMENTS.keys())
async def test_tool_arguments_as_servers_send_them(scripted_server, make_model, raw, parsed, kept) -> None:
    scripted_server.script([reply_tool_calls([("python", raw)], fragments=3)])
    _, turn = await collect(make_model().stream(ask()))
    (call,) = turn.tool_calls
    assert (call.arguments, call.raw_arguments) == (parsed, kept)


async def test_empty_ids_are_synthesized_and_unique(scripted_server, make_model) -> None:
    scripted_server.script([reply_tool_calls([("a", {}, ""), ("b", {}, "")], fragments=2)])
    _, turn = await collect(make_model().stream(ask()))
    ids = [c.id for c in turn.tool_calls]
    assert all(i.startswith("call_") and len(i) > 8 for i in ids) and len(set(ids)) == 2


async def test_multibyte_text_split_across_network_reads(scripted_server, make_model) -> None:
    chunks = [{"choices": [{"index": 0, "delta": {"content": piece}}]} for piece in ["Grüße ", "aus ", "Köln 🌤️", "!"]]
    scripted_server.script([raw_sse("".join(sse_event(c) for c in chunks) + "data: [DONE]\n\n", chunk_size=1)])
    _, turn = await collect(make_model().stream(ask()))
    assert turn.text == "Grüße aus Köln 🌤️!"
    assert turn.usage is None and turn.finish_reason is None  # neither was sent


async def test_content_null_empty_or_absent_and_unknown_fields(scripted_server, make_model) -> None:
    deltas = [{"role": "assistant", "content": None, "refusal": None}, {"content": ""}, {}, {"content": "ok", "channel": "final"}]
    text = "".join(sse_event({"obfuscation": "x", "choices": [{"index": 0, "delta": d, "logprobs": None}]}) for d in deltas)
    scripted_server.script([raw_sse(text)])
    events, turn = await collect(make_model().stream(ask()))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["ok"] and turn.text == "ok"


async def test_sse_sent_as_another_content_type_is_sniffed(scripted_server, make_model) -> None:
    body = sse_event({"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]})
    scripted_server.script([raw_sse(body, content_type="text/plain")])
    _, turn = await collect(make_model().stream(ask()))
    assert (turn.text, turn.finish_reason) == ("hi", "stop")


async def test_consumer_may_stop_early(scripted_server, make_model) -> None:
    scripted_server.script([reply_text("one two three four five"), reply_text("next")])
    model = make_model()
    async for event in model.stream(ask()):
        assert isinstance(event, TextDelta)
        break
    _, turn = await collect(model.stream(ask()))  # the client is still usable
    assert turn.text == "next"


# ------------------------------------------------------------------ errors in a 200 stream


async def test_error_event_in_a_200_stream(scripted_server, make_model) -> None:
    scripted_server.script([stream_error("Tool call validation failed:\nbad args", "tool_use_failed", text="Partial answer")])
    model = make_model()
    seen: list[Any] = []
    with pytest.raises(ModelStreamError) as info:
        async for event in model.stream(ask()):
            seen.append(event)
    text = str(info.value)
    assert "Tool call validation failed: bad args" in text and "tool_use_failed" in text and "\n" not in text
    assert "".join(e.text for e in seen if isinstance(e, TextDelta)) == "Partial answer"
    assert info.value.turn.text == "Partial answer"  # type: ignore[attr-defined]
    assert len(scripted_server.requests) == 1  # not retried


async def test_error_key_inline_keeps_usage(scripted_server, make_model) -> None:
    base = {"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]}
    error = {"error": {"code": 400, "message": "Token limit reached"}, "choices": [], "usage": {"total_tokens": 53}}
    scripted_server.script([raw_sse(": PROCESSING\n\n" + sse_event(base) + sse_event(error) + "data: [DONE]\n\n")])
    with pytest.raises(ModelStreamError, match="Token limit reached") as info:
        await collect(make_model().stream(ask()))
    assert info.value.turn.usage == {"total_tokens": 53}  # type: ignore[attr-defined]


async def test_json_error_body_with_status_200(scripted_server, make_model) -> None:
    scripted_server.script([json_reply({"error": {"message": "model overloaded"}})])
    with pytest.raises(ModelStreamError, match="model overloaded"):
        await collect(make_model().stream(ask()))


@pytest.mark.parametrize("body", ["data: {not json\n\n", ""], ids=["garbage-chunk", "empty-stream"])
async def test_unusable_stream_is_a_response_error(scripted_server, make_model, body) -> None:
    scripted_server.script([raw_sse(body)])
    with pytest.raises(ModelResponseError):
        await collect(make_model().stream(ask()))


# ------------------------------------------------------------------ HTTP errors and retries


async def test_429_retried_after_the_time_the_server_asks(scripted_server, make_model) -> None:
    scripted_server.script([http_error(429, {"error": {"message": "slow down"}}, {"retry-after": "2"}), reply_text("ok")])
    model = make_model(backoff=5)
    model.retry.sleep = sleep = SleepRecorder()
    _, turn = await collect(model.stream(ask()))
    assert turn.text == "ok" and sleep.waits == [2.0] and len(scripted_server.requests) == 2


async def test_retry_after_as_http_date_and_too_long_not_waited(scripted_server, make_model) -> None:
    later = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=30), usegmt=True)
    scripted_server.script([
        http_error(429, {"error": "busy"}, {"retry-after": later}),
        http_error(503, {"error": "down"}, {"retry-after": "3600"}),  # beyond max_retry_after
        reply_text("ok"),
    ])
    model = make_model()
    model.retry.sleep = sleep = SleepRecorder()
    with pytest.raises(ServerError, match="down; the server asks to wait 3600 s"):
        await collect(model.stream(ask()))
    assert len(sleep.waits) == 1 and 25 < sleep.waits[0] <= 30 and len(scripted_server.requests) == 2


async def test_server_errors_then_success_with_growing_backoff(scripted_server, make_model) -> None:
    scripted_server.script([http_error(500), http_error(502, "<html>Bad Gateway</html>"), reply_text("ok")])
    model = make_model(backoff=0.5)
    model.retry.jitter = 0
    model.retry.sleep = sleep = SleepRecorder()
    _, turn = await collect(model.stream(ask()))
    assert turn.text == "ok" and sleep.waits == [0.5, 1.0] and len(scripted_server.requests) == 3


async def test_drop_before_any_event_is_retried(scripted_server, make_model) -> None:
    role_only = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    scripted_server.script([drop_connection_mid_stream([role_only]), drop_connection_mid_stream(), reply_text("ok")])
    _, turn = await collect(make_model().stream(ask()))
    assert turn.text == "ok" and len(scripted_server.requests) == 3


@pytest.mark.parametrize("broken", [drop_connection_mid_stream, Reset], ids=["cut-chunked-body", "reset"])
async def test_drop_after_events_is_discarded_and_asked_again(scripted_server, make_model, broken) -> None:
    text = {"choices": [{"index": 0, "delta": {"content": "Half an ans"}}]}
    scripted_server.script([broken(sse_event(text)), reply_text("A whole answer.")])
    events, turn = await collect(make_model().stream(ask()))
    assert turn.text == "A whole answer." and len(scripted_server.requests) == 2
    assert [type(e).__name__ for e in events[:3]] == ["TextDelta", "Discarded", "Retrying"]
    assert events[0].text == "Half an ans" and events[1].line == "discarded: the connection dropped; asking again"
    assert "connection dropped mid-stream" in events[2].message and "\n" not in events[2].message


async def test_a_drop_on_every_attempt_ends_in_one_clear_line(scripted_server, make_model) -> None:
    text = {"choices": [{"index": 0, "delta": {"content": "Half"}}]}
    scripted_server.script([drop_connection_mid_stream([text])] * 3 + [reply_text("never sent")])
    seen: list[Any] = []
    with pytest.raises(ModelConnectionError, match="dropped mid-stream") as info:
        async for event in make_model(max_retries=2).stream(ask()):
            seen.append(event)
    assert len(scripted_server.requests) == 3 and scripted_server.remaining == 1
    marks = [e.line for e in seen if isinstance(e, Discarded)]
    assert marks == ["discarded: the connection dropped; asking again"] * 2 + ["discarded: the connection dropped"]
    assert "\n" not in str(info.value) and str(info.value).endswith(f"({scripted_server.base_url}/chat/completions)")


async def test_a_drop_after_the_finish_reason_is_a_whole_reply_not_a_retry(scripted_server, make_model) -> None:
    done = [{"choices": [{"index": 0, "delta": {"content": "All of it."}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
    scripted_server.script([drop_connection_mid_stream(done), reply_text("never sent")])
    events, turn = await collect(make_model().stream(ask()))
    assert (turn.text, turn.finish_reason) == ("All of it.", "stop") and len(scripted_server.requests) == 1
    assert not [e for e in events if isinstance(e, (Discarded, Retrying))]


async def test_a_stream_that_ends_cleanly_without_done_is_a_reply_not_a_drop(scripted_server, make_model) -> None:
    scripted_server.script([reply_text("Complete but no DONE.", done=False), reply_text("never sent")])
    events, turn = await collect(make_model().stream(ask()))
    assert turn.text == "Complete but no DONE." and len(scripted_server.requests) == 1
    assert not [e for e in events if isinstance(e, (Discarded, Retrying))]


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_other_4xx_are_not_retried(scripted_server, make_model, status) -> None:
    scripted_server.script([http_error(status, {"error": {"message": f"nope {status}"}}), reply_text("never")])
    with pytest.raises(RequestRejected) as info:
        await collect(make_model().stream(ask()))
    assert info.value.status_code == status and len(scripted_server.requests) == 1
    text, url = str(info.value), f"({scripted_server.base_url}/chat/completions)"
    # A 404 also names the fix to try (models/endpoint_hint.py): no chat API at that URL.
    hint = "; the server at 127.0.0.1" if status == 404 else ""
    assert text.startswith(f"HTTP {status}: nope {status}{hint}") and text.endswith(url)


async def test_max_retries_exhausted(scripted_server, make_model) -> None:
    scripted_server.script([http_error(503, {"detail": "warming up"})] * 5)
    with pytest.raises(ServerError, match="HTTP 503: warming up"):
        await collect(make_model(max_retries=2).stream(ask()))
    assert len(scripted_server.requests) == 3 and scripted_server.remaining == 2


async def test_connection_refused(make_model) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = make_model(base_url=f"http://127.0.0.1:{port}/v1", max_retries=1)
    model.retry.sleep = sleep = SleepRecorder()
    with pytest.raises(ModelConnectionError, match="could not connect"):
        await collect(model.stream(ask()))
    assert len(sleep.waits) == 1


async def test_timeout(scripted_server, make_model) -> None:
    scripted_server.script([reply_text("late", delay=1.0)])
    with pytest.raises(ModelTimeoutError, match=r"no reply within Agent.first_token_timeout=0.2 s"):
        await collect(make_model(timeouts=Timeouts(first_token=0.2), max_retries=0).stream(ask()))


async def test_error_is_one_line_with_url_and_never_the_key(scripted_server, make_model, caplog) -> None:
    caplog.set_level(logging.DEBUG)  # everything: ours, httpx's, httpcore's
    echo = {"error": {"message": f"Incorrect API key provided:\n{KEY}.\nSee docs.", "type": "invalid_request_error"}}
    scripted_server.script([http_error(500, {"error": f"boom with {KEY}"}), http_error(401, echo)])
    model = make_model()
    with pytest.raises(RequestRejected) as info:
        await collect(model.stream(ask()))
    text = str(info.value)
    assert text == f"HTTP 401: Incorrect API key provided: ***. See docs. (http://127.0.0.1:{scripted_server.port}/v1/chat/completions)"
    assert KEY not in json.dumps(info.value.body)
    assert "retry 1 of 3" in caplog.text and "boom with ***" in caplog.text
    for where in (text, repr(model), caplog.text, repr(info.value)):
        assert KEY not in where
    assert repr(model) == f"OpenAIChatModel('test-model', base_url='http://127.0.0.1:{scripted_server.port}/v1')"


# ------------------------------------------------------------------ the request


async def test_request_body_and_headers(scripted_server, make_model) -> None:
    scripted_server.script([reply_text("done")])
    details = [{"type": "reasoning.encrypted", "data": "gAAA", "index": 0}]
    items = [
        Summary("The user wants the ISS gravity.", replaced=[{"type": "message"}]),
        Message("user", "Compute g at the ISS"),
        Reasoning("thinking...", details={"reasoning_details": details}),
        Message("assistant", "I'll compute it."),
        ToolCall("call_1", "python", {"code": "r = 6771e3"}),
        ToolCall("call_2", "python", {}, raw_arguments='{"code": '),
        ToolResult("call_1", "ok"),
        ToolResult("call_2", "bad JSON arguments", error=True),
        Reasoning("plain reasoning, not sent"),
        Message("assistant", "g is 8.7 m/s²."),
        Message("user", "thanks"),
    ]
    tool = {"name": "python", "description": "Run code", "parameters": {"type": "object", "properties": {"code": {"type": "string"}}}}
    request = ModelRequest("Be exact.", items, tools=[tool], temperature=0.2, max_tokens=300, tool_choice="python")
    model = make_model(extra_headers={"X-Title": "ipyagent"})
    await collect(model.stream(request))
    (received,) = scripted_server.requests
    assert received.path == "/v1/chat/completions"
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.headers["x-title"] == "ipyagent"
    assert received.body == {
        "model": "test-model",
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
        "max_tokens": 300,
        "tool_choice": {"type": "function", "function": {"name": "python"}},
        "tools": [{"type": "function", "function": tool}],
        "messages": [
            {"role": "system", "content": "Be exact."},
            {"role": "user", "content": "Summary of earlier conversation: The user wants the ISS gravity."},
            {"role": "user", "content": "Compute g at the ISS"},
            {
                "role": "assistant",
                "content": "I'll compute it.",
                "reasoning_details": details,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "python", "arguments": '{"code": "r = 6771e3"}'}},
                    {"id": "call_2", "type": "function", "function": {"name": "python", "arguments": '{"code": '}},
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
            {"role": "tool", "tool_call_id": "call_2", "content": "bad JSON arguments"},
            {"role": "assistant", "content": "g is 8.7 m/s²."},
            {"role": "user", "content": "thanks"},
        ],
    }


async def test_minimal_request_and_no_key(scripted_server, make_model) -> None:
    scripted_server.script([reply_text("hi")])
    await collect(make_model(api_key=None).stream(ModelRequest("", [Message("user", "hi")], tool_choice="auto")))
    (received,) = scripted_server.requests
    assert "authorization" not in received.headers
    assert received.body["messages"] == [{"role": "user", "content": "hi"}]
    assert received.body["tool_choice"] == "auto"
    assert not {"tools", "temperature", "max_tokens"} & set(received.body)


async def test_a_turn_round_trips_through_the_next_request(scripted_server, make_model) -> None:
    """What one turn assembled (ids, opaque reasoning) is what the next request sends back."""
    reasoning = {"choices": [{"index": 0, "delta": {"reasoning_details": [{"type": "reasoning.encrypted", "data": "XYZ", "index": 0}]}}]}
    call = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "", "function": {"name": "f", "arguments": "{}"}, "extra_content": {"google": {"thought_signature": "sig"}}}]}}]}
    scripted_server.script([raw_sse(sse_event(reasoning) + sse_event(call)), reply_text("done")])
    model = make_model()
    _, turn = await collect(model.stream(ask()))
    (tc,) = turn.tool_calls
    await collect(model.stream(ask(Message("user", "go"), turn.reasoning, tc, ToolResult(tc.id, "42"))))
    sent = scripted_server.requests[1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[2] == {
        "role": "assistant",
        "content": "",  # never null: llama-cpp-python refuses it
        "reasoning_details": [{"type": "reasoning.encrypted", "data": "XYZ", "index": 0}],
        "tool_calls": [{"id": tc.id, "type": "function", "function": {"name": "f", "arguments": "{}"}, "extra_content": {"google": {"thought_signature": "sig"}}}],
    }
    assert sent[3] == {"role": "tool", "tool_call_id": tc.id, "content": "42"}


async def test_client_lifecycle(scripted_server) -> None:
    scripted_server.script([reply_text("a"), reply_text("b")])
    own = OpenAIChatModel("m", scripted_server.base_url)
    await collect(own.stream(ask()))
    await own.aclose()
    assert own._client is None
    async with httpx.AsyncClient() as client:
        async with OpenAIChatModel("m", scripted_server.base_url, client=client) as shared:
            await collect(shared.stream(ask()))
        assert not client.is_closed  # an injected client belongs to the caller


# ------------------------------------------------------------------ helpers


def test_parse_arguments() -> None:
    assert parse_arguments('{"a": [1, {"b": null}]}') == ({"a": [1, {"b": None}]}, None)
    assert parse_arguments("null") == ({}, "null")
    # What a small model writes behind native tools: a regex's \\w with one backslash.
    assert parse_arguments('{"code": "re.findall(r\'\\w+\', t)"}') == (
        {"code": "re.findall(r'\\w+', t)"}, None)
    # A reply cut short is not closed into a call that runs: it stays unreadable.
    cut = '{"code": "x = 1  # {n}'
    assert parse_arguments(cut) == ({}, cut)


async def test_sse_spec_details() -> None:
    text = ": comment\n\nevent: ping\ndata: {}\n\nevent: delta\r\ndata: line one\r\ndata: line two\r\nid: 7\r\n\r\ndata: unterminated"
    events = [e async for e in aiter_events_from_text(text, chunk_size=3)]
    assert [(e.event, e.data, e.id) for e in events] == [("delta", "line one\nline two", "7")]


def test_max_tokens_field_follows_the_server() -> None:
    request = ModelRequest(system="", items=[], max_tokens=7)
    local = OpenAIChatModel("m", "http://127.0.0.1:1/v1").payload(request)
    official = OpenAIChatModel("m", "https://api.openai.com/v1").payload(request)
    assert local["max_tokens"] == 7 and "max_completion_tokens" not in local
    assert official["max_completion_tokens"] == 7 and "max_tokens" not in official


async def test_a_server_that_refuses_stream_options_is_asked_again_without(scripted_server, make_model) -> None:
    scripted_server.script([
        http_error(400, {"error": {"message": "Unrecognized request argument supplied: stream_options"}}),
        reply_text("fine", usage=False),
        reply_text("again", usage=False),
    ])
    model = make_model()
    _, turn = await collect(model.stream(ask()))
    assert turn.text == "fine"
    _, turn = await collect(model.stream(ask()))
    assert turn.text == "again"
    bodies = scripted_server.bodies
    assert "stream_options" in bodies[0] and "stream_options" not in bodies[1]
    assert "stream_options" not in bodies[2] and len(bodies) == 3


# ------------------------------------------------------------------ shapes found by the wire audit


def _chunks(*deltas: dict[str, Any], finish: str = "tool_calls") -> str:
    base = {"id": "c", "object": "chat.completion.chunk", "model": "m"}
    events = [sse_event({**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]})
              for d in deltas]
    events.append(sse_event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}))
    return "".join(events) + "data: [DONE]\n\n"


def _whole_call(name: str, arguments: str, call_id: str | None = None, index: int | None = 0) -> dict[str, Any]:
    wire: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        wire["id"] = call_id
    if index is not None:
        wire["index"] = index
    return {"tool_calls": [wire]}


@pytest.mark.parametrize("ids,index", [(("call_a", "call_b"), 0), ((None, None), 0), (("", ""), None)],
                         ids=["ollama-index-0-distinct-ids", "index-0-no-ids", "no-index-empty-ids"])
async def test_parallel_calls_that_share_an_index_stay_separate(scripted_server, make_model, ids, index) -> None:
    scripted_server.script([raw_sse(_chunks(_whole_call("add", '{"a": 1, "b": 2}', ids[0], index),
                                   _whole_call("add", '{"a": 3, "b": 4}', ids[1], index)))])
    _, turn = await collect(make_model().stream(ask()))
    assert [(c.name, c.arguments, c.raw_arguments) for c in turn.tool_calls] == [
        ("add", {"a": 1, "b": 2}, None), ("add", {"a": 3, "b": 4}, None)]
    assert len({c.id for c in turn.tool_calls}) == 2
    if ids[0]:
        assert [c.id for c in turn.tool_calls] == list(ids)


async def test_a_name_repeated_on_every_fragment_is_still_one_call(scripted_server, make_model) -> None:
    pieces = ['{"a": ', '1, "b"', ': 2}', '']
    scripted_server.script([raw_sse(_chunks(*(_whole_call("add", p, "call_x") for p in pieces)))])
    _, turn = await collect(make_model().stream(ask()))
    assert [(c.id, c.arguments) for c in turn.tool_calls] == [("call_x", {"a": 1, "b": 2})]


async def test_reasoning_content_goes_back_on_tool_calling_turns(scripted_server, make_model) -> None:
    """DeepSeek's thinking mode answers 400 when a tool-calling turn lacks its reasoning."""
    scripted_server.script([raw_sse(_chunks({"role": "assistant", "reasoning_content": "Add them."},
                                   _whole_call("add", '{"a": 1, "b": 2}', "call_1"))),
                   reply_text("3.")])
    model = make_model()
    _, turn = await collect(model.stream(ask()))
    assert turn.reasoning is not None and turn.reasoning.content == "Add them."
    history = [Message("user", "add"), turn.reasoning, *turn.tool_calls,
               ToolResult("call_1", "3", name="add")]
    await collect(model.stream(ask(*history)))
    assistant = scripted_server.requests[1].body["messages"][2]
    assert assistant["reasoning_content"] == "Add them." and assistant["tool_calls"]
    # A turn without tool calls does not send its reasoning back (DeepSeek ignores it).
    plain = [Message("user", "hi"), Reasoning("Think.", details={"text_field": "reasoning_content"}),
             Message("assistant", "Hello.")]
    from ipyagent.models.openai_chat import to_chat_messages
    assert "reasoning_content" not in to_chat_messages("", plain)[1]
    # Reasoning from a server that never sent the field is never sent.
    assert "reasoning_content" not in to_chat_messages(
        "", [Reasoning("Think."), ToolCall("c", "add", {})])[0]


@pytest.mark.parametrize("pieces", [
    ["<think>", "\nI should add.\n", "</think>\n\nThe sum is 3."],
    ["<thi", "nk>I should", " add.</th", "ink>The sum is 3."],
    ["I should add.\n</think>\n\nThe sum is 3."],  # the template opened <think> itself
], ids=["whole-tags", "split-tags", "no-opening-tag"])
async def test_think_tags_in_content_become_reasoning(scripted_server, make_model, pieces) -> None:
    scripted_server.script([raw_sse(_chunks(*({"content": p} for p in pieces), finish="stop"))])
    events, turn = await collect(make_model().stream(ask()))
    assert turn.text == "The sum is 3."
    assert turn.reasoning is not None and turn.reasoning.content.strip() == "I should add."
    if "<think>" in "".join(pieces):  # streamed to the right place as it came
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "The sum is 3."


async def test_content_that_merely_mentions_think_is_text(scripted_server, make_model) -> None:
    scripted_server.script([raw_sse(_chunks({"content": "Use <think> tags"}, {"content": " sparingly."},
                                   finish="stop"))])
    _, turn = await collect(make_model().stream(ask()))
    assert turn.text == "Use <think> tags sparingly." and turn.reasoning is None


async def test_a_surrogate_pair_split_across_chunks_is_joined(scripted_server, make_model) -> None:
    base = '{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":%s}]}'
    text = ("data: " + base % '{"content":"Smile \\ud83d"}' + "\n\n"
            + "data: " + base % '{"content":"\\ude00 now, lone \\udc00"}' + "\n\n"
            + "data: " + base % '{"tool_calls":[{"index":0,"id":"c1","function":{"name":"say","arguments":"{\\"t\\": \\"\\ud83d"}}]}' + "\n\n"
            + "data: " + base % '{"tool_calls":[{"index":0,"function":{"arguments":"\\ude00\\"}"}}]}' + "\n\n"
            + "data: [DONE]\n\n")
    scripted_server.script([raw_sse(text)])
    _, turn = await collect(make_model().stream(ask()))
    assert turn.text == "Smile \U0001F600 now, lone \ufffd"
    assert turn.tool_calls[0].arguments == {"t": "\U0001F600"}
    json.dumps(turn.text).encode("utf-8")  # nothing left that cannot be sent again
