"""The audit trail: how each tool call was decided, and every other thing a person decided,
read back from the context.

``Agent`` writes one record per tool-call decision into the result's ``meta["decision"]``;
every other decision a person makes — Take or decline an offer, pull, push, apply or
discard file changes, undo — is recorded with ``person_decided`` into an item's
``meta["decided"]`` (so both are saved and loaded with the transcript). ``Audit`` lists
them in order for ``agent.audit()``, ``%agent audit`` and the transcript's "Audit" cell.
Every string in a record may come from the model (tool names, call ids, edited code, a
variable's name) or another person (a reason), so it is escaped wherever it is rendered.
"""

from __future__ import annotations

import difflib
import functools
import html
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .._util.text import one_line, visible
from .decisions import DECIDED, Decision, person_decided
from .items import Item, ToolCall, ToolResult, skip_reason, unfold

__all__ = ["Audit", "AuditRow", "audit_rows", "decision_record", "person_decided"]



def decision_record(decision: Decision, step: int,
                    original: dict[str, Any] | None = None,
                    ran: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON-safe record of one decision, for ``ToolResult.meta["decision"]``."""
    record: dict[str, Any] = {"action": decision.action, "by": decision.by,
                              "detail": decision.detail, "at": decision.at,
                              "reason": decision.reason, "scope": decision.scope, "step": step}
    if decision.action == "edit" and original is not None:
        record["edited"] = {"original": original, "diff": _diff(original, ran or {})}
    return record


def _diff(before: dict[str, Any], after: dict[str, Any]) -> str:
    """A unified diff of the code (or of the JSON arguments) the edit changed."""
    def rest(args: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in args.items() if k != "code"}

    code_only = "code" in before and "code" in after and rest(before) == rest(after)

    def text(args: dict[str, Any]) -> str:
        if code_only:
            return str(args["code"])
        return json.dumps(args, indent=2, ensure_ascii=False, sort_keys=True)

    lines = difflib.unified_diff(text(before).splitlines(), text(after).splitlines(),
                                 "proposed", "ran", lineterm="")
    return "\n".join(lines)


@dataclass
class AuditRow:
    """One tool call and how it was decided (``by`` empty: no decision was recorded)."""

    step: int | None
    call_id: str
    tool: str
    decision: str  # approve | deny | edit | "" (never decided: skipped, interrupted, old file)
    by: str
    detail: str
    at: str
    edited: bool
    reason: str
    ran: bool  # approved, so it started
    note: str = ""  # why there is no decision
    always: bool = False  # this answer was Always: later calls of the tool ran unasked
    person: bool = False  # a person_decided row (take, pull, push, apply, undo…), not a call
    sha256: str = ""  # of what moved, for a person_decided row where something did

    def __iter__(self) -> Iterator[Any]:
        return iter((self.step, self.call_id, self.tool, self.decision, self.by, self.at,
                     self.edited, self.sha256))


COLUMNS = ("step", "call id", "tool", "decision", "by", "at", "edited", "sha256")


def _person_rows(meta: dict[str, Any], step: int | None) -> list[AuditRow]:
    """The ``person_decided`` records an item holds, as rows (malformed ones skipped)."""
    rows = []
    for record in meta.get(DECIDED) or []:
        if not isinstance(record, dict):
            continue
        rows.append(AuditRow(step, str(record.get("call_id", "")), str(record.get("subject", "")),
                             str(record.get("action", "")), str(record.get("by", "")),
                             str(record.get("detail", "")), str(record.get("at", "")), False,
                             str(record.get("reason", "")), False, person=True,
                             sha256=str(record.get("sha256", ""))))
    return rows


def audit_rows(items: Iterable[Item]) -> list[AuditRow]:
    """A row per tool call, in order, with its recorded decision."""
    flat = list(unfold(items, keep_summaries=True))  # compacted calls ran: they stay in the trail
    results: dict[str, list[ToolResult]] = {}
    for item in flat:
        if isinstance(item, ToolResult):
            results.setdefault(item.call_id, []).append(item)
    rows: list[AuditRow] = []
    step: int | None = None
    for item in flat:
        turn = getattr(item, "meta", {}).get("turn")
        if isinstance(turn, dict) and isinstance(turn.get("step"), int):
            step = turn["step"]
        if not isinstance(item, ToolCall):
            item_meta = getattr(item, "meta", None)
            if isinstance(item_meta, dict):
                rows += _person_rows(item_meta, step)
            continue
        queue = results.get(item.id, [])
        result = queue.pop(0) if queue else None
        meta = result.meta if result is not None else {}
        record = meta.get("decision")
        if isinstance(record, dict):
            action = str(record.get("action", ""))
            rows.append(AuditRow(
                step=record.get("step") if isinstance(record.get("step"), int) else step,
                call_id=item.id, tool=item.name, decision=action, by=str(record.get("by", "")),
                detail=str(record.get("detail", "")), at=str(record.get("at", "")),
                edited=action == "edit", reason=str(record.get("reason", "")),
                ran=action in ("approve", "edit"), always=record.get("scope") == "always"))
            continue
        note = ("not answered" if result is None else
                f"not run: {skip_reason(meta)}" if meta.get("skipped") else
                "interrupted before a decision" if meta.get("interrupted") else
                "not offered to the model" if result.error and "status" not in meta
                and not meta.get("denied") and result.execution_count is None else
                "no decision recorded (an older transcript)")
        rows.append(AuditRow(step, item.id, item.name, "", "", "", "", False,
                             str(meta.get("reason", "")), False, note))
    return rows


def _by(row: AuditRow) -> str:
    if row.by == "always":  # ran unasked: name the call whose answer said Always
        return f"always (given at {row.detail})" if row.detail else "always"
    return f"{row.by} ({row.detail})" if row.detail else row.by


class Audit:
    """Every tool call of a conversation and how it was decided: iterate for rows."""

    def __init__(self, rows: list[AuditRow]) -> None:
        self.rows = rows

    @classmethod
    def of(cls, items: Iterable[Item]) -> Audit:
        """The audit of a context's (or a transcript's) items."""
        return cls(audit_rows(items))

    def __iter__(self) -> Iterator[AuditRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> AuditRow:
        return self.rows[index]

    def __repr__(self) -> str:
        calls = [r for r in self.rows if not r.person]
        ran = sum(r.ran for r in calls)
        denied = sum(r.decision == "deny" for r in calls)
        other = len(self.rows) - len(calls)
        more = f", {other} other decision{'s' * (other != 1)}" if other else ""
        return f"<Audit: {len(calls)} calls, {ran} ran, {denied} denied{more}>"

    def _cells(self, row: AuditRow) -> list[str]:
        decision = row.decision or f"— {row.note}"
        if row.always:
            decision += " + Always (this conversation)"
        if row.reason and row.decision in ("deny", "decline", "discard"):
            decision += f": {row.reason}"
        return ["" if row.step is None else str(row.step), row.call_id, row.tool, decision,
                _by(row), row.at, "yes" if row.edited else "",
                f"{row.sha256[:12]}…" if row.sha256 else ""]

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        """The table as text, for terminal IPython (which showed only the summary line)."""
        from .._util.text import visible

        rows = [list(COLUMNS), *(self._cells(r) for r in self.rows)]
        rows = [[one_line(c) for c in row] for row in rows]  # a reason or id on one line
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
        lines = [repr(self)] + ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
                                for row in rows]
        p.text(visible("\n".join(lines)))  # tool names and reasons come from outside

    def _repr_html_(self) -> str:
        rows = [self._cells(r) for r in self.rows]
        # Columns no row fills (edited, sha256 in most runs) are left out of the view.
        kept = [i for i, name in enumerate(COLUMNS) if name in ("step", "tool", "decision")
                or any(row[i] for row in rows)]
        left = 'style="text-align:left"'  # Jupyter right-aligns table cells
        nowrap = 'style="text-align:left;white-space:nowrap"'  # a time on one line
        head = "".join(f"<th {left}>{COLUMNS[i]}</th>" for i in kept)
        body = "".join("<tr>" + "".join(
            f"<td {nowrap if COLUMNS[i] in ('at', 'call id') else left}>"
            f"{html.escape(visible(one_line(row[i])))}</td>"
            for i in kept) + "</tr>" for row in rows)
        summary = html.escape(repr(self)[1:-1].removeprefix("Audit: "))
        return (f"<div><b>Audit</b>: {summary}"
                f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")

    def markdown(self) -> str:
        """The "Audit" section of a transcript: a Markdown table, every value escaped."""
        intro = (f"{_md(repr(self)[1:-1])}. How each tool call was decided (`by`: click, "
                 "click-always, terminal, always, allow-list, policy, hook, timeout, headless, "
                 "replay), and what else a person decided (take, pull, push, apply, discard, "
                 "undo; `tool` is then what it was about); the full records are in each "
                 "result's `meta.decision` and the items' `meta.decided`.")
        lines = ["#### Audit", "", intro, "", "| " + " | ".join(COLUMNS) + " |",
                 "|" + "---|" * len(COLUMNS)]
        lines += [_md_row(tuple(self._cells(r))) for r in self.rows]
        return "\n".join(lines)


# Markdown punctuation that could start emphasis, code, a link or a table cell; < > & are
# HTML-escaped instead (a backslash before an entity would show the entity's text).
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


@functools.lru_cache(maxsize=16_384)  # a transcript's audit is rewritten at every autosave
def _md_row(cells: tuple[str, ...]) -> str:
    """One row of the Markdown table, each cell inert."""
    return "| " + " | ".join(_md(c) for c in cells) + " |"


def _md(text: str) -> str:
    """Untrusted text as inert text in a Markdown table cell (one line)."""
    return html.escape(_MD_SPECIAL.sub(r"\\\1", one_line(text)), quote=False)
