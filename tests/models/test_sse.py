"""Server-sent events: httpx-sse framing, pings dropped, llama.cpp's ``error:`` lines read."""

from __future__ import annotations

import json

import httpx
import pytest

from ipyagent.models.sse import aiter_events, aiter_events_from_text, is_event_stream, sse_response


async def events(body: str | bytes, chunk_size: int | None = None) -> list[tuple[str, str]]:
    return [(e.event, e.data) async for e in aiter_events_from_text(body, chunk_size=chunk_size)]


@pytest.mark.parametrize("chunk_size", [None, 1, 3, 7])
async def test_spec_framing_survives_any_cut(chunk_size: int | None) -> None:
    body = (": a comment\n\n"
            "event: delta\ndata: line one\ndata: line two\n\n"
            "event: ping\ndata: {}\n\n"
            "data: {\"x\": \"é✓\"}\r\n\r\n"
            "id: 7\ndata: last\n\n")
    assert await events(body, chunk_size) == [
        ("delta", "line one\nline two"), ("message", '{"x": "é✓"}'), ("message", "last")]


@pytest.mark.parametrize("chunk_size", [None, 1, 2, 4])
async def test_an_error_line_becomes_an_error_event(chunk_size: int | None) -> None:
    error = {"error": {"code": 500, "message": "context full"}}
    body = f"data: {{\"a\": 1}}\n\nerror: {json.dumps(error)}\n\n"
    assert await events(body, chunk_size) == [("message", '{"a": 1}'), ("error", json.dumps(error))]
    assert await events(f"error: {json.dumps(error)}\n\n", chunk_size) == [("error", json.dumps(error))]


async def test_error_inside_a_line_or_a_field_name_is_left_alone() -> None:
    assert await events("data: error: not a field\n\n") == [("message", "error: not a field")]
    assert await events("event: error_ish\ndata: x\n\n") == [("error_ish", "x")]


async def test_a_final_event_without_its_blank_line_is_lost() -> None:
    assert await events("data: one\n\ndata: cut off") == [("message", "one")]


def test_is_event_stream_reads_the_content_type() -> None:
    assert is_event_stream(httpx.Response(200, headers={"content-type": "Text/Event-Stream; charset=utf-8"}))
    assert not is_event_stream(httpx.Response(200, headers={"content-type": "application/json"}))
    assert not is_event_stream(httpx.Response(200))


async def test_sse_response_cuts_bytes_not_characters() -> None:
    response = sse_response("data: é\n\n", chunk_size=1, headers={"x-test": "1"}, status_code=201)
    pieces = [piece async for piece in response.aiter_raw()]
    assert all(len(p) == 1 for p in pieces) and b"".join(pieces) == "data: é\n\n".encode()
    assert response.status_code == 201 and response.headers["x-test"] == "1" and is_event_stream(response)


async def test_aiter_events_reads_a_live_response() -> None:
    response = sse_response(b"data: hi\n\n")
    assert [e.data async for e in aiter_events(response)] == ["hi"]
