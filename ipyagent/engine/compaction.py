"""Compaction: keep every request inside the model's context window.

Before a request, if ``prompt + reserve`` would pass ``threshold × window``, the context
is compacted *deeply*, down to the low-water mark ``target × window``, so that the next
compaction is many steps away and the requests in between share their whole prefix (what
a server's prompt cache reuses: llama.cpp, vLLM, OpenAI, Anthropic's ``cache_control``):

* first, without a model call, the text of the oldest tool results is **cleared** (the
  call and its result stay, as a short stub: ``ToolResult.meta["cleared_output"]`` keeps
  the text, so the transcript, replay and a later summary still have it), oldest first,
  never the newest turn's. A stub never changes again, so the next clearing leaves
  everything before the results it clears byte-identical. When even clearing every
  older result would not bring the request under the threshold, nothing is cleared and
* the oldest part of the conversation is replaced by a ``Summary``:

* kept verbatim: the system prompt, the original task (first user message) and the most
  recent turns (up to ``keep_recent`` of the room the conversation has inside the limit,
  i.e. after the reply reserve, the system prompt, the tool specs and the task, and no
  more than the low-water mark leaves — so that a compaction leaves headroom instead of
  running again at the next step);
* summarised by a model call (a prompt that keeps facts, decisions, file and variable
  names, open questions), asked by default at the end of the request the step would send
  (``Agent.compact_summary = "conversation"``), so the server's prompt cache reads the
  conversation back and a server that keeps one cached prompt keeps it; else, or when
  there is no room or no text, by a request of its own; when that fails or is not enough,
  **hard-truncated**: the oldest items go first, then fewer recent turns are kept, then
  the biggest tool result is cut;
* the unit is a *turn group* (an assistant turn with its tool calls and their results, or
  one user message), so a tool call and its result are never separated;
* the ``Summary`` keeps every replaced item (``Summary.replaced``), so nothing is lost from
  the transcript. A new summary that covers an older one *merges* it: it takes the older
  one's replaced items (flattened, so ``replaced`` never nests) and its place, so the
  conversation holds one summary however many compactions ran.

A ``target`` at or above ``threshold`` (or none) is the old, shallow compaction: no
clearing, the recent turns bounded by ``keep_recent`` alone.
"""

from __future__ import annotations

import html
import json
import weakref
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from .._util.text import head_tail, one_line
from ..context.items import Item, Message, Summary, ToolCall, ToolResult, code_of, turn_spans, unfold_dicts
from ..context.spill import held_dict, raw_outputs, raw_replaced
from ..models.base import SUMMARY_PROMPT, SUMMARY_REQUEST, ModelRequest

if TYPE_CHECKING:
    from ..context.buffer import Context
    from .view import AgentView

__all__ = ["CompactionPlan", "plan", "preview", "turn_groups", "render_for_summary",
           "SUMMARY_PROMPT", "truncation_summary", "replaced_items", "shrink_largest_result",
           "fit_window", "settings_for", "bind_settings", "clear_results", "cleared"]

def turn_groups(items: list[Item]) -> list[list[int]]:
    """Indices grouped into units that must stay together (a call with its result)."""
    starts = {span.start for span in turn_spans(items)}  # a turn's results follow it
    groups: list[list[int]] = []
    for i, item in enumerate(items):
        user_side = (isinstance(item, Message) and item.role != "assistant") or isinstance(item, Summary)
        if not groups or user_side or i in starts:
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


@dataclass
class CompactionPlan:
    """What compaction would do now: which items to keep and which to summarise."""

    needed: bool
    prompt_tokens: int
    reserve: int
    limit: int
    window: int
    head: list[int] = field(default_factory=list)
    middle: list[int] = field(default_factory=list)
    tail: list[int] = field(default_factory=list)
    middle_tokens: int = 0
    labels: list[str] = field(default_factory=list)  # one line per item, for the repr
    clear: list[int] = field(default_factory=list)  # results whose text it clears instead
    low: int = 0  # the low-water mark it compacts down to (``limit`` when shallow)

    def __repr__(self) -> str:
        if not self.window:
            return (f"<CompactionPlan: no context_window set, so nothing is compacted "
                    f"(~{self.prompt_tokens} tokens now)>")
        state = "needed" if self.needed else "not needed"
        would = "" if self.needed or not (self.middle or self.clear) else "if run now: "
        head = (f"<CompactionPlan {state}: {self.prompt_tokens}+{self.reserve} of limit "
                f"{self.limit} (window {self.window}); {would}")
        if self.clear:
            return (f"{head}clear the text of {len(self.clear)} older tool results "
                    "(no summary), keep the rest>")
        return (f"{head}summarise {len(self.middle)} items (~{self.middle_tokens} tokens), "
                f"keep {len(self.head) + len(self.tail)}>")

    def _repr_html_(self) -> str:
        fate = {i: "keep (task)" for i in self.head}
        if self.clear:
            fate.update({i: "keep" for i in self.middle + self.tail})
            fate.update({i: "clear text" for i in self.clear})
        else:
            fate.update({i: "summarise" for i in self.middle})
            fate.update({i: "keep" for i in self.tail})
        rows = "".join(
            f"<tr style='background:{'#fff3e0' if fate.get(i) in _CHANGED else 'none'}'>"
            f"<td>{i}</td><td>{fate.get(i, '')}</td><td style='text-align:left'>"
            f"{html.escape(label)}</td></tr>" for i, label in enumerate(self.labels))
        head = html.escape(repr(self))
        return f"<div><div>{head}</div><table>{rows}</table></div>"


_CHANGED = ("summarise", "clear text")


def plan(context: Context, window: int = 0, threshold: float = 0.8, reserve: int = 0,
         keep_recent: float = 0.5, extra_tokens: int = 0, force: bool = False,
         target: float | None = None) -> CompactionPlan:
    """Decide what to summarise so that ``prompt + reserve`` fits ``threshold × window``.

    With a ``target`` under ``threshold`` the recent turns kept also fit ``target × window``
    (the low-water mark); without one, only the ``keep_recent`` share bounds them.
    """
    items = list(context)
    limit = int(window * threshold) if window else 0
    prompt = context.tokens + extra_tokens
    # Labels are only for showing a preview; building them costs O(items) summaries.
    labels = [f"{it.label}: {it.summary()}" for it in items] if force else []
    low = low_water(window, threshold, target) if window else 0
    result = CompactionPlan(needed=False, prompt_tokens=prompt, reserve=reserve, limit=limit,
                            window=window, labels=labels, low=low)
    if not window or (prompt + reserve <= limit and not force):
        result.tail = list(range(len(items)))
        return result
    groups = turn_groups(items)
    tok = [context.item_tokens(i) for i in range(len(items))]
    gtok = [sum(tok[i] for i in g) for g in groups]
    # The task: the first user message that is not a block ipyagent added before it
    # (memory notes, the namespace picture, a copy: those carry meta), else the first one.
    users = [gi for gi, g in enumerate(groups) if _is_user(items[g[0]])]
    first_user = next((gi for gi in users if not items[groups[gi][0]].meta), users[0] if users else None)
    head_groups = [first_user] if first_user is not None else []
    # The task being worked on (the newest such message) is kept verbatim too, however
    # long its turn has grown: summarised away, the model would go on with an old task.
    current = next((gi for gi in reversed(users) if not items[groups[gi][0]].meta), None)
    if current is not None and current not in head_groups:
        head_groups.append(current)
    head_tokens = sum(gtok[g] for g in head_groups)
    budget = _tail_budget(prompt - sum(tok), limit, reserve, keep_recent, head_tokens)
    if low < limit:
        budget = min(budget, _tail_budget(prompt - sum(tok), low, reserve, 1.0, head_tokens))
    tail_groups: list[int] = []
    for gi in range(len(groups) - 1, -1, -1):
        if gi in head_groups:
            break
        if tail_groups and budget - gtok[gi] < 0:
            break
        tail_groups.insert(0, gi)  # the newest group is always kept
        budget -= gtok[gi]
    middle_groups = [gi for gi in range(len(groups))
                     if gi not in head_groups and gi not in tail_groups]
    result.needed = prompt + reserve > limit  # a forced (preview) plan may not be needed yet
    result.head = [i for g in head_groups for i in groups[g]]
    result.middle = [i for g in middle_groups for i in groups[g]]
    result.tail = [i for g in tail_groups for i in groups[g]]
    result.middle_tokens = sum(tok[i] for i in result.middle)
    return result


def low_water(window: int, threshold: float, target: float | None) -> int:
    """Tokens a compaction brings ``prompt + reserve`` down to: ``target × window``, or
    the threshold's limit when there is no target under it (the old, shallow compaction)."""
    limit = int(window * threshold)
    if target is None or target >= threshold:
        return limit
    return int(window * target)


def _is_user(item: Item) -> bool:
    return isinstance(item, Message) and item.role == "user"


def _tail_budget(fixed: int, limit: int, reserve: int, keep_recent: float, head: int) -> int:
    """Tokens the recent turns may keep: a share of the room the items have in the limit.

    A share of the whole limit could exceed that room (small windows, big tool specs):
    then no compaction could ever make the request fit.
    """
    return int(max(0, limit - reserve - fixed - head) * keep_recent)


def preview(context: Context, **settings: Any) -> CompactionPlan:
    """``plan`` with ``force`` on unless asked otherwise: what a compaction would do now
    (clearing older results' text, when that is the compaction it would make)."""
    settings.setdefault("force", True)
    result = plan(context, **settings)
    if result.window:
        result.clear = [i for i, _ in _clearing(context, settings)]
    return result


def render_for_summary(items: list[Item], max_chars: int, per_item: int = 2000) -> str:
    """The items as plain text for the summariser, newest kept when it must be cut."""
    lines = []
    for item in items:
        if isinstance(item, Summary):
            text = f"[earlier summary]\n{item.content}"
        elif isinstance(item, ToolCall):
            code = code_of(item.name, item.arguments)  # python's code, shell's command
            text = f"[tool call {item.name}]\n{code[1] if code else json.dumps(item.arguments)}"
        elif isinstance(item, ToolResult):
            text = f"[tool {'error' if item.error else 'result'}]\n{item.full_output}"
        elif isinstance(item, Message):
            text = f"[{item.role}]\n{item.content}"
        else:
            continue  # reasoning is the model's scratchpad, not a fact
        lines.append(head_tail(text, per_item, lambda n: "[…]"))
    out = "\n\n".join(lines)
    if len(out) > max_chars:
        out = "[…earliest part cut…]\n" + out[-max_chars:]
    return out


def replaced_items(items: list[Item]) -> list[dict[str, Any]]:
    """What a new Summary of ``items`` records: their dicts, older summaries flattened.

    An older Summary contributes its own replaced items, not itself, so ``replaced`` is
    never nested (nesting grew by one per compaction until serialising hit the recursion
    limit). Its dicts are reused as they are: re-serialising them at every compaction
    would make a long session quadratic.
    """
    out: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, Summary):
            out.extend(unfold_dicts(raw_replaced(item)))
        else:
            out.append(held_dict(item))  # a spilled result's plots are not read back
    return out


def truncation_summary(items: list[Item], reason: str, keep_text: bool = True) -> Summary:
    """A Summary that records what was dropped (no model involved).

    A model-written summary among ``items`` keeps its text (unless ``keep_text`` is off):
    it is the distilled facts of everything before it, paid for with a model call, and
    dropping it with the turns after it left the model with a bare "items were removed".
    """
    replaced = replaced_items(items)
    kept = _summary_text(items) if keep_text else ""
    note = (f"[{len(replaced)} earlier items were removed to fit the context window "
            f"({reason}); their details are no longer available.]")
    meta: dict[str, Any] = {"method": "truncate", "reason": reason}
    if kept:
        meta["kept_text"] = kept
        note = (f"{kept}\n\n[Not in the summary above: some later items were removed to fit "
                f"the context window ({reason}); {len(replaced)} items replaced in all.]")
    return Summary(content=note, replaced=replaced, meta=meta)


def _summary_text(items: list[Item]) -> str:
    """The newest model-written summary text among ``items`` ('' when there is none)."""
    for item in reversed(items):
        if isinstance(item, Summary):
            if item.meta.get("method") == "summary":
                return item.content
            if item.meta.get("kept_text"):
                return str(item.meta["kept_text"])
    return ""


# Neutral on purpose: "call again" would have a model re-run python code (its effects too).
CLEARED_NOTE = "[… {n:,} characters of this result cleared to fit the context window]"
_CLEARED_HEAD = 80  # characters of the result's first line the stub keeps, as a reminder


def cleared(item: ToolResult) -> str:
    """The text a cleared result had ('' when it was not cleared)."""
    text = item.meta.get("cleared_output")
    return text if isinstance(text, str) else ""


def _stub(item: ToolResult) -> ToolResult:
    """``item`` with its text cleared: the first line's start and a note, the text in meta.

    Images it carried for the model (``meta["images"]``) are cleared with it, kept as
    ``meta["cleared_images"]``.
    """
    head = item.output[:_CLEARED_HEAD].split("\n", 1)[0]
    output = f"{head}\n{CLEARED_NOTE.format(n=len(item.output))}"
    meta = {k: v for k, v in item.meta.items() if k != "images"}
    meta["cleared_output"] = item.output
    if item.meta.get("images"):
        meta["cleared_images"] = item.meta["images"]
    return ToolResult(item.call_id, output, item.error, item.name, raw_outputs(item),
                      item.execution_count, meta)


def clear_results(ctx: Context, settings: dict[str, Any]) -> int:
    """Clear the oldest tool results' text, toward the low-water mark; how many were cleared."""
    chosen = _clearing(ctx, settings)
    for i, stub in chosen:
        ctx[i] = stub
    return len(chosen)


def _clearing(ctx: Context, settings: dict[str, Any]) -> list[tuple[int, ToolResult]]:
    """The results to clear now, with their stubs (oldest first); [] to summarise instead.

    The newest turn group keeps its results (the model is reading them); a result whose
    stub would not be shorter is left alone. When even every stub would leave the request
    over the threshold, nothing is cleared: a summary of the full texts is the compaction
    to make. Short of the low-water mark but under the threshold, the stubs are made: the
    next clearing then costs the prompt cache only the newest turns, as a plain step does.
    """
    window, reserve = int(settings.get("window") or 0), int(settings.get("reserve") or 0)
    threshold = float(settings.get("threshold", 0.8))
    limit = int(window * threshold)
    low = low_water(window, threshold, settings.get("target"))
    if not window or low >= limit:
        return []  # no low-water mark under the threshold: compaction as before
    groups = turn_groups(list(ctx))
    newest = set(groups[-1]) if groups else set()
    counter = ctx.counter
    prompt = ctx.tokens + int(settings.get("extra_tokens") or 0) + reserve
    chosen: list[tuple[int, ToolResult]] = []
    for i, item in enumerate(ctx):
        if prompt <= low:
            break
        if i in newest or not isinstance(item, ToolResult) or cleared(item):
            continue
        stub = _stub(item)
        saved = ctx.item_tokens(i) - counter.scaled(counter.item(stub))
        if saved > 0:
            chosen.append((i, stub))
            prompt -= saved
    return chosen if prompt <= limit else []


def shrink_largest_result(context: Context, over: int, keep_last: bool = True) -> bool:
    """Cut the biggest tool result's text (the notebook keeps its full outputs); False if none."""
    results = [i for i, it in enumerate(context) if isinstance(it, ToolResult)]
    if not results:
        return False
    i = max(results, key=lambda j: len(context[j].output))  # type: ignore[union-attr]
    item: ToolResult = context[i]  # type: ignore[assignment]
    keep = max(200, len(item.output) - over * 4 - 200)
    if keep >= len(item.output):
        return False
    cut = len(item.output) - keep
    output = head_tail(item.output, keep, lambda n: f"[… {n} characters cut to fit the context window …]")
    new = ToolResult(item.call_id, output, item.error,
                     item.name, raw_outputs(item), item.execution_count,
                     {**item.meta, "cut_chars": cut})
    context[i] = new
    return True


def settings_for(agent: AgentView, context: Context | None = None) -> dict[str, Any]:
    """``plan`` settings from an agent's current traits (window, threshold, reserve…)."""
    ctx = agent.context if context is None else context
    window = agent.window_in_force
    reserve = agent.request_max_tokens or min(2048, window // 4)
    tools_tokens = ctx.counter.scaled(ctx.counter.specs(agent.tools.specs()))
    return dict(window=window, threshold=agent.compact_threshold, reserve=reserve,
                keep_recent=agent.compact_keep_recent, extra_tokens=tools_tokens,
                target=agent.compact_target)


def bind_settings(context: Context, agent: AgentView) -> None:
    """Make ``context.compaction_preview()`` use ``agent``'s settings as they are when asked.

    Why: the preview must show what the next step would do, before the first step and
    right after a setting changed.
    """
    ref = weakref.ref(agent)

    def source() -> dict[str, Any]:
        owner = ref()
        return settings_for(owner, context) if owner is not None else {}

    context.settings_source = source


async def fit_window(agent: AgentView, emit: Callable[[Any], None],
                     asked: Callable[[], ModelRequest] | None = None) -> str | None:
    """Compact ``agent.context`` until the next request fits; a one-line problem, or None.

    ``asked``: the request the step would send now (as it goes on the wire: text mode's
    rewrite too), for a summary asked in the conversation itself (``compact_summary``).
    """
    from ..context.events import ContextCompacted

    ctx = agent.context
    settings = settings_for(agent)
    window, reserve = settings["window"], settings["reserve"]
    p = plan(ctx, **settings)
    if not p.needed:
        return None
    before = p.prompt_tokens
    n = clear_results(ctx, settings)
    if n:  # down to the low-water mark without a model call
        emit(ContextCompacted(before=before, after=plan(ctx, **settings).prompt_tokens,
                              cleared=n))
        return None
    # A middle that is only an earlier summary has nothing new to summarise.
    if any(not isinstance(ctx[i], Summary) for i in p.middle):
        summary = await _summarise(agent, [ctx[i] for i in p.middle], p, emit, asked)
        _replace(ctx, p.middle, summary)
    _hard_truncate(ctx, settings)  # a huge recent turn, or a summary that was not enough
    after = plan(ctx, **settings).prompt_tokens
    emit(ContextCompacted(before=before, after=after, summary=_last_summary(ctx)))
    if after + reserve > window:
        return (f"the context does not fit the window even after compaction: ~{after} tokens "
                f"+ {reserve} reserved for the reply > context_window={window}")
    return None


async def _summarise(agent: AgentView, items: list[Item], p: CompactionPlan,
                     emit: Callable[[Any], None],
                     asked: Callable[[], ModelRequest] | None = None) -> Summary:
    """A model-written Summary of ``items``; a truncation Summary if that fails."""
    from ..context.events import Notice, Usage
    from ..models.base import TurnComplete

    counter = agent.context.counter
    # No longer than the room left once the middle is gone, so it fits without truncation.
    # A deep compaction's summary fits under the low-water mark too.
    free = (p.low or p.limit) - p.reserve - (p.prompt_tokens - p.middle_tokens)
    summary_tokens = max(64, min(1024, p.limit // 4, free))
    if agent.compact_summary == "conversation" and asked is not None:
        text = await _summary_in_conversation(agent, asked(), p, summary_tokens, emit)
        if text:
            return Summary(text, replaced=replaced_items(items),
                           meta={"method": "summary", "asked": "conversation",
                                 "tokens_replaced": p.middle_tokens})
    max_chars = int(max(200, p.limit - summary_tokens - 300) * 4 / counter.scale * 0.8)
    request = ModelRequest(system=SUMMARY_PROMPT, items=[Message(
        "user", render_for_summary(items, max_chars))], tools=[], temperature=0,
        max_tokens=summary_tokens)
    try:
        text = ""
        async for event in agent.client.stream(request):
            if isinstance(event, TurnComplete):
                text = event.turn.text.strip()
                agent.usage.add(Usage.from_server(event.turn.usage) or Usage(requests=1))
        if not text:
            raise ValueError("the summary came back empty")
        return Summary(text, replaced=replaced_items(items),
                       meta={"method": "summary", "tokens_replaced": p.middle_tokens})
    except Exception as exc:  # any failure: fall back to truncation, keep running
        emit(Notice(f"Summarising for compaction failed ({one_line(exc)}); "
                    "dropping the oldest items instead.", "warning"))
        return truncation_summary(items, "summary failed")


async def _summary_in_conversation(agent: AgentView, request: ModelRequest, p: CompactionPlan,
                                   max_tokens: int, emit: Callable[[Any], None]) -> str:
    """The summary asked at the end of the request the step would send ('' when it cannot
    be asked so, or its reply has no text: the caller then asks the separate way).

    Why: the request shares the previous one's whole prefix, so a server's prompt cache
    reads it back (measured: a separate summary request shares ~4 tokens with the
    conversation, and on a server that keeps one cached prompt it also evicts the
    conversation's, so the turn after it evaluates its whole prompt again). Tools and
    ``tool_choice`` stay as they were (a change of either is a new prefix, for Anthropic
    too); a call in the reply is not run, only its text is kept.
    """
    from ..context.events import Notice, Usage
    from ..models.base import TurnComplete
    from ..models.written_calls import recover_calls

    counter = agent.context.counter
    ask = Message("user", SUMMARY_REQUEST)
    if p.window and p.prompt_tokens + counter.scaled(counter.item(ask)) + max_tokens > p.window:
        return ""  # no room for the question and its answer: the separate request is smaller
    request = replace(request, items=[*request.items, ask], max_tokens=max_tokens)
    try:
        text, names = "", [t["name"] for t in request.tools] or agent.tools.names
        async for event in agent.client.stream(request):
            if isinstance(event, TurnComplete):
                text = recover_calls(event.turn.text, list(names))[0].strip()
                agent.usage.add(Usage.from_server(event.turn.usage) or Usage(requests=1))
        return text
    except Exception as exc:  # the separate request is tried next
        emit(Notice(f"Summarising in the conversation failed ({one_line(exc)}); asking "
                    "for it separately.", "warning"))
        return ""


def _hard_truncate(ctx: Context, settings: dict[str, Any]) -> None:
    """Drop the oldest items, then keep fewer recent turns, then cut the biggest result.

    Every pass either shrinks the context or keeps less next time, so it ends; the old
    loop re-wrapped a lone summary in another one, growing it instead.
    """
    keep = float(settings["keep_recent"])
    for _ in range(64):
        p = plan(ctx, **{**settings, "keep_recent": keep})
        over = p.prompt_tokens + p.reserve - p.limit
        if not p.needed or over <= 0:
            return
        middle = [ctx[i] for i in p.middle]
        if middle and not (len(middle) == 1 and isinstance(middle[0], Summary)):
            _replace(ctx, p.middle, truncation_summary(middle, "still too large"))
        elif keep > 0:
            keep = keep / 2 if keep > 0.05 else 0.0  # then only the newest turn stays
        elif shrink_largest_result(ctx, over):
            continue
        elif middle and _summary_text(middle):
            # Last resort: the summary's own text is what does not fit.
            _replace(ctx, p.middle, truncation_summary(middle, "still too large",
                                                       keep_text=False))
        else:
            return


def _replace(ctx: Context, indices: list[int], summary: Summary) -> None:
    drop = set(indices)
    kept = [it for i, it in enumerate(ctx) if i not in drop]
    kept.insert(min(indices), summary)
    ctx[:] = kept


def _last_summary(ctx: Context) -> Summary | None:
    return next((it for it in reversed(list(ctx)) if isinstance(it, Summary)), None)
