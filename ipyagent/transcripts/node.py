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
        return f"NotebookNode({dict.__repr__(self)})"


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
