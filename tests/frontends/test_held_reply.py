"""``HeldReply``: a terminal's stream with what may be a written call held back, whatever
the size of the pieces the stream comes in."""

from __future__ import annotations

import pytest

from ipyagent.frontends.held_reply import HeldReply


def fed(text: str, size: int) -> tuple[HeldReply, str]:
    held = HeldReply()
    return held, "".join(held.feed(text[i:i + size]) for i in range(0, len(text), size))


SIZES = [1, 2, 3, 7, 1000]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("start", ['```json\n{"name": "python"', "<tool_call>\n{", '{"name": "python"',
                                   "```\n{", "  ```tool_call\n{", "<|python_tag|>print(1)",
                                   "[TOOL_CALLS] [{", "<function=python>{"])
def test_a_line_that_starts_a_written_call_is_held_until_the_reply_is_read(start: str, size: int) -> None:
    held, shown = fed(f"Let me check.\n{start} ...", size)
    assert shown == "Let me check.\n" and held.holding
    assert held.read("Let me check.") == ""  # the call gets its card: nothing more
    assert not held.holding


@pytest.mark.parametrize("size", SIZES)
def test_prose_code_blocks_and_fences_that_are_no_calls_stream(size: int) -> None:
    text = ("The total is 5.\n```python\nprint(2 + 3)\n```\n```\nplain output\n```\n"
            "`inline` and { braces } mid-line\n```text\nsome text\n```\n")
    held, shown = fed(text, size)
    # "```\nplain output" opens a bare fence (a call's shape) after the python block closed:
    # held until the reply ends, then printed as it came.
    assert shown + held.release() == text


def test_an_answer_written_as_a_call_is_shown_as_read() -> None:
    held, shown = fed('```json\n{"name": "final_answer", "arguments": {"answer": "42"}}\n```', 1)
    assert shown == "" and held.read("42") == "42"
    held, shown = fed('The answer:\n{"final_answer": "42"}', 4)
    assert shown == "The answer:\n" and held.read("The answer:\n\n42") == "\n42"


def test_a_held_line_that_was_no_call_comes_out_whole() -> None:
    held, shown = fed("Result:\n{not json at all}\nmore", 3)
    assert shown == "Result:\n"
    assert held.release() == "{not json at all}\nmore"


def test_a_line_that_only_began_like_a_call_is_printed_once_it_is_not_one() -> None:
    held, shown = fed("<b>bold</b> text\n``not a fence``\n", 1)
    assert shown == "<b>bold</b> text\n``not a fence``\n" and not held.holding
