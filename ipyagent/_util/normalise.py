"""What legitimately varies between two runs of the same code, replaced by placeholders.

Replay compares outputs through it (``ipyagent.transcripts.replay`` documents each rule);
the response cache keys tool outputs through it, so a timestamp does not miss the cache.
"""

from __future__ import annotations

import re
import tempfile
from typing import Iterable

__all__ = ["NORMALISATIONS", "normalise"]

_TMP = re.escape(tempfile.gettempdir().rstrip("/\\"))
NORMALISATIONS: list[tuple[str, str]] = [
    (r"\x1b\[[0-9;?]*[ -/]*[@-~]", ""),
    (r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?", "<datetime>"),
    (r"\b\d{4}-\d{2}-\d{2}\b", "<date>"),
    (r"\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b", "<time>"),
    (r"\b(?:1[5-9]|20)\d{8}\.\d+\b", "<epoch>"),
    (r"0x[0-9a-fA-F]{6,}", "0x<addr>"),
    (r"(\bid\b[^\d\n]{0,20})\d{8,}", r"\1<id>"),
    (r"(\bpid\b[^\d\n]{0,5})\d+", r"\1<pid>"),
    (r"(?<![\w.])\d+(?:\.\d+)?\s?(?:ns|µs|μs|us|ms|s|sec|secs|seconds?|milliseconds?)\b", "<duration>"),
    (r"\d[\d,]* loops? each", "<n> loops each"),
    (r"(?:/private)?/var/folders/[^\s'\"]*|(?:/var)?/tmp/[^\s'\"]*"
     + (rf"|{_TMP}[/\\][^\s'\"]*" if _TMP not in ("/tmp", "") else ""), "<tmp>"),
    (r"\b(In|Out)\s?\[\d+\]", r"\1[<n>]"),
    (r"(\[image/[\w.+-]+(?: \d+x\d+)?), [\d.]+ (?:B|KB|MB)\]", r"\1]"),
    (r"[ \t]+$", ""),
]
_COMPILED = [(re.compile(p, re.MULTILINE), r) for p, r in NORMALISATIONS]


def normalise(text: str, extra: Iterable[tuple[str, str]] = ()) -> str:
    """``text`` with what legitimately varies between runs replaced by placeholders."""
    for pattern, repl in [*_COMPILED, *((re.compile(p, re.MULTILINE), r) for p, r in extra)]:
        text = pattern.sub(repl, text)
    return text.strip("\n")
