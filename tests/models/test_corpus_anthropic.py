"""Conformance: every recorded Anthropic Messages reply becomes what its ``expected`` says.

Each recording with ``api == "anthropic.messages"`` is replayed through
``httpx.MockTransport`` into ``AnthropicModel`` (status, SSE framing with pings, padded
JSON and a missing final blank line, block assembly), once whole and once cut into
7-byte network reads. Recorded requests are rebuilt from items and compared exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from ipyagent.context.items import Message, ToolCall, ToolResult
from ipyagent.errors import RequestRejected
from ipyagent.models.anthropic import (
    ANTHROPIC_VERSION,
    AnthropicModel,
    to_anthropic_messages,
    to_anthropic_tools,
)
from ipyagent.models.base import ReasoningDelta, TextDelta, ToolCallDelta, TurnComplete
from tests.helpers.scripted_apis import corpus_params, load_record, replay_record

URL = "https://provider.example/v1"
KEY = "sk-ant-SENTINEL-0123"


async def _replay(rec: dict[str, Any], chunk_size: int | None) -> tuple[list[Any], Exception | None, list[httpx.Request]]:
    return await replay_record(
        lambda client: AnthropicModel("claude-test", URL, KEY, client=client, max_retries=2, backoff=0),
        rec, chunk_size, system="Be brief.")


@pytest.mark.parametrize("path, chunk_size", corpus_params("anthropic.messages", sliced=True))
async def test_recorded_response(path: Path | None, chunk_size: int | None) -> None:
    rec = load_record(path)
    expected = rec["expected"]
    events, error, seen = await _replay(rec, chunk_size)

    # What went out: x-api-key (never a Bearer token), the version header, required fields.
    request = seen[0]
    assert request.url == f"{URL}/messages"
    assert request.headers["x-api-key"] == KEY and "authorization" not in request.headers
    assert request.headers["anthropic-version"] == ANTHROPIC_VERSION
    sent = json.loads(request.content)
    assert sent["system"] == "Be brief." and sent["max_tokens"] > 0 and sent["stream"] is True
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]

    if expected.get("error"):
        status = expected["http_status"]
        assert type(error) is RequestRejected, error
        assert error.status_code == status and error.body == expected["error_body"]  # type: ignore[attr-defined]
        text = str(error)
        assert text.startswith(f"HTTP {status}: ") and expected["error_body"]["error"]["message"] in text
        assert f"({URL}/messages)" in text and "\n" not in text and KEY not in text
        assert not events and len(seen) == 1  # a 404 is never retried
        return

    assert error is None, error
    assert sum(isinstance(e, TurnComplete) for e in events) == 1 and isinstance(events[-1], TurnComplete)
    turn = events[-1].turn
    assert turn.text == expected["text"]
    assert turn.finish_reason == expected["stop_reason"]
    # input_tokens from message_start, the final (cumulative) output_tokens from message_delta.
    assert {k: turn.usage[k] for k in expected["usage"]} == expected["usage"]
    assert turn.model and turn.model.startswith("claude-")
    assert turn.reasoning is None
    assert [(c.id, c.name, c.arguments, c.raw_arguments) for c in turn.tool_calls] == [
        (w["id"], w["name"], w["arguments"], None) for w in expected["tool_calls"]
    ]

    # What streamed out agrees with the assembled turn.
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == turn.text
    assert not any(isinstance(e, ReasoningDelta) for e in events)
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [(e.index, e.id, e.name) for e in deltas if e.name] == [
        (i, c.id, c.name) for i, c in enumerate(turn.tool_calls)
    ]
    for i, call in enumerate(turn.tool_calls):
        assert json.loads("".join(e.arguments for e in deltas if e.index == i) or "{}") == call.arguments


def _items_from_messages(messages: list[dict[str, Any]]) -> list[Any]:
    items: list[Any] = []
    for message in messages:
        blocks = message["content"]
        if isinstance(blocks, str):
            blocks = [{"type": "text", "text": blocks}]
        for block in blocks:
            if block["type"] == "text":
                items.append(Message(message["role"], block["text"]))
            elif block["type"] == "tool_use":
                items.append(ToolCall(block["id"], block["name"], block["input"]))
            elif block["type"] == "tool_result":
                items.append(ToolResult(block["tool_use_id"], block["content"], error=bool(block.get("is_error"))))
    return items


@pytest.mark.parametrize("path", corpus_params("anthropic.messages", where=lambda rec: rec.get("request")))
def test_recorded_request_is_what_we_would_send(path: Path | None) -> None:
    """Rebuilt from items, ``messages`` and ``tools`` are exactly what the API accepted."""
    rec = load_record(path)
    wire = rec["request"]
    system, messages = to_anthropic_messages(wire.get("system", ""), _items_from_messages(wire["messages"]))
    assert system == wire.get("system", "")
    assert messages == wire["messages"]
    tools = wire.get("tools") or []
    specs = [{"name": t["name"], "description": t["description"], "parameters": t["input_schema"]} for t in tools]
    assert to_anthropic_tools(specs) == tools
