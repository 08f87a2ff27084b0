"""Response cache: the same request never goes to the model twice.

``CachedModel`` wraps any model client. Each request is keyed by a SHA-256 over what
shapes the reply — the model name, the system prompt, the items' wire-relevant fields,
the tool specs and the sampling settings (temperature, max tokens, tool choice). Left
out on purpose: item ``meta`` (except what goes on the wire: images sent to vision
models, provider fields echoed back), and tool-call ids, which are replaced by their order of
appearance (servers mint random ids; the structure "result answers call #2" is kept).
Tool outputs enter the key *normalised* (``_util.normalise.normalise``, the rules replay compares by), so a timestamp
or a memory address in an output does not turn a re-run into a miss.

A miss calls the model and records its whole event stream (text deltas, tool-call
deltas, the final turn with its ids and usage); a hit replays that stream without a
request, so a re-run yields the same ids, text and transcript. The store is one SQLite
file (default ``.ipyagent/cache.sqlite`` in the working directory), safe to share
between threads and processes; a corrupt file is moved aside (``cache.sqlite.corrupt-<time>``)
with one warning and a fresh one is started, so a run never fails for it. Modes: ``on`` (read and write) and ``replay-only``
(read; a miss raises ``CacheMiss`` instead of calling the model). An entry that would
contain a secret's value is not stored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Protocol, TypeVar, Union

from .._util.sqlite import inode, is_corrupt, set_aside_if_unchanged
from .._util.text import repair_surrogates
from ..context.items import Message, Reasoning, Summary, ToolCall, ToolResult, item_from_dict
from ..errors import ModelError
from ..trust.secrets import find_secret, key_envs, secret_values
from .base import (
    ClientNotice,
    Discarded,
    Model,
    ModelEvent,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Turn,
    TurnComplete,
)

__all__ = ["CachedModel", "ResponseCache", "CacheMiss", "request_key", "cached_client",
           "CacheSettings", "DEFAULT_PATH"]

log = logging.getLogger("ipyagent.models.cache")
DEFAULT_PATH = os.path.join(".ipyagent", "cache.sqlite")
KEY_VERSION = 1  # bump when the key's recipe changes: old entries simply stop matching


class CacheMiss(ModelError):
    """``Agent.cache = 'replay-only'`` and this request was never recorded."""


# -- the key ----------------------------------------------------------------------
def request_key(model: str, request: ModelRequest) -> str:
    """The hex SHA-256 of what shapes the reply to ``request``."""
    from .._util.normalise import normalise

    ordinals: dict[str, int] = {}

    def ordinal(call_id: str) -> int:
        return ordinals.setdefault(call_id, len(ordinals))

    def wire(item: Any) -> list[Any]:
        if isinstance(item, Message):
            return ["message", item.role, item.content]
        if isinstance(item, ToolCall):
            args = item.raw_arguments if item.raw_arguments is not None else item.arguments
            # Provider fields echoed back on the wire (e.g. thought signatures) count.
            return ["call", ordinal(item.id), item.name, args, item.meta.get("chat_extra")]
        if isinstance(item, ToolResult):
            # Images sent to vision models (Agent.send_images) count, by content.
            images = json.dumps(item.meta.get("images") or [], sort_keys=True)
            return ["result", ordinal(item.call_id), normalise(item.output),
                    hashlib.sha256(images.encode()).hexdigest()]
        if isinstance(item, Reasoning):
            return ["reasoning", item.content, item.details]
        if isinstance(item, Summary):
            return ["summary", item.content]
        return ["other", repr(item)]

    # Every other request field is a sampling setting (temperature, max_tokens, tool_choice,
    # and whatever is added later): all of them count. A prompt-cache breakpoint or key does
    # not shape the reply (and leaving them out keeps the keys of older caches).
    # A grammar and stop strings count when set (left out when not: older keys stay valid).
    settings = {f.name: getattr(request, f.name) for f in dataclasses.fields(request)
                if f.name not in ("system", "items", "tools", "prompt_cache", "cache_key")
                and not (f.name in ("grammar", "stop") and not getattr(request, f.name))}
    body = {"v": KEY_VERSION, "model": model, "system": request.system,
            "items": [wire(i) for i in request.items], "tools": request.tools, **settings}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(repair_surrogates(text).encode("utf-8")).hexdigest()


# -- events <-> JSON --------------------------------------------------------------
_REPLY_EVENTS = (TextDelta, ReasoningDelta, ToolCallDelta, TurnComplete)  # what a reply is
ReplyEvent = Union[TextDelta, ReasoningDelta, ToolCallDelta, TurnComplete]  # no Retrying: never stored

def _event_to_json(event: ReplyEvent) -> dict[str, Any]:
    if isinstance(event, TextDelta):
        return {"t": "text", "text": event.text}
    if isinstance(event, ReasoningDelta):
        return {"t": "reasoning", "text": event.text}
    if isinstance(event, ToolCallDelta):
        return {"t": "call", "index": event.index, "id": event.id, "name": event.name,
                "arguments": event.arguments}
    turn = event.turn
    return {"t": "turn", "text": turn.text, "finish_reason": turn.finish_reason,
            "usage": turn.usage, "model": turn.model,
            "tool_calls": [c.to_dict() for c in turn.tool_calls],
            "reasoning": turn.reasoning.to_dict() if turn.reasoning else None}


def _event_from_json(data: dict[str, Any]) -> ReplyEvent:
    kind = data["t"]
    if kind == "text":
        return TextDelta(data["text"])
    if kind == "reasoning":
        return ReasoningDelta(data["text"])
    if kind == "call":
        return ToolCallDelta(data["index"], data["id"], data["name"], data["arguments"])
    reasoning = item_from_dict(data["reasoning"]) if data.get("reasoning") else None
    return TurnComplete(Turn(
        text=data["text"], finish_reason=data.get("finish_reason"), usage=data.get("usage"),
        model=data.get("model"), reasoning=reasoning,  # type: ignore[arg-type]
        tool_calls=[item_from_dict(c) for c in data["tool_calls"]]))  # type: ignore[misc]


# -- the store --------------------------------------------------------------------
T = TypeVar("T")
class ResponseCache:
    """An SQLite file of recorded event streams, keyed by request hash."""

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_PATH) -> None:
        self.path = Path(path).expanduser().absolute()
        self._lock = threading.Lock()
        self._ready = False
        self.notices: list[str] = []  # what the user should be told (a file set aside), once

    def _do(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """``op`` on a fresh connection; a corrupt file is set aside and ``op`` runs again
        on a new, empty cache (a cache is only ever a shortcut: losing it costs requests)."""
        for attempt in (1, 2):
            seen = inode(self.path)
            try:
                conn = self._connect()
                try:
                    return op(conn)
                finally:
                    conn.close()
            except sqlite3.DatabaseError as exc:
                if attempt == 2 or not is_corrupt(exc):
                    raise
                self._set_aside(seen, exc)
        raise AssertionError("unreachable")  # pragma: no cover

    def _set_aside(self, seen: int | None, exc: sqlite3.DatabaseError) -> None:
        """Move the corrupt file (and its journal) to ``<name>.corrupt-<time>``, once."""
        with self._lock:
            self._ready = False
            moved = set_aside_if_unchanged(self.path, seen)
            if moved is None:
                return
        said = (f"the response cache {self.path} was unreadable ({exc}): moved it to "
                f"{moved} and started a new one")
        log.warning("%s", said)
        self.notices.append(said)

    def _connect(self) -> sqlite3.Connection:
        # One short-lived connection per operation: safe across threads and processes
        # (SQLite's own file locking), and nothing stays open when the agent is idle.
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        if not self._ready:
            with self._lock:
                conn.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, "
                             "model TEXT NOT NULL, created REAL NOT NULL, events TEXT NOT NULL)")
                self._ready = True
        return conn

    def get(self, key: str) -> list[ReplyEvent] | None:
        """The recorded events for ``key``, or None."""
        if not self.path.exists():
            return None
        row = self._do(lambda conn: conn.execute(
            "SELECT events FROM responses WHERE key = ?", (key,)).fetchone())
        if not row:
            return None
        try:
            return [_event_from_json(e) for e in json.loads(row[0])]
        except (ValueError, KeyError, TypeError, IndexError) as exc:  # one bad entry: a miss
            log.warning("ignoring an unreadable entry in the response cache %s (%s)",
                        self.path, exc)
            return None

    def put(self, key: str, model: str, events: list[ReplyEvent],
            key_env: str | list[str] | None = None) -> bool:
        """Record ``events`` under ``key``; False (and nothing written) if it holds a secret."""
        recorded = [_event_to_json(e) for e in events]
        text = repair_surrogates(json.dumps(recorded, ensure_ascii=False))
        leaked = find_secret(recorded, secret_values(key_env))  # strings, not JSON escapes
        if leaked:
            log.warning("not caching a reply that contains the value of $%s", leaked)
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._do(lambda conn: conn.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?)",
                                           (key, model, time.time(), text)))
        return True

    def __len__(self) -> int:
        if not self.path.exists():
            return 0
        return int(self._do(lambda conn: conn.execute(
            "SELECT COUNT(*) FROM responses").fetchone()[0]))

    def clear(self) -> None:
        """Forget every recorded response."""
        if self.path.exists():
            self._do(lambda conn: conn.execute("DELETE FROM responses"))

    def __repr__(self) -> str:
        return f"<ResponseCache {str(self.path)!r}: {len(self)} responses>"


# -- the wrapper ------------------------------------------------------------------
class CachedModel:
    """A model client that answers from the cache when it can."""

    def __init__(self, inner: Model, cache: ResponseCache | str | os.PathLike[str] = DEFAULT_PATH,
                 mode: str = "on", key_env: str | list[str] | None = None) -> None:
        if mode not in ("on", "replay-only"):
            raise ValueError(f"cache mode must be 'on' or 'replay-only', not {mode!r}")
        self.inner = inner
        self.cache = cache if isinstance(cache, ResponseCache) else ResponseCache(cache)
        self.mode = mode
        self.key_env = key_env
        self.hits = 0
        self.misses = 0

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.inner.name

    def __repr__(self) -> str:
        return (f"CachedModel({self.inner!r}, mode={self.mode!r}, hits={self.hits}, "
                f"misses={self.misses}, path={str(self.cache.path)!r})")

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        key = request_key(self.inner.name, request)
        extra = getattr(self.inner, "extra_body", None)
        if extra:  # provider fields (Agent.extra_body) shape the reply too
            key = hashlib.sha256((key + json.dumps(extra, sort_keys=True, default=str)).encode()).hexdigest()
        recorded = self.cache.get(key)
        while self.cache.notices:
            yield ClientNotice(self.cache.notices.pop(0))
        if recorded is not None:
            self.hits += 1
            for replayed in recorded:
                yield replayed
            return
        self.misses += 1
        if self.mode == "replay-only":
            raise CacheMiss(f"replay-only cache: no recorded reply for this request to "
                            f"{self.inner.name!r} (key {key[:12]}) in {self.cache.path}; set "
                            "Agent.cache = 'on' to call the model")
        events: list[ReplyEvent] = []
        async for event in self.inner.stream(request):
            if isinstance(event, Discarded):  # the stream broke: what came so far is void
                events.clear()
            elif isinstance(event, _REPLY_EVENTS):  # not a retry or a notice: not the reply
                events.append(event)
            yield event
        if events and isinstance(events[-1], TurnComplete):  # only whole replies are kept
            self.cache.put(key, self.inner.name, events, self.key_env)


class CacheSettings(Protocol):
    """What ``cached_client`` reads of ``engine.settings.AgentSettings`` (a layer above)."""

    @property
    def cache(self) -> str: ...
    @property
    def cache_path(self) -> str: ...
    @property
    def cwd(self) -> str: ...


def cached_client(agent: CacheSettings, inner: Model, previous: Model | None = None) -> Model:
    """``inner`` wrapped per ``Agent.cache``: ``previous`` (the wrapper the caller keeps)
    while it still fits the settings, else a new wrapper."""
    if agent.cache == "off":
        return inner
    path = agent.cache_path or os.path.join(agent.cwd or os.getcwd(), DEFAULT_PATH)
    wrapper = previous
    if (not isinstance(wrapper, CachedModel) or wrapper.inner is not inner
            or wrapper.mode != agent.cache or wrapper.cache.path != Path(path).expanduser().absolute()):
        wrapper = CachedModel(inner, path, mode=agent.cache, key_env=key_envs(agent))
    return wrapper
