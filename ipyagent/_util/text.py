"""Text that leaves the process safely: encodable (surrogates repaired) and, for a
terminal, with every control character made visible; and text made short: one line
(``one_line``) or its head and tail (``head_tail``).

Why: JSON's ``\\ud83d\\ude00`` escape pair, cut in two by a streaming server, decodes to
two lone halves; Python keeps them, but UTF-8 (requests, notebooks, SQLite) refuses
them. One repair for every place text leaves the process.

Why ``visible``: a terminal obeys what it is sent. ``ESC[2K ESC[G`` in a comment erased
the line before ``Run it?``, so the user approved other code than what ran. Text from the
model or a tool is shown through :func:`visible` before it reaches a terminal.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["head_tail", "omitted", "one_line", "repair_surrogates", "visible", "without_credentials"]


def one_line(text: object, limit: int | None = None) -> str:
    """``text`` on one line: every whitespace run (newlines too) one space, cut to ``limit``
    characters with ``…`` when longer. An exception reads as its message, or as its type's
    name when the message is blank."""
    line = " ".join(str(text).split())
    if not line and isinstance(text, BaseException):
        line = type(text).__name__
    return line if limit is None or len(line) <= limit else line[: max(limit - 1, 0)] + "…"


def without_credentials(url: str) -> str:
    """``url`` (valid or not) for a message: no ``user:password@`` before its host, no query,
    no fragment (any of them may carry a key)."""
    url = re.split(r"[?#]", str(url), maxsplit=1)[0]
    return re.sub(r"^([^/]*//)?[^/]*@", r"\1", url)


def omitted(n: int) -> str:
    """The marker that stands in for ``n`` characters left out."""
    return f"[… {n} characters omitted …]"


def head_tail(text: str, limit: int, marker: Callable[[int], str] = omitted) -> str:
    """``text`` when it has at most ``limit`` characters (or ``limit`` is 0: no limit), else
    its first ``limit // 2`` and last ``limit - limit // 2`` characters with ``marker(n)``
    for the ``n`` left out between them, on a line of its own."""
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n{marker(len(text) - limit)}\n{text[-tail:]}"


_SURROGATE = re.compile("[\ud800-\udfff]")


def repair_surrogates(text: str) -> str:
    """Halves side by side become their character; a lone half becomes U+FFFD."""
    if not _SURROGATE.search(text):  # at C speed: autosave runs this on megabytes
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


# What ``visible`` rewrites. C0 controls but newline and tab, DEL and C1; Unicode's format
# characters (category Cf: bidi overrides and isolates, LRM/RLM/ALM, zero-width space and
# joiners, word joiner, BOM, soft hyphen, the invisible "tag" characters); line and
# paragraph separators (Python's splitlines breaks at them, a terminal does not); lone
# surrogates (a terminal cannot be sent them); and the scheme's own alphabet — the control
# pictures U+2400–U+2421 and ``⟨`` — so that a literal ``␛`` never reads as an escaped ESC.
# The Cf list is Unicode 15's; a test checks it against this Python's unicodedata.
_SHOWN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f"
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f"
    "\ud800-\udfff\u2400-\u2421\u27e8]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # ESC → ␛, CR → ␍, BS → ␈, BEL → ␇
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"⟨U+{code:04X}⟩"


def visible_name(text: str) -> str:
    """A name (a file's, a path) on one line: ``visible`` with newline and tab shown too
    (``␊``, ``␉``), so a name can never make a listing show a row of its own."""
    return visible(text).replace("\n", "\u240a").replace("\t", "\u2409")


def visible(text: str) -> str:
    """``text`` with every character that could move, erase, reorder or hide what a
    terminal shows made visible; newline and tab are kept.

    C0 controls and DEL become their control pictures (ESC → ``␛``, so ``ESC[2K`` reads
    ``␛[2K``); everything else listed above becomes ``⟨U+202E⟩``. The scheme is
    unambiguous: a literal control picture or ``⟨`` in ``text`` is itself shown as
    ``⟨U+241B⟩``/``⟨U+27E8⟩``, so the original can always be read back.
    """
    return _SHOWN.sub(_shown, text)
