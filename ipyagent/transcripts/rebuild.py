"""Rebuild the sibling kernel's state from a conversation: re-run the python that ran.

Why: a loaded transcript continues the *conversation*, but its sibling kernel starts
empty, so the model's next ``print(df.head())`` fails on a ``df`` it believes exists.
``agent.rebuild_kernel()`` (``%agent load PATH --rerun``) re-executes, in order, every
``python`` call that really ran — as edited, and including calls a compaction summary
replaced — exactly the calls the transcript shows as code cells. It is the user's explicit
choice: like "Run All" on a notebook, it runs that code without asking; a transcript
whose cells no longer match its metadata is refused (``Transcript.verify_cells``).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..items import Summary, ToolCall, ToolResult, item_from_dict

__all__ = ["Rebuild", "python_calls_that_ran", "rerun_steps", "arebuild", "unfold"]

@dataclass
class Rebuild:
    """What ``rebuild_kernel`` re-ran: counts, and the calls that failed this time."""

    ran: int = 0
    files: int = 0  # files re-created as the agent left them
    failed: list[tuple[int, str, str]] = field(default_factory=list)  # (n, status, line)

    @property
    def ok(self) -> bool:
        """True when every re-run call ended ``ok``."""
        return not self.failed

    def line(self) -> str:
        """One line for the user."""
        text = f"re-ran {self.ran} python call{'s' if self.ran != 1 else ''} in the sibling kernel"
        if self.files:
            text += f" and re-created {self.files} file{'s' if self.files != 1 else ''} the agent wrote"
        if self.failed:
            n, status, first = self.failed[0]
            more = f" (+{len(self.failed) - 1} more)" if len(self.failed) > 1 else ""
            text += f"; {len(self.failed)} failed — call {n}: {status}: {first}{more}"
        return text

    def __repr__(self) -> str:
        return f"<Rebuild {self.line()}>"

    def _repr_html_(self) -> str:
        colour = "#2a7" if self.ok else "#c80"
        return f"<div style='color:{colour}'>{html.escape(self.line())}</div>"


def unfold(items: Iterable[Any]) -> Iterable[Any]:
    """Items in order, with each compaction summary replaced by what it replaced."""
    for item in items:
        if isinstance(item, Summary):
            yield from unfold(item_from_dict(d) for d in item.replaced)
        else:
            yield item


def rerun_steps(items: Iterable[Any]) -> list[tuple[ToolCall, tuple[str, str] | None]]:
    """What a re-run re-does, in order: each python call that ran (with ``None``) and each
    file the agent wrote (with its recorded ``(path, text)``).

    The same rule as the notebook's cells (summaries unfolded): calls that ran, as
    edited — not denied, skipped, interrupted, timed-out or kernel-killing ones.
    """
    from ..tools.files import recorded_file
    from .export import _not_run_reason

    flat = list(unfold(items))
    pending: dict[str, list[ToolResult]] = {}
    for item in flat:
        if isinstance(item, ToolResult):
            pending.setdefault(item.call_id, []).append(item)
    steps: list[tuple[ToolCall, tuple[str, str] | None]] = []
    for item in flat:
        if not isinstance(item, ToolCall):
            continue
        queue = pending.get(item.id) or []
        result = queue.pop(0) if queue else None
        if item.name != "python":
            written = recorded_file(result)
            if written is not None:
                steps.append((item, written))
        elif (isinstance(item.arguments.get("code"), str) and item.raw_arguments is None
                and not _not_run_reason(result)):
            steps.append((item, None))
    return steps


def python_calls_that_ran(items: Iterable[Any]) -> list[ToolCall]:
    """The ``python`` calls, in order, that the transcript shows as code cells."""
    return [call for call, written in rerun_steps(items) if written is None]


async def arebuild(agent: Any) -> Rebuild:
    """Re-run ``agent.context``'s python calls in ``agent.kernel`` and re-create the files the
    agent wrote, in order; a failure does not stop it."""
    from .file_record import restore

    report = Rebuild()
    claimed: set[str] = set()  # files this re-run made: a later write of the agent's may replace them
    for n, (call, written) in enumerate(rerun_steps(agent.context), 1):
        if written is not None:
            _, why = restore(agent.workspace_path, *written, claimed)
            if why is None:
                report.files += 1
            else:
                report.failed.append((n, f"{call.name} {written[0]}", why))
            continue
        execution = await agent.kernel.execute_async(str(call.arguments["code"]))
        report.ran += 1
        if execution.status != "ok":
            lines = execution.text.strip().splitlines()
            report.failed.append((n, execution.status, lines[-1][:120] if lines else ""))
    return report
