"""The Anthropic Messages API client (``POST /messages``, streamed), over httpx alone.

The key travels as ``x-api-key`` with an ``anthropic-version`` header; the system prompt
is the top-level ``system`` field; ``max_tokens`` is required, so a default is sent.
Messages must alternate user / assistant: the items of one assistant turn become one
assistant message (thinking blocks, text, ``tool_use`` blocks, in that order) and the
results that answer it become ONE user message of ``tool_result`` blocks. Thinking
blocks are kept whole (with their ``signature``) in ``Reasoning.details["thinking_blocks"]``
and sent back unchanged, as the API requires when a thinking turn made tool calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import httpx

from ..context.items import (
    Item,
    Message,
    Reasoning,
    Summary,
    ToolCall,
    ToolResult,
    new_call_id,
    note_line,
    unforged,
)
from .base import ModelEvent, ModelRequest, ReasoningDelta, TextDelta, ToolCallDelta, Turn
from .http import HeaderAuth, ProviderError, StreamingHTTPModel
from .openai_chat import parse_arguments
from .wire_cache import WireCache, WireList, cached

__all__ = [
    "AnthropicModel",
    "AnthropicTurnAssembler",
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "to_anthropic_messages",
    "anthropic_part",
    "to_anthropic_tools",
    "mark_cache_breakpoints",
]

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096  # the API has no default; this fits every current model
_SIGNED = ("thinking", "redacted_thinking")


# ---------------------------------------------------------------- items -> wire


def _thinking_blocks(reasoning: Reasoning) -> list[dict[str, Any]]:
    """The signed thinking blocks of a turn; unsigned ones cannot be sent back."""
    details = reasoning.details
    blocks = details.get("thinking_blocks") if isinstance(details, dict) else None
    out = []
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict) or block.get("type") not in _SIGNED:
            continue
        if block["type"] == "thinking" and block.get("signature"):
            out.append({"type": "thinking", "thinking": block.get("thinking", ""), "signature": block["signature"]})
        elif block["type"] == "redacted_thinking" and block.get("data"):
            out.append({"type": "redacted_thinking", "data": block["data"]})
    return out


Part = tuple[str, list[dict[str, Any]], str | None, tuple[dict[str, Any], str] | None]


def anthropic_part(item: Item) -> Part:
    """What one item contributes: (its role, its content blocks, text for the top-level
    system prompt, its message alone with its JSON text); cached per item (``WireCache``)."""
    role, blocks, system = _anthropic_part(item)
    whole = cached({"role": role or "user", "content": blocks}) if blocks else None
    return role or "user", blocks, system, whole


def _anthropic_part(item: Item) -> tuple[str | None, list[dict[str, Any]], str | None]:
    if isinstance(item, Reasoning):
        return "assistant", _thinking_blocks(item), None
    if isinstance(item, ToolCall):
        return "assistant", [{"type": "tool_use", "id": item.id, "name": item.name, "input": item.arguments}], None
    if isinstance(item, ToolResult):
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": item.call_id}
        images = item.meta.get("images") or []  # plots, when Agent.send_images is on
        note = item.meta.get("note")  # ipyagent's note: a text block of its own, after the output
        output = unforged(item.output)
        if images or note:  # a tool_result may hold image blocks next to its text
            text = [{"type": "text", "text": output}] if output else []
            if note:
                text.append({"type": "text", "text": note_line(str(note))})
            block["content"] = text + [
                {"type": "image", "source": {"type": "base64", "media_type": im["mime"], "data": im["data"]}}
                for im in images
            ]
        elif output:  # ``content`` is optional; an empty one is better left out
            block["content"] = output
        if item.error:
            block["is_error"] = True
        return "user", [block], None
    if isinstance(item, Summary):
        return "user", [{"type": "text", "text": f"Summary of earlier conversation: {item.content}"}], None
    if isinstance(item, Message):
        if item.role == "system":
            return None, [], item.content
        if item.content:  # the API rejects empty text blocks
            return item.role, [{"type": "text", "text": item.content}], None
        return None, [], None
    raise TypeError(f"not an ipyagent item: {item!r}")


def to_anthropic_messages(system: str, items: Sequence[Item],
                          cache: WireCache[Part] | None = None,
                          ) -> tuple[str, list[dict[str, Any]]]:
    """``(system, messages)`` for the API: alternating roles, content as blocks.

    Consecutive items of one role are merged into one message (so parallel tool results
    share a user message); ``system`` messages in the middle join the top-level prompt.
    ``cache``: each item's part is reused while the item is unchanged.
    """
    systems = [system] if system else []
    messages = WireList()  # a list; a message that is one part's keeps its JSON text

    for role, blocks, text, whole in cache.parts(items) if cache is not None else map(anthropic_part, items):
        if text is not None:
            systems.append(text)
        if not blocks:
            continue
        copies = [dict(block) for block in blocks]  # copies: the parts are the cache's
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(copies)
            messages.sources[-1] = None  # merged: no longer one part's message
        else:
            messages.add({"role": role, "content": copies}, whole)
    return "\n\n".join(systems), messages


CACHE_CONTROL = {"type": "ephemeral"}


def mark_cache_breakpoints(body: dict[str, Any]) -> None:
    """Put ``cache_control`` on the system prompt, the last tool, the last message and the
    last stable message (the last one of the previous request: the user message before the
    newest assistant turn).

    The four breakpoints the API allows: the server caches the prefix up to each, and the
    next request (the same prefix plus the newest turns) reads it back. The server looks
    for an earlier cached prefix only some 20 blocks back from a breakpoint, and a turn of
    many calls and results is more than that: the mark on the previous request's last
    message is where that request's cache was written, so it is found however long the
    newest turn is. The marks are made on copies, so nothing the caller holds changes.
    """
    if body.get("system"):
        body["system"] = [{"type": "text", "text": body["system"], "cache_control": dict(CACHE_CONTROL)}]
    if body.get("tools"):
        body["tools"] = [*body["tools"][:-1], {**body["tools"][-1], "cache_control": dict(CACHE_CONTROL)}]
    messages = list(body.get("messages") or [])
    if not messages:
        return
    marks = [len(messages) - 1]
    reply = next((i for i in range(len(messages) - 2, -1, -1)
                  if messages[i].get("role") == "assistant"), None)
    if reply is not None and reply > 0 and messages[reply - 1].get("role") == "user":
        marks.append(reply - 1)
    for m in marks:
        blocks = list(messages[m]["content"])
        for i in range(len(blocks) - 1, -1, -1):
            if blocks[i].get("type") not in _SIGNED:  # the API refuses cache_control there
                blocks[i] = {**blocks[i], "cache_control": dict(CACHE_CONTROL)}
                messages[m] = {**messages[m], "content": blocks}
                break
    body["messages"] = messages


def to_anthropic_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``{name, description, input_schema}`` for each function spec."""
    out = []
    for spec in tools:
        if spec.get("type") == "function" and "function" in spec:  # a chat-style spec
            spec = spec["function"]
        out.append({
            "name": spec["name"],
            "description": spec.get("description") or "",
            "input_schema": spec.get("parameters") or {"type": "object", "properties": {}},
        })
    return out


def _tool_choice(choice: str) -> dict[str, Any]:
    if choice in ("auto", "none"):
        return {"type": choice}
    if choice == "required":
        return {"type": "any"}
    return {"type": "tool", "name": choice}


# ---------------------------------------------------------------- wire -> turn


@dataclass
class _Block:
    type: str
    text: list[str] = field(default_factory=list)  # text, thinking or partial JSON pieces
    id: str = ""
    name: str = ""
    initial: Any = None  # tool_use input sent whole at block start
    signature: str = ""
    data: str = ""
    call: int = -1  # position among the turn's tool calls


class AnthropicTurnAssembler:
    """Builds one ``Turn`` from Messages stream events or a whole ``message`` object."""

    def __init__(self) -> None:
        self.events_seen = 0
        self._blocks: dict[int, _Block] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None

    def feed(self, event: str | None, data: dict[str, Any]) -> list[ModelEvent]:
        """Take one stream event; raise ``ProviderError`` for ``error``."""
        self.events_seen += 1
        kind = data.get("type") or event or ""
        index = data.get("index")
        if kind == "message_start":
            self._meta(_dict(data.get("message")))
        elif kind == "content_block_start" and isinstance(index, int):
            return self._start(index, data.get("content_block"))
        elif kind == "content_block_delta" and isinstance(index, int):
            return self._delta(index, data.get("delta"))
        elif kind == "message_delta":
            self.finish_reason = _dict(data.get("delta")).get("stop_reason") or self.finish_reason
            self._usage(data.get("usage"))
        elif kind == "error" or event == "error":
            raise ProviderError(data["error"] if isinstance(data.get("error"), dict) else data)
        return []  # ping, content_block_stop, message_stop and anything new: nothing to do

    def _meta(self, message: dict[str, Any]) -> None:
        if isinstance(message.get("model"), str):
            self.model = message["model"]
        self._usage(message.get("usage"))
        if message.get("stop_reason"):
            self.finish_reason = message["stop_reason"]

    def _usage(self, usage: Any) -> None:
        # input_tokens come in message_start, the cumulative output_tokens in message_delta
        # (which may repeat the input fields): merge, later non-null values winning.
        if isinstance(usage, dict):
            self.usage = {**(self.usage or {}), **{k: v for k, v in usage.items() if v is not None}}

    def _start(self, index: int, block: Any) -> list[ModelEvent]:
        if not isinstance(block, dict):
            return []
        kind = str(block.get("type") or "")
        slot = self._blocks[index] = _Block(kind)
        if kind == "tool_use":
            slot.id, slot.name = block.get("id") or "", block.get("name") or ""
            slot.call = sum(1 for b in self._blocks.values() if b.type == "tool_use") - 1
            # ``input`` is a ``{}`` placeholder when the JSON follows in deltas.
            slot.initial = block.get("input") or None
            return [ToolCallDelta(slot.call, id=slot.id or None, name=slot.name or None)]
        if kind == "text":
            return self._delta(index, {"type": "text_delta", "text": block.get("text")})
        if kind == "thinking":
            slot.signature = block.get("signature") or ""
            return self._delta(index, {"type": "thinking_delta", "thinking": block.get("thinking")})
        if kind == "redacted_thinking":
            slot.data = block.get("data") or ""
        return []

    def _delta(self, index: int, delta: Any) -> list[ModelEvent]:
        slot = self._blocks.get(index)
        if slot is None or not isinstance(delta, dict):
            return []
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str) and delta["text"]:
            slot.text.append(delta["text"])
            return [TextDelta(delta["text"])]
        if kind == "thinking_delta" and isinstance(delta.get("thinking"), str) and delta["thinking"]:
            slot.text.append(delta["thinking"])
            return [ReasoningDelta(delta["thinking"])]
        if kind == "signature_delta" and isinstance(delta.get("signature"), str):
            slot.signature += delta["signature"]
        elif kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            slot.text.append(delta["partial_json"])
            if delta["partial_json"]:
                return [ToolCallDelta(slot.call, arguments=delta["partial_json"])]
        return []

    def feed_body(self, body: dict[str, Any]) -> list[ModelEvent]:
        """Take a non-streamed ``message`` object."""
        self.events_seen += 1
        if not isinstance(body.get("content"), list):
            raise ValueError("no content in the message")
        self._meta(body)
        events: list[ModelEvent] = []
        for index, block in enumerate(body["content"]):
            if isinstance(block, dict) and block.get("type") == "tool_use":
                events += self._start(index, {**block, "input": None})
                events += self._delta(index, {"type": "input_json_delta", "partial_json": _json(block.get("input"))})
            else:
                events += self._start(index, block)
        return events

    def turn(self) -> Turn:
        """The turn assembled so far (ids synthesized where the server sent none)."""
        text: list[str] = []
        thinking: list[str] = []
        blocks: list[dict[str, Any]] = []  # every thinking block, as sent
        calls: list[ToolCall] = []
        for index in sorted(self._blocks):
            block = self._blocks[index]
            joined = "".join(block.text)
            if block.type == "text":
                text.append(joined)
            elif block.type == "thinking":
                thinking.append(joined)
                blocks.append({"type": "thinking", "thinking": joined, "signature": block.signature})
            elif block.type == "redacted_thinking":
                blocks.append({"type": "redacted_thinking", "data": block.data})
            elif block.type == "tool_use":
                if joined.strip() or not isinstance(block.initial, dict):
                    arguments, raw = parse_arguments(joined)
                else:
                    arguments, raw = dict(block.initial), None
                calls.append(ToolCall(block.id or new_call_id(), block.name, arguments, raw))
        content = "\n\n".join(t for t in thinking if t)
        reasoning = None
        if content or blocks:
            reasoning = Reasoning(content, details={"thinking_blocks": blocks} if blocks else None)
        return Turn(
            text="".join(text),
            tool_calls=calls,
            reasoning=reasoning,
            finish_reason=self.finish_reason,
            usage=self.usage,
            model=self.model,
        )


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _json(value: Any) -> str:
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


# ---------------------------------------------------------------- the client


class AnthropicModel(StreamingHTTPModel):
    """A model behind an Anthropic Messages endpoint (``{base_url}/messages``)."""

    path = "messages"
    default_base_url = "https://api.anthropic.com/v1"

    def __init__(self, model: str, base_url: str | None = None,
                 api_key: str | Callable[[], str | None] | None = None, **kw: Any) -> None:
        super().__init__(model, base_url, api_key, **kw)
        self.extra_headers.setdefault("anthropic-version", ANTHROPIC_VERSION)

    def make_auth(self, key: str) -> httpx.Auth:
        """Anthropic takes the key as ``x-api-key``, not a Bearer token."""
        return HeaderAuth(key, header="x-api-key", prefix="")

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request``."""
        system, messages = to_anthropic_messages(request.system, request.items,
                                                 self.wire_cache(anthropic_part))
        body: dict[str, Any] = {
            "model": self.name,
            "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": messages,
            "stream": True,
        }
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = to_anthropic_tools(request.tools)
        if request.prompt_cache:
            mark_cache_breakpoints(body)
        if request.tool_choice:
            body["tool_choice"] = _tool_choice(request.tool_choice)
        if request.temperature is not None:
            body["temperature"] = request.temperature
        return body

    def new_assembler(self) -> AnthropicTurnAssembler:
        """A fresh assembler for one reply."""
        return AnthropicTurnAssembler()
