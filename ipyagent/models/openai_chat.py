"""The OpenAI Chat Completions client, hardened against what real compatible servers send.

``OpenAIChatModel.stream`` turns provider-neutral items into chat messages, POSTs
``/chat/completions`` with ``stream: true`` and yields events as chunks arrive.
``ChatTurnAssembler`` is the part that survives the wire quirks listed in
``tests/data/corpus/README.md``: tool calls built by ``index`` (id and name set once, only
``arguments`` appended), ids synthesized when empty, usage taken from wherever it comes
last, errors inside a 200 stream, a missing ``[DONE]``, a JSON body instead of a stream,
parallel calls that all claim ``index`` 0 (Ollama), ``<think>`` reasoning inside the
content (reasoning models served without a reasoning parser), and UTF-16 surrogate pairs
split across chunks.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Sequence

import httpx

from .._util.text import repair_surrogates
from ..context.items import Item, Message, Reasoning, Summary, ToolCall, ToolResult, new_call_id
from ..errors import ModelResponseError, RequestRejected
from .base import ModelEvent, ModelRequest, ReasoningDelta, ToolCallDelta, Turn
from .http import ProviderError, StreamingHTTPModel
from .lenient_json import loads as lenient_loads
from .profiles import server as _server
from .profiles.detect import ServerFacts
from .retry import _add_note
from .think import ThinkSplitter, split_unopened_think
from .wire_cache import WireCache, WireList, cached

__all__ = [
    "OpenAIChatModel",
    "ChatTurnAssembler",
    "to_chat_messages",
    "chat_part",
    "to_chat_tools",
    "parse_arguments",
]


# Opaque assistant-message fields a provider wants back on the next turn: OpenRouter's
# ``reasoning_details`` (possibly encrypted), Gemini's thought signatures.
ECHO_FIELDS = ("reasoning_details", "thought_signature", "extra_content")
# Where the tool-call fields that are not standard OpenAI ones are kept on ToolCall.meta.
_CALL_EXTRA = "chat_extra"
_CALL_FIELDS = frozenset({"index", "id", "type", "function"})


# ---------------------------------------------------------------- items -> wire


def _wire_call(call: ToolCall) -> dict[str, Any]:
    arguments = (
        call.raw_arguments
        if call.raw_arguments is not None
        else json.dumps(call.arguments, ensure_ascii=False)
    )
    function = {"name": call.name, "arguments": arguments}
    wire = {"id": call.id, "type": "function", "function": function}
    return {**call.meta.get(_CALL_EXTRA, {}), **wire}


# Reasoning.details key naming the field the reasoning text came in (``reasoning_content``
# or ``reasoning``): DeepSeek's thinking mode answers 400 unless an assistant message that
# made tool calls carries its reasoning text back in that field; servers that never sent
# it never get it.
TEXT_FIELD = "text_field"


def _echo_fields(reasoning: Reasoning) -> dict[str, Any]:
    details = reasoning.details
    if isinstance(details, list):  # a bare OpenRouter reasoning_details list
        return {"reasoning_details": details}
    if isinstance(details, dict):
        return {k: details[k] for k in ECHO_FIELDS if k in details}
    return {}


def _text_field(reasoning: Reasoning) -> dict[str, Any]:
    details = reasoning.details
    key = details.get(TEXT_FIELD) if isinstance(details, dict) else None
    return {key: reasoning.content} if key in ("reasoning_content", "reasoning") and reasoning.content else {}


def chat_part(item: Item) -> tuple[Any, ...]:
    """What one item contributes to the chat ``messages`` (cached per item: ``WireCache``)."""
    if isinstance(item, Reasoning):
        return ("reasoning", _echo_fields(item), _text_field(item))
    if isinstance(item, Message) and item.role == "assistant":
        return ("text", item.content)
    if isinstance(item, ToolCall):
        wire = _wire_call(item)
        # The assistant message of a turn that is this call alone (the usual agent step),
        # with its JSON: used when the assembled message is equal to it.
        return ("call", wire, cached({"role": "assistant", "content": "", "tool_calls": [wire]}))
    if isinstance(item, ToolResult):
        return ("result", cached({"role": "tool", "tool_call_id": item.call_id,
                                  "content": item.for_model()}), list(item.meta.get("images") or []))
    if isinstance(item, Summary):
        return ("message", cached({"role": "user", "content": f"Summary of earlier conversation: {item.content}"}))
    if isinstance(item, Message):
        return ("message", cached({"role": item.role, "content": item.content}))
    raise TypeError(f"not an ipyagent item: {item!r}")


def to_chat_messages(system: str, items: Sequence[Item],
                     cache: WireCache[tuple[Any, ...]] | None = None) -> list[dict[str, Any]]:
    """Chat ``messages`` for a system prompt and items, one assistant message per turn.

    Items of one assistant turn come as Reasoning?, Message?, ToolCall*: they are merged
    into ONE assistant message (``content`` + ``tool_calls``). Reasoning text goes back only
    on a message with tool calls and only in the field the server sent it in (DeepSeek
    requires it there); opaque reasoning data a provider asked back is always sent.
    ``cache``: each item's part is reused while the item is unchanged.
    """
    messages = WireList()  # a list; each message copied from a part keeps its JSON text
    if system:
        messages.add({"role": "system", "content": system})
    turn: dict[str, Any] | None = None  # the assistant message being assembled
    alone: tuple[dict[str, Any], str] | None = None  # the turn's message if it is one call
    thought: dict[str, Any] = {}  # the turn's reasoning text, sent back only with tool calls
    # Images from tool results (Agent.send_images): a tool message carries only text, and
    # nothing may come between the tool messages of one turn, so they follow as one user
    # message after the last result.
    images: list[dict[str, Any]] = []

    def flush() -> None:
        nonlocal turn, thought, alone
        if turn is not None and (turn.get("content") is not None or turn.get("tool_calls")):
            if turn["content"] is None:
                # Never null: valid for OpenAI, but llama-cpp-python's request model wants
                # a string and answers 500 to every request that carries a tool call.
                turn["content"] = ""
            # ``alone`` is only a candidate: its text is used if the message equals it.
            messages.add({**turn, **thought} if turn.get("tool_calls") else turn, alone)
        turn, thought, alone = None, {}, None
        if images:
            parts: list[dict[str, Any]] = [{"type": "text", "text": "Images from the tool results above:"}]
            parts += [{"type": "image_url", "image_url": {"url": f"data:{im['mime']};base64,{im['data']}"}}
                      for im in images]
            messages.add({"role": "user", "content": parts})
            images.clear()

    # The parts are shared with the cache: what is placed in ``messages`` is a copy.
    for part in cache.parts(items) if cache is not None else map(chat_part, items):
        kind = part[0]
        if kind == "reasoning":
            flush()  # reasoning opens a new assistant turn
            echo = part[1]
            turn = {"role": "assistant", "content": None, **echo} if echo else None
            thought = dict(part[2])
        elif kind == "text":
            if turn is None or turn.get("content") is not None or turn.get("tool_calls"):
                kept = thought if turn is None else {}  # reasoning without opaque fields
                flush()
                turn, thought = {"role": "assistant", "content": None}, kept
            turn["content"] = part[1]
        elif kind == "call":
            if turn is None:
                turn = {"role": "assistant", "content": None}  # keeps a pending ``thought``
                alone = part[2]
            turn.setdefault("tool_calls", []).append(dict(part[1]))
        elif kind == "result":
            if turn is not None:
                flush()
            messages.add(dict(part[1][0]), part[1])
            images.extend(part[2])
        else:
            flush()
            messages.add(dict(part[1][0]), part[1])
    flush()
    return messages


def to_chat_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``tools`` for the wire: each ``{name, description, parameters}`` spec wrapped."""
    return [
        spec if spec.get("type") == "function" and "function" in spec  # already wrapped
        else {"type": "function", "function": spec}
        for spec in tools
    ]


def _tool_choice(choice: str) -> str | dict[str, Any]:
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


# ---------------------------------------------------------------- wire -> turn


def parse_arguments(text: str) -> tuple[dict[str, Any], str | None]:
    """``(arguments, raw)``: parsed JSON object, or ``({}, text)`` when it is not one.

    Empty or blank text means no arguments; a JSON string holding an object (arguments
    encoded twice, as some servers do) is decoded once more. Read leniently
    (``lenient_json``): a server passes on what a small model wrote, such as a regex's ``\\w``
    with one backslash, which strict JSON refuses; nothing in that reading runs code.
    """
    stripped = text.strip()
    if not stripped:
        return {}, None
    try:
        value = lenient_loads(stripped, close_strings=False)
        if isinstance(value, str):
            value = lenient_loads(value, close_strings=False)
    except (ValueError, RecursionError):
        return {}, text
    return (value, None) if isinstance(value, dict) else ({}, text)


@dataclass
class _CallSlot:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def _reasoning_text(details: list[Any]) -> str:
    return "".join(
        d.get("text") or d.get("summary") or ""
        for d in details
        if isinstance(d, dict) and isinstance(d.get("text") or d.get("summary") or "", str)
    )


class ChatTurnAssembler:
    """Builds one ``Turn`` from stream chunks (``feed``) or a whole body (``feed_completion``)."""

    def __init__(self) -> None:
        self.chunks = 0
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._details: list[dict[str, Any]] = []
        self._echo: dict[str, Any] = {}
        self._calls: dict[int, _CallSlot] = {}
        self._slot_of: dict[int, int] = {}  # wire index -> slot (Ollama reuses index 0)
        self._reasoning_field: str | None = None
        self._think = ThinkSplitter()
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None

    def feed(self, chunk: dict[str, Any]) -> list[ModelEvent]:
        """Take one ``chat.completion.chunk``; return the events it carries."""
        self.chunks += 1
        self._meta(chunk)
        events: list[ModelEvent] = []
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) not in (0, None):
                continue  # n > 1: only the first choice is a turn
            events += self._delta(choice.get("delta") or {}, whole=False)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return events

    def feed_completion(self, body: dict[str, Any]) -> list[ModelEvent]:
        """Take a non-streamed ``chat.completion`` body; return its events."""
        self._meta(body)
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ValueError("no choices in the response")
        choice = choices[0]
        self.finish_reason = choice.get("finish_reason") or self.finish_reason
        return self._delta(choice.get("message") or {}, whole=True)

    def _meta(self, chunk: dict[str, Any]) -> None:
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]  # cumulative where repeated: the last one wins
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]

    def _delta(self, delta: dict[str, Any], *, whole: bool) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        content = delta.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if isinstance(content, str) and content:
            events += self._think.route(content, self._reasoning, self._text)

        details = delta.get("reasoning_details")
        if isinstance(details, list) and details:
            self._add_details(details)
        # One text per delta: servers that send ``reasoning`` also mirror it in
        # ``reasoning_details``, and some send ``reasoning_content`` next to ``reasoning``.
        for key in ("reasoning_content", "reasoning"):
            candidate = delta.get(key)
            if isinstance(candidate, str) and candidate:
                reasoning = candidate
                self._reasoning_field = self._reasoning_field or key
                break
        else:
            reasoning = _reasoning_text(details) if isinstance(details, list) else ""
        if reasoning:
            self._reasoning.append(reasoning)
            events.append(ReasoningDelta(reasoning))
        for key in ECHO_FIELDS[1:]:
            if delta.get(key) is not None:
                self._echo[key] = delta[key]

        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for position, wire in enumerate(calls):
                if isinstance(wire, dict):
                    index = position if whole else self._index(wire, position, len(calls))
                    event = self._call_delta(index, wire)
                    if event is not None:
                        events.append(event)
        return events

    def _add_details(self, details: list[Any]) -> None:
        # Streamed reasoning_details come in pieces of one entry per ``index``: join them.
        for entry in details:
            if not isinstance(entry, dict):
                continue
            last = self._details[-1] if self._details else None
            if (
                last is not None
                and "index" in entry
                and last.get("index") == entry.get("index")
                and last.get("type") == entry.get("type")
            ):
                for key in ("text", "summary", "data"):
                    if isinstance(entry.get(key), str):
                        last[key] = (last.get(key) or "") + entry[key]
                for key, value in entry.items():
                    if key not in ("text", "summary", "data") and value is not None:
                        last[key] = value
            else:
                self._details.append(dict(entry))

    def _index(self, wire: dict[str, Any], position: int, count: int) -> int:
        index = wire.get("index")
        if isinstance(index, int):
            return self._slot_for_index(index, wire)
        # No index: a known id names its slot, a new id opens one; otherwise go by
        # position, or continue the latest call when the delta holds only one.
        call_id = wire.get("id")
        if call_id:
            for slot_index, slot in self._calls.items():
                if slot.id == call_id:
                    return slot_index
            return max(self._calls, default=-1) + 1
        if count > 1 or not self._calls:
            return position
        latest = max(self._calls)
        return latest + 1 if self._starts_another_call(self._calls[latest], wire) else latest

    def _slot_for_index(self, index: int, wire: dict[str, Any]) -> int:
        """The slot for a wire ``index``: a new one when that index starts another call.

        Ollama sends each parallel call whole, every one with ``index`` 0 (and its own
        id); some gateways do the same without ids. Merged, they would become one call
        whose arguments are two JSON objects back to back, and the second call lost.
        """
        slot = self._slot_of.get(index)
        if slot is None:
            slot = index if index not in self._calls else max(self._calls) + 1
        elif self._starts_another_call(self._calls[slot], wire):
            call_id = wire.get("id")
            known = [i for i, s in self._calls.items() if call_id and s.id == call_id]
            slot = known[0] if known else max(self._calls) + 1
        self._slot_of[index] = slot
        return slot

    @staticmethod
    def _starts_another_call(slot: _CallSlot, wire: dict[str, Any]) -> bool:
        """A different id, or a name with arguments after the slot's JSON is complete."""
        call_id = wire.get("id")
        if isinstance(call_id, str) and call_id and slot.id and call_id != slot.id:
            return True
        function = wire.get("function")
        if not (isinstance(function, dict) and function.get("name") and slot.name
                and function.get("arguments")):
            return False
        try:  # strictly: a lenient reading would call a prefix complete
            value = json.loads("".join(slot.arguments))
            return isinstance(json.loads(value) if isinstance(value, str) else value, dict)
        except ValueError:
            return False

    def _call_delta(self, index: int, wire: dict[str, Any]) -> ToolCallDelta | None:
        slot = self._calls.setdefault(index, _CallSlot())
        function = wire.get("function")
        if not isinstance(function, dict):
            function = {}
        wire_id, name = wire.get("id"), function.get("name")
        new_id = wire_id if isinstance(wire_id, str) and not slot.id else None
        new_name = name if isinstance(name, str) and not slot.name else None
        # id and name may repeat on every chunk: set them once, append only arguments.
        if new_id:
            slot.id = new_id
        if new_name:
            slot.name = new_name
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # an object instead of a JSON string
            arguments = json.dumps(arguments)
        arguments = arguments if isinstance(arguments, str) else ""
        slot.arguments.append(arguments)
        slot.extra.update({k: v for k, v in wire.items() if k not in _CALL_FIELDS})
        if not (new_id or new_name or arguments):
            return None
        return ToolCallDelta(index, id=new_id or None, name=new_name or None, arguments=arguments)

    def turn(self) -> Turn:
        """The turn assembled so far (ids synthesized where the server sent none)."""
        thinking, rest = self._think.flush()
        self._reasoning.append(thinking)
        self._text.append(rest)
        calls = []
        for index in sorted(self._calls):
            slot = self._calls[index]
            arguments, raw = parse_arguments(repair_surrogates("".join(slot.arguments)))
            meta = {_CALL_EXTRA: dict(slot.extra)} if slot.extra else {}
            calls.append(ToolCall(slot.id or new_call_id(), slot.name, arguments, raw, meta))
        echo = dict(self._echo)
        if self._details:
            echo["reasoning_details"] = [dict(d) for d in self._details]
        thoughts, text = split_unopened_think(repair_surrogates("".join(self._reasoning)),
                                              repair_surrogates("".join(self._text)))
        if thoughts and echo.get(TEXT_FIELD) is None and self._reasoning_field:
            echo[TEXT_FIELD] = self._reasoning_field
        reasoning = Reasoning(thoughts, details=echo or None) if (thoughts or echo) else None
        return Turn(
            text=text,
            tool_calls=calls,
            reasoning=reasoning,
            finish_reason=self.finish_reason,
            usage=self.usage,
            model=self.model,
        )


# ---------------------------------------------------------------- the client


class _ChatAssembler(ChatTurnAssembler):
    """``ChatTurnAssembler`` speaking the shared HTTP base's assembler protocol."""

    @property
    def events_seen(self) -> int:
        return self.chunks

    def feed(self, event: str | None, data: dict[str, Any]) -> list[ModelEvent]:  # type: ignore[override]
        events = super().feed(data)  # first: an error chunk may still carry usage
        if event == "error" or data.get("error"):
            raise ProviderError(data.get("error", data))
        return events

    def feed_body(self, body: dict[str, Any]) -> list[ModelEvent]:
        return self.feed_completion(body)


# llama-cpp-python's ``--chat_format chatml-function-calling`` cannot stream a reply whose
# tool choice is "auto": it sends the 200 headers, then raises, and the body stays empty.
EMPTY_STREAM = "the stream ended before any event"
EMPTY_STREAM_WITH_TOOLS = (
    "a server that cannot stream tool calls answers so (llama-cpp-python with --chat_format "
    "chatml-function-calling and tool_choice 'auto'): start it with the model's own chat "
    "template (no --chat_format), or set Agent.tool_mode = 'text'")


class OpenAIChatModel(StreamingHTTPModel):
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Transient failures (429, 5xx, connection errors, timeouts) are retried with backoff
    (``self.retry``) only while nothing has been yielded yet: once events reached the
    consumer a retry would repeat them, so a later drop raises ``ModelConnectionError``.
    """

    path = "chat/completions"
    default_base_url = "https://api.openai.com/v1"

    # Set once a server rejected ``stream_options`` (some OpenAI-compatible servers do):
    # later requests leave it out, and usage then comes only if the server sends it anyway.
    _stream_options_rejected = False

    def new_assembler(self) -> _ChatAssembler:
        return _ChatAssembler()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Yield events for one reply; retry once without ``stream_options`` if it is refused."""
        try:
            async for event in super().stream(request):
                yield event
        except RequestRejected as exc:
            if self._stream_options_rejected or "stream_options" not in str(exc):
                raise
            self._stream_options_rejected = True
            async for event in super().stream(request):
                yield event
        except ModelResponseError as exc:
            if request.tools and EMPTY_STREAM in str(exc):
                _add_note(exc, EMPTY_STREAM_WITH_TOOLS)
            raise

    def _auth(self) -> httpx.Auth | None:
        key = self._key_source()
        return self.make_auth(key) if key else None

    async def server_facts(self, *, local: bool) -> ServerFacts:
        """What the server says about its model (``models.profiles.server.gather``, cached)."""
        async with self._side_client() as http:
            return await _server.gather(http, self.base_url, self.name, auth=self._auth(), local=local)

    async def takes_grammar(self, request: ModelRequest | None = None) -> bool:
        """Whether the server constrains decoding to a GBNF ``grammar`` (one probe, cached);
        ``request``: the one about to be sent, whose messages the probe reuses."""
        messages = to_chat_messages(request.system, request.items) if request is not None else None
        async with self._side_client() as http:
            return await _server.takes_grammar(http, self.base_url, self.name, auth=self._auth(),
                                               messages=messages)

    def _side_client(self) -> contextlib.AbstractAsyncContextManager[httpx.AsyncClient]:
        """A client of its own for these few questions: the replies' connections stay as
        they were. An injected client (a test's transport) is used as it is."""
        if self._owns_client:
            return httpx.AsyncClient()
        return contextlib.nullcontext(self._http())

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request``."""
        body: dict[str, Any] = {
            "model": self.name,
            "messages": to_chat_messages(request.system, request.items, self.wire_cache(chat_part)),
            "stream": True,
        }
        if not self._stream_options_rejected:
            body["stream_options"] = {"include_usage": True}
        if request.tools:
            body["tools"] = to_chat_tools(request.tools)
        if request.tool_choice:
            body["tool_choice"] = _tool_choice(request.tool_choice)
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.seed is not None:
            body["seed"] = request.seed
        if request.grammar:  # llama.cpp's servers (llama-cpp-python, llama-server) read it
            body["grammar"] = request.grammar
        if request.stop:
            body["stop"] = list(request.stop)
        if request.max_tokens is not None:
            # OpenAI itself deprecated max_tokens (reasoning models reject it); every other
            # OpenAI-compatible server still reads max_tokens.
            official = httpx.URL(self.url).host == "api.openai.com"
            body["max_completion_tokens" if official else "max_tokens"] = request.max_tokens
        if request.cache_key and httpx.URL(self.url).host == "api.openai.com":
            # OpenAI's own API only: it routes by the key to the machine holding the prefix;
            # other servers ignore the field at best and refuse it at worst.
            body["prompt_cache_key"] = request.cache_key
        return body
