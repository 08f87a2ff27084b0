"""Token estimates: chars/4 without a tokenizer, overheads per item and image, calibration."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from ipyagent.context.items import Message, ToolCall, ToolResult
from ipyagent.context.tokens import IMAGE_TOKENS, ITEM_OVERHEAD, TokenCounter, item_text


def test_item_text_is_what_the_model_reads() -> None:
    assert item_text(Message("user", "hello")) == "hello"
    assert item_text(ToolCall("c1", "python", {"code": "1+1"})) == 'python{"code": "1+1"}'
    assert item_text(ToolCall("c1", "python", {}, raw_arguments='{"code":"2"}')) == 'python{"code":"2"}'
    assert item_text(ToolResult("c1", "2")) == "2"


def test_chars_per_four_and_per_item_overhead_and_images() -> None:
    counter = TokenCounter(use_tokenizer=False)
    assert counter.method == "chars/4" and repr(counter) == "<TokenCounter chars/4 ×1.00>"
    assert [counter.raw("x" * n) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]
    assert counter.item(Message("user", "x" * 40)) == ITEM_OVERHEAD + 10
    seen = ToolResult("c1", "x" * 40, meta={"images": [{"mime": "image/png", "data": "A"}] * 2})
    assert counter.item(seen) == ITEM_OVERHEAD + 10 + 2 * IMAGE_TOKENS
    assert counter.to_dict() == {"method": "chars/4", "scale": 1.0}


def test_calibration_follows_the_reported_usage_within_bounds() -> None:
    counter = TokenCounter(use_tokenizer=False)
    counter.calibrate(100, 150)
    assert counter.scale == 1.5  # the first sample is taken as it is
    counter.calibrate(100, 250)
    assert counter.scale == 2.0  # then smoothed: half old, half new
    assert counter.scaled(10) == 20
    counter.calibrate(0, 100)
    counter.calibrate(100, 0)
    assert counter.scale == 2.0  # empty samples are ignored
    for _ in range(30):
        counter.calibrate(100, 400)
    assert 3.99 < counter.scale <= 4.0  # never beyond the densest believable count
    low = TokenCounter(use_tokenizer=False)
    for _ in range(20):
        low.calibrate(1000, 500)
    assert low.scale == 0.5


def test_a_usage_no_tokenizer_could_report_is_not_believed(caplog: pytest.LogCaptureFixture) -> None:
    """A server claiming 50 prompt tokens for 40,000 characters (or 40,000 for 4,000)
    must not make the estimate follow it: the context grew to 2.6x the window so."""
    counter = TokenCounter(use_tokenizer=False)
    prompt = counter.raw("x" * 40_000)
    with caplog.at_level(logging.DEBUG, logger="ipyagent.context.tokens"):
        counter.calibrate(prompt, 50)
        counter.calibrate(counter.raw("x" * 4_000), 40_000)
    assert counter.scale == 1.0
    assert "ignoring reported usage for calibration: 50 tokens" in caplog.text
    counter.calibrate(prompt, 10_000 * 3)  # 1.3 characters a token: a dense tokenizer, believed
    assert counter.scale == 3.0


def test_a_refused_prompt_makes_counting_denser_never_sparser() -> None:
    counter = TokenCounter(use_tokenizer=False)
    assert counter.count_denser(1000, 1500) == 1500 / 1000 * 1.1
    assert counter.count_denser(1000, 1000) == 1500 / 1000 * 1.1  # never lowered
    assert abs(counter.count_denser(1000, None) - 1.65 * 1.3) < 1e-9  # not told: ×1.3
    assert counter.count_denser(10, 10_000) == 4.0


def test_concurrent_calibration_keeps_the_scale_in_bounds() -> None:
    counter = TokenCounter(use_tokenizer=False)
    threads = [threading.Thread(target=lambda r=r: [counter.calibrate(100, r) for _ in range(200)])
               for r in (50, 300)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 0.5 <= counter.scale <= 3.0


def test_tool_specs_are_counted_once_per_set_of_tools():
    class Counting(TokenCounter):
        calls = 0

        def raw(self, text):
            Counting.calls += 1
            return super().raw(text)

    counter = Counting(use_tokenizer=False)
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    specs = [{"name": "a", "description": "does a", "parameters": schema}]
    first = counter.specs(specs)
    assert first == TokenCounter(use_tokenizer=False).raw(json.dumps(specs))
    for _ in range(5):  # every step builds new spec dicts for the same tools
        assert counter.specs([dict(s) for s in specs]) == first
    assert Counting.calls == 1
    longer = [{**specs[0], "description": "does a, and much more besides " * 10}]
    assert counter.specs(longer) > first  # another description: counted again
    other = [{**specs[0], "parameters": {**schema, "required": ["x"]}}]
    assert counter.specs(other) > first and Counting.calls == 3  # another schema object
