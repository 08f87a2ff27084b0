"""Text made safe to leave the process (``visible`` for terminals) and made short
(``one_line``, ``head_tail``)."""

from __future__ import annotations

import random
import re
import unicodedata

import pytest

from ipyagent._util.text import head_tail, omitted, one_line, visible
from tests.helpers.inert import harmless

PICTURE = re.compile("⟨U\\+([0-9A-F]{4,6})⟩|[\u2400-\u241f\u2421]")


def read_back(shown: str) -> str:
    """The inverse of ``visible``: the scheme is unambiguous, so the original is recoverable."""
    def one(m: re.Match[str]) -> str:
        if m.group(1):
            return chr(int(m.group(1), 16))
        return "\x7f" if m.group() == "\u2421" else chr(ord(m.group()) - 0x2400)
    return PICTURE.sub(one, shown)


@pytest.mark.parametrize("raw, shown", [
    ("print(1)  # \x1b[2K\x1b[G", "print(1)  # ␛[2K␛[G"),
    ("a\rb\bc\x07\x7f", "a␍b␈c␇␡"),
    ("x\u202ey\u2066z\u2069\u200f\u061c", "x⟨U+202E⟩y⟨U+2066⟩z⟨U+2069⟩⟨U+200F⟩⟨U+061C⟩"),
    ("zero\u200bwidth\ufeff\u00ad", "zero⟨U+200B⟩width⟨U+FEFF⟩⟨U+00AD⟩"),
    ("csi\x9b2K nel\x85", "csi⟨U+009B⟩2K nel⟨U+0085⟩"),
    ("line\u2028sep", "line⟨U+2028⟩sep"),
    ("tag\U000e0041", "tag⟨U+E0041⟩"),
    ("lone \ud83d half", "lone ⟨U+D83D⟩ half"),
    # the scheme's own alphabet, when literal, is escaped too: ␛ is never an ESC
    ("literal ␛ and ⟨U+202E⟩", "literal ⟨U+241B⟩ and ⟨U+27E8⟩U+202E⟩"),
    ("tabs\tand\nnewlines stay; so do ünïcödé, 中文, emoji 😀", None),
])
def test_each_kind_of_control_is_shown_and_reads_back(raw: str, shown: str | None) -> None:
    assert visible(raw) == (raw if shown is None else shown)
    assert harmless(visible(raw)) and read_back(visible(raw)) == raw


def test_every_format_character_this_python_knows_is_shown() -> None:
    missed = [f"U+{c:04X}" for c in range(0x110000)
              if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp", "Cs")
              and chr(c) not in "\n\t" and visible(chr(c)) == chr(c)]
    assert missed == []


def test_random_text_round_trips() -> None:
    rng = random.Random(12)
    alphabet = ("ab ␛⟨⟩U+0\n\t\x1b\r\x00\x7f\x85\x9b\u202e\u2066\u200b\ufeff\u2400\u2421\u2028"
                "\ud800\U000e0020é中")
    for _ in range(2000):
        raw = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert harmless(visible(raw)) and read_back(visible(raw)) == raw, repr(raw)


# -- one line, head and tail --------------------------------------------------------------

def test_one_line_collapses_every_whitespace_run_and_cuts_with_an_ellipsis() -> None:
    assert one_line("  a\n\n b\t\r\nc  ") == "a b c"
    assert one_line(12) == "12"
    assert one_line("abcdef", 6) == "abcdef"
    assert one_line("abcdefg", 6) == "abcde…" and len(one_line("x" * 100, 6)) == 6
    assert one_line("a\nb" * 50, None) == " ".join(["a", *["ba"] * 49, "b"])


def test_one_line_of_an_exception_is_its_message_or_its_type() -> None:
    assert one_line(ValueError("bad\n  value")) == "bad value"
    assert one_line(TimeoutError()) == "TimeoutError"
    assert one_line(OSError(" \n ")) == "OSError"  # a blank message: the type says more
    assert one_line(RuntimeError("x" * 50), 10) == "x" * 9 + "…"


def test_head_tail_keeps_both_ends_and_says_how_much_is_gone() -> None:
    text = "".join(chr(97 + i % 26) for i in range(1000))
    assert head_tail(text, 1000) is text and head_tail(text, 0) is text
    cut = head_tail(text, 101)
    head, marker, tail = cut.split("\n")
    assert head == text[:50] and tail == text[-51:] and marker == omitted(899)
    assert omitted(899) == "[… 899 characters omitted …]"
    assert head_tail(text, 10, lambda n: f"<{n} gone>") == f"{text[:5]}\n<990 gone>\n{text[-5:]}"
    assert head_tail("abc", 1) == "\n[… 2 characters omitted …]\nc"
