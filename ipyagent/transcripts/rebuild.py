"""Rebuild the sibling kernel's state from a conversation: re-run the python that ran.

Why: a loaded transcript continues the *conversation*, but its sibling kernel starts
empty, so the model's next ``print(df.head())`` fails on a ``df`` it believes exists.
``agent.rebuild_kernel()`` (``%agent load PATH --rerun``) re-executes, in order, every
``python`` call that really ran — as edited, and including calls a compaction summary
replaced — exactly the calls the transcript shows as code cells (a transcript whose cells
no longer match its metadata is refused: ``Transcript.verify_cells``), and re-creates the
files its file cells show. A transcript may come from someone else, so each of those steps
is first approved as a live call would be (the agent's ``approval``/``allow``/hook; a denial
stops the rebuild, with one line saying what was and was not rebuilt), and each decision is
recorded like a live one (``Rebuild.audit()``).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, Sequence

from .._util.text import one_line, visible
from ..context.decisions import utc_now
from ..context.items import Message, ToolCall, ToolResult, unfold
from ..engine.approval import ApprovalPolicy, Approver, Decision, Mode
from .compare import Difference, differs, observed

if TYPE_CHECKING:
    from ..engine.agent import Agent
    from ..trust.provenance import RanHere

__all__ = ["Rebuild", "python_calls_that_ran", "rerun_steps", "arebuild", "copies_by_step", "recopy"]

@dataclass
class Rebuild:
    """What ``rebuild_kernel`` re-ran: counts, the calls that failed this time, where it
    stopped (a denied step), and each step's approval (``audit()``)."""

    ran: int = 0
    files: int = 0  # files re-created as the agent left them
    failed: list[tuple[int, str, str]] = field(default_factory=list)  # (n, status, line)
    # Calls that failed again as they had when recorded (the demo's len(int)): expected,
    # so they neither count as failures nor make the rebuild not ``ok``.
    expected: list[tuple[int, str, str]] = field(default_factory=list)
    steps: int = 0  # what the transcript asked to re-run (python calls + files)
    stopped: str = ""  # why the rebuild stopped before the end (a step was not approved)
    cwd: str = ""  # the sibling's working directory
    fresh: bool = False  # cwd is a new empty temporary directory made for this rebuild
    pending_changes: int = 0  # files the re-run wrote that wait in the stage (%agent changes)
    items: list[Any] = field(default_factory=list, repr=False)  # each step's call and result
    # Calls whose output this time differs from the recorded one (``compare=True``).
    differences: list[Difference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every step was approved and every re-run call ended ``ok``."""
        return not self.failed and not self.stopped

    def line(self) -> str:
        """One line for the user."""
        text = f"re-ran {self.ran} python call{'s' if self.ran != 1 else ''} in the sibling kernel"
        if self.files:
            text += f" and re-created {self.files} file{'s' if self.files != 1 else ''} the agent wrote"
        if self.failed:
            n, status, first = self.failed[0]
            more = f" (+{len(self.failed) - 1} more)" if len(self.failed) > 1 else ""
            text += f"; {len(self.failed)} failed — call {n}: {status}: {first}{more}"
        if self.expected:
            n, status, first = self.expected[0]
            more = f" (+{len(self.expected) - 1} more)" if len(self.expected) > 1 else ""
            calls = ("1 call" if len(self.expected) == 1 else f"{len(self.expected)} calls")
            text += (f"; {calls} ended in an error as recorded (expected) — call {n}: "
                     f"{first}{more}")
        if self.differences:
            d = self.differences[0]
            more = f" (+{len(self.differences) - 1} more)" if len(self.differences) > 1 else ""
            text += (f"; {len(self.differences)} printed something else than recorded — "
                     f"step {d.step} ({d.call_id}){more}")
        if self.stopped:
            text += f"; {self.stopped}"
        if self.pending_changes:
            n = self.pending_changes
            text += (f"; {n} file change{'s' if n != 1 else ''} the re-run made wait"
                     f"{'s' if n == 1 else ''} in the sandbox (%agent changes)")
        if self.fresh:
            text += (f"; it runs in a fresh empty directory, {self.cwd}, for the rest of this "
                     "conversation (`--cwd DIR` to choose one)")
        return visible(one_line(text))

    def audit(self) -> Any:
        """How each re-run step was decided (who, when), as ``agent.audit()`` lists a run's."""
        from ..context.audit import Audit

        return Audit.of(self.items)

    def __repr__(self) -> str:
        return f"<Rebuild {self.line()}>"

    def _repr_html_(self) -> str:
        colour = "#2a7" if self.ok else "#c80"
        return f"<div style='color:{colour}'>{html.escape(self.line())}</div>"


def rerun_steps(items: Iterable[Any]) -> list[tuple[ToolCall, tuple[str, str] | None]]:
    """What a re-run re-does, in order: each python call that ran (with ``None``) and each
    file the agent wrote (with its recorded ``(path, text)``).

    The same rule as the notebook's cells (summaries unfolded): calls that ran, as
    edited — not denied, skipped, interrupted, timed-out or kernel-killing ones.
    """
    return [(call, written) for call, written, _ in _plan(items)]


def _plan(items: Iterable[Any]
          ) -> list[tuple[ToolCall, tuple[str, str] | None, ToolResult | None]]:
    """``rerun_steps`` with each step's recorded result."""
    from ..tools.files import recorded_file
    from .export import _not_run_reason

    flat = list(unfold(items))
    pending: dict[str, list[ToolResult]] = {}
    for item in flat:
        if isinstance(item, ToolResult):
            pending.setdefault(item.call_id, []).append(item)
    steps: list[tuple[ToolCall, tuple[str, str] | None, ToolResult | None]] = []
    for item in flat:
        if not isinstance(item, ToolCall):
            continue
        queue = pending.get(item.id) or []
        result = queue.pop(0) if queue else None
        if item.name != "python":
            written = recorded_file(result)
            if written is not None:
                steps.append((item, written, result))
        elif (isinstance(item.arguments.get("code"), str) and item.raw_arguments is None
                and not _not_run_reason(result)):
            steps.append((item, None, result))
    return steps


def copies_by_step(items: Iterable[Any], steps: list[tuple[ToolCall, Any]]
                   ) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """The recorded copies into the sibling to redo before each step (by call id): the
    ``%agent push``/``--with`` ones since the step before, then those its own ``NameError``
    offered; and the ones after the last step."""
    flat = list(unfold(items))
    results = {i.call_id: i for i in flat if isinstance(i, ToolResult)}
    ids = {call.id for call, _ in steps}
    pending: list[dict[str, Any]] = []
    out: dict[str, list[dict[str, Any]]] = {}
    for item in flat:
        meta = getattr(item, "meta", None) or {}
        copy = meta.get("copy")
        if isinstance(item, Message) and isinstance(copy, dict) and copy.get("direction") == "push":
            pending.append(copy)
        elif isinstance(item, ToolCall) and item.id in ids:
            result = results.get(item.id)
            own = [c for c in ((result.meta.get("copies") or []) if result is not None else [])
                   if isinstance(c, dict) and c.get("copied")]
            out[item.id], pending = pending + own, []
    return out, pending


class _Decider(Protocol):
    async def decide(self, call: ToolCall) -> Decision: ...


class _RanHereFirst:
    """Approves what already ran in this session after a yes (``RanHere``): the same
    code, the same file text, the same copy; asks ``policy`` about everything else."""

    def __init__(self, policy: _Decider, ran_here: RanHere) -> None:
        self.policy, self.ran_here = policy, ran_here

    async def decide(self, call: ToolCall) -> Decision:
        args = call.arguments
        if call.name == "python":
            known = self.ran_here.has_code("python", str(args.get("code", "")))
        elif call.name == "copy_variable":
            known = self.ran_here.has_copy(args.get("sha256"))
        else:
            known = self.ran_here.has_code(f"file:{args.get('path')}", str(args.get("content", "")))
        if known:
            return Decision("approve", reason="it ran in this session, approved", by="policy",
                            detail="ran here", at=utc_now())
        return await self.policy.decide(call)


async def recopy(agent: Agent, policy: _Decider, record: dict[str, Any],
                  emit: Callable[[Any], None]) -> str | None:
    """Redo one recorded copy (approved first: unpickling runs code in the sibling); why not."""
    import base64
    import hashlib

    from ..context.events import Notice

    name = str(record.get("name", "?"))
    payload = record.get("payload")
    if not isinstance(payload, str):  # too large to keep: the value must come from elsewhere
        what = ", ".join(str(record[k]) for k in ("description",) if record.get(k))
        return (f"copy of {name!r}{f' ({what})' if what else ''}: the transcript has no payload "
                "for it (too large to keep), so it must be provided: the calls that use it "
                "fail without it")
    data = base64.b64decode(payload)
    if hashlib.sha256(data).hexdigest() != record.get("sha256"):
        return f"copy of {name!r}: its payload does not match its recorded sha256"
    call = ToolCall(f"copy-{name}", "copy_variable", {
        "name": name, "value": str(record.get("description", "")), "bytes": len(data),
        "sha256": record.get("sha256"), "from": "the transcript", "into": "the agent's kernel"})
    decision = await policy.decide(call)
    if not decision.approved:
        return f"copy of {name!r} not approved: {one_line(decision.reason or decision.by)}"
    try:
        await agent.kernel.push_payload_async(payload, [name])
    except (TypeError, ValueError) as exc:
        return one_line(exc)
    emit(Notice(f"re-copied {name} ({record.get('description', '')}) from the transcript "
                "into the sibling kernel", "info"))
    return None


def _reapply(agent: Agent, report: Any) -> None:
    """The staged workspace: what a re-run call wrote is applied as a live call's is
    (``Agent.apply_changes``: data files at once); code-like files never come back unasked,
    whatever the transcript says was applied: they wait for %agent apply, and the line says so."""
    stage = getattr(agent.kernel_if_started, "stage", None)
    if stage is None:
        return
    from ..tools.changes import never_applied

    fresh = stage.scan()
    again = [c for c in fresh if c.risk is None and not never_applied(c)] \
        if agent.apply_changes == "data" else []
    applied = stage.apply(again, by="rerun").changes if again else []
    # What could not be applied (its problem said in %agent changes) waits like the rest.
    report.pending_changes += len(fresh) - len(applied)


def python_calls_that_ran(items: Iterable[Any]) -> list[ToolCall]:
    """The ``python`` calls, in order, that the transcript shows as code cells."""
    return [call for call, written in rerun_steps(items) if written is None]


def _default_approver() -> Approver:
    """A y/n prompt showing each step's code on a terminal; elsewhere, deny in one line."""
    from ..engine.approval import TerminalOrDeny, terminal_answer

    return TerminalOrDeny(terminal_answer, lambda call: (
        "nobody could approve this re-run (stdin is not a terminal)"), show_call=True)


_HOW_TO_ALLOW = ("load with approval='auto' (`%agent load PATH --rerun --approve auto`) to re-run "
                 "a transcript you trust without asking")


def _what(call: ToolCall) -> str:
    if call.name == "python":
        return f"python call {call.id}"
    return f"re-creating {call.arguments.get('path')} ({call.id})"


async def arebuild(agent: Agent, *, approval: Mode | None = None,
                   on_event: Callable[[Any], Any] | None = None,
                   root: str | None = None, items: Sequence[Any] | None = None,
                   ran_here: RanHere | None = None, compare: bool = False) -> Rebuild:
    """Re-run ``agent.context``'s python calls in ``agent.kernel`` and re-create the files the
    agent wrote (under ``root``, default the agent's workspace), in order, each approved
    first; a failure does not stop it, a denial does.

    ``approval``: the mode for this rebuild (default ``agent.approval``); ``agent.allow``
    and ``agent.approval_hook`` apply as in a live run (no hook under "ask": a terminal
    prompt, else denied in one line). ``on_event`` sees each step as a live tool call.
    ``items``: re-run these instead of ``agent.context``'s. ``ran_here``: what ran in this
    session after a yes runs again without asking (a rewind). ``compare``: each re-run
    output is compared with the recorded one, as replay does (``Rebuild.differences``).
    """
    from ..context.audit import decision_record
    from ..context.events import ToolCallDecided, ToolCallFinished, ToolCallRequested
    from .file_record import restore

    hook = agent.approval_hook
    # A policy of its own: an "Always" given here covers the rest of the rebuild only.
    asked = ApprovalPolicy(mode=approval or agent.approval, allow=list(agent.allow),
                           ui=hook if hook is not None else _default_approver())
    policy: _Decider = asked if ran_here is None else _RanHereFirst(asked, ran_here)
    source = agent.context if items is None else items
    plan = _plan(source)
    steps = [(call, written) for call, written, _ in plan]
    report = Rebuild(steps=len(steps))
    where = str(root or agent.workspace_path)
    claimed: set[str] = set()  # files this re-run made: a later write of the agent's may replace them

    def emit(event: Any) -> None:
        if on_event is not None:
            try:
                on_event(event)
            except Exception as exc:  # noqa: BLE001 - a broken display must not break the rebuild
                agent.log.warning("ipyagent rebuild listener failed: %s", exc)

    copies, trailing = copies_by_step(source, steps)
    for n, (recorded, written) in enumerate(steps, 1):
        for record in copies.get(recorded.id, []):
            why = await recopy(agent, policy, record, emit)
            if why is not None:
                report.failed.append((n, "copy", why))
        # What is asked about is what runs: the cell's code, or the whole file the cell writes.
        call = (ToolCall(recorded.id, "python", {"code": str(recorded.arguments["code"])})
                if written is None else
                ToolCall(recorded.id, "write_file", {"path": written[0], "content": written[1]}))
        emit(ToolCallRequested(call))
        decision = await policy.decide(call)
        if decision.action == "edit":  # runs only what the cells show: an edit is not run
            decision = Decision("deny", reason="edited at the approval; --rerun runs only the "
                                "code its cells show", by=decision.by, detail=decision.detail,
                                at=decision.at)
        emit(ToolCallDecided(call, decision))
        meta: dict[str, Any] = {"decision": decision_record(decision, n), "rerun": True}
        if not decision.approved:
            reason = one_line(decision.reason or f"denied ({decision.by})")
            hint = "" if decision.by_person else f"; {_HOW_TO_ALLOW}"
            left = len(steps) - n + 1
            report.stopped = (f"stopped at step {n} of {len(steps)} ({_what(call)}), not "
                              f"approved: {reason.rstrip('.')}{hint}; {left} step"
                              f"{'s' if left != 1 else ''} not re-run: the conversation is "
                              "loaded, but the sibling kernel has only what ran before")
            result = ToolResult(call.id, f"Not re-run: {reason}", error=True, name=call.name,
                                meta={**meta, "denied": True, "reason": reason})
            report.items += [call, result]
            emit(ToolCallFinished(call, result))
            break
        if written is not None:
            _, why = restore(where, *written, claimed)
            if why is None:
                report.files += 1
            else:
                report.failed.append((n, f"{recorded.name} {written[0]}", why))
            result = ToolResult(call.id, why or f"re-created {written[0]}", error=why is not None,
                                name=call.name, meta=meta)
        else:
            execution = await agent.kernel.execute_async(str(call.arguments["code"]))
            report.ran += 1
            if not compare:  # a rewind or a branch: its folder is the undo machinery's
                _reapply(agent, report)
            again = False
            recorded_result = plan[n - 1][2]
            if compare and recorded_result is not None:
                now = ToolResult(call.id, execution.text or "(no output)",
                                 error=execution.status != "ok", name="python",
                                 outputs=list(execution.outputs),
                                 meta={"status": execution.status})
                if differs(recorded_result, now):
                    report.differences.append(Difference(
                        _step_of(source, recorded), call.id, str(call.arguments["code"]),
                        observed(recorded_result), observed(now), recorded_result.error,
                        now.error))
            if execution.status != "ok":
                lines = execution.text.strip().splitlines()
                # An error the transcript recorded (the model saw it and went on) is what
                # a faithful re-run gives: said as expected, not as a failure.
                again = (execution.status == "error" and recorded_result is not None
                         and recorded_result.error)
                (report.expected if again else report.failed).append(
                    (n, execution.status, lines[-1][:120] if lines else ""))
            # The re-run is about state: its card says how it ended, not what it printed.
            result = ToolResult(call.id, f"re-ran: {execution.status}"
                                + (" (as recorded: expected)" if again else ""),
                                error=execution.status != "ok", name="python",
                                execution_count=execution.execution_count,
                                meta={**meta, "status": execution.status})
        report.items += [call, result]
        emit(ToolCallFinished(call, result))
    else:
        for record in trailing:
            why = await recopy(agent, policy, record, emit)
            if why is not None:
                report.failed.append((len(steps), "copy", why))
    return report


def _step_of(items: Sequence[Any], call: ToolCall) -> int:
    """The number of the step that made ``call`` (0: none found)."""
    from ..context.steps import step_spans

    flat = list(unfold(items, keep_summaries=True))
    for span in step_spans(flat):
        if any(i is call or (isinstance(i, ToolCall) and i.id == call.id
                             and i.arguments == call.arguments) for i in flat[span.start:span.end]):
            return span.number
    return 0
