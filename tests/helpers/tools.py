"""The user-defined tools the tests hand to agents and models: defined once, here."""

from __future__ import annotations

from ipyagent import tool

__all__ = ["add"]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b
