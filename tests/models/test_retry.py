"""The HTTP boundary's failures: which error each becomes, what is retried, how long to wait."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from ipyagent.errors import (
    ModelConnectionError,
    ModelResponseError,
    ModelStreamError,
    ModelTimeoutError,
    RateLimitError,
    RequestRejected,
    ServerError,
)
from ipyagent.models.base import Discarded, Retrying, TextDelta, Turn, TurnComplete
from ipyagent.models.retry import (
    RetryPolicy,
    http_error,
    parse_retry_after,
    provider_message,
    safe_url,
    transport_error,
    with_retries,
)


def test_parse_retry_after() -> None:
    assert parse_retry_after({"Retry-After": "7"}) == 7.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0
    assert parse_retry_after({"retry-after": "soon"}) is None and parse_retry_after({}) is None


def test_provider_message_envelopes() -> None:
    assert provider_message({"error": {"message": "m", "type": "t"}}) == "m"
    assert provider_message({"error": "model 'x' not found"}) == "model 'x' not found"
    assert provider_message({"message": "plain"}) == "plain"
    assert provider_message({"detail": [{"loc": ["body"], "msg": "field required"}]}) == "field required"
    assert provider_message([{"error": {"message": "google-style list"}}]) == "google-style list"
    assert provider_message({"error": {"message": "Provider returned error", "metadata": {"raw": "upstream says no"}}}) == "Provider returned error: upstream says no"


def test_retry_policy() -> None:
    policy = RetryPolicy(max_retries=2, backoff=1, max_backoff=3, jitter=0)
    assert [policy.delay(n) for n in range(4)] == [1, 2, 3, 3]
    rate_limited = RateLimitError("x", retry_after=4.0, status_code=429)
    assert policy.delay(0, rate_limited) == 4.0
    assert policy.should_retry(rate_limited, 1) and not policy.should_retry(rate_limited, 2)
    assert not policy.should_retry(RequestRejected("x", status_code=400), 0)
    assert not policy.should_retry(ModelStreamError("x"), 0)
    jittered = RetryPolicy(backoff=1, jitter=0.5)
    assert all(0.5 <= jittered.delay(0) <= 1 for _ in range(50))


def test_safe_url() -> None:
    assert safe_url("https://u:p@host:8443/v1/chat?key=s#f") == "https://host:8443/v1/chat"


URL = "http://127.0.0.1:9/v1/chat/completions"


def reply(status: int, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, content=body, headers=headers or {})


def test_each_status_becomes_its_error_on_one_line_without_the_key() -> None:
    key = "sk-test-0123456789"
    limited = http_error(reply(429, b'{"error": {"message": "slow\\n down"}}', {"retry-after": "3"}),
                         url=URL)
    assert isinstance(limited, RateLimitError) and limited.retry_after == 3.0
    assert str(limited) == f"HTTP 429: slow down ({URL})"
    rejected = http_error(reply(401, f'{{"error": "bad key {key}"}}'.encode()), url=URL, secrets=[key])
    assert isinstance(rejected, RequestRejected) and rejected.status_code == 401
    assert key not in str(rejected) and key not in str(rejected.body) and "***" in str(rejected)
    page = http_error(reply(502, b"<html><body>Bad gateway</body></html>"), url=URL)
    assert isinstance(page, ServerError) and str(page) == f"HTTP 502: Bad Gateway ({URL})"
    assert RetryPolicy().should_retry(page, 0)


def test_a_5xx_naming_a_server_setting_says_what_to_change_and_is_not_retried() -> None:
    error = http_error(reply(500, b'{"error": "tools param requires --jinja flag"}'), url=URL)
    assert isinstance(error, ServerError) and "restart llama-server with --jinja" in str(error)
    assert not RetryPolicy().should_retry(error, 0)


def test_a_request_validation_failure_is_permanent_and_names_the_field_on_one_line() -> None:
    """llama-cpp-python answers a request its pydantic model refuses with 500 and one line
    per union member; another attempt is refused the same way."""
    lines = [
        "{'type': 'literal_error', 'loc': ('body', 'messages', 2, 'ChatCompletionRequestUserMessage', 'role'), "
        "'msg': \"Input should be 'user'\", 'input': 'assistant'}",
        "{'type': 'string_type', 'loc': ('body', 'messages', 2, 'ChatCompletionRequestAssistantMessage', "
        "'content'), 'msg': 'Input should be a valid string', 'input': None}",
        "{'type': 'missing', 'loc': ('body', 'messages', 2, 'ChatCompletionRequestToolMessage', 'tool_call_id'), "
        "'msg': 'Field required', 'input': {}}",
        "{'type': 'literal_error', 'loc': ('body', 'messages', 2, 'ChatCompletionRequestToolMessage', 'role'), "
        "'msg': \"Input should be 'tool'\", 'input': 'assistant'}",
    ]
    message = "4 validation errors:\n  " + "\n  ".join(lines)
    body = json.dumps({"error": {"message": message, "type": "internal_server_error"}}).encode()
    error = http_error(reply(500, body), url=URL)
    assert isinstance(error, ServerError)
    assert str(error) == (
        "HTTP 500: the server refused the request as invalid (4 validation errors): "
        "messages[2].content: Input should be a valid string [ChatCompletionRequestAssistantMessage] "
        f"(and 3 more) ({URL})")
    assert not RetryPolicy().should_retry(error, 0)
    one = http_error(reply(500, json.dumps({"error": "1 validation error:\n  {'type': 'int_parsing', "
                                            "'loc': ('body', 'max_tokens'), 'msg': 'Input should be a "
                                            "valid integer'}"}).encode()), url=URL)
    assert "(1 validation error): max_tokens: Input should be a valid integer (" in str(one)
    assert not RetryPolicy().should_retry(one, 0)
    # A passing fault that merely mentions validation is still retried.
    busy = http_error(reply(503, b'{"error": "validation errors queue is full"}'), url=URL)
    assert RetryPolicy().should_retry(busy, 0)


def test_transport_failures_map_to_model_errors() -> None:
    request = httpx.Request("POST", URL)
    timeout = transport_error(httpx.ReadTimeout("slow", request=request), url=URL, timeout=5)
    assert isinstance(timeout, ModelTimeoutError) and "no response within 5s (ReadTimeout)" in str(timeout)
    unreachable = transport_error(httpx.ConnectTimeout("", request=request), url=URL, timeout=30)
    assert str(unreachable).startswith("could not connect within 30 s (ConnectTimeout)")
    assert RetryPolicy().should_retry(unreachable, 0)
    refused = transport_error(httpx.ConnectError("refused", request=request), url=URL)
    assert isinstance(refused, ModelConnectionError) and str(refused).startswith("could not connect: refused")
    dropped = transport_error(httpx.RemoteProtocolError("eof", request=request), url=URL)
    assert "connection dropped mid-stream" in str(dropped) and RetryPolicy().should_retry(dropped, 0)
    scheme = transport_error(httpx.UnsupportedProtocol("ftp"), url=URL)
    assert "needs http:// or https://" in str(scheme) and not RetryPolicy().should_retry(scheme, 0)
    assert isinstance(transport_error(httpx.DecodingError("gz"), url=URL), ModelResponseError)


def collect_retries(policy: RetryPolicy, attempts: list) -> tuple[list, list[float]]:
    """Run ``with_retries`` over scripted attempts: each an exception, or events to yield."""
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    policy.sleep = sleep
    script = iter(attempts)

    async def attempt():
        step = next(script)
        for event in step[:-1] if isinstance(step, list) else []:
            yield event
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, list) and isinstance(step[-1], BaseException):
            raise step[-1]
        if isinstance(step, list):
            yield step[-1]

    async def run() -> list:
        return [event async for event in with_retries(policy, attempt)]

    return asyncio.run(run()), slept


def test_with_retries_announces_each_retry_and_waits_the_backoff() -> None:
    policy = RetryPolicy(max_retries=3, backoff=1, jitter=0)
    events, slept = collect_retries(policy, [ServerError("down", status_code=503),
                                             ModelConnectionError("reset"), ["a", "b"]])
    assert [e for e in events if not isinstance(e, Retrying)] == ["a", "b"]
    retries = [e for e in events if isinstance(e, Retrying)]
    assert [(r.attempt, r.max_retries, r.delay) for r in retries] == [(1, 3, 1.0), (2, 3, 2.0)]
    assert slept == [1.0, 2.0]


def test_a_stream_broken_after_deltas_is_discarded_then_asked_again() -> None:
    dropped = ModelConnectionError("connection dropped mid-stream: reset")
    dropped.turn = Turn(text="Half", usage={"prompt_tokens": 9})  # type: ignore[attr-defined]
    events, slept = collect_retries(RetryPolicy(backoff=1, jitter=0),
                                    [[TextDelta("Half"), dropped], [TextDelta("Whole"), "done"]])
    assert [type(e).__name__ for e in events] == ["TextDelta", "Discarded", "Retrying", "TextDelta", "str"]
    assert events[1] == Discarded("the connection dropped", retrying=True, usage={"prompt_tokens": 9})
    assert slept == [1.0]


def test_with_retries_gives_up_after_max_and_never_retries_a_permanent_failure() -> None:
    with pytest.raises(ServerError):
        collect_retries(RetryPolicy(max_retries=1, jitter=0),
                        [ServerError("a", status_code=500), ServerError("b", status_code=500)])
    with pytest.raises(ModelStreamError):
        collect_retries(RetryPolicy(), [ModelStreamError("in the stream"), ["never"]])


def test_never_after_a_turn_complete() -> None:
    late = [TurnComplete(Turn(text="whole")), ModelConnectionError("dropped while closing")]
    with pytest.raises(ModelConnectionError):
        collect_retries(RetryPolicy(jitter=0), [late, ["a second reply"]])


def test_a_final_failure_after_deltas_still_marks_them_void() -> None:
    seen: list = []

    async def attempt():
        yield TextDelta("Half")
        raise ModelConnectionError("dropped")

    async def run() -> None:
        async for event in with_retries(RetryPolicy(max_retries=0), attempt):
            seen.append(event)

    with pytest.raises(ModelConnectionError):
        asyncio.run(run())
    assert seen == [TextDelta("Half"), Discarded("the connection dropped", retrying=False)]
    assert seen[1].line == "discarded: the connection dropped"


def test_a_wait_beyond_max_retry_after_fails_at_once_and_says_why() -> None:
    quota = RateLimitError("daily quota", retry_after=7200.0, status_code=429, url=URL)
    with pytest.raises(RateLimitError) as raised:
        collect_retries(RetryPolicy(max_retry_after=60), [quota, ["never"]])
    message = str(raised.value)
    assert "the server asks to wait 7200 s (about 2 h), more than max_retry_after=60 s, so no retry" in message
    assert message.endswith(f" ({URL})") and "\n" not in message
