"""A decision on one tool call: approve, deny or edit, who made it, and when.

Data: the approval policy (``approval``) makes them, events carry them, the audit trail
and transcripts record them.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Action", "BY", "PERSON", "DECIDED", "Decision", "person_decided", "utc_now"]

DECIDED = "decided"  # the meta key of person_decided's records (a list, oldest first)

Action = Literal["approve", "deny", "edit"]
# How a decision was made (``Decision.by``); ``Decision.detail`` says which button, key,
# allow entry, mode or earlier call. "user" is what older transcripts and hooks say.
BY = ("click", "click-always", "terminal", "always", "allow-list", "policy", "hook",
      "timeout", "headless", "replay", "interrupt", "user")
PERSON = ("click", "click-always", "terminal", "user")  # a person answered


def utc_now() -> str:
    """Now as a UTC ISO 8601 timestamp (milliseconds), for the audit trail."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


@dataclass
class Decision:
    """The answer for one tool call."""

    action: Action
    reason: str = ""
    # For "edit": the arguments that should run instead (e.g. edited code).
    arguments: dict[str, Any] | None = None
    # "always": approve this tool for the rest of this conversation (until reset / --new /
    # load: a new task asks again).
    scope: Literal["once", "always"] = "once"
    by: str = ""  # how it was decided: one of ``BY``
    detail: str = ""  # which button / key / allow entry / mode, or the call that set Always
    at: str = ""  # when the answer arrived (UTC ISO), stamped by ApprovalPolicy

    @property
    def approved(self) -> bool:
        return self.action in ("approve", "edit")

    @property
    def by_person(self) -> bool:
        """True when a person answered (also when replay re-applies a person's answer)."""
        return self.by in PERSON or (self.by == "replay" and self.detail in PERSON)

    def __repr__(self) -> str:
        by = f", by={self.by}" + (f" ({self.detail})" if self.detail else "") if self.by else ""
        extra = f", reason={self.reason!r}" if self.reason else ""
        return f"Decision({self.action}{', always' if self.scope == 'always' else ''}{by}{extra})"


def person_decided(target: Any, action: str, subject: str, *, by: str = "user",
                   sha256: str | None = None, detail: str = "", reason: str = "",
                   call_id: str = "", tell: str | None = None) -> dict[str, Any]:
    """Record that a person decided ``action`` about ``subject``: one row of the audit.

    For every decision a person makes that is not a tool call's approval (those the step
    records itself): ``action`` is a verb — ``take``/``decline`` (an offer), ``pull``,
    ``push``, ``apply``/``discard`` (file changes), ``undo``, or another one; ``subject``
    what it was about (a variable's name, ``3 file changes``), shown escaped.

    ``target`` is where the record is kept, so it is saved with the transcript:
      - an item (a ``ToolResult``, a ``Message``; in the context or about to be): its
        ``meta["decided"]`` list gets the record;
      - the context (``agent.context``): with ``tell``, a user message saying ``tell``
        is appended to hold it (the model learns what the person did); without, the
        context's last item holds it (a new message says it when the context is empty).

    ``by``: how it was decided (``click``, ``terminal``, ``user`` for a command or the
    library, ``policy``, ``headless``, ``timeout``…); ``sha256``: of the value or the file
    contents that moved, where something moved; ``detail``: which button or command;
    ``reason``: why not, when declined; ``call_id``: the tool call it answered, if any.
    Returns the record (``{"action", "subject", "by", "at", ...}``).
    """
    record: dict[str, Any] = {"action": str(action), "subject": str(subject), "by": str(by),
                              "at": utc_now()}
    for key, value in (("sha256", sha256), ("detail", detail), ("reason", reason),
                       ("call_id", call_id)):
        if value:
            record[key] = str(value)
    holder = target
    if not hasattr(target, "meta"):  # the context, or a list of items
        if tell is not None or not len(target):
            from .items import Message  # data beside data: decisions stays import-light

            holder = Message("user", tell if tell is not None else
                             f"[ipyagent: the user decided: {action} {subject}]")
            target.append(holder)
        else:
            holder = target[-1]
    holder.meta.setdefault(DECIDED, []).append(record)
    return record
