"""After a python or shell call: what the model's code changed in the staged workspace,
applied to your folder as ``Agent.apply_changes`` says, shown on the card, told to the model.

Data files are applied at once under the default (``data``); anything that can run code
later (``kernel.staging.code_risk``) waits for a person: the frontend asks where it can
(``confirm_changes`` on the approval UI), else the change stays pending for ``%agent apply``.
ipyagent's own state (``.ipyagent/``) is never applied from the sandbox, whoever asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._util.diffs import LineEdit, line_edits
from .._util.text import visible_name
from ..context.items import CHANGES_NOTE, ToolResult
from ..kernel.staging import Change, Stage, canonical

__all__ = ["ChangeRequest", "settle_changes", "never_applied", "model_note"]


def never_applied(change: Change) -> bool:
    """ipyagent's own state (memory, cache, autosaves, settings): out of the sandbox's reach."""
    # At any depth (the notebook's folder may lie inside the workspace), and as the folder
    # may see it: .IPYAGENT, ".ipyagent." are the same folder on some.
    return any(canonical(part) == ".ipyagent" for part in change.path.split("/"))


@dataclass
class ChangeRequest:
    """Changes the model's code made that need a person's yes before they reach the folder."""

    changes: list[Change]
    call_id: str = ""

    def lines(self) -> list[str]:
        return [visible_name(c.line()) for c in self.changes]

    def question(self) -> str:
        rows = self.lines()
        more = len(rows) - QUESTION_ROWS
        rows = rows[:QUESTION_ROWS] + ([f"... and {more} more (%agent changes lists them)"]
                                       if more > 0 else [])
        return ("The model's code changed these files in the sandbox's copy of your folder; "
                "they can run code later:\n" + "\n".join(f"  {line}" for line in rows))

    def _repr_markdown_(self) -> str:
        return self.question()


NOTE_PATHS = 20  # paths named per group in the model's note; the rest are counted
QUESTION_ROWS = 200  # rows of a terminal question (a call can make 100,000 files)
QUESTION_DIFFS = 20  # changes whose diff the terminal shows before asking


def _named(group: Sequence[Change], say: Any) -> str:
    """Up to NOTE_PATHS of ``group`` (a call can make 100,000 files), then how many more."""
    shown = ", ".join(say(c) for c in group[:NOTE_PATHS])
    more = len(group) - NOTE_PATHS
    return shown + (f", and {more} more (%agent changes lists them)" if more > 0 else "")


NOTE_DETAILED = 3  # files whose changed lines the model's note quotes
NOTE_LINES = 4  # changed lines quoted per file
NOTE_LINE_CHARS = 60  # of each quoted line


def _quoted(line: str) -> str:
    """A line of the file as the note quotes it: as a Python literal (its quotes and escapes
    keep what the file says apart from ipyagent's words; control, bidi and tag characters
    show escaped), at most ``NOTE_LINE_CHARS`` long as written (escapes count)."""
    keep = len(line)
    while len(repr(line[:keep])) + (keep < len(line)) > NOTE_LINE_CHARS and keep:
        keep = max(0, min(keep - 1, keep * NOTE_LINE_CHARS // len(repr(line[:keep]))))
    return repr(line[:keep] + ("…" if keep < len(line) else ""))


def _said(edit: LineEdit) -> str:
    if edit.kind == "replaced":
        return f"line {edit.line} was {_quoted(edit.old)}, now {_quoted(edit.new)}"
    if edit.kind == "added":
        return f"line {edit.line} added: {_quoted(edit.new)}"
    if edit.kind == "removed":
        return f"removed: {_quoted(edit.old)} (it was line {edit.line})"
    return f"line {edit.line}: its line ending changed"


def changed_lines(diff: str) -> tuple[list[str], int]:
    """What a unified diff (``Change.diff``) did, line by line as a reader says it ("line 6
    was '[data]', now 'threshold = 0.75'", "line 3 added: 'done = true'"): the first
    ``NOTE_LINES`` and how many more lines changed; nothing for an abridged diff."""
    edits = line_edits(diff) or []
    return [_said(e) for e in edits[:NOTE_LINES]], max(0, len(edits) - NOTE_LINES)


def _detail(change: Change, quote: bool) -> str:
    """``(modified, now 7 lines: line 6 was '[data]', now 'threshold = 0.75')``.

    Measured at 1.5B (issue 33): told only "settings.ini (modified)", the model answered for
    an edit that had overwritten the wrong line, and counted 4 lines in a file of 3."""
    words: str = change.kind
    if change.lines is not None and change.kind != "deleted":
        lines = f"{change.lines} line{'s' if change.lines != 1 else ''}"
        words += f", now {lines}" if change.kind == "modified" else f", {lines}"
    if quote and change.kind == "modified" and change.diff:
        said, more = changed_lines(change.diff)
        if said:
            rest = f"; and {more} more changed line{'s' if more != 1 else ''}" if more else ""
            words += ": " + "; ".join(said) + rest
    return f"({words})"


def model_note(changes: Sequence[Change]) -> str:
    """What the model is told (as the result's note): which changes reached the user's
    folder and which did not, with how many lines each text file has now and, for the first
    few, which lines changed."""
    if not changes:
        return ""
    quoted = {id(c) for c in changes[:NOTE_DETAILED]}

    def say(c: Change) -> str:
        return f"{visible_name(c.path)} {_detail(c, id(c) in quoted)}"

    applied = [c for c in changes if c.status == "applied"]
    failed = [c for c in changes if c.status == "pending" and c.problem]
    waiting = [c for c in changes if c.status == "pending" and not c.problem]
    kept = [c for c in changes if c.status in ("discarded", "undone")]
    parts = []
    if applied:
        parts.append("applied to the user's folder: " + _named(applied, say))
    if failed:
        parts.append("NOT applied, could not be applied: "
                     + _named(failed, lambda c: f"{visible_name(c.path)} ({c.kind}: {c.problem})"))
    if waiting:
        parts.append("NOT applied, waiting for the user (they can run code): " + _named(waiting, say))
    if kept:
        parts.append("NOT applied (the user said no; only your sandbox sees them): "
                     + _named(kept, say))
    return "files changed: " + "; ".join(parts)


async def settle_changes(host: Any, result: ToolResult) -> None:
    """Scan the stage after a call, apply per the setting, record on ``result``."""
    stage: Stage | None = getattr(host.kernel, "stage", None)
    if stage is None:
        return
    changes = sorted(stage.scan(), key=lambda c: c.path)
    if not changes:
        return
    mode = getattr(host, "apply_changes", "data")
    final: dict[str, Change] = {c.path + "\0" + c.root: c for c in changes}
    eligible = [c for c in changes if not never_applied(c)]
    now = [c for c in eligible if c.risk is None] if mode == "data" else []
    applying = {id(c) for c in now}  # by identity: `c not in now` was O(n^2) for 20,000 files
    ask = [c for c in eligible if id(c) not in applying] if mode != "never" else []
    if now:
        record = stage.apply(now, by="policy", call_id=result.call_id)
        for c in record.changes + record.failed:
            final[c.path + "\0" + c.root] = c
    if ask:
        ui = getattr(getattr(host, "policy", None), "ui", None)
        confirm = getattr(ui, "confirm_changes", None)
        if callable(confirm):
            answer = await confirm(ChangeRequest(ask, result.call_id))
            by = "terminal" if type(ui).__name__.startswith("Terminal") else "click"
            if answer is True:
                record = stage.apply(ask, by="person", call_id=result.call_id)
                for c in record.changes + record.failed:
                    final[c.path + "\0" + c.root] = c
                _audit(result, "apply", record.changes, by, call_id=result.call_id)
            elif answer is False:
                kept = stage.discard(ask)
                for c in kept:
                    final[c.path + "\0" + c.root] = c
                _audit(result, "discard", kept, by, call_id=result.call_id)
    shown = list(final.values())
    result.meta["changes"] = [c.as_dict() for c in shown]
    # ipyagent's words, not the code's output: a note of its own (``ToolResult.for_model``),
    # which nothing the code prints can pass for.
    said = model_note(shown)
    result.meta["note"] = "; ".join(filter(None, [result.meta.get("note"), said]))
    if said:
        result.meta[CHANGES_NOTE] = said


def _subject(changes: Sequence[Change]) -> str:
    n = len(changes)
    return f"{n} file change{'s' if n != 1 else ''}: " + ", ".join(c.path for c in changes)


def _digest(changes: Sequence[Change]) -> str:
    """One sha256 for a set of changes: over each path and its staged content's sha256."""
    import hashlib

    lines = "".join(f"{c.path}\0{c.sha256 or '-'}\n" for c in sorted(changes, key=lambda c: c.path))
    return hashlib.sha256(lines.encode(errors="surrogateescape")).hexdigest()


def _audit(target: Any, action: str, changes: Sequence[Change], by: str, *, call_id: str = "",
           tell: str | None = None) -> None:
    """A row of the audit for a person's decision on file changes (with what moved)."""
    if not changes:
        return
    from ..context.decisions import person_decided

    person_decided(target, action, _subject(changes), by=by, sha256=_digest(changes),
                   call_id=call_id, tell=tell)


class ChangeList(list):  # type: ignore[type-arg]
    """Changes with a readable table (``%agent changes``, ``agent.changes()``)."""

    def __init__(self, changes: Sequence[Change], note: str = "") -> None:
        super().__init__(changes)
        self.note = note

    def __repr__(self) -> str:
        if not self:
            return self.note or "no changes from the sandbox"
        return "\n".join(f"[{c.status}] {visible_name(c.line())}" for c in self)

    def _repr_html_(self) -> str:
        import html

        if not self:
            return f"<p>{html.escape(self.note or 'no changes from the sandbox')}</p>"
        rows = "".join(
            f"<tr><td>{html.escape(c.status)}</td><td><code>{html.escape(visible_name(c.path))}</code></td>"
            f"<td>{html.escape(c.kind)}</td><td>{'' if c.size is None else c.size}</td>"
            f"<td>{html.escape(visible_name(c.risk or ''))}</td></tr>" for c in self)
        return ("<table><thead><tr><th>status</th><th>file</th><th>change</th><th>bytes</th>"
                f"<th>can run code</th></tr></thead><tbody>{rows}</tbody></table>")


def _stage(agent: Any) -> Stage | None:
    kernel = agent.kernel_if_started
    return getattr(kernel, "stage", None) if kernel is not None else None


def _pick(changes: Sequence[Change], paths: Sequence[str]) -> list[Change]:
    if not paths:
        return list(changes)
    wanted = {p.strip("/") for p in paths}
    picked = [c for c in changes if c.path in wanted]
    missing = wanted - {c.path for c in picked}
    if missing:
        raise ValueError(f"no pending change for {', '.join(sorted(missing))}; %agent changes lists them")
    return picked


def list_changes(agent: Any, everything: bool = False) -> ChangeList:
    """The sandbox's pending changes (``everything``: with applied, discarded and undone)."""
    stage = _stage(agent)
    if stage is None:
        return ChangeList([], _why_none(agent))
    return ChangeList(stage.changes() if everything else stage.pending())


def apply_pending(agent: Any, paths: Sequence[str] = ()) -> ChangeList:
    """Apply pending changes (all, or those at ``paths``) to the folder: a person's decision."""
    stage = _stage(agent)
    if stage is None:
        return ChangeList([], _why_none(agent))
    chosen = [c for c in _pick(stage.pending(), paths) if not never_applied(c)]
    record = stage.apply(chosen, by="person")
    done = record.changes
    _audit(agent.context, "apply", done, "user", tell=(
        f"[ipyagent: the user applied to their folder: {', '.join(c.path for c in done)}]"))
    return ChangeList(done + record.failed, "nothing to apply")  # failed: with why


def discard_pending(agent: Any, paths: Sequence[str] = ()) -> ChangeList:
    """Keep pending changes in the sandbox only."""
    stage = _stage(agent)
    if stage is None:
        return ChangeList([], _why_none(agent))
    kept = stage.discard(_pick(stage.pending(), paths))
    _audit(agent.context, "discard", kept, "user")
    return ChangeList(kept, "nothing to discard")


def undo_last(agent: Any) -> Any:
    """Undo the last applied change set (an ``UndoReport``)."""
    from ..kernel.staging import UndoReport

    stage = _stage(agent)
    if stage is None:
        return UndoReport()
    last = stage.applied[-1] if stage.applied else None
    report = stage.undo()
    if last is not None and report.restored:
        undone = [c for c in last.changes if c.path in report.restored]
        _audit(agent.context, "undo", undone, "user", tell=(
            f"[ipyagent: the user undid these changes in their folder: {', '.join(report.restored)}"
            + (f"; left as they edited them: {', '.join(report.kept)}" if report.kept else "") + "]"))
    return report


def _why_none(agent: Any) -> str:
    kernel = agent.kernel_if_started
    if kernel is None:
        return "no sibling kernel yet: nothing has run"
    note = getattr(kernel, "stage_note", "")
    return note or "the sibling is not staged (not sandboxed, or remote): its writes reach the folder directly"
