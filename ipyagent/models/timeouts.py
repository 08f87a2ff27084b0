"""The time limits of one model request, and the clock that holds a reply to them.

httpx's read timeout is an idle limit on *bytes*: a server that sends an SSE keep-alive
comment every second, or one byte every two seconds, never trips it, while a CPU model
that reads a long prompt for minutes before its first token trips a short one. So these
limits count the reply's *events* (a parsed SSE event with data, or a whole JSON body);
comments, ``ping`` events and partial lines are not events:

* ``first_token``: from sending the request to the reply's first token (text, reasoning
  or a tool call): connecting, the server reading the prompt, a reasoning model thinking
  before it streams. Not retried: a server that slow is as slow the next time.
* ``idle``: between two events once the reply has started. A stall mid-reply is a broken
  stream, retried like a dropped connection.
* ``total``: from the first attempt to the end of the reply, retries and their waits
  included, so a request never takes longer. Not retried.

0 (or None) means no limit. Each limit ends the request with one line that names it and
the setting to raise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import AsyncGenerator, Awaitable, TypeVar

import anyio

from ..errors import ModelTimeoutError

__all__ = ["Timeouts", "ReplyClock", "CONNECT_TIMEOUT"]

T = TypeVar("T")

# Seconds to open the TCP (and TLS) connection: a host that never answers is said to be
# unreachable in half a minute, not after a first-token limit sized for a slow CPU.
CONNECT_TIMEOUT = 30.0


@dataclass(frozen=True)
class Timeouts:
    """Seconds allowed for one model request; 0 or None: no limit."""

    first_token: float | None = 600.0
    idle: float | None = 120.0
    total: float | None = 1800.0

    def deadline(self) -> float | None:
        """The monotonic time a request starting now must end by (None: no total limit)."""
        return time.monotonic() + self.total if self.total else None

    def connect(self) -> float:
        """Seconds to connect: ``CONNECT_TIMEOUT``, or the first-token limit if shorter."""
        return min(CONNECT_TIMEOUT, self.first_token) if self.first_token else CONNECT_TIMEOUT


class ReplyClock:
    """One attempt's waits, each held to the limit in force: ``wait`` for what the server
    sends, ``heard`` at each event, ``started`` at the reply's first token."""

    def __init__(self, limits: Timeouts, deadline: float | None, url: str | None = None) -> None:
        self.limits = limits
        self.deadline = deadline  # shared by the attempts of one request
        self.url = url
        self.sent = time.monotonic()
        self.last: float | None = None  # when the last event came, once the reply started
        self.events = 0

    def heard(self) -> None:
        """An event arrived: the idle limit counts from now."""
        self.events += 1
        if self.last is not None:
            self.last = time.monotonic()

    def started(self) -> None:
        """The reply's first token arrived: the first-token limit is met, the idle one applies."""
        if self.last is None:
            self.last = time.monotonic()

    async def wait(self, awaitable: Awaitable[T]) -> T:
        """``await awaitable`` within the limit in force, else ``ModelTimeoutError``."""
        seconds, limit = self._next_limit()
        if seconds is None:
            return await awaitable
        try:
            # anyio (httpx's own async layer): a cancel scope in this task, on 3.10 too.
            with anyio.fail_after(max(0.0, seconds)):
                return await awaitable
        except TimeoutError:
            raise self.expired(limit) from None

    async def each(self, source: AsyncGenerator[T, None]) -> AsyncGenerator[T, None]:
        """``source``'s items, each waited for within the limit in force when it is asked for."""
        try:
            while True:
                try:
                    item = await self.wait(source.__anext__())
                except StopAsyncIteration:
                    return
                yield item
        finally:
            await source.aclose()

    def _next_limit(self) -> tuple[float | None, str]:
        """Seconds until the nearest limit, and its name (None: no limit applies)."""
        now = time.monotonic()
        near: list[tuple[float, str]] = []
        if self.last is None and self.limits.first_token:
            near.append((self.sent + self.limits.first_token - now, "first_token"))
        if self.last is not None and self.limits.idle:
            near.append((self.last + self.limits.idle - now, "idle"))
        if self.deadline is not None:
            near.append((self.deadline - now, "total"))
        return min(near) if near else (None, "")

    def expired(self, limit: str) -> ModelTimeoutError:
        """The one-line error for ``limit``; only a stall mid-reply is worth another attempt."""
        if limit == "first_token":
            # Events without a token yet (a Responses API's response.created, a reasoning
            # model thinking unseen): the reply has not started either.
            started = f"; {_events(self.events)}, no token yet" if self.events else ""
            message = (f"no reply within Agent.first_token_timeout={self.limits.first_token:g} s "
                       f"(keep-alives do not count{started}): raise it for a slow server — a CPU "
                       "model can read a long prompt for minutes")
        elif limit == "idle":
            message = (f"the reply stalled: no event for Agent.idle_timeout={self.limits.idle:g} s "
                       f"after {_events(self.events)} (keep-alives and partial lines do not count); "
                       "raise it if the server pauses that long")
        else:
            message = (f"no complete reply within Agent.request_timeout={self.limits.total:g} s "
                       "(retries included): raise it for long replies from a slow server")
        error = ModelTimeoutError(message, url=self.url)
        error.limit = limit  # type: ignore[attr-defined]
        error.retryable = limit == "idle"  # type: ignore[attr-defined]
        return error


def _events(n: int) -> str:
    return f"{n} event" + ("" if n == 1 else "s")
