"""A real OpenAI-compatible HTTP server on 127.0.0.1 that replays scripted replies.

Usage::

    with ScriptedServer() as srv:                  # srv.base_url == "http://127.0.0.1:PORT/v1"
        srv.script([
            reply_tool_calls([("python", {"code": "1+1"})], fragments=3),
            http_error(429, {"error": {"message": "slow down"}}, headers={"retry-after": "0"}),
            reply_text("The answer is 2."),
        ])
        ...                                         # point a client at srv.base_url
        srv.requests[0].body["messages"]            # what the client sent
        srv.requests[0].headers["authorization"]

Every POST (to any path) pops the next reply; a reply may be a callable
``body -> Reply`` to compute it from the request. ``fallback`` answers when the script
is empty (default: a 500 that says so). ``GET /v1/models`` lists one model.
Streams are real chunked ``text/event-stream`` responses, one HTTP chunk per event,
in OpenAI's shape, with switches for the quirks real servers have.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Literal, Union

__all__ = [
    "ScriptedServer",
    "Received",
    "Reply",
    "Completion",
    "HTTPError",
    "RawSSE",
    "JSONReply",
    "Drop",
    "reply_text",
    "reply_tool_calls",
    "http_error",
    "raw_sse",
    "json_reply",
    "stream_error",
    "drop_connection_mid_stream",
    "Reset",
    "Endless",
    "Trickle",
    "sse_event",
    "collect",
]


def sse_event(data: Any, event: str | None = None) -> str:
    """One SSE event: ``data`` as JSON (a str is sent as is)."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return head + "".join(f"data: {line}\n" for line in text.split("\n")) + "\n"


def _split(text: str, pieces: int) -> list[str]:
    """``text`` cut into ``pieces`` nearly equal parts (at least one, maybe empty)."""
    pieces = max(1, min(pieces, len(text)))
    size, extra = divmod(len(text), pieces)
    bounds = [i * size + min(i, extra) for i in range(pieces + 1)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def _words(text: str) -> list[str]:
    return re.findall(r"\s*\S+\s*|\s+", text) or []


@dataclass
class Received:
    """One request the server got."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any  # parsed JSON, or the text when it is not JSON


class Reply:
    """Something the server answers one request with."""

    delay: float = 0.0  # seconds to wait before answering (for timeout tests)

    def respond(self, h: _Handler, body: Any, seq: int) -> None:
        raise NotImplementedError


ToolCallSpec = Union[tuple[str, Any], tuple[str, Any, str]]  # (name, arguments[, id])


@dataclass
class Completion(Reply):
    """An assistant turn, streamed as chat chunks (or one JSON body when not streaming)."""

    text: str = ""
    tool_calls: list[ToolCallSpec] = field(default_factory=list)
    reasoning: str = ""
    reasoning_field: str = "reasoning_content"  # or "reasoning" (Ollama, OpenRouter)
    finish_reason: str | None = None  # default: "tool_calls" when there are calls, else "stop"
    usage: dict[str, Any] | bool = True  # True: estimated from the request; False: none
    usage_on: Literal["final", "finish", "every"] = "final"  # where usage rides
    stream: bool | None = None  # None: as the request asks
    text_pieces: int | None = None  # None: one chunk per word
    fragments: int = 1  # argument fragments per tool call (1 = whole, as Ollama sends)
    repeat_id_name: bool = False  # id/name on every chunk of a call (some servers do)
    omit_index: bool = False  # no ``index`` on tool-call deltas
    finish_own_chunk: bool = True  # finish_reason in its own chunk with an empty delta
    done: bool = True  # end with ``data: [DONE]``
    keepalives: bool = False  # ``:`` comment lines and ``event: ping`` between chunks
    model: str = "scripted-model"
    delay: float = 0.0

    def _calls(self, seq: int) -> list[tuple[str, str, str]]:
        out = []
        for i, spec in enumerate(self.tool_calls):
            name, args = spec[0], spec[1]
            call_id = spec[2] if len(spec) > 2 else f"call_{seq}_{i}"  # type: ignore[misc]
            out.append((call_id, name, args if isinstance(args, str) else json.dumps(args)))
        return out

    def _usage(self, body: Any) -> dict[str, Any] | None:
        if isinstance(self.usage, dict):
            return self.usage
        if not self.usage:
            return None
        # A rough, deterministic count (4 characters a token) so context-size logic is testable;
        # the tools count too, as on a real server whose template renders them.
        sent = json.dumps(body.get("messages", []) if isinstance(body, dict) else body)
        if isinstance(body, dict) and body.get("tools"):
            sent += json.dumps(body["tools"])
        made = self.text + self.reasoning + "".join(json.dumps(c) for c in self.tool_calls)
        prompt, completion = max(1, len(sent) // 4), max(1, len(made) // 4)
        total = prompt + completion
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}

    def respond(self, h: _Handler, body: Any, seq: int) -> None:
        asked = isinstance(body, dict) and bool(body.get("stream"))
        stream = asked if self.stream is None else self.stream
        if stream:
            h.send_stream(200, "text/event-stream", self.events(body, seq))
        else:
            h.send_json(200, self.completion(body, seq))

    def completion(self, body: Any, seq: int) -> dict[str, Any]:
        """The non-streamed ``chat.completion`` body."""
        calls = self._calls(seq)
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.reasoning:
            message[self.reasoning_field] = self.reasoning
        if calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls
            ]
        finish = self.finish_reason or ("tool_calls" if calls else "stop")
        return {
            "id": f"chatcmpl-{seq}", "object": "chat.completion", "created": 0, "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": self._usage(body),
        }

    def chunks(self, body: Any, seq: int) -> list[dict[str, Any]]:
        """The ``chat.completion.chunk`` objects of the stream, in order."""
        usage = self._usage(body)
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if self.reasoning:
            deltas += [{self.reasoning_field: p} for p in _words(self.reasoning)]
        if self.text:
            pieces = _split(self.text, self.text_pieces) if self.text_pieces else _words(self.text)
            deltas += [{"content": p} for p in pieces]
        for index, (call_id, name, args) in enumerate(self._calls(seq)):
            for j, piece in enumerate(_split(args, self.fragments)):
                call: dict[str, Any] = {"function": {"arguments": piece}}
                if not self.omit_index:
                    call["index"] = index
                if j == 0 or self.repeat_id_name:
                    call.update(id=call_id, type="function")
                    call["function"]["name"] = name
                deltas.append({"tool_calls": [call]})
        finish = self.finish_reason or ("tool_calls" if self.tool_calls else "stop")
        base: dict[str, Any] = {
            "id": f"chatcmpl-{seq}", "object": "chat.completion.chunk", "created": 0, "model": self.model
        }
        chunks: list[dict[str, Any]] = [
            {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
        ]
        if self.finish_own_chunk:
            chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        else:
            chunks[-1]["choices"][0]["finish_reason"] = finish
        if usage is not None:
            if self.usage_on == "final":
                chunks.append({**base, "choices": [], "usage": usage})
            elif self.usage_on == "finish":
                chunks[-1]["usage"] = usage
            else:
                for chunk in chunks:
                    chunk["usage"] = usage
        return chunks

    def events(self, body: Any, seq: int) -> list[str]:
        """The SSE text of the stream, one string per event."""
        events = [sse_event(chunk) for chunk in self.chunks(body, seq)]
        if self.keepalives:
            keepalive = ": keep-alive\n\nevent: ping\ndata: {}\n\n"
            events = [keepalive + event for event in events]
        return events + (["data: [DONE]\n\n"] if self.done else [])


@dataclass
class HTTPError(Reply):
    """A non-2xx answer with a JSON (or text) body."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0

    def respond(self, h: _Handler, body: Any, seq: int) -> None:
        default = {"error": {"message": f"scripted HTTP {self.status}"}}
        h.send_json(self.status, default if self.body is None else self.body, self.headers)


@dataclass
class JSONReply(Reply):
    """A JSON body sent as is (a non-streamed completion, or anything odd)."""

    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0

    def respond(self, h: _Handler, body: Any, seq: int) -> None:
        h.send_json(self.status, self.body, self.headers)


@dataclass
class RawSSE(Reply):
    """Raw text streamed as is: ``chunk_size`` bytes per HTTP chunk (None: one chunk per event)."""

    text: str
    status: int = 200
    content_type: str = "text/event-stream"
    chunk_size: int | None = None
    delay: float = 0.0

    def respond(self, h: _Handler, body: Any, seq: int) -> None:
        data = self.text.encode("utf-8")
        if self.chunk_size:
            pieces = [data[i : i + self.chunk_size] for i in range(0, len(data), self.chunk_size)]
        else:
            pieces = [p.encode("utf-8") for p in re.findall(r".*?(?:\r?\n\r?\n|$)", self.text, re.S) if p]
        h.send_stream(self.status, self.content_type, pieces)


@dataclass
class Drop(Reply):
    """Start a 200 stream, send ``before`` (raw SSE), then cut the connection mid-body."""

    before: str = ""
    delay: float = 0.0

    def respond(self, h: _Handler, body: Any, seq: int) -> None:
        h.send_stream(200, "text/event-stream", [self.before] if self.before else [], end=False)
        h.drop()


@dataclass
class Reset(Reply):
    """Start a 200 stream, send ``before``, then reset the connection (TCP RST: a read error)."""

    before: str = ""
    delay: float = 0.0

    def respond(self, h: _Handler, body: Any, seq: int) -> None:
        h.send_stream(200, "text/event-stream", [self.before] if self.before else [], end=False)
        h.reset()


@dataclass
class Endless(Reply):
    """Send ``before``, then ``piece`` every ``every`` seconds until the client goes (or
    ``limit`` seconds pass): keep-alive comments forever, or events that never finish."""

    piece: str = ": keep-alive\n\n"
    before: str = ""
    every: float = 0.1
    limit: float = 60.0
    delay: float = 0.0

    def respond(self, h: _Handler, body: Any, seq: int) -> None:
        h.send_stream(200, "text/event-stream", [self.before] if self.before else [], end=False)
        stop = time.monotonic() + self.limit
        while time.monotonic() < stop:
            time.sleep(self.every)
            h.send_chunk(self.piece)  # raises once the client has gone
        h.drop()


@dataclass
class Trickle(Reply):
    """Send ``before`` at once, then ``text`` one byte per HTTP chunk every ``every`` seconds."""

    text: str
    before: str = ""
    every: float = 0.2
    delay: float = 0.0

    def respond(self, h: _Handler, body: Any, seq: int) -> None:
        h.send_stream(200, "text/event-stream", [self.before] if self.before else [], end=False)
        for byte in self.text.encode("utf-8"):
            time.sleep(self.every)
            h.send_chunk(bytes([byte]))
        h.wfile.write(b"0\r\n\r\n")


def reply_text(text: str, **options: Any) -> Completion:
    """A text turn; ``options`` are ``Completion`` fields (quirk switches)."""
    return Completion(text=text, **options)


def reply_tool_calls(calls: Iterable[ToolCallSpec], text: str = "", **options: Any) -> Completion:
    """A turn calling tools: ``[(name, arguments_dict_or_raw_str[, id]), ...]``."""
    return Completion(text=text, tool_calls=list(calls), **options)


def http_error(status: int, body: Any = None, headers: dict[str, str] | None = None) -> HTTPError:
    """A non-2xx reply."""
    return HTTPError(status, body, dict(headers or {}))


def json_reply(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> JSONReply:
    """A JSON reply sent verbatim."""
    return JSONReply(body, status, dict(headers or {}))


def raw_sse(
    text: str, *, status: int = 200, chunk_size: int | None = None, content_type: str = "text/event-stream"
) -> RawSSE:
    """Raw stream text, e.g. a recorded response."""
    return RawSSE(text, status, content_type, chunk_size)


def stream_error(message: str, code: Any = None, *, text: str = "", as_event: bool = True) -> RawSSE:
    """A 200 stream that sends ``text``, then an error: ``event: error`` or an ``error`` key."""
    error = {"message": message, **({"code": code} if code is not None else {})}
    base = {"id": "chatcmpl-err", "object": "chat.completion.chunk", "model": "scripted-model"}
    out = "".join(
        sse_event({**base, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]})
        for w in _words(text)
    )
    if as_event:
        out += sse_event({"error": error}, "error")  # Groq's way
    else:
        out += sse_event({**base, "error": error, "choices": []})  # OpenRouter's way
    return RawSSE(out)


def drop_connection_mid_stream(before: str | Iterable[dict[str, Any]] = "") -> Drop:
    """A reply that cuts the connection after sending ``before`` (SSE text or chunk dicts)."""
    text = before if isinstance(before, str) else "".join(sse_event(c) for c in before)
    return Drop(text)


Script = Union[Reply, Callable[[Any], Reply]]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked transfer, as real servers do
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def _headers(self, status: int, content_type: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in (extra or {}).items():
            self.send_header(name, value)

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = (payload if isinstance(payload, str) else json.dumps(payload)).encode("utf-8")
        ctype = "text/plain; charset=utf-8" if isinstance(payload, str) else "application/json"
        self._headers(status, ctype, headers)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_stream(
        self, status: int, content_type: str, pieces: Iterable[str | bytes], *, end: bool = True
    ) -> None:
        self._headers(status, content_type, {"Cache-Control": "no-cache", "Transfer-Encoding": "chunked"})
        self.end_headers()
        for piece in pieces:
            self.send_chunk(piece)
        if end:
            self.wfile.write(b"0\r\n\r\n")

    def send_chunk(self, piece: str | bytes) -> None:
        """One HTTP chunk of a chunked body, sent now."""
        data = piece.encode("utf-8") if isinstance(piece, str) else piece
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    def drop(self) -> None:
        """Close the socket without ending the chunked body: the client sees a broken stream."""
        self.wfile.flush()
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def reset(self) -> None:
        """Abort the connection with a TCP RST (SO_LINGER 0): the client's read fails."""
        self.wfile.flush()
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw

    def _record(self, body: Any) -> int:
        headers = {k.lower(): v for k, v in self.headers.items()}
        return self.server.owner._record(Received(self.command, self.path, headers, body))

    def do_GET(self) -> None:
        # Apart from the POSTs: a client may look at /models and /props (model profiles,
        # ``ipyagent.models.profiles.server``) without shifting the scripted exchanges.
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.owner.gets.append(Received(self.command, self.path, headers, None))
        if self.path.rstrip("/").endswith("/models"):
            owner = self.server.owner
            model = {"id": owner.model, "object": "model", "owned_by": owner.owned_by}
            self.send_json(200, {"object": "list", "data": [model]})
        else:
            self.send_json(404, {"error": {"message": f"ScriptedServer: no GET {self.path}"}})

    def do_POST(self) -> None:
        body = self._read_body()
        owner = self.server.owner
        if self.path == "/extras/tokenize" and owner.owned_by == "me":
            # llama-cpp-python's tokenizer, apart from the script like the GETs: one token a
            # character, but the special tokens the test gave it.
            owner.gets.append(Received(self.command, self.path, {}, body))
            text = str((body or {}).get("input", "")) if isinstance(body, dict) else ""
            count = 1 if text in owner.special_tokens else len(text)
            self.send_json(200, {"tokens": list(range(count))})
            return
        seq = self._record(body)
        reply = self.server.owner._next(body, f"POST {self.path}")
        try:
            if reply.delay:
                time.sleep(reply.delay)
            reply.respond(self, body, seq)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (timeout, cancel): fine


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client closing a kept-alive connection (timeouts, dropped streams) is normal.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ScriptedServer:
    """An OpenAI-compatible server on 127.0.0.1 (free port) replaying a script of replies."""

    def __init__(
        self,
        replies: Iterable[Script] = (),
        *,
        fallback: Callable[[Any], Reply] | None = None,
        model: str = "scripted-model",
        owned_by: str = "scripted",  # "me": what llama-cpp-python's /v1/models says
        special_tokens: tuple[str, ...] = (),  # "me" only: what /extras/tokenize reads as one token
    ) -> None:
        self.model = model
        self.owned_by = owned_by
        self.special_tokens = special_tokens
        self.fallback = fallback
        self.requests: list[Received] = []  # the POSTs, in order
        self.gets: list[Received] = []  # the GETs
        self._script: list[Script] = list(replies)
        self._lock = threading.Lock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> ScriptedServer:
        """Bind a free port and serve in a daemon thread."""
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        # A short poll interval keeps close() (which waits for one poll) fast.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.02,), name="scripted-server", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and free the port."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "ScriptedServer is not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what a client's ``base_url`` should be."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- script

    def script(self, replies: Iterable[Script]) -> None:
        """Append replies; each POST takes the next one."""
        with self._lock:
            self._script.extend(replies)

    @property
    def remaining(self) -> int:
        """How many scripted replies are not used yet."""
        with self._lock:
            return len(self._script)

    @property
    def bodies(self) -> list[Any]:
        """The JSON bodies of the POSTs received, in order."""
        return [r.body for r in self.requests if r.method == "POST"]

    def _record(self, received: Received) -> int:
        with self._lock:
            self.requests.append(received)
            return len(self.requests)

    def _next(self, body: Any, what: str) -> Reply:
        with self._lock:
            entry = self._script.pop(0) if self._script else self.fallback
        if entry is None:
            message = f"ScriptedServer: script is empty, no reply for {what} (request {len(self.requests)})"
            return HTTPError(500, {"error": {"message": message}})
        return entry if isinstance(entry, Reply) else entry(body)


async def collect(stream: Any) -> tuple[list[Any], Any]:
    """Drain a model's ``stream(...)``: ``(events, final Turn)``."""
    events = [event async for event in stream]
    assert events, "the stream yielded nothing"
    return events, events[-1].turn
