"""The values a failing line read, as the kernel holds them: what a person would print next.

Why: at 1.5B, ``city = data.groupby('city')['temp'].mean().idxmin()`` then
``data.loc[city, 'city']`` raised ``KeyError: 'Oslo'``; the model answered another city and,
asked to fix the call, wrote it four more times unchanged. The line's own names, printed
(``city = 'Oslo'``), are the evidence it did not look at.

Only names the cell itself assigned before the failing line, read at the top level of the
cell (a function's or a comprehension's names are not the kernel's), each a one-line short
repr (``reprlib``, made in the kernel: bounded however large the value) of a plain value
(a str, a number, a list, a dict, a date: a table's repr cut short is no value). The text is the
sandboxed code's: it goes with the call's output, never into ipyagent's note.
"""

from __future__ import annotations

import ast
import time
from typing import TYPE_CHECKING

from .._util.pyast import comprehension_names, parsed
from ..context.items import VALUES

if TYPE_CHECKING:
    from ..kernel.base import Kernel

__all__ = ["names_on_line", "values_on_line", "VALUES"]

MAX_NAMES = 3
VALUE_CHARS = 80
NAME_CHARS = 40


def names_on_line(code: str, line: int, limit: int = MAX_NAMES) -> list[str]:
    """The names line ``line`` of ``code`` reads that the code assigned earlier at its top
    level, in the order the line reads them; [] when the line is inside a function, class
    or lambda, or the code does not parse."""
    tree = parsed(code)
    if tree is None:
        return []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            end = node.end_lineno or node.lineno
            if node.lineno <= line <= end:
                return []
    scoped = comprehension_names(tree)  # not the kernel's
    assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                and isinstance(n.ctx, ast.Store) and n.lineno <= line}
    read = sorted((n.col_offset, n.id) for n in ast.walk(tree) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Load) and n.lineno == line == n.end_lineno)
    names: list[str] = []
    for _, name in read:
        if name in assigned and name not in scoped and name not in names:
            names.append(name)
    return names[:limit]


async def values_on_line(kernel: Kernel, code: str, line: int, deadline: float) -> str:
    """``values when line 5 failed: city = 'Oslo'``, or "" when no name shows (or the line
    number is off the code). ``deadline``: ``time.monotonic()`` by which the kernel's
    answers must be in (a value's own ``__repr__`` can take forever)."""
    if not 1 <= line <= code.count("\n") + 1:
        return ""
    shown = []
    for name in names_on_line(code, line):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if len(name) > NAME_CHARS:
            continue
        value = await kernel.short_repr_async(name, VALUE_CHARS, plain=True, timeout=left)
        if not _readable(value):
            continue
        shown.append(f"{name} = {value}")
    return f"values when line {line} failed: {'; '.join(shown)}" if shown else ""


def _readable(value: str | None) -> bool:
    """A value worth a line: printable (no control, bidi or line separator: the kernel's
    ``__import__`` or ``type`` may be the sandboxed code's own), not ``<…>`` (a module, a
    function, an iterator: an address says nothing), and not a string ``reprlib`` cut short
    (what is left of a key read from a file would get past the secret scanner)."""
    if value is None or not value.isprintable() or value.startswith("<"):
        return False
    return not (value[:1] in "'\"" and "..." in value)
