"""``NotebookNode``: a dict whose keys read and write as attributes, as nbformat's does.

``to_notebook()`` returns these rather than ``nbformat.from_dict``'s: importing nbformat
(any of it, even ``nbformat.notebooknode``) imports its validator and jsonschema, about
1.5 s the first time in a process; a notebook needs none of that to be built. A node is a
``dict``, so ``nbformat.validate``, ``nbformat.write`` and nbclient take it as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["NotebookNode", "from_dict"]


class NotebookNode(dict):  # type: ignore[type-arg]
    """A notebook, cell or output: ``node.cells`` is ``node["cells"]``."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __delattr__(self, key: str) -> None:
        try:
            del self[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setitem__(self, key: Any, value: Any) -> None:
        # As nbformat's: a mapping stored in a node becomes a node.
        if isinstance(value, Mapping) and not isinstance(value, NotebookNode):
            value = from_dict(value)
        super().__setitem__(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *(k for k in self if isinstance(k, str))]

    def __repr__(self) -> str:
        if _is_notebook(self):  # a page of nested dicts says nothing: say what it holds
            return f"<NotebookNode: a notebook of {_cell_count(self)}>"
        return f"NotebookNode({dict.__repr__(self)})"

    def _repr_html_(self) -> str | None:
        """A notebook as a short table of its cells (kind and first line, as text)."""
        if not _is_notebook(self):
            return None  # a cell or an output: the plain repr
        import html

        from .._util.text import one_line, visible

        rows = []
        for n, cell in enumerate(self["cells"]):
            source = cell.get("source", "") if isinstance(cell, Mapping) else ""
            source = "".join(source) if isinstance(source, list) else str(source)
            first = _gist(source)
            outputs = len(cell.get("outputs", [])) if isinstance(cell, Mapping) else 0
            kind = cell.get("cell_type", "?") if isinstance(cell, Mapping) else "?"
            more = f" · {outputs} output{'s' * (outputs != 1)}" if outputs else ""
            # Cell text is the model's and the tools': escaped, hidden characters shown.
            rows.append(f"<tr><td>{n}</td><td>{html.escape(str(kind))}{more}</td>"
                        f"<td style='text-align:left'><code>{html.escape(visible(one_line(first, 100)))}"
                        "</code></td></tr>")
        return (f"<div><b>Notebook</b> · {html.escape(_cell_count(self))} · nbformat "
                f"{self.get('nbformat', '?')}.{self.get('nbformat_minor', '?')} "
                "<span style='opacity:.7'>(nbformat.write(nb, path) saves it; agent.save(path) "
                "saves the run)</span><table><tr><th>#</th><th>cell</th>"
                "<th style='text-align:left'>first line</th></tr>" + "".join(rows) + "</table></div>")


def _is_notebook(node: Mapping[str, Any]) -> bool:
    return "nbformat" in node and isinstance(node.get("cells"), list)


def _gist(source: str) -> str:
    """A cell's first line worth reading: 'User: hi' for a '#### User' heading and its text."""
    lines = [line.strip() for line in source.splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].startswith("#") and len(lines) > 1:
        return f"{lines[0].lstrip('#').strip()}: {lines[1]}"
    return lines[0]


def _cell_count(node: Mapping[str, Any]) -> str:
    cells = node["cells"]
    kinds: dict[str, int] = {}
    for cell in cells:
        kind = str(cell.get("cell_type", "?")) if isinstance(cell, Mapping) else "?"
        kinds[kind] = kinds.get(kind, 0) + 1
    parts = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
    return f"{len(cells)} cell{'s' * (len(cells) != 1)}" + (f" ({parts})" if parts else "")


def from_dict(value: Any) -> Any:
    """``value`` with every mapping in it (inside lists too) made a ``NotebookNode``."""
    if isinstance(value, Mapping):
        node = NotebookNode()
        for k, v in value.items():
            dict.__setitem__(node, k, from_dict(v))
        return node
    if isinstance(value, (list, tuple)):
        return [from_dict(v) for v in value]
    return value
