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
deep copy taken when it was rendered, its numbers compared with their type: ``1 == True
== 1.0`` but their JSON differs), so items edited in place are rendered again.

The text is made as UTF-8 bytes. Once a text was written (``written``), each item's
metadata entry and each group's cells are known by where they lie in that file; the next
call copies them from there (``pread``, not mapped), an unchanged run of
neighbouring cells or items as one span, so a save at step 1,000 costs about what writing
its bytes costs. If the file changed meanwhile (another program wrote it), what lies only
there is rendered again from the items. Long pieces are not kept in memory; the new tool
results' own large display values are spilled then too (``ipyagent.context.spill``).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from secrets import token_hex
from typing import Any, Union

from .._util.stamps import Stamp, stamp
from .._util.text import repair_surrogates
from ..context.items import Item
from ..context.spill import spill, swapping
from ..errors import TranscriptError
from ..trust.secrets import SecretScanner, scanner
from ..trust.secrets import _strings as strings
from .export import audit_cell, groups, header_cell, skeleton
from .nbjson import dumps

__all__ = ["NotebookText", "dumps"]

# Where a cell's position id, the cells, the items and the steady metadata go in a text
# being made; a token of this process's own, so that no text from outside can be one.
_MARK = token_hex(8)
_ID = f"\x00ipyagent-cell-id-{_MARK}\x00"
_CELLS = f"\x00ipyagent-cells-{_MARK}\x00"
_ITEMS = f"\x00ipyagent-items-{_MARK}\x00"
_ID_JSON, _CELLS_JSON, _ITEMS_JSON = (json.dumps(m).encode() for m in (_ID, _CELLS, _ITEMS))
_STEADY = {key: f"\x00ipyagent-{key}-{_MARK}\x00" for key in ("settings", "tools")}
_STEADY_JSON = {key: json.dumps(mark).encode() for key, mark in _STEADY.items()}
# mime types nbformat splits into lines besides text/* (nbformat.v4.rwbase)
_SPLIT_MIMES = {"application/javascript", "image/svg+xml"}


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
Text = Union[bytes, Span]
_ITEM_SEP = b",\n    "  # before each item of metadata.ipyagent.items but the first
_CELL_SEP = b",\n  "  # before each cell but the first


class _Entry:
    """One item as last rendered: the item, a copy of its fields, its metadata text — kept
    in memory when short (``data``) — and where it lay in the file last written (``span``;
    ``lead``: the span starts with the separator before it, so that the spans of
    consecutive unchanged items join into one)."""

    __slots__ = ("item", "fields", "data", "span", "lead", "scanned")

    def __init__(self, item: Item, data: bytes, scanned: SecretScanner) -> None:
        self.item = item
        self.fields = exact_copy(vars(item))
        self.data: bytes | None = data
        self.span: Span | None = None
        self.lead = False
        self.scanned = scanned


class _Group:
    """A group's cells as last rendered: each cell's text split at its id (bytes, or a span
    relative to the group's start), and where the whole group lay in the file last written
    (separators and ids included), with the index of its first cell there."""

    __slots__ = ("pairs", "scanned", "span", "index")

    def __init__(self, pairs: list[list[Text]], scanned: SecretScanner) -> None:
        self.pairs, self.scanned = pairs, scanned
        self.span: Span | None = None
        self.index = -1


class _Written:
    """The file last written, read back with ``pread`` where its spans lie (not mapped: a
    file truncated meanwhile would kill the kernel with SIGBUS) while it is the one written:
    same stamp, checked on the descriptor read before and after reading."""

    def __init__(self, path: Path | None, stamp: Stamp | None, length: int) -> None:
        self.path, self.stamp, self.length = path, stamp, length
        self.fd: int | None = None

    def open(self) -> bool:
        """Open the file; False when it is not the one written (no span is read then)."""
        if self.path is None or self.stamp is None or not self.length:
            return False
        try:
            # O_NONBLOCK: a FIFO put in its place (another program) must not block the
            # user's kernel until someone writes to it; its stamp then says it is not ours.
            self.fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
                              | getattr(os, "O_NONBLOCK", 0))
        except (OSError, ValueError):
            return False
        # The stamp says the file is the one written: a rename gives a new inode, a write in
        # place a new change time (which cannot be set back).
        if stamp(self.fd) != self.stamp:
            self.forget()
            return False
        return True

    def read(self, span: Span) -> bytes:
        assert self.fd is not None
        data = os.pread(self.fd, span[1] - span[0], span[0])
        if len(data) != span[1] - span[0]:
            raise _Changed
        return data

    def unchanged(self) -> bool:
        """Still the file written (nobody wrote it while it was read)."""
        return self.fd is not None and stamp(self.fd) == self.stamp

    def forget(self) -> None:
        """Close the file."""
        if self.fd is not None:
            os.close(self.fd)
        self.fd = None


class _Changed(Exception):
    """The file last written changed while its spans were read: render without it."""


class _Out:
    """The text being made: bytes, and spans of the file last written, neighbouring spans
    joined (an unchanged run of cells or items is one copy); ``pos`` is where the next
    piece lands in the new file."""

    __slots__ = ("parts", "pos")

    def __init__(self) -> None:
        self.parts: list[Text] = []
        self.pos = 0

    def add(self, data: bytes) -> None:
        self.parts.append(data)
        self.pos += len(data)

    def span(self, span: Span) -> None:
        parts = self.parts
        if parts and type(last := parts[-1]) is tuple and last[1] == span[0]:
            parts[-1] = (last[0], span[1])
        else:
            parts.append(span)
        self.pos += span[1] - span[0]

    def piece(self, text: Text, base: int) -> None:
        """Bytes, or a span relative to ``base`` in the file last written."""
        if type(text) is bytes:
            self.add(text)
        else:
            self.span((base + text[0], base + text[1]))

    def join(self, source: _Written) -> bytes:
        read = source.read
        text = b"".join(p if type(p) is bytes else read(p)  # type: ignore[arg-type]
                        for p in self.parts)
        if source.fd is not None and not source.unchanged():
            raise _Changed
        return text


class NotebookText:
    """The transcript text of a context, cells and items cached between calls.

    After ``written(path)`` (the text was saved there), the long cached texts are dropped
    from memory and read back from that file at the next call; if the file changed since
    (another program wrote it), they are rendered again from the items.
    """

    SPILL = 512  # bytes: shorter texts stay in memory too (they cost about a span)

    def __init__(self) -> None:
        self._items: dict[int, _Entry] = {}
        self._groups: dict[tuple[int, ...], _Group] = {}  # by the ids of its items
        self._written = _Written(None, None, 0)
        # what the last text puts where, applied once it is written: (entry, its span, lead)
        # and (group, its span, its first cell's index, its pairs laid out anew or None)
        self._placed: list[tuple[_Entry, Span, bool]] = []
        self._laid: list[tuple[_Group, Span, int, list[list[Text]] | None]] = []
        self._length = 0
        self._fresh: list[_Entry] = []  # the last text's items rendered anew
        self._kept: dict[str, tuple[str, bytes, SecretScanner]] = {}  # _steady's texts
        self._retry: list[_Entry] = []  # items not spilled yet: someone held their lists

    def text(self, context: Any, *, header: Mapping[str, Any], kernel_name: str,
             metadata: Mapping[str, Any], secrets: Mapping[str, str] | Iterable[tuple[str, str]],
             target: object = "the transcript") -> str:
        """The notebook's JSON text; raises ``TranscriptError`` naming the secret when it
        would hold one (``secrets``: name → value pairs) — nothing is written then."""
        return self.encoded(context, header=header, kernel_name=kernel_name, metadata=metadata,
                            secrets=secrets, target=target).decode("utf-8")

    def encoded(self, context: Any, *, header: Mapping[str, Any], kernel_name: str,
                metadata: Mapping[str, Any], secrets: Mapping[str, str] | Iterable[tuple[str, str]],
                target: object = "the transcript") -> bytes:
        """``text`` as the UTF-8 bytes a save writes (made as bytes: nothing is decoded or
        encoded again on the way to the file)."""
        try:
            return self._render(context, header=header, kernel_name=kernel_name,
                                metadata=metadata, secrets=secrets, target=target)
        except _Changed:  # another program wrote the file as it was read: not from there
            self._written.forget()
            self._written = _Written(None, None, 0)
            return self._render(context, header=header, kernel_name=kernel_name,
                                metadata=metadata, secrets=secrets, target=target)
        finally:
            self._written.forget()  # the file is closed whatever happened

    def _render(self, context: Any, *, header: Mapping[str, Any], kernel_name: str,
                metadata: Mapping[str, Any], secrets: Mapping[str, str] | Iterable[tuple[str, str]],
                target: object) -> bytes:
        found = scanner(secrets)
        refuse = (f"refusing to write {target}: it would contain the value of ${{}}; remove "
                  "it from the context (agent.context is editable) and save again")
        source = self._written
        usable = source.open()  # False: no span is read; what lies only there is rendered again
        limit = self.SPILL
        out = _Out()
        placed: list[tuple[_Entry, Span, bool]] = []
        laid: list[tuple[_Group, Span, int, list[list[Text]] | None]] = []

        items = list(context)
        fresh: set[int] = set()
        entries: dict[int, _Entry] = {}
        listed: list[_Entry] = []
        for item in items:
            key = id(item)
            entry = self._items.get(key)
            if (entry is None or entry.item is not item or entry.fields != vars(item)
                    or (entry.data is None and not usable)):
                data = item.to_dict()
                _scan(found, data, refuse)
                entry = _Entry(item, _encode(dumps(data, 4)), found)
                fresh.add(key)
            elif entry.scanned is not found:
                _scan(found, item.to_dict(), refuse)
                entry.scanned = found
            entries[key] = entry
            listed.append(entry)
        self._items = entries
        self._fresh = [entries[k] for k in fresh]

        # The tool specs and the settings rarely change: laid out again only when they do.
        metadata = dict(metadata)
        steady = {name: metadata.pop(name) for name in _STEADY if name in metadata}
        nb = skeleton(context.system, _ITEMS, _CELLS, kernel_name,
                      {**metadata, **{name: _STEADY[name] for name in steady}})
        _scan(found, nb, refuse)
        outer = _encode(dumps(nb))
        for name, value in steady.items():
            outer = outer.replace(_STEADY_JSON[name], self._steady(name, value, found, refuse), 1)
        start, _, rest = outer.partition(_CELLS_JSON)  # "cells" is the first key
        middle, _, end = rest.partition(_ITEMS_JSON)  # after "format", all fixed
        out.add(start)
        head = header_cell(header, context.system)
        _scan(found, head, refuse)
        head["id"] = "ipyagent-0"
        out.add(b"[\n  ")
        out.add(_encode(dumps(_split(head), 2)))
        index = 1
        used: dict[tuple[int, ...], _Group] = {}
        for group, render in groups(items):
            ids = tuple(id(i) for i in group if i is not None)
            cached = self._groups.get(ids)
            if (cached is None or cached.scanned is not found or any(k in fresh for k in ids)
                    or (not usable and cached.span is not None
                        and any(type(t) is tuple for pair in cached.pairs for t in pair))):
                cells = render()
                _scan(found, cells, refuse)
                pairs: list[list[Text]] = []
                for cell in cells:
                    cell = _split(cell)
                    cell["id"] = _ID
                    before, _, after = _encode(dumps(cell, 2)).partition(_ID_JSON)
                    pairs.append([before, after])
                cached = _Group(pairs, found)
            used[ids] = cached
            begin = out.pos
            if usable and cached.span is not None and cached.index == index:
                out.span(cached.span)  # as it lies in the file: its ids are the same
                laid.append((cached, (begin, out.pos), index, None))
                index += len(cached.pairs)
                continue
            base = cached.span[0] if cached.span is not None else 0
            pairs = []
            for head_text, tail_text in cached.pairs:
                out.add(_CELL_SEP)
                at = out.pos
                out.piece(head_text, base)
                head_at = (at - begin, out.pos - begin)
                out.add(b'"ipyagent-%d"' % index)
                at = out.pos
                out.piece(tail_text, base)
                tail_at = (at - begin, out.pos - begin)
                pairs.append([_kept(head_text, head_at, limit), _kept(tail_text, tail_at, limit)])
                index += 1
            laid.append((cached, (begin, out.pos), index - len(pairs), pairs))
        self._groups = used
        last = audit_cell(items)
        if last is not None:
            _scan(found, last, refuse)
            out.add(_CELL_SEP)
            out.add(_encode(dumps(_split(last), 2)))
        out.add(b"\n ]")
        out.add(middle)
        if listed:
            for n, entry in enumerate(listed):
                span = entry.span if usable else None
                if span is not None and entry.lead and n:
                    at = out.pos
                    out.span(span)  # its separator included: joins the span before it
                else:
                    if span is not None and entry.lead:  # now the first: no separator
                        span = (span[0] + len(_ITEM_SEP), span[1])
                    if n:
                        at = out.pos
                        out.add(_ITEM_SEP)
                    else:
                        out.add(b"[\n    ")
                        at = out.pos
                    if span is not None:
                        out.span(span)
                    else:
                        assert entry.data is not None  # rendered again when only the file had it
                        out.add(entry.data)
                placed.append((entry, (at, out.pos), n > 0))
            out.add(b"\n   ]")
        else:
            out.add(b"[]")
        out.add(end)
        self._placed, self._laid, self._length = placed, laid, out.pos
        return out.join(source)

    def _steady(self, key: str, value: Any, found: SecretScanner, refuse: str) -> bytes:
        """``metadata.ipyagent[key]``'s text, made again only when ``value`` changed (its
        repr tells 1 from True and 1.0, as its text does) or the secrets did."""
        shown = repr(value)
        kept = self._kept.get(key)
        if kept is not None and kept[0] == shown and kept[2] is found:
            return kept[1]
        _scan(found, value, refuse)
        text = _encode(dumps(value, 3))  # notebook → metadata → ipyagent → key
        self._kept[key] = (shown, text, found)
        return text

    def written(self, path: str | os.PathLike[str]) -> None:
        """The last ``text`` was saved to ``path``: keep its long pieces there, not here."""
        now = stamp(path)
        if now is not None and now[3] != self._length:  # replaced already (another program)
            now = None  # not ours: nothing is read back from it
        self._written = _Written(Path(path), now, self._length)
        for entry, span, lead in self._placed:
            entry.span, entry.lead = span, lead
            if entry.data is not None and len(entry.data) >= self.SPILL:
                entry.data = None  # long: read back from the file
        for group, span, index, pairs in self._laid:
            group.span, group.index = span, index
            if pairs is not None:
                group.pairs = pairs
        self._placed, self._laid = [], []
        # Saved now: the new results' large display values (and those of the results a new
        # summary replaced) leave memory for the spill file (read back on access); the copy
        # of their fields follows, so they are not rendered again.
        # One whose lists someone holds (``outs = result.outputs``) is tried again at the next
        # save while it is unchanged: spilling it now would lose their later edits.
        # One edited since it was rendered (another thread, while this text was written) is
        # not: its copy must keep saying so, so that the next save renders it again. The
        # check, the spill and the copy hold ``swapping``: no read of its lists comes between.
        retry = []
        for entry in self._fresh + [e for e in self._retry if self._items.get(id(e.item)) is e
                                    and e.fields == vars(e.item)]:
            with swapping:
                done = spill(entry.item, _unchanged(entry))
                if done:
                    entry.fields = exact_copy(vars(entry.item))
            if done is None:
                retry.append(entry)
        self._fresh, self._retry = [], retry


class _Exact:
    """A number in a copy of an item's fields, equal only to a number of its own type and
    text (``True``, ``1`` and ``1.0`` are equal in Python, not in JSON; nor are 0.0 and -0.0)."""

    __slots__ = ("value", "kind")

    def __init__(self, value: Any) -> None:
        self.value, self.kind = value, type(value)

    def __eq__(self, other: object) -> bool:
        if type(other) is not self.kind:
            return False
        if self.kind is float:
            return float.hex(other) == float.hex(self.value)  # type: ignore[arg-type]
        return bool(other == self.value)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:  # a dict key: found where its number is
        return hash(self.value)

    def __repr__(self) -> str:
        return f"_Exact({self.value!r})"


def exact_copy(value: Any) -> Any:
    """A deep copy of ``value`` to compare it with later (``copy == value``): its numbers
    are ``_Exact``, so a number edited to an equal one of another JSON text is a change."""
    kind = type(value)
    if kind is dict:
        return {k if type(k) is str else _Exact(k) if isinstance(k, (int, float)) else k:
                exact_copy(v) for k, v in value.items()}
    if kind is list:
        return [exact_copy(v) for v in value]
    if kind is tuple:
        return tuple(exact_copy(v) for v in value)
    if kind is str or value is None:
        return value
    if isinstance(value, (int, float)):  # bool too
        return _Exact(value)
    return copy.deepcopy(value)


def _unchanged(entry: _Entry) -> Callable[[], bool]:
    """Whether ``entry``'s item is still as it was rendered."""
    return lambda: bool(entry.fields == vars(entry.item))


def _kept(text: Text, at: Span, limit: int) -> Text:
    """What a cell's piece is kept as once written: short bytes stay, the rest is where it
    lies (relative to its group's start)."""
    return text if type(text) is bytes and len(text) < limit else at


def _encode(text: str) -> bytes:
    """``text`` as UTF-8, its lone surrogates repaired first (a save must not fail on one)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return repair_surrogates(text).encode("utf-8")


def _scan(found: SecretScanner, value: Any, refuse: str) -> None:
    """Raise ``TranscriptError`` (``refuse`` with the secret's name) if ``value`` holds one."""
    if not found:
        return
    for text in strings(value):
        leaked = found.find(text)
        if leaked:
            raise TranscriptError(refuse.format(leaked))
