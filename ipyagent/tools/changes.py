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

from .._text import visible
from ..items import ToolResult
from ..kernel.staging import Change, Stage

__all__ = ["ChangeRequest", "settle_changes", "never_applied", "model_note"]


def never_applied(change: Change) -> bool:
    """ipyagent's own state (memory, cache, autosaves, settings): out of the sandbox's reach."""
    return change.path.split("/", 1)[0] == ".ipyagent"


@dataclass
class ChangeRequest:
    """Changes the model's code made that need a person's yes before they reach the folder."""

    changes: list[Change]
    call_id: str = ""

    def lines(self) -> list[str]:
        return [visible(c.line()) for c in self.changes]

    def question(self) -> str:
        return ("The model's code changed these files in the sandbox's copy of your folder; "
                "they can run code later:\n" + "\n".join(f"  {line}" for line in self.lines()))

    def _repr_markdown_(self) -> str:
        return self.question()


def model_note(changes: Sequence[Change]) -> str:
    """What the model is told: which changes reached the user's folder and which did not."""
    if not changes:
        return ""
    applied = [c for c in changes if c.status == "applied"]
    waiting = [c for c in changes if c.status == "pending"]
    kept = [c for c in changes if c.status in ("discarded", "undone")]
    parts = []
    if applied:
        parts.append("applied to the user's folder: " + ", ".join(f"{c.path} ({c.kind})" for c in applied))
    if waiting:
        parts.append("NOT applied, waiting for the user (they can run code): "
                     + ", ".join(f"{c.path} ({c.kind})" for c in waiting))
    if kept:
        parts.append("NOT applied (the user said no; only your sandbox sees them): "
                     + ", ".join(f"{c.path} ({c.kind})" for c in kept))
    return "[ipyagent note, not tool output: files changed: " + "; ".join(parts) + "]"


async def settle_changes(host: Any, result: ToolResult) -> None:
    """Scan the stage after a call, apply per the setting, record on ``result``."""
    stage: Stage | None = getattr(host.kernel, "stage", None)
    if stage is None:
        return
    changes = stage.scan()
    if not changes:
        return
    mode = getattr(host, "apply_changes", "data")
    final: dict[str, Change] = {c.path + "\0" + c.root: c for c in changes}
    eligible = [c for c in changes if not never_applied(c)]
    now = [c for c in eligible if c.risk is None] if mode == "data" else []
    ask = [c for c in eligible if c not in now] if mode != "never" else []
    if now:
        for c in stage.apply(now, by="policy", call_id=result.call_id).changes:
            final[c.path + "\0" + c.root] = c
    if ask:
        confirm = getattr(getattr(getattr(host, "policy", None), "ui", None), "confirm_changes", None)
        if callable(confirm):
            answer = await confirm(ChangeRequest(ask, result.call_id))
            if answer is True:
                for c in stage.apply(ask, by="person", call_id=result.call_id).changes:
                    final[c.path + "\0" + c.root] = c
            elif answer is False:
                for c in stage.discard(ask):
                    final[c.path + "\0" + c.root] = c
    shown = list(final.values())
    result.meta["changes"] = [c.as_dict() for c in shown]
    note = model_note(shown)
    result.output = f"{result.output}\n{note}" if result.output else note
