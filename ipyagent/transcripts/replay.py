"""Replay: re-run a transcript's recorded model turns against a fresh sibling kernel.

No model request is made: a ``ReplayModel`` answers each step with the recorded turn
(each call with the arguments that ran: an edited call shows, and runs, the edit), and
the real loop runs it in a **new** sibling kernel (the user's kernel and agent are not
touched) whose working directory is a fresh empty temporary one unless ``cwd`` is given.

What runs is exactly the transcript's code cells: each ``python`` call shown as a code
cell (checked byte for byte against the metadata first: ``Transcript.verify_cells``),
and each file re-created as its file cell shows. Nothing else runs: a call the recording
denied stays denied; a call no code cell shows (one that timed out or killed the kernel,
whose code the notebook shows as text only) is refused with one line and counts as a
difference; other tools are answered from the recording (they may have side effects).
Each call that runs is first approved under the caller's policy (``approval``: "ask" by
default, as for a live run; "auto" replays a transcript you trust without asking).
Each new output is compared with the recorded one after normalisation;
``ReplayReport.reproduced`` is True when none differ.

What legitimately varies between runs is normalised before comparing, in this order:

1. ANSI colour codes and trailing whitespace;
2. ISO-8601 date-times (``2024-05-01T12:30:00.123+02:00``, ``2024-05-01 12:30:00``) →
   ``<datetime>``; then bare dates ``2024-05-01`` → ``<date>``; times ``12:30:00.5`` → ``<time>``;
3. Unix timestamps ``1714567890.123`` (10 digits, 2017–2033) → ``<epoch>``;
4. memory addresses ``0x7f3a2c…`` (6+ hex digits; ``<object at 0x…>``) → ``0x<addr>``;
5. object ids: a number of 8+ digits after the word ``id`` (``id=140…``, ``id(x): 140…``) → ``<id>``;
   process ids after ``pid`` → ``<pid>``;
6. durations: a number with a time unit (``took 0.123s``, ``1.2 ms``, ``3 µs ± 4 ns``)
   → ``<duration>``; ``%timeit``'s ``N loops each`` → ``<n> loops each``;
7. temporary paths (``/tmp/…``, ``/var/folders/…``, the platform's temp dir) → ``<tmp>``;
8. IPython cell labels in tracebacks (``Cell In[3]``, ``Out[3]``) → ``In[<n>]``/``Out[<n>]``;
9. the byte size in an image placeholder (``[image/png 640x480, 23 KB]`` keeps the size
   in pixels, drops the bytes: compressors differ between library versions).

Random numbers without a seed, dict/set orders that depend on hashing, wall-clock logic
and network data are *not* normalised: a replay that differs there has found something
that does not reproduce. Add your own rules with ``normalise(text, extra=[(pattern, repl)])``.
"""

from __future__ import annotations

import html
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping

from .._util.normalise import NORMALISATIONS, normalise
from .._util.text import visible_name
from ..context.events import Notice
from ..context.evidence import CHECK_KEY, CONTINUE_KEY, LIMIT_KEY
from ..context.items import Message, Summary, ToolCall, ToolResult, unfold
from ..context.spill import outputs_of
from ..engine.approval import ApprovalPolicy, Approver, Decision, Mode
from ..models.recorded import RecordedTurn, ReplayModel, turns_from_items
from ..models.tool_mode import MODE_KEY
from ..tools.base import Tool
from ..tools.files import recorded_file
from .compare import Difference, differs
from .compare import observed as _observed
from .file_record import restore
from .rebuild import recopy as _recopy

if TYPE_CHECKING:
    from ..context.buffer import Context
    from ..engine.agent import Agent
    from .transcript import Transcript

__all__ = ["ReplayReport", "Difference", "normalise", "replay", "areplay", "NORMALISATIONS"]



@dataclass
class ReplayReport:
    """The outcome of a replay: ``reproduced`` and the ``differences`` found."""

    source: str
    steps: int = 0
    compared: int = 0  # python calls re-run and compared
    reused: int = 0  # other tools' calls answered from the record
    not_run: int = 0  # denied / skipped / interrupted calls (not run then, not run now)
    differences: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    duration: float = 0.0
    cwd: str = ""  # where the replay's kernel ran (a temporary directory is removed after)
    context: Context | None = field(default=None, repr=False)  # the replayed conversation

    @property
    def reproduced(self) -> bool:
        return not self.differences

    def __repr__(self) -> str:
        head = ("NOT reproduced" if not self.reproduced
                else "reproduced" if self.compared else "nothing re-run")
        where = ""
        if self.differences:
            first = self.differences[0]
            where = f", first at step {first.step} ({first.call_id})"
        return (f"<ReplayReport {head}: {_count(self.compared, 'python call')} in "
                f"{_count(self.steps, 'step')}, {len(self.differences)} differ{where}"
                f"{self._not_run_then()}>")

    def _not_run_then(self) -> str:
        """The calls the recording itself did not run (a run whose every call was denied
        would otherwise read as reproduced, with nothing checked)."""
        if not self.not_run:
            return ""
        return (f"; {_count(self.not_run, 'call')} not run when recorded "
                "(denied, skipped or interrupted), so not checked")

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        """Terminal IPython shows the differences, as the notebook's table does."""
        p.text(repr(self) if cycle else str(self))

    def __str__(self) -> str:
        lines = [repr(self)[1:-1]]
        for d in self.differences:
            lines += [f"\n── step {d.step}, call {d.call_id} ──", d.code.rstrip(),
                      "── output (normalised diff) ──", d.diff() or _status_line(d)]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        color = ("#b35900" if not self.reproduced else "#1a7f37" if self.compared
                 else "#666")
        verdict = ("not reproduced" if not self.reproduced
                   else "reproduced" if self.compared else "nothing re-run")
        parts = [f"<div class='ipyagent-replay'><div><b style='color:{color}'>Replay: "
                 f"{verdict}</b> — {html.escape(self.source)}: "
                 f"{_count(self.compared, 'python call')} re-run in "
                 f"{_count(self.steps, 'step')}, {len(self.differences)} differ "
                 f"({self.duration:.1f}s){html.escape(self._not_run_then())}</div>"]
        if self.differences:
            parts.append("<table><thead><tr><th>step</th><th>call</th><th>code</th>"
                         "<th>recorded output</th><th>new output</th></tr></thead><tbody>")
            for d in self.differences:
                rec = d.recorded + ("  [error]" if d.recorded_error else "")
                new = d.new + ("  [error]" if d.new_error else "")
                parts.append(
                    f"<tr style='vertical-align:top'><td>{d.step}</td><td>{html.escape(d.call_id)}</td>"
                    + "".join(f"<td style='text-align:left'><pre>{html.escape(t)}</pre></td>"
                              for t in (d.code, rec, new)) + "</tr>")
            parts.append("</tbody></table>")
        parts += [f"<div style='color:#666'>note: {html.escape(n)}</div>" for n in self.notes]
        return "".join(parts) + "</div>"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _status_line(d: Difference) -> str:
    return d.status_line()


class _RecordedDecisions:
    """Answers each call as the recorded run did (denied stays denied), and asks the
    caller's policy about each call that would run something: a python call a code cell
    shows, or a file a file cell re-creates. Everything else is answered without running."""

    def __init__(self, calls: list[ToolCall], results: dict[int, ToolResult | None],
                 runnable: dict[int, str], user: ApprovalPolicy) -> None:
        self._calls = calls  # recorded calls in order, with what actually ran
        self._results = results  # id(recorded call) -> its recorded result
        self.runnable = runnable  # id(recorded python call) -> the code its cell shows
        self.user = user
        self.answering: dict[str, ToolCall | None] = {}  # call id -> the recorded call
        self.denied: dict[str, int] = {}  # the caller's denial reasons, counted
        self._next = 0

    def find(self, call_id: str) -> tuple[ToolCall | None, ToolResult | None]:
        """The next recorded call with this id (ids may repeat across tasks)."""
        for i in range(self._next, len(self._calls)):
            if self._calls[i].id == call_id:
                self._next = i + 1
                return self._calls[i], self._results.get(id(self._calls[i]))
        return None, None

    async def decide(self, call: ToolCall) -> Decision:
        recorded, result = self.find(call.id)
        self.answering[call.id] = recorded
        meta = result.meta if result is not None else {}
        if result is None or meta.get("denied") or meta.get("interrupted"):
            reason = meta.get("reason") or ("interrupted by the user" if meta.get("interrupted")
                                            else "not answered in the recording")
            return Decision("deny", reason=reason, by="replay", detail=meta.get("by") or "user")
        runs = (id(recorded) in self.runnable if call.name == "python"
                else recorded_file(result) is not None)
        if not runs:  # answered from the recording (or refused by the python gate): nothing runs
            return Decision("approve", by="replay", detail=_recorded_by(meta))
        decision = await self.user.decide(call)
        if not decision.approved:
            why = decision.reason or f"denied ({decision.by or 'policy'})"
            self.denied[why] = self.denied.get(why, 0) + 1
        return decision


def _recorded_by(meta: dict[str, Any]) -> str:
    """How the recorded run decided (its audit record), for the replayed decision."""
    record = meta.get("decision")
    return str(record.get("by", "")) if isinstance(record, dict) else ""


def _runnable(items: list[Any]) -> dict[int, str]:
    """id(recorded python call) -> its code, for each call the notebook shows as a code cell."""
    from .rebuild import rerun_steps

    flat = [i for i in items if not isinstance(i, Summary)]  # unfolded with each summary kept
    return {id(call): str(call.arguments["code"])
            for call, written in rerun_steps(flat) if written is None}


def _as_ran(turns: list[RecordedTurn], items: list[Any]) -> None:
    """Give each turn's calls the arguments that ran, so that the code shown for approval is
    the code that runs (an edited call runs the user's edit, as recorded)."""
    for rt in turns:
        recorded = [i for i in items[rt.start:rt.end] if isinstance(i, ToolCall)]
        for call, ran in zip(rt.turn.tool_calls, recorded):
            if ran.raw_arguments is None:
                call.arguments = dict(ran.arguments)


def _not_shown(recorded: ToolCall | None, result: ToolResult | None) -> str:
    status = (result.meta.get("status") if result is not None else None)
    what = {"timeout": "it timed out in the recording", "died": "it killed the kernel in the "
            "recording"}.get(str(status), "the recording has no code cell for it")
    return f"{what}; replay runs only the code cells (this code is shown as text only)"


def _gated_python(python: Tool, gate: _RecordedDecisions, results: dict[int, ToolResult | None],
                  report: ReplayReport, recopy: Callable[[list[dict[str, Any]]], Awaitable[None]]
                  ) -> Tool:
    """The python tool, running only the code a verified code cell shows (after the copies
    its recorded ``NameError`` made: the recorded result is the run after them)."""
    assert python.handler is not None
    run = python.handler

    async def handler(call: ToolCall) -> ToolResult:
        recorded = gate.answering.get(call.id)
        shown = gate.runnable.get(id(recorded)) if recorded is not None else None
        if shown is None:
            why = _not_shown(recorded, results.get(id(recorded)) if recorded is not None else None)
        elif call.arguments.get("code") != shown:
            why = "its code is not what its cell shows (edited at the approval)"
        else:
            old = results.get(id(recorded))
            await recopy([c for c in ((old.meta.get("copies") or []) if old is not None else [])
                          if isinstance(c, dict) and c.get("copied")])
            return await run(call)
        report.notes.append(f"did not run python call {call.id}: {why}")
        return ToolResult(call.id, f"(replay: not run — {why})", error=True, name="python",
                          meta={"status": "not run", "replay_refused": why})

    return Tool(name=python.name, description=python.description,
                parameters=python.parameters, handler=handler)


def _default_approver() -> Approver:
    """A y/n prompt showing each call's code on a terminal; elsewhere, deny in one line."""
    from ..engine.approval import TerminalOrDeny, terminal_answer

    return TerminalOrDeny(terminal_answer, lambda call: (
        "nobody could approve this replayed call (stdin is not a terminal); replay with "
        "approval='auto' (`%agent replay PATH --approve auto`) to run a transcript you "
        "trust without asking"), show_call=True)


def _recorded_results(items: list[Any]) -> dict[int, ToolResult | None]:
    """id(call) -> the first result after it with its id."""
    out: dict[int, ToolResult | None] = {}
    open_calls: dict[str, list[ToolCall]] = {}
    for item in items:
        if isinstance(item, ToolCall):
            open_calls.setdefault(item.id, []).append(item)
            out[id(item)] = None
        elif isinstance(item, ToolResult) and open_calls.get(item.call_id):
            out[id(open_calls[item.call_id].pop(0))] = item
    return out


def _playback_tool(name: str, answers: dict[str, list[ToolResult]], root: str,
                   report: ReplayReport, claimed: set[str]) -> Tool:
    async def handler(call: ToolCall) -> ToolResult:
        queue = answers.get(call.id) or []
        recorded = queue.pop(0) if queue else None
        if recorded is None:
            return ToolResult(call.id, "(replay: no recorded result)", error=True, name=name)
        written = recorded_file(recorded)
        if written is not None:  # the agent's file, for the python calls that read it
            created, why = restore(root, *written, claimed)
            if why is not None:
                report.notes.append(f"did not re-create {written[0]} ({call.id}): {why}")
            elif created:
                report.notes.append(f"re-created {written[0]} as the agent wrote it ({call.id})")
        # A result compaction cleared is answered with the text the tool gave.
        meta = {k: v for k, v in recorded.meta.items() if k != "cleared_output"}
        return ToolResult(call.id, recorded.full_output, recorded.error, name,
                          list(outputs_of(recorded)), recorded.execution_count,
                          {**meta, "replayed": True})

    return Tool(name=name, description=f"{name} (answered from the recording)",
                parameters={"type": "object"}, handler=handler)


async def areplay(source: str | os.PathLike[str] | Transcript, *, cwd: str | None = None,
                  on_event: Any = None, approval: Mode = "ask", allow: Iterable[str] = (),
                  approval_hook: Approver | None = None,
                  limits: Mapping[str, Any] | None = None, **settings: Any) -> ReplayReport:
    """Replay a transcript in a fresh sibling kernel and report what differs.

    ``cwd``: the kernel's working directory (default: a new empty temporary directory,
    removed afterwards). ``approval``/``allow``/``approval_hook``: who approves each call
    that runs (default: ask — a prompt on a terminal, else denied with a line).
    ``limits``: the caller's settings, which the recording may tighten, never loosen.
    """
    from ..engine.agent import Agent
    from .transcript import Transcript, build_agent, read, tightened

    transcript = source if isinstance(source, Transcript) else read(source)
    transcript.verify_cells()  # replay runs code: only the code its cells show
    started = time.perf_counter()
    items = list(unfold(transcript.items, keep_summaries=True))
    turns = turns_from_items(items)
    _as_ran(turns, items)
    results = _recorded_results(items)
    calls = [i for i in items if isinstance(i, ToolCall)]
    answers: dict[str, list[ToolResult]] = {}
    for call in calls:
        res = results.get(id(call))
        if call.name != "python" and res is not None:
            answers.setdefault(call.id, []).append(res)
    recorded = transcript.settings
    traits = Agent.class_traits()
    # Settings that change what a tool result says follow the recording's — where that is
    # no looser than the caller's (a file never lifts a timeout or a memory limit).
    kwargs = {k: recorded[k] for k in ("kernel_name",) if recorded.get(k) is not None}
    bounds: list[str] = [k for k in ("tool_timeout", "memory_limit", "tool_output_limit")
              if k in recorded and k not in settings and traits.get(k) is not None]
    current: dict[str, Any] = {k: (limits or {}).get(k, traits[k].default()) for k in bounds}
    tighter, ignored = tightened(transcript, bounds, current)
    kwargs.update({k: current[k] for k in bounds}, **tighter)
    taken = [k for k in kwargs if k not in settings]
    kwargs.update(settings)
    user = ApprovalPolicy(mode=approval, allow=list(allow),
                          ui=approval_hook if approval_hook is not None else _default_approver())
    decisions = _RecordedDecisions(calls, results, _runnable(items), user)
    # Only python re-runs: no file tools (the playback tools re-create a recorded file only
    # where it is missing: never over a later edit), no MCP servers
    # (a mcp.json in the directory must not be called); the playback tools answer instead.
    # No compaction either: a summary request would take the next recorded turn, and the
    # recorded turns already hold the run's own summaries.
    # No memory either: the recorded notes are in the items (fed as they were sent); a
    # replay neither looks for new ones nor writes any. No skills: the recorded listing is
    # in the system prompt, and the recorded load_skill results answer its calls.
    # No shell tool: a recorded shell call is answered from the recording, like any tool
    # that may have side effects (a transcript someone sent never runs a command).
    # No answer checks: the recorded ones are in the items (fed as they were sent), and a
    # check of its own would ask the recorded model a question it never answered.
    kwargs.update(file_tools=False, mcp_servers={}, mcp_files=False, context_window=0,
                  memory="off", shell_tool="off", skills_enabled=False, verify_answers=False)
    report = ReplayReport(source=transcript.path or "<transcript>", steps=len(turns))
    if ignored:
        report.notes.append(ignored)
    scratch = None if cwd else tempfile.mkdtemp(prefix="ipyagent-replay-")
    report.cwd = run_in = os.path.abspath(cwd or scratch or ".")
    root = str(settings.get("workspace") or run_in)
    claimed: set[str] = set()  # files this replay made (a second write may replace them)
    agent = build_agent(Agent, transcript, dict(
        client=ReplayModel(turns), approval="ask", approval_hook=decisions,
        circuit_breaker=0, max_tokens=0, python_tool=True,
        system_prompt=transcript.system, cwd=run_in,
        tools=[_playback_tool(n, answers, root, report, claimed) for n in
               sorted({c.name for c in calls if c.name != "python"})], **kwargs), taken)

    async def recopy(records: list[dict[str, Any]]) -> None:
        # Unpickling runs code in the sibling: each copy is approved as a call that runs is.
        for record in records:
            why = await _recopy(agent, user, record, on_event or (lambda event: None))
            if why is not None:
                report.notes.append(f"not re-copied: {why}")

    agent.tools.add(_gated_python(agent.tools["python"], decisions, results, report, recopy))
    if on_event is not None:
        # Said first: a new user saw the replay's cards ask again with nothing to say why.
        runs = sum(c.name == "python" for c in calls)
        how = {"auto": "each runs without asking", "deny": "none runs (approval deny)"}.get(
            approval, "each asks for approval as in a live run")
        name = visible_name(os.path.basename(report.source))
        on_event(Notice(f"Replaying {name}: its {runs} python "
                        f"call{'s' * (runs != 1)} run again in a fresh sibling kernel ({how}); "
                        "the report compares what they print with the recording.", "info"))
    try:
        position = 0
        for number, rt in enumerate(turns, 1):
            between = items[position:rt.start]
            _feed(agent, between, report)
            await recopy(_pushed(between))  # `%agent push` / --with since the last turn
            position = rt.end
            # Each turn is asked as it was recorded: with native tools, or as text.
            mode = (items[rt.start].meta.get("turn") or {}).get(MODE_KEY)
            if mode in ("native", "text"):
                agent.tool_mode = mode
            step = await agent.astep(on_event=on_event)
            recorded_calls = [i for i in items[rt.start:rt.end] if isinstance(i, ToolCall)]
            _compare(number, recorded_calls, step.results, results, report)
            _compare_changes(number, recorded_calls, step.results, results, report,
                             getattr(agent.kernel_if_started, "stage", None))
            position = _skip_results(items, position)
    finally:
        kernel = agent.kernel_if_started  # None when the transcript ran no python: none was started
        if kernel is not None:
            await kernel.shutdown_async()  # graceful here; close() from this loop would kill it
        agent.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    for why, n in decisions.denied.items():
        report.notes.append(f"{n} call{'s' if n != 1 else ''} not approved, so not run: {why}")
    if scratch is not None:
        report.notes.append(f"ran in a fresh empty directory ({scratch}, removed afterwards); "
                            "to replay where the run's files are, give cwd=DIR (--cwd DIR after the path)")
    report.context = agent.context
    report.duration = time.perf_counter() - started
    return report


def replay(source: str | os.PathLike[str] | Transcript, **kwargs: Any) -> ReplayReport:
    """Blocking form of ``areplay`` (in a notebook, approval clicks need ``%agent replay``)."""
    from .._util import eventloop as _eventloop

    return _eventloop.run_sync(areplay(source, **kwargs))


def _feed(agent: Agent, between: list[Any], report: ReplayReport) -> None:
    """Put what came between two turns (user and system messages) into the replay context."""
    for item in between:
        if isinstance(item, Message) and item.role != "assistant":
            # An answer check, a "go on" and the step limit's "answer now" keep their marks:
            # they are ipyagent's, not a task (context.evidence.run_items).
            marks = {k: item.meta[k] for k in (CHECK_KEY, CONTINUE_KEY, LIMIT_KEY) if k in item.meta}
            agent.context.append(Message(item.role, item.content, meta=marks))
    if not agent.pending():
        # The recording was edited (e.g. a user message deleted): the loop needs something to answer.
        agent.context.add_user("(replay: the recorded conversation continues here)")
        report.notes.append("the recording has two model turns with nothing between them "
                            "(an edited context); replayed them anyway")


def _pushed(between: list[Any]) -> list[dict[str, Any]]:
    """The copies the user pushed into the sibling (``%agent push``, ``--with``) in ``between``."""
    out = []
    for item in between:
        copy = (getattr(item, "meta", None) or {}).get("copy")
        if isinstance(item, Message) and isinstance(copy, dict) and copy.get("direction") == "push":
            out.append(copy)
    return out


def _skip_results(items: list[Any], position: int) -> int:
    while position < len(items) and isinstance(items[position], ToolResult):
        position += 1
    return position


def _compare(number: int, recorded_calls: list[ToolCall], new_results: list[ToolResult],
             recorded_results: dict[int, ToolResult | None], report: ReplayReport) -> None:
    """Compare one turn's replayed python results with the recorded ones."""
    for call in recorded_calls[len(new_results):]:
        # The replay went off the recording (this turn ran fewer calls): never "reproduced".
        old = recorded_results.get(id(call))
        if old is not None and call.name == "python":
            report.differences.append(Difference(
                number, call.id, str(call.arguments.get("code", "")), _observed(old),
                "(not run in the replay)", old.error, True))
    for call, new in zip(recorded_calls, new_results):
        old = recorded_results.get(id(call))
        if old is None or any(old.meta.get(k) for k in ("denied", "skipped", "interrupted")):
            report.not_run += 1
        elif call.name != "python":
            report.reused += 1
        else:
            report.compared += 1
            if differs(old, new):
                report.differences.append(Difference(
                    number, call.id, str(call.arguments.get("code", "")), _observed(old),
                    _observed(new), old.error, new.error))


def _compare_changes(number: int, recorded_calls: list[ToolCall], new_results: list[ToolResult],
                     recorded_results: dict[int, ToolResult | None], report: ReplayReport,
                     stage: Any) -> None:
    """The files a recorded python call changed must be, in the replay's sandbox view, what
    they were then (by sha256; a deleted one absent): the change sets are verified too."""
    if stage is None:
        return
    for call, new in zip(recorded_calls, new_results):
        old = recorded_results.get(id(call))
        if old is None or call.name != "python" or not isinstance(old.meta.get("changes"), list):
            continue
        wrong = []
        for change in old.meta["changes"]:
            if not isinstance(change, dict) or not isinstance(change.get("path"), str):
                continue
            expected = None if change.get("kind") == "deleted" else change.get("sha256")
            if change.get("link") is not None:
                continue  # a symlink's target is compared as text by its own sha256 below
            if stage.view_sha(change["path"]) != expected:
                wrong.append(f"{change['path']} ({change.get('kind')})")
        if wrong:
            report.differences.append(Difference(
                number, call.id, str(call.arguments.get("code", "")),
                "files as recorded: " + ", ".join(wrong),
                "files differ in the replay: " + ", ".join(wrong), old.error, new.error))
