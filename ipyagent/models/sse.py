"""Server-sent events, framed by httpx-sse, for live responses and recorded text alike.

httpx-sse implements the WHATWG event-stream rules (``:`` comment lines, ``event:`` and
``id:`` fields, multi-line ``data:``, CR/LF/CRLF line ends), so no client here splits on
blank lines by hand. A recorded SSE string goes through the very same code path: it is
wrapped in an ``httpx.Response`` (optionally cut into tiny byte chunks, to prove that
events and multi-byte characters split across network reads survive).

One non-standard line is understood: llama.cpp's server reports a failure as
``error: {json}``, a field the event-stream rules ignore; it is read as an ``error`` event
so the caller's error path shows the server's message.
"""

from __future__ import annotations

import re
from typing import AsyncGenerator, AsyncIterator, Mapping

import httpx
from httpx_sse import EventSource, ServerSentEvent

__all__ = [
    "SSE_CONTENT_TYPE",
    "ServerSentEvent",
    "is_event_stream",
    "aiter_events",
    "sse_response",
    "aiter_events_from_text",
]

SSE_CONTENT_TYPE = "text/event-stream"

# Keep-alive events some servers send between real ones; they carry nothing.
_IGNORED_EVENTS = frozenset({"ping"})


def is_event_stream(response: httpx.Response) -> bool:
    """True when the response says it is ``text/event-stream``."""
    return SSE_CONTENT_TYPE in response.headers.get("content-type", "").lower()


async def aiter_events(response: httpx.Response) -> AsyncGenerator[ServerSentEvent, None]:
    """Yield the events of a streamed ``text/event-stream`` response, without pings.

    Comment lines are dropped by httpx-sse. Per the SSE spec, an event is dispatched at
    the blank line that ends it, so a final event cut off by the end of the body is lost.
    An ``error: …`` line (llama.cpp) comes out as an event named ``error``.
    """
    source = _error_lines_as_events(response.aiter_bytes())
    # Only the content type: the bytes are already decoded (no Content-Encoding again).
    content_type = response.headers.get("content-type", SSE_CONTENT_TYPE)
    rewritten = httpx.Response(response.status_code, headers={"content-type": content_type}, content=source)
    try:
        async for event in EventSource(rewritten).aiter_sse():
            if event.event in _IGNORED_EVENTS:
                continue
            yield event
    finally:
        await source.aclose()


_ERROR_FIELD = b"error:"
_ERROR_EVENT = b"event: error\ndata:"
_ERROR_AFTER_NEWLINE = re.compile(rb"(?<=[\r\n])error:")


async def _error_lines_as_events(chunks: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    """``chunks`` with every line ``error: X`` rewritten as ``event: error`` + ``data: X``.

    A chunk may end inside ``error:`` at the start of a line: those few bytes wait for
    the next chunk. Nothing else is held back, so events are not delayed.
    """
    held = b""
    at_line_start = True  # the stream begins a line
    try:
        async for chunk in chunks:
            data = held + chunk
            starts_line = at_line_start or bool(held)
            data, held = _split_partial_field(data, starts_line)
            if not data:
                continue
            if starts_line and data.startswith(_ERROR_FIELD):
                data = _ERROR_EVENT + data[len(_ERROR_FIELD):]
            yield _ERROR_AFTER_NEWLINE.sub(_ERROR_EVENT, data)
            at_line_start = data.endswith((b"\n", b"\r"))
        if held:
            yield held
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()


def _split_partial_field(data: bytes, starts_line: bool) -> tuple[bytes, bytes]:
    """``data`` cut before a last line that may yet become ``error:``, and that piece."""
    newline = max(data.rfind(b"\n"), data.rfind(b"\r"))
    last = data[newline + 1 :]
    if last and (newline >= 0 or starts_line) and len(last) < len(_ERROR_FIELD) and _ERROR_FIELD.startswith(last):
        return data[: newline + 1], last
    return data, b""


def sse_response(
    body: str | bytes,
    *,
    status_code: int = 200,
    chunk_size: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> httpx.Response:
    """A streaming ``httpx.Response`` whose body is ``body``, as ``text/event-stream``.

    ``chunk_size`` cuts the body into pieces of that many *bytes* (so a UTF-8 character
    or an SSE line can be split across reads, as on a real network).
    """
    data = body.encode("utf-8") if isinstance(body, str) else body
    all_headers = {"content-type": SSE_CONTENT_TYPE, **(headers or {})}
    if not chunk_size:
        return httpx.Response(status_code, headers=all_headers, content=data)

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(data), chunk_size):
            yield data[start : start + chunk_size]

    return httpx.Response(status_code, headers=all_headers, content=pieces())


async def aiter_events_from_text(
    body: str | bytes, *, chunk_size: int | None = None
) -> AsyncIterator[ServerSentEvent]:
    """Yield the events of a recorded SSE body (same parser as a live response)."""
    response = sse_response(body, chunk_size=chunk_size)
    try:
        async for event in aiter_events(response):
            yield event
    finally:
        await response.aclose()
