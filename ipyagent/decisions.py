"""A decision on one tool call: approve, deny or edit, who made it, and when.

Data: the approval policy (``approval``) makes them, events carry them, the audit trail
and transcripts record them.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Action", "BY", "PERSON", "Decision", "utc_now"]

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
