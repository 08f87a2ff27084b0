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

Memory: once a text was written (``written``), its long pieces — the items' metadata and
the cells, display payloads included — are not kept: the next call reads them back from
the file (one read of the file per save), or renders them again if the file changed. The
new tool results' own large display values are spilled then too (``ipyagent._spill``).
"""

from __future__ import annotations

import copy
import json
import mmap
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Union

from .._secrets import SecretScanner, scanner
from .._secrets import _strings as strings
from .._spill import spill
from .._stamps import Stamp, stamp
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


# Where a cached text lies in the file last written, (start, end) in bytes: a long run's
# texts are read back from there instead of being kept in memory.
Span = tuple[int, int]
Text = Union[str, Span]


class _Entry:
    """One item as last rendered: the item, a copy of its fields, its metadata text."""

    __slots__ = ("item", "fields", "text", "scanned")

    def __init__(self, item: Item, text: Text, scanned: SecretScanner) -> None:
        self.item = item
        self.fields = copy.deepcopy(vars(item))
        self.text = text
        self.scanned = scanned


class _Written:
    """The file last written, mapped (once per save, not read into memory: a long run's
    transcript is megabytes) only if a cached text lies there and the file is still the
    one written (same stamp and length)."""

    def __init__(self, path: Path | None, stamp: Stamp | None, length: int) -> None:
        self.path, self.stamp, self.length = path, stamp, length
        self._map: mmap.mmap | None = None
        self._read = False

    def get(self, text: Text) -> str | None:
        if isinstance(text, str):
            return text
        if not self._read:
            self._read = True
            if (self.path is not None and self.stamp is not None and self.length
                    and stamp(self.path) == self.stamp):
                try:
                    with open(self.path, "rb") as f:
                        self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                except (OSError, ValueError):
                    self._map = None
                if self._map is not None and len(self._map) != self.length:
                    self.forget()
                    self._read = True
        if self._map is None:
            return None
        try:
            return self._map[text[0]:text[1]].decode("utf-8")
        except UnicodeDecodeError:  # not what was written there: render it again
            return None

    def forget(self) -> None:
        """Unmap the file (the next ``get`` of a span maps it again)."""
        if self._map is not None:
            self._map.close()
        self._map, self._read = None, False


class NotebookText:
    """The transcript text of a context, cells and items cached between calls.

    After ``written(path)`` (the text was saved there), the long cached texts are dropped
    from memory and read back from that file at the next call; if the file changed since
    (another program wrote it), they are rendered again from the items.
    """

    SPILL = 512  # characters: shorter texts stay in memory (a span costs about as much)

    def __init__(self) -> None:
        self._items: dict[int, _Entry] = {}
        # group (item ids) → (its cells' texts, each split at its id; the scanner used)
        self._groups: dict[tuple[int, ...], tuple[list[list[Text]], SecretScanner]] = {}
        self._written = _Written(None, None, 0)
        # the last text's long cached pieces: (where it starts, its length, where it is kept)
        self._pending: list[tuple[int, int, _Entry | list[Text], int]] = []
        self._length = 0
        self._fresh: list[_Entry] = []  # the last text's items rendered anew
        self._retry: list[_Entry] = []  # items not spilled yet: someone held their lists

    def text(self, context: Any, *, header: Mapping[str, Any], kernel_name: str,
             metadata: Mapping[str, Any], secrets: Mapping[str, str] | Iterable[tuple[str, str]],
             target: object = "the transcript") -> str:
        """The notebook's JSON text; raises ``TranscriptError`` naming the secret when it
        would hold one (``secrets``: name → value pairs) — nothing is written then."""
        try:
            return self._render(context, header=header, kernel_name=kernel_name,
                                metadata=metadata, secrets=secrets, target=target)
        finally:
            self._written.forget()  # the file is unmapped whatever happened

    def _render(self, context: Any, *, header: Mapping[str, Any], kernel_name: str,
                metadata: Mapping[str, Any], secrets: Mapping[str, str] | Iterable[tuple[str, str]],
                target: object) -> str:
        found = scanner(secrets)
        refuse = (f"refusing to write {target}: it would contain the value of ${{}}; remove "
                  "it from the context (agent.context is editable) and save again")
        source = self._written
        pieces: list[str] = []
        # (piece index, where it is kept: an entry's text (-1) or a cell's pair's 0 or 1)
        marks: list[tuple[int, _Entry | list[Text], int]] = []
        add, spill = pieces.append, self.SPILL

        items = list(context)
        fresh: set[int] = set()
        entries: dict[int, _Entry] = {}
        item_texts: list[tuple[str, _Entry]] = []
        for item in items:
            key = id(item)
            entry = self._items.get(key)
            text = None
            if entry is None or entry.item is not item or entry.fields != vars(item):
                entry = None
            elif entry.scanned is not found:
                _scan(found, item.to_dict(), refuse)
                entry.scanned = found
            if entry is not None:
                text = source.get(entry.text)
            if text is None:
                data = item.to_dict()
                _scan(found, data, refuse)
                text = repair_surrogates(dumps(data, 4))
                entry = _Entry(item, text, found)
                fresh.add(key)
            assert entry is not None
            entries[key] = entry
            item_texts.append((text, entry))
        self._items = entries
        self._fresh = [entries[k] for k in fresh]

        pieces.append("")  # the notebook's start: known at the end
        index = 0
        head = header_cell(header, context.system)
        _scan(found, head, refuse)
        head["id"] = f"ipyagent-{index}"
        add("[\n  ")
        add(repair_surrogates(dumps(_split(head), 2)))
        index += 1
        used: dict[tuple[int, ...], tuple[list[list[Text]], SecretScanner]] = {}
        for group, render in groups(items):
            ids = tuple(id(i) for i in group if i is not None)
            cached = self._groups.get(ids)
            texts: list[list[Text]] | None = None
            if cached is not None and not any(k in fresh for k in ids) and cached[1] is found:
                texts = _resolve(source, cached[0])
            if texts is None:
                cells = render()
                _scan(found, cells, refuse)
                texts = []
                for cell in cells:
                    cell = _split(cell)
                    cell["id"] = _ID
                    before, _, after = repair_surrogates(dumps(cell, 2)).partition(
                        json.dumps(_ID))
                    texts.append([before, after])
            used[ids] = (texts, found)
            for pair in texts:
                add(",\n  ")
                head_text, tail_text = pair  # strings here: spans were resolved above
                assert isinstance(head_text, str) and isinstance(tail_text, str)
                if len(head_text) >= spill:
                    marks.append((len(pieces), pair, 0))
                add(head_text)
                add(f'"ipyagent-{index}"')
                if len(tail_text) >= spill:
                    marks.append((len(pieces), pair, 1))
                add(tail_text)
                index += 1
        self._groups = used
        last = audit_cell(items)
        if last is not None:
            _scan(found, last, refuse)
            add(",\n  ")
            add(repair_surrogates(dumps(_split(last), 2)))
        add("\n ]")

        nb = skeleton(context.system, _ITEMS, _CELLS, kernel_name, metadata)
        _scan(found, nb, refuse)
        outer = repair_surrogates(dumps(nb))
        start, _, rest = outer.partition(json.dumps(_CELLS))  # "cells" is the first key
        middle, _, end = rest.partition(json.dumps(_ITEMS))  # after "format", all fixed
        pieces[0] = start
        add(middle)
        if item_texts:
            for n, (text, entry) in enumerate(item_texts):
                add(",\n    " if n else "[\n    ")
                if len(text) >= spill:
                    marks.append((len(pieces), entry, -1))
                add(text)
            add("\n   ]")
        else:
            add("[]")
        add(end)
        whole = "".join(pieces)
        # Byte offsets in the file (write_atomic writes UTF-8; every piece was repaired, so
        # it encodes): only a non-ASCII piece needs encoding to be measured.
        offsets = [0]
        for piece in pieces:
            offsets.append(offsets[-1] + (len(piece) if piece.isascii() else len(piece.encode("utf-8"))))
        self._pending = [(offsets[i], offsets[i + 1], where, slot) for i, where, slot in marks]
        self._length = offsets[-1]
        return whole

    def written(self, path: str | os.PathLike[str]) -> None:
        """The last ``text`` was saved to ``path``: keep its long pieces there, not here."""
        self._written = _Written(Path(path), stamp(path), self._length)
        for start, end, where, slot in self._pending:
            if isinstance(where, _Entry):
                where.text = (start, end)
            else:
                where[slot] = (start, end)
        self._pending = []
        # Saved now: the new results' large display values (and those of the results a new
        # summary replaced) leave memory for the spill file (read back on access); the copy
        # of their fields follows, so they are not rendered again.
        # One whose lists someone holds (``outs = result.outputs``) is tried again at the next
        # save while it is unchanged: spilling it now would lose their later edits.
        retry = []
        for entry in self._fresh + [e for e in self._retry if self._items.get(id(e.item)) is e
                                    and e.fields == vars(e.item)]:
            done = spill(entry.item)
            if done:
                entry.fields = copy.deepcopy(vars(entry.item))
            elif done is None:
                retry.append(entry)
        self._fresh, self._retry = [], retry


def _resolve(source: _Written, texts: list[list[Text]]) -> list[list[Text]] | None:
    """The cells' texts with each span read back; None if one cannot be (file changed)."""
    out: list[list[Text]] = []
    for pair in texts:
        got = [source.get(t) for t in pair]
        if None in got:
            return None
        out.append([t for t in got if t is not None])
    return out


def _scan(found: SecretScanner, value: Any, refuse: str) -> None:
    """Raise ``TranscriptError`` (``refuse`` with the secret's name) if ``value`` holds one."""
    if not found:
        return
    for text in strings(value):
        leaked = found.find(text)
        if leaked:
            raise TranscriptError(refuse.format(leaked))
