"""Display payloads spilled from memory to a private file and read back on demand.

A long run's plots and HTML (``ToolResult.outputs``, ~44 KB per step of a plotting run)
would stay in the user's kernel for the whole session. Once an item is saved (the autosave
wrote it), each large value of its display bundles (a result's, or those of the results a
compaction summary replaced, ``Summary.replaced``) is written to one private file (a 0700
temp directory, removed at exit), content-addressed by sha256, and the item keeps a
``Spilled`` reference in its place. ipyagent's own readers (display, export, save, replay,
compare) read the values back through ``outputs_of`` / ``replaced_of``, checked against their
hash, without keeping them; what the model is sent never reads ``outputs`` (images go in
``meta["images"]``), so it does not change, and a step reads no value back.

A read of the field itself (``result.outputs``, ``summary.replaced``: the user's) brings the
values back onto the item, so an edit in place sticks; the item then differs from the
autosave's copy of its fields, is rendered again, and the next save spills it again,
unless someone still holds a list or bundle the spill would replace (reference counts):
then it waits (``spill`` returns None) so that an edit through it sticks too.

The raw form (``vars(result)["outputs"]``) holds the references: the caches that compare
an item with a copy of its fields compare a few small objects, not the payloads.
If the file is gone or damaged, the value is dropped and a one-line note stands in its
place (said once, as a warning); if it cannot be written (a full disk), the payloads stay
in memory (said once). Nothing raises. A value no reference points to is dead; when the
dead bytes pass the live ones and a floor, the file is rewritten with the live values only.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import warnings
import weakref
from collections import deque
from typing import Any, Callable

__all__ = ["Spilled", "SpillStore", "OutputsField", "ReplacedField", "spill", "swapping",
           "raw_outputs", "outputs_of", "raw_replaced", "replaced_of", "held_dict", "held"]

_SPILLABLE = ("execute_result", "display_data")

# Held while a spill decides and swaps an item's lists, and by each read of ``outputs`` /
# ``replaced``: a read in another thread (the user's, while the engine loop saves) gets the
# list before the check (so the check sees it held) or after the swap, never in between.
swapping = threading.RLock()


class SpillStore:
    """One file of JSON values, each found by (offset, length) and sha256; rewritten with
    only its live values once dead ones (no item refers to them) outweigh them."""

    # Values at least this long (characters of their JSON) are spilled; 0: none are (the
    # behaviour before: every payload stays on its item, in memory).
    threshold = 1024
    # The file is rewritten when its dead bytes pass both its live bytes and this floor.
    compact_floor = 4 * 2**20

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="ipyagent-spill-")  # 0700: this user only
        self.path = os.path.join(self._dir, "payloads.bin")
        self._fd = self._open(self.path)
        self._end = 0
        self._index: dict[bytes, tuple[int, int]] = {}  # sha256 → where its bytes are
        # One reference per value: a value is live while its reference is (an item, a copy
        # of an item's fields, a pickle being made); each death is queued, the queue read
        # under the lock (a weakref callback may run in any thread, at any point).
        self._refs: dict[bytes, _Ref] = {}
        self._died: deque[bytes] = deque()
        died = self._died  # not self: the callback must not keep the store alive
        self._gone: Callable[[_Ref], None] = lambda ref: died.append(ref.digest)
        self._live = 0  # bytes of the values with a live reference
        self.rewrites = 0
        self._lock = threading.Lock()
        atexit.register(self.close)

    @staticmethod
    def _open(path: str, flags: int = 0) -> int:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | flags, 0o600)

    def __repr__(self) -> str:
        return (f"<SpillStore {self.path}: {len(self._index)} values, {self._end} bytes, "
                f"{self.live_bytes} live>")

    @property
    def live_bytes(self) -> int:
        """Bytes of the values some item still refers to."""
        with self._lock:
            self._reap()
            return self._live

    @property
    def size(self) -> int:
        """Bytes in the file: live values, dead ones and any partial write."""
        return self._end

    def put(self, data: bytes) -> Spilled:
        """Append ``data`` unless the file holds it already; its (one) reference."""
        digest = hashlib.sha256(data).digest()
        with self._lock:
            self._reap()
            known = self._refs.get(digest)
            ref = known() if known is not None else None
            if ref is not None:
                return ref
            where = self._index.get(digest)  # a dead value's bytes are still there
            if where is None:
                if self._end - self._live > max(self._live, self.compact_floor):
                    self._rewrite()
                where = self._append(data, digest)
            return self._reference(digest, *where)

    def _append(self, data: bytes, digest: bytes) -> tuple[int, int]:
        try:
            written = os.write(self._fd, data)  # O_APPEND: always at the end
        except OSError:
            self._end = os.fstat(self._fd).st_size  # a partial write moved the end
            raise
        if written != len(data):  # a full disk: what was written is never used
            self._end += written
            raise OSError(f"cannot write to {self.path}: the disk is full")
        where = self._index[digest] = (self._end, len(data))
        self._end += len(data)
        return where

    def _reference(self, digest: bytes, offset: int, length: int) -> Spilled:
        ref = Spilled(self, offset, length, digest)
        self._refs[digest] = _Ref(ref, self._gone, digest)
        self._live += length
        return ref

    def _reap(self) -> None:
        """Count the values whose reference died as dead (under the lock)."""
        while self._died:
            digest = self._died.popleft()
            known = self._refs.get(digest)
            if known is not None and known() is None:
                del self._refs[digest]
                self._live -= self._index.get(digest, (0, 0))[1]

    def _rewrite(self) -> None:
        """Replace the file by one holding only the live values (under the lock).

        Each value is checked against its sha256 as it is copied; one that fails is left
        out, and its reference reads as lost. If the new file cannot be written, the old
        one stays (said once)."""
        live = sorted(((ref.offset, ref) for known in self._refs.values()
                       if (ref := known()) is not None), key=lambda pair: pair[0])
        new_path = self.path + ".new"
        try:
            if os.path.lexists(new_path):
                os.unlink(new_path)
            fd = self._open(new_path, os.O_EXCL)
        except OSError as exc:
            _say(f"ipyagent: the spill file keeps its dead values: cannot rewrite it ({exc})")
            return
        moved: list[tuple[Spilled, int]] = []
        end = 0
        try:
            for _, ref in live:
                data = os.pread(self._fd, ref.length, ref.offset)
                if len(data) != ref.length or hashlib.sha256(data).digest() != ref.digest:
                    continue
                if os.write(fd, data) != len(data):
                    raise OSError(f"cannot write to {new_path}: the disk is full")
                moved.append((ref, end))
                end += len(data)
            os.replace(new_path, self.path)
        except OSError as exc:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(new_path)
            _say(f"ipyagent: the spill file keeps its dead values: cannot rewrite it ({exc})")
            return
        os.close(self._fd)
        self._fd = fd
        kept = {ref.digest for ref, _ in moved}
        for _, ref in live:
            if ref.digest not in kept:  # damaged: past the end, it reads as lost
                ref.offset = end
        # only the moved values' references (one that died meanwhile is dead with them)
        self._refs = {digest: self._refs[digest] for digest in kept}
        for ref, offset in moved:
            ref.offset = offset
        self._index = {ref.digest: (ref.offset, ref.length) for ref, _ in moved}
        self._live = self._end = end
        self.rewrites += 1

    def compact(self) -> None:
        """Rewrite the file now with only its live values."""
        with self._lock:
            self._reap()
            self._rewrite()

    def get(self, ref: Spilled) -> bytes:
        """The bytes of ``ref``; ``OSError`` if the file is gone, ``ValueError`` if damaged."""
        with self._lock:  # a rewrite moves the value and changes the file
            data = os.pread(self._fd, ref.length, ref.offset)
        if len(data) != ref.length:
            raise OSError(f"the spill file {self.path} is gone or truncated")
        if hashlib.sha256(data).digest() != ref.digest:
            raise ValueError(f"the spill file {self.path} was changed (sha256 mismatch)")
        return data

    def close(self) -> None:
        """Close and delete the file (at exit: the payloads are in the saved notebooks)."""
        try:
            os.close(self._fd)
        except OSError:
            pass
        shutil.rmtree(self._dir, ignore_errors=True)


class _Ref(weakref.ref):  # type: ignore[type-arg]
    """A weak reference to a value's ``Spilled`` that knows the value's sha256 (one shared
    callback, not a closure per value: a long run has thousands)."""

    __slots__ = ("digest",)

    def __new__(cls, ref: Spilled, callback: Callable[[_Ref], None], digest: bytes) -> _Ref:
        return super().__new__(cls, ref, callback)  # type: ignore[call-arg]

    def __init__(self, ref: Spilled, callback: Callable[[_Ref], None], digest: bytes) -> None:
        super().__init__(ref, callback)  # type: ignore[call-arg]
        self.digest = digest

    def __call__(self) -> Spilled | None:
        return super().__call__()  # type: ignore[no-any-return]


_store: SpillStore | None = None
_store_lock = threading.Lock()


def store() -> SpillStore:
    """The process's spill store, made on first use."""
    global _store
    with _store_lock:
        if _store is None:
            _store = SpillStore()
        return _store


class Spilled:
    """Where one spilled value is: its store, offset, length and sha256."""

    __slots__ = ("store", "offset", "length", "digest", "__weakref__")

    def __init__(self, store: SpillStore, offset: int, length: int, digest: bytes) -> None:
        self.store, self.offset, self.length, self.digest = store, offset, length, digest

    def __repr__(self) -> str:
        return f"<spilled {self.length} bytes sha256:{self.digest.hex()[:12]}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Spilled):
            return NotImplemented
        return self.digest == other.digest and self.store is other.store

    def __hash__(self) -> int:
        return hash(self.digest)

    def __copy__(self) -> Spilled:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Spilled:
        return self  # immutable: a copy of an item's fields shares it

    def __reduce__(self) -> tuple[Any, ...]:
        try:  # a pickle holds the value, not a file offset
            return (_value, (self.load(),))
        except SpillError as exc:
            return (_value, (f"[ipyagent: lost: {exc}]",))

    def load(self) -> Any:
        """The value (``SpillError`` if it cannot be read back)."""
        try:
            data = self.store.get(self)
            return json.loads(data.decode("utf-8", "surrogatepass"))
        except (OSError, ValueError) as exc:
            raise SpillError(str(exc)) from None


class SpillError(Exception):
    """A spilled value could not be read back."""


def _value(value: Any) -> Any:
    return value


class _SpilledList(list):  # type: ignore[type-arg]
    """A raw outputs list in which some values are ``Spilled`` (it is never handed out)."""


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return sum(len(v) for v in value)
    try:
        return len(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError):
        return 0  # not JSON: it stays


def spill(item: Any, unchanged: Callable[[], bool] | None = None) -> bool | None:
    """Spill a saved item's large display values to the store: a tool result's, or those of
    the results a compaction summary replaced (its ``replaced`` dicts); True if any was.

    None: not now, someone holds a list or dict of the item's that spilling would replace
    (``outs = result.outputs``): their later edits would be lost; try again later.
    ``unchanged``: asked once nobody holds them (nothing can change the item then); False
    means it changed since it was saved: not spilled (False)."""
    with swapping:
        return _spill(item, unchanged)


def _spill(item: Any, unchanged: Callable[[], bool] | None) -> bool | None:
    threshold = SpillStore.threshold
    kind = getattr(type(item), "type", None)
    fields = item.__dict__
    if not threshold:
        return False
    key = "outputs" if kind == "tool_result" else "replaced" if kind == "summary" else ""
    if key and type(fields.get(key)) is list and _handed_out(fields, key, kind == "summary"):
        return None
    if unchanged is not None and not unchanged():
        return False
    try:
        if kind == "tool_result" and type(fields.get("outputs")) is list and fields["outputs"]:
            new, changed = _spilled(fields["outputs"], threshold)
            if changed:
                fields["outputs"] = _SpilledList(new)
        elif kind == "summary" and type(fields.get("replaced")) is list:
            fields["replaced"], changed = _spilled_dicts(fields["replaced"], threshold, 0)
        else:
            return False
    except OSError as exc:  # a full disk, no temp directory: the payloads stay in memory
        _say(f"ipyagent: display outputs stay in memory: cannot spill them ({exc})")
        return False
    return changed


def _refs(parent: Any, key: Any) -> int:
    """References to ``parent[key]`` (the same call always: see ``_ALONE``)."""
    return sys.getrefcount(parent[key])


# What ``_refs`` counts for a list or dict only its container holds (its slot there, and
# the call's own references): measured, not assumed, as interpreters differ.
_ALONE = max(_refs({"k": []}, "k"), _refs([{}], 0)) if hasattr(sys, "getrefcount") else 0


def _handed_out(fields: Any, key: str, summary: bool, depth: int = 0) -> bool:
    """True if something besides its container holds a list or dict that spilling
    ``fields[key]`` would replace (the outputs list, each output with a large value and its
    bundle; a summary's list, such a result's dict and its outputs): a read handed it out,
    and an edit through it must reach the item."""
    if not _ALONE:
        return False  # no reference counts here: spill (a later edit through a kept list is lost)
    return _replaced(fields, key, summary, depth) == "held"


def _replaced(fields: Any, key: str, summary: bool, depth: int) -> str:
    """'held', 'yes' (spilling replaces ``fields[key]``, nobody else holds what it
    replaces) or 'no' (it replaces nothing there)."""
    items = fields[key]
    would = False
    for i in range(len(items)):  # by index: a loop variable would be one more reference
        inner = items[i]
        if not isinstance(inner, dict):
            continue
        if summary:
            kind = inner.get("type")
            if kind == "tool_result" and type(inner.get("outputs")) is list:
                below = _replaced(inner, "outputs", False, depth)
            elif kind == "summary" and depth < _DEPTH and type(inner.get("replaced")) is list:
                below = _replaced(inner, "replaced", True, depth + 1)
            else:
                continue
            if below == "no":
                continue
            del inner  # counted from its list only
            if below == "held" or _refs(items, i) > _ALONE:
                return "held"
        else:
            data = inner.get("data")
            if (inner.get("output_type") not in _SPILLABLE or not isinstance(data, dict)
                    or not any(_size(v) >= SpillStore.threshold for v in data.values())):
                continue
            del data
            if _refs(inner, "data") > _ALONE:
                return "held"
            del inner
            if _refs(items, i) > _ALONE:
                return "held"
        would = True
    del items
    if would and _refs(fields, key) > _ALONE:
        return "held"
    return "yes" if would else "no"


# How deep in summaries that hold summaries (older transcripts nest them) payloads are
# spilled and read back; deeper ones stay in memory.
_DEPTH = 32


def _spilled_dicts(dicts: list[Any], threshold: int, depth: int) -> tuple[list[Any], bool]:
    """Item dicts with each result dict's large display values stored: new dicts, so a
    list someone holds (a read of ``replaced``) never changes under them."""
    new: list[Any] = []
    changed = False
    for d in dicts:
        if isinstance(d, dict) and d.get("type") == "tool_result" and type(d.get("outputs")) is list:
            outputs, spilled = _spilled(d["outputs"], threshold)
            if spilled:
                d = {**d, "outputs": _SpilledList(outputs)}
                changed = True
        elif (isinstance(d, dict) and d.get("type") == "summary" and depth < _DEPTH
              and type(d.get("replaced")) is list):
            inner, spilled = _spilled_dicts(d["replaced"], threshold, depth + 1)
            if spilled:
                d = {**d, "replaced": inner}
                changed = True
        new.append(d)
    return (new if changed else dicts), changed


def _spilled(outputs: list[Any], threshold: int) -> tuple[list[Any], bool]:
    """``outputs`` with each large display value stored (the outputs, whether any was)."""
    new: list[Any] = []
    changed = False
    for out in outputs:
        kind = out.get("output_type") if isinstance(out, dict) else None
        data = out.get("data") if kind in _SPILLABLE else None
        if not isinstance(data, dict) or not any(_size(v) >= threshold for v in data.values()):
            new.append(out)
            continue
        bundle: dict[str, Any] = {}
        for mime, value in data.items():
            if _size(value) >= threshold:
                text = json.dumps(value, ensure_ascii=False)
                value = store().put(text.encode("utf-8", "surrogatepass"))
            bundle[mime] = value
        new.append({**out, "data": bundle})
        changed = True
    return new, changed


_said: set[str] = set()


def _say(message: str) -> None:
    """Warn ``message`` once per process."""
    if message not in _said:
        _said.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def _resolve(outputs: _SpilledList) -> list[dict[str, Any]]:
    """The outputs with each spilled value read back (a note for one that cannot be): new
    objects throughout, so an edit of the read never reaches the references' list (a
    compaction stub or a copy may share it)."""
    out: list[dict[str, Any]] = []
    for output in outputs:
        data = output.get("data") if isinstance(output, dict) else None
        if not isinstance(data, dict) or not any(isinstance(v, Spilled) for v in data.values()):
            out.append(copy.deepcopy(output))
            continue
        output = copy.deepcopy({k: v for k, v in output.items() if k != "data"})
        bundle: dict[str, Any] = {}
        lost: list[str] = []
        for mime, value in data.items():
            if isinstance(value, Spilled):
                try:
                    value = value.load()
                except SpillError as exc:
                    lost.append(mime)
                    _say(f"ipyagent: a display output could not be read back: {exc}")
                    continue
            bundle[mime] = value
        if lost:
            bundle["text/plain"] = (f"[ipyagent: this output's {', '.join(lost)} is lost: "
                                    "its spill file is gone or damaged]")
        out.append({**output, "data": bundle})
    return out


def _resolved_dicts(dicts: list[Any], depth: int = 0) -> tuple[list[Any], bool]:
    """Item dicts with each spilled value read back (new dicts where one was; the list
    itself when none was), and whether any was."""
    out: list[Any] = []
    changed = False
    for d in dicts:
        if isinstance(d, dict):
            outputs = d.get("outputs")
            if type(outputs) is _SpilledList:
                d = {**d, "outputs": _resolve(outputs)}
                changed = True
            elif d.get("type") == "summary" and depth < _DEPTH and isinstance(d.get("replaced"), list):
                inner, spilled = _resolved_dicts(d["replaced"], depth + 1)
                if spilled:
                    d = {**d, "replaced": inner}
                    changed = True
        out.append(d)
    return (out if changed else dicts), changed


class OutputsField:
    """``ToolResult.outputs``: the list as set; a spilled one is read back at its first read
    and stays on the item (so an edit in place sticks) until the next save spills it again."""

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        with swapping:
            outputs = obj.__dict__["outputs"]
            if type(outputs) is _SpilledList:
                outputs = obj.__dict__["outputs"] = _resolve(outputs)
            return outputs

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__["outputs"] = value


class ReplacedField:
    """``Summary.replaced``: the item dicts as set; spilled values in them are read back at
    the first read and stay (an edit in place sticks) until the next save spills them."""

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        with swapping:
            replaced = obj.__dict__["replaced"]
            if isinstance(replaced, list):
                resolved, spilled = _resolved_dicts(replaced)
                if spilled:
                    replaced = obj.__dict__["replaced"] = resolved
            return replaced

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__["replaced"] = value


def raw_outputs(result: Any) -> Any:
    """``result``'s outputs as held (spilled values as references): to pass to a new item
    without reading them back."""
    return result.__dict__["outputs"]


def outputs_of(result: Any) -> Any:
    """``result``'s outputs whole, without keeping them on it: the list itself, or a read
    of its spilled values (for ipyagent's own readers: display, export, compare)."""
    outputs = result.__dict__["outputs"]
    return _resolve(outputs) if type(outputs) is _SpilledList else outputs


def held_dict(item: Any) -> dict[str, Any]:
    """``item.to_dict()``, but a spilled result's values stay references (not read back):
    the record a compaction summary keeps of an item it replaces."""
    outputs = item.__dict__.get("outputs")
    if type(outputs) is not _SpilledList:
        return item.to_dict()  # type: ignore[no-any-return]
    shallow = copy.copy(item)
    shallow.__dict__["outputs"] = []
    data: dict[str, Any] = shallow.to_dict()
    data["outputs"] = outputs  # shared: a spilled list is never changed in place
    return data


def raw_replaced(summary: Any) -> Any:
    """``summary``'s replaced dicts as held (a result dict's spilled values as references:
    ``item_from_dict`` of one gives a spilled result)."""
    return summary.__dict__["replaced"]


def replaced_of(summary: Any) -> Any:
    """``summary``'s replaced dicts whole, without keeping them on it."""
    replaced = summary.__dict__["replaced"]
    return _resolved_dicts(replaced)[0] if isinstance(replaced, list) else replaced


def held(item: Any) -> int:
    """Characters of display values ``item`` holds in memory (spilled ones not counted): a
    result's, or those of the results a summary replaced (however deep)."""
    total = 0
    stack = [item if isinstance(item, dict) else item.__dict__]
    while stack:
        fields = stack.pop()
        if isinstance(fields.get("replaced"), list):
            stack.extend(d for d in fields["replaced"] if isinstance(d, dict))
        outputs = fields.get("outputs")
        if isinstance(outputs, list):
            total += sum(_size(v) for o in outputs if isinstance(o, dict)
                         for v in (o.get("data") or {}).values() if not isinstance(v, Spilled))
    return total
