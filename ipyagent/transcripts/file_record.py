"""Files the agent wrote, re-created by a transcript.

``write_file`` and ``edit_file`` record the file as they left it (up to
``ipyagent.tools.files.RECORD_LIMIT`` characters) in their result's ``meta["file"]``. The transcript shows each as a code cell
that writes exactly that text, so "Run All", ``--rerun`` and replay have the agent's files
too — and, as for python cells, what runs again is what the cell shows. A re-run or a
replay only creates a missing file; one changed since is left alone and reported.
"""

from __future__ import annotations

from pathlib import Path

from ..context.items import ToolCall

__all__ = ["cell_source", "restore"]

def _literal(text: str) -> str:
    """``text`` as a Python literal a person can read: triple-quoted when that is exact."""
    unsafe = ('"""' in text or "\\" in text or text.endswith('"')
              or any(not (c.isprintable() or c in "\n\t") for c in text))
    return repr(text) if unsafe else f'"""{text}"""'


def cell_source(call: ToolCall, path: str, text: str) -> str:
    """The code cell that re-creates ``path`` with ``text`` (what ``call`` left)."""
    target = repr(path)
    return (f"# {call.name} ({call.id}) left {path} like this; this cell re-creates it.\n"
            "from pathlib import Path\n"
            f"Path({target}).parent.mkdir(parents=True, exist_ok=True)\n"
            f'Path({target}).write_text({_literal(text)}, encoding="utf-8", newline="")')


def restore(root: str | Path, path: str, text: str,
            claimed: set[str]) -> tuple[bool, str | None]:
    """Re-create ``path`` under ``root`` (never outside it) with ``text``.

    Returns ``(written, why_not)``: ``why_not`` is None when the file is now as the agent
    left it (``written``: by this call), else why it was left alone, in one line. A file
    that existed and differs is never overwritten (someone's later edits) unless this same
    re-run made it (``claimed``: the paths it created or found as recorded), so a file
    written twice ends as the agent left it.
    """
    from ..tools.files import locate, read_existing, write_text

    try:
        with locate(Path(root), path, make_dirs=True) as spot:
            key = spot.rel
            if key in claimed:
                before = None
            else:
                try:
                    before = read_existing(spot)
                except UnicodeDecodeError:
                    before = ""  # not text: it differs
            if before is not None and before != text:
                return False, "it changed since the agent wrote it; left as is"
            written = before is None
            if written:
                write_text(spot, text)
    except (OSError, ValueError) as exc:  # WorkspaceError is a ValueError
        return False, str(exc).splitlines()[0][:120]
    claimed.add(key)
    return written, None
