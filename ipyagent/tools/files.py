"""Workspace file tools: ``read_file``, ``write_file``, ``list_files``, ``edit_file``.

Every path is confined to one directory, the workspace (``Agent.workspace``): absolute
paths outside it, ``..`` that climbs out and symlinks that lead out are refused with an
error value the model can act on. A path is walked one component at a time on directory
file descriptors, from the workspace's own descriptor, each opened with ``O_NOFOLLOW``
(``locate``); a symlink met on the way is read and followed only while it stays inside,
so a link inside the workspace may point anywhere inside it, and one swapped in between
a check and an open cannot redirect the call: there is no check-then-open gap to win.
Only regular files and directories are read or written: FIFOs, sockets and devices are
refused without being opened in a way that could block. Writes are atomic (a new file
beside the target, then a rename on the same directory descriptor), and reads are capped
so a huge file cannot flood the context. What is not guarded: a directory the call is in
being moved out of the workspace meanwhile, and hard links (the model's python, run
outside a sandbox, can read what the user can anyway).
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import io
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .._util.atomic import write_atomic
from ..context.items import ToolCall, ToolResult
from .base import Tool, tool

__all__ = ["FILE_TOOLS", "READ_ONLY", "RECORD_LIMIT", "record", "recorded_file", "Spot", "WorkspaceError", "diff_preview", "file_tools",
           "edit_preview", "locate", "open_real_dir", "open_regular", "read_existing", "replace_once", "unified",
           "write_text"]

FILE_TOOLS = ("read_file", "write_file", "list_files", "edit_file")
READ_ONLY = ("read_file", "list_files")

READ_CHARS = 16_000  # one read_file answer; under Agent.tool_output_limit's default
LIST_ENTRIES = 500
BINARY_PROBE = 8192
EDIT_LIMIT = 10 * 1024 * 1024
SYMLINK_HOPS = 40  # as the kernel's own limit

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
# O_NONBLOCK: opening a FIFO to read would otherwise wait for a writer, forever.
_NONBLOCK = os.O_NONBLOCK
_KINDS = {stat.S_IFIFO: "named pipe", stat.S_IFSOCK: "socket",
          stat.S_IFCHR: "character device", stat.S_IFBLK: "block device"}


class WorkspaceError(ValueError):
    """A path the file tools refuse (outside the workspace, missing, wrong kind)."""


@dataclass
class Spot(contextlib.AbstractContextManager["Spot"]):
    """Where a workspace path leads: its directory (an open descriptor) and the name in it.

    ``name`` is ``"."`` when the path is a directory reached as a whole (the workspace
    itself, or through ``..``); ``rel`` is the path relative to the workspace with every
    symlink followed. Close it (or use it as a context manager).
    """

    dir_fd: int
    name: str
    rel: str
    path: str  # as the model wrote it, for messages

    def close(self) -> None:
        """Close the directory descriptor."""
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __exit__(self, *exc: object) -> None:
        self.close()

    def lstat(self) -> os.stat_result | None:
        """The entry's own status (a symlink is not followed), or None if there is none."""
        try:
            return os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def refuse_odd(self, st: os.stat_result | None) -> None:
        """Raise unless ``st`` is missing, a regular file or a directory."""
        if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            raise WorkspaceError(f"{self.path!r} is a {_kind(st.st_mode)}, not a regular file; "
                                 "the file tools read and write only regular files")


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "special file")


def _outside(root: Path, path: str) -> WorkspaceError:
    return WorkspaceError(f"{path!r} is outside the workspace ({root}); the file tools only "
                          "reach files under it — use a path relative to it")


def _link_outside(root: Path, path: str) -> WorkspaceError:
    return WorkspaceError(f"{path!r} is a symlink (or passes through one) that leads outside "
                          f"the workspace ({root}); refused")


def _within(root: Path, target: str) -> list[str] | None:
    """The components of absolute ``target`` below ``root``, or None when it is outside.

    Lexically first; else by the real path, so a link written through an alias of the
    workspace (``/var`` for ``/private/var``) still counts. Either way the result is only
    walked from the workspace's descriptor, so this check grants nothing by itself.
    """
    for candidate in (Path(os.path.normpath(target)), Path(os.path.realpath(target))):
        if candidate == root or root in candidate.parents:
            return list(candidate.relative_to(root).parts)
    return None


def open_real_dir(root: Path) -> int:
    """``root`` (an absolute path already resolved) opened as a directory without following
    a symlink on the way: one that appeared since it was resolved (a folder swapped for a
    link to ``~/.ssh``) is refused, not followed."""
    o_path = getattr(os, "O_PATH", 0)
    if not o_path:  # not Linux: no descriptor walk without read permission on each parent
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    fd = os.open("/", o_path | os.O_DIRECTORY | _CLOEXEC)
    try:
        parts = root.parts[1:]
        for i, part in enumerate(parts):
            flags = (os.O_RDONLY if i == len(parts) - 1 else o_path) | os.O_DIRECTORY
            try:
                nfd = os.open(part, flags | os.O_NOFOLLOW | _CLOEXEC, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise WorkspaceError(f"{root} changed: it (or a folder above it) is a "
                                         "symlink now; not followed") from None
                raise
            os.close(fd)
            fd = nfd
        if not parts:
            os.close(fd)
            fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
        return fd
    except BaseException:
        os.close(fd)
        raise


def locate(root: Path, path: str, *, make_dirs: bool = False, real: bool = False) -> Spot:
    """Walk ``path`` (relative to ``root``, or absolute inside it) on directory descriptors.

    Each directory is opened with ``O_DIRECTORY | O_NOFOLLOW`` relative to the one before;
    a symlink is followed only inside the workspace (``..`` never climbs above it). The
    last component is looked at, not opened. ``make_dirs`` creates missing directories.
    ``real``: ``root`` was resolved (and checked) by the caller; it is not resolved again,
    and no symlink is followed to reach it.
    """
    if not isinstance(path, str) or not path.strip():
        raise WorkspaceError("the path is empty; give a path relative to the workspace")
    if "\x00" in path:
        raise WorkspaceError("the path contains a NUL character")
    root = root if real else root.resolve()
    # Lexical check first, so '..' and absolute paths get the clearer message.
    lexical = Path(os.path.normpath(root / path))
    if not (lexical == root or root in lexical.parents):
        raise _outside(root, path)
    if make_dirs:
        root.mkdir(parents=True, exist_ok=True)
    stack = [open_real_dir(root) if real else os.open(root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)]
    names: list[str] = []
    pending = list(reversed(lexical.relative_to(root).parts))  # next component last
    hops = 0
    try:
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if not names:  # the user's own '..' went lexically; this one came from a link
                    raise _link_outside(root, path)
                os.close(stack.pop())
                names.pop()
                continue
            here = stack[-1]
            if not pending:  # the last component: is it a link to follow?
                try:
                    st = os.stat(part, dir_fd=here, follow_symlinks=False)
                    is_link = stat.S_ISLNK(st.st_mode)
                except FileNotFoundError:
                    is_link = False
                if not is_link:
                    names.append(part)
                    return Spot(stack.pop(), part, "/".join(names), path)
            else:
                fd = _open_dir(part, here, make_dirs, path)
                if fd is not None:
                    stack.append(fd)
                    names.append(part)
                    continue
            hops += 1
            if hops > SYMLINK_HOPS:
                raise WorkspaceError(f"{path!r} is (or passes through) a symlink loop; it "
                                     "leads nowhere")
            try:
                target = os.readlink(part, dir_fd=here)
            except OSError as exc:
                if exc.errno == errno.EINVAL:  # not a link after all: a file mid-path
                    raise NotADirectoryError(errno.ENOTDIR, "Not a directory") from None
                raise
            if os.path.isabs(target):
                inside = _within(root, target)
                if inside is None:
                    raise _link_outside(root, path)
                while len(stack) > 1:
                    os.close(stack.pop())
                names.clear()
                pending.extend(reversed(inside))
            else:
                pending.extend(reversed(target.split("/")))
        return Spot(stack.pop(), ".", "/".join(names) or ".", path)
    finally:
        for fd in stack:
            os.close(fd)


def _open_dir(part: str, here: int, make_dirs: bool, path: str) -> int | None:
    """``part`` in ``here`` opened as a directory, or None if it is a symlink (or a file)."""
    try:
        return os.open(part, _DIR, dir_fd=here)
    except FileNotFoundError:
        if not make_dirs:
            raise
    except OSError as exc:
        # Linux says ENOTDIR for a symlink under O_DIRECTORY|O_NOFOLLOW, others ELOOP;
        # the caller's readlink tells a link from a file.
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            return None
        raise
    with contextlib.suppress(FileExistsError):
        os.mkdir(part, dir_fd=here)
    try:
        return os.open(part, _DIR, dir_fd=here)
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            return None  # something else took the name meanwhile: treat it as found
        raise


def open_regular(spot: Spot) -> int:
    """The file at ``spot`` opened for reading; refuses anything but a regular file."""
    if spot.name == ".":
        raise IsADirectoryError(spot.path)
    try:
        fd = os.open(spot.name, os.O_RDONLY | os.O_NOFOLLOW | _NONBLOCK | _CLOEXEC,
                     dir_fd=spot.dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # became a symlink since locate looked
            raise WorkspaceError(f"{spot.path!r} changed into a symlink while it was opened; "
                                 "refused") from None
        if exc.errno == errno.ENXIO:  # a socket (or a FIFO with no reader, when writing)
            raise WorkspaceError(f"{spot.path!r} is a socket, not a regular file; the file "
                                 "tools read and write only regular files") from None
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(spot.path)
        if not stat.S_ISREG(st.st_mode):
            spot.refuse_odd(st)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_text(spot: Spot) -> str:
    """The whole file as text (for edits); refuses binary and over-large files."""
    with open(open_regular(spot), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        name = spot.rel.rsplit("/", 1)[-1]
        if size > EDIT_LIMIT:
            raise WorkspaceError(f"{name} is {_size(size)}; too large to edit with edit_file "
                                 "— use the python tool")
        data = f.read(EDIT_LIMIT + 1)
    if b"\x00" in data[:BINARY_PROBE]:
        raise WorkspaceError(f"{name} looks binary; use the python tool for it")
    try:
        # Strict: a lenient decode would write U+FFFD over every byte it could not read.
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkspaceError(f"{name} is not UTF-8 text (byte {exc.start}); editing it "
                             "here would destroy its other characters — use the python tool "
                             "with the file's encoding") from None


def read_existing(spot: Spot) -> str | None:
    """The file at ``spot`` as UTF-8 text (strict), or None when there is none."""
    try:
        fd = open_regular(spot)
    except FileNotFoundError:
        return None
    with open(fd, encoding="utf-8", newline="") as f:
        return f.read()


def write_text(spot: Spot, content: str) -> None:
    """Write ``content`` at ``spot``, all or nothing (``_util.atomic.write_atomic`` on the spot's
    directory descriptor): a symlink at the name is replaced, never followed; an existing
    file keeps its mode, a new one gets the umask's. Refuses directories and odd files."""
    if spot.name == ".":
        raise IsADirectoryError(spot.path)
    st = spot.lstat()
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(spot.path)
    if st is not None and not stat.S_ISLNK(st.st_mode):
        spot.refuse_odd(st)
    write_atomic(spot.name, content, dir_fd=spot.dir_fd)


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} bytes"  # unreachable; keeps type checkers calm


def _error(message: str) -> ToolResult:
    # Toolbox fills in call_id and name for a returned ToolResult.
    return ToolResult(call_id="", output=f"Error: {message}", error=True)


def _capped_lines(f: Any, cap: int) -> Any:
    """``(number, line, whole)`` for each line of text file ``f``, at most ``cap`` characters
    each (``whole`` False when cut): a file that is one huge line is never read in whole."""
    number = 0
    while True:
        line = f.readline(cap)
        if not line:
            return
        number += 1
        whole = True
        if len(line) == cap and not line.endswith(("\n", "\r")):
            while True:  # skip the rest of the line, a piece at a time
                rest = f.readline(cap)
                if rest.strip("\r\n"):
                    whole = False
                elif whole:
                    line += rest  # only the line's end was left: the line is whole
                if not rest or rest.endswith(("\n", "\r")):
                    break
        yield number, line, whole


def _line_endings(text: str, old: str, new: str) -> tuple[str, str]:
    """``old`` and ``new`` with CRLF line ends when the file has them and ``old`` has not.

    Models write ``\n``; without this no multi-line edit of a Windows file could match.
    """
    if "\r\n" in text and "\n" in old and "\r\n" not in old and old not in text:
        crlf = old.replace("\n", "\r\n")
        if crlf in text:
            return crlf, new.replace("\r\n", "\n").replace("\n", "\r\n")
    return old, new


class RemoteFiles(Protocol):
    """Where the file tools go instead when the workspace is a remote server's (remote_files.py)."""

    def call(self, name: str, kwargs: dict[str, Any]) -> Any: ...
    def preview(self, call: ToolCall) -> str | None: ...


def file_tools(root: Callable[[], Path],
               timeout: Callable[[], float | None] | None = None,
               remote: Callable[[], RemoteFiles | None] | None = None,
               read_roots: Callable[[], list[Path]] | None = None) -> list[Tool]:
    """The four file tools, confined to ``root()`` and limited to ``timeout()`` seconds
    (both read at each call, so they may change; a timeout of 0 or None: no limit).
    ``remote()``, also read at each call, sends them to a remote server's files instead.

    ``read_roots()``: more folders that ``read_file`` alone may read from, by absolute path
    (the skills' folders); each is walked as a workspace of its own, so no symlink or
    ``..`` leads out of it. ``write_file``, ``edit_file`` and ``list_files`` never see them.
    """

    def read_root(path: str) -> tuple[Path, str]:
        """Where ``read_file`` looks for ``path``: the workspace, or the read-only folder
        an absolute path outside it names (with the path relative to that folder)."""
        base = root()
        if read_roots is None or not isinstance(path, str) or not os.path.isabs(path):
            return base, path
        lexical = Path(os.path.normpath(path))
        if _inside(base.resolve(), lexical):
            return base, path
        for extra in read_roots():
            # Resolved when the skill was found (and checked then): resolving it again here
            # would follow a symlink swapped in since (the sandbox can write the workspace).
            if _inside(extra, lexical):
                return extra, lexical.relative_to(extra).as_posix() if lexical != extra else "."
        return base, path

    def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
        # WorkspaceError/OSError become error values with a clean message (no "raised").
        def run(**kwargs: Any) -> Any:
            far = remote() if remote is not None else None
            # A skill's own files stay on this machine, whatever workspace the tools act on.
            beside_skill = fn.__name__ == "read_file" and read_root(kwargs.get("path", ""))[0] != root()
            if far is not None and not beside_skill:
                return far.call(fn.__name__, kwargs)
            try:
                return fn(**kwargs)
            except WorkspaceError as exc:
                return _error(str(exc))
            except IsADirectoryError:
                return _error(f"{kwargs.get('path')!r} is a directory; use list_files")
            except FileNotFoundError:
                return _error(f"{kwargs.get('path')!r} does not exist in the workspace; "
                              "list_files shows what does")
            except OSError as exc:
                return _error(f"{exc.strerror or exc} ({kwargs.get('path')!r})")
        return run

    def read_file(path: str, start_line: int = 1) -> Any:
        """Read a text file in the workspace.

        Args:
            path: File path relative to the workspace.
            start_line: First line to return (1-based); use it to page through long files.
        """
        where, rel = read_root(path)
        with locate(where, rel, real=where != root()) as spot:  # a skill's folder: as found
            fd = open_regular(spot)
        with open(fd, "rb") as raw:
            size = os.fstat(raw.fileno()).st_size
            if b"\x00" in raw.read(BINARY_PROBE):
                raise WorkspaceError(f"{path!r} looks binary ({_size(size)}); use the python "
                                     "tool to inspect it")
            raw.seek(0)
            f = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")
            start = max(1, int(start_line))
            taken: list[str] = []
            used = 0
            last = start - 1
            more = False
            cut: list[int] = []  # lines longer than READ_CHARS, shown up to it
            for number, line, whole in _capped_lines(f, READ_CHARS):
                if number < start:
                    continue
                if used + len(line) > READ_CHARS and taken:
                    more = True
                    break
                if not whole:
                    cut.append(number)
                    line += "\n"
                taken.append(line)
                used += len(line)
                last = number
            f.detach()
        text = "".join(taken)
        if not taken and start > 1:
            return _error(f"{path!r} has fewer than {start} lines")
        if more or start > 1 or cut:
            note = f"[showing lines {start}–{last} of {spot.rel} ({_size(size)})"
            if cut:
                note += (f"; line {', '.join(map(str, cut))} is longer than {READ_CHARS} "
                         "characters and was cut there — the python tool reads all of it")
            note += (f"; read_file(path, start_line={last + 1}) for more]" if more
                     else "; end of file]")
            return text + ("" if text.endswith("\n") else "\n") + note
        return text if text else "(empty file)"

    def write_file(path: str, content: str) -> Any:
        """Create or overwrite a text file in the workspace (written atomically).

        Args:
            path: File path relative to the workspace; missing directories are created.
            content: The complete new content of the file.
        """
        if path.endswith(("/", os.sep)):  # the walk drops the slash: 'out/' would be a file
            raise WorkspaceError(f"{path!r} names a directory; give the file's name, "
                                 f"e.g. {path.rstrip('/' + os.sep) + '/notes.txt'!r}")
        with locate(root(), path, make_dirs=True) as spot:
            existed = spot.name != "." and spot.lstat() is not None
            write_text(spot, content)
        result = _written(spot.rel, content, f"{'replaced' if existed else 'created'} "
                          f"{spot.rel} ({_size(len(content.encode('utf-8')))}, "
                          f"{_lines(content)})")
        if not existed:  # a rewind past this call removes it (nothing was there before)
            result.meta["file"]["created"] = True
        return result

    def list_files(path: str = ".") -> Any:
        """List a directory of the workspace: subdirectories end with '/', files show sizes.

        Args:
            path: Directory relative to the workspace.
        """
        base = root()
        with locate(base, path) as spot:
            try:
                fd = os.open(spot.name, _DIR, dir_fd=spot.dir_fd)
            except FileNotFoundError:
                raise WorkspaceError(f"{path!r} is not a directory (it does not exist)") from None
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    raise WorkspaceError(f"{path!r} is not a directory") from None
                raise
        try:
            with os.scandir(fd) as it:
                entries = sorted(it, key=lambda e: (not e.is_dir(follow_symlinks=False),
                                                    e.name.lower()))
            lines = [_entry(base, spot.rel, e) for e in entries[:LIST_ENTRIES]]
        finally:
            os.close(fd)
        if len(entries) > LIST_ENTRIES:
            lines.append(f"[… {len(entries) - LIST_ENTRIES} more entries not shown]")
        header = f"{spot.rel}/ ({len(entries)} entries)"
        return "\n".join([header, *lines]) if lines else f"{header}: empty"

    def edit_file(path: str, old: str, new: str) -> Any:
        """Replace one exact occurrence of `old` with `new` in a workspace file.

        Args:
            path: File path relative to the workspace.
            old: The exact text to replace; it must occur exactly once (include enough surrounding lines to make it unique).
            new: The replacement text.
        """
        with locate(root(), path) as spot:
            if not old:
                raise WorkspaceError("`old` is empty; give the exact text to replace "
                                     "(write_file creates or overwrites whole files)")
            text = _read_text(spot)
            edited, line = replace_once(text, old, new, spot.rel)
            write_text(spot, edited)  # the same directory descriptor the read went through
        return _written(spot.rel, edited, f"edited {spot.rel}: replaced "
                        f"{old.count(chr(10)) + 1} line(s) at line {line} with "
                        f"{new.count(chr(10)) + 1} line(s)")

    made = []
    for fn in (read_file, write_file, list_files, edit_file):
        t = tool(fn)  # schema and description from the signature and docstring
        t.fn = guarded(fn)
        t.timeout = timeout
        if fn in (write_file, edit_file):
            t.preview = lambda call: _preview(call, root(), remote)
        made.append(t)
    return made


def replace_once(text: str, old: str, new: str, rel: str,
                 error: type[Exception] = WorkspaceError) -> tuple[str, int]:
    """``text`` with its one ``old`` replaced by ``new`` (line ends as the file's, ``_line_endings``),
    and the line ``old`` began on; ``error`` (a message the model can act on) unless ``old``
    occurs exactly once. The local and the remote edit_file both edit through it."""
    old, new = _line_endings(text, old, new)
    count = text.count(old)
    if count == 0:
        raise error(f"`old` was not found in {rel}; it must match the file exactly "
                    "(whitespace included) — read_file shows it")
    if count > 1:
        raise error(f"`old` occurs {count} times in {rel}; include more surrounding "
                    "text so it occurs exactly once")
    return text.replace(old, new, 1), text[: text.index(old)].count("\n") + 1


def edit_preview(before: str, old: str, new: str) -> str | None:
    """What ``edit_file`` would leave of ``before``; None when ``old`` is empty or not there once."""
    if not old:
        return None
    try:
        return replace_once(before, old, new, "")[0]
    except WorkspaceError:
        return None


def unified(before: str, after: str, name: str, context: int = 3) -> str:
    """The unified diff from ``before`` to ``after`` of file ``name`` (every line ends in a newline)."""
    diff = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                fromfile=f"a/{name}" if before else "/dev/null",
                                tofile=f"b/{name}", n=context)
    return "".join(line if line.endswith("\n") else line + "\n" for line in diff)


def _inside(root: Path, path: Path) -> bool:
    return path == root or root in path.parents


def _preview(call: ToolCall, root: Path, remote: Callable[[], RemoteFiles | None] | None) -> str | None:
    far = remote() if remote is not None else None
    return far.preview(call) if far is not None else diff_preview(call, root)


def _entry(base: Path, rel: str, entry: os.DirEntry[str]) -> str:
    """One line of a listing; a symlink says whether it stays inside, nothing is opened."""
    if entry.is_symlink():
        where = ""
        try:
            locate(base, entry.name if rel == "." else f"{rel}/{entry.name}").close()
        except WorkspaceError as exc:
            where = ", a loop" if "loop" in str(exc) else ", leads outside"
        except OSError:
            where = ", broken"
        return f"{entry.name} -> (symlink{where})"
    if entry.is_dir(follow_symlinks=False):
        return entry.name + "/"
    st = entry.stat(follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode):
        return f"{entry.name}  ({_kind(st.st_mode)})"
    return f"{entry.name}  ({_size(st.st_size)})"


def diff_preview(call: ToolCall, root: Path, context: int = 3) -> str | None:
    """A unified diff of what a ``write_file``/``edit_file`` call would change, or None."""
    if call.name not in ("write_file", "edit_file"):
        return None
    args = call.arguments
    try:
        with locate(root, str(args.get("path", ""))) as spot:
            name = spot.rel
            st = spot.lstat()
            before = _read_text(spot) if st is not None and stat.S_ISREG(st.st_mode) else ""
            spot.refuse_odd(st)
    except (WorkspaceError, OSError) as exc:
        return f"(no preview: {exc})"
    if call.name == "write_file":
        after: str | None = str(args.get("content", ""))
    else:
        after = edit_preview(before, str(args.get("old", "")), str(args.get("new", "")))
    if after is None:
        return "(no preview: `old` does not occur exactly once)"
    return unified(before, after, name, context)


def _lines(text: str) -> str:
    """'3 lines' as an editor counts them: a final newline ends a line, it does not start one."""
    n = len(text.splitlines())
    return f"{n} line{'s' if n != 1 else ''}"


def _written(rel: str, text: str, said: str) -> ToolResult:
    """The result of a write: what the model reads, and the file as left (for transcripts)."""

    return ToolResult(call_id="", output=said, meta={"file": record(rel, text)})


# -- what a write leaves in its result, for transcripts to re-create the file ---------
RECORD_LIMIT = 100_000  # characters; a larger file is described, not re-created


def record(path: str, text: str) -> dict[str, Any]:
    """``meta["file"]`` for a file at workspace-relative ``path`` now holding ``text``."""
    posix = Path(path).as_posix()
    if len(text) > RECORD_LIMIT:
        return {"path": posix, "omitted_chars": len(text)}
    return {"path": posix, "text": text}


def recorded_file(result: ToolResult | None) -> tuple[str, str] | None:
    """(path, text) a successful result recorded, else None."""
    if result is None or result.error:
        return None
    entry = result.meta.get("file")
    if isinstance(entry, dict) and isinstance(entry.get("path"), str) and isinstance(entry.get("text"), str):
        return entry["path"], entry["text"]
    return None
