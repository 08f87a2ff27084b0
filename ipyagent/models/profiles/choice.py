"""The profile an agent has in force, and whether its text-mode calls go constrained."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .catalog import GENERIC, Profile

__all__ = ["ProfileChoice"]


@dataclass(frozen=True)
class ProfileChoice:
    """The profile in force and whether text-mode replies are constrained by a grammar
    (``None``: not asked yet — asked before the first text-mode request, never before)."""

    profile: Profile = GENERIC
    grammar: bool | None = False
    key: tuple[Any, ...] = ()
    # Why native requests would get their calls back as text on this server ("" if not
    # known so): a conversation then starts in text mode (``ServerFacts.calls_come_as_text``).
    calls_as_text: str = ""

    def describe(self) -> str:
        constrained = "; calls constrained by a grammar" if self.grammar else ""
        return self.profile.describe() + constrained
