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

from .items import Summary, ToolCall, ToolResult, item_from_dict

__all__ = ["Rebuild", "python_calls_that_ran", "arebuild"]

@dataclass
class Rebuild:
    """What ``rebuild_kernel`` re-ran: counts, and the calls that failed this time."""

    ran: int = 0
    failed: list[tuple[int, str, str]] = field(default_factory=list)  # (n, status, line)

    @property
    def ok(self) -> bool:
        """True when every re-run call ended ``ok``."""
        return not self.failed

    def line(self) -> str:
        """One line for the user."""
        text = f"re-ran {self.ran} python call{'s' if self.ran != 1 else ''} in the sibling kernel"
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


def _unfold(items: Iterable[Any]) -> Iterable[Any]:
    """Items in order, with each compaction summary replaced by what it replaced."""
    for item in items:
        if isinstance(item, Summary):
            yield from _unfold(item_from_dict(d) for d in item.replaced)
        else:
            yield item


def python_calls_that_ran(items: Iterable[Any]) -> list[ToolCall]:
    """The ``python`` calls, in order, that the transcript shows as code cells.

    The same rule as the notebook's cells (summaries unfolded): calls that ran, as
    edited — not denied, skipped, interrupted, timed-out or kernel-killing ones.
    """
    from .notebook_export import _not_run_reason

    flat = list(_unfold(items))
    pending: dict[str, list[ToolResult]] = {}
    for item in flat:
        if isinstance(item, ToolResult):
            pending.setdefault(item.call_id, []).append(item)
    ran: list[ToolCall] = []
    for item in flat:
        if not isinstance(item, ToolCall) or item.name != "python":
            continue
        queue = pending.get(item.id) or []
        result = queue.pop(0) if queue else None
        if (isinstance(item.arguments.get("code"), str) and item.raw_arguments is None
                and not _not_run_reason(result)):
            ran.append(item)
    return ran


async def arebuild(agent: Any) -> Rebuild:
    """Re-run ``agent.context``'s python calls in ``agent.kernel``; a failure does not stop it."""
    report = Rebuild()
    for n, call in enumerate(python_calls_that_ran(agent.context), 1):
        execution = await agent.kernel.execute_async(str(call.arguments["code"]))
        report.ran += 1
        if execution.status != "ok":
            lines = execution.text.strip().splitlines()
            report.failed.append((n, execution.status, lines[-1][:120] if lines else ""))
    return report
