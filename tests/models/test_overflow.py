"""A request the server refused as over its context window, recognised from its error."""

from __future__ import annotations

import pytest

from ipyagent.errors import ModelConnectionError, RateLimitError, RequestRejected, ServerError
from ipyagent.models.overflow import context_overflow, overflow_hint


@pytest.mark.parametrize("message, counted", [
    ("This model's maximum context length is 8192 tokens. However, your messages resulted in "
     "9013 tokens. Please reduce the length of the messages.", 9013),
    ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
     "(4000 in the messages, 1000 in the completion).", 4000),
    ("prompt is too long: 210000 tokens > 200000 maximum", 210000),
    ("Your input exceeds the context window of this model.", None),
])
def test_how_servers_say_too_long(message, counted):
    found = context_overflow(RequestRejected(message, status_code=400, body={"error": {"message": message}}))
    assert found is not None and found.prompt_tokens == counted
    assert context_overflow(RequestRejected("Invalid 'model': gpt-9", status_code=400)) is None


def test_llama_cpp_counts_from_the_body() -> None:
    body = {"error": {"type": "exceed_context_size_error", "n_prompt_tokens": 5123, "n_ctx": 4096}}
    found = context_overflow(ServerError("request exceeds the available context size", status_code=500,
                                         body=body))
    assert found is not None and found.prompt_tokens == 5123


@pytest.mark.parametrize("message, window", [
    ("This model's maximum context length is 8192 tokens. However, you requested 9000 tokens "
     "(8600 in the messages, 400 in the completion).", 8192),  # llama-cpp-python, OpenAI
    ('{"type": "exceed_context_size_error", "n_prompt_tokens": 5123, "n_ctx": 4096}', 4096),
    ("prompt is too long: 210000 tokens > 200000 maximum", 200000),
    ("The model is loaded with context length of only 4096 tokens", 4096),
    ("Requested tokens (9000) exceed context window of 8192", 8192),
    ("This model's maximum context length is 100 tokens.", None),  # implausible: not believed
    ("This model's maximum context length is 99999999999 tokens.", None),
    ("Your input exceeds the context window of this model.", None),
])
def test_the_window_a_refusal_names(message: str, window: int | None) -> None:
    found = context_overflow(RequestRejected(message, status_code=400))
    assert found is not None and found.window == window


def test_only_statuses_that_can_mean_too_long_count() -> None:
    too_long = "This model's maximum context length is 8192 tokens"
    assert context_overflow(RateLimitError(too_long, status_code=429)) is None
    assert context_overflow(ModelConnectionError(too_long)) is not None  # no status: the text decides
    assert context_overflow(ValueError(too_long)) is None  # not a model error at all


def test_the_hint_says_what_to_set() -> None:
    assert "set Agent.context_window" in overflow_hint(0)
    hint = overflow_hint(8192)
    assert "Agent.context_window=8192" in hint and "num_ctx" in hint
