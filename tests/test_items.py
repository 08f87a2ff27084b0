"""Items round-trip through JSON and show useful reprs."""

from __future__ import annotations

import json

import pytest

from ipyagent.items import (
    Message,
    Reasoning,
    Summary,
    ToolCall,
    ToolResult,
    item_from_dict,
    new_call_id,
)

ITEMS = [
    Message("user", "compute 2**100"),
    Message("assistant", "ok ✓ 🌤️"),
    ToolCall("call_1", "python", {"code": "print(1)"}),
    ToolCall("call_2", "add", {}, raw_arguments='{"a": 1,'),
    ToolResult("call_1", "1", outputs=[{"output_type": "stream", "name": "stdout", "text": "1\n"}],
               execution_count=3),
    ToolResult("call_2", "Error: bad", error=True, name="add", meta={"denied": True}),
    Reasoning("thinking…", details=[{"type": "reasoning.encrypted", "data": "xyz"}]),
    Summary("earlier: x = 1", replaced=[{"type": "message", "role": "user", "content": "hi"}]),
]


@pytest.mark.parametrize("item", ITEMS, ids=lambda i: type(i).__name__)
def test_json_round_trip(item):
    data = json.loads(item.to_json())
    assert data["type"] == item.type
    assert item_from_dict(data) == item


def test_unknown_keys_are_kept_in_meta():
    item = item_from_dict({"type": "message", "role": "user", "content": "x", "extra": 1})
    assert item.meta == {"extra": 1}


def test_unknown_type_is_a_clear_error():
    with pytest.raises(ValueError, match="not an ipyagent item"):
        item_from_dict({"type": "bogus"})


def test_reprs_are_short_and_rich():
    call = ITEMS[2]
    assert repr(call) == "ToolCall('python: print(1)', id='call_1')"
    assert "```python\nprint(1)\n```" in call._repr_markdown_()
    assert "**user**" in ITEMS[0]._repr_markdown_()
    long = Message("user", "word " * 100)
    assert len(repr(long)) < 100
    assert ITEMS[5].label == "tool error"


def test_new_call_ids_are_unique():
    assert len({new_call_id() for _ in range(100)}) == 100


# -- reprs show untrusted text, never live HTML -------------------------------------------
def test_item_and_step_reprs_keep_model_text_inert() -> None:
    from ipyagent.events import Step
    from tests.helpers.inert import ATTACKS, bundle_problems, elements, render

    payload = " ".join(ATTACKS)
    code = "x = 1\n```\n<img src=x onerror=alert(1)>\n```\n"
    call = ToolCall(id="call_<b onclick=x()>", name="<img src=x onerror=alert(1)>",
                    arguments={"code": code})
    python = ToolCall(id="c1", name="python", arguments={"code": code})
    result = ToolResult("c1", f"out\n```\n{payload}")
    items = [Message("assistant", f"**ok**\n\n{payload}"), call, python, result,
             Message("user", payload)]
    for item in items:
        assert bundle_problems({"text/markdown": item._repr_markdown_()}) == [], item
    step = Step(1, text=payload, tool_calls=[python], results=[result], stop_reason="error",
                error=payload)
    assert bundle_problems({"text/markdown": step._repr_markdown_()}) == []
    # The code stays one code block that shows all of it (its ``` does not end the fence).
    shown = render(python._repr_markdown_())
    assert elements(shown).count("pre") == 1 and "&lt;img src=x" in shown
    assert "strong" in elements(render(items[0]._repr_markdown_()))  # formatting kept
