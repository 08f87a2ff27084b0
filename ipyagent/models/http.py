"""The HTTP half every streaming model client shares: auth, POST, retries, event framing.

A wire-protocol client subclasses ``StreamingHTTPModel``, names its endpoint ``path`` and
provides ``payload(request)`` and ``new_assembler()``; the base class POSTs the payload,
holds every wait to the request's time limits (``timeouts.py``: first token, idle between
events, total), maps failures through ``retry.py`` (the same rules as the Chat Completions
client), retries transient ones — also a stream that breaks mid-reply, whose deltas are
then ``Discarded`` — frames the reply with ``sse.py`` and feeds each JSON event to the
assembler. A JSON body where a stream was asked for
(a server that ignored ``stream: true``) goes to the assembler whole; an HTML page (a
``base_url`` that points at a web UI) is one error line that says so. A reply that says
there is no API at this URL (404/405/501, an error page) ends at once, without retries,
with the fix to try (``endpoint_hint.py``). A stream that ends
without a finish reason after some output yields a warning ``Notice`` before its turn.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import secrets
from typing import Any, AsyncIterator, Callable, Protocol, TypeVar

import httpx

from .._util.text import one_line, repair_surrogates
from ..context.items import Item
from ..errors import ModelError, ModelHTTPError, ModelResponseError, ModelStreamError
from .base import ModelEvent, ModelRequest, ReasoningDelta, TextDelta, ToolCallDelta, Turn, TurnComplete
from .endpoint_hint import endpoint_hint, says_no_api_here
from .retry import (
    MESSAGE_LIMIT,
    RetryPolicy,
    _add_note,
    http_error,
    provider_message,
    redact,
    safe_url,
    transport_error,
    with_retries,
)
from .sse import aiter_events, is_event_stream, sse_response
from .timeouts import ReplyClock, Timeouts
from .wire_cache import WireCache, WireList, dumps

__all__ = ["HeaderAuth", "EnvKey", "ProviderError", "Assembler", "StreamingHTTPModel", "encode_json"]

log = logging.getLogger("ipyagent.models")

_DELTAS = (TextDelta, ReasoningDelta, ToolCallDelta)  # the reply itself, not bookkeeping
_P = TypeVar("_P")  # a protocol's part of a request for one item (WireCache)


def encode_json(body: Any) -> bytes:
    """``body`` as compact UTF-8 JSON that cannot fail on a lone UTF-16 surrogate.

    Streams from JS-based servers can cut an emoji's ``\\ud83d\\ude00`` escape pair in two;
    a half that was never rejoined would make every later request (the conversation holds
    it) fail in the UTF-8 encoder. Halves that sit side by side are joined into their
    character; a lone one becomes U+FFFD. Other non-ASCII text stays real UTF-8.
    """
    text = _encode(body)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return repair_surrogates(text).encode("utf-8")


def _encode(body: Any) -> str:
    """``json.dumps`` of ``body``, each ``WireList`` in it joined from its cached texts."""
    if (type(body) is not dict or not WireCache.enabled
            or not any(type(v) is WireList for v in body.values())):
        return dumps(body)
    # A random mark per body: untrusted text in the body cannot forge one.
    nonce = secrets.token_hex(8)
    names = {id(v): json.dumps(f"ipyagent-wire-{nonce}-{i}")
             for i, v in enumerate(v for v in body.values() if type(v) is WireList)}
    text = dumps({k: json.loads(names[id(v)]) if type(v) is WireList else v for k, v in body.items()})
    for value in body.values():
        if type(value) is WireList:
            mark = names[id(value)]
            before, found, after = text.partition(mark)
            if not found or mark in after:
                return dumps(body)
            text = before + value.encoded() + after
    return text


class EnvKey:
    """The key, read from an environment variable at each request; holds only the name.

    ``check`` (e.g. ``providers.check_key``) may raise a one-line error for a missing key.
    """

    def __init__(self, name: str, check: Callable[[str | None], None] | None = None) -> None:
        self.name = name
        self.check = check

    def __call__(self) -> str | None:
        key = os.environ.get(self.name) or None
        if self.check is not None:
            self.check(key)
        return key

    def __repr__(self) -> str:
        return f"EnvKey({self.name!r})"


def _fixed(key: str | None) -> Callable[[], str | None]:
    # A closure, so an explicit key is in no attribute, vars(), repr or pickle of the client.
    return lambda: key


class HeaderAuth(httpx.Auth):
    """Puts the key in one header per request (``Authorization: Bearer …``, ``x-api-key``).

    Made anew for each request and dropped after it: it is never kept on the client.
    """

    def __init__(self, key: str, header: str = "Authorization", prefix: str = "Bearer ") -> None:
        self._key = key
        self._header = header
        self._prefix = prefix

    def auth_flow(self, request: httpx.Request):  # type: ignore[no-untyped-def]
        request.headers[self._header] = f"{self._prefix}{self._key}"
        yield request

    def __repr__(self) -> str:
        return f"HeaderAuth({self._header}: ***)"


class ProviderError(Exception):
    """Raised by an assembler for an error the provider reported inside a 200 reply."""

    def __init__(self, error: Any) -> None:
        super().__init__(error)
        self.error = error


class Assembler(Protocol):
    """Builds one ``Turn`` from a protocol's events."""

    @property
    def events_seen(self) -> int:
        """Events taken so far (read only: an attribute or a property both fit)."""
        ...

    def feed(self, event: str | None, data: dict[str, Any]) -> list[ModelEvent]:
        """Take one SSE event (name, parsed JSON); raise ``ProviderError`` on an error event."""
        ...

    def feed_body(self, body: dict[str, Any]) -> list[ModelEvent]:
        """Take a whole non-streamed reply body."""
        ...

    def turn(self) -> Turn:
        """The turn assembled so far."""
        ...


class StreamingHTTPModel:
    """Base of the clients that POST JSON and read an SSE reply, with retries."""

    path = ""  # the endpoint, relative to base_url
    default_base_url = ""

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | Callable[[], str | None] | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        timeouts: Timeouts | None = None,
        timeout: float | None = None,
        max_retries: int = 3,
        backoff: float = 0.5,
        extra_headers: dict[str, str] | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        self.name = model
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        # ``timeout`` is the old single limit; like ``Agent.timeout`` it is the idle one now.
        limits = timeouts or Timeouts()
        self.timeouts = limits if timeout is None else dataclasses.replace(limits, idle=timeout)
        self.retry = RetryPolicy(max_retries=max_retries, backoff=backoff)
        self.extra_headers = dict(extra_headers or {})
        # Provider-specific request fields ipyagent has no setting for (e.g. Anthropic's
        # ``thinking``, OpenAI's ``reasoning``); merged into every payload last.
        self.extra_body = dict(extra_body or {})
        # Where the key comes from at each request (an ``EnvKey``, or a closure over an
        # explicit key): the client keeps no copy of an environment key.
        self._key_source = api_key if callable(api_key) else _fixed(api_key)
        self._client = client
        self._owns_client = client is None

    # -- what a protocol provides

    def make_auth(self, key: str) -> httpx.Auth:
        """How the key travels; Bearer unless a protocol says otherwise."""
        return HeaderAuth(key)

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for ``request``."""
        raise NotImplementedError

    def new_assembler(self) -> Assembler:
        """A fresh assembler for one reply."""
        raise NotImplementedError

    def wire_cache(self, build: Callable[[Item], _P]) -> WireCache[_P]:
        """This client's cache of each item's part of a request (``build`` makes one)."""
        cache = self.__dict__.get("_wire_cache")
        if cache is None or cache.build is not build:
            cache = self.__dict__["_wire_cache"] = WireCache(build)
        return cache

    # -- shared machinery

    @property
    def key_env(self) -> str | None:
        """The environment variable the key is read from at each request (None: no variable)."""
        return self._key_source.name if isinstance(self._key_source, EnvKey) else None

    @property
    def url(self) -> str:
        """The endpoint URL."""
        return f"{self.base_url}/{self.path}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, base_url={safe_url(self.base_url)!r})"

    async def __aenter__(self) -> StreamingHTTPModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this model created it."""
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:  # created lazily, inside the loop that will use it
            self._client = httpx.AsyncClient()
        return self._client

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Yield events for one reply, then one ``TurnComplete``; raise ``ModelError``.

        Transient failures are retried (``with_retries``); a stream that breaks after
        deltas were yielded yields ``Discarded`` before the retry. ``Timeouts.total``
        bounds all attempts together.
        """
        body = {**self.payload(request), **self.extra_body}
        deadline = self.timeouts.deadline()
        async for event in with_retries(self.retry, lambda: self._attempt(body, deadline)):
            yield event

    async def _attempt(self, body: dict[str, Any], deadline: float | None = None) -> AsyncIterator[ModelEvent]:
        url = safe_url(self.url)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream", **self.extra_headers}
        log.debug("POST %s model=%s", url, self.name)
        content = encode_json(body)  # not httpx's json=: it raises on a lone surrogate
        key = self._key_source()  # now, per request: a key changed in the environment is used
        auth = self.make_auth(key) if key else None
        clock = ReplyClock(self.timeouts, deadline, url)
        assembler = self.new_assembler()
        connect = self.timeouts.connect()
        http = self._http()
        # Only connecting has an httpx limit: every other wait is the clock's, which counts
        # events, not bytes (a keep-alive every second would reset a read timeout forever).
        sent = http.build_request("POST", self.url, content=content, headers=headers,
                                  timeout=httpx.Timeout(None, connect=connect))
        try:
            response = await clock.wait(http.send(sent, auth=auth, stream=True))
            try:
                if not response.is_success:
                    await clock.wait(response.aread())
                    raise self._status_error(response, url, key)
                async for event in self._events(response, url, key, assembler, clock):
                    yield event
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            error = transport_error(exc, url=url, timeout=connect)
            error.turn = assembler.turn()  # type: ignore[attr-defined]
            raise error from exc
        except ModelError as exc:
            if getattr(exc, "turn", None) is None:  # what came before a timeout still counts
                exc.turn = assembler.turn()  # type: ignore[attr-defined]
            raise

    async def _events(self, response: httpx.Response, url: str, key: str | None,
                      assembler: Assembler, clock: ReplyClock) -> AsyncIterator[ModelEvent]:
        sniffed: bytes | None = None  # the body, when it was not announced as a stream
        try:
            if not is_event_stream(response):
                sniffed = await clock.wait(response.aread())
                if "json" in response.headers.get("content-type", "") or sniffed.lstrip()[:1] == b"{":
                    for event in self._whole(sniffed, assembler, url, key):
                        yield event
                    return
                if _is_html(response, sniffed):
                    raise _html_error(sniffed, url, key, self._hint(200, html=True))
                response = sse_response(sniffed)  # SSE under another content type: sniffed
            async for event in self._stream_events(response, assembler, url, clock):
                yield event
        except ProviderError as exc:
            raise self._stream_error(exc.error, assembler.turn(), url, key) from None
        if not assembler.events_seen:
            raise ModelResponseError(redact(_no_events(sniffed), [key]), url=url)
        turn = assembler.turn()
        notice = _cut_off_notice(turn, url)
        if notice is not None:
            yield notice  # a Notice: the agent shows any event it does not consume itself
        yield TurnComplete(turn)

    async def _stream_events(
        self, response: httpx.Response, assembler: Assembler, url: str, clock: ReplyClock
    ) -> AsyncIterator[ModelEvent]:
        """Feed each SSE event's JSON to ``assembler``; stop at ``[DONE]``.

        Each event is waited for within ``clock``'s limit; an event with data resets the
        idle limit, the first one the assembler turns into a delta meets the first-token one.
        """
        try:
            async for sse in clock.each(aiter_events(response)):
                data = sse.data.strip()
                if not data:
                    continue
                clock.heard()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except ValueError:
                    if sse.event == "error":
                        raise ProviderError(data) from None
                    raise ModelResponseError(f"unparseable stream event: {one_line(data, 120)}",
                                             url=url) from None
                if isinstance(chunk, dict):
                    events = assembler.feed(sse.event, chunk)
                    if any(isinstance(e, _DELTAS) for e in events):
                        clock.started()
                    for event in events:
                        yield event
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            if not assembler.turn().finish_reason:
                raise  # a reply cut short: ``_attempt`` makes it a dropped connection (retried)
            # The reply said it was finished and only the end of the body was lost (a server
            # or proxy that closes early): a whole reply, not one to discard and ask again.
            log.debug("%s: the connection dropped after the reply finished: %s", url, exc)

    def _whole(self, content: bytes, assembler: Assembler, url: str,
               key: str | None = None) -> list[ModelEvent]:
        """Events of a non-streamed JSON body."""
        try:
            body = json.loads(content)
        except ValueError:
            text = one_line(content.decode("utf-8", "replace"), 120)
            raise ModelResponseError(f"unparseable response: {text}", url=url) from None
        if not isinstance(body, dict):
            raise ModelResponseError("the response is not a JSON object", url=url)
        if body.get("error") or body.get("type") == "error":
            raise self._stream_error(body.get("error", body), assembler.turn(), url, key)
        try:
            events = assembler.feed_body(body)
        except ProviderError as exc:
            raise self._stream_error(exc.error, assembler.turn(), url, key) from None
        except (ValueError, TypeError, KeyError) as exc:
            raise ModelResponseError(f"unexpected response: {one_line(exc, 120)}", url=url) from None
        return [*events, TurnComplete(assembler.turn())]

    def _hint(self, status: int, *, html: bool) -> str:
        """The fix to try when this client's endpoint is not there (``endpoint_hint``)."""
        return endpoint_hint(safe_url(self.base_url), self.path, status=status, html=html)

    def _status_error(self, response: httpx.Response, url: str, key: str | None) -> ModelHTTPError:
        """The error for a non-2xx reply; one that says "no API here" ends at once, with its fix.

        A 404/405/501 or an error page is the same at every attempt (a wrong base_url, API
        or server), so retrying it would only make the user wait for the same line.
        """
        error = http_error(response, url=url, secrets=[key])
        html = _is_html(response, response.content)
        if says_no_api_here(error.status_code, provider_message(error.body), html=html):
            _add_note(error, self._hint(error.status_code, html=html))
            error.retryable = False  # type: ignore[attr-defined]
        return error

    def _stream_error(self, error: Any, turn: Turn, url: str, key: str | None = None) -> ModelStreamError:
        """A ``ModelStreamError`` with the provider's message, ``.body`` and the ``.turn`` so far."""
        message = provider_message({"error": error}) or "error"
        code = (error.get("code") or error.get("type")) if isinstance(error, dict) else None
        text = one_line(redact(message, [key]), MESSAGE_LIMIT)
        if says_no_api_here(200, text, html=False):  # LM Studio's "Unexpected endpoint" (HTTP 200)
            text = f"{text}; {self._hint(200, html=False)}"
        exc = ModelStreamError(f"{text} [{code}]" if code not in (None, "", "error") else text, url=url)
        exc.body = error  # type: ignore[attr-defined]
        # Usage and partial output of the failed turn still count (budgets, display).
        exc.turn = turn  # type: ignore[attr-defined]
        return exc


def _is_html(response: httpx.Response, content: bytes) -> bool:
    """True for a web page (a UI or a proxy's page answered where the API should be)."""
    if "html" in response.headers.get("content-type", "").lower():
        return True
    return content.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html"))


def _html_error(content: bytes, url: str, key: str | None, hint: str) -> ModelResponseError:
    """One line that says a page came back and what to try (``hint``), with the page's title."""
    found = re.search(rb"<title[^>]*>(.*?)</title>", content[:4096], re.I | re.S)
    title = one_line(redact(found.group(1).decode("utf-8", "replace"), [key]), 60) if found else ""
    page = f"an HTML page ({title!r})" if title else "an HTML page"
    error = ModelResponseError(f"got {page} from {url}, not an API response — {hint}")
    error.url = url  # already in the message, where it reads best
    return error


def _no_events(sniffed: bytes | None) -> str:
    """Why a reply gave nothing; quotes a body that was not announced as a stream."""
    text = one_line(sniffed.decode("utf-8", "replace"), 120) if sniffed else ""
    if text:
        return f"the reply is neither an event stream nor JSON: {text}"
    return "the stream ended before any event"


def _cut_off_notice(turn: Turn, url: str) -> Any:
    """A warning ``Notice`` when output came but no finish reason: the reply may be cut off.

    A proxy's timeout or a server that dies mid-reply can close the stream cleanly; the
    turn would otherwise end the run ``done`` with a truncated answer, silently.
    """
    if turn.finish_reason or not (turn.text or turn.tool_calls or turn.reasoning):
        return None
    from ..context.events import Notice  # lazily: events imports the models package

    parts = [f"{len(turn.text)} characters"] if turn.text else []
    if turn.tool_calls:
        parts.append(f"{len(turn.tool_calls)} tool call(s)")
    what = " and ".join(parts) or "reasoning only"
    return Notice(f"the stream from {url} ended without a finish reason after {what}: "
                  "the reply may be cut off", "warning")
