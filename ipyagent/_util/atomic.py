"""Atomic writes: a file is replaced all at once or not at all, and what a killed write
left behind is removed by the next write of the same file.

``write_atomic`` writes to a new temp file beside the target, ``.<name>.<pid>.<random>.tmp``
(created with ``O_EXCL | O_NOFOLLOW``), flushes and fsyncs it, then renames it over the
name: atomic on POSIX and Windows, so a reader sees the old file or the new one, never half,
and a crash or SIGKILL leaves the previous complete file. A symlink at the name is
replaced, never followed. Given ``dir_fd``, the name is in that open directory and every
step goes through the descriptor (the workspace's file tools resolve paths that way).

One file-mode policy for every file ipyagent writes: a file being replaced keeps its mode;
a new one gets what the umask gives (``0o666 & ~umask``), as ``open()`` would. A temp file
that will replace a file is private (0600) until it has that file's mode, so the content is
never readable more widely than the file itself, even briefly.

Leftovers: ``kill -9`` (or a power cut) between the write and the rename leaves the temp
file for good. Each write removes the temp files of its target that no write can still be
using: its writer's pid is gone and it is older than a grace period (a pid from another
host or pid namespace may look dead), or it is older than any write takes, whatever its pid.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import time

__all__ = ["write_atomic", "remove_stale_temps"]

GRACE = 30.0  # s: a temp file this fresh is left alone even when its pid looks dead
STALE = 3600.0  # s: no write takes this long; older is left over, whoever made it
_OURS = re.compile(r"(?:([0-9]+)\.)?[a-z0-9_]{8}")  # [<pid>.]<8 random characters>
_NAME = 200  # characters of the target's name in a temp file's (names end at 255 bytes)
_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
          | getattr(os, "O_CLOEXEC", 0))


def write_atomic(path: str | os.PathLike[str], text: str | bytes, *,
                 dir_fd: int | None = None) -> None:
    """Replace the file at ``path`` with ``text`` (UTF-8, line ends as given; bytes as they
    are), all or nothing.

    ``dir_fd``: ``path`` is a name in that open directory. Raises ``OSError``; the temp file
    is removed then, and the target is as it was.
    """
    where, name = os.path.split(os.fspath(path))
    target = os.path.join(where, name)
    remove_stale_temps(target, dir_fd=dir_fd)
    try:
        st = os.stat(target, dir_fd=dir_fd, follow_symlinks=False)
        keep = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else None
    except FileNotFoundError:
        keep = None
    while True:
        tmp = os.path.join(where, f".{name[:_NAME]}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, _FLAGS, 0o600 if keep is not None else 0o666, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    try:
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        with open(fd, "wb", buffering=0) as f:
            view = memoryview(data)
            while view:  # a raw write may write less than asked (a signal, a full pipe)
                view = view[f.write(view) or 0:]
            if keep is not None:
                if hasattr(os, "fchmod"):
                    os.fchmod(f.fileno(), keep)
                else:  # Windows: only the read-only bit exists
                    os.chmod(tmp, keep)
            os.fsync(f.fileno())
        os.replace(tmp, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


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


def remove_stale_temps(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> list[str]:
    """Remove the stale temp files of the file at ``path`` (never fails); the ones removed.

    ``dir_fd``: ``path`` is a name in that open directory.
    """
    where, name = os.path.split(os.fspath(path))
    prefix, now = f".{name[:_NAME]}.", time.time()
    removed: list[str] = []
    try:
        entries = list(os.scandir(dir_fd if dir_fd is not None else where or "."))
    except OSError:
        return removed
    for entry in entries:
        if not (entry.name.startswith(prefix) and entry.name.endswith(".tmp")):
            continue
        # Exactly what a write makes (8 of [a-z0-9_]); another target's temp
        # (``.<name>.bak.<pid>.<random>.tmp``) or a file of the user's does not match.
        found = _OURS.fullmatch(entry.name[len(prefix):-len(".tmp")])
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
                os.unlink(os.path.join(where, entry.name), dir_fd=dir_fd)
                removed.append(os.path.join(where, entry.name))
    return removed

