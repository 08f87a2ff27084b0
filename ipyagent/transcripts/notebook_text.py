"""A transcript notebook's JSON text, written at the cost of writing its bytes.

``NotebookText.text`` returns exactly what ``nbformat.writes`` gives for
``export.notebook_dict`` (same layout: indent 1, sorted keys, multi-line text as lists of
lines), but each item's cells and its metadata entry are rendered, serialised, repaired
(lone surrogates) and scanned for secrets once, then reused while the item is unchanged;
a save re-does only what is new plus the header and the audit cell, and joins the rest.
nbformat is not imported (its validator costs seconds to import and to run on a long run).

Why: autosave rewrites the transcript after every step; rebuilding and validating every
cell made step 400 sixteen times slower than step 10.

An item is unchanged when it is the same object with equal fields (compared against a
deep copy taken when it was rendered), so items edited in place are rendered again.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

from .._secrets import SecretScanner, scanner
from .._secrets import _strings as strings
from .._text import repair_surrogates
from ..errors import TranscriptError
from ..items import Item
from .export import audit_cell, groups, header_cell, skeleton

__all__ = ["NotebookText", "dumps"]

_ID = "\x00ipyagent-cell-id\x00"  # where a cell's position id goes in its cached text
_CELLS = "\x00ipyagent-cells\x00"
_ITEMS = "\x00ipyagent-items\x00"
# mime types nbformat splits into lines besides text/* (nbformat.v4.rwbase)
_SPLIT_MIMES = {"application/javascript", "image/svg+xml"}


def dumps(value: Any, depth: int = 0) -> str:
    """``value`` as nbformat writes it, for a place ``depth`` levels deep (each line but
    the first indented by ``depth`` spaces: JSON strings hold no raw newline)."""
    text = json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False, separators=(",", ": "))
    return text.replace("\n", "\n" + " " * depth) if depth else text


def _split(cell: Mapping[str, Any]) -> dict[str, Any]:
    """``cell`` with multi-line text as lists of lines (``nbformat.v4.rwbase.split_lines``)."""
    out = dict(cell)
    if isinstance(out.get("source"), str):
        out["source"] = out["source"].splitlines(True)
    if out.get("cell_type") == "code":
        outputs = []
        for output in out.get("outputs", []):
            output = dict(output)
            kind = output.get("output_type")
            if kind in ("execute_result", "display_data") and isinstance(output.get("data"), dict):
                output["data"] = {k: v.splitlines(True) if isinstance(v, str) and (
                    k.startswith("text/") or k in _SPLIT_MIMES) else v
                    for k, v in output["data"].items()}
            elif kind == "stream" and isinstance(output.get("text"), str):
                output["text"] = output["text"].splitlines(True)
            outputs.append(output)
        out["outputs"] = outputs
    return out


class _Entry:
    """One item as last rendered: the item, a copy of its fields, its metadata text."""

    __slots__ = ("item", "fields", "text", "scanned")

    def __init__(self, item: Item, text: str, scanned: SecretScanner) -> None:
        self.item = item
        self.fields = copy.deepcopy(vars(item))
        self.text = text
        self.scanned = scanned


class NotebookText:
    """The transcript text of a context, cells and items cached between calls."""

    def __init__(self) -> None:
        self._items: dict[int, _Entry] = {}
        # group (item ids) → (its cells' texts, each split at its id; the scanner used)
        self._groups: dict[tuple[int, ...], tuple[list[tuple[str, str]], SecretScanner]] = {}

    def text(self, context: Any, *, header: Mapping[str, Any], kernel_name: str,
             metadata: Mapping[str, Any], secrets: Mapping[str, str] | Iterable[tuple[str, str]],
             target: object = "the transcript") -> str:
        """The notebook's JSON text; raises ``TranscriptError`` naming the secret when it
        would hold one (``secrets``: name → value pairs) — nothing is written then."""
        found = scanner(secrets)
        refuse = (f"refusing to write {target}: it would contain the value of ${{}}; remove "
                  "it from the context (agent.context is editable) and save again")
        items = list(context)
        fresh: set[int] = set()
        entries: dict[int, _Entry] = {}
        item_texts = []
        for item in items:
            key = id(item)
            entry = self._items.get(key)
            if entry is None or entry.item is not item or entry.fields != vars(item):
                data = item.to_dict()
                _scan(found, data, refuse)
                entry = _Entry(item, repair_surrogates(dumps(data, 4)), found)
                fresh.add(key)
            elif entry.scanned is not found:
                _scan(found, item.to_dict(), refuse)
                entry.scanned = found
            entries[key] = entry
            item_texts.append(entry.text)
        self._items = entries

        parts: list[str] = []
        index = 0
        head = header_cell(header, context.system)
        _scan(found, head, refuse)
        head["id"] = f"ipyagent-{index}"
        parts.append(repair_surrogates(dumps(_split(head), 2)))
        index += 1
        used: dict[tuple[int, ...], tuple[list[tuple[str, str]], SecretScanner]] = {}
        for group, render in groups(items):
            ids = tuple(id(i) for i in group if i is not None)
            cached = self._groups.get(ids)
            if cached is None or any(k in fresh for k in ids) or cached[1] is not found:
                cells = render()
                _scan(found, cells, refuse)
                texts = []
                for cell in cells:
                    cell = _split(cell)
                    cell["id"] = _ID
                    before, _, after = repair_surrogates(dumps(cell, 2)).partition(
                        json.dumps(_ID))
                    texts.append((before, after))
                cached = (texts, found)
            used[ids] = cached
            for before, after in cached[0]:
                parts.append(f'{before}"ipyagent-{index}"{after}')
                index += 1
        self._groups = used
        last = audit_cell(items)
        if last is not None:
            _scan(found, last, refuse)
            parts.append(repair_surrogates(dumps(_split(last), 2)))

        nb = skeleton(context.system, _ITEMS, _CELLS, kernel_name, metadata)
        _scan(found, nb, refuse)
        outer = repair_surrogates(dumps(nb))
        start, _, rest = outer.partition(json.dumps(_CELLS))  # "cells" is the first key
        middle, _, end = rest.partition(json.dumps(_ITEMS))  # after "format", all fixed
        cells_text = "[\n  " + ",\n  ".join(parts) + "\n ]"
        items_text = "[\n    " + ",\n    ".join(item_texts) + "\n   ]" if item_texts else "[]"
        return "".join((start, cells_text, middle, items_text, end))


def _scan(found: SecretScanner, value: Any, refuse: str) -> None:
    """Raise ``TranscriptError`` (``refuse`` with the secret's name) if ``value`` holds one."""
    if not found:
        return
    for text in strings(value):
        leaked = found.find(text)
        if leaked:
            raise TranscriptError(refuse.format(leaked))
