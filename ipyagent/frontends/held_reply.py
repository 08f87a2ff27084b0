"""A reply streamed to a terminal, with what may be a call written as text held back.

Why: a small model served without a tool-call parser writes its calls as text (a
```` ```json ```` fence, ``<tool_call>…``, a bare ``{"name": …}``), its answer too (a
``final_answer`` call). A terminal cannot take back what it printed, so the call appeared as
raw JSON above its own card. From a line that starts like a written call, the text is held
until the reply is read (``ReplyRead``: what was read is shown instead) or another event
shows it was plain text after all (then it is printed as it came). Other lines stream as
they arrive; a line is held only while its first characters could still start a call.
"""

from __future__ import annotations

import re

from ..models.written_calls import CALL_FENCES, CALL_STARTS

__all__ = ["HeldReply"]

_FENCE = "```"


def _kind(line: str) -> str:
    """"call" (the line starts a written call), "maybe" (it could still) or "text"."""
    text = line.lstrip(" \t")
    if text.startswith(_FENCE):
        if "\n" not in text:
            return "maybe"  # the fence's language is not known yet
        words = text[len(_FENCE):text.index("\n")].split()
        return "call" if (words[0].lower() if words else "") in CALL_FENCES else "text"
    if text.startswith(CALL_STARTS):
        return "call"
    if "\n" not in text and any(start.startswith(text) for start in (*CALL_STARTS, _FENCE)):
        return "maybe"
    return "text"


class HeldReply:
    """``feed`` each delta and print what it returns; ``read`` / ``release`` at the end."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A new reply."""
        self.printed = ""  # what was printed of this reply
        self._pending = ""  # the start of a line that could still start a call
        self._held = ""  # from a line that starts a call to the end of the reply so far
        self._line_start = True
        self._in_block = False  # inside a fenced block that is not a call (```python)

    @property
    def holding(self) -> bool:
        return bool(self._pending or self._held)

    def feed(self, text: str) -> str:
        out: list[str] = []
        for piece in re.findall(r"[^\n]*\n|[^\n]+", text):
            if self._held:
                self._held += piece
                continue
            if not self._pending and not self._line_start:
                out.append(piece)
                self._line_start = piece.endswith("\n")
                continue
            line = self._pending + piece
            if self._in_block:  # a code block's lines are its own, its end a fence alone
                if line.endswith("\n") or not _FENCE.startswith(line.strip()):
                    out.append(line)
                    self._pending, self._line_start = "", line.endswith("\n")
                    self._in_block = line.strip() != _FENCE
                else:
                    self._pending = line
                continue
            kind = _kind(line)
            if kind == "call":
                self._held, self._pending = line, ""
            elif kind == "maybe":
                self._pending = line
            else:
                out.append(line)
                self._pending, self._line_start = "", line.endswith("\n")
                self._in_block = line.lstrip(" \t").startswith(_FENCE)
        shown = "".join(out)
        self.printed += shown
        return shown

    def read(self, text: str) -> str:
        """The reply was read as ``text``: what of it is still to print (the held part is
        dropped: its calls get cards of their own, an answer comes as read)."""
        self._pending = self._held = ""
        done, self.printed = self.printed, text
        if text.startswith(done):
            return text[len(done):]
        if text.strip().startswith(done.strip()):
            return text.strip()[len(done.strip()):]
        return "" if text.strip() in done else "\n" + text

    def release(self) -> str:
        """Plain text after all: what was held, as it came."""
        shown, self._pending, self._held = self._pending + self._held, "", ""
        self.printed += shown
        return shown
