"""Reading back the unified diffs the staged workspace records (``kernel.staging._diff``):
which lines a change replaced, added or removed, by the numbers an editor shows.

A recorded diff can be abridged: folded past its line limit, or one hunk that takes the
whole changed middle out and puts it back (past difflib's budget). Such a diff does not say
line by line what changed, so ``line_edits`` says nothing of it rather than something false.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["HUNK", "ONE_HUNK", "LineEdit", "folded", "hunk_text", "is_abridged", "line_edits",
           "lines_of"]

ONE_HUNK = "(the changed middle, not matched line by line)"  # after such a hunk's header
_FOLD = re.compile(r"^\.\.\. \d+ more diff lines \.\.\.$", re.M)
# A hunk's header: old start, (",count"), new start, (",count").
HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def hunk_text(diff: str) -> list[str]:
    """The lines a unified diff shows of the file (context, removed, added: without their
    marks), not its ---/+++ and @@ headers (which name the file)."""
    out, in_hunk = [], False
    for raw in lines_of(diff):
        line = raw.rstrip("\r\n")
        if HUNK.match(line):
            in_hunk = True
        elif in_hunk and line[:1] in " -+":
            out.append(line[1:])
    return out


def folded(count: int) -> str:
    """The line that stands for ``count`` diff lines left out of the middle."""
    return f"... {count} more diff lines ...\n"


def lines_of(text: str) -> list[str]:
    """Lines with their ends, broken where a file's lines break (``\\n``, ``\\r\\n``, ``\\r``;
    not at a form feed or U+2028, as ``str.splitlines`` would): the numbers are an editor's."""
    return re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z", text)


def is_abridged(diff: str) -> bool:
    """The diff leaves lines out (folded) or does not match them one by one (one hunk)."""
    return ONE_HUNK in diff or _FOLD.search(diff) is not None


@dataclass(frozen=True)
class LineEdit:
    """One line a change replaced, added or removed; ``ending``: only its line break changed."""

    kind: Literal["replaced", "added", "removed", "ending"]
    line: int  # in the new file; for a removed line, in the old one
    old: str = ""  # without its line break
    new: str = ""


def line_edits(diff: str) -> list[LineEdit] | None:
    """The edits of a unified diff in order, a run of removed lines paired with the run of
    added lines after it; None for an abridged diff or one that is not a diff."""
    if is_abridged(diff):
        return None
    edits: list[LineEdit] = []
    removed: list[tuple[int, str]] = []
    added: list[tuple[int, str]] = []
    old_no = new_no = 0
    in_hunk = False

    def flush() -> None:
        pairs = _paired(removed, added)
        taken = {i for i, _ in pairs}
        placed = {j for _, j in pairs}
        for i, j in pairs:
            (_, a), (n, b) = removed[i], added[j]
            edits.append(LineEdit("ending" if a == b else "replaced", n, a, b))
        edits.extend(LineEdit("removed", n, old=a) for i, (n, a) in enumerate(removed) if i not in taken)
        edits.extend(LineEdit("added", n, new=b) for j, (n, b) in enumerate(added) if j not in placed)
        removed.clear()
        added.clear()

    for raw in lines_of(diff):
        line = raw.rstrip("\r\n")
        hunk = HUNK.match(line)
        if hunk:
            flush()
            in_hunk = True
            # A hunk of an empty side starts at 0 ("@@ -0,0 +1,3 @@").
            old_no, new_no = max(int(hunk[1]), 1), max(int(hunk[3]), 1)
        elif not in_hunk:
            continue  # the ---/+++ header
        elif line.startswith("-"):
            removed.append((old_no, line[1:]))
            old_no += 1
        elif line.startswith("+"):
            added.append((new_no, line[1:]))
            new_no += 1
        elif line.startswith(" "):
            flush()
            old_no += 1
            new_no += 1
        # "\ No newline at end of file": nothing to say
    flush()
    return edits if in_hunk else None


def _paired(removed: list[tuple[int, str]], added: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """(removed, added) index pairs of the lines an edit replaced: by position when the runs
    are as long, else each line of the shorter run, in order, with the most alike line of the
    longer one after the last paired (``alpha = 1`` → ``alpha = 2`` when ``[m]`` and
    ``beta = 3`` went)."""
    if len(removed) == len(added) or not removed or not added or len(removed) + len(added) > 100:
        return [(k, k) for k in range(min(len(removed), len(added)))]
    short, long_ = (added, removed) if len(added) < len(removed) else (removed, added)
    pairs: list[tuple[int, int]] = []
    start = 0
    for j, (_, text) in enumerate(short):
        last = len(long_) - (len(short) - j)  # leave one for each later line of the short run
        i = max(range(start, last + 1),
                key=lambda k: (difflib.SequenceMatcher(None, long_[k][1], text).ratio(), -k))
        pairs.append((i, j) if short is added else (j, i))
        start = i + 1
    return pairs
