"""Temp files that a killed save left behind, found and removed by the next save.

An atomic write goes to ``.<name>.<pid>.<random>.tmp`` beside its target, then renames.
``kill -9`` (or a power cut) between the two leaves the temp file for good. The next
write of the same target removes the temp files of that target that no write can still
be using: its writer's pid is gone and it is older than a grace period (a pid from another
host or pid namespace may look dead), or it is older than any write takes, whatever its pid.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path

__all__ = ["remove_stale_temps", "temp_prefix"]

GRACE = 30.0  # s: a temp file this fresh is left alone even when its pid looks dead
STALE = 3600.0  # s: no write takes this long; older is left over, whoever made it
_OURS = re.compile(r"(?:([0-9]+)\.)?[a-z0-9_]{8}")  # [<pid>.]<mkstemp's random part>


def temp_prefix(target: Path) -> str:
    """``mkstemp``'s prefix for a temp file of ``target``: its name and our pid."""
    return f".{target.name}.{os.getpid()}."


def _alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill(pid, 0) would end the process there: trust age alone
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, under another user
        return True
    return True


def remove_stale_temps(target: Path) -> list[Path]:
    """Remove the stale temp files of ``target`` (never fails); the ones removed."""
    prefix, now = f".{target.name}.", time.time()
    removed: list[Path] = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        # Exactly what mkstemp makes (8 of [a-z0-9_]); another target's temp
        # (``.<name>.bak.<pid>.<random>.tmp``) or a file of the user's does not match.
        found = _OURS.fullmatch(name[len(prefix):-len(".tmp")])
        if found is None:
            continue
        pid = found.group(1)
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            age = now - entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        # No pid in the name (an older ipyagent's temp): age alone decides.
        if age > STALE or (pid is not None and age > GRACE and not _alive(int(pid))):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed
