"""Send / Don't send buttons: may previews of the files a task names go to a remote endpoint
(``engine.previews.PreviewRequest``)? Shown in the running cell; main thread only. Every
name is escaped text with its control characters made visible."""

from __future__ import annotations

import asyncio
import html
from typing import Any, Callable

from .._util.text import visible

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


def _settle(future: asyncio.Future[bool | str], answer: bool | str) -> None:
    if not future.done():
        future.set_result(answer)


async def ask_preview_in_notebook(dispatcher: Any, headless: bool, timeout: float, request: Any,
                                  show: Callable[[Any], Any] | None = None) -> bool | str:
    """True (send), False (don't), or why nobody answered (then nothing is sent)."""
    if dispatcher is None:
        return "no notebook cell to ask in"
    if headless:
        return "the notebook runs without a frontend to ask in (nbclient, papermill or CI)"
    loop = asyncio.get_running_loop()
    future: asyncio.Future[bool | str] = loop.create_future()

    def resolve(answer: bool | str) -> None:  # main thread -> engine loop
        loop.call_soon_threadsafe(_settle, future, answer)

    holder: list[PreviewPanel] = []

    def open_panel() -> None:
        panel = PreviewPanel(request, resolve, f" (not sent after {timeout:g} s without an "
                                               "answer)" if timeout else "")
        holder.append(panel)
        if show is not None:
            show(panel.widget)
        else:
            from IPython.display import display

            display(panel.widget)

    def settle_open(why: str) -> None:
        for panel in holder:
            if panel.answer is None:
                panel.settle(why)

    dispatcher.call(open_panel)
    try:
        return await (asyncio.wait_for(asyncio.shield(future), timeout) if timeout else future)
    except asyncio.TimeoutError:
        if future.done() and not future.cancelled():
            return future.result()
        why = f"nobody answered within {timeout:g} s (Agent.approval_timeout)"
        dispatcher.call(settle_open, why)
        return why
    except asyncio.CancelledError:
        dispatcher.call(settle_open, "interrupted")
        raise
