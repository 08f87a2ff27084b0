"""The Edit box of an approval card: a small code editor that keeps its keys.

An anywidget whose ES module ships in ``static/`` (no network, no labextension build):
Tab and Shift-Tab indent, Enter keeps the indent, Ctrl/Cmd-Enter runs, Escape cancels,
and no key reaches the notebook's shortcuts while it has focus; Python is highlighted by
an overlay built with ``textContent`` only. Without anywidget, a plain ``Textarea``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

__all__ = ["code_editor"]

_STATIC = Path(__file__).parent / "static"
_CLASS: type | None = None


def _editor_class() -> type | None:
    global _CLASS
    if _CLASS is None:
        try:
            import anywidget  # type: ignore[import-untyped,import-not-found,unused-ignore]
        except ImportError:
            return None
        import traitlets

        class CodeEditor(anywidget.AnyWidget):  # type: ignore[misc]
            """A textarea with indenting keys and highlighting; ``on_run`` / ``on_cancel``."""

            _esm = (_STATIC / "editor.js").read_text(encoding="utf-8")
            _css = (_STATIC / "editor.css").read_text(encoding="utf-8")
            value = traitlets.Unicode("").tag(sync=True)
            disabled = traitlets.Bool(False).tag(sync=True)

            def __init__(self, **kwargs: Any) -> None:
                super().__init__(**kwargs)
                self.on_run: Callable[[], Any] = lambda: None
                self.on_cancel: Callable[[], Any] = lambda: None
                self.on_msg(self._message)

            def _message(self, _widget: Any, content: Any, _buffers: Any) -> None:
                event = content.get("event") if isinstance(content, dict) else None
                if self.disabled:
                    return
                if event == "run":
                    # The box's text comes with the run: a state update sent before it
                    # may still be on its way (ipywidgets buffers them), so the synced
                    # ``value`` can be a prefix of what the person sees.
                    text = content.get("value")
                    if isinstance(text, str):
                        self.value = text
                    self.on_run()
                elif event == "cancel":
                    self.on_cancel()

            def focus(self) -> None:
                self.send({"event": "focus"})

            def submit(self) -> None:
                """Ask the box for its text; it answers with a run message carrying it."""
                self.send({"event": "submit"})

        _CLASS = CodeEditor
    return _CLASS


def code_editor(text: str, layout: Any) -> Any:
    """The editor for ``text``: the keyboard-trapping one, else an ipywidgets Textarea."""
    cls = _editor_class()
    if cls is not None:
        return cls(value=text, layout=layout)
    import ipywidgets as w  # type: ignore[import-untyped]

    lines = text.count("\n") + 3
    layout.height = f"{min(24, lines) * 1.5}em"
    editor = w.Textarea(value=text, layout=layout)
    editor.on_run = editor.on_cancel = lambda: None
    editor.submit = lambda: editor.on_run()  # a Textarea's value is all there is
    editor.focus = editor.focus if hasattr(editor, "focus") else (lambda: None)
    return editor
