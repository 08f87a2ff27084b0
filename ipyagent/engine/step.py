"""One step of the loop, in five phases: prepare → request → record → run calls → decide stop.

``run_step`` reads top to bottom. A ``StepRun`` binds what every phase shares — the agent,
the ``Step`` being filled in, when it started, who listens — so a phase only says what it
does; a phase that ends the step raises ``Stop`` and ``run_step`` finishes it in one place.
Tool calls reach the tools only through ``Executor.execute(call)``; the approval before it,
and the secret redaction and audit record around it, happen here.
"""

from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING, Any, Callable

from .._util.nesting import MAX_NESTING, bounded, deeper
from .._util.pyast import filter_probe, iterated, last_assigned, stateful, tested_in_loop
from .._util.text import head_tail, one_line
from ..context.audit import decision_record
from ..context.decisions import Decision, utc_now
from ..context.events import (
    AnswerCut,
    Event,
    Notice,
    ReplyRead,
    Step,
    StepFinished,
    StepStarted,
    StopReason,
    ToolCallDecided,
    ToolCallFinished,
    ToolCallRequested,
    ToolOutput,
    Usage,
    live_emitter,
)
from ..context.evidence import ASKS_FOR_A_CALL, CHECK_KEY, CONTINUE_KEY, LIMIT_KEY, run_items
from ..context.items import (
    NO_OUTPUT,
    VALUES,
    Item,
    Message,
    Reasoning,
    Summary,
    ToolCall,
    ToolResult,
    kernel_output,
    new_call_id,
)
from ..errors import ConfigError, ModelConnectionError, ModelError
from ..kernel.copies import MAX_COPIES_PER_CALL, copy_missing
from ..models.base import ClientNotice, Discarded, ModelRequest, Retrying, Turn, TurnComplete
from ..models.overflow import context_overflow, overflow_hint
from ..models.profiles.choice import ProfileChoice
from ..models.scaffolding import Cut, cut_notice, cut_scaffolding
from ..models.text_tools import AS_WRITTEN, FINAL_ANSWER, as_text_request, as_written, example_arguments
from ..models.tool_mode import (
    MODE_KEY,
    SWITCH_KEY,
    TEXT_ALREADY,
    Wire,
    dropped_tools,
    empty_stream,
    refused_tools,
    switch_notice,
    text_start_notice,
)
from ..models.written_calls import (
    PROBLEM,
    REPAIRED,
    flat_answer,
    how_to_call,
    recover_calls,
    repaired_code,
)
from ..tools.base import Executor, Toolbox
from ..tools.python import ERROR_NOTE, note_fix
from ..trust.redaction import LiveRedactor, redact_result, redaction_notice
from ..trust.secrets import key_envs, secret_values
from .compaction import fit_window
from .profile_use import for_text, resolve, text_from_the_start
from .verify import look_again, shown_code_call, verify_on

if TYPE_CHECKING:
    import logging

    from .view import AgentView

__all__ = ["run_step", "StepRun", "Stop", "CircuitBreaker", "emit", "CONTINUE_PROMPT"]

Listener = Callable[[Event], Any]

_LENGTH_REASONS = ("length", "max_tokens", "max_output_tokens")
CONTINUE_PROMPT = ("[ipyagent] Your reply was cut off by the output token limit. Continue "
                   "exactly where you stopped, without repeating yourself.")
# What the model reads when it makes the same call again and gets the same result (a small
# model that has its answer often calls the tool again instead of answering).
REPEAT_NOTE = ("this is the same call as the one before, with the same result: if it answers "
               "the task, reply to the user with it now instead of calling a tool again")
# A failing call made again: "if it answers the task" would invite the failure as an answer.
REPEAT_FAILED_NOTE = ("this is the same call as the one before, and it failed the same way: as "
                      "written it cannot work. Change what the error points at (a name, a path, "
                      "a separator, the syntax) and call again, or, if no other way can work, "
                      "tell the user it failed")
REPEAT_STOP = "the same call and result again: the run stops here"
_PRINTED_KEPT = 4000  # characters of an interrupted call's output the model is told


def emit(listeners: list[Listener], event: Event, log: logging.Logger) -> None:
    """Give ``event`` to every listener; one that fails is logged, never breaks the run."""
    for listener in listeners:
        try:
            listener(event)
        except Exception as exc:  # a broken display must never break the run
            log.warning("ipyagent listener %r failed: %s", listener, exc)


class Stop(Exception):
    """Raised by a phase that ends the step: the stop reason and, maybe, why."""

    def __init__(self, reason: StopReason, why: str | None = None) -> None:
        super().__init__(why or reason)
        self.reason, self.why = reason, why


class CircuitBreaker:
    """Within a run: consecutive failures of one tool (trips at ``Agent.circuit_breaker``),
    and the same call made again with the same result (small models loop so)."""

    def __init__(self) -> None:
        self.row: tuple[str, int] = ("", 0)  # the tool failing, and how many times in a row
        self.last: tuple[str, str, str] | None = None  # the last call and its result
        self.repeats = 0  # how many times in a row ``last`` came again

    def reset(self) -> None:
        """A new run starts a new row."""
        self.row = ("", 0)
        self.last, self.repeats = None, 0

    def repeated(self, call: ToolCall, result: ToolResult) -> int:
        """How many times in a row this exact call just gave this exact result again (0: new)."""
        seen = (call.name, json.dumps(call.arguments, sort_keys=True, default=str), result.output)
        self.repeats = self.repeats + 1 if seen == self.last else 0
        self.last = seen
        return self.repeats

    def count(self, call: ToolCall, result: ToolResult, limit: int) -> bool:
        """Count ``result``; True when ``call``'s tool has now failed ``limit`` times in a row."""
        if result.meta.get("denied") or result.meta.get("skipped") or not limit:
            return False  # nothing ran: neither a failure of the tool nor a success
        if result.error:
            name, count = self.row
            count = count + 1 if name == call.name else 1
            self.row = (call.name, count)
            return count >= limit
        self.row = ("", 0)  # any success breaks the row
        return False


class StepRun:
    """One step being run: the agent, its ``Step``, when it started and who listens."""

    def __init__(self, agent: AgentView, index: int, listeners: list[Listener]) -> None:
        self.agent = agent
        self.step = Step(index=index)
        self.listeners = listeners
        self.started = time.perf_counter()
        self.executor: Executor = agent.tools  # python, file, MCP and user tools behind one call
        self.printed: dict[str, list[str]] = {}  # running calls' output, by call id
        self.records: dict[str, dict[str, Any]] = {}  # running calls' decisions, by call id
        self.wire: Wire = agent.tool_mode_in_force  # how this step's request carries the tools
        self.switched: str | None = None  # why "auto" switched to text in this step
        self.profile = ProfileChoice()  # the model profile (``request`` finds it)
        self.reply_must = ""  # what the grammar demands of the reply, beyond ``_reply_must``
        self.discarded: list[str] = []  # replies asked again in this step (``_repeats_last_call``)
        self.resample = False  # asked again at ``repeat_temperature`` (``_repeats_not_run``)
        self.answer_only = False  # max_steps is reached: the reply's calls are not run

    def emit(self, event: Event) -> None:
        """Tell every listener."""
        emit(self.listeners, event, self.agent.log)

    def finish(self, stop: StopReason | None, why: str | None = None) -> Step:
        """Stamp the step's outcome and duration, and say it is finished."""
        step = self.step
        step.stop_reason, step.error = stop, why
        step.duration = time.perf_counter() - self.started
        if stop == "error" and why:
            self.emit(Notice(why, "error"))
        self.emit(StepFinished(step))
        return step

    def switch_to_text(self, why: str, *, resend: bool) -> None:
        """``auto``: text from now on, for the rest of the conversation; said once."""
        self.agent.tool_mode_state.text_because = why
        self.switched = why
        if resend:  # else this turn's request went native: the next one goes as text
            self.wire = "text"
        agent = self.agent
        left_out = agent.text_mode_offer(agent.offered_tools(), agent.context.system)[2]
        agent.tool_mode_state.lean_said = True
        self.emit(Notice(switch_notice(why, resend=resend) + _leaves_out(left_out), "warning"))

    def say_text_mode_leaves_out(self, left_out: list[str]) -> None:
        """Once per conversation (tool_mode 'text' from the start): what text mode leaves out."""
        state = self.agent.tool_mode_state
        if left_out and not state.lean_said:
            state.lean_said = True
            self.emit(Notice(_leaves_out(left_out).strip(), "info"))

    def check_budget(self) -> None:
        """Stop when ``Agent.max_tokens`` is spent."""
        agent = self.agent
        if agent.max_tokens and agent.usage.total >= agent.max_tokens:
            raise Stop("budget", f"token budget spent ({agent.usage.total} of {agent.max_tokens})")


async def run_step(agent: AgentView, index: int, listeners: list[Listener], *, steps_so_far: int,
                   breaker: CircuitBreaker, answer_only: bool = False) -> Step:
    """One iteration. Never raises for model/tool failures: they end up in the Step.
    ``answer_only``: the step after max_steps was reached (``answer_at_limit``)."""
    run = StepRun(agent, index, listeners)
    if answer_only:
        run.answer_only, run.reply_must = True, "final"  # under a grammar: words, no call
    run.emit(StepStarted(index))
    try:
        run.check_budget()
        await prepare(run)
        asked = time.perf_counter()
        try:
            turn, estimated_raw = await request(run)
        finally:
            run.step.model_time += time.perf_counter() - asked
        cut = record(run, turn, estimated_raw)
        if run.answer_only:
            _not_run_at_limit(run)
        await run_calls(run, breaker)
        decide_stop(run, turn, cut, steps_so_far)
    except Stop as stop:
        return run.finish(stop.reason, stop.why)
    return run.finish(None)


# -- prepare -------------------------------------------------------------------------------
async def prepare(run: StepRun) -> None:
    """Before compaction (MCP tools count too): say what is pending, offer MCP tools."""
    for notice in run.agent.pending_notices():
        run.emit(notice)
    try:
        await run.agent.mcp.prepare(run.emit)
    except Exception as exc:  # MCP trouble must not stop a run that may not need it
        run.emit(Notice(f"MCP servers: {exc}", "warning"))


def _leaves_out(left_out: list[str]) -> str:
    """The sentence on the tools a text-mode request does not offer ('' when none)."""
    if not left_out:
        return ""
    keep = {"shell": "Agent.shell_tool = 'on'", "load_skill": "a skill of your own, or -s NAME"}
    return (f" Text mode offers fewer tools (small models do better with fewer): not "
            f"{', '.join(left_out)} (to keep them: {'; '.join(keep[n] for n in left_out if n in keep)}).")


# -- request -------------------------------------------------------------------------------
async def request(run: StepRun) -> tuple[Turn, int]:
    """Fit the window, ask the model, stream its events -> the turn and the estimate sent.

    Asked again at most twice: once after the server said "too long" (our estimate was low:
    another tokenizer, no usage reported; count as densely as it does, compact, ask once
    more), and once when ``tool_mode = "auto"`` switches to text because the server refused
    or dropped the tools (the same request, now carrying them as text).
    """
    agent = run.agent
    overflow_tried = False
    run.profile = await resolve(agent, run.emit)
    why_text = text_from_the_start(agent, run.profile) if run.wire == "native" else None
    if why_text:  # its template cannot carry tools: they go as text from the first request
        agent.tool_mode_state.text_because = run.switched = why_text
        run.wire = "text"
        run.emit(Notice(text_start_notice(why_text), "info"))
    while True:
        if agent.window_in_force:
            problem = await fit_window(agent, run.emit, lambda: _on_wire(run, _build(run)))
            if problem:
                raise Stop("error", problem)
        req = _build(run, say=True)
        tools_raw = agent.context.counter.specs(req.tools)
        estimated_raw = agent.context.raw_tokens + tools_raw
        auto_native = run.wire == "native" and agent.tool_mode == "auto" and bool(req.tools)
        if run.wire == "text" and run.profile.grammar is None:  # asked once, when first needed
            run.profile = await for_text(agent, run.profile, run.emit,
                                         as_text_request(req, run.profile.profile))
        try:
            turn = await _stream(run, _on_wire(run, req))
        except (ModelError, ConfigError) as exc:  # ConfigError: e.g. the API key is not set
            overflow = context_overflow(exc)
            said = overflow.window if overflow is not None else None
            learns = said if said and not agent.window_in_force else None
            if overflow is not None and (agent.window_in_force or learns) and not overflow_tried:
                overflow_tried = True
                if learns:  # "0: unknown" until the server said it
                    agent.learn_window(learns)
                scale = agent.context.counter.count_denser(estimated_raw, overflow.prompt_tokens)
                counted = (f" (it counted {overflow.prompt_tokens:,} tokens)"
                           if overflow.prompt_tokens else "")
                learned = (f" of {learns:,} tokens; Agent.context_window is 0 (unknown), so the "
                           f"context is compacted to fit {learns:,} from now on (set "
                           "Agent.context_window to choose)" if learns else "")
                run.emit(Notice(
                    f"The server refused the request as longer than its context "
                    f"window{learned}{counted}; counting tokens ×{scale:.2f}, compacting and "
                    "trying once more.", "warning"))
                continue
            _bill_failed_reply(run, exc)
            why = (refused_tools(exc) or empty_stream(exc)) if auto_native and not overflow else None
            if why:
                run.switch_to_text(why, resend=True)
                continue
            hint = overflow_hint(agent.context_window) if overflow else ""
            if isinstance(exc, ModelConnectionError) and str(exc).startswith("could not connect"):
                from ..models.providers import server_hint

                hint = server_hint(exc.url)
            raise Stop("error", str(exc) + hint) from None
        if turn is None:
            raise Stop("error", "the model client ended without a reply")
        dropped = _dropped(run, req, turn, estimated_raw - tools_raw, tools_raw) if auto_native else None
        if dropped:
            _bill(run, Usage.from_server(turn.usage))  # spent, though the reply is not kept
            run.emit(Discarded("the tools did not reach the model"))  # displays strike it
            run.switch_to_text(dropped + "; the reply above is discarded", resend=True)
            continue
        again = _repeats_not_run(run, turn)
        if again:
            _bill(run, Usage.from_server(turn.usage))
            run.discarded.append(turn.text)
            run.resample = True
            run.emit(Discarded(f"the model wrote again a {again} call ipyagent would not run; "
                               f"asked once more at temperature {agent.repeat_temperature:g}"))
            continue
        repeat = _repeats_last_call(run, turn)
        if repeat:
            _bill(run, Usage.from_server(turn.usage))
            run.discarded.append(turn.text)
            run.reply_must = "final"
            run.emit(Discarded(f"the model made its last {repeat} call again, whose result it "
                               "has; asked for its answer instead"))
            continue
        return turn, estimated_raw


RESAMPLE_SEED = 33  # fixed, so a re-asked run repeats on the same server


def _repeats_not_run(run: StepRun, turn: Turn) -> str | None:
    """The tool's name when the reply's first call is one ``_not_run_again`` would not run
    (word for word the call before, which failed, printed nothing, or printed what the
    check questioned), the first time in this step; None otherwise.

    Measured at 1.5B (greedy): told its call was not run and why, with the values its
    failing line read, the model wrote the same call three and four more times, until the
    circuit breaker (squares-file, coldest-city, sensor-mean, json-category). The reply is
    set aside and asked once more at ``repeat_temperature`` (fixed seed); what comes back
    is kept, the same call included (then not run, as before)."""
    agent = run.agent
    if run.resample or run.answer_only or agent.repeat_temperature <= 0 or not verify_on(agent):
        return None
    calls = turn.tool_calls or (recover_calls(turn.text, _offered_names(run),
                                              run.profile.profile.syntax.shape)[1]
                                if run.wire == "text" else [])
    if not calls:
        return None
    first = ToolCall(new_call_id(), calls[0].name, dict(calls[0].arguments))
    if _not_run_again(agent, first) is None or _fix_for(agent, first) is not None:
        return None  # runs, or runs with the change its note gave (``_fix_for``)
    return first.name


def _repeats_last_call(run: StepRun, turn: Turn) -> str | None:
    """The tool's name when this text-mode reply starts with the very call the model made
    last, whose result came back without an error, or with a python call whose code is
    that result (measured at 0.5B: with its answer printed, it wrote the same call again,
    then again until the circuit breaker, or ran 1267650600228229401496703205376 as code;
    asked once more with the grammar holding the reply to one ``final_answer`` call, it
    answered; held to words instead, it wrote "NULL" or imitated the tool's result). Only under a
    grammar, with ``verify_answers`` in force, once a step, and never for a reply that
    answers a check (the check asked for a call)."""
    agent = run.agent
    if (run.wire != "text" or not run.profile.grammar or run.reply_must
            or _reply_must(agent) == "call" or not verify_on(agent)):
        return None
    items = list(agent.context)
    if len(items) < 2 or not isinstance(items[-1], ToolResult) or items[-1].error:
        return None
    last_call = items[-2]
    if not isinstance(last_call, ToolCall) or last_call.id != items[-1].call_id:
        return None
    calls = turn.tool_calls or recover_calls(turn.text, _offered_names(run),
                                             run.profile.profile.syntax.shape)[1]
    if not calls:
        return None
    first, printed = calls[0], items[-1].output.strip()
    echoed = (first.name == "python" and bool(printed)
              and str(first.arguments.get("code", "")).strip() == printed)
    if (first.name, first.arguments) != (last_call.name, last_call.arguments) and not echoed:
        return None
    return last_call.name


def _build(run: StepRun, say: bool = False) -> ModelRequest:
    """The step's request from the context as it is now (``say``: tell what text mode
    leaves out, once)."""
    agent = run.agent
    tools, system = agent.offered_tools(), agent.context.system
    if run.wire == "text":
        tools, system, left_out = agent.text_mode_offer(tools, system)
        if say:
            run.say_text_mode_leaves_out(left_out)
    temperature, seed, items = agent.temperature, None, list(agent.context)
    if run.resample:  # the same call again was set aside: asked once more, sampling
        items, folded = _without_repeats(items)
        # Another seed each time: with the repeats folded away, the prompt of a later
        # re-ask is the first one's again.
        temperature = max(temperature or 0.0, agent.repeat_temperature)
        seed = RESAMPLE_SEED + folded
    return ModelRequest(
        system=system, items=items,
        tools=[t.spec() for t in tools], seed=seed,
        temperature=temperature, max_tokens=agent.request_max_tokens,
        # At the limit a call can only be refused: none is demanded ('required', a tool's name).
        tool_choice=("none" if run.answer_only and agent.tool_choice not in (None, "auto", "none")
                     else agent.tool_choice), prompt_cache=agent.prompt_cache,
        cache_key=agent.prompt_cache_key if agent.prompt_cache else None)


def _without_repeats(items: list[Item]) -> tuple[list[Item], int]:
    """``items`` without this run's calls ipyagent did not run as repeats (each with its
    result, and with the reply's text and reasoning when it was that turn's only call), and
    how many there were.

    Why: at 1.5B, re-asked after writing a failing call again, the model wrote it a third,
    fourth and fifth time (fr-rows, coldest-city): each not-run copy in the prompt is one
    more example of that call. The re-ask sees the failing call once, with its error and
    notes; the context keeps every copy (the card and the transcript show them). An earlier
    task's copies stay: its prompt is what the server holds."""
    _, this_run = run_items(items)
    kept: list[Item] = items[:len(items) - len(this_run)]
    folded = 0
    for item in this_run:
        if not (isinstance(item, ToolResult) and item.meta.get("skipped") in NOT_RUN_AGAIN):
            kept.append(item)
            continue
        # Its call is the latest of that id (a client may reuse ids: not by id alone).
        at = next((n for n in range(len(kept) - 1, -1, -1) if isinstance(kept[n], ToolCall)
                   and kept[n].id == item.call_id), None)  # type: ignore[union-attr]
        if at is not None:
            # The turn it came in: back to the last result or user message. Its text and
            # reasoning go too when it was the turn's only call (no half turn is left).
            start = at
            while start > 0 and not _turn_ends(kept[start - 1]):
                start -= 1
            alone = not any(isinstance(i, ToolCall) for i in kept[start:at] + kept[at + 1:])
            del kept[start if alone else at:at + 1]
        folded += 1
    return kept, folded


def _turn_ends(item: Item) -> bool:
    """``item`` is not part of a model's turn: a result, or a message to the model."""
    return isinstance(item, (ToolResult, Summary)) or (
        isinstance(item, Message) and item.role == "user")


def _on_wire(run: StepRun, req: ModelRequest) -> ModelRequest:
    """``req`` as this step sends it (text mode carries the tools in the prompt, in the
    profile's call format, constrained by its grammar where the server takes one)."""
    if run.wire != "text":
        return req
    return as_text_request(req, run.profile.profile, grammar=bool(run.profile.grammar),
                           reply_must=run.reply_must or _reply_must(run.agent))


def _reply_must(agent: AgentView) -> str:
    """What the grammar demands of the reply to ipyagent's answer check, if that is what the
    model is answering: a call where the check asks to run something (``ASKS_FOR_A_CALL``)
    or after its failing or silent call was not run again (not after a questioned one: its
    value may be right), words after an empty reply."""
    last = agent.context[-1] if len(agent.context) else None
    if isinstance(last, ToolResult) and last.meta.get("skipped") in (SAME_FAILURE, SAME_SILENCE):
        # Told that its failing call was not run, in words the 1.5B restated the note ("The
        # error points at … call again") instead of changing the call.
        return "call"
    rules = last.meta.get(CHECK_KEY, {}).get("rules", []) if isinstance(last, Message) else []
    if any(rule in ASKS_FOR_A_CALL for rule in rules):
        return "call"
    return "say" if "empty_answer" in rules else ""


def _dropped(run: StepRun, req: ModelRequest, turn: Turn, without_tools: int,
             tools: int) -> str | None:
    """Why the tools seem not to have reached the model (a reply with no call at all whose
    reported prompt is about the size of the messages alone); None otherwise.

    Only the first request of a conversation is judged: that is where a template shows
    whether it renders tools, and later ones may be counted short by a server's prompt cache.
    """
    usage = Usage.from_server(turn.usage)
    if usage is None or usage.estimated or turn.tool_calls:
        return None
    if any("turn" in item.meta or isinstance(item, Summary) for item in run.agent.context):
        return None
    if recover_calls(turn.text, [t["name"] for t in req.tools])[1]:
        return None  # it wrote a call: it saw the tools
    return dropped_tools(usage.input, without_tools, tools)


async def _stream(run: StepRun, req: ModelRequest) -> Turn | None:
    """The model's reply to ``req``; its live events go to the listeners meanwhile.

    A ``Discarded`` reply (the stream broke; the client asks again) is only shown as void:
    the turn is built from the ``TurnComplete`` alone, and only its tokens are billed.
    """
    turn = None
    async for event in run.agent.client.stream(req):
        if isinstance(event, TurnComplete):
            turn = event.turn
        elif isinstance(event, Discarded):
            _bill(run, Usage.from_server(event.usage))
            run.emit(event)
        elif isinstance(event, (Retrying, ClientNotice)):
            run.emit(Notice(event.message, "warning"))
        else:
            run.emit(event)  # type: ignore[arg-type]
    return turn


def _bill_failed_reply(run: StepRun, exc: Exception) -> None:
    """Nothing of a failed reply is appended (the context stays valid to retry), but tokens
    the provider billed for it (an error inside a stream) still count."""
    partial = getattr(exc, "turn", None)
    _bill(run, Usage.from_server(getattr(partial, "usage", None)))


def _bill(run: StepRun, spent: Usage | None) -> None:
    """Count tokens the server reported for a reply that is not kept (the step's and the session's)."""
    if spent is not None:
        run.step.usage.add(spent)
        run.agent.usage.add(spent)


# -- record --------------------------------------------------------------------------------
def _bounded_call(call: ToolCall) -> ToolCall:
    """``call``, its arguments not run if they nest past ``MAX_NESTING`` levels (kept as
    their text, which the call's error quotes), its meta's values bounded so too: such a
    value in the context made every later save of the run fail (``_util.nesting``)."""
    if deeper(call.arguments):
        call.raw_arguments = f"(nested over {MAX_NESTING} levels) {bounded(call.arguments)}"
        call.arguments = {}
    if isinstance(call.meta, dict) and deeper(call.meta):
        call.meta = {key: bounded(value) for key, value in call.meta.items()}
    return call


def record(run: StepRun, turn: Turn, estimated_raw: int) -> bool:
    """Bill and calibrate, append the turn's items; True when the reply was cut at the limit."""
    agent, step = run.agent, run.step
    written, native_calls = turn.text, bool(turn.tool_calls)
    if native_calls:
        _repair_native_calls(run, turn.tool_calls)
    if not turn.tool_calls and turn.text:
        offered = _offered_names(run)
        _recover_written_calls(run, turn, offered)
        if not turn.tool_calls and turn.text:
            _run_shown_code(run, turn, offered)
    if turn.text != written:  # a display that streamed the reply shows it as read
        run.emit(ReplyRead(turn.text))
    cut = _cut_scaffolding(run, turn)
    if deeper(turn.usage):  # kept in the items' meta: it would make every later save fail
        turn.usage = None
    if not isinstance(turn.finish_reason, str):  # a server's list or number: unusable, unhashable
        turn.finish_reason = None
    step.text, step.tool_calls, step.finish_reason = turn.text, turn.tool_calls, turn.finish_reason
    # No count from the server: the request's own estimate (context and tool specs, as the
    # footer's meter and the context table count it), and the reply's.
    counter = agent.context.counter
    reply = Usage.from_server(turn.usage) or Usage(
        counter.scaled(estimated_raw),
        counter.scaled(counter.raw(turn.text) + sum(counter.item(c) for c in turn.tool_calls)) or 1,
        1, estimated=True)
    agent.usage.add(reply)
    step.usage.add(reply)  # on top of the tokens of any reply discarded before it
    if not reply.estimated and reply.input:
        agent.context.counter.calibrate(estimated_raw, reply.input)
    first = len(agent.context)
    if turn.reasoning is not None:
        agent.context.append(turn.reasoning)
    if turn.text or not turn.tool_calls:
        agent.context.append(Message("assistant", turn.text,
                                     meta={"cut": cut.as_meta()} if cut else {}))
    fix = _fix_for(agent, turn.tool_calls[0]) if turn.tool_calls and not run.answer_only else None
    if fix is not None:
        call = turn.tool_calls[0]
        call.arguments, call.meta[NOTE_FIXED] = {**call.arguments, "code": fix["code"]}, fix["what"]
        run.emit(Notice("The model wrote its failing python call again, word for word: ipyagent "
                        f"runs it with the change its note gave ({fix['what']}); the code shown "
                        "is what runs.", "info"))
    for call in turn.tool_calls:
        agent.context.append(_bounded_call(call))
    made = [item for item in list(agent.context)[first:] if not isinstance(item, Reasoning)]
    if (run.wire == "text" and not native_calls and cut is None and made and written.strip()
            and (turn.tool_calls or turn.text != written)  # it goes back as it ran:
            and not any(REPAIRED in c.meta or NOTE_FIXED in c.meta for c in turn.tool_calls)):
        # Calls or an answer read from the reply: the next request writes it back as it was.
        content = made[0].content if isinstance(made[0], Message) else ""
        made[0].meta[AS_WRITTEN] = as_written(
            written, content, [c for c in made if isinstance(c, ToolCall)])
    # What a replay needs beyond the items: the turn's usage and finish reason.
    # And the mode its request went in, and why "auto" switched at this turn (tool_mode).
    agent.context[first].meta["turn"] = {"step": step.index, "finish_reason": turn.finish_reason,
                                         "usage": turn.usage, "model": turn.model,
                                         MODE_KEY: run.wire,
                                         **({SWITCH_KEY: run.switched} if run.switched else {}),
                                         # Which profile shaped a text-mode request, and
                                         # whether a grammar constrained its reply.
                                         **({"profile": run.profile.profile.name,
                                             "grammar": bool(run.profile.grammar)}
                                            if run.wire == "text" else {}),
                                         # Replies asked again (``_repeats_last_call``).
                                         **({"discarded": run.discarded} if run.discarded else {})}
    if run.wire == "text" and not agent.tool_mode_state.text_because:
        # As a load would read it: a conversation that went as text goes on as text under auto.
        agent.tool_mode_state.text_because = TEXT_ALREADY
    if cut:
        run.emit(AnswerCut(cut_notice(cut), "info", kept=cut.kept))
    length_cut = turn.finish_reason in _LENGTH_REASONS
    if length_cut:  # said before the calls run: a cut call's bad arguments may end the run
        limit = agent.request_max_tokens or "the server's limit"
        run.emit(Notice(f"The reply was cut off at the output limit (request_max_tokens={limit}).",
                        "warning"))
    return length_cut


def _cut_scaffolding(run: StepRun, turn: Turn) -> Cut | None:
    """A final answer that goes on to imitate a tool result is cut there (``scaffolding``)."""
    if turn.tool_calls or not turn.text:
        return None
    printed = [item.output for item in run.agent.context if isinstance(item, ToolResult)]
    cut = cut_scaffolding(turn.text, printed)
    if cut is not None:
        turn.text = cut.kept
    return cut


def _offered_names(run: StepRun) -> list[str]:
    """The tools this step's request offered (in text mode: what it offered, not what it
    left out)."""
    agent = run.agent
    tools = agent.offered_tools()
    if run.wire == "text":
        tools = agent.text_mode_offer(tools, agent.context.system)[0]
    return [t.name for t in tools]


def _recover_written_calls(run: StepRun, turn: Turn, offered: list[str]) -> None:
    """Calls of offered tools the model wrote in its reply become the turn's calls (marked
    ``meta["from_text"]``; run like any other, after approval); the text around stays."""
    text_wire = run.wire == "text" and bool(offered)
    around, calls = recover_calls(turn.text, offered + ([FINAL_ANSWER] if text_wire else []),
                                  run.profile.profile.syntax.shape)
    answers = [c for c in calls if c.name == FINAL_ANSWER and FINAL_ANSWER not in offered]
    if answers:  # runs nothing: the answer the text-mode prompt offered a way to give
        if len(answers) < len(calls):
            calls = [c for c in calls if c not in answers]  # calls first; the answer was early
        else:
            answer = answers[-1].arguments.get("answer")
            turn.text = "\n\n".join(filter(None, [around, answer if isinstance(answer, str)
                                                    else json.dumps(answer, ensure_ascii=False)]))
            return
    if not calls:
        if text_wire:
            turn.text = flat_answer(turn.text, FINAL_ANSWER) or turn.text
        return
    turn.text, turn.tool_calls = around, calls
    _tell_repairs(run, calls)
    if run.wire == "native" and run.agent.tool_mode == "auto" and not run.answer_only:
        run.switch_to_text("the model wrote its tool call as text instead of using native "
                           "tool calling", resend=False)


def _repair_native_calls(run: StepRun, calls: list[ToolCall]) -> None:
    """A python call the server parsed gets the repairs a written one gets
    (``written_calls.repaired_code``): a small model behind native tool calling writes the
    same ``\\b`` and ``06``. Not in a replay: the recorded code is what ran, and what its
    cell shows."""
    if getattr(run.agent.client, "replays", False):
        return
    for call in calls:
        code = (call.arguments.get("code")
                if call.name == "python" and isinstance(call.arguments, dict) else None)
        if isinstance(code, str):
            code, why = repaired_code(code)
            if why:
                call.arguments = {**call.arguments, "code": code}
                call.meta[REPAIRED] = why
    _tell_repairs(run, calls)


def _tell_repairs(run: StepRun, calls: list[ToolCall]) -> None:
    for call in calls:
        if call.meta.get(REPAIRED):
            run.emit(Notice(f"In the {call.name} call the model wrote, {call.meta[REPAIRED]} "
                            "(so it compiles; the code shown is what runs).", "info"))


def _run_shown_code(run: StepRun, turn: Turn, offered: list[str]) -> None:
    """A reply that shows the Python the task asks to run, instead of calling the tool: its
    block becomes the turn's call (``engine/verify.shown_code_call``)."""
    shown = None if run.answer_only else shown_code_call(run.agent, turn.text, offered)
    if shown is None:
        return
    turn.text, call = shown
    turn.tool_calls = [call]
    run.emit(Notice("The model showed Python code instead of running it, and the task asks "
                    "for Python: that code is the call (shown for approval like any other).",
                    "info"))


# -- run calls -----------------------------------------------------------------------------
async def run_calls(run: StepRun, breaker: CircuitBreaker) -> None:
    """Approve and execute each call in order; every call gets exactly one result."""
    agent, step = run.agent, run.step
    stop: Stop | None = None
    calls = step.tool_calls
    for i, call in enumerate(calls):
        try:
            if stop is not None and stop.reason == "denied":
                result = ToolResult(call.id, "Not run: an earlier call in this turn was "
                                    "denied.", error=True, name=call.name,
                                    meta={"skipped": True})
            else:
                result = await run_one(run, call)
                if result.meta.get("denied") and result.meta.get("stop"):
                    stop = Stop("denied", result.meta.get("reason") or "denied by the user")
        except BaseException:
            # Interrupted (Ctrl-C, cancelled cell): answer every open call so the
            # context stays valid, then let the interruption through.
            for open_call in calls[i:]:
                done = run.records.pop(open_call.id, None)  # approved, then stopped
                agent.context.append(ToolResult(open_call.id, _interrupted_text(
                    run.printed.pop(open_call.id, [])), error=True, name=open_call.name,
                    meta={"interrupted": True, **({"decision": done} if done else {})}))
            raise
        repeats = breaker.repeated(call, result) if not result.meta.get("denied") else 0
        if repeats:  # told before it is appended: the note is part of what the model reads
            note = (REPEAT_STOP if repeats >= agent.circuit_breaker
                    else REPEAT_FAILED_NOTE if result.error else REPEAT_NOTE)
            result.meta["note"] = "; ".join(filter(None, [result.meta.get("note"), note]))
        agent.context.append(result)
        step.results.append(result)
        run.emit(ToolCallFinished(call, result))
        if stop is None and agent.circuit_breaker and repeats >= agent.circuit_breaker:
            stop = Stop("circuit_breaker", f"the model made the same {call.name!r} call "
                        f"{repeats + 1} times in a row, with the same result each time")
        if stop is None and breaker.count(call, result, agent.circuit_breaker):
            stop = Stop("circuit_breaker",
                        f"{call.name!r} failed {agent.circuit_breaker} times in a row")
    if stop is not None:
        raise stop


async def run_one(run: StepRun, call: ToolCall) -> ToolResult:
    """Ask, then execute one call (a denial is a result too)."""
    agent, step = run.agent, run.step
    run.emit(ToolCallRequested(call))
    offered = agent.offered_tools()
    if call.name in agent.tools and call.name not in [t.name for t in offered]:
        # Hidden by the persona: refused without asking, like an unknown tool.
        return await Toolbox(offered).execute(call)
    again = _not_run_again(agent, call)
    if again is not None:
        return again
    if call.meta.get(PROBLEM):  # written as text, unreadable: nothing to approve or run
        spec = next((t.spec() for t in offered if t.name == call.name), {})
        return ToolResult(call.id, how_to_call(call.name, call.meta[PROBLEM], example_arguments(spec)),
                          error=True, name=call.name, meta={"unreadable": True})
    tool = agent.tools[call.name] if call.name in agent.tools else None
    if tool is not None and tool.asks_user and agent.policy.mode != "deny":
        # Its run is the question to the person (offer_result): nothing to approve first.
        decision = Decision("approve", by="policy", detail="asks the user itself", at=utc_now())
    else:
        asked = time.perf_counter()
        decision = await agent.policy.decide(call)
        step.wait_time += time.perf_counter() - asked  # a click, a keypress, a hook's answer
    step.decisions.append(decision)
    run.emit(ToolCallDecided(call, decision))
    if not decision.approved:
        return _denied(call, decision, step.index)
    result = await execute(run, call, decision)
    if call.meta.get(NOTE_FIXED):  # said to the model: the call it wrote is not what ran
        said = (f"this was your failing call again, word for word, so ipyagent ran it with the "
                f"change its note gave ({call.meta[NOTE_FIXED]}): the call above is what ran")
        result.meta["note"] = "; ".join(filter(None, [result.meta.get("note"), said]))
    for _ in range(MAX_COPIES_PER_CALL):  # a NameError for the user's variable: offer a copy
        asked = time.perf_counter()
        copied_now = call.name == "python" and await copy_missing(agent, call, result, run.emit)
        # Under 'ask' a copy asks the person first; else it is a tool's work.
        spent = time.perf_counter() - asked
        if agent.policy.mode == "ask":
            step.wait_time += spent
        else:
            step.tool_time += spent
        if not copied_now:
            break
        copied = result.meta["copies"]
        result = await execute(run, call, decision)  # again, now that the value is there
        result.meta["copies"] = copied + result.meta.get("copies", [])
    return result


NOTE_FIXED = "note_fixed"  # ToolCall.meta: the change ipyagent's note gave, applied (what)


def _fix_for(agent: AgentView, call: ToolCall) -> dict[str, str] | None:
    """The change ipyagent's note on a failed python call gave (``tools.python.note_fix``:
    the code so changed, and what changed) when ``call`` is that call again, word for word,
    which would not be run (``_not_run_again``); None otherwise.

    Measured at 1.5B (hottest-day): told "write line 10 as … for line in lines[1:] …", with
    the line written out, the model wrote the same failing call four more times; not run
    each time, and asked again at another temperature, until the circuit breaker. The change
    is the note's own, made to the model's own code; the call still asks for approval."""
    if call.name != "python":
        return None
    again = _not_run_again(agent, call)
    if again is None or again.meta.get("skipped") != SAME_FAILURE:
        return None
    failed = next((i for i in reversed(list(agent.context)) if isinstance(i, ToolResult)
                   and i.call_id == again.meta.get("repeat_of")), None)
    code = call.arguments.get("code")
    fix = note_fix(agent, code, failed) if failed is not None and isinstance(code, str) else None
    if fix is None or fix[0] == code:
        return None
    return {"code": fix[0], "what": fix[1]}


SAME_FAILURE = "the same failing call again"  # meta["skipped"] of a call not run so
SAME_SILENCE = "the same silent call again"  # … and of a call that printed nothing before
SAME_CHECKED = "the same checked call again"  # … and of one whose output the check questioned
_ON_THE_OUTPUT = frozenset({"zero", "nan", "empty", "unsupported_number"})  # checks of what it printed
NOT_RUN_AGAIN = (SAME_FAILURE, SAME_SILENCE, SAME_CHECKED)


def _not_run_again(agent: AgentView, call: ToolCall) -> ToolResult | None:
    """A result that does not run ``call`` when it is, word for word, the call made just
    before it (with only its answer and ipyagent's check between) and that one failed, or
    printed nothing and wrote nothing; None otherwise.

    Measured at 1.5B: asked to fix a failing call (a SyntaxError, an AttributeError), the
    model wrote the same call again, which failed the same way, and answered with a guess;
    asked to print the value it answered with, it ran the same silent code again; at 0.5B
    the same until the circuit breaker. Told instead that it was not run and why, held to a
    call (``_reply_must``), it has to write another. Only where ``verify_answers`` is in force."""
    items = list(agent.context)
    at = next((i for i, item in reversed(list(enumerate(items)))
               if isinstance(item, ToolCall) and item.id == call.id), len(items))
    doubts: set[str] = set()  # the rules of ipyagent's checks between the two calls
    for before in range(at - 1, -1, -1):
        item = items[before]
        if isinstance(item, Reasoning) or (isinstance(item, Message) and (
                item.role == "assistant" or CHECK_KEY in item.meta or CONTINUE_KEY in item.meta
                or LIMIT_KEY in item.meta)):
            if isinstance(item, Message) and isinstance(item.meta.get(CHECK_KEY), dict):
                doubts.update(map(str, item.meta[CHECK_KEY].get("rules") or []))
            continue  # a new task from the person is a new run: its calls start afresh
        again = isinstance(item, ToolResult) and item.meta.get("skipped") in NOT_RUN_AGAIN
        if not isinstance(item, ToolResult) or (not again and any(
                item.meta.get(k) for k in ("denied", "skipped", "interrupted", "unreadable"))):
            return None
        # The latest call of that id: a client that reuses ids (a scripted model) made others.
        made = next((c for c in reversed(items[:before]) if isinstance(c, ToolCall)
                     and c.id == item.call_id), None)
        if again and made is not None and (made.name, made.arguments) == (call.name, call.arguments):
            # The call not run, written yet again (seen at 1.5B: then it ran, failed the same
            # way, and the person was asked to approve it a third time): not run either.
            return ToolResult(call.id, item.output, error=True, name=call.name, meta={
                "skipped": item.meta["skipped"], "repeat_of": item.meta.get("repeat_of", made.id)})
        silent = (not item.error and item.output.strip() in ("", NO_OUTPUT)
                  and not item.meta.get("changes") and not item.meta.get("file"))
        # Output the check questioned (a zero, a number no output shows), the same code again:
        # seen at 1.5B, a count of Mondays over the months' first days printed 0 twice.
        # Only a check on the output itself, and code that would print the same again.
        code = str(call.arguments.get("code", "")) if call.name == "python" else ""
        doubted = (not item.error and not silent and bool(doubts & _ON_THE_OUTPUT)
                   and bool(code) and not stateful(code)
                   and not item.meta.get("changes") and not item.meta.get("file"))
        if ((not item.error and not silent and not doubted) or again or made is None
                or not verify_on(agent) or (made.name, made.arguments) != (call.name, call.arguments)):
            return None
        if doubted:
            over = iterated(code)
            # A zero or nothing from a filter: what it tested, item by item (seen at 1.5B: a
            # count of leap years that tested each year's ISO week, 0 answered twice).
            probe = filter_probe(code) if doubts & {"zero", "empty"} else None
            how = (f": if a condition held for nothing, see what it tests for the first items, "
                   f"as in {probe}" if probe else f", as in print({over})" if over else
                   ", each on a line of its own with its name")
            gave = _short_output(item.output)
            text = ("Not run: this is the call made just before, word for word; it printed "
                    f"{gave} and would print the same again. If that is right, answer with "
                    f"it; if not, print the values it computes from{how}, look at them, and "
                    "write the call that fixes the code.")
            return ToolResult(call.id, text, error=True, name=call.name, meta={
                "skipped": SAME_CHECKED, "repeat_of": made.id})
        if silent:
            code = str(call.arguments.get("code", "")) if call.name == "python" else ""
            name, tested = last_assigned(code), tested_in_loop(code)
            how = (f", as in print({name})" if name else
                   f": if the loop's condition held for nothing, print what it tests for each "
                   f"item, as in print(repr({tested})) inside the loop" if tested else "")
            text = ("Not run: this is the call made just before, word for word; it printed "
                    f"nothing and would print nothing again. Print what you need to see{how}.")
        else:
            said = _error_line(kernel_output(item))
            # ipyagent's note on the error (the part of a long line that raised, the read
            # that fits a ';' file) said again: at 1.5B a one-liner was written four more
            # times after "string indices must be integers" alone, at 0.5B the same
            # separator-less read of a ';' file four more times.
            place = str(item.meta.get(ERROR_NOTE) or "").rstrip(". ")
            values = str(item.meta.get(VALUES) or "")  # the values its failing line read
            text = ("Not run: this is the call that failed just before, word for word; it "
                    f"would fail the same way{f' ({said})' if said else ''}"
                    f"{f'; {place}' if place else ''}. Write the "
                    f"call differently.{chr(10) + values if values else ''}")
        return ToolResult(call.id, text, error=True, name=call.name, meta={
            "skipped": SAME_SILENCE if silent else SAME_FAILURE, "repeat_of": made.id})
    return None


def _short_output(output: str, limit: int = 60) -> str:
    """A call's output quoted on one line: ``'0'``, or its first line and how many more."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    first = (lines or [""])[0]
    first = first if len(first) <= limit else first[:limit - 1] + "…"
    more = f" (and {len(lines) - 1} more lines)" if len(lines) > 1 else ""
    return f"{first!r}{more}"


def _error_line(output: str) -> str:
    """The line of a failed output that names the error ("KeyError: 'amount'"), shortened."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    named = [line for line in lines if re.match(r"\w*(?:Error|Exception)\b", line)]
    line = (named or lines or [""])[-1]
    return line if len(line) <= 160 else line[:159] + "…"


def _denied(call: ToolCall, decision: Decision, step_index: int) -> ToolResult:
    """A denial with a reason is guidance: the model gets it and the run goes on.
    A bare denial (or a policy one) stops the run."""
    reason = decision.reason
    stops = not decision.by_person or not reason
    text = "The user denied this tool call." if decision.by_person else (
        "This tool call was not approved.")
    return ToolResult(call.id, text + (f" Reason: {reason}" if reason else ""),
                      error=True, name=call.name,
                      meta={"denied": True, "reason": reason, "by": decision.by,
                            "stop": stops, "decision": decision_record(decision, step_index)})


async def execute(run: StepRun, call: ToolCall, decision: Decision) -> ToolResult:
    """``executor.execute(call)``, with the audit record and secret redaction around it."""
    agent = run.agent
    original = call.arguments
    if decision.action == "edit" and decision.arguments is not None:
        call.meta["original_arguments"] = call.arguments
        call.arguments = decision.arguments  # the context records what actually ran
        call.raw_arguments = None
    # The audit trail: who decided, when, and what the edit changed (meta is saved).
    audit = decision_record(decision, run.step.index, original, call.arguments)
    run.records[call.id] = audit
    printed: list[str] = []  # the first of what the call prints, kept if it is interrupted
    run.printed[call.id] = printed
    room = [_PRINTED_KEPT]  # characters still kept (a flood must not cost per event)
    # Every tool's output passes here: secrets are redacted once, before anyone sees them.
    redactor = LiveRedactor(secret_values(key_envs(agent)))

    def show(event: Any) -> None:
        if isinstance(event, ToolOutput) and room[0] >= 0:
            printed.append(event.text[:room[0]])
            room[0] -= len(event.text)
            if room[0] < 0:  # the rest is not kept: say so
                printed.append("\n[…]")
        run.emit(event)

    def live(event: Any) -> None:
        for redacted in redactor.feed(event):
            show(redacted)

    token = live_emitter.set(live)
    started = time.perf_counter()
    try:
        result = await run.executor.execute(call)
    finally:
        live_emitter.reset(token)
        # A tool whose run is a question to the person (offer_result) waits for them.
        tool = agent.tools[call.name] if call.name in agent.tools else None
        spent = time.perf_counter() - started
        if tool is not None and tool.asks_user:
            run.step.wait_time += spent
        else:
            run.step.tool_time += spent
        for held in redactor.flush():
            show(held)
    run.printed.pop(call.id, None)
    found = [*redactor.names, *redact_result(result, redactor.scan)]
    if found:
        run.emit(Notice(redaction_notice(list(dict.fromkeys(found)), call.name), "warning"))
    result.meta["decision"] = run.records.pop(call.id, audit)
    if agent.tool_output_limit and len(result.output) > agent.tool_output_limit:
        result.meta["full_output_chars"] = len(result.output)
        result.output = head_tail(result.output, agent.tool_output_limit)
    if decision.action == "edit":
        result.meta["edited"] = True
        # For the model, a part of its own (ToolResult.for_model), never the printed output.
        result.meta["note"] = ("the user edited this call before it ran; the call's "
                               "arguments are the edited version, which is what ran")
    if agent.output_lines and result.output.count("\n") >= agent.output_lines:
        # Said only of a long output, not in the system prompt: there, measured on
        # Qwen2.5-Coder-0.5B, it kept the model from stating even a one-line result.
        note = (f"the user sees this output ({result.output.count(chr(10)) + 1} lines) under "
                "the call: do not repeat it in your answer, quote only the lines that matter")
        result.meta["note"] = "; ".join(filter(None, [result.meta.get("note"), note]))
    return result


# -- the answer at the limit ------------------------------------------------------------------
LIMIT_SKIP = "the step limit (Agent.max_steps) was reached"  # meta["skipped"] of such a call


def limit_message(max_steps: int, task: str = "") -> Message:
    """ipyagent's word to the model once ``max_steps`` is reached after its calls (marked
    ``LIMIT_KEY``: not a task of the person's), with the task again (at 1.5B, asked to
    answer "2 decimals", it answered 18.0 at the limit: the task was far above)."""
    again = f" The task was: {one_line(task, 600)}" if task.strip() else ""
    return Message("user", (
        f"Note from ipyagent (not a message from the user): the step limit is reached "
        f"(Agent.max_steps = {max_steps}), so no more tool calls can run in this run. Answer "
        "the task now from what your calls returned, in the form it asks for; if it is not "
        f"done, say what is missing.{again}"), meta={LIMIT_KEY: True})


def _not_run_at_limit(run: StepRun) -> None:
    """The reply to ``limit_message``: its calls get a result each, not run, and the run
    ends ``max_steps``, with the reply's words as its answer."""
    agent, step = run.agent, run.step
    for call in step.tool_calls:
        run.emit(ToolCallRequested(call))  # the card shows the call, then why it did not run
        result = ToolResult(call.id, f"Not run: {LIMIT_SKIP}.", error=True, name=call.name,
                            meta={"skipped": LIMIT_SKIP})
        agent.context.append(result)
        step.results.append(result)
        run.emit(ToolCallFinished(call, result))
    if step.text.strip() and not step.tool_calls:
        raise Stop("max_steps", f"reached max_steps={agent.max_steps}; the model answered from "
                                "what its calls returned; to go on, give a task, or raise "
                                "Agent.max_steps")
    raise Stop("max_steps", f"reached max_steps={agent.max_steps}; the context is valid: run "
                            "again with no task (%agent step) to go on, or raise Agent.max_steps")


# -- decide stop ---------------------------------------------------------------------------
def decide_stop(run: StepRun, turn: Turn, cut: bool, steps_so_far: int) -> None:
    """After the calls: a cut reply goes on (or stops), a plain answer is done, else the
    budget and ``max_steps`` decide."""
    agent = run.agent
    if cut:
        if agent.on_length == "stop":
            raise Stop("length", "the reply was cut off at the output limit")
        if not turn.tool_calls:  # marked: ours, not a new task (context.evidence.run_items)
            agent.context.add_user(CONTINUE_PROMPT).meta[CONTINUE_KEY] = True
    elif not turn.tool_calls:
        from ..models.reply_checks import final_reply_notice

        notice = final_reply_notice(turn.text, turn.finish_reason, turn.reasoning is not None,
                                    agent.tools.names)
        if notice:
            run.emit(Notice(notice, "warning"))
        # Look before answering: the evidence may send the model back once (engine/verify).
        said = look_again(agent, turn.text, room=steps_so_far + 2 <= agent.max_steps)
        if said is None:
            raise Stop("done")
        run.emit(Notice(said, "info"))
    run.check_budget()
    if steps_so_far + 1 >= agent.max_steps:
        raise Stop("max_steps", f"reached max_steps={agent.max_steps}; the context is valid: "
                                "run again with no task (%agent step) to go on, or raise "
                                "Agent.max_steps")


def _interrupted_text(printed: list[str]) -> str:
    """What the model reads for an interrupted call: that, and what it had printed."""
    text = "".join(printed).rstrip()
    if not text:
        return "Interrupted by the user."
    return f"Interrupted by the user. It had printed:\n{text}"


