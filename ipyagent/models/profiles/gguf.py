"""The few GGUF metadata keys a profile needs, read from a model file's header.

Only ``general.architecture``, ``general.name`` and ``tokenizer.chat_template`` are kept;
every other key is skipped without being decoded. The file is not ours (a path a server
named, a file a user downloaded): reads are bounded (keys, counts, string lengths, the
bytes read in all), and a file that is not GGUF, or is cut short, gives ``None``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = ["GGUFInfo", "read_gguf"]

MAGIC = b"GGUF"
WANTED = ("general.architecture", "general.name", "tokenizer.chat_template")
MAX_KEYS = 10_000  # a real model has a few dozen
MAX_STRING = 1 << 20  # a chat template is a few KB; a longer string is skipped, not read
MAX_HEADER = 64 << 20  # the metadata (token lists included) of a real model: a few MB
_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # type -> bytes
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GGUFInfo:
    """What the header says (empty strings where it says nothing)."""

    architecture: str = ""
    name: str = ""
    chat_template: str = ""


class _Bad(Exception):
    pass


class _Reader:
    def __init__(self, f: BinaryIO) -> None:
        self.f, self.read_so_far = f, 0

    def take(self, n: int) -> bytes:
        self.read_so_far += n
        if n < 0 or self.read_so_far > MAX_HEADER:
            raise _Bad("header too large")
        data = self.f.read(n)
        if len(data) != n:
            raise _Bad("cut short")
        return data

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.take(8))[0])

    def string(self, keep: bool) -> str | None:
        n = self.u64()
        if not keep or n > MAX_STRING:
            self.skip(n)
            return None
        return self.take(n).decode("utf-8", "replace")

    def skip(self, n: int) -> None:
        self.read_so_far += n
        if self.read_so_far > MAX_HEADER:
            raise _Bad("header too large")
        self.f.seek(n, 1)

    def value(self, kind: int, keep: bool) -> str | None:
        if kind == _STRING:
            return self.string(keep)
        if kind in _SCALARS:
            self.skip(_SCALARS[kind])
            return None
        if kind == _ARRAY:
            inner, count = self.u32(), self.u64()
            if inner in _SCALARS:
                self.skip(_SCALARS[inner] * count)
            elif inner == _STRING:
                for _ in range(count):
                    self.skip(self.u64())
            else:  # arrays of arrays: no model we read has them
                raise _Bad(f"array of type {inner}")
            return None
        raise _Bad(f"unknown value type {kind}")


def read_gguf(path: str | Path) -> GGUFInfo | None:
    """The metadata of the GGUF file at ``path``; None if it is not a readable GGUF file."""
    try:
        with open(path, "rb") as f:
            return _read(_Reader(f))
    except (OSError, _Bad, struct.error, OverflowError, ValueError):
        return None


def _read(r: _Reader) -> GGUFInfo:
    if r.take(4) != MAGIC:
        raise _Bad("not GGUF")
    version = r.u32()
    if version < 2:  # version 1 used 32-bit counts; no current model is written so
        raise _Bad(f"GGUF version {version}")
    r.u64()  # tensor count
    keys = r.u64()
    if keys > MAX_KEYS:
        raise _Bad("too many keys")
    found: dict[str, str] = {}
    for _ in range(keys):
        key = r.string(keep=True) or ""
        kind = r.u32()
        value = r.value(kind, keep=key in WANTED)
        if value is not None:
            found[key] = value
        if len(found) == len(WANTED):
            break
    return GGUFInfo(found.get("general.architecture", ""), found.get("general.name", ""),
                    found.get("tokenizer.chat_template", ""))
