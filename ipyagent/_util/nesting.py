"""JSON values bounded in depth: what comes from outside may nest ~1,000 levels (the wire's
decoders allow it), and what writes a transcript recurses per level (ours, nbformat's), so
one such value made every later save of a run fail. Past ``MAX_NESTING`` levels a value is
kept as its compact JSON text: the same data, one string."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_NESTING", "bounded", "deeper"]

# Levels a value may nest as it is (plotly and Vega specs nest ~15, tool arguments a few).
MAX_NESTING = 100


def deeper(value: Any, limit: int = MAX_NESTING) -> bool:
    """True when ``value`` nests lists, tuples and dicts more than ``limit`` levels (no recursion)."""
    if not isinstance(value, (dict, list, tuple)):
        return False
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list, tuple)))
    return False


def bounded(value: Any, limit: int = MAX_NESTING) -> Any:
    """``value``, or its JSON text when it nests past ``limit`` levels (a note if even that fails)."""
    if not deeper(value, limit):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (RecursionError, TypeError, ValueError):
        return f"[ipyagent: a value nested over {limit} levels, not kept]"
