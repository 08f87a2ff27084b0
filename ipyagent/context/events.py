"""What an agent run reports as it goes, and what it returns.

Listeners (``Agent.listeners``, or ``on_event=`` for one run) receive the model's stream
events (``TextDelta``, ``ReasoningDelta``, ``ToolCallDelta``, defined here and yielded by
``ipyagent.models`` clients) interleaved with the loop's own events below, in order. Displays are listeners.
"""

from __future__ import annotations

import html
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Union

from .._util.text import one_line
from ..trust.untrusted import markdown_literal, markdown_text
from .decisions import Decision
from .items import Summary, ToolCall, ToolResult
from .spill import raw_replaced

__all__ = [
    "TextDelta",
    "ReasoningDelta",
    "ToolCallDelta",
    "Discarded",
    "StopReason",
    "Usage",
    "Step",
    "RunResult",
    "RunStarted",
    "StepStarted",
    "ToolCallRequested",
    "ToolCallDecided",
    "ToolCallFinished",
    "StepFinished",
    "RunFinished",
    "Notice",
    "AnswerCut",
    "ReplyRead",
    "ContextCompacted",
    "MemoryRecalled",
    "FilesPreviewed",
    "ToolOutput",
    "live_emitter",
    "compaction_line",
    "usage_line",
    "time_line",
    "cost_line",
    "Event",
]


# The model's stream, as a client yields it (ipyagent.models) and listeners receive it.
@dataclass
class TextDelta:
    text: str


@dataclass
class ReasoningDelta:
    text: str


@dataclass
class ToolCallDelta:
    """A fragment of tool call ``index``; ``name``/``id`` set when first known."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class Discarded:
    """What streamed of the reply so far is void: the stream broke before the turn was
    complete. Displays mark what they showed of it; none of it enters the context.

    ``retrying``: the request is sent again (a ``Retrying`` notice follows). ``usage``:
    what the server reported for the void reply, billed by the step; a final failure's
    usage rides on its error instead (``exc.turn``), as before.
    """

    reason: str  # short, e.g. "the connection dropped"
    retrying: bool = True
    usage: dict[str, Any] | None = None

    @property
    def line(self) -> str:
        """The marker every display shows, e.g. 'discarded: the connection dropped; asking again'."""
        return f"discarded: {self.reason}" + ("; asking again" if self.retrying else "")


StopReason = Literal["done", "max_steps", "circuit_breaker", "budget", "denied", "error", "length"]


@dataclass
class Usage:
    """Tokens in and out; ``estimated`` when the server reported none.

    ``input`` counts every prompt token, cached or not; ``cache_read`` and ``cache_write``
    say how many of them a server's prompt cache reused and stored (part of ``input``).
    """

    input: int = 0
    output: int = 0
    requests: int = 0
    estimated: bool = False
    cache_read: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output

    def add(self, other: Usage) -> None:
        self.input += other.input
        self.output += other.output
        self.requests += other.requests
        self.estimated = self.estimated or other.estimated
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write

    def __str__(self) -> str:
        approx = "~" if self.estimated else ""
        cache = [f"{n} {what}" for n, what in ((self.cache_read, "cached"),
                                               (self.cache_write, "cache written")) if n]
        cached = f" ({', '.join(cache)})" if cache else ""
        return f"{approx}{self.input} in{cached} / {approx}{self.output} out"

    def to_dict(self) -> dict[str, Any]:
        """As a transcript keeps it (the cache counts only when there are any)."""
        out: dict[str, Any] = {"input": self.input, "output": self.output,
                               "requests": self.requests, "estimated": self.estimated}
        out.update({k: v for k, v in (("cache_read", self.cache_read),
                                      ("cache_write", self.cache_write)) if v})
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Usage:
        """From ``to_dict`` (an older transcript without the cache counts reads as 0)."""
        return cls(_count(data.get("input")), _count(data.get("output")),
                   _count(data.get("requests")), bool(data.get("estimated", False)),
                   _count(data.get("cache_read")), _count(data.get("cache_write")))

    @classmethod
    def from_server(cls, usage: dict[str, Any] | None) -> Usage | None:
        """Normalise the usage shapes of Chat Completions, Responses and Anthropic."""
        if not usage:
            return None
        into = usage.get("prompt_tokens", usage.get("input_tokens"))
        out = usage.get("completion_tokens", usage.get("output_tokens"))
        if into is None and out is None:
            return None
        # Anthropic counts prompt-cache reads and writes apart from input_tokens; they are
        # still prompt tokens (and count toward budgets and the window).
        read, write = (_count(usage.get(k)) for k in
                       ("cache_read_input_tokens", "cache_creation_input_tokens"))
        # OpenAI (and llama.cpp, OpenRouter) count cached tokens inside the prompt's.
        details = usage.get("prompt_tokens_details", usage.get("input_tokens_details"))
        inside = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
        return cls(_count(into) + read + write, _count(out), 1, bool(usage.get("estimated")),
                   read + inside, write)


def _count(value: Any) -> int:
    """A token count as a server or a file gave it; anything that is not one is 0."""
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


@dataclass
class Step:
    """One iteration: one model request and the tool calls it made."""

    index: int
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    duration: float = 0.0
    stop_reason: StopReason | None = None  # set when this step ends the run
    error: str | None = None
    # Where the step's time went: the model's reply, the tools' runs, a person's answers
    # (approval, offers); the rest is ipyagent's own (compaction, bookkeeping).
    model_time: float = 0.0
    tool_time: float = 0.0
    wait_time: float = 0.0

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    def __repr__(self) -> str:
        calls = ", ".join(c.name for c in self.tool_calls) or "no tool calls"
        end = f", stop={self.stop_reason}" if self.stop_reason else ""
        return f"<Step {self.index}: {calls}{end}>"

    def footer(self, paused: str = "paused") -> str:
        """One line: calls, tokens, time, and how the step ended (``paused`` when the run goes on)."""
        calls = len(self.tool_calls)
        line = (f"step {self.index} · {calls} tool call{'s' * (calls != 1)} · {usage_line(self.usage)}"
                f" · {time_line(self.duration, self.model_time, self.tool_time, self.wait_time)}")
        if self.stop_reason:
            return f"{line} · stopped: {self.stop_reason}" + (f" · {self.error}" if self.error else "")
        return f"{line} · {paused}"

    def _repr_markdown_(self) -> str:
        lines = [f"**Step {self.index}** ({self.duration:.2f}s, {self.usage})"]
        if self.text:
            lines.append(markdown_text(self.text))
        for call, result in zip(self.tool_calls, self.results):
            lines.append(call._repr_markdown_())
            lines.append(result._repr_markdown_())
        if self.stop_reason:
            lines.append(f"_stop: {self.stop_reason}_"
                         + (f" — {markdown_literal(self.error)}" if self.error else ""))
        return "\n\n".join(lines)


@dataclass
class RunResult:
    """How a run ended."""

    stop_reason: StopReason
    text: str
    steps: list[Step] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    duration: float = 0.0
    error: str | None = None  # one line, for stop_reason "error" (and denials' reasons)
    cost: float | None = None  # US dollars at a known price (models/prices.py); None: unknown
    cost_basis: str = ""  # whose prices, of when (said with the cost)

    @property
    def ok(self) -> bool:
        return self.stop_reason == "done"

    @property
    def model_time(self) -> float:
        """Seconds spent waiting for the model's replies."""
        return sum(s.model_time for s in self.steps)

    @property
    def tool_time(self) -> float:
        """Seconds the tools ran."""
        return sum(s.tool_time for s in self.steps)

    @property
    def wait_time(self) -> float:
        """Seconds spent waiting for a person (approval clicks, offers): not the model's."""
        return sum(s.wait_time for s in self.steps)

    def __repr__(self) -> str:
        text = one_line(self.text, 60)
        return (f"RunResult(stop_reason={self.stop_reason!r}, steps={len(self.steps)}, "
                f"usage={self.usage}, text={text!r})")

    def footer(self, *, shown: Iterable[str] = ()) -> str:
        """One line: stop reason, steps, tokens (and their cost, when known), time split
        into model, tools and waiting for you, and the error unless it is in ``shown``."""
        cost = f" · {cost_line(self.cost, self.usage, self.cost_basis)}" if self.cost is not None else ""
        line = (f"{self.stop_reason} · {len(self.steps)} step{'s' * (len(self.steps) != 1)} · "
                f"{usage_line(self.usage)}{cost} · "
                f"{time_line(self.duration, self.model_time, self.tool_time, self.wait_time)}")
        if self.error and self.error in set(shown):
            return line + " · the error above"
        return line + (f" · {self.error}" if self.error else "")

    def _repr_html_(self) -> str:
        color = "#1a7f37" if self.ok else "#b35900"
        return (f"<div><div>{html.escape(self.text)}</div>"
                f"<div style='color:{color};font-size:90%'>{html.escape(self.footer())}</div></div>")


def usage_line(usage: Usage) -> str:
    """Tokens as the footers say them: '~1115 in / ~98 out tokens in 3 requests, estimated'.

    A sum over the requests (each sends the whole context again), so it grows faster
    than the context; 'estimated' when a server reported none (the demo model, some
    local servers) and ipyagent counted instead.
    """
    requests = f" in {usage.requests} requests" if usage.requests > 1 else ""
    return f"{usage} tokens{requests}" + (", estimated" if usage.estimated else "")


def time_line(total: float, model: float, tools: float, waiting: float) -> str:
    """'5.9s (model 0.4s · tools 0.3s · waiting for you 5.2s)': a person's time is not the model's."""
    parts = [f"model {model:.1f}s", f"tools {tools:.1f}s"]
    if waiting >= 0.05:
        parts.append(f"waiting for you {waiting:.1f}s")
    return f"{total:.1f}s ({' · '.join(parts)})" if model or tools or waiting else f"{total:.1f}s"


def cost_line(cost: float, usage: Usage, basis: str) -> str:
    """'≈ $0.0123 (basis)': what the run's tokens cost at a known price."""
    shown = f"${cost:.4f}" if cost < 1 else f"${cost:,.2f}"
    approx = "≈ ~" if usage.estimated else "≈ "
    return f"{approx}{shown}" + (f" ({basis})" if basis else "")


@dataclass
class RunStarted:
    task: str | None


@dataclass
class StepStarted:
    index: int


@dataclass
class ToolCallRequested:
    """A complete call, before approval."""

    call: ToolCall


@dataclass
class ToolCallDecided:
    call: ToolCall
    decision: Decision


@dataclass
class ToolCallFinished:
    call: ToolCall
    result: ToolResult


@dataclass
class StepFinished:
    step: Step


@dataclass
class RunFinished:
    result: RunResult


@dataclass
class Notice:
    """Something the user should see (a retry, a restarted kernel, a skipped call)."""

    message: str
    level: Literal["info", "warning", "error"] = "info"


@dataclass
class AnswerCut(Notice):
    """The final answer went on to imitate a tool result and was cut there
    (``models.scaffolding``): a notice, and what is kept, so a display that showed the
    reply as it streamed can show the answer as kept."""

    kept: str = ""


@dataclass
class ReplyRead:
    """The reply was read as other than it streamed: calls written as text taken out (their
    cards follow), an answer written as a ``final_answer`` call, a shown block taken as the
    call. ``text`` is the reply's text as read, so a display that showed the stream (or
    held part of it back) can show what was read."""

    text: str


@dataclass
class ToolOutput:
    """Text a running tool printed (stdout/stderr), as it arrives: live progress."""

    call: ToolCall
    name: str  # "stdout" | "stderr"
    text: str


# Set by the loop while a tool runs: where a tool sends ``ToolOutput`` events (a context
# variable, so concurrent runs of different agents never mix their outputs).
live_emitter: ContextVar[Callable[[Any], None] | None] = ContextVar("ipyagent_live_emitter",
                                                                   default=None)


@dataclass
class ContextCompacted:
    """The context was compacted before a request: tokens before and after."""

    before: int
    after: int
    summary: Summary | None = None  # the item that now stands in for the older items
    cleared: int = 0  # older tool results whose text was cleared instead (no summary)


@dataclass
class MemoryRecalled:
    """Notes from earlier sessions went into the request before the task (``Agent.memory``).

    ``text`` is the block the model reads; ``summary`` one line for the cell. Both hold
    remembered text, which anyone may have written: displays escape them."""

    summary: str
    text: str
    labels: list[str] = field(default_factory=list)


@dataclass
class FilesPreviewed:
    """Previews of the files the task names went into the request before it
    (``Agent.preview_files``). ``text`` is the block the model reads, ``lines`` one line per
    file for the cell. Both hold file content, which anyone may have written: displays
    escape them."""

    lines: list[str]
    text: str

    @property
    def summary(self) -> str:
        """The files' lines joined: one line for a cell or a terminal."""
        return "; ".join(self.lines)


def compaction_line(event: ContextCompacted) -> str:
    """One line saying what a compaction did, for every display."""
    summary = event.summary
    if event.cleared and summary is None:
        return (f"context compacted before the request: ~{event.before:,} → ~{event.after:,} "
                f"tokens ({_things(event.cleared, 'older tool result')} cleared, kept in the "
                "transcript; `agent.context.compaction_preview()` shows what the next one would do)")
    replaced = len(raw_replaced(summary) or []) if isinstance(summary, Summary) else 0
    how = ("summarised" if getattr(summary, "meta", {}).get("method") == "summary"
           else "dropped")
    return (f"context compacted before the request: ~{event.before:,} → ~{event.after:,} "
            f"tokens ({_things(replaced, 'earlier item')} {how}; `agent.context.compaction_preview()` "
            "shows what the next one would do)")


def _things(n: int, thing: str) -> str:
    """``1 older tool result``, ``3 older tool results``."""
    return f"{n} {thing}{'' if n == 1 else 's'}"


Event = Union[
    TextDelta, ReasoningDelta, ToolCallDelta, Discarded, RunStarted, StepStarted, ToolCallRequested,
    ToolCallDecided, ToolCallFinished, StepFinished, RunFinished, Notice, ContextCompacted,
    ToolOutput, MemoryRecalled, FilesPreviewed, ReplyRead,
]
