"""Conformance: every recorded Chat Completions response becomes what its ``expected`` says.

The corpus (``tests/data/corpus``, or ``$IPYAGENT_CORPUS``) holds real
responses from real providers. Each is replayed through ``httpx.MockTransport`` into
``OpenAIChatModel`` — the full client path: HTTP status, SSE framing, turn assembly —
once whole and once cut into 7-byte network reads (splitting lines and UTF-8 characters).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from ipyagent.context.items import Message, ToolCall, ToolResult
from ipyagent.errors import (
    ModelResponseError,
    ModelStreamError,
    RateLimitError,
    RequestRejected,
    ServerError,
)
from ipyagent.models.base import (
    ReasoningDelta,
    Retrying,
    TextDelta,
    ToolCallDelta,
    TurnComplete,
)
from ipyagent.models.openai_chat import OpenAIChatModel, to_chat_messages, to_chat_tools
from ipyagent.models.sse import aiter_events_from_text
from tests.helpers.scripted_apis import CORPUS, LOCAL_CORPUS, corpus_files, load_record, replay_record

URL = "https://provider.example/v1"
KEY = "sk-SENTINEL-corpus-0123"


def _chat_files(where: Any = lambda rec: True) -> list[Any]:
    """Recordings of the Chat Completions API (those ``where(record)`` accepts) as params."""
    records = [(p, json.loads(p.read_text())) for p in corpus_files()]
    chat = [(p, r) for p, r in records if r["api"] == "chat.completions"]
    # A missing folder must fail loudly, not collect zero tests (which pass).
    if not any(p.parent == CORPUS for p, _ in chat) or not any(p.parent == LOCAL_CORPUS for p, _ in chat):
        return [pytest.param(None, id="corpus-missing")]
    return [pytest.param(p, id=p.stem) for p, r in chat if where(r)]


def _load(path: Path | None) -> dict[str, Any]:
    return load_record(path)


async def _replay(rec: dict[str, Any], chunk_size: int | None) -> tuple[list[Any], Exception | None, list[httpx.Request]]:
    return await replay_record(
        lambda client: OpenAIChatModel("m", URL, KEY, client=client, max_retries=2, backoff=0),
        rec, chunk_size)


def _check_turn(turn: Any, expected: dict[str, Any]) -> None:
    assert turn.text == (expected.get("text") or "")
    assert turn.finish_reason == expected.get("finish_reason")
    assert turn.usage == expected.get("usage")
    if "reasoning" in expected:
        assert turn.reasoning is not None and turn.reasoning.content == expected["reasoning"]
    else:
        assert turn.reasoning is None or turn.reasoning.content == ""
    want_calls = expected.get("tool_calls") or []
    assert [c.name for c in turn.tool_calls] == [c["name"] for c in want_calls]
    for got, want in zip(turn.tool_calls, want_calls):
        assert got.arguments == want["arguments"]
        assert got.raw_arguments is None
        if want["id"]:
            assert got.id == want["id"]
        else:  # recorded as "": a fresh, unique id stands in
            assert got.id and got.id.startswith("call_")
    assert len({c.id for c in turn.tool_calls}) == len(turn.tool_calls)


def _replays() -> list[Any]:
    """Each recording once whole; streams also cut into 7-byte network reads."""
    out = []
    for param in _chat_files():
        (path,) = param.values
        out.append(pytest.param(path, None, id=f"{param.id}-whole"))
        if path is not None and json.loads(path.read_text())["stream"]:
            out.append(pytest.param(path, 7, id=f"{param.id}-7-byte-reads"))
    return out


@pytest.mark.parametrize("path, chunk_size", _replays())
async def test_recorded_response(path: Path | None, chunk_size: int | None) -> None:
    rec = _load(path)
    expected = rec["expected"]
    events, error, requests = await _replay(rec, chunk_size)

    if expected.get("error"):
        status = expected["http_status"]
        assert rec["http_status"] == status
        want = RateLimitError if status == 429 else ServerError if status >= 500 else RequestRejected
        assert type(error) is want, error
        assert error.status_code == status  # type: ignore[attr-defined]
        assert error.body == expected["error_body"]  # type: ignore[attr-defined]
        text = str(error)
        envelope = expected["error_body"]["error"]
        head, *more = envelope["message"].splitlines()
        if more:  # a many-line message (pydantic's validation errors) comes as one line
            assert head.rstrip(":").strip() in text
        else:
            assert envelope["message"] in text
        if "content-null" in path.stem:  # the field at fault, not the union's six mismatches
            assert "messages[1].content: Input should be a valid string" in text
        if isinstance(envelope.get("metadata"), dict) and envelope["metadata"].get("raw"):
            assert envelope["metadata"]["raw"] in text  # OpenRouter's upstream reason
        assert text.startswith(f"HTTP {status}: ") and f"({URL}/chat/completions)" in text
        assert "\n" not in text and KEY not in text
        # 429 is retried (then given up, each retry announced), any other 4xx never is.
        assert len(requests) == (3 if status == 429 else 1)
        assert [type(e) for e in events] == [Retrying] * (len(requests) - 1)
        return

    if expected.get("stream_errors") and not rec["raw_response"]:
        # An empty 200 body: nothing was reported, nothing to parse; the same request
        # fails the same way, so it is not retried, and the line says what to change.
        assert type(error) is ModelResponseError, error
        text = str(error)
        assert expected["stream_errors"][0]["message"] in text and "\n" not in text
        assert "chatml-function-calling" in text and "tool_mode" in text
        assert len(requests) == 1 and not events
        return
    if expected.get("stream_errors"):
        assert isinstance(error, ModelStreamError), error
        text = str(error)
        assert expected["stream_errors"][0]["message"] in text and "\n" not in text
        assert len(requests) == 1  # an error the provider reported is not retried
        turn = error.turn  # type: ignore[attr-defined]
        assert not any(isinstance(e, TurnComplete) for e in events)
    else:
        assert error is None, error
        assert sum(isinstance(e, TurnComplete) for e in events) == 1
        assert isinstance(events[-1], TurnComplete)
        turn = events[-1].turn
    _check_turn(turn, expected)

    # What streamed out agrees with the assembled turn.
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == turn.text
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert reasoning == (turn.reasoning.content if turn.reasoning else "")
    names = {e.index: e.name for e in events if isinstance(e, ToolCallDelta) and e.name}
    assert [names[i] for i in sorted(names)] == [c.name for c in turn.tool_calls]


@pytest.mark.parametrize("path", _chat_files(lambda rec: "chunks" in rec["expected"]))
async def test_sse_framing_counts_every_chunk(path: Path | None) -> None:
    """The SSE layer sees exactly the recorded data chunks: comments, pings, [DONE] aside."""
    rec = _load(path)
    for chunk_size in (None, 5):
        events = [e async for e in aiter_events_from_text(rec["raw_response"], chunk_size=chunk_size)]
        data = [e for e in events if e.data.strip() != "[DONE]"]
        assert len(data) == rec["expected"]["chunks"]
        assert all(isinstance(json.loads(e.data), dict) for e in data)


def _items_from_wire(messages: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    system, items = "", []
    for m in messages:
        if m["role"] == "system" and not items:
            system = m["content"]
        elif m["role"] == "tool":
            items.append(ToolResult(m["tool_call_id"], m["content"]))
        elif m["role"] == "assistant":
            if m.get("content"):
                items.append(Message("assistant", m["content"]))
            for c in m.get("tool_calls") or []:
                items.append(ToolCall(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"] or "{}")))
        else:
            items.append(Message(m["role"], m["content"]))
    return system, items


@pytest.mark.parametrize("path", _chat_files(lambda rec: rec.get("request")))
def test_recorded_request_is_what_we_would_send(path: Path | None) -> None:
    """Rebuilt from items, the messages and tools match what the provider accepted."""
    rec = _load(path)
    wire = rec["request"]["messages"]
    ours = to_chat_messages(*_items_from_wire(wire))
    assert [m["role"] for m in ours] == [m["role"] for m in wire]
    for got, want in zip(ours, wire):
        assert (got.get("content") or None) == (want.get("content") or None)
        assert got.get("tool_call_id") == want.get("tool_call_id")
        got_calls = [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got.get("tool_calls", [])]
        want_calls = [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"] or "{}")) for c in want.get("tool_calls", [])]
        assert got_calls == want_calls
    tools = rec["request"].get("tools") or []
    assert to_chat_tools([t["function"] for t in tools]) == tools


async def test_synthesized_id_is_reused_for_the_tool_result() -> None:
    """Gemini sends ``id: ""``: the id we make up must pair the call with its result."""
    rec = _load(CORPUS / "gemini-openai-compat__chat-tool-call-nonstream.json")
    events, error, _ = await _replay(rec, None)
    assert error is None
    (call,) = events[-1].turn.tool_calls
    messages = to_chat_messages("", [Message("user", "time?"), call, ToolResult(call.id, "12:00")])
    assert messages[1]["tool_calls"][0]["id"] == call.id == messages[2]["tool_call_id"]


def test_no_assistant_message_is_sent_with_null_content() -> None:
    """The request llama-cpp-python refused (``content: null`` beside ``tool_calls``), rebuilt
    from items, now carries a string: every second request of a tool loop failed before."""
    rec = _load(LOCAL_CORPUS / "llama-cpp-python__500-assistant-content-null.json")
    wire = rec["request"]["messages"]
    assert any(m.get("content", "") is None for m in wire)  # what was refused
    ours = to_chat_messages(*_items_from_wire(wire))
    assert [m["role"] for m in ours] == [m["role"] for m in wire]
    assert all(isinstance(m["content"], str) for m in ours)
