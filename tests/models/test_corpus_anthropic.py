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

import pytest

from ipyagent.context.items import Message, ToolCall, ToolResult
from ipyagent.models.anthropic import (
    ANTHROPIC_VERSION,
    AnthropicModel,
    to_anthropic_messages,
    to_anthropic_tools,
)
from ipyagent.models.base import TurnComplete
from tests.helpers.scripted_apis import (
    check_rejected_once,
    check_stream_agrees,
    corpus_params,
    load_record,
    replay_record,
)

URL = "https://provider.example/v1"
KEY = "sk-ant-SENTINEL-0123"



@pytest.mark.parametrize("path, chunk_size", corpus_params("anthropic.messages", sliced=True))
async def test_recorded_response(path: Path | None, chunk_size: int | None) -> None:
    rec = load_record(path)
    events, error, seen = await replay_record(lambda client: AnthropicModel("claude-test", URL, KEY, client=client, max_retries=2, backoff=0), rec, chunk_size, system="Be brief.")
    expected = rec["expected"]

    # What went out: x-api-key (never a Bearer token), the version header, required fields.
    request = seen[0]
    assert request.url == f"{URL}/messages"
    assert request.headers["x-api-key"] == KEY and "authorization" not in request.headers
    assert request.headers["anthropic-version"] == ANTHROPIC_VERSION
    sent = json.loads(request.content)
    assert sent["system"] == "Be brief." and sent["max_tokens"] > 0 and sent["stream"] is True
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]

    if expected.get("error"):  # a 4xx is never retried
        check_rejected_once(error, expected, f"{URL}/messages", KEY, events, seen)
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

    check_stream_agrees(events, turn, with_index=True)


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
