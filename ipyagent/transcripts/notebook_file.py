"""A notebook file read as plain dicts, at the speed of ``json.loads``.

``nbformat.read`` costs seconds on a long run's transcript: importing it compiles its
validator's grammars (~3 s once per process on a 2-core machine), it wraps every dict in a
``NotebookNode``, and its validation only logs what it finds. A transcript only needs the
JSON and the few things ``read`` relies on, so those are checked here; a file whose
structure is anything else (an older format, a hand edit that broke it, JSON that is no
notebook) goes to nbformat exactly as before, which converts what it can and says what it
cannot. Nothing a readable file holds is dropped either way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["read_notebook", "structure_problem"]

_CELL_TYPES = ("code", "markdown", "raw")


def read_notebook(path: Path) -> dict[str, Any]:
    """The notebook at ``path`` as plain dicts and lists.

    Raises ``FileNotFoundError``/``OSError`` when it cannot be read, ``ValueError`` when it
    is not JSON, and whatever nbformat raises for JSON that is not a notebook it can read.
    """
    text = path.read_text(encoding="utf-8")
    nb = json.loads(text)
    if structure_problem(nb) is None:
        return nb  # type: ignore[no-any-return]
    return _read_with_nbformat(text)


def structure_problem(nb: Any) -> str | None:
    """What keeps ``nb`` from being a v4 notebook as ``read`` uses it, or None.

    Checked: the format (4), the top-level metadata and cell list, and per cell its type,
    metadata and source — the fields ``read`` and the code-cell check of replay use.
    """
    if not isinstance(nb, dict):
        return "not a JSON object"
    major, minor = nb.get("nbformat"), nb.get("nbformat_minor")
    if type(major) is not int or major != 4 or type(minor) is not int or minor < 0:
        return f"nbformat {major!r}.{minor!r}, not 4.x"
    if not isinstance(nb.get("metadata"), dict) or not isinstance(nb.get("cells"), list):
        return "no metadata mapping or cell list"
    for index, cell in enumerate(nb["cells"]):
        if not (isinstance(cell, dict) and cell.get("cell_type") in _CELL_TYPES
                and isinstance(cell.get("metadata"), dict) and _is_source(cell.get("source"))):
            return f"cell {index} is not a code, markdown or raw cell with metadata and source"
    return None


def _is_source(source: Any) -> bool:
    return isinstance(source, str) or (isinstance(source, list)
                                       and all(isinstance(s, str) for s in source))


def _read_with_nbformat(text: str) -> dict[str, Any]:
    import nbformat

    node = nbformat.reads(text, as_version=4)
    return _plain(node)  # type: ignore[no-any-return]


def _plain(value: Any) -> Any:
    """NotebookNode → plain dicts/lists (items must not carry attribute-dict subclasses)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
