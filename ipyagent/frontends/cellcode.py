"""One click from a python card to a new cell: "code → new cell".

``%agent code N`` puts a call's code in a new cell through the execute reply's
``set_next_input`` payload; a widget click has no execute reply, so the button (an anywidget
whose ES module ships in ``static/``) inserts the cell itself through the notebook model the
widget manager holds (JupyterLab, Notebook 7), right below the agent's cell (found by the
``cellId`` JupyterLab sends with each execute request). Nothing runs: the user reads the
cell and runs it, or not. Where the notebook model is out of reach (another frontend), the
button says which ``%agent code N`` does the same; without anywidget, a line says it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["code_button", "current_cell_id", "fallback_line"]

_STATIC = Path(__file__).parent / "static"
_CLASS: type | None = None


def _button_class() -> type | None:
    global _CLASS
    if _CLASS is None:
        try:
            import anywidget  # type: ignore[import-untyped,import-not-found,unused-ignore]
        except ImportError:
            return None
        import traitlets

        class CodeToCell(anywidget.AnyWidget):  # type: ignore[misc]
            """A button that puts ``code`` in a new cell below the cell ``cell_id``."""

            _esm = (_STATIC / "cellcode.js").read_text(encoding="utf-8")
            _css = (_STATIC / "cellcode.css").read_text(encoding="utf-8")
            code = traitlets.Unicode("").tag(sync=True)
            cell_id = traitlets.Unicode("").tag(sync=True)
            label = traitlets.Unicode("").tag(sync=True)
            hint = traitlets.Unicode("").tag(sync=True)  # not "tooltip": the base view reads that one
            inserted = traitlets.Unicode("").tag(sync=True)
            fallback = traitlets.Unicode("").tag(sync=True)

            def __init__(self, **kwargs: Any) -> None:
                super().__init__(**kwargs)
                self.events: list[str] = []  # what the frontend reported (inserted / unreachable)
                self.number = 0
                self.on_msg(self._message)

            def _message(self, _widget: Any, content: Any, _buffers: Any) -> None:
                if isinstance(content, dict) and isinstance(content.get("event"), str):
                    self.events.append(content["event"])

            def __repr__(self) -> str:  # the saved notebook's plain text
                return f"[ipyagent: `%agent code {self.number}` puts this call's code in a new cell]"

        _CLASS = CodeToCell
    return _CLASS


def current_cell_id(shell: Any) -> str:
    """The id of the cell running now, as the frontend sent it ('' when it sent none)."""
    kernel = getattr(shell, "kernel", None)
    get_parent = getattr(kernel, "get_parent", None)
    if get_parent is None:
        return ""
    try:
        parent = get_parent("shell") or {}
    except Exception:  # an older kernel: the button finds the cell by position instead
        return ""
    cell_id = (parent.get("metadata") or {}).get("cellId")
    return cell_id if isinstance(cell_id, str) else ""


def fallback_line(number: int) -> str:
    """What to type where the button cannot reach the notebook."""
    return f"`%agent code {number}` puts this call's code in a new cell below (it is not run)"


def code_button(code: str, number: int, cell_id: str) -> Any | None:
    """The "code → new cell" button for python call ``number``, or None without anywidget."""
    cls = _button_class()
    if cls is None:
        return None
    button = cls(code=code, cell_id=cell_id, label="⤓ code → new cell",
                 hint="Put this call's code in a new cell below the agent's cell; it is not "
                         "run — you read it, then run it in your kernel if you want it",
                 inserted="in a new cell below the agent's cell — read it, then run it if you "
                          "want it (nothing ran)",
                 fallback=f"this frontend's notebook is out of reach: {fallback_line(number)}")
    button.number = number
    return button

