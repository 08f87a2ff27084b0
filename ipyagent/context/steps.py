"""Steps as checkpoints: where step N of a conversation lies in its items, and the items
that keep steps 1..N (``kept``).

A step is one model reply (reasoning, text, tool calls: ``items.turn_spans``) and the
results of its calls; step N is the N-th reply in the order things happened, compacted
ones included (each ``Summary`` unfolded), as replay numbers them. A checkpoint is only
that number: nothing is copied when a step ends.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .items import Item, Summary, ToolCall, ToolResult, item_from_dict, turn_spans, unfold

__all__ = ["StepSpan", "step_spans", "count_steps", "kept", "copy_items", "locate_turn",
           "step_marks", "calls_of"]


@dataclass(frozen=True)
class StepSpan:
    """Step ``number``: ``items[start:end]`` of the unfolded conversation (its reply, then the
    results of its calls)."""

    number: int
    start: int
    end: int

    def __repr__(self) -> str:
        return f"<step {self.number}: items {self.start}–{self.end - 1}>"


def step_spans(items: Sequence[Item]) -> list[StepSpan]:
    """The steps of ``items`` (already unfolded: ``unfold(items, keep_summaries=True)``)."""
    spans = turn_spans(items)
    out = []
    for number, span in enumerate(spans, 1):
        end = span.stop
        while end < len(items) and isinstance(items[end], ToolResult):
            end += 1  # the results of its calls belong to it
        out.append(StepSpan(number, span.start, end))
    return out


def count_steps(items: Iterable[Item]) -> int:
    """How many steps ``items`` hold (compacted ones counted)."""
    return len(turn_spans(list(unfold(items, keep_summaries=True))))


def kept(items: Sequence[Item], n: int) -> list[Item]:
    """The items that keep steps 1..``n`` and drop everything after step ``n``'s results.

    Items before the cut stay the same objects; a compaction summary that holds the cut is
    unfolded there (the summary spoke for steps that are now partly gone), the part before
    the cut kept as it was. ``n`` = 0 keeps what came before the first step.
    """
    if n < 0:
        raise ValueError(f"step {n}: steps are numbered from 1 (0: before the first)")
    flat = list(unfold(items, keep_summaries=True))
    spans = step_spans(flat)
    if n > len(spans):
        raise ValueError(f"there is no step {n}: the conversation has {len(spans)}")
    if n == 0:
        cut = spans[0].start if spans else len(flat)  # the task stays
    else:
        cut = spans[n - 1].end  # what follows step n's results (a new task too) goes
    return _cut(list(items), cut)


def _cut(items: list[Item], cut: int) -> list[Item]:
    """The top-level ``items`` whose unfolded positions are below ``cut``."""
    out: list[Item] = []
    seen = 0
    for item in items:
        size = _size(item)
        if seen + size <= cut:
            out.append(item)
            seen += size
            continue
        if isinstance(item, Summary) and cut > seen:
            inner = [item_from_dict(d) for d in item.replaced]
            out.extend(_cut(inner, cut - seen))
        break
    return out


def _size(item: Item) -> int:
    """How many items ``item`` is once unfolded (a summary also counts itself, as kept)."""
    return sum(1 for _ in unfold([item], keep_summaries=True))


def step_marks(items: Sequence[Item]) -> dict[int, str]:
    """Where steps start among the top-level ``items``: index -> "step N" (a summary that
    holds compacted steps: "steps A–B")."""
    flat = list(unfold(items, keep_summaries=True))
    starts = {span.start: span.number for span in step_spans(flat)}
    marks: dict[int, str] = {}
    at = 0
    for index, item in enumerate(items):
        size = _size(item)
        inside = [starts[p] for p in range(at, at + size) if p in starts]
        at += size
        if not inside:
            continue
        if isinstance(item, Summary):
            marks[index] = (f"step {inside[0]}" if len(inside) == 1
                            else f"steps {inside[0]}–{inside[-1]}") + " (compacted)"
        else:
            marks[index] = f"step {inside[0]}"
    return marks


def locate_turn(items: Sequence[Item], turn: Item) -> int | None:
    """The number of the step whose reply starts with ``turn`` (this very object, else an
    equal one), or None when ``items`` hold no such step."""
    flat = list(unfold(items, keep_summaries=True))
    spans = step_spans(flat)
    for same in (lambda a, b: a is b, lambda a, b: a == b):
        for span in spans:
            if same(flat[span.start], turn):
                return span.number
    return None


def copy_items(items: Iterable[Item]) -> list[Item]:
    """Deep copies of ``items``, as a branch gets them (an edit in one branch stays there)."""
    items = list(items)
    try:
        # At C speed; only bytes pickled here, from these items, are unpickled.
        return list(pickle.loads(pickle.dumps(items, pickle.HIGHEST_PROTOCOL)))
    except Exception:  # noqa: BLE001 - items built in memory may hold what pickle refuses
        return [item_from_dict(i.to_dict()) for i in items]


def calls_of(items: Iterable[Item]) -> list[ToolCall]:
    """The tool calls in ``items`` (compacted ones included), in order."""
    return [i for i in unfold(items) if isinstance(i, ToolCall)]
