"""Conformance: every recorded Responses API reply becomes what its ``expected`` says.

Each recording in the corpus (``tests/data/corpus``, or ``$IPYAGENT_CORPUS``) with
``api == "responses"`` is replayed through ``httpx.MockTransport`` into
``OpenAIResponsesModel`` — HTTP status, SSE framing, event assembly — once whole and once
cut into 7-byte network reads. Recorded requests are rebuilt from items and compared.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ipyagent.context.items import Message, ToolCall, ToolResult
from ipyagent.models.base import TurnComplete
from ipyagent.models.openai_responses import OpenAIResponsesModel, to_responses_input, to_responses_tools
from tests.helpers.scripted_apis import (
    CORPUS,
    CORPUS_APIS,
    check_rejected_once,
    check_stream_agrees,
    corpus_params,
    load_record,
    replay_record,
)

URL = "https://provider.example/v1"
KEY = "sk-SENTINEL-responses-0123"



@pytest.mark.parametrize("path, chunk_size", corpus_params("responses", sliced=True))
async def test_recorded_response(path: Path | None, chunk_size: int | None) -> None:
    rec = load_record(path)
    events, error, seen = await replay_record(lambda client: OpenAIResponsesModel("m", URL, KEY, client=client, max_retries=2, backoff=0), rec, chunk_size, system="Be brief.")
    expected = rec["expected"]

    # What went out: Bearer auth, a stateless streamed request to /responses.
    assert seen and seen[0].url == f"{URL}/responses"
    assert seen[0].headers["authorization"] == f"Bearer {KEY}"
    sent = json.loads(seen[0].content)
    assert sent["stream"] is True and sent["store"] is False and sent["instructions"] == "Be brief."
    assert sent["input"] == [{"role": "user", "content": "hi"}]

    if expected.get("error"):  # a 4xx is never retried
        check_rejected_once(error, expected, f"{URL}/responses", KEY, events, seen)
        return

    assert error is None, error
    assert sum(isinstance(e, TurnComplete) for e in events) == 1 and isinstance(events[-1], TurnComplete)
    turn = events[-1].turn
    assert turn.text == expected["text"]
    assert turn.finish_reason == expected["status"]
    assert turn.usage == expected["usage"]
    assert turn.model and turn.model.startswith("gpt-4o")
    assert turn.reasoning is None
    want = expected["tool_calls"]
    assert [(c.id, c.name, c.arguments, c.raw_arguments) for c in turn.tool_calls] == [
        (w["call_id"], w["name"], w["arguments"], None) for w in want
    ]
    # The result must refer to call_id; the fc_ item id is kept, not used as the key.
    assert [c.meta.get("item_id") for c in turn.tool_calls] == [w["item_id"] for w in want]

    check_stream_agrees(events, turn)


def _items_from_input(entries: list[dict[str, Any]]) -> list[Any]:
    items: list[Any] = []
    for entry in entries:
        kind = entry.get("type", "message")
        if kind == "function_call":
            items.append(ToolCall(entry["call_id"], entry["name"], json.loads(entry["arguments"] or "{}")))
        elif kind == "function_call_output":
            items.append(ToolResult(entry["call_id"], entry["output"]))
        else:
            items.append(Message(entry["role"], entry["content"]))
    return items


@pytest.mark.parametrize("path", corpus_params("responses", where=lambda rec: rec.get("request")))
def test_recorded_request_is_what_we_would_send(path: Path | None) -> None:
    """Rebuilt from items, ``input`` and ``tools`` match what the API accepted."""
    rec = load_record(path)
    wire = rec["request"]["input"]
    ours = to_responses_input(_items_from_input(wire))
    assert len(ours) == len(wire)
    for got, want in zip(ours, wire):
        if want.get("type") == "function_call":  # same JSON, maybe other spacing
            assert json.loads(got.pop("arguments")) == json.loads(want["arguments"])
            want = {k: v for k, v in want.items() if k != "arguments"}
        assert got == want
    tools = rec["request"].get("tools") or []
    ours_tools = to_responses_tools([{k: t[k] for k in ("name", "description", "parameters")} for t in tools])
    strip = lambda t: {k: v for k, v in t.items() if k != "strict"}  # noqa: E731 - we send strict: false
    assert [strip(t) for t in ours_tools] == [strip(t) for t in tools]
    assert all(t["strict"] is False for t in ours_tools)


def test_every_recording_belongs_to_exactly_one_suite() -> None:
    """test_corpus.py takes chat.completions; this file responses; test_corpus_anthropic.py the rest."""
    records = [json.loads(p.read_text()) for p in sorted(CORPUS.glob("*.json"))]
    assert records, f"no recordings in {CORPUS}"
    assert {r["api"] for r in records} <= set(CORPUS_APIS)
    assert {r["api"] for r in records} == set(CORPUS_APIS)  # all three are exercised
