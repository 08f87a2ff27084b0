"""ReplayModel and turns_from_items: a transcript's items cut back into the turns the model sent."""

from __future__ import annotations

import pytest

from ipyagent import Message, Reasoning, ToolCall, ToolResult
from ipyagent.context.items import Summary
from ipyagent.errors import ModelError
from ipyagent.models.base import ModelRequest, ReasoningDelta, TextDelta, ToolCallDelta, Turn, TurnComplete
from ipyagent.models.recorded import RecordedTurn, ReplayModel, turns_from_items


def test_turns_from_items_groups_like_the_wire():
    items = [
        Message("user", "go"),
        Reasoning("think", details={"sig": 1}, meta={"turn": {"usage": {"prompt_tokens": 3},
                                                               "finish_reason": "tool_calls"}}),
        Message("assistant", "calling"),
        ToolCall("a", "python", {"code": "1"}),
        ToolCall("b", "add", {"a": 1}, meta={"original_arguments": {"a": 9}}),
        ToolResult("a", "1"), ToolResult("b", "2"),
        Message("assistant", "first"),
        Message("assistant", "second"),  # text after text: a new turn
        Message("user", "more"),
        Message("assistant", ""),
    ]
    turns = turns_from_items(items)
    assert [(t.start, t.end) for t in turns] == [(1, 5), (7, 8), (8, 9), (10, 11)]
    first = turns[0].turn
    assert first.reasoning.content == "think" and first.reasoning.details == {"sig": 1}
    assert first.text == "calling" and first.usage == {"prompt_tokens": 3}
    assert [c.arguments for c in first.tool_calls] == [{"code": "1"}, {"a": 9}]  # as proposed
    assert [t.turn.finish_reason for t in turns] == ["tool_calls", "stop", "stop", "stop"]


async def test_replay_model_yields_recorded_turns_then_says_so():
    model = ReplayModel.from_items([Message("user", "q"), Message("assistant", "hi"),
                                    ToolCall("c", "python", {"code": "1"})])
    request = ModelRequest(system="", items=[])
    events = [e async for e in model.stream(request)]
    assert isinstance(events[0], TextDelta) and isinstance(events[1], ToolCallDelta)
    turn = events[-1].turn
    assert isinstance(events[-1], TurnComplete) and turn.tool_calls[0].id == "c"
    turn.tool_calls[0].arguments["code"] = "edited"  # the loop may edit; the record must not change
    assert model.turns[0].tool_calls[0].arguments == {"code": "1"}
    with pytest.raises(ModelError, match="all 1 recorded turns"):
        [e async for e in model.stream(request)]


async def test_replay_streams_reasoning_text_then_raw_arguments_and_counts_requests():
    recorded = Turn(text="two calls", reasoning=Reasoning("hmm"), finish_reason="tool_calls",
                    usage={"prompt_tokens": 5},
                    tool_calls=[ToolCall("a", "python", {"code": "1"}, raw_arguments='{"code":"1"}'),
                                ToolCall("b", "add", {"a": 1})])
    model = ReplayModel([RecordedTurn(recorded, 0, 3), Turn(text="done")], name="rec")
    assert repr(model) == "ReplayModel(0 of 2 turns replayed)" and model.remaining == 2
    events = [e async for e in model.stream(ModelRequest(system="", items=[]))]
    assert [type(e) for e in events] == [ReasoningDelta, TextDelta, ToolCallDelta, ToolCallDelta, TurnComplete]
    assert [(e.index, e.id, e.name, e.arguments) for e in events[2:4]] == [
        (0, "a", "python", '{"code":"1"}'), (1, "b", "add", '{"a": 1}')]
    assert events[-1].turn.usage == {"prompt_tokens": 5} and events[-1].turn.usage is not recorded.usage
    assert model.remaining == 1 and model.name == "rec"
    events = [e async for e in model.stream(ModelRequest(system="", items=[]))]
    assert [type(e) for e in events] == [TextDelta, TurnComplete] and model.remaining == 0


def test_from_items_replays_the_turns_a_summary_replaced_too():
    old = [Message("user", "a").to_dict(), Message("assistant", "compacted answer").to_dict()]
    model = ReplayModel.from_items([Summary("a then b", replaced=old), Message("user", "c"),
                                    Message("assistant", "latest")])
    assert [t.text for t in model.turns] == ["compacted answer", "latest"]
