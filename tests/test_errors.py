"""The error tree: infrastructure failures only, each message one line, the URL but never a key."""

from __future__ import annotations

import ipyagent.errors as errors
from ipyagent.errors import (
    ApprovalError,
    ConfigError,
    IpyagentError,
    KernelError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ModelStreamError,
    ModelTimeoutError,
    RateLimitError,
    RequestRejected,
    ServerError,
    TranscriptError,
)


def test_the_tree_is_the_one_the_docstring_draws() -> None:
    parent = {
        ConfigError: IpyagentError, ModelError: IpyagentError, KernelError: IpyagentError,
        ApprovalError: IpyagentError, TranscriptError: IpyagentError,
        ModelConnectionError: ModelError, ModelTimeoutError: ModelError,
        ModelHTTPError: ModelError, ModelStreamError: ModelError, ModelResponseError: ModelError,
        RateLimitError: ModelHTTPError, ServerError: ModelHTTPError, RequestRejected: ModelHTTPError,
    }
    assert {getattr(errors, n) for n in errors.__all__} == {IpyagentError, *parent}
    for cls, base in parent.items():
        assert cls.__mro__[1] is base, cls
        assert cls.__name__ in (errors.__doc__ or "")
    assert issubclass(ConfigError, ValueError)  # a bad setting is also a ValueError
    assert not issubclass(ModelError, ValueError)


def test_messages_carry_the_url_and_status_on_one_line() -> None:
    url = "https://api.example.com/v1/chat/completions"
    assert str(ModelError("boom")) == "boom" and ModelError("boom").url is None
    assert str(ModelConnectionError("could not connect", url=url)) == f"could not connect ({url})"
    rejected = RequestRejected("model 'x' not found", status_code=404, url=url, body={"e": 1})
    assert str(rejected) == f"HTTP 404: model 'x' not found ({url})"
    assert (rejected.status_code, rejected.url, rejected.body) == (404, url, {"e": 1})
    limited = RateLimitError("slow down", retry_after=2.5, status_code=429)
    assert str(limited) == "HTTP 429: slow down" and limited.retry_after == 2.5
    assert RateLimitError("x", status_code=429).retry_after is None
