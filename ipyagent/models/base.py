"""What every model client speaks: a request in, a stream of events out.

A client turns a ``ModelRequest`` (provider-neutral items + tool schemas) into its wire
format, streams the reply and yields ``TextDelta`` / ``ReasoningDelta`` /
``ToolCallDelta`` events as they arrive, then exactly one ``TurnComplete`` holding the
assembled ``Turn``. A stream that breaks after some deltas yields ``Discarded`` (those
deltas are void) before it is sent again or fails. Infrastructure failures raise ``ipyagent.errors.ModelError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Protocol, Sequence, Union, runtime_checkable

from ..context.events import Discarded, ReasoningDelta, TextDelta, ToolCallDelta
from ..context.items import Item, Reasoning, ToolCall

__all__ = [
    "ModelRequest",
    "Turn",
    "TextDelta",
    "ReasoningDelta",
    "ToolCallDelta",
    "TurnComplete",
    "Retrying",
    "ClientNotice",
    "Discarded",
    "ModelEvent",
    "Model",
    "SUMMARY_PROMPT",
    "SUMMARY_REQUEST",
    "new_cache_key",
    "asks_summary",
    "OUTCOME_PROMPT",
]

# The system prompt of a compaction request (``ipyagent.engine.compaction``): with it, a request
# asks for a summary of the items it carries. Here, so that a model (the demo) can tell.
SUMMARY_PROMPT = """\
You compress the earlier part of a working session between a user and an AI agent that \
runs Python in a persistent kernel, so that the agent can continue without it. Write \
concise bullet points that keep:
- facts and numbers found, with their values;
- decisions made and why;
- file names and paths, URLs, and Python variable/function names that exist in the kernel \
and what they hold;
- errors met and how they were resolved;
- open questions and the next steps that were planned.
Do not invent anything. No preamble: start with the first bullet."""

# The last message of a compaction request made in the conversation itself
# (``Agent.compact_summary = "conversation"``): the request the step would send, with this
# appended, so that a server's prompt cache reads the whole conversation back. It starts
# with ``[ipyagent]``, as every message of ipyagent's own in the conversation does.
SUMMARY_REQUEST = """\
[ipyagent] The context window is nearly full: the older turns above will be replaced by \
your summary. Do not call a tool. In short bullets keep the facts and numbers found, \
decisions, file and variable names, errors and their fixes, and what is left to do. \
Invent nothing; start with the first bullet."""

# The system prompt of the request ``Agent.memory_write = "model"`` makes after a run
# (``ipyagent.memory``): one short note for later sessions. Here for the same reason.
OUTCOME_PROMPT = """You write one short note for an AI agent's long-term memory about a finished run in a user's notebook, to be read in a later session. In at most three sentences keep: what the task was, the answer (with its key numbers), the files and variables it made, and anything that failed with its cause. Plain text, no preamble, nothing invented, no secrets."""


@dataclass
class ModelRequest:
    """One request: the conversation so far, the tools on offer, sampling settings."""

    system: str
    items: Sequence[Item]
    tools: list[dict[str, Any]] = field(default_factory=list)  # JSON-schema function specs
    temperature: float | None = None
    max_tokens: int | None = None
    tool_choice: str | None = None  # "auto" | "none" | "required" | a tool name
    # Mark prompt-cache breakpoints where the API takes them (Anthropic's cache_control);
    # it changes what the server keeps, never the reply.
    prompt_cache: bool = False
    # Where the server constrains decoding (llama.cpp's GBNF, ``models.profiles.grammar``):
    # the reply must match this grammar. Sent only by clients whose servers take it.
    grammar: str | None = None
    stop: tuple[str, ...] = ()  # stop strings (a profile's, in text mode)
    # A stable key per conversation, for servers that route by it to the machine holding
    # the cached prefix (OpenAI's ``prompt_cache_key``); None: none sent.
    cache_key: str | None = None
    # A sampling seed, for servers that take one (OpenAI-compatible ``seed``): a re-ask at a
    # temperature repeats on the same server. None: none sent.
    seed: int | None = None


def asks_summary(request: ModelRequest) -> bool:
    """True for a compaction's summary request, in either form: its own (``SUMMARY_PROMPT``)
    or the step's request with ``SUMMARY_REQUEST`` as its last message."""
    last = request.items[-1] if request.items else None
    return request.system == SUMMARY_PROMPT or getattr(last, "content", None) == SUMMARY_REQUEST


def new_cache_key() -> str:
    """A fresh ``ModelRequest.cache_key``: one per conversation, random (it says nothing)."""
    import uuid

    return "ipyagent-" + uuid.uuid4().hex[:16]


@dataclass
class Turn:
    """One assembled assistant reply."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: Reasoning | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None  # as the server reported it (last one wins)
    model: str | None = None  # as the server named it


@dataclass
class TurnComplete:
    turn: Turn


@dataclass
class Retrying:
    """The request failed in a retryable way; the client waits ``delay`` s and tries again."""

    attempt: int
    max_retries: int
    delay: float
    reason: str

    @property
    def message(self) -> str:
        return (f"{self.reason} — retry {self.attempt} of {self.max_retries} "
                f"in {self.delay:.1f}s")


@dataclass
class ClientNotice:
    """Something a client (or a wrapper such as the cache) wants the user to know."""

    message: str


ModelEvent = Union[TextDelta, ReasoningDelta, ToolCallDelta, TurnComplete, Retrying, ClientNotice,
                   Discarded]


@runtime_checkable
class Model(Protocol):
    """A model client."""

    @property
    def name(self) -> str:
        """The model name (read only: wrappers such as ``CachedModel`` pass it through)."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Yield events for one reply; the last one is ``TurnComplete``."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...
