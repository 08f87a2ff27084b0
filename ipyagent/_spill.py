"""Display payloads spilled from memory to a private file and read back on demand.

A long run's plots and HTML (``ToolResult.outputs``, ~44 KB per step of a plotting run)
would stay in the user's kernel for the whole session. Once a result is saved (the
autosave wrote it), each large value of its display bundles is appended to one private,
append-only file (a 0700 temp directory, removed at exit), content-addressed by sha256,
and the item keeps a ``Spilled`` reference in its place. ``ToolResult.outputs`` reads the
values back, checked against their hash, so every reader (display, export, save, replay,
copies, redaction) still gets the full payload; what the model is sent never reads
``outputs`` (images go in ``meta["images"]``), so it does not change.

The raw form (``vars(result)["outputs"]``) holds the references: the caches that compare
an item with a copy of its fields compare a few small objects, not the payloads.
If the file is gone or damaged, the value is dropped and a one-line note stands in its
place (said once, as a warning); if it cannot be written (a full disk), the payloads stay
in memory (said once). Nothing raises. The file only grows, until the process exits.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import tempfile
import threading
import warnings
from typing import Any

__all__ = ["Spilled", "SpillStore", "OutputsField", "spill", "raw_outputs", "held"]

_SPILLABLE = ("execute_result", "display_data")


class SpillStore:
    """One append-only file of JSON values, each found by (offset, length) and sha256."""

    # Values at least this long (characters of their JSON) are spilled; 0: none are (the
    # behaviour before: every payload stays on its item, in memory).
    threshold = 1024

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="ipyagent-spill-")  # 0700: this user only
        self.path = os.path.join(self._dir, "payloads.bin")
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self._end = 0
        self._index: dict[bytes, tuple[int, int]] = {}  # sha256 → where its bytes are
        self._lock = threading.Lock()
        atexit.register(self.close)

    def __repr__(self) -> str:
        return f"<SpillStore {self.path}: {len(self._index)} values, {self._end} bytes>"

    def put(self, data: bytes) -> Spilled:
        """Append ``data`` unless the file holds it already; its reference."""
        digest = hashlib.sha256(data).digest()
        with self._lock:
            where = self._index.get(digest)
            if where is None:
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
        return Spilled(self, where[0], where[1], digest)

    def get(self, ref: Spilled) -> bytes:
        """The bytes of ``ref``; ``OSError`` if the file is gone, ``ValueError`` if damaged."""
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

    __slots__ = ("store", "offset", "length", "digest")

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


def spill(result: Any) -> bool:
    """Spill ``result``'s large display values to the store; True if any was."""
    threshold = SpillStore.threshold
    outputs = result.__dict__.get("outputs")
    if not threshold or type(outputs) is not list or not outputs:
        return False
    try:
        new, changed = _spilled(outputs, threshold)
    except OSError as exc:  # a full disk, no temp directory: the payloads stay in memory
        _say(f"ipyagent: display outputs stay in memory: cannot spill them ({exc})")
        return False
    if changed:
        result.__dict__["outputs"] = _SpilledList(new)
    return changed


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
    """The outputs with each spilled value read back (a note for one that cannot be)."""
    out: list[dict[str, Any]] = []
    for output in outputs:
        data = output.get("data") if isinstance(output, dict) else None
        if not isinstance(data, dict) or not any(isinstance(v, Spilled) for v in data.values()):
            out.append(output)
            continue
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


class OutputsField:
    """``ToolResult.outputs``: the list as set, its spilled values read back on each read.

    A spilled list is a fresh copy at each read: change it by assigning ``outputs``."""

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        outputs = obj.__dict__["outputs"]
        return _resolve(outputs) if type(outputs) is _SpilledList else outputs

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__["outputs"] = value


def raw_outputs(result: Any) -> Any:
    """``result``'s outputs as held (spilled values as references): to pass to a new item
    without reading them back."""
    return result.__dict__["outputs"]


def held(result: Any) -> int:
    """Characters of display values ``result`` holds in memory (spilled ones not counted)."""
    outputs = result.__dict__.get("outputs")
    if not isinstance(outputs, list):
        return 0
    return sum(_size(v) for o in outputs if isinstance(o, dict)
               for v in (o.get("data") or {}).values() if not isinstance(v, Spilled))
