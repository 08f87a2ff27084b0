"""AGENTS.md: project instructions for the agent, found beside the notebook.

The nearest ``AGENTS.md`` wins: the notebook's directory first, then each parent up to
the repository root (the first directory holding ``.git``). Outside a repository only
the notebook's own directory is looked at, so a stray file in ``$HOME`` never leaks in.
Its text is appended to the system prompt under a marked heading; the marker makes the
composition idempotent (a transcript's saved system prompt already holds it).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["FILENAME", "MARKER", "find_agents_md", "with_agents_md"]

FILENAME = "AGENTS.md"
MARKER = "# Project instructions (AGENTS.md)"
MAX_CHARS = 32_000  # a runaway file must not eat the context window


def find_agents_md(start: str | Path) -> Path | None:
    """The ``AGENTS.md`` that applies to a notebook in ``start``, or None."""
    start = Path(start).resolve()
    chain = [start, *start.parents]
    root = next((d for d in chain if (d / ".git").exists()), None)
    candidates = chain[: chain.index(root) + 1] if root is not None else [start]
    top = candidates[-1]
    for directory in candidates:
        path = directory / FILENAME
        # A symlink that leads out of the repository (to ~/.ssh/id_rsa, /proc/self/environ:
        # a cloned repo may hold one) is not read: its text would go to the provider.
        if path.is_file() and path.resolve().is_relative_to(top):
            return path
    return None


def read_agents_md(path: Path) -> str:
    """The file's text, capped at ``MAX_CHARS`` (with a note when cut); no more bytes are
    read than its size says (a file that says 0, as /proc's do, reads as empty)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(min(size, 4 * MAX_CHARS + 4))  # UTF-8: at most 4 bytes a character
    text = data.decode("utf-8", errors="replace").strip()
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS] + f"\n\n[… AGENTS.md cut at {MAX_CHARS} characters]"
    return text


def with_agents_md(system: str, path: Path | None) -> str:
    """``system`` plus the AGENTS.md section (unchanged if there is none or it is already in)."""
    if path is None or MARKER in system:
        return system
    try:
        text = read_agents_md(path)
    except OSError:
        return system  # unreadable: run without it rather than fail the run
    if not text:
        return system
    return (f"{system.rstrip()}\n\n{MARKER}\n\nThe project's AGENTS.md ({path}) says — follow "
            f"it where it applies:\n\n{text}")
