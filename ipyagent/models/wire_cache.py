"""``WireCache``: each item's wire form, made once per protocol and reused while unchanged.

A run sends its whole context at every step; re-making each item's part of the request
(every call's arguments dumped to JSON again, every result joined with its note, its
images turned into content parts) cost ~3.5 µs per item on the chat wire, 3.5 ms a
request at 1,000 items. Each protocol splits its conversion in two: a pure function of
one item (its part, cached here) and the assembly of the parts in order (roles merged,
images placed), which stays per request and copies what it places, so a body may be
changed without touching the cache.

An item is unchanged when it is the same object with equal fields, compared against a
deep copy of them taken when its part was made (the context is editable, in place too:
``agent.context[3].content = …`` or ``.meta["note"] = …`` is seen by the next request).
An item is cached from its second request on: items made afresh for every request (text
mode renders its own) cost no copy.

A part also keeps its JSON text: a body's list of messages is a ``WireList`` that knows,
for each element copied from a part, that part's dict and text; ``http.encode_json``
joins the texts of the elements still equal to their part's dict and encodes the rest.
"""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from ..context.items import Item, Message, Reasoning, Summary, ToolCall, ToolResult

__all__ = ["WireCache", "WireList", "dumps"]

_P = TypeVar("_P")
_ITEM_TYPES = (Message, ToolCall, ToolResult, Reasoning, Summary)


class _Entry:
    __slots__ = ("item", "fields", "part")

    def __init__(self, item: Item, fields: dict[str, Any] | None, part: Any) -> None:
        self.item, self.fields, self.part = item, fields, part


class WireCache(Generic[_P]):
    """The parts ``build`` makes of items, kept for the items of the last request."""

    # False: every part made again and every body encoded whole, as before this cache
    # (the benchmarks' side-by-side "before").
    enabled = True

    def __init__(self, build: Callable[[Item], _P]) -> None:
        self.build = build
        self._entries: dict[int, _Entry] = {}
        self.made = 0  # parts made (not reused), over this cache's life

    def __repr__(self) -> str:
        return f"<WireCache {getattr(self.build, '__name__', 'parts')}: {len(self._entries)} items>"

    def parts(self, items: Sequence[Item]) -> list[_P]:
        """The part of each item, in order; items not in ``items`` are forgotten."""
        if not self.enabled:
            self.made += len(items)
            return [self.build(item) for item in items]
        old, new = self._entries, {}
        out: list[_P] = []
        for item in items:
            if type(item) not in _ITEM_TYPES:
                out.append(self.build(item))  # the protocol's own error for a non-item
                continue
            key = id(item)
            entry = old.get(key)
            if entry is None or entry.item is not item:
                entry = _Entry(item, None, self.build(item))  # seen once: no copy yet
                self.made += 1
            elif entry.fields is None or entry.fields != vars(item):
                entry = _Entry(item, copy.deepcopy(vars(item)), self.build(item))
                self.made += 1
            new[key] = entry
            out.append(entry.part)
        self._entries = new
        return out


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(value: Any) -> str:
    """``value`` as a request body holds it: compact JSON, non-ASCII as is (``json.dumps``
    with these settings, without making an encoder per call)."""
    return _ENCODER.encode(value)


class WireList(list):  # type: ignore[type-arg]
    """A body's list whose elements may be copies of cached dicts: ``sources[i]`` is
    (the dict element i was copied from, its JSON text), or None."""

    def __init__(self) -> None:
        super().__init__()
        self.sources: list[tuple[dict[str, Any], str] | None] = []

    def add(self, element: Any, source: tuple[dict[str, Any], str] | None = None) -> None:
        """Append ``element`` (a copy of ``source[0]``, when given)."""
        self.append(element)
        self.sources.append(source)

    def encoded(self) -> str:
        """Its JSON text: a cached text for each element still equal to its source.

        One ``dumps`` of the list with a mark in place of each run of such elements (an
        encoder call per element would cost more than it saves), then each mark is
        replaced by its run's texts; the mark is random per call, so untrusted text in an
        element cannot forge one.
        """
        if len(self.sources) != len(self) or not WireCache.enabled:  # changed by list methods
            return dumps(list(self))
        mark = f"ipyagent-wire-{secrets.token_hex(8)}"
        runs: list[list[str]] = []
        skeleton: list[Any] = []
        for element, source in zip(self, self.sources):
            if source is not None and element == source[0]:
                if not skeleton or skeleton[-1] is not mark:
                    skeleton.append(mark)
                    runs.append([])
                runs[-1].append(source[1])
            else:
                skeleton.append(element)
        if not runs:
            return dumps(skeleton)
        if len(skeleton) == 1:
            return "[" + ",".join(runs[0]) + "]"
        pieces = dumps(skeleton).split(json.dumps(mark))
        if len(pieces) != len(runs) + 1:
            return dumps(list(self))
        out = [pieces[0]]
        for run, piece in zip(runs, pieces[1:]):
            out += (",".join(run), piece)
        return "".join(out)


def cached(value: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A part's dict with its JSON text."""
    return value, dumps(value) if WireCache.enabled else ""
