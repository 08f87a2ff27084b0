"""Final answers that imitate the framing of a tool result are cut where the imitation starts.

Why: seen at 1.5B (issue 33): after a KeyError, Qwen2.5-Coder answered with a made-up value
and then echoed a ``<tool_response>`` block, ipyagent's own note and the traceback, as if
they were part of its answer. What follows such a marker is not the model's answer but a
tool result it imagines; the user must not read it as either. The cut text is kept (the
message's ``meta["cut"]``) and the cut is said in one line: nothing is lost.

Only imitation is cut: a marker inside a code fence is a quote, a marker that a tool of this
run printed itself may be quoted from it (so tool output can never make us cut a real
answer), and a reply that would be left empty is kept whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Cut", "cut_scaffolding", "cut_notice"]

# The framing a tool result reaches the model in (Qwen/Hermes templates and our text mode:
# <tool_response>; ipyagent's note, as it is written now and as it was before), and the
# chat templates' turn markers (a reply that writes one is writing the next turn).
_FRAMING: dict[str, str] = {
    "a <tool_response> block": r"</?tool[ _]?response>",
    "ipyagent's note": r"Note from ipyagent\b|\[ipyagent note\b",
    "a [tool output] label": r"\[tool output\]",
    "a chat turn marker": r"<\|im_start\|>|<\|start_header_id\|>|<\|eot_id\|>|<start_of_turn>",
}
_MARKER = re.compile("|".join(f"(?P<m{i}>{p})" for i, p in enumerate(_FRAMING.values())), re.I)
_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):", re.M)
_FENCE = re.compile(r"^[ \t]*(```|~~~)", re.M)


@dataclass
class Cut:
    """An answer cut before the tool output it imitated."""

    kept: str
    removed: str
    why: str  # what it imitated, in words

    def as_meta(self) -> dict[str, str | int]:
        """For the message's ``meta["cut"]`` (the transcript keeps what was cut)."""
        return {"chars": len(self.removed), "why": self.why, "text": self.removed}


def cut_notice(cut: Cut) -> str:
    """The one line the card and the terminal show."""
    return (f"cut {len(cut.removed):,} characters that imitated tool output ({cut.why}) from "
            "the end of the answer; the transcript keeps them")


def cut_scaffolding(text: str, printed: Iterable[str] = ()) -> Cut | None:
    """``text`` cut before the first imitated tool-result framing, or None.

    ``printed``: what the tools of this run printed; a marker found there may be quoted."""
    fenced = _fenced_spans(text)
    quoted = "\n".join(printed)
    candidates: list[tuple[int, str]] = []
    for match in _MARKER.finditer(text):
        if _inside(match.start(), fenced):
            continue
        if re.search(re.escape(match.group(0)), quoted, re.I):
            continue  # a tool printed it: the model may be quoting that
        kind = next(k for i, k in enumerate(_FRAMING) if match.group(f"m{i}") is not None)
        candidates.append((match.start(), kind))
        break
    for match in _TRACEBACK.finditer(text):
        if _inside(match.start(), fenced) or _introduced(text[:match.start()]):
            continue
        candidates.append((match.start(), "a traceback after the answer"))
        break
    if not candidates:
        return None
    at, why = min(candidates)
    kept = text[:at].rstrip()
    if not kept.strip(" \t\n`*_>-:"):
        return None  # nothing of an answer before it: keep the reply whole
    return Cut(kept, text[at:], why)


def _fenced_spans(text: str) -> list[tuple[int, int]]:
    """Where code fences are (an unclosed fence runs to the end)."""
    marks = [m.start() for m in _FENCE.finditer(text)]
    spans = [(marks[i], marks[i + 1]) for i in range(0, len(marks) - 1, 2)]
    if len(marks) % 2:
        spans.append((marks[-1], len(text)))
    return spans


def _inside(position: int, spans: list[tuple[int, int]]) -> bool:
    return any(a <= position < b for a, b in spans)


def _introduced(before: str) -> bool:
    """True when the answer introduces what follows ("It failed with:"): a quote, not an echo."""
    lines = [line for line in before.splitlines() if line.strip()]
    return not lines or lines[-1].rstrip().endswith(":")
