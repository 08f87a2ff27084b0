"""Workspace file tools: ``read_file``, ``write_file``, ``list_files``, ``edit_file``.

Every path is confined to one directory, the workspace (``Agent.workspace``): absolute
paths outside it, ``..`` that climbs out and symlinks that lead out are refused with an
error value the model can act on. Paths are checked after resolving symlinks and the
resolved path is what is opened, so a link inside the workspace can only reach files
inside it. (A process that swaps a directory for a symlink between the check and the
open could still win that race; the tools guard against the model, not a local attacker.)
Writes are atomic (a temporary file in the same directory, then ``os.replace``), and
reads are capped so a huge file cannot flood the context.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable

from .items import ToolCall, ToolResult
from .tools import Tool, tool

__all__ = ["FILE_TOOLS", "READ_ONLY", "WorkspaceError", "file_tools", "resolve", "diff_preview"]

FILE_TOOLS = ("read_file", "write_file", "list_files", "edit_file")
READ_ONLY = ("read_file", "list_files")

READ_CHARS = 16_000  # one read_file answer; under Agent.tool_output_limit's default
LIST_ENTRIES = 500
BINARY_PROBE = 8192


class WorkspaceError(ValueError):
    """A path the file tools refuse (outside the workspace, missing, wrong kind)."""


def resolve(root: Path, path: str) -> Path:
    """``path`` (relative to ``root``, or absolute) resolved, if it stays inside ``root``."""
    if not isinstance(path, str) or not path.strip():
        raise WorkspaceError("the path is empty; give a path relative to the workspace")
    if "\x00" in path:
        raise WorkspaceError("the path contains a NUL character")
    root = root.resolve()
    # Lexical check first, so '..' and absolute paths get the clearer message.
    lexical = Path(os.path.normpath(root / path))
    if not _inside(lexical, root):
        raise WorkspaceError(f"{path!r} is outside the workspace ({root}); the file tools only "
                             "reach files under it — use a path relative to it")
    try:
        real = lexical.resolve()
    except (RuntimeError, OSError):  # a symlink loop (RuntimeError before Python 3.13)
        raise WorkspaceError(f"{path!r} is (or passes through) a symlink loop; it leads "
                             "nowhere") from None
    if not _inside(real, root):
        raise WorkspaceError(f"{path!r} is a symlink (or passes through one) that leads outside "
                             f"the workspace ({root}), to {real}; refused")
    return real


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _shown(root: Path, path: Path) -> str:
    """``path`` as the model should write it: relative to the workspace."""
    rel = path.relative_to(root.resolve())
    return str(rel) if str(rel) != "." else "."


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} bytes"  # unreachable; keeps type checkers calm


def _error(message: str) -> ToolResult:
    # Toolbox fills in call_id and name for a returned ToolResult.
    return ToolResult(call_id="", output=f"Error: {message}", error=True)


def _read_text(path: Path) -> str:
    """The whole file as text (for edits); refuses binary and over-large files."""
    if path.stat().st_size > 10 * 1024 * 1024:
        raise WorkspaceError(f"{path.name} is {_size(path.stat().st_size)}; too large to edit "
                             "with edit_file — use the python tool")
    data = path.read_bytes()
    if b"\x00" in data[:BINARY_PROBE]:
        raise WorkspaceError(f"{path.name} looks binary; use the python tool for it")
    try:
        # Strict: a lenient decode would write U+FFFD over every byte it could not read.
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkspaceError(f"{path.name} is not UTF-8 text (byte {exc.start}); editing it "
                             "here would destroy its other characters — use the python tool "
                             "with the file's encoding") from None


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


def atomic_write(path: Path, content: str) -> None:
    """Write ``content`` to ``path`` via a temporary file and ``os.replace`` (all or nothing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # what open() would give a new file (mkstemp makes 0600)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def file_tools(root: Callable[[], Path]) -> list[Tool]:
    """The four file tools, confined to ``root()`` (read at each call, so it may change)."""

    def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
        # WorkspaceError/OSError become error values with a clean message (no "raised").
        def run(**kwargs: Any) -> Any:
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
        base = root()
        target = resolve(base, path)
        if target.is_dir():
            raise IsADirectoryError(path)
        size = target.stat().st_size
        with target.open("rb") as f:
            if b"\x00" in f.read(BINARY_PROBE):
                raise WorkspaceError(f"{path!r} looks binary ({_size(size)}); use the python "
                                     "tool to inspect it")
        start = max(1, int(start_line))
        taken: list[str] = []
        used = 0
        last = start - 1
        more = False
        cut: list[int] = []  # lines longer than READ_CHARS, shown up to it
        with target.open("r", encoding="utf-8", errors="replace", newline="") as f:
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
        text = "".join(taken)
        if not taken and start > 1:
            return _error(f"{path!r} has fewer than {start} lines")
        if more or start > 1 or cut:
            note = f"[showing lines {start}–{last} of {_shown(base, target)} ({_size(size)})"
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
        base = root()
        target = resolve(base, path)
        if target.is_dir():
            raise IsADirectoryError(path)
        if path.endswith(("/", os.sep)):  # resolve() drops the slash: 'out/' would be a file
            raise WorkspaceError(f"{path!r} names a directory; give the file's name, "
                                 f"e.g. {path.rstrip('/' + os.sep) + '/notes.txt'!r}")
        existed = target.exists()
        atomic_write(target, content)
        return _written(base, target, content, f"{'replaced' if existed else 'created'} "
                        f"{_shown(base, target)} ({_size(len(content.encode('utf-8')))}, "
                        f"{_lines(content)})")

    def list_files(path: str = ".") -> Any:
        """List a directory of the workspace: subdirectories end with '/', files show sizes.

        Args:
            path: Directory relative to the workspace.
        """
        base = root()
        target = resolve(base, path)
        if not target.is_dir():
            raise WorkspaceError(f"{path!r} is not a directory" + (
                "" if target.exists() else " (it does not exist)"))
        entries = sorted(target.iterdir(), key=lambda p: (not p.is_dir(), p.name.lower()))
        lines = []
        for entry in entries[:LIST_ENTRIES]:
            if entry.is_symlink():
                try:
                    where = "" if _inside(entry.resolve(), base.resolve()) else ", leads outside"
                except (RuntimeError, OSError):  # one loop must not hide the whole listing
                    where = ", a loop"
                lines.append(f"{entry.name} -> (symlink{where})")
            elif entry.is_dir():
                lines.append(entry.name + "/")
            else:
                lines.append(f"{entry.name}  ({_size(entry.stat().st_size)})")
        if len(entries) > LIST_ENTRIES:
            lines.append(f"[… {len(entries) - LIST_ENTRIES} more entries not shown]")
        header = f"{_shown(base, target)}/ ({len(entries)} entries)"
        return "\n".join([header, *lines]) if lines else f"{header}: empty"

    def edit_file(path: str, old: str, new: str) -> Any:
        """Replace one exact occurrence of `old` with `new` in a workspace file.

        Args:
            path: File path relative to the workspace.
            old: The exact text to replace; it must occur exactly once (include enough surrounding lines to make it unique).
            new: The replacement text.
        """
        base = root()
        target = resolve(base, path)
        if target.is_dir():
            raise IsADirectoryError(path)
        if not old:
            raise WorkspaceError("`old` is empty; give the exact text to replace "
                                 "(write_file creates or overwrites whole files)")
        text = _read_text(target)
        old, new = _line_endings(text, old, new)
        count = text.count(old)
        if count == 0:
            raise WorkspaceError(f"`old` was not found in {_shown(base, target)}; it must match "
                                 "the file exactly (whitespace included) — read_file shows it")
        if count > 1:
            raise WorkspaceError(f"`old` occurs {count} times in {_shown(base, target)}; include "
                                 "more surrounding text so it occurs exactly once")
        edited = text.replace(old, new, 1)
        atomic_write(target, edited)
        line = text[: text.index(old)].count("\n") + 1
        return _written(base, target, edited, f"edited {_shown(base, target)}: replaced "
                        f"{old.count(chr(10)) + 1} line(s) at line {line} with "
                        f"{new.count(chr(10)) + 1} line(s)")

    made = []
    for fn in (read_file, write_file, list_files, edit_file):
        t = tool(fn)  # schema and description from the signature and docstring
        t.fn = guarded(fn)
        if fn in (write_file, edit_file):
            t.preview = lambda call: diff_preview(call, root())
        made.append(t)
    return made


def diff_preview(call: ToolCall, root: Path, context: int = 3) -> str | None:
    """A unified diff of what a ``write_file``/``edit_file`` call would change, or None."""
    if call.name not in ("write_file", "edit_file"):
        return None
    args = call.arguments
    try:
        target = resolve(root, str(args.get("path", "")))
        before = _read_text(target) if target.is_file() else ""
    except (WorkspaceError, OSError) as exc:
        return f"(no preview: {exc})"
    if call.name == "write_file":
        after = str(args.get("content", ""))
    else:
        old, new = _line_endings(before, str(args.get("old", "")), str(args.get("new", "")))
        if not old or before.count(old) != 1:
            return "(no preview: `old` does not occur exactly once)"
        after = before.replace(old, new, 1)
    name = _shown(root, target)
    diff = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                fromfile=f"a/{name}" if before else "/dev/null",
                                tofile=f"b/{name}", n=context)
    return "".join(line if line.endswith("\n") else line + "\n" for line in diff)


def _lines(text: str) -> str:
    """'3 lines' as an editor counts them: a final newline ends a line, it does not start one."""
    n = len(text.splitlines())
    return f"{n} line{'s' if n != 1 else ''}"


def _written(base: Path, target: Path, text: str, said: str) -> ToolResult:
    """The result of a write: what the model reads, and the file as left (for transcripts)."""
    from .file_record import record

    return ToolResult(call_id="", output=said, meta={"file": record(_shown(base, target), text)})
