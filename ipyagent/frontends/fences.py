"""A reply's fenced code told apart from its prose as it streams, for the terminal.

The terminal shows a model's Markdown as text; what reads worst raw is a code block (three
backticks, a language, the code, three more). ``FenceReader`` splits streamed text into
prose (passed on at once, mid-line too, so the reply still streams) and code lines (held to
the end of each line, so each can be highlighted whole); the fence lines themselves are
reported, not shown. CommonMark's rules, the ones a reply uses: a fence is three or more
backticks or tildes after at most three spaces; it closes on a line of the same character,
at least as long, and nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["FenceReader", "Piece"]

_LINE = re.compile(r"[^\n]*\n|[^\n]+")
_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^`\s]*)[^`\n]*$")
_LANG = re.compile(r"^[A-Za-z0-9_+#.-]{1,20}$")


@dataclass(frozen=True)
class Piece:
    """A part of the reply: ``kind`` is "prose" (text, perhaps part of a line), "code" (one
    whole line of a block, no newline), "open" (a fence; ``text`` its language, "" when none
    or unreadable) or "close"."""

    kind: str
    text: str = ""


class FenceReader:
    """Feed a reply's text as it streams; get back what to show, piece by piece."""

    def __init__(self) -> None:
        self._fence = ""  # the opening fence while inside a block
        self._pending = ""  # a line not ended yet that is held (code, or a fence to be)
        self._mid_line = False  # prose of this line was passed on already

    @property
    def in_code(self) -> bool:
        return bool(self._fence)

    def feed(self, text: str) -> list[Piece]:
        pieces: list[Piece] = []
        if self._fence and "\n" not in text:
            # A code line grows without ending: held, not split again per chunk (a
            # 100,000-character line in 4-character chunks took ~1 s).
            self._pending += text
            return pieces
        text = self._pending + text
        self._pending = ""
        # Lines end at "\n" only: str.splitlines also breaks at \r, \v, \f, \x1c-\x1e,
        # \x85, U+2028/9, and a piece ending in one of them is no line's end here.
        for line in _LINE.findall(text):
            if not line.endswith("\n"):
                self._partial(line, pieces)
                break
            self._whole(line, pieces)
        return pieces

    def flush(self) -> list[Piece]:
        """The reply ended: whatever is held, and the block (if open) closed."""
        pieces: list[Piece] = []
        if self._pending and not (self._fence and self._closes(self._pending)):
            pieces.append(Piece("code" if self._fence else "prose", self._pending))
        if self._fence:
            pieces.append(Piece("close"))
        self._fence, self._pending, self._mid_line = "", "", False
        return pieces

    def _whole(self, line: str, pieces: list[Piece]) -> None:
        body = line[:-1]
        if self._fence:
            if self._closes(body):
                self._fence = ""
                pieces.append(Piece("close"))
            else:
                pieces.append(Piece("code", body))
            return
        opened = None if self._mid_line else _OPEN.match(body)
        if opened and not (opened.group(1)[0] == "`" and "`" in body[opened.end(1):]):
            self._fence = opened.group(1)
            lang = opened.group(2)
            pieces.append(Piece("open", lang if _LANG.match(lang) else ""))
        else:
            pieces.append(Piece("prose", line))
        self._mid_line = False

    def _closes(self, body: str) -> bool:
        """Whether ``body`` (a line without its newline) closes the open block: at most three
        spaces, then the fence's character, at least as many, then only spaces."""
        bare = body.lstrip(" ").rstrip(" ")
        return (len(body) - len(body.lstrip(" ")) <= 3 and bool(bare)
                and set(bare) == {self._fence[0]} and len(bare) >= len(self._fence))

    def _partial(self, line: str, pieces: list[Piece]) -> None:
        if self._fence or (not self._mid_line and _may_open(line)):
            self._pending = line  # a code line is shown whole; a fence is not shown
            return
        pieces.append(Piece("prose", line))
        self._mid_line = True


def _may_open(start: str) -> bool:
    """Whether a line that begins ``start`` may still be a fence."""
    bare = start.lstrip(" ")
    if len(start) - len(bare) > 3:
        return False
    if not bare:
        return True
    char = bare[0]
    if char not in "`~":
        return False
    run = len(bare) - len(bare.lstrip(char))
    return run >= 3 or run == len(bare)
