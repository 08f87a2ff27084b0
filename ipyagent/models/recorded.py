"""``ReplayModel``: a model client that answers with the turns a transcript recorded.

No request leaves the process. ``turns_from_items`` cuts a recorded item list back into
the assistant turns the model sent — ``Reasoning? Message? ToolCall*`` runs, as the chat
wire groups them — with the arguments the model *proposed* (an edited call's
``meta["original_arguments"]``) and, when the loop recorded it, the turn's usage and
finish reason from ``meta["turn"]``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterable, Sequence

from ..context.items import Item, Message, Reasoning, ToolCall, turn_spans, unfold
from ..errors import ModelError
from .base import (
    ModelEvent,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Turn,
    TurnComplete,
)

__all__ = ["ReplayModel", "RecordedTurn", "turns_from_items"]


@dataclass
class RecordedTurn:
    """One recorded assistant turn and where it sits in the flattened item list."""

    turn: Turn
    start: int  # index of its first item
    end: int  # index just past its last item

    @property
    def calls(self) -> list[ToolCall]:
        return self.turn.tool_calls


def turns_from_items(items: Sequence[Item]) -> list[RecordedTurn]:
    """The assistant turns in ``items`` (already unfolded), in order."""
    turns: list[RecordedTurn] = []
    for span in turn_spans(items):
        current = RecordedTurn(Turn(), span.start, span.stop)
        turns.append(current)
        recorded = items[span.start].meta.get("turn") or {}
        current.turn.finish_reason = recorded.get("finish_reason")
        current.turn.usage = recorded.get("usage")
        current.turn.model = recorded.get("model")
        for item in items[span.start:span.stop]:
            if isinstance(item, Reasoning):
                current.turn.reasoning = Reasoning(item.content, item.details)
            elif isinstance(item, Message):
                current.turn.text = item.content
            elif isinstance(item, ToolCall):
                proposed = item.meta.get("original_arguments")
                current.turn.tool_calls.append(ToolCall(
                    item.id, item.name, dict(proposed if proposed is not None else item.arguments),
                    item.raw_arguments, _kept_meta(item)))
    for rt in turns:
        if rt.turn.finish_reason is None:
            rt.turn.finish_reason = "tool_calls" if rt.turn.tool_calls else "stop"
    return turns


def _kept_meta(call: ToolCall) -> dict[str, Any]:
    """What the model's call itself said beyond its arguments: that it was written as text
    (and, if so, why it could not be read), so the replayed call is answered alike."""
    return {k: call.meta[k] for k in ("from_text", "written_problem") if k in call.meta}


class ReplayModel:
    """Yields recorded turns in order, whatever the request; ``requests`` counts them."""

    replays = True  # the loop repairs no recorded call: its code is what ran
    def __init__(self, turns: Iterable[Turn | RecordedTurn], name: str = "replay") -> None:
        self.turns = [t.turn if isinstance(t, RecordedTurn) else t for t in turns]
        self.name = name
        self.requests = 0

    @classmethod
    def from_items(cls, items: Iterable[Item], name: str = "replay") -> ReplayModel:
        """A replay of every assistant turn in ``items`` (compacted ones included)."""
        return cls(turns_from_items(list(unfold(items, keep_summaries=True))), name=name)

    @property
    def remaining(self) -> int:
        return len(self.turns) - self.requests

    def __repr__(self) -> str:
        return f"ReplayModel({self.requests} of {len(self.turns)} turns replayed)"

    async def aclose(self) -> None:
        return None

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if self.requests >= len(self.turns):
            raise ModelError(f"replay: all {len(self.turns)} recorded turns were already used")
        recorded = self.turns[self.requests]
        self.requests += 1
        turn = _copy(recorded)  # the loop may edit calls; the record must stay as it was
        if turn.reasoning is not None and turn.reasoning.content:
            yield ReasoningDelta(turn.reasoning.content)
        if turn.text:
            yield TextDelta(turn.text)
        for index, call in enumerate(turn.tool_calls):
            args = call.raw_arguments if call.raw_arguments is not None else json.dumps(
                call.arguments, ensure_ascii=False)
            yield ToolCallDelta(index, id=call.id, name=call.name, arguments=args)
        yield TurnComplete(turn)


def _copy(turn: Turn) -> Turn:
    usage: Any = dict(turn.usage) if turn.usage else None
    reasoning = Reasoning(turn.reasoning.content, turn.reasoning.details) if turn.reasoning else None
    return Turn(text=turn.text, reasoning=reasoning, finish_reason=turn.finish_reason,
                usage=usage, model=turn.model,
                tool_calls=[ToolCall(c.id, c.name, json.loads(json.dumps(c.arguments)),
                                     c.raw_arguments, dict(c.meta)) for c in turn.tool_calls])
