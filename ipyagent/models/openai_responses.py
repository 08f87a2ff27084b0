"""The OpenAI Responses API client (``POST /responses``, streamed).

Items become ``input`` entries: messages as ``{"role", "content"}``, tool calls as
``function_call`` items and their results as ``function_call_output`` items, both keyed
by ``call_id`` (the ``fc_…`` item id is kept in ``ToolCall.meta["item_id"]``, never used
as the key). Requests are stateless (``store: false``): the whole conversation is sent
each time, so reasoning items come back with ``encrypted_content``, are kept in
``Reasoning.details["reasoning_items"]`` and are sent again, before the calls they led
to. Server item ids are left out of ``input``: with nothing stored there is nothing for
them to refer to, and an ``fc_`` id sent without its reasoning item is rejected.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

import httpx

from ..context.items import Item, Message, Reasoning, Summary, ToolCall, ToolResult, new_call_id
from .base import ModelEvent, ModelRequest, ReasoningDelta, ToolCallDelta, Turn
from .http import ProviderError, StreamingHTTPModel
from .openai_chat import parse_arguments
from .think import ThinkSplitter, split_unopened_think
from .wire_cache import WireCache, WireList, cached

__all__ = [
    "OpenAIResponsesModel",
    "ResponsesTurnAssembler",
    "to_responses_input",
    "responses_part",
    "to_responses_tools",
]

# Fields of a reasoning output item worth sending back (``id`` and ``status`` are not:
# nothing is stored server-side).
_REASONING_ECHO = ("type", "summary", "content", "encrypted_content")


# ---------------------------------------------------------------- items -> wire


def _reasoning_input(reasoning: Reasoning) -> list[dict[str, Any]]:
    """The reasoning items of a turn that can be sent back: opaque or raw content only."""
    details = reasoning.details
    wire = details.get("reasoning_items") if isinstance(details, dict) else None
    out = []
    for item in wire if isinstance(wire, list) else []:
        if not isinstance(item, dict) or not (item.get("encrypted_content") or item.get("content")):
            continue  # a bare summary cannot be replayed without the stored item
        echo = {k: item[k] for k in _REASONING_ECHO if item.get(k) is not None}
        echo.setdefault("summary", [])
        echo["type"] = "reasoning"
        out.append(echo)
    return out


Part = tuple[bool, list[tuple[dict[str, Any], str]], list[dict[str, str]]]


def responses_part(item: Item) -> Part:
    """What one item contributes to ``input``: (is it a tool result, its entries with their
    JSON text, its images); cached per item (``WireCache``)."""
    is_result, entries, images = _responses_part(item)
    return is_result, [cached(entry) for entry in entries], images


def _responses_part(item: Item) -> tuple[bool, list[dict[str, Any]], list[dict[str, str]]]:
    if isinstance(item, Reasoning):
        return False, _reasoning_input(item), []
    if isinstance(item, ToolCall):
        arguments = (
            item.raw_arguments
            if item.raw_arguments is not None
            else json.dumps(item.arguments, ensure_ascii=False)
        )
        return False, [{"type": "function_call", "call_id": item.id, "name": item.name,
                        "arguments": arguments}], []
    if isinstance(item, ToolResult):
        return True, [{"type": "function_call_output", "call_id": item.call_id,
                       "output": item.for_model()}], list(item.meta.get("images") or [])
    if isinstance(item, Summary):
        return False, [{"role": "user", "content": f"Summary of earlier conversation: {item.content}"}], []
    if isinstance(item, Message):
        if item.role == "assistant" and not item.content:
            return False, [], []  # an empty assistant message says nothing and some servers reject it
        return False, [{"role": item.role, "content": item.content}], []
    raise TypeError(f"not an ipyagent item: {item!r}")


def to_responses_input(items: Sequence[Item],
                       cache: WireCache[Part] | None = None,
                       ) -> list[dict[str, Any]]:
    """The ``input`` list for items, in order (reasoning before the calls it led to).

    Images of tool results (``ToolResult.meta["images"]``, Agent.send_images) follow the
    last of a run of results as one user message, as in the Chat Completions client.
    ``cache``: each item's part is reused while the item is unchanged.
    """
    out = WireList()  # a list; each entry copied from a part keeps its JSON text
    images: list[dict[str, str]] = []
    for is_result, entries, found in cache.parts(items) if cache is not None else map(responses_part, items):
        if images and not is_result:
            out.add(_images_message(images))
            images = []
        for entry in entries:
            out.add(dict(entry[0]), entry)  # copies: the parts are the cache's
        images += found
    if images:
        out.add(_images_message(images))
    return out


def _images_message(images: list[dict[str, str]]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "input_text", "text": "Images from the tool results above:"}]
    parts += [{"type": "input_image", "image_url": f"data:{im['mime']};base64,{im['data']}"} for im in images]
    return {"role": "user", "content": parts}


def to_responses_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flat function tools; ``strict`` off, since arbitrary schemas need not satisfy it."""
    out = []
    for spec in tools:
        if spec.get("type") == "function" and "function" in spec:  # a chat-style spec
            spec = spec["function"]
        tool = {
            "type": "function",
            "name": spec["name"],
            "description": spec.get("description") or "",
            "parameters": spec.get("parameters") or {"type": "object", "properties": {}},
        }
        # The Responses API defaults to strict schemas, which reject optional parameters.
        tool["strict"] = bool(spec.get("strict", False))
        out.append(tool)
    return out


def _tool_choice(choice: str) -> str | dict[str, Any]:
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "name": choice}


# ---------------------------------------------------------------- wire -> turn


@dataclass
class _Call:
    call_id: str = ""
    name: str = ""
    item_id: str = ""
    parts: list[str] = field(default_factory=list)
    final: str | None = None  # arguments.done / output_item.done repeat the whole text


def _item_text(item: dict[str, Any]) -> str:
    return "".join(
        part.get("text") or part.get("refusal") or ""
        for part in item.get("content") or []
        if isinstance(part, dict)
    )


def _summary_text(item: dict[str, Any]) -> str:
    parts = item.get("summary") or item.get("content") or []
    return "\n\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


class ResponsesTurnAssembler:
    """Builds one ``Turn`` from Responses stream events or a whole ``response`` object."""

    def __init__(self) -> None:
        self.events_seen = 0
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._streamed: set[tuple[str, int]] = set()  # (kind, output_index) that sent deltas
        self._reasoning_part: tuple[int, int] | None = None
        self._reasoning_items: dict[int, dict[str, Any]] = {}
        self._calls: dict[int, _Call] = {}
        self._by_item_id: dict[str, int] = {}
        self._think = ThinkSplitter()  # <think> written into the text by an unparsed model
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None

    # -- streamed events

    def feed(self, event: str | None, data: dict[str, Any]) -> list[ModelEvent]:
        """Take one stream event; raise ``ProviderError`` for ``error`` / ``response.failed``."""
        self.events_seen += 1
        kind = data.get("type") or event or ""
        index = self._index(data)
        if kind in ("response.created", "response.in_progress"):
            self._meta(data.get("response"))
        elif kind == "response.output_item.added":
            return self._item(index, data.get("item"), done=False)
        elif kind == "response.output_item.done":
            return self._item(index, data.get("item"), done=True)
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            return self._text_delta(index, data.get("delta"))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            part = data.get("summary_index", data.get("content_index", 0))
            return self._reasoning_delta(index, part if isinstance(part, int) else 0, data.get("delta"))
        elif kind == "response.function_call_arguments.delta":
            return self._arguments(index, data.get("delta"))
        elif kind == "response.function_call_arguments.done":
            if isinstance(data.get("arguments"), str) and index in self._calls:
                self._calls[index].final = data["arguments"]
        elif kind in ("response.completed", "response.incomplete"):
            return self._completed(data.get("response"))
        elif kind == "response.failed":
            response: dict[str, Any] = data["response"] if isinstance(data.get("response"), dict) else {}
            self._meta(response)
            raise ProviderError(response.get("error") or {"message": "the response failed"})
        elif kind == "error" or event == "error":
            raise ProviderError(data["error"] if isinstance(data.get("error"), dict) else data)
        return []

    def _index(self, data: dict[str, Any]) -> int:
        index = data.get("output_index")
        if isinstance(index, int):
            return index
        item_id = data.get("item_id") or (data.get("item") or {}).get("id")
        if item_id in self._by_item_id:
            return self._by_item_id[item_id]
        return max([-1, *self._calls, *self._reasoning_items]) + 1

    def _meta(self, response: Any) -> None:
        if not isinstance(response, dict):
            return
        if isinstance(response.get("usage"), dict):
            self.usage = response["usage"]
        if isinstance(response.get("model"), str):
            self.model = response["model"]

    def _text_delta(self, index: int, delta: Any) -> list[ModelEvent]:
        if not isinstance(delta, str) or not delta:
            return []
        self._streamed.add(("text", index))
        return self._think.route(delta, self._reasoning, self._text)

    def _reasoning_delta(self, index: int, part: int, delta: Any) -> list[ModelEvent]:
        if not isinstance(delta, str) or not delta:
            return []
        self._streamed.add(("reasoning", index))
        if self._reasoning and self._reasoning_part not in (None, (index, part)):
            delta = "\n\n" + delta  # a new summary part reads as a new paragraph
        self._reasoning_part = (index, part)
        self._reasoning.append(delta)
        return [ReasoningDelta(delta)]

    def _arguments(self, index: int, delta: Any) -> list[ModelEvent]:
        if index not in self._calls or not isinstance(delta, str) or not delta:
            return []
        self._calls[index].parts.append(delta)
        return [ToolCallDelta(self._call_number(index), arguments=delta)]

    def _call_number(self, index: int) -> int:
        return sorted(self._calls).index(index)

    def _item(self, index: int, item: Any, *, done: bool) -> list[ModelEvent]:
        if not isinstance(item, dict):
            return []
        if isinstance(item.get("id"), str):
            self._by_item_id[item["id"]] = index
        kind = item.get("type")
        if kind == "function_call":
            return self._call_item(index, item, done=done)
        if kind == "reasoning":
            self._reasoning_items[index] = item
            if done and ("reasoning", index) not in self._streamed:
                return self._reasoning_delta(index, 0, _summary_text(item))
        elif kind == "message" and done and ("text", index) not in self._streamed:
            return self._text_delta(index, _item_text(item))  # a server that sent no deltas
        return []

    def _call_item(self, index: int, item: dict[str, Any], *, done: bool) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _Call()
            call.call_id = item.get("call_id") or ""
            call.name = item.get("name") or ""
            call.item_id = item.get("id") or ""
            events.append(ToolCallDelta(self._call_number(index), id=call.call_id or None, name=call.name or None))
        call.call_id = call.call_id or item.get("call_id") or ""
        call.name = call.name or item.get("name") or ""
        arguments = item.get("arguments")
        if isinstance(arguments, str) and arguments:
            if done:
                call.final = arguments
            elif not call.parts:  # sent whole when announced
                call.parts.append(arguments)
                events.append(ToolCallDelta(self._call_number(index), arguments=arguments))
        return events

    def _completed(self, response: Any) -> list[ModelEvent]:
        if not isinstance(response, dict):
            return []
        self._meta(response)
        status = response.get("status")
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        self.finish_reason = reason or status or "completed"
        nothing_streamed = not (self._text or self._calls or self._reasoning_items)
        return self._output(response.get("output")) if nothing_streamed else []

    def _output(self, output: Any) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        for index, item in enumerate(output if isinstance(output, list) else []):
            events += self._item(index, item, done=False) + self._item(index, item, done=True)
        return events

    # -- a whole body

    def feed_body(self, body: dict[str, Any]) -> list[ModelEvent]:
        """Take a non-streamed ``response`` object."""
        self.events_seen += 1
        if body.get("status") == "failed":
            raise ProviderError(body.get("error") or {"message": "the response failed"})
        if "output" not in body:
            raise ValueError("no output in the response")
        return self._completed(body)

    def turn(self) -> Turn:
        """The turn assembled so far (ids synthesized where the server sent none)."""
        calls = []
        for index in sorted(self._calls):
            slot = self._calls[index]
            text = slot.final if slot.final is not None else "".join(slot.parts)
            arguments, raw = parse_arguments(text)
            meta = {"item_id": slot.item_id} if slot.item_id else {}
            calls.append(ToolCall(slot.call_id or new_call_id(), slot.name, arguments, raw, meta))
        items = [self._reasoning_items[i] for i in sorted(self._reasoning_items)]
        held_thinking, held_text = self._think.flush()
        self._reasoning.append(held_thinking)
        self._text.append(held_text)
        thoughts, answer = split_unopened_think("".join(self._reasoning), "".join(self._text))
        reasoning = None
        if thoughts or items:
            reasoning = Reasoning(thoughts, details={"reasoning_items": items} if items else None)
        return Turn(
            text=answer,
            tool_calls=calls,
            reasoning=reasoning,
            finish_reason=self.finish_reason,
            usage=self.usage,
            model=self.model,
        )


# ---------------------------------------------------------------- the client


class OpenAIResponsesModel(StreamingHTTPModel):
    """A model behind an OpenAI Responses endpoint (``{base_url}/responses``)."""

    path = "responses"
    default_base_url = "https://api.openai.com/v1"

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request``."""
        body: dict[str, Any] = {
            "model": self.name,
            "input": to_responses_input(request.items, self.wire_cache(responses_part)),
            "stream": True,
            # Stateless: ipyagent sends the whole context every time and keeps it itself.
            "store": False,
        }
        if request.system:
            body["instructions"] = request.system
        if request.tools:
            body["tools"] = to_responses_tools(request.tools)
        if request.tool_choice:
            body["tool_choice"] = _tool_choice(request.tool_choice)
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.max_tokens is not None:
            body["max_output_tokens"] = request.max_tokens
        if request.cache_key and httpx.URL(self.url).host == "api.openai.com":
            # OpenAI's own API only: it routes by the key to the machine holding the prefix;
            # other servers ignore the field at best and refuse it at worst.
            body["prompt_cache_key"] = request.cache_key
        return body

    def new_assembler(self) -> ResponsesTurnAssembler:
        """A fresh assembler for one reply."""
        return ResponsesTurnAssembler()
