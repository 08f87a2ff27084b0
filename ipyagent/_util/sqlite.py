"""A damaged SQLite file of ours (the response cache, the memory store) is set aside, once.

Why one module: both keep a file that is only ever a convenience, so a file that no longer
reads (SQLITE_CORRUPT, SQLITE_NOTADB) must cost one warning, not the run — and "busy" or
"locked" (OperationalError) is not damage. When several threads or processes meet the same
damage, the first moves it away; the others see another inode and leave the new file be.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

__all__ = ["is_corrupt", "inode", "set_aside", "set_aside_if_unchanged"]

_CORRUPT = (11, 26)  # SQLITE_CORRUPT ("disk image is malformed"), SQLITE_NOTADB


def is_corrupt(exc: sqlite3.DatabaseError) -> bool:
    """The file is damaged — not merely busy or locked (OperationalError), which passes."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _CORRUPT
    text = str(exc).lower()  # Python < 3.11: no error codes
    return type(exc) is sqlite3.DatabaseError or "malformed" in text or "not a database" in text


def inode(path: Path) -> int | None:
    """The file's inode, None when there is no file."""
    try:
        return path.stat().st_ino
    except OSError:
        return None


def set_aside(path: str | os.PathLike[str], *, sidecars: tuple[str, ...] = ("-journal", "-wal", "-shm")
              ) -> str | None:
    """Move an unreadable file out of the way, to ``<name>.corrupt-<time>[-n]``, with its
    SQLite side files (a journal left beside a new file would be "rolled back" into it).
    Returns the new name, or None when the file was already gone."""
    path = os.fspath(path)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside, n = f"{path}.corrupt-{stamp}", 1
    while os.path.exists(aside):
        aside, n = f"{path}.corrupt-{stamp}-{n}", n + 1
    try:
        os.replace(path, aside)
    except FileNotFoundError:
        return None
    for suffix in sidecars:
        if os.path.exists(path + suffix):
            os.replace(path + suffix, aside + suffix)
    return os.path.basename(aside)


def set_aside_if_unchanged(path: Path, seen: int | None) -> str | None:
    """``set_aside(path)`` unless the file is no longer the one found damaged (inode
    ``seen``): another thread or process has already replaced it. The new name, or None."""
    if seen is None or inode(path) != seen:
        return None
    return set_aside(path)
