"""Steps as checkpoints: numbering, the cut a rewind makes, the table's boundaries."""

from __future__ import annotations

import pytest

from ipyagent.context.buffer import Context
from ipyagent.context.items import Message, Reasoning, Summary, ToolCall, ToolResult
from ipyagent.context.steps import copy_items, count_steps, kept, locate_turn, step_marks, step_spans


def py(call_id: str, code: str) -> ToolCall:
    return ToolCall(call_id, "python", {"code": code})


def res(call_id: str, out: str = "") -> ToolResult:
    return ToolResult(call_id, out, name="python")


def conversation() -> list:
    return [
        Message("user", "task"),
        Reasoning("think"), py("a", "x = 1"), res("a"),  # step 1
        py("b", "y = 2"), py("c", "z = 3"), res("b"), res("c"),  # step 2: two calls
        Message("assistant", "done"),  # step 3
        Message("user", "more"),
        Message("assistant", "text first"), py("d", "w = 4"), res("d"),  # step 4
    ]


def test_a_step_is_one_reply_and_the_results_of_its_calls() -> None:
    items = conversation()
    assert [(s.number, s.start, s.end) for s in step_spans(items)] == [
        (1, 1, 4), (2, 4, 8), (3, 8, 9), (4, 10, 13)]
    assert count_steps(items) == 4


def test_kept_cuts_after_step_n_results_and_keeps_the_objects() -> None:
    items = conversation()
    two = kept(items, 2)
    assert two == items[:8] and all(a is b for a, b in zip(two, items))
    assert kept(items, 3) == items[:9]  # the user's next task goes with what follows
    assert kept(items, 4) == items
    assert kept(items, 0) == items[:1]  # the task stays
    for bad in (5, -1):
        with pytest.raises(ValueError, match="step"):
            kept(items, bad)


def test_a_summary_holding_the_cut_is_unfolded_there() -> None:
    items = conversation()
    folded = [Summary("steps 1-2", replaced=[i.to_dict() for i in items[1:8]])] + items[8:]
    folded.insert(0, items[0])
    assert count_steps(folded) == 4
    one = kept(folded, 1)
    assert [type(i).__name__ for i in one] == ["Message", "Reasoning", "ToolCall", "ToolResult"]
    assert one[2].arguments == {"code": "x = 1"}
    assert kept(folded, 3) == folded[:3]  # the whole summary kept as it is
    assert step_marks(folded) == {1: "steps 1–2 (compacted)", 2: "step 3", 4: "step 4"}


def test_locate_turn_by_identity_then_by_equality() -> None:
    items = conversation()
    assert locate_turn(items, items[4]) == 2
    assert locate_turn(copy_items(items), items[10]) == 4  # an equal copy
    assert locate_turn(items, Message("assistant", "never said")) is None


def test_copies_are_equal_and_independent() -> None:
    items = conversation()
    copies = copy_items(items)
    assert copies == items and all(a is not b for a, b in zip(copies, items))
    copies[0].content = "edited"
    assert items[0].content == "task"


def test_the_context_table_shows_step_boundaries() -> None:
    ctx = Context(conversation())
    text = ctx.table().text()
    assert text.count("── step") == 4
    lines = text.splitlines()
    assert lines[lines.index("       ── step 2") + 1].split()[0] == "4"  # before item 4
    assert ctx._repr_html_().count("ipyagent-step") == 4
    assert "──" not in Context([Message("user", "no steps")]).table().text()
