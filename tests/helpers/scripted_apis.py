"""Scripted replies in the shapes of the OpenAI Responses and Anthropic Messages APIs.

They plug into ``ScriptedServer`` (tests/helpers/scripted_server.py), which answers every POST
with the next scripted ``Reply``::

    with ScriptedServer([responses_reply(tool_calls=[("add", {"a": 1})]),
                         responses_reply("It is 2.")]) as srv:
        OpenAIResponsesModel("m", srv.base_url, "key")  # POSTs to {base_url}/responses

``any_api_reply`` answers in whichever shape the request path asks for
(``/chat/completions``, ``/responses``, ``/messages``), so one script drives the same
agent task over all three APIs. Also here: the corpus replay helpers shared by
test_corpus_responses.py and test_corpus_anthropic.py.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import httpx
import pytest

from ipyagent.models.sse import sse_response
from tests.helpers.scripted_server import Completion, RawSSE, Reply, ToolCallSpec, _split, _words, sse_event

__all__ = [
    "asks_summary",
    "ResponsesReply",
    "AnthropicReply",
    "AnyAPIReply",
    "responses_reply",
    "anthropic_reply",
    "any_api_reply",
    "responses_error",
    "anthropic_error",
    "CORPUS",
    "LOCAL_CORPUS",
    "corpus_files",
    "corpus_params",
    "load_record",
    "recorded_transport",
]


# One rule for where the corpus lives: tests/data/corpus in this repository (a fresh clone
# runs the suite with nothing beside it); $IPYAGENT_CORPUS points at another copy.
DATA = Path(__file__).parents[1] / "data"
CORPUS = Path(os.environ.get("IPYAGENT_CORPUS") or DATA / "corpus")
# Recordings from a real llama-cpp-python server, in the same format, beside the corpus.
LOCAL_CORPUS = Path(os.environ.get("IPYAGENT_CORPUS_LOCAL") or CORPUS.parent / "corpus-llama-cpp-python")


def asks_summary(body: dict[str, Any]) -> bool:
    """A compaction's summary request, in either form (``Agent.compact_summary``): its own
    (the summariser's system prompt, no tools) or the step's request with ipyagent's summary
    question as the last message (every wire protocol: chat, Responses, Anthropic)."""
    from ipyagent.models.base import SUMMARY_PROMPT, SUMMARY_REQUEST

    items = body.get("messages") or body.get("input") or []
    first = json.dumps(items[0], ensure_ascii=False) if items else ""
    last = json.dumps(items[-1], ensure_ascii=False) if items else ""
    system = json.dumps(body.get("system") or body.get("instructions") or "", ensure_ascii=False)
    return json.dumps(SUMMARY_PROMPT)[1:-1] in first + system or SUMMARY_REQUEST in last


def corpus_files() -> list[Path]:
    """Every recording of both folders (a missing folder fails its tests loudly elsewhere)."""
    return sorted([*CORPUS.glob("*.json"), *LOCAL_CORPUS.glob("*.json")])

def _args(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args)


def _rough_tokens(body: Any, made: str) -> tuple[int, int]:
    """A deterministic count (4 characters a token) so usage handling is testable."""
    return max(1, len(json.dumps(body)) // 4), max(1, len(made) // 4)


# ---------------------------------------------------------------- Responses API


@dataclass
class ResponsesReply(Reply):
    """A Responses turn: reasoning item?, message?, function_call items, then ``response.completed``."""

    text: str = ""
    tool_calls: list[ToolCallSpec] = field(default_factory=list)  # (name, args[, call_id])
    reasoning: str = ""  # summary text of a reasoning item
    encrypted: str | None = None  # its encrypted_content (a reasoning item is sent if either is set)
    incomplete: str | None = None  # e.g. "max_output_tokens": status incomplete
    usage: dict[str, Any] | bool = True
    fragments: int = 3  # argument deltas per call
    stream: bool | None = None  # None: as the request asks
    model: str = "scripted-responses"
    delay: float = 0.0

    def output(self, seq: int) -> list[dict[str, Any]]:
        """The finished output items."""
        items: list[dict[str, Any]] = []
        if self.reasoning or self.encrypted:
            item: dict[str, Any] = {"type": "reasoning", "id": f"rs_{seq}", "summary": []}
            if self.reasoning:
                item["summary"] = [{"type": "summary_text", "text": self.reasoning}]
            if self.encrypted:
                item["encrypted_content"] = self.encrypted
            items.append(item)
        if self.text:
            items.append({"type": "message", "id": f"msg_{seq}", "status": "completed", "role": "assistant",
                          "content": [{"type": "output_text", "text": self.text, "annotations": []}]})
        for i, spec in enumerate(self.tool_calls):
            call_id = spec[2] if len(spec) > 2 else f"call_{seq}_{i}"  # type: ignore[misc]
            items.append({"type": "function_call", "id": f"fc_{seq}_{i}", "call_id": call_id,
                          "name": spec[0], "arguments": _args(spec[1]), "status": "completed"})
        return items

    def response(self, body: Any, seq: int) -> dict[str, Any]:
        """The final ``response`` object."""
        output = self.output(seq)
        usage: Any = self.usage if isinstance(self.usage, dict) else None
        if self.usage is True:
            into, out = _rough_tokens(body, json.dumps(output))
            usage = {"input_tokens": into, "output_tokens": out, "total_tokens": into + out}
        return {"id": f"resp_{seq}", "object": "response", "model": self.model,
                "status": "incomplete" if self.incomplete else "completed",
                "incomplete_details": {"reason": self.incomplete} if self.incomplete else None,
                "error": None, "output": output, "usage": usage}

    def events(self, body: Any, seq: int) -> list[str]:
        """The SSE events, one string each, as OpenAI sends them (``event:`` + ``data.type``)."""
        final = self.response(body, seq)
        start = {**final, "status": "in_progress", "output": [], "usage": None}
        out = [("response.created", {"response": start}), ("response.in_progress", {"response": start})]
        for index, item in enumerate(final["output"]):
            added = {**item, "arguments": ""} if item["type"] == "function_call" else (
                {**item, "content": []} if item["type"] == "message" else {**item, "summary": []})
            out.append(("response.output_item.added", {"output_index": index, "item": added}))
            ref = {"item_id": item["id"], "output_index": index}
            if item["type"] == "reasoning":
                for part_index, part in enumerate(item["summary"]):
                    for word in _words(part["text"]):
                        out.append(("response.reasoning_summary_text.delta",
                                    {**ref, "summary_index": part_index, "delta": word}))
            elif item["type"] == "message":
                for word in _words(self.text):
                    out.append(("response.output_text.delta", {**ref, "content_index": 0, "delta": word}))
                out.append(("response.output_text.done", {**ref, "content_index": 0, "text": self.text}))
            else:
                for piece in _split(item["arguments"], self.fragments):
                    out.append(("response.function_call_arguments.delta", {**ref, "delta": piece}))
                out.append(("response.function_call_arguments.done", {**ref, "arguments": item["arguments"]}))
            out.append(("response.output_item.done", {"output_index": index, "item": item}))
        done = "response.incomplete" if self.incomplete else "response.completed"
        out.append((done, {"response": final}))
        return [sse_event({"type": kind, "sequence_number": n, **data}, kind) for n, (kind, data) in enumerate(out)]

    def respond(self, h: Any, body: Any, seq: int) -> None:
        stream = self.stream if self.stream is not None else bool(isinstance(body, dict) and body.get("stream"))
        if stream:
            h.send_stream(200, "text/event-stream", self.events(body, seq))
        else:
            h.send_json(200, self.response(body, seq))


def responses_reply(text: str = "", **options: Any) -> ResponsesReply:
    """A Responses turn; ``options`` are ``ResponsesReply`` fields."""
    return ResponsesReply(text=text, **options)


def responses_error(message: str, code: str = "server_error", *, failed: bool = True, text: str = "") -> RawSSE:
    """A 200 stream that sends ``text`` then fails: ``response.failed`` or a bare ``error`` event."""
    out = "".join(sse_event({"type": "response.output_text.delta", "output_index": 0, "delta": w},
                            "response.output_text.delta") for w in _words(text))
    if failed:
        response = {"id": "resp_x", "status": "failed", "output": [], "usage": None,
                    "error": {"code": code, "message": message}}
        out += sse_event({"type": "response.failed", "response": response}, "response.failed")
    else:
        out += sse_event({"type": "error", "code": code, "message": message, "param": None}, "error")
    return RawSSE(out)


# ---------------------------------------------------------------- Anthropic Messages API


@dataclass
class AnthropicReply(Reply):
    """A Messages turn: thinking?, redacted thinking?, text?, tool_use blocks, then the stop."""

    text: str = ""
    tool_calls: list[ToolCallSpec] = field(default_factory=list)  # (name, args[, id])
    thinking: str = ""
    signature: str = "sig-scripted"
    redacted: str | None = None  # data of a redacted_thinking block
    stop_reason: str | None = None  # default: tool_use when there are calls, else end_turn
    usage: dict[str, int] | bool = True  # {"input_tokens", "output_tokens", "cache_…"}
    fragments: int = 3  # input_json_delta pieces per call
    pings: bool = True
    stream: bool | None = None
    model: str = "scripted-claude"
    delay: float = 0.0

    def blocks(self, seq: int) -> list[dict[str, Any]]:
        """The finished content blocks."""
        blocks: list[dict[str, Any]] = []
        if self.thinking:
            blocks.append({"type": "thinking", "thinking": self.thinking, "signature": self.signature})
        if self.redacted:
            blocks.append({"type": "redacted_thinking", "data": self.redacted})
        if self.text:
            blocks.append({"type": "text", "text": self.text})
        for i, spec in enumerate(self.tool_calls):
            call_id = spec[2] if len(spec) > 2 else f"toolu_{seq}_{i}"  # type: ignore[misc]
            arguments = spec[1] if isinstance(spec[1], dict) else json.loads(spec[1] or "{}")
            blocks.append({"type": "tool_use", "id": call_id, "name": spec[0], "input": arguments})
        return blocks

    def _usage(self, body: Any, seq: int) -> dict[str, int]:
        if isinstance(self.usage, dict):
            return dict(self.usage)
        into, out = _rough_tokens(body, json.dumps(self.blocks(seq)))
        return {"input_tokens": into, "output_tokens": out}

    def message(self, body: Any, seq: int) -> dict[str, Any]:
        """The non-streamed ``message`` object."""
        stop = self.stop_reason or ("tool_use" if self.tool_calls else "end_turn")
        usage = self._usage(body, seq) if self.usage else None
        return {"id": f"msg_{seq}", "type": "message", "role": "assistant", "model": self.model,
                "content": self.blocks(seq), "stop_reason": stop, "stop_sequence": None, "usage": usage}

    def events(self, body: Any, seq: int) -> list[str]:
        """The SSE events, as Anthropic sends them (input tokens first, output tokens last)."""
        final = self.message(body, seq)
        usage = final["usage"] or {}
        # message_start carries the prompt's counts (the cache's reads and writes too, as
        # the real API sends them), message_delta the output tokens.
        prompt = {k: v for k, v in usage.items() if k != "output_tokens"}
        start = {**final, "content": [], "stop_reason": None,
                 "usage": {"input_tokens": 0, **prompt, "output_tokens": 1}}
        out: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": start})]
        for index, block in enumerate(final["content"]):
            kind = block["type"]
            empty = {"thinking": {"type": "thinking", "thinking": "", "signature": ""},
                     "text": {"type": "text", "text": ""},
                     "tool_use": {**block, "input": {}}}.get(kind, block)
            out.append(("content_block_start", {"index": index, "content_block": empty}))
            if index == 0 and self.pings:
                out.append(("ping", {}))
            deltas: list[dict[str, Any]] = []
            if kind == "thinking":
                deltas = [{"type": "thinking_delta", "thinking": w} for w in _words(block["thinking"])]
                deltas.append({"type": "signature_delta", "signature": block["signature"]})
            elif kind == "text":
                deltas = [{"type": "text_delta", "text": w} for w in _words(block["text"])]
            elif kind == "tool_use":
                text = json.dumps(block["input"]) if block["input"] else ""
                deltas = [{"type": "input_json_delta", "partial_json": p} for p in ["", *_split(text, self.fragments)]]
            out += [("content_block_delta", {"index": index, "delta": d}) for d in deltas]
            out.append(("content_block_stop", {"index": index}))
        out.append(("message_delta", {"delta": {"stop_reason": final["stop_reason"], "stop_sequence": None},
                                      "usage": {"output_tokens": usage.get("output_tokens", 0)}}))
        out.append(("message_stop", {}))
        return [sse_event({"type": kind, **data}, kind) for kind, data in out]

    def respond(self, h: Any, body: Any, seq: int) -> None:
        stream = self.stream if self.stream is not None else bool(isinstance(body, dict) and body.get("stream"))
        if stream:
            h.send_stream(200, "text/event-stream", self.events(body, seq))
        else:
            h.send_json(200, self.message(body, seq))


def anthropic_reply(text: str = "", **options: Any) -> AnthropicReply:
    """A Messages turn; ``options`` are ``AnthropicReply`` fields."""
    return AnthropicReply(text=text, **options)


def anthropic_error(message: str, kind: str = "overloaded_error", *, text: str = "") -> RawSSE:
    """A 200 stream that starts a message, sends ``text``, then ``event: error``."""
    out = sse_event({"type": "message_start", "message": {"id": "msg_err", "type": "message", "role": "assistant",
                     "model": "scripted-claude", "content": [],
                     "usage": {"input_tokens": 10, "output_tokens": 1}}}, "message_start")
    if text:
        out += sse_event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                         "content_block_start")
        out += "".join(sse_event({"type": "content_block_delta", "index": 0,
                                  "delta": {"type": "text_delta", "text": w}}, "content_block_delta")
                       for w in _words(text))
    out += sse_event({"type": "error", "error": {"type": kind, "message": message}}, "error")
    return RawSSE(out)


# ---------------------------------------------------------------- any API


@dataclass
class AnyAPIReply(Reply):
    """One abstract turn, answered in the shape the request path asks for."""

    text: str = ""
    tool_calls: list[ToolCallSpec] = field(default_factory=list)
    delay: float = 0.0

    def respond(self, h: Any, body: Any, seq: int) -> None:
        path = h.path.split("?")[0].rstrip("/")
        reply: Reply
        if path.endswith("/responses"):
            reply = ResponsesReply(text=self.text, tool_calls=self.tool_calls)
        elif path.endswith("/messages"):
            reply = AnthropicReply(text=self.text, tool_calls=self.tool_calls)
        else:
            reply = Completion(text=self.text, tool_calls=self.tool_calls)
        reply.respond(h, body, seq)


def any_api_reply(text: str = "", tool_calls: list[ToolCallSpec] | None = None) -> AnyAPIReply:
    """A turn in whichever API shape the request asks for."""
    return AnyAPIReply(text, list(tool_calls or []))


# ---------------------------------------------------------------- recorded responses

CORPUS_APIS = ("chat.completions", "responses", "anthropic.messages")


def corpus_params(
    api: Literal["responses", "anthropic.messages"],
    *,
    sliced: bool = False,
    where: Callable[[dict[str, Any]], Any] = lambda rec: True,
) -> list[Any]:
    """Recordings of ``api`` (that ``where`` accepts) as pytest params; streams twice when ``sliced``."""
    records = [(p, json.loads(p.read_text())) for p in sorted(CORPUS.glob("*.json"))]
    mine = [(p, r) for p, r in records if r.get("api") == api and where(r)]
    if not mine:  # a missing corpus must fail loudly, not collect zero tests (which pass)
        return [pytest.param(None, None, id="corpus-missing")] if sliced else [pytest.param(None, id="corpus-missing")]
    if not sliced:
        return [pytest.param(p, id=p.stem) for p, _ in mine]
    out = []
    for path, rec in mine:
        out.append(pytest.param(path, None, id=f"{path.stem}-whole"))
        if rec["stream"]:
            out.append(pytest.param(path, 7, id=f"{path.stem}-7-byte-reads"))
    return out


def load_record(path: Path | None) -> dict[str, Any]:
    """A recording, or a failure that says where the corpus should be."""
    if path is None:
        pytest.fail(f"no recordings in {CORPUS}: the corpus lives in tests/data/corpus "
                    "(IPYAGENT_CORPUS, when set, points elsewhere)")
    return json.loads(path.read_text())


def recorded_transport(rec: dict[str, Any], chunk_size: int | None, seen: list[httpx.Request]) -> httpx.MockTransport:
    """A transport answering every request with the recorded response (streams cut into ``chunk_size`` reads)."""
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        raw = rec["raw_response"]
        if rec["stream"] and rec["http_status"] == 200:
            return sse_response(raw, status_code=200, chunk_size=chunk_size)
        if isinstance(raw, str):
            return httpx.Response(rec["http_status"], text=raw)
        return httpx.Response(rec["http_status"], json=raw)

    return httpx.MockTransport(handler)


async def replay_record(
    make_model: Any, rec: dict[str, Any], chunk_size: int | None, system: str = ""
) -> tuple[list[Any], Exception | None, list[httpx.Request]]:
    """Stream a recording through ``make_model(client)``: (events, error or None, requests).

    Retries are kept (a 429 is retried twice) but never sleep.
    """
    from ipyagent.context.items import Message
    from ipyagent.models.base import ModelRequest

    seen: list[httpx.Request] = []
    client = httpx.AsyncClient(transport=recorded_transport(rec, chunk_size, seen))
    model = without_sleeps(make_model(client))
    events: list[Any] = []
    error: Exception | None = None
    try:
        # The tools the recorded request offered (what a server does may depend on them).
        sent = rec.get("request") or {}
        tools = [t.get("function", t) for t in sent.get("tools") or [] if isinstance(t, dict)]
        choice = sent.get("tool_choice") if isinstance(sent.get("tool_choice"), str) else None
        request = ModelRequest(system, [Message("user", "hi")], tools=tools, tool_choice=choice)
        async for event in model.stream(request):
            events.append(event)
    except Exception as exc:  # the test decides whether it was expected
        error = exc
    finally:
        await client.aclose()
    return events, error, seen


async def _no_sleep(seconds: float) -> None:
    pass


def without_sleeps(model: Any) -> Any:
    """``model`` whose retries are kept but never sleep; returns it."""
    model.retry.sleep = _no_sleep
    return model


def check_rejected_once(error: Exception | None, expected: dict[str, Any], endpoint: str, key: str,
                        events: list[Any], seen: list[httpx.Request]) -> None:
    """A recorded 4xx became one readable ``RequestRejected`` line, was not retried, and
    names the endpoint but never the key."""
    from ipyagent.errors import RequestRejected

    status = expected["http_status"]
    assert type(error) is RequestRejected, error
    assert error.status_code == status and error.body == expected["error_body"]
    text = str(error)
    assert text.startswith(f"HTTP {status}: ") and expected["error_body"]["error"]["message"] in text
    assert f"({endpoint})" in text and "\n" not in text and key not in text
    assert not events and len(seen) == 1


def check_stream_agrees(events: list[Any], turn: Any, *, with_index: bool = False) -> None:
    """What streamed out (text, reasoning, call deltas) agrees with the assembled ``turn``."""
    from ipyagent.models.base import ReasoningDelta, TextDelta, ToolCallDelta

    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == turn.text
    assert not any(isinstance(e, ReasoningDelta) for e in events)
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    named = [((e.index,) if with_index else ()) + (e.id, e.name) for e in deltas if e.name]
    assert named == [((i,) if with_index else ()) + (c.id, c.name) for i, c in enumerate(turn.tool_calls)]
    for i, call in enumerate(turn.tool_calls):
        assert json.loads("".join(e.arguments for e in deltas if e.index == i) or "{}") == call.arguments
