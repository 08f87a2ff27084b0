"""File stamps: whether a file may have changed since it was read, without reading it.

What the loop reads from disk every step (``mcp.json`` beside the notebook, the MCP trust
list) is reused while every file's stamp — type, device, inode, size, modification and
change times — is the same. A write that keeps all of them is possible only within one
tick of the filesystem's clock, so a file changed less than ``SETTLE_NS`` ago is not
reused at all (git's "racily clean" rule): it is read again until it has been still long
enough that a further change must show in its stamp. ``st_ctime`` cannot be set back, so
a copy that restores the old modification time still counts as a change.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

__all__ = ["SETTLE_NS", "Stamp", "stamp", "settled"]

SETTLE_NS = 2_000_000_000  # coarser than any filesystem's timestamp tick (FAT's is 2 s)

Stamp = tuple[int, int, int, int, int, int]


def stamp(path: str | os.PathLike[str] | int) -> Stamp | None:
    """The stamp of ``path`` (following symlinks), or of an open descriptor; None when there
    is nothing to read."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # missing, unreadable, or a path with a NUL in it
        return None
    return (st.st_mode, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def settled(stamps: Iterable[Stamp | None], now_ns: int | None = None) -> bool:
    """True when no stamped file changed so recently that a further change could keep its stamp."""
    now = time.time_ns() if now_ns is None else now_ns
    return all(s is None or now - max(s[4], s[5]) >= SETTLE_NS for s in stamps)
