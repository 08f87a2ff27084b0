"""``<think>…</think>`` in a reply's text is routed to reasoning, however the stream cuts it."""

from __future__ import annotations

import pytest

from ipyagent.models.base import ReasoningDelta, TextDelta
from ipyagent.models.think import ThinkSplitter, partial_suffix, split_unopened_think

REPLY = "  <think>Let me add: 2+2.</think>\n\nIt is 4."


def split(chunks: list[str]) -> tuple[str, str]:
    """All reasoning and all text released for ``chunks``, the flush included."""
    splitter = ThinkSplitter()
    thought = said = ""
    for chunk in chunks:
        r, t = splitter.feed(chunk)
        thought, said = thought + r, said + t
    r, t = splitter.flush()
    return thought + r, said + t


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, len(REPLY)])
def test_any_cut_gives_the_same_split(size: int) -> None:
    chunks = [REPLY[i:i + size] for i in range(0, len(REPLY), size)]
    thought, said = split(chunks)
    assert thought == "Let me add: 2+2."
    # Only the line ends that arrive with the close tag are dropped; later ones are text.
    assert said.lstrip("\n") == "It is 4."


def test_line_ends_that_arrive_with_the_close_tag_are_dropped() -> None:
    assert split(["<think>plan</think>\r\n\nanswer"]) == ("plan", "answer")


def test_a_tag_split_across_chunks_is_held_back_not_shown() -> None:
    splitter = ThinkSplitter()
    assert splitter.feed("<thi") == ("", "")  # could still become <think>
    assert splitter.feed("nk>plan</th") == ("plan", "")  # "</th" could still close it
    assert splitter.feed("ink>answer") == ("", "answer")


def test_text_without_a_leading_think_is_text_at_once() -> None:
    splitter = ThinkSplitter()
    assert splitter.feed("Hello <think>not leading</think>") == ("", "Hello <think>not leading</think>")
    assert splitter.feed(" more") == ("", " more")


def test_a_stream_ending_inside_think_flushes_as_reasoning() -> None:
    assert split(["<think>never closed"]) == ("never closed", "")
    assert split(["<thi"]) == ("", "<thi")  # ended before it was a tag: it was text


def test_route_appends_and_makes_events() -> None:
    splitter, reasoning, text = ThinkSplitter(), [], []
    events = splitter.route("<think>a</think>b", reasoning, text)
    assert events == [ReasoningDelta("a"), TextDelta("b")]
    assert (reasoning, text) == (["a"], ["b"])
    assert splitter.route("", reasoning, text) == []


def test_partial_suffix() -> None:
    assert partial_suffix("abc</thi", "</think>") == 5
    assert partial_suffix("abc<", "</think>") == 1
    assert partial_suffix("abc", "</think>") == 0
    assert partial_suffix("</think>", "</think>") == 0  # a whole tag is no partial one


def test_a_reply_that_starts_inside_think_is_split_at_its_close() -> None:
    assert split_unopened_think("", "the plan</think>\nthe answer") == ("the plan", "the answer")
    assert split_unopened_think("earlier ", "x</think>y") == ("earlier x", "y")
    assert split_unopened_think("", "<think>a</think>b") == ("", "<think>a</think>b")
    assert split_unopened_think("", "plain") == ("", "plain")
