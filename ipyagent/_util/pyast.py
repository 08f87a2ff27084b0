"""Reading the model's Python without running it: one parse that never raises."""

from __future__ import annotations

import ast

__all__ = ["parsed", "comprehension_names"]


def parsed(code: str) -> ast.Module | None:
    """``ast.parse(code)``, or None when it does not parse (or is too deep or too large to)."""
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def comprehension_names(tree: ast.AST) -> set[str]:
    """The names the comprehensions of ``tree`` bind (``row`` of ``for row in rows``): they
    live in the comprehension's scope, not in the kernel's namespace."""
    return {n.id for c in ast.walk(tree) if isinstance(c, ast.comprehension)
            for n in ast.walk(c.target) if isinstance(n, ast.Name)}
