"""``Agent``: the tool-calling loop, configured with traitlets.

One step = one model request → append the assistant's items → for each tool call:
approve → execute → append its result. ``run`` repeats steps until a stop reason:
``done`` (a turn without tool calls), ``max_steps``, ``circuit_breaker`` (the same tool
failed N times in a row), ``budget`` (``max_tokens`` spent), ``denied`` (a denial that
stops the run) or ``error`` (the endpoint failed after retries).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

from traitlets import TraitError

from . import _eventloop
from ._secrets import key_envs, secret_values
from ._text import head_tail
from .approval import ApprovalPolicy, Approver, CallbackApprover, Mode
from .audit import Audit, decision_record
from .compaction import bind_settings, fit_window
from .context import Context
from .errors import ApprovalError, ConfigError, ModelError
from .events import (
    Event,
    Notice,
    RunFinished,
    RunResult,
    RunStarted,
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
from .items import Message, ToolCall, ToolResult
from .models.base import ClientNotice, Model, ModelRequest, Retrying, TurnComplete
from .models.overflow import context_overflow, overflow_hint
from .models.retry import safe_url
from .redaction import LiveRedactor, redact_result, redaction_notice
from .resources import AgentResources
from .settings import DEFAULT_SYSTEM_PROMPT
from .tools.base import Tool, Toolbox
from .tools.python import python_tool

if TYPE_CHECKING:
    from pathlib import Path

    from .transcripts.rebuild import Rebuild
    from .transcripts.replay import ReplayReport
    from .transcripts.transcript import Transcript

__all__ = ["Agent", "DEFAULT_SYSTEM_PROMPT"]

Listener = Callable[[Event], Any]


class Agent(AgentResources):
    """An LLM agent whose Python runs in an isolated sibling kernel."""

    def __init__(self, *, client: Model | None = None, http_client: Any = None,
                 tools: Iterable[Tool | Callable[..., Any]] = (),
                 approval_hook: Approver | Callable[..., Any] | None = None,
                 **kwargs: Any) -> None:
        """Settings as keyword arguments; ``client`` injects a model client (tests, custom APIs)."""
        super().__init__(**kwargs)
        self._init_resources(client, http_client)
        self._persona_active: Any = None  # personas.Active: the persona and what it replaced
        self._agents_md_noted: Path | None = None
        if self.persona:
            from .personas import switch

            switch(self, self.persona)
        self.context = Context(system=self._effective_system())
        self.tools = Toolbox(tools)
        self.listeners: list[Listener] = []
        self.usage = Usage()
        self._policy = ApprovalPolicy(mode=self.approval, allow=list(self.allow))
        if approval_hook is not None:
            self.approval_hook = approval_hook
        self._failures: tuple[str, int] = ("", 0)
        self._steps_in_run = 0
        self._step_counter = 0
        self._printed: dict[str, list[str]] = {}  # running calls' output, by call id
        self._records: dict[str, dict[str, Any]] = {}  # running calls' decisions, by call id
        self._autosave_said: Any = None  # the autosave file last announced
        self._autosave_failure: str | None = None  # the last failure said (said once)
        self.observe(self._policy_changed, names=["approval", "allow"])
        self.observe(self._system_changed, names=["system_prompt"])
        self.observe(self._on_persona, names=["persona"])
        if self.python_tool:
            self.tools.add(python_tool(self))
            self._start_kernel_soon()
        if self.file_tools:
            from .tools.files import file_tools

            for t in file_tools(lambda: self.workspace_path, lambda: self.tool_timeout):
                self.tools.add(t)

    # -- configuration ---------------------------------------------------------------
    @property
    def context(self) -> Context:
        """The conversation: list-like and editable; ``compaction_preview()`` uses this agent."""
        return self._context

    @context.setter
    def context(self, value: Context) -> None:
        bind_settings(value, self)  # the preview follows the current settings, even before a step
        self._context = value

    @property
    def approval_hook(self) -> Approver | None:
        """The UI asked when ``approval == 'ask'``: an object with ``async decide(call)``."""
        return self._policy.ui

    @approval_hook.setter
    def approval_hook(self, hook: Approver | Callable[..., Any] | None) -> None:
        if hook is not None and not hasattr(hook, "decide"):
            hook = CallbackApprover(hook)  # a plain function
        self._policy.ui = hook  # type: ignore[assignment]

    def _policy_changed(self, change: Any) -> None:
        self._policy.mode = self.approval
        self._policy.allow = list(self.allow)

    def _system_changed(self, change: Any) -> None:
        self.context.system = self._effective_system()

    def _on_persona(self, change: Any) -> None:
        from .personas import PersonaError, switch

        try:
            switch(self, change["new"])
        except PersonaError as exc:  # its settings were rolled back; so is the name
            self.set_trait("persona", change["old"])
            raise TraitError(str(exc)) from None

    def _effective_system(self) -> str:
        """The system prompt sent: ``system_prompt`` (a persona's, if one is active) + AGENTS.md."""
        from .agents_md import with_agents_md

        return with_agents_md(self.system_prompt, self.agents_md_path)

    def offered_tools(self) -> list[Tool]:
        """The tools offered to the model: every tool, or those the active persona offers."""
        persona = self._persona_active.persona if self._persona_active else None
        return [t for t in self.tools if persona is None or persona.offers(t.name)]

    async def _before_request(self, listeners: list[Listener]) -> None:
        """On the engine loop, before each request: MCP tools offered; AGENTS.md noted once."""
        from .agents_md import MARKER
        from .personas import take_notes

        for note in take_notes(self):  # what a persona file tried to set and was refused
            self._emit(listeners, Notice(note, "warning"))
        path = self.agents_md_path
        if path is not None and path != self._agents_md_noted and MARKER in self.context.system:
            self._agents_md_noted = path
            self._emit(listeners, Notice(f"AGENTS.md: {path} is in the system prompt", "info"))
        try:
            await self.mcp.prepare(lambda event: self._emit(listeners, event))
        except Exception as exc:  # MCP trouble must not stop a run that may not need it
            self._emit(listeners, Notice(f"MCP servers: {exc}", "warning"))

    # -- running ---------------------------------------------------------------------
    def run(self, task: str | None = None, *, on_event: Listener | None = None) -> RunResult:
        """Run until a stop reason (blocking). In a notebook prefer ``await agent.arun()``."""
        self._check_blocking_ok()
        return _eventloop.run_sync(self._arun(task, on_event))

    async def arun(self, task: str | None = None, *, on_event: Listener | None = None) -> RunResult:
        """Run until a stop reason, awaiting (approval clicks keep flowing meanwhile)."""
        return await _eventloop.run_async(self._arun(task, on_event))

    def step(self, task: str | None = None, *, on_event: Listener | None = None) -> Step:
        """Run one iteration (after adding ``task``, if given)."""
        self._check_blocking_ok()
        return _eventloop.run_sync(self._astep_public(task, on_event))

    async def astep(self, task: str | None = None, *, on_event: Listener | None = None) -> Step:
        """Run one iteration, awaiting."""
        return await _eventloop.run_async(self._astep_public(task, on_event))

    def _check_blocking_ok(self) -> None:
        # A blocking call inside a running loop (a notebook cell) stops the kernel from
        # reading widget clicks, so a button-based approval could never be answered.
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        ui = self._policy.ui
        if self.approval == "ask" and ui is not None and getattr(ui, "needs_event_loop", False):
            raise ApprovalError(
                "agent.run() would block this cell, so the Approve button could never be "
                "clicked: use `await agent.arun(...)` or the %agent magic instead")

    def pending(self) -> bool:
        """True when the context ends with something the model has not answered yet."""
        for item in reversed(self.context):
            if isinstance(item, (ToolResult,)):
                return True
            if isinstance(item, Message):
                return item.role == "user"
            if isinstance(item, ToolCall):
                return False  # an unanswered call: the context is mid-step
        return False

    def _begin(self, task: str | None) -> None:
        if self._closed:
            raise ConfigError("this agent is closed; create a new one")
        if task is not None and task.strip():
            self.context.add_user(task)
        elif not self.pending():
            raise ConfigError("nothing to continue: give a task")

    async def _arun(self, task: str | None, on_event: Listener | None) -> RunResult:
        self._begin(task)
        started = time.perf_counter()
        listeners = self._listeners(on_event)
        self._emit(listeners, RunStarted(task))
        steps: list[Step] = []
        usage = Usage()
        self._failures = ("", 0)
        while True:
            step = await self._astep(listeners, steps_so_far=len(steps))
            steps.append(step)
            usage.add(step.usage)
            if step.stop_reason:
                break
        result = RunResult(
            stop_reason=step.stop_reason or "done", text=_final_text(steps), steps=steps,
            usage=usage, duration=time.perf_counter() - started, error=step.error)
        self._emit(listeners, RunFinished(result))
        return result

    async def _astep_public(self, task: str | None, on_event: Listener | None) -> Step:
        self._begin(task)
        return await self._astep(self._listeners(on_event), steps_so_far=0)

    def _listeners(self, extra: Listener | None) -> list[Listener]:
        return [*self.listeners, *([extra] if extra else [])]

    def _emit(self, listeners: list[Listener], event: Event) -> None:
        for listener in listeners:
            try:
                listener(event)
            except Exception as exc:  # a broken display must never break the run
                self.log.warning("ipyagent listener %r failed: %s", listener, exc)

    async def _astep(self, listeners: list[Listener], steps_so_far: int) -> Step:
        """One iteration. Never raises for model/tool failures: they end up in the Step."""
        self._step_counter += 1
        step = Step(index=self._step_counter)
        started = time.perf_counter()
        self._emit(listeners, StepStarted(step.index))
        if self.max_tokens and self.usage.total >= self.max_tokens:
            return self._finish(step, started, listeners, "budget",
                                f"token budget spent ({self.usage.total} of {self.max_tokens})")
        await self._before_request(listeners)  # before compaction: MCP tools count too
        turn = None
        for attempt in (1, 2):  # a second attempt only after the server said "too long"
            if self.context_window:
                problem = await fit_window(self, lambda e: self._emit(listeners, e))
                if problem:
                    return self._finish(step, started, listeners, "error", problem)
            request = ModelRequest(
                system=self.context.system, items=list(self.context),
                tools=[t.spec() for t in self.offered_tools()],
                temperature=self.temperature, max_tokens=self.request_max_tokens,
                tool_choice=self.tool_choice)
            counter = self.context.counter
            estimated_raw = self.context.raw_tokens + counter.raw(json.dumps(request.tools))
            try:
                async for event in self.client.stream(request):
                    if isinstance(event, TurnComplete):
                        turn = event.turn
                    elif isinstance(event, (Retrying, ClientNotice)):
                        self._emit(listeners, Notice(event.message, "warning"))
                    else:
                        self._emit(listeners, event)  # type: ignore[arg-type]
            except (ModelError, ConfigError) as exc:  # ConfigError: e.g. the API key is not set
                overflow = context_overflow(exc)
                if overflow is not None and self.context_window and attempt == 1:
                    # Our estimate was low (another tokenizer, no usage reported): count
                    # as densely as the server does, compact to fit, and ask once more.
                    scale = counter.count_denser(estimated_raw, overflow.prompt_tokens)
                    counted = (f" (it counted {overflow.prompt_tokens:,} tokens)"
                               if overflow.prompt_tokens else "")
                    self._emit(listeners, Notice(
                        f"The server refused the request as longer than its context "
                        f"window{counted}; counting tokens ×{scale:.2f}, compacting and "
                        "trying once more.", "warning"))
                    continue
                # Nothing of a failed reply is appended: the context stays valid to retry. But
                # tokens the provider billed for it (an error inside a stream) still count.
                partial = getattr(exc, "turn", None)
                spent = Usage.from_server(getattr(partial, "usage", None))
                if spent is not None:
                    step.usage = spent
                    self.usage.add(spent)
                return self._finish(step, started, listeners, "error",
                                    str(exc) + (overflow_hint(self.context_window) if overflow else ""))
            break
        if turn is None:
            return self._finish(step, started, listeners, "error",
                                "the model client ended without a reply")
        step.text, step.tool_calls, step.finish_reason = turn.text, turn.tool_calls, turn.finish_reason
        step.usage = Usage.from_server(turn.usage) or Usage(
            self.context.tokens, len(turn.text) // 4 + 1, 1, estimated=True)
        self.usage.add(step.usage)
        if not step.usage.estimated and step.usage.input:
            counter.calibrate(estimated_raw, step.usage.input)
        first = len(self.context)
        if turn.reasoning is not None:
            self.context.append(turn.reasoning)
        if turn.text or not turn.tool_calls:
            self.context.append(Message("assistant", turn.text))
        for call in turn.tool_calls:
            self.context.append(call)
        # What a replay needs beyond the items: the turn's usage and finish reason.
        self.context[first].meta["turn"] = {"step": step.index, "finish_reason": turn.finish_reason,
                                            "usage": turn.usage, "model": turn.model}
        cut = turn.finish_reason in _LENGTH_REASONS
        if cut:  # said before the calls run: a cut call's bad arguments may end the run
            limit = self.request_max_tokens or "the server's limit"
            self._emit(listeners, Notice(
                f"The reply was cut off at the output limit (request_max_tokens={limit}).",
                "warning"))
        stop, why = await self._run_calls(step, listeners)
        if stop:
            return self._finish(step, started, listeners, stop, why)
        if cut:
            if self.on_length == "stop":
                return self._finish(step, started, listeners, "length",
                                    "the reply was cut off at the output limit")
            if not turn.tool_calls:
                self.context.add_user(CONTINUE_PROMPT)
        elif not turn.tool_calls:
            from .reply_checks import final_reply_notice

            notice = final_reply_notice(turn.text, turn.finish_reason, turn.reasoning is not None,
                                        self.tools.names)
            if notice:
                self._emit(listeners, Notice(notice, "warning"))
            return self._finish(step, started, listeners, "done")
        if self.max_tokens and self.usage.total >= self.max_tokens:
            return self._finish(step, started, listeners, "budget",
                                f"token budget spent ({self.usage.total} of {self.max_tokens})")
        if steps_so_far + 1 >= self.max_steps:
            return self._finish(step, started, listeners, "max_steps",
                                f"reached max_steps={self.max_steps}; the context is valid: "
                                "run again with no task (%agent step) to go on, or raise "
                                "Agent.max_steps")
        return self._finish(step, started, listeners, None)

    def _finish(self, step: Step, started: float, listeners: list[Listener],
                stop: StopReason | None, why: str | None = None) -> Step:
        step.stop_reason, step.error = stop, why
        step.duration = time.perf_counter() - started
        if stop == "error" and why:
            self._emit(listeners, Notice(why, "error"))
        if self.autosave:
            self._autosave(listeners)
        self._emit(listeners, StepFinished(step))
        return step

    async def _run_calls(self, step: Step,
                         listeners: list[Listener]) -> tuple[StopReason | None, str | None]:
        """Approve and execute each call in order; every call gets exactly one result."""
        stop: StopReason | None = None
        why: str | None = None
        calls = step.tool_calls
        for i, call in enumerate(calls):
            try:
                if stop == "denied":
                    result = ToolResult(call.id, "Not run: an earlier call in this turn was "
                                        "denied.", error=True, name=call.name,
                                        meta={"skipped": True})
                else:
                    result = await self._run_one(call, step, listeners)
                    if result.meta.get("denied") and result.meta.get("stop"):
                        stop, why = "denied", result.meta.get("reason") or "denied by the user"
            except BaseException:
                # Interrupted (Ctrl-C, cancelled cell): answer every open call so the
                # context stays valid, then let the interruption through.
                for open_call in calls[i:]:
                    record = self._records.pop(open_call.id, None)  # approved, then stopped
                    self.context.append(ToolResult(open_call.id, _interrupted_text(
                        self._printed.pop(open_call.id, [])), error=True, name=open_call.name,
                        meta={"interrupted": True, **({"decision": record} if record else {})}))
                raise
            self.context.append(result)
            step.results.append(result)
            self._emit(listeners, ToolCallFinished(call, result))
            if stop is None and self._count_failure(call, result):
                stop, why = "circuit_breaker", (
                    f"{call.name!r} failed {self.circuit_breaker} times in a row")
        return stop, why

    async def _run_one(self, call: ToolCall, step: Step, listeners: list[Listener]) -> ToolResult:
        self._emit(listeners, ToolCallRequested(call))
        if call.name in self.tools and call.name not in [t.name for t in self.offered_tools()]:
            # Hidden by the persona: refused without asking, like an unknown tool.
            return await Toolbox(self.offered_tools()).execute(call)
        decision = await self._policy.decide(call)
        step.decisions.append(decision)
        self._emit(listeners, ToolCallDecided(call, decision))
        if not decision.approved:
            reason = decision.reason
            # A denial with a reason is guidance: the model gets it and the run goes on.
            # A bare denial (or a policy one) stops the run.
            stops = not decision.by_person or not reason
            text = "The user denied this tool call." if decision.by_person else (
                "This tool call was not approved.")
            return ToolResult(call.id, text + (f" Reason: {reason}" if reason else ""),
                              error=True, name=call.name,
                              meta={"denied": True, "reason": reason, "by": decision.by,
                                    "stop": stops,
                                    "decision": decision_record(decision, step.index)})
        original = call.arguments
        if decision.action == "edit" and decision.arguments is not None:
            call.meta["original_arguments"] = call.arguments
            call.arguments = decision.arguments  # the context records what actually ran
            call.raw_arguments = None
        # The audit trail: who decided, when, and what the edit changed (meta is saved).
        record = decision_record(decision, step.index, original, call.arguments)
        self._records[call.id] = record
        printed: list[str] = []  # the first of what the call prints, kept if it is interrupted
        self._printed[call.id] = printed
        room = [_PRINTED_KEPT]  # characters still kept (a flood must not cost per event)
        # Every tool's output passes here: secrets are redacted once, before anyone sees them.
        redactor = LiveRedactor(secret_values(key_envs(self)))

        def show(event: Any) -> None:
            if isinstance(event, ToolOutput) and room[0] >= 0:
                printed.append(event.text[:room[0]])
                room[0] -= len(event.text)
                if room[0] < 0:  # the rest is not kept: say so
                    printed.append("\n[…]")
            self._emit(listeners, event)

        def live(event: Any) -> None:
            for redacted in redactor.feed(event):
                show(redacted)

        token = live_emitter.set(live)
        try:
            result = await self.tools.execute(call)
        finally:
            live_emitter.reset(token)
            for held in redactor.flush():
                show(held)
        self._printed.pop(call.id, None)
        found = [*redactor.names, *redact_result(result, redactor.scan)]
        if found:
            self._emit(listeners, Notice(redaction_notice(list(dict.fromkeys(found)), call.name), "warning"))
        result.meta["decision"] = self._records.pop(call.id, record)
        if self.tool_output_limit and len(result.output) > self.tool_output_limit:
            result.meta["full_output_chars"] = len(result.output)
            result.output = head_tail(result.output, self.tool_output_limit)
        if decision.action == "edit":
            result.meta["edited"] = True
            result.output = "Note: the user edited this call before it ran.\n" + result.output
        return result

    def _autosave(self, listeners: list[Listener]) -> None:
        """Rewrite the autosave file; say where once, and a failure once (until it works)."""
        from .transcripts.transcript import autosave

        try:
            path = autosave(self)
        except Exception as exc:  # a full disk must not kill the run: say it in one line
            message = f"autosave failed: {exc}"
            if message != self._autosave_failure:
                self._autosave_failure = message
                self._emit(listeners, Notice(message, "warning"))
                if not listeners:  # a plain script shows no notices: lost steps must not be silent
                    import warnings

                    warnings.warn(message, RuntimeWarning, stacklevel=2)
            return
        self._autosave_failure = None
        if path is not None and path != self._autosave_said:
            self._autosave_said = path
            self._emit(listeners, Notice(f"autosaving this conversation to {path} "
                                         "(Agent.autosave)", "info"))

    def _count_failure(self, call: ToolCall, result: ToolResult) -> bool:
        """Track consecutive failures of one tool; True when the breaker trips."""
        if result.meta.get("denied") or not self.circuit_breaker:
            return False
        if result.error:
            name, count = self._failures
            count = count + 1 if name == call.name else 1
            self._failures = (call.name, count)
            return count >= self.circuit_breaker
        self._failures = ("", 0)  # any success breaks the row
        return False

    def audit(self) -> Audit:
        """Every tool call of the conversation and how it was decided (who, when, edits)."""
        return Audit.of(self.context)

    # -- transcripts -----------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the conversation as a transcript notebook; returns its Path."""
        from .transcripts.transcript import save

        return save(self, path)

    @classmethod
    def from_transcript(cls, path: str | os.PathLike[str], *, rerun: bool = False,
                        **settings: Any) -> Agent:
        """A new agent continuing a saved transcript (``settings`` override recorded ones).

        ``rerun=True`` also re-runs its python calls so the sibling has their variables,
        each approved under the new agent's ``approval`` (see ``load``), in ``cwd=`` if
        given, else in a fresh empty temporary directory.
        """
        from .transcripts.transcript import from_transcript, read

        transcript = read(path)
        fresh = rerun and "cwd" not in settings
        if rerun:
            transcript.verify_cells()  # run only the code its cells show
            if fresh:
                settings["cwd"] = _fresh_dir()
        agent = from_transcript(cls, transcript, **settings)
        if rerun:
            try:
                agent._check_blocking_ok()
                report = agent.rebuild_kernel()
            except BaseException:
                agent.close()
                raise
            report.cwd, report.fresh = agent.cwd, fresh
            transcript.rebuild = report
        return agent

    def load(self, path: str | os.PathLike[str], *, rerun: bool = False,
             approval: Mode | None = None, cwd: str | os.PathLike[str] | None = None,
             on_event: Listener | None = None) -> Transcript:
        """Replace the conversation with a transcript's (this agent's settings are kept).

        A running sibling is restarted: the old conversation's variables must not pass
        for this one's. ``rerun=True`` then re-runs its python calls and re-creates its
        files (``transcript.rebuild`` says what ran), each approved first as a live call
        is (``approval``, default ``self.approval``; a denial stops the rebuild), in a new
        sibling whose working directory is ``cwd`` — by default a fresh empty temporary
        directory, kept as ``Agent.cwd`` for the rest of the conversation.
        """
        if rerun and (approval or self.approval) == "ask":
            self._check_blocking_ok()
        return _eventloop.run_sync(self.aload(path, rerun=rerun, approval=approval, cwd=cwd,
                                         on_event=on_event))

    async def aload(self, path: str | os.PathLike[str], *, rerun: bool = False,
                    approval: Mode | None = None, cwd: str | os.PathLike[str] | None = None,
                    on_event: Listener | None = None) -> Transcript:
        """Awaitable ``load`` (in a notebook, approval clicks need this or ``%agent load``)."""
        from .transcripts.transcript import load_into, read

        transcript = read(path)
        where = os.path.abspath(os.path.expanduser(os.fspath(cwd))) if cwd is not None else ""
        if rerun:
            transcript.verify_cells()
            if cwd is not None and not os.path.isdir(where):
                raise ConfigError(f"--rerun: the working directory {where} does not exist")
        load_into(self, transcript)
        if not rerun:
            if self._kernel is not None and self._kernel.is_alive():
                await self._kernel.restart_async()
            return transcript
        where = where or _fresh_dir()
        await self._move_kernel(where)
        report = await _eventloop.run_async(self._arebuild(approval, on_event, where if cwd is None else None))
        report.cwd, report.fresh = where, cwd is None
        transcript.rebuild = report
        return transcript

    async def _move_kernel(self, cwd: str) -> None:
        """A fresh sibling in ``cwd`` (the old one, and its variables, are shut down)."""
        with self._kernel_lock:  # the background start takes it too: no kernel is lost
            old, self._kernel = self._kernel, None
            self.cwd = cwd
        if old is not None:
            await old.shutdown_async()

    def rebuild_kernel(self, *, restart: bool = False, approval: Mode | None = None,
                       on_event: Listener | None = None) -> Rebuild:
        """Re-run every python call of the conversation that ran, in order -> ``Rebuild``.

        Use after loading a transcript: its variables then exist again in the sibling.
        Each step is approved first (``approval``, default ``self.approval``); a denial
        stops it. ``restart=True`` restarts the sibling first, so nothing stale is left over.
        """
        return _eventloop.run_sync(self.arebuild_kernel(restart=restart, approval=approval,
                                                   on_event=on_event))

    async def arebuild_kernel(self, *, restart: bool = False, approval: Mode | None = None,
                              on_event: Listener | None = None) -> Rebuild:
        """Awaitable ``rebuild_kernel``."""
        if restart and self._kernel is not None:
            await self._kernel.restart_async()
        return await _eventloop.run_async(self._arebuild(approval, on_event, None))

    async def _arebuild(self, approval: Mode | None, on_event: Listener | None,
                        root: str | None) -> Rebuild:
        from .transcripts.rebuild import arebuild

        return await arebuild(self, approval=approval, on_event=on_event, root=root)

    def replay(self, path: str | os.PathLike[str], **settings: Any) -> ReplayReport:
        """Re-run a transcript's recorded turns in a fresh kernel -> ReplayReport.

        Its calls are approved as this agent's would be; it runs in a new empty temporary
        directory unless ``cwd=`` says where."""
        from .transcripts.replay import replay

        return replay(path, **self._replay_settings(settings))

    async def areplay(self, path: str | os.PathLike[str], **settings: Any) -> ReplayReport:
        """Awaitable ``replay`` (the notebook stays responsive meanwhile)."""
        from .transcripts.replay import areplay

        return await _eventloop.run_async(areplay(path, **self._replay_settings(settings)))

    def _replay_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        """This agent's approval and limits for a replay (``settings`` win)."""
        from .transcripts.transcript import LIMITS

        return {"approval": self.approval, "allow": list(self.allow),
                "approval_hook": self.approval_hook,
                "limits": {k: getattr(self, k) for k in LIMITS}, **settings}

    # -- lifecycle -------------------------------------------------------------------
    def reset(self, *, kernel: bool = False) -> None:
        """Start a new conversation (the sibling kernel is kept unless ``kernel=True``)."""
        self._agents_md_cache = None  # a new conversation looks for AGENTS.md again
        self.context = Context(system=self._effective_system())
        self.usage = Usage()
        self._step_counter = 0
        self._policy.always.clear()
        if kernel and self._kernel is not None:
            self._kernel.restart()

    def close(self) -> None:
        """Shut down the sibling kernel, the MCP servers and the model client's connections."""
        if self._closed:
            return
        self._closed = True
        if self._client is not None and not self._client_injected:
            try:
                _eventloop.run_sync(self._client.aclose(), timeout=5)
            except Exception:
                pass
        if self._mcp is not None:
            try:
                self._mcp.close()
            except Exception as exc:  # a stuck server must not stop the rest of the shutdown
                self.log.warning("ipyagent: MCP servers did not stop cleanly: %s", exc)
        with self._kernel_lock:  # waits for a kernel being created right now
            kernel = self._kernel
        if kernel is not None:
            kernel.shutdown()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._client_injected:
            model, where = getattr(self._client, "name", "?"), "injected client"
        else:
            model = self.model
            where = "offline" if model == "demo" else f"{self.endpoint.api} @ {safe_url(self.endpoint.base_url)}"
        return (f"<Agent model={model!r} ({where}) approval={self.approval!r} "
                f"items={len(self.context)} tools={self.tools.names}>")

    def _repr_html_(self) -> str:
        import html

        rows = "".join(
            f"<tr><td>{name}</td><td>{html.escape(repr(getattr(self, name)))}</td></tr>"
            for name in ("model", "base_url", "approval", "allow", "max_steps", "max_tokens"))
        return (f"<div><b>ipyagent Agent</b> — {len(self.context)} items, {self.usage} tokens, "
                f"tools: {html.escape(', '.join(self.tools.names) or 'none')}"  # MCP names: untrusted
                f"<table>{rows}</table></div>")


_LENGTH_REASONS = ("length", "max_tokens", "max_output_tokens")
CONTINUE_PROMPT = ("[ipyagent] Your reply was cut off by the output token limit. Continue "
                   "exactly where you stopped, without repeating yourself.")


_PRINTED_KEPT = 4000  # characters of an interrupted call's output the model is told


def _interrupted_text(printed: list[str]) -> str:
    """What the model reads for an interrupted call: that, and what it had printed."""
    text = "".join(printed).rstrip()
    if not text:
        return "Interrupted by the user."
    return f"Interrupted by the user. It had printed:\n{text}"


def _fresh_dir() -> str:
    """A new empty temporary directory for a re-run (kept: the conversation goes on there)."""
    import tempfile

    return tempfile.mkdtemp(prefix="ipyagent-rerun-")


def _final_text(steps: list[Step]) -> str:
    """The answer: the last step's text (a run that stops early may have none)."""
    for step in reversed(steps):
        if step.text:
            return step.text
    return ""

