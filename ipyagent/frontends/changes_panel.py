"""Apply / keep-in-sandbox buttons for file changes the model's code made that can run
code later (``tools.changes.ChangeRequest``), shown in the running cell; main thread only.
Every name, path and diff line is escaped text with its control characters made visible."""

from __future__ import annotations

import asyncio
import html
from typing import Any, Callable

from .._util.text import visible, visible_name

__all__ = ["ChangesPanel", "ask_changes_in_notebook", "changes_html"]


CARD_ROWS = 200  # rows on a card; a call that made 100,000 files says how many more


def changes_html(changes: list[dict[str, Any]] | list[Any], limit: int = CARD_ROWS) -> str:
    """The change list of a call's card: one row per file, with its folded diff."""
    rows = []
    for change in changes[:limit]:
        c = change if isinstance(change, dict) else change.as_dict()
        mark = {"new": "+", "modified": "~", "deleted": "−"}.get(str(c.get("kind")), "?")
        size = c.get("size")
        risk = c.get("risk")
        status = str(c.get("status", ""))
        link = c.get("link")  # where a symlink points: a person decides on that, not the name
        target = "" if link is None else f" → {html.escape(visible_name(str(link)))}"
        head = (f"<code>{mark} {html.escape(visible_name(str(c.get('path'))))}{target}</code> "
                f"<span style='opacity:.7'>{html.escape(str(c.get('kind')))}"
                f"{'' if size is None else f', {int(size)} B'} · {html.escape(status)}</span>")
        if risk:
            head += f" <b style='color:#b45309'>can run code: {html.escape(visible(str(risk)))}</b>"
        problem = c.get("problem")
        if problem:
            head += f" <b style='color:#b91c1c'>not applied: {html.escape(visible(str(problem)))}</b>"
        diff = c.get("diff")
        if diff:
            body = html.escape(visible(str(diff)))
            head = (f"<details><summary>{head}</summary><pre style='margin:0;max-height:20em;"
                    f"overflow:auto'>{body}</pre></details>")
        rows.append(f"<div>{head}</div>")
    if len(changes) > limit:
        rows.append(f"<p>… and {len(changes) - limit} more files (<code>%agent changes "
                    "everything</code> lists them all)</p>")
    return "<div class='ipyagent-changes'>" + "".join(rows) + "</div>"


class ChangesPanel:
    """The buttons for one request; the first click (or the timeout) is the answer."""

    def __init__(self, request: Any, resolve: Callable[[bool | str], None], note: str = "") -> None:
        import ipywidgets as w  # type: ignore[import-untyped]

        self.request = request
        self._resolve = resolve
        self.answer: bool | str | None = None
        n = len(request.changes)
        self.apply = w.Button(description=f"Apply {n} change{'s' if n != 1 else ''} to my folder",
                              button_style="warning", icon="check", layout=w.Layout(width="auto"))
        self.keep = w.Button(description="Keep them in the sandbox", icon="times",
                             layout=w.Layout(width="auto"))
        self.text = w.HTML(
            "<div>The model's code changed these files in the sandbox's copy of your folder; "
            "they can run code later, so they wait for you:" + changes_html(request.changes)
            + f"<small>%agent apply / %agent undo work later too{html.escape(note)}</small></div>")
        self.status = w.HTML("")
        self.apply.on_click(lambda _: self._answer(True))
        self.keep.on_click(lambda _: self._answer(False))
        self.widget = w.VBox([self.text, w.HBox([self.apply, self.keep]), self.status])
        self.widget.add_class("ipyagent-changes-panel")

    def _answer(self, answer: bool | str) -> None:
        if self.answer is not None:
            return
        self.settle(answer)
        self._resolve(answer)

    def settle(self, answer: bool | str) -> None:
        self.answer = answer
        self.apply.disabled = self.keep.disabled = True
        self.status.value = ("✓ applied to your folder" if answer is True else
                             "✗ kept in the sandbox only" if answer is False else
                             f"… not applied yet: {html.escape(str(answer))}; %agent apply")


def _settle(future: asyncio.Future[bool | str], answer: bool | str) -> None:
    if not future.done():
        future.set_result(answer)


async def ask_in_notebook(make_panel: Callable[[Callable[[bool | str], None]], Any],
                          dispatcher: Any, headless: bool, timeout: float,
                          show: Callable[[Any], Any] | None = None) -> bool | str:
    """Show the yes/no panel ``make_panel(resolve)`` builds (it has ``widget``, ``answer`` and
    ``settle(why)``) in the cell and wait: True, False, or why nobody answered."""
    if dispatcher is None:
        return "no notebook cell to ask in"
    if headless:
        return "the notebook runs without a frontend to ask in (nbclient, papermill or CI)"
    loop = asyncio.get_running_loop()
    future: asyncio.Future[bool | str] = loop.create_future()

    def resolve(answer: bool | str) -> None:  # main thread -> engine loop
        loop.call_soon_threadsafe(_settle, future, answer)

    holder: list[Any] = []

    def open_panel() -> None:
        panel = make_panel(resolve)
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


async def ask_changes_in_notebook(dispatcher: Any, headless: bool, timeout: float, request: Any,
                                  show: Callable[[Any], Any] | None = None) -> bool | str:
    """True (apply), False (keep in the sandbox), or why nobody answered (they wait)."""
    waiting = f" (left waiting after {timeout:g} s without an answer)" if timeout else ""
    return await ask_in_notebook(lambda resolve: ChangesPanel(request, resolve, waiting),
                                 dispatcher, headless, timeout, show)
