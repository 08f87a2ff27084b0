"""Failures at the HTTP boundary: map them to ``ipyagent.errors``, decide what to retry.

Shared by every model client. Three jobs:

* ``http_error`` turns a non-2xx reply into ``RateLimitError`` / ``ServerError`` /
  ``RequestRejected`` with the provider's own message on ONE line (whatever envelope
  the provider uses), the URL without credentials, and never the API key;
* ``transport_error`` maps httpx's connect / timeout / dropped-connection errors;
* ``RetryPolicy`` says whether a failure is worth another attempt and how long to wait
  (exponential backoff with jitter; a server's ``retry-after`` wins). A server that asks
  for more than ``max_retry_after`` (a daily quota) is not retried at all: the error says
  the wait it asked for, at once, instead of after minutes of certain failures.
  ``with_retries`` also retries a stream that broke mid-reply, after a ``Discarded``.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

import httpx

from .._util.text import one_line
from ..errors import (
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ModelStreamError,
    ModelTimeoutError,
    RateLimitError,
    RequestRejected,
    ServerError,
)

__all__ = [
    "with_retries",
    "void_reason",
    "RetryPolicy",
    "http_error",
    "transport_error",
    "provider_message",
    "parse_retry_after",
    "safe_url",
    "MESSAGE_LIMIT",
    "redact",
]

MESSAGE_LIMIT = 500  # characters of a provider's error message kept


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every non-empty secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def safe_url(url: str | httpx.URL) -> str:
    """The URL without user:password and query string (either may carry a key)."""
    parts = urlsplit(str(url))
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def provider_message(body: Any) -> str:
    """The human message inside a provider's error body, whatever its envelope.

    Knows ``{"error": {"message": ...}}`` (OpenAI, Groq, Anthropic, OpenRouter — with the
    upstream reason in ``error.metadata.raw``), ``{"error": "..."}`` (Ollama, llama.cpp),
    ``{"message": ...}``, ``{"detail": ...}`` (FastAPI servers) and a list of those.
    """
    if isinstance(body, list) and body:
        return provider_message(body[0])
    if isinstance(body, str):
        return body
    if not isinstance(body, dict):
        return ""
    error = body.get("error")
    if isinstance(error, str) and error:
        return error
    if isinstance(error, dict):
        message = _plain_message(error)
        metadata = error.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
        raw = metadata.get("raw")
        if not raw:
            return message or _plain_message(body)
        raw_text = raw if isinstance(raw, str) else json.dumps(raw)
        where = metadata.get("provider_name")
        prefix = f"{message} ({where})" if message and where else message
        return f"{prefix}: {raw_text}" if prefix else raw_text
    return _plain_message(body)


def _plain_message(body: dict[str, Any]) -> str:
    for key in ("message", "msg", "detail", "error_message"):
        value = body.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, list) and value:  # FastAPI validation errors
            return "; ".join(
                str(v.get("msg", v)) if isinstance(v, dict) else str(v) for v in value
            )
    return ""


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or HTTP date)."""
    lower = {k.lower(): v for k, v in headers.items()}
    millis = lower.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = lower.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _parse_body(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return content.decode("utf-8", "replace")


def _scrub(body: Any, secrets: tuple[str | None, ...]) -> Any:
    """``body`` with secrets removed from every string in it."""
    if not any(secrets):
        return body
    if isinstance(body, str):
        return redact(body, secrets)
    try:
        return json.loads(redact(json.dumps(body), secrets))
    except (TypeError, ValueError):
        return body


def http_error(
    response: httpx.Response, *, url: str, secrets: Iterable[str | None] = ()
) -> ModelHTTPError:
    """The error for a non-2xx ``response`` whose body has been read."""
    hidden = tuple(secrets)
    body = _scrub(_parse_body(response.content), hidden)
    message = provider_message(body)
    if not message or (isinstance(body, str) and body.lstrip().startswith("<")):
        message = response.reason_phrase or "error"  # an HTML error page says nothing useful
    invalid = request_validation_summary(message)
    if invalid is not None:  # pydantic's many lines, as one that names the field
        message = invalid
    message = one_line(redact(message, hidden), MESSAGE_LIMIT)
    status = response.status_code
    retry_after = parse_retry_after(response.headers)
    error: ModelHTTPError
    if status == 429:
        return RateLimitError(
            message, retry_after=retry_after, status_code=status, url=url, body=body
        )
    if status >= 500:
        hint = setup_hint(message)
        if hint:
            message = f"{message}; {hint}"
        error = ServerError(message, status_code=status, url=url, body=body)
        # A 503 may say when to come back too; RetryPolicy reads it off any error.
        error.retry_after = retry_after  # type: ignore[attr-defined]
        # A server that is set up without what the request needs fails the same way
        # every time: retrying only makes the user wait for the same line.
        # A request the server's schema refused (llama-cpp-python answers those 500) is
        # refused again, byte for byte, on every retry.
        error.retryable = hint is None and invalid is None  # type: ignore[attr-defined]
    elif status >= 400:
        error = RequestRejected(message, status_code=status, url=url, body=body)
    else:
        error = ModelHTTPError(message, status_code=status, url=url, body=body)
    return error


# 5xx replies that name a server setting, not a passing fault (llama.cpp answers a
# request with tools 500 "tools param requires --jinja flag" when started without it).
_SETUP_FAULTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"--jinja"), "restart llama-server with --jinja (tool calls need its Jinja chat template)"),
    (re.compile(r"does not support tools", re.I), "pick a model that supports tool calls"),
    (re.compile(r"--enable-auto-tool-choice|--tool-call-parser"),
     "start vLLM with --enable-auto-tool-choice --tool-call-parser <parser>"),
)


# pydantic's "N validation errors:" message (FastAPI servers: llama-cpp-python, LiteLLM,
# vLLM) lists one line per error, each a dict repr: ``{'type': …, 'loc': (…), 'msg': …}``.
_VALIDATION_HEAD = re.compile(r"^\s*(\d+) validation errors?\b", re.I)
_VALIDATION_LINE = re.compile(
    r"'type':\s*'(?P<type>[^']*)'.*?'loc':\s*\((?P<loc>[^)]*)\).*?'msg':\s*(?P<q>['\"])(?P<msg>.*?)(?P=q)")


def request_validation_summary(message: str) -> str | None:
    """One line for a request-validation failure, naming the field at fault; else None.

    A message of a union (each chat message is tried as system/user/assistant/tool/…)
    lists a mismatch for every member; the member whose ``role`` matched holds the
    real fault, so its errors are the ones shown.
    """
    head = _VALIDATION_HEAD.match(message)
    if head is None:
        return None
    errors = []
    for line in message.splitlines()[1:]:
        found = _VALIDATION_LINE.search(line)
        if found:
            loc = [part.strip().strip("'\"") for part in found["loc"].split(",") if part.strip()]
            errors.append((found["type"], loc, found["msg"]))
    if not errors:
        return f"the server refused the request as invalid: {one_line(message, 200)}"

    def member(loc: list[str]) -> str | None:
        return next((p for p in loc if p[:1].isupper()), None)

    ruled_out = {member(loc) for kind, loc, _ in errors if kind == "literal_error" and loc[-1:] == ["role"]}
    shown = [e for e in errors if member(e[1]) not in ruled_out] or errors

    def where(loc: list[str]) -> str:
        path = ""
        for part in loc:
            if part == "body" or part[:1].isupper():
                continue
            path += f"[{part}]" if part.isdigit() else f".{part}" if path else part
        return path or "the request"

    first_kind, first_loc, first_msg = shown[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    kind = member(first_loc)
    return (f"the server refused the request as invalid ({head[1]} validation "
            f"error{'s' if head[1] != '1' else ''}): {where(first_loc)}: {first_msg}"
            f"{f' [{kind}]' if kind else ''}{more}")


def setup_hint(message: str) -> str | None:
    """What to change when a 5xx ``message`` names a server setting; None for a passing fault."""
    for pattern, hint in _SETUP_FAULTS:
        if pattern.search(message):
            return hint
    return None


def transport_error(exc: httpx.HTTPError, *, url: str, timeout: float | None = None) -> ModelError:
    """The ``ModelError`` for an httpx failure below HTTP (connect, timeout, drop)."""
    detail = one_line(exc, MESSAGE_LIMIT)
    if isinstance(exc, httpx.ConnectTimeout):
        limit = f" within {timeout:g} s" if timeout else ""
        return ModelTimeoutError(f"could not connect{limit} (ConnectTimeout)", url=url)
    if isinstance(exc, httpx.TimeoutException):
        limit = f" within {timeout:g}s" if timeout else ""
        return ModelTimeoutError(f"no response{limit} ({type(exc).__name__})", url=url)
    if isinstance(exc, httpx.ConnectError):
        return ModelConnectionError(f"could not connect: {detail}", url=url)
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        return ModelConnectionError(f"connection dropped mid-stream: {detail}", url=url)
    if isinstance(exc, httpx.UnsupportedProtocol):  # a setting, not a passing fault
        error = ModelConnectionError(f"the URL needs http:// or https://: {detail}", url=url)
        error.retryable = False  # type: ignore[attr-defined]
        return error
    if isinstance(exc, httpx.DecodingError):
        return ModelResponseError(f"undecodable response: {detail}", url=url)
    return ModelConnectionError(f"{type(exc).__name__}: {detail}", url=url)


# Failures that another attempt may cure. Any other 4xx (bad request, auth, unknown
# model) and errors reported inside a 200 stream would only fail again.
RETRYABLE: tuple[type[ModelError], ...] = (
    RateLimitError,
    ServerError,
    ModelConnectionError,
    ModelTimeoutError,
)


@dataclass
class RetryPolicy:
    """When and how long to wait before another attempt; ``sleep`` is injectable for tests."""

    max_retries: int = 3
    backoff: float = 0.5  # first wait in seconds; doubles each retry
    max_backoff: float = 30.0  # cap on one computed wait
    max_retry_after: float = 60.0  # longest server-requested wait; a longer one: no retry
    jitter: float = 0.5  # each computed wait is shortened by up to this fraction
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, repr=False)

    def should_retry(self, exc: BaseException, attempt: int) -> bool:
        """True when ``exc`` is transient and retry number ``attempt + 1`` is allowed."""
        return (
            attempt < self.max_retries
            and isinstance(exc, RETRYABLE)
            and getattr(exc, "retryable", True)
            and not self.waits_too_long(exc)
        )

    def waits_too_long(self, exc: BaseException) -> bool:
        """True when the server asks for a wait beyond ``max_retry_after``."""
        retry_after = getattr(exc, "retry_after", None)
        return retry_after is not None and float(retry_after) > self.max_retry_after

    def delay(self, attempt: int, exc: BaseException | None = None) -> float:
        """Seconds to wait before retry number ``attempt + 1``."""
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            return min(float(retry_after), self.max_retry_after)
        wait = min(self.backoff * 2**attempt, self.max_backoff)
        return wait * (1 - self.jitter * random.random())


_log = logging.getLogger("ipyagent.models")


async def with_retries(
    policy: RetryPolicy, attempt: Callable[[], AsyncIterator[Any]]
) -> AsyncIterator[Any]:
    """Run ``attempt()`` and yield its events, retrying transient failures.

    A stream that breaks after deltas reached the consumer (a dropped connection, a stall)
    is retried too: nothing was executed (calls run only once the turn is complete), so
    sending the request again is safe. Those deltas are declared void first with a
    ``Discarded`` event, so displays can mark them and nobody builds a turn from them. Each
    retry is announced with a ``Retrying`` event. Never after a ``TurnComplete``.
    """
    from .base import Discarded, ReasoningDelta, Retrying, TextDelta, ToolCallDelta, TurnComplete

    n = 0
    while True:
        shown = complete = False  # reply deltas / a whole turn reached the consumer
        try:
            async for event in attempt():
                shown = shown or isinstance(event, (TextDelta, ReasoningDelta, ToolCallDelta))
                complete = complete or isinstance(event, TurnComplete)
                yield event
            return
        except ModelError as exc:
            if complete:
                raise  # the turn was delivered: a second one would be a second reply
            if not shown and policy.waits_too_long(exc):
                asked = float(getattr(exc, "retry_after"))  # noqa: B009 - set on some ModelErrors only
                _add_note(exc, f"the server asks to wait {_duration(asked)}, "
                               f"more than max_retry_after={policy.max_retry_after:g} s, so no retry")
            retry = policy.should_retry(exc, n)
            partial = getattr(exc, "turn", None)
            usage = getattr(partial, "usage", None) if retry else None  # else billed off exc.turn
            if shown or usage:
                yield Discarded(void_reason(exc), retrying=retry, usage=usage)
            if not retry:
                raise
            delay = policy.delay(n, exc)
            # INFO, not WARNING: the Retrying event below is how the user hears of it.
            _log.info("%s; retry %d of %d in %.2fs", exc, n + 1, policy.max_retries, delay)
            yield Retrying(n + 1, policy.max_retries, delay, str(exc))
            await policy.sleep(delay)
            n += 1


def void_reason(exc: ModelError) -> str:
    """Why a reply that had started streaming is void, in a few words (for its marker)."""
    if isinstance(exc, ModelConnectionError):
        return "the connection dropped"
    if isinstance(exc, ModelTimeoutError):
        limit = getattr(exc, "limit", "")
        return {"idle": "the reply stalled", "total": "out of time (Agent.request_timeout)"}.get(
            limit, "the reply timed out")
    if isinstance(exc, ModelStreamError):
        return "the server reported an error"
    return "the reply could not be read"


def _duration(seconds: float) -> str:
    """``3600 s (about 1 h)``: the exact figure the server sent, and a readable one."""
    exact = f"{round(seconds)} s"
    if seconds >= 3600:
        return f"{exact} (about {seconds / 3600:.3g} h)"
    return f"{exact} (about {seconds / 60:.0f} min)" if seconds >= 120 else exact


def _add_note(exc: ModelError, note: str) -> None:
    """Put ``note`` into ``exc``'s one-line message, before the ``(url)`` that ends it."""
    text = str(exc)
    tail = f" ({exc.url})" if exc.url and text.endswith(f" ({exc.url})") else ""
    exc.args = (f"{text[: len(text) - len(tail)]}; {note}{tail}",)
