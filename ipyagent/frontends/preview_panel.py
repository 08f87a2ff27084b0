"""Send / Don't send buttons: may previews of the files a task names go to a remote endpoint
(``engine.previews.PreviewRequest``)? Shown in the running cell; main thread only. Every
name is escaped text with its control characters made visible."""

from __future__ import annotations

import html
from typing import Any, Callable

from .._util.text import visible
from .changes_panel import ask_in_notebook

__all__ = ["PreviewPanel", "ask_preview_in_notebook"]


class PreviewPanel:
    """The buttons for one request; the first click (or the timeout) is the answer."""

    def __init__(self, request: Any, resolve: Callable[[bool | str], None], note: str = "") -> None:
        import ipywidgets as w  # type: ignore[import-untyped]

        self.request = request
        self._resolve = resolve
        self.answer: bool | str | None = None
        self.send = w.Button(description="Send the previews", button_style="warning",
                             icon="check", layout=w.Layout(width="auto"))
        self.refuse = w.Button(description="Don't send", icon="times", layout=w.Layout(width="auto"))
        # The lines' names were made visible where they were made (once: twice would
        # show the control pictures themselves escaped).
        rows = "".join(f"<li><code>{html.escape(line)}</code></li>" for line in request.lines())
        self.text = w.HTML(
            "<div>Before the first request, ipyagent can send the model a short preview of the "
            f"files your task names (their first lines) to <code>{html.escape(visible(request.endpoint))}"
            f"</code>, a remote endpoint:<ul style='margin:0'>{rows}</ul><small>asked once for "
            f"this agent (Agent.preview_files){html.escape(note)}</small></div>")
        self.status = w.HTML("")
        self.send.on_click(lambda _: self._answer(True))
        self.refuse.on_click(lambda _: self._answer(False))
        self.widget = w.VBox([self.text, w.HBox([self.send, self.refuse]), self.status])
        self.widget.add_class("ipyagent-preview-panel")

    def _answer(self, answer: bool | str) -> None:
        if self.answer is not None:
            return  # a double click, or a click racing the timeout
        self.settle(answer)
        self._resolve(answer)

    def settle(self, answer: bool | str) -> None:
        """Disable the buttons and say what was decided."""
        self.answer = answer
        self.send.disabled = self.refuse.disabled = True
        self.status.value = ("✓ previews sent" if answer is True else
                             "✗ not sent" if answer is False else
                             f"… not sent: {html.escape(str(answer))}")


async def ask_preview_in_notebook(dispatcher: Any, headless: bool, timeout: float, request: Any,
                                  show: Callable[[Any], Any] | None = None) -> bool | str:
    """True (send), False (don't), or why nobody answered (then nothing is sent)."""
    waiting = f" (not sent after {timeout:g} s without an answer)" if timeout else ""
    return await ask_in_notebook(lambda resolve: PreviewPanel(request, resolve, waiting),
                                 dispatcher, headless, timeout, show)
