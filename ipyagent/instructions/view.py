"""What instructions read of an agent's settings (``engine.settings.AgentSettings``).

The engine sits above this layer, so personas and skills name the settings they read in a
``Protocol`` instead of importing them; mypy still checks that ``AgentSettings`` (and so
``Agent``) fits wherever one is passed.
"""

from __future__ import annotations

from typing import Any, Protocol

from traitlets import TraitType

__all__ = ["InstructionSettings"]


class InstructionSettings(Protocol):
    """Where personas and skills are looked for, which are defined, and the traits a
    persona's settings are checked against."""

    @property
    def cwd(self) -> str: ...
    @property
    def personas(self) -> dict[str, Any]: ...
    @property
    def skills_enabled(self) -> bool: ...
    @property
    def skills_paths(self) -> list[str]: ...
    @property
    def skills_max_chars(self) -> int: ...
    def traits(self, **metadata: Any) -> dict[str, TraitType[Any, Any]]: ...
