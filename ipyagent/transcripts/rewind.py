"""Rewind: go back to step N — the conversation, the sibling kernel and your files with it.

``agent.rewind(n)`` (``%agent rewind N``) keeps steps 1..N (a step: one model reply and the
results of its calls; N as the context table and the step cards number them) and drops
the rest, in this order, the cheap and certain parts first:

1. the dropped steps are kept as a branch (``agent.branches``) unless ``keep=False``;
2. the file changes applied to your folder after step N are undone, newest first: the
   staged workspace's change sets of the dropped calls (with their before-images), and
   what the dropped ``write_file``/``edit_file`` calls wrote; a file you edited since is
   never overwritten: the report lists it;
3. the context is cut after step N's results;
4. the sibling kernel is replaced by a fresh one (with a fresh staged copy of the folder)
   that re-runs the kept python calls in order and compares each output with the recorded
   one (a difference is reported, never hidden). Code that ran in this session after a yes
   runs again without asking; code that came in a loaded transcript is approved first.
   Calls that reached outside (shell, web, MCP, your own tools) are not re-run: their
   recorded results stand, and the report says so. Copies you pushed are made again.

No model request is made: a rewind costs the re-execution of the kept python calls.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._util.text import one_line, visible
from ..context.items import Item, ToolCall, ToolResult, unfold
from ..context.steps import count_steps, kept
from ..errors import ConfigError
from .rebuild import Rebuild, arebuild, rerun_steps

if TYPE_CHECKING:
    from ..engine.agent import Agent
    from ..engine.approval import Mode
    from ..kernel.staging import ChangeSet, Stage

__all__ = ["RewindPlan", "RewindReport", "plan", "arewind", "REACHED_OUTSIDE_FREE"]

# Tools whose recorded calls need nothing redone: they only read, or they are re-created
# (file writes, by the rebuild where missing).
REACHED_OUTSIDE_FREE = ("python", "read_file", "list_files", "write_file", "edit_file")
_FILE_WRITES = ("write_file", "edit_file")


@dataclass
class _FileWrite:
    """What a dropped file-tool call left: ``path`` with ``text`` (``created``: new then)."""

    path: str
    text: str
    created: bool
    call_id: str


@dataclass
class RewindPlan:
    """What ``rewind(step)`` does, worked out before anything changes (the question the
    "rewind to here" button asks)."""

    step: int
    steps: int  # steps in the conversation now
    items_dropped: int  # top-level items that go
    python_calls: int  # kept python calls the fresh sibling re-runs
    reruns: int  # ... and the files it re-creates where missing: the progress bar's length
    ask: int  # ... of which did not run in this session (asked first)
    outside: dict[str, int] = field(default_factory=dict)  # kept calls not re-run, by tool
    files: list[str] = field(default_factory=list)  # files the undo puts back, newest first
    not_undoable: list[str] = field(default_factory=list)  # what cannot be put back, why
    change_sets: list[ChangeSet] = field(default_factory=list, repr=False)  # to undo
    kept_sets: list[ChangeSet] = field(default_factory=list, repr=False)  # to carry on
    writes: list[_FileWrite] = field(default_factory=list, repr=False)  # to undo
    earlier: dict[str, str] = field(default_factory=dict, repr=False)  # path -> kept text

    @property
    def dropped(self) -> int:
        """How many steps go."""
        return self.steps - self.step

    def question(self) -> str:
        """What the rewind will do, in a few lines (shown before it is done)."""
        if not self.dropped:
            return f"Already at step {self.step}: nothing to drop."
        lines = [f"Rewind to step {self.step}: drop {_steps(self.step + 1, self.steps)} "
                 f"({self.items_dropped} item{'s' * (self.items_dropped != 1)})."]
        if self.files:
            lines.append(f"Undo in your folder: {_listed(self.files)} (a file you changed since "
                         "is left as it is).")
        lines += [f"Cannot undo: {why}" for why in self.not_undoable]
        rerun = (f"A fresh sibling kernel re-runs the {self.python_calls} kept python "
                 f"call{'s' * (self.python_calls != 1)}") if self.python_calls else (
                 "A fresh sibling kernel starts (no python call is kept)")
        if self.ask:
            rerun += f"; {self.ask} did not run in this session and will be asked about"
        lines.append(rerun + ".")
        if self.outside:
            lines.append(f"Not re-run, recorded results stand: {_tools(self.outside)}.")
        return "\n".join(visible(line) for line in lines)

    def __repr__(self) -> str:
        return f"<RewindPlan {one_line(self.question(), 200)}>"

    def _repr_markdown_(self) -> str:
        from ..trust.untrusted import markdown_literal

        return "\n\n".join(markdown_literal(line) for line in self.question().splitlines())


@dataclass
class RewindReport:
    """What a rewind did: the step it went back to, the branch that keeps the dropped steps,
    the files put back (and left), the re-run of the kept python calls."""

    step: int
    dropped: int = 0
    branch: str | None = None  # the branch that keeps the dropped steps (None: not kept)
    restored: list[str] = field(default_factory=list)  # files put back as they were
    kept: list[str] = field(default_factory=list)  # changed since: left as they are
    not_undoable: list[str] = field(default_factory=list)
    outside: dict[str, int] = field(default_factory=dict)  # not re-run: results stand
    rebuild: Rebuild | None = None  # the fresh sibling's re-run
    pending: list[str] = field(default_factory=list)  # files the re-run left in the sandbox's
    # copy that differ from your folder (not applied: ``%agent apply``)

    @property
    def ok(self) -> bool:
        """True when everything went back: no file left, no re-run failure or difference."""
        rebuild_ok = self.rebuild is None or (self.rebuild.ok and not self.rebuild.differences)
        return rebuild_ok and not self.kept and not self.not_undoable

    def lines(self) -> list[str]:
        """What happened, one line each."""
        if not self.dropped:
            return [f"already at step {self.step}: nothing dropped"]
        head = f"rewound to step {self.step}: dropped {self.dropped} step{'s' * (self.dropped != 1)}"
        head += (f", kept as branch {self.branch!r}" if self.branch else " (not kept)")
        out = [head]
        if self.restored:
            out.append(f"put back in your folder: {_listed(self.restored)}")
        if self.kept:
            out.append(f"left as you changed them since (not overwritten): {_listed(self.kept)}")
        out += [f"not undone: {why}" for why in self.not_undoable]
        if self.rebuild is not None:
            out.append(self.rebuild.line())
        if self.outside:
            out.append(f"not re-run, their recorded results stand: {_tools(self.outside)}")
        if self.pending:
            out.append(f"the re-run wrote files that differ from your folder, kept in the "
                       f"sandbox's copy only: {_listed(self.pending)}")
        return [visible(one_line(line, 2000)) for line in out]

    def line(self) -> str:
        """The first line: where it went and what it kept."""
        return self.lines()[0]

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def __repr__(self) -> str:
        return f"<RewindReport {self.line()}>"

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.ok else "#b35900"
        rows = "".join(f"<div>{html.escape(line)}</div>" for line in self.lines()[1:])
        return (f"<div class='ipyagent-rewind'><b style='color:{colour}'>"
                f"{html.escape(self.line())}</b>{rows}</div>")

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def _steps(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}–{last}"


def _listed(paths: Sequence[str], limit: int = 12) -> str:
    shown = ", ".join(paths[:limit])
    return shown + (f" (+{len(paths) - limit} more)" if len(paths) > limit else "")


def _tools(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} ×{n}" if n > 1 else name for name, n in counts.items())


# -- the plan ----------------------------------------------------------------------------
def plan(agent: Agent, n: int) -> RewindPlan:
    """What ``agent.rewind(n)`` would do; ``ConfigError`` (one line) for a step that is not."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise ConfigError(f"rewind takes a step number, not {n!r:.40}")
    items = list(agent.context)
    total = count_steps(items)
    try:
        keep = kept(items, n)
    except ValueError as exc:
        raise ConfigError(f"rewind: {exc}") from None
    dropped_top = len(items) - _common_prefix(items, keep)
    kept_flat = list(unfold(keep))
    dropped_flat = list(unfold(items))[len(kept_flat):]  # the kept ones are its first
    steps_rerun = rerun_steps(keep)
    python = [call for call, written in steps_rerun if written is None]
    ask = sum(1 for call in python
              if not agent.ran_here.has_code("python", str(call.arguments.get("code", ""))))
    out = plan_outside(kept_flat)
    result = RewindPlan(step=n, steps=total, items_dropped=dropped_top,
                        python_calls=len(python), reruns=len(steps_rerun), ask=ask, outside=out)
    if n >= total:
        return result
    _plan_change_sets(agent, kept_flat, dropped_flat, result)
    _plan_file_writes(agent, kept_flat, dropped_flat, result)
    return result


def _common_prefix(a: Sequence[Item], b: Sequence[Item]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x is not y:
            break
        n += 1
    return n


def plan_outside(flat: Sequence[Item]) -> dict[str, int]:
    """The kept calls that ran and are not re-run (shell, web, MCP, your tools), by tool."""
    results = {i.call_id for i in flat if isinstance(i, ToolResult) and not _not_run(i)}
    counts: dict[str, int] = {}
    for item in flat:
        if isinstance(item, ToolCall) and item.name not in REACHED_OUTSIDE_FREE \
                and item.id in results:
            counts[item.name] = counts.get(item.name, 0) + 1
    return counts


def _not_run(result: ToolResult) -> bool:
    return any(result.meta.get(k) for k in ("denied", "skipped", "interrupted", "unreadable"))


def _stage(agent: Agent) -> Stage | None:
    kernel = agent.kernel_if_started
    return getattr(kernel, "stage", None) if kernel is not None else None


def _plan_change_sets(agent: Agent, kept_flat: list[Item], dropped_flat: list[Item],
                      result: RewindPlan) -> None:
    """Which applied change sets belong to dropped calls. A call id may repeat (servers that
    number their calls per reply): a set belongs to the last call with its id approved
    before the set was applied, else to the next such call in order."""
    stage = _stage(agent)
    if stage is None:
        if any(isinstance(i, ToolCall) and i.name in ("python", "shell") for i in dropped_flat) \
                and _writes_directly(agent):
            result.not_undoable.append(
                "the model's code ran without a staged workspace (no sandbox here), so what "
                "it wrote went straight to your folder and has no before-image")
        return
    calls: list[tuple[str, bool, float | None]] = []
    results = _decision_times([*kept_flat, *dropped_flat])
    for dropped, items in ((False, kept_flat), (True, dropped_flat)):
        for item in items:
            if isinstance(item, ToolCall):
                calls.append((item.id, dropped, results.get(id(item))))
    at = 0
    for record in stage.applied:
        same = [k for k, (cid, _, _) in enumerate(calls) if cid == record.call_id]
        timed = [k for k in same if (calls[k][2] or float("inf")) <= record.at]
        match = timed[-1] if timed else next((k for k in same if k >= at), None)
        if not record.call_id or match is None:
            result.kept_sets.append(record)  # applied by hand, or by no call here: it stays
            continue
        at = match
        (result.change_sets if calls[match][1] else result.kept_sets).append(record)
    for record in reversed(result.change_sets):
        result.files += [c.path for c in reversed(record.changes) if c.path not in result.files]


def _decision_times(flat: list[Item]) -> dict[int, float]:
    """id(call) -> when it was approved (its result's audit record), where recorded."""
    import datetime as _dt

    out: dict[int, float] = {}
    open_calls: dict[str, list[ToolCall]] = {}
    for item in flat:
        if isinstance(item, ToolCall):
            open_calls.setdefault(item.id, []).append(item)
        elif isinstance(item, ToolResult) and open_calls.get(item.call_id):
            call = open_calls[item.call_id].pop(0)
            record = item.meta.get("decision")
            stamp = record.get("at") if isinstance(record, dict) else None
            if isinstance(stamp, str) and stamp:
                try:
                    out[id(call)] = _dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
                except ValueError:
                    continue
    return out


def _writes_directly(agent: Agent) -> bool:
    """True when the model's code writes the real folder (no stage: unsandboxed, remote)."""
    kernel = agent.kernel_if_started
    return kernel is not None and getattr(kernel, "stage", None) is None and \
        not getattr(kernel, "stage_note", "")


def _plan_file_writes(agent: Agent, kept_flat: list[Item], dropped_flat: list[Item],
                      result: RewindPlan) -> None:
    """What the dropped file-tool calls wrote, and each path's text as the kept steps left it."""
    for item in kept_flat:
        written = _file_of(item)
        if written is not None:
            result.earlier[written.path] = written.text
    for item in dropped_flat:
        written = _file_of(item)
        if written is None:
            continue
        if agent.workspace == "remote":
            result.not_undoable.append(f"{written.path}: written on the remote server")
            continue
        result.writes.append(written)
        if written.path not in result.files:
            result.files.append(written.path)


def _file_of(item: Item) -> _FileWrite | None:
    if not isinstance(item, ToolResult) or item.error or item.name not in _FILE_WRITES:
        return None
    entry = item.meta.get("file")
    if not (isinstance(entry, dict) and isinstance(entry.get("path"), str)
            and isinstance(entry.get("text"), str)):
        return None
    return _FileWrite(entry["path"], entry["text"], entry.get("created") is True, item.call_id)


# -- doing it ----------------------------------------------------------------------------
async def arewind(agent: Agent, n: int, *, keep: bool = True, approval: Mode | None = None,
                  on_event: Callable[[Any], Any] | None = None) -> RewindReport:
    """Rewind ``agent`` to step ``n`` (see the module's docstring) -> ``RewindReport``."""
    the_plan = plan(agent, n)
    report = RewindReport(step=n, dropped=the_plan.dropped, outside=the_plan.outside)
    if not the_plan.dropped:
        return report
    from .branches import cancel_deferred, keep_dropped

    if keep:
        report.branch = keep_dropped(agent, n).name
    cancel_deferred(agent)  # the fresh sibling re-runs the kept calls below
    _undo_change_sets(agent, the_plan, report)
    _undo_file_writes(agent, the_plan, report)
    report.not_undoable += the_plan.not_undoable
    new_items = kept(list(agent.context), n)
    same = _common_prefix(list(agent.context), new_items)
    if same == len(new_items):
        del agent.context[same:]  # only the dropped items' token estimates go
    else:
        agent.context[:] = new_items  # a summary was unfolded at the cut
    await _fresh_kernel(agent, the_plan, report, approval, on_event)
    return report


def _undo_change_sets(agent: Agent, the_plan: RewindPlan, report: RewindReport) -> None:
    stage = _stage(agent)
    if stage is None:
        return
    for record in reversed(the_plan.change_sets):  # newest first: each restores the one before
        done = stage.undo(record)
        report.restored += [p for p in done.restored if p not in report.restored]
        report.kept += [p for p in done.kept if p not in report.kept]


def _undo_file_writes(agent: Agent, the_plan: RewindPlan, report: RewindReport) -> None:
    """Put back what the dropped file-tool calls wrote, newest first, only where the file
    is still as the call left it."""
    root = Path(agent.workspace_path)
    history: dict[str, list[_FileWrite]] = {}
    for write in the_plan.writes:
        history.setdefault(write.path, []).append(write)
    for path, writes in history.items():
        last = writes[-1]
        now = _read_text(root, path)
        if now != last.text:
            if path not in report.kept:
                report.kept.append(path)
            continue
        first = writes[0]
        before = the_plan.earlier.get(path)
        try:
            if before is not None:
                _write_text(root, path, before)
            elif first.created:
                _remove(root, path)
            else:
                report.not_undoable.append(f"{path}: what it held before step "
                                           f"{the_plan.step + 1} was not recorded")
                continue
        except (OSError, ValueError) as exc:
            report.not_undoable.append(f"{path}: {one_line(exc, 120)}")
            continue
        if path not in report.restored:
            report.restored.append(path)


def _read_text(root: Path, path: str) -> str | None:
    from ..tools.files import locate, read_existing

    try:
        with locate(root, path) as spot:
            return read_existing(spot)
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _write_text(root: Path, path: str, text: str) -> None:
    from ..tools.files import locate, write_text

    with locate(root, path, make_dirs=True) as spot:
        write_text(spot, text)


def _remove(root: Path, path: str) -> None:
    from ..tools.files import locate

    with locate(root, path) as spot:
        os.unlink(spot.name, dir_fd=spot.dir_fd)


async def _fresh_kernel(agent: Agent, the_plan: RewindPlan, report: RewindReport,
                        approval: Mode | None, on_event: Callable[[Any], Any] | None) -> None:
    """A fresh sibling (and staged copy) that re-runs the kept python calls."""
    old = await agent.resources.renew_kernel()
    if old is None and not the_plan.python_calls:
        return  # no kernel was made, none is needed yet
    kernel = agent.kernel
    await kernel.start_async()  # the staged workspace is made as it starts
    stage: Stage | None = getattr(kernel, "stage", None)
    if stage is not None:  # first: an interrupted re-run must not lose them
        stage.applied[:0] = the_plan.kept_sets  # the kept steps' change sets can still be undone
    report.rebuild = await arebuild(agent, approval=approval, on_event=on_event,
                                    ran_here=agent.ran_here, compare=True)
    if stage is not None:
        report.pending = [c.path for c in stage.scan() if c.status == "pending"]
