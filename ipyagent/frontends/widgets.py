"""Approval in the notebook: Approve, Deny (with a reason), Edit and Always buttons.

``WidgetApprover.decide`` runs on the engine loop; the buttons live on the kernel's main
thread. The decision crosses back with ``loop.call_soon_threadsafe(fut.set_result, …)``.
The cell must *await* for a click to arrive (ipykernel >= 7.4), hence
``needs_event_loop = True``: a blocking ``agent.run()`` refuses instead of hanging.
Where nobody can click (a headless run: the frontend allows no input, e.g. nbclient,
papermill), the call is denied at once — or after ``Agent.approval_timeout`` — with a
reason that says how to allow it.
"""

from __future__ import annotations

import asyncio
import difflib
import html
import json
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from .._util.mainthread import Dispatcher, LoopDispatcher
from .._util.text import visible
from ..context.items import CODE_ARGUMENTS, ToolCall
from ..engine.approval import Decision
from ..errors import ApprovalError
from ..trust.untrusted import html_text

if TYPE_CHECKING:
    from ..tools.offers import Offer, OfferAnswer

__all__ = ["WidgetApprover", "ApprovalPanel", "OfferPanel", "offer_html", "unattended_reason",
           "card_says"]

# The frontend's theme colours (light fallbacks), as on the cards: readable in dark themes.
_WAIT, _OK, _BAD = ("var(--jp-warn-color1, #9a6700)", "var(--jp-success-color1, #1a7f37)",
                    "var(--jp-error-color1, #cf222e)")
_MUTED = "var(--jp-ui-font-color2, #57606a)"


def unattended_reason(call: ToolCall, why: str) -> str:
    """The denial text for a call nobody approved: what happened and how to allow it."""
    return (f"{why}. To let tool calls run unattended, set `%config Agent.approval = 'auto'`, "
            f"or allow this tool: `%config Agent.allow = [{call.name!r}]`")


def _code_key(call: ToolCall) -> str | None:
    """The argument that is the call's code (``code``; a shell command's ``command``), or None."""
    key = CODE_ARGUMENTS.get(call.name, ("code", ""))[0]
    return key if key in call.arguments else ("code" if "code" in call.arguments else None)


def _editable_text(call: ToolCall) -> str:
    key = _code_key(call)
    if key is not None:
        return str(call.arguments[key])
    return json.dumps(call.arguments, indent=2, ensure_ascii=False)


def describe(decision: Decision, tool: str, brief: bool = False) -> str:
    """One line for what was decided, e.g. '✓ approved by you' (``brief``: no long reasons)."""
    if decision.action == "edit":
        return "✎ edited by you, then run" if decision.by_person else (
            f"✎ edited ({decision.by}), then run")
    if decision.approved:
        if decision.scope == "always":
            return f"✓ approved — and every later {tool} call in this conversation (Always)"
        if decision.by_person:
            return "✓ approved by you"
        if decision.by == "always":
            return f"✓ approved by Always (given at {decision.detail or 'an earlier call'})"
        return f"✓ approved ({decision.by})"
    who = "by you" if decision.by_person else (
        "— no answer" if decision.by == "timeout" else f"({decision.by})")
    if brief and not decision.by_person:
        return f"✗ denied {who}"  # the policy's reason, with how to allow, is in the footer
    return f"✗ denied {who}" + (f": {decision.reason}" if decision.reason else "")


def card_says(decision: Decision) -> bool:
    """True when the card's header says this decision and the panel gives way to it: a
    denial, or a plain Approve (an edit keeps its diff, Always what it covers)."""
    return not decision.approved or (decision.action == "approve" and decision.scope != "always"
                                     and decision.by_person)


class ApprovalPanel:
    """The buttons for one tool call; main thread only.

    A press only *proposes* a decision (``resolve``) and locks the panel; the panel shows a
    decision only when the approver ``settle``s it with the one the engine took, so a press
    that loses to a timeout or an interrupt, or comes twice, changes nothing.
    """

    def __init__(self, call: ToolCall, resolve: Callable[[Decision], None],
                 note: str = "") -> None:
        import ipywidgets as w  # type: ignore[import-untyped]

        self.call = call
        self._original = _editable_text(call)  # the model's version, for the diff
        self._original_arguments = dict(call.arguments)
        self._resolve = resolve
        self.decision: Decision | None = None  # what the engine took (set by ``settle``)
        self.pressed: Decision | None = None  # the one press that counts
        self._editing = False  # "Run edited" counts only after "Edit" opened the editor
        self.on_settle: Callable[[ApprovalPanel], Any] = lambda panel: None
        tight = w.Layout(width="auto")
        self.approve = w.Button(description="Approve", button_style="success", icon="check",
                                tooltip="Run this call", layout=tight)
        self.deny = w.Button(description="Deny", button_style="danger", icon="times",
                             tooltip="Do not run it; the reason (if any) goes to the model",
                             layout=tight)
        self.edit = w.Button(description="Edit", icon="pencil", layout=tight,
                             tooltip="Change the code, then run the edited version")
        self.always = w.Button(description="Always", icon="check-double", layout=tight,
                               tooltip=f"Approve this and every later {call.name} call "
                                       "in this conversation (a new one asks again)")
        self.reason = w.Text(placeholder="reason for the model (optional)",
                             layout=w.Layout(width="260px"))
        from .editor import code_editor

        self.editor = code_editor(_editable_text(call), w.Layout(width="100%", display="none"))
        self.editor.on_run = self._submit_edit  # Ctrl/Cmd-Enter
        self.editor.on_cancel = lambda: self._show_editor(False)  # Escape
        self.run_edited = w.Button(description="Run edited", button_style="warning",
                                   icon="play", layout=w.Layout(width="auto", display="none"))
        self.cancel_edit = w.Button(description="Cancel", layout=w.Layout(
            width="auto", display="none"))
        # The card's header already says "waiting for approval": the line under the
        # buttons says only what the header cannot (a timeout; later, the decision).
        self.status = w.HTML(f"<span style='color:{_MUTED}'>{html.escape(note)}</span>",
                             layout=w.Layout(display="" if note else "none"))
        self.approve.on_click(lambda _: self._decide(
            Decision("approve", by="click", detail="Approve")))
        self.always.on_click(lambda _: self._decide(
            Decision("approve", scope="always", by="click-always", detail="Always")))
        self.deny.on_click(lambda _: self._decide(
            Decision("deny", reason=self.reason.value.strip(), by="click", detail="Deny")))
        self.edit.on_click(lambda _: self._open_editor())
        self.cancel_edit.on_click(lambda _: self._show_editor(False))
        # The button asks the box for its text, which comes back with a run message
        # (``_submit_edit``): what runs is what the box shows, not the last synced state.
        self.run_edited.on_click(lambda _: self._editing and self.editor.submit())
        self.controls = w.HBox([self.approve, self.deny, self.reason, self.edit, self.always],
                               layout=w.Layout(align_items="center", flex_flow="row wrap"))
        # JupyterLab (and Notebook 7) pad an HTML output 20px on the right, a widget not: the
        # same padding keeps the Edit box inside the card's width above it.
        self.widget = _Box([self.controls, self.editor, w.HBox([self.run_edited, self.cancel_edit]),
                            self.status], layout=w.Layout(padding="0 20px 0 0"))
        self.widget.add_class("ipyagent-approval")
        self.widget.panel = self

    @property
    def buttons(self) -> list[Any]:
        return [self.approve, self.deny, self.edit, self.always, self.run_edited,
                self.cancel_edit]

    def _open_editor(self) -> None:
        self._show_editor(True)
        if self._editing:
            self.editor.focus()

    def _show_editor(self, show: bool) -> None:
        if self.pressed is None and self.decision is None:  # a press after the answer: no-op
            self._editing = show
            self._layout_editor(show)
            # While the box is open, Approve (and Always, and Edit again) would run the
            # model's version, not what the box shows: only the box's own Run, Cancel and
            # Deny stay live.
            for button in (self.approve, self.always, self.edit):
                button.disabled = show

    def _layout_editor(self, show: bool) -> None:
        shown = "" if show else "none"
        for widget in (self.editor, self.run_edited, self.cancel_edit):
            widget.layout.display = shown

    def _submit_edit(self) -> None:
        if not self._editing:
            return  # the hidden button, clicked without opening the editor: not an edit
        text = self.editor.value
        key = _code_key(self.call)
        if key is not None:
            arguments = {**self.call.arguments, key: text}
        else:
            try:
                arguments = json.loads(text)
            except json.JSONDecodeError as exc:
                self.status.layout.display = ""
                self.status.value = (f"<span style='color:{_BAD}'>not valid JSON: "
                                     f"{html.escape(str(exc))}</span>")
                return
        self._decide(Decision("edit", arguments=arguments, by="click", detail="Edit"))

    def _decide(self, decision: Decision) -> None:
        if self.pressed is not None or self.decision is not None:
            return  # a double click, or a click after a timeout, an interrupt or a decision
        if self._editing and decision.action == "approve":
            return  # the box is open: what runs must be what it shows (Run edited, or Cancel)
        self.pressed = decision
        for widget in [*self.buttons, self.reason, self.editor]:
            widget.disabled = True  # one press per panel; the engine's answer settles it
        self._resolve(decision)

    def settle(self, decision: Decision) -> None:
        """Disable every control and show what was decided (the first settle wins)."""
        if self.decision is not None:
            return
        self.decision = decision
        self.on_settle(self)
        for widget in [*self.buttons, self.reason, self.editor]:
            widget.disabled = True
        # The editor gives way to the card, which shows the code that ran (and the diff).
        self._layout_editor(False)
        # Decided: the line saying what was decided replaces the buttons (less to scroll past).
        self.controls.layout.display = "none"
        if card_says(decision):  # the card's header says it (once, not twice)
            self.widget.layout.display = "none"
        color = _OK if decision.approved else _BAD
        self.status.layout.display = ""
        self.status.value = (f"<span style='color:{color}'>"
                             f"{html.escape(describe(decision, self.call.name))}</span>"
                             + self._edit_diff(decision))

    def _edit_diff(self, decision: Decision) -> str:
        """A small diff of the edit against the model's version (escaped), or ''."""
        if decision.action != "edit" or decision.arguments is None:
            return ""
        key = _code_key(self.call)
        edited = (str(decision.arguments.get(key, "")) if key is not None
                  else json.dumps(decision.arguments, indent=2, ensure_ascii=False))
        lines = list(difflib.unified_diff(self._original.splitlines(), edited.splitlines(),
                                          "model", "ran", lineterm="", n=1))[2:]
        if not lines:
            return ""
        return ("<details style='margin-top:2px'><summary>the edit</summary><pre "
                "style='margin:2px 0;font-size:var(--jp-code-font-size,13px)'>"
                f"{html.escape(chr(10).join(lines))}</pre></details>")

    def interrupted(self) -> None:
        if self.decision is None:
            self.settle(Decision("deny", reason="interrupted", by="interrupt"))

    def __repr__(self) -> str:
        state = "waiting" if self.decision is None else describe(self.decision, self.call.name)
        return f"<ApprovalPanel {self.call.id} {self.call.name}: {state}>"


def offer_html(offer: Offer) -> str:
    """The offer as inert HTML: every part of it the model chose is escaped and made visible."""
    from ..kernel.copies import human_size
    from ..tools.offers import _ascii_note

    def text(value: str) -> str:
        return html_text(visible(value))

    parts = [f"<div class='ipyagent-offer'><b>The agent offers</b> <code>{text(offer.name)}"
             f"</code>{text(_ascii_note(offer.name))}: <b>{text(offer.kind)}</b> "
             f"<span style='color:{_MUTED}'>(decoded here from {text(human_size(offer.size))} of "
             f"data, sha256 <code title='{text(offer.sha256)}'>{text(offer.sha256[:16])}…</code>)</span>"]
    if offer.preview:
        parts.append("<pre style='max-height:12em;overflow:auto;margin:4px 0'>"
                     f"{text(offer.preview)}</pre>")
    if offer.description:
        parts.append(f"<div><span style='color:{_MUTED}'>the agent's words:</span> "
                     f"“{text(offer.description)}”</div>")
    if offer.replaces:
        parts.append(f"<div style='color:{_WAIT}'>⚠ Taking it replaces {text(offer.replaces)}</div>")
    parts.append(f"<div style='color:{_MUTED};font-size:90%'>Taking it puts this decoded copy in "
                 "your kernel (data only: nothing of the agent's runs); nothing is copied unless "
                 "you click.</div></div>")
    return "".join(parts)


class OfferPanel:
    """The take / no-thanks buttons for one ``offer_result``; main thread only.

    The first of a click, a timeout or an interrupt is the answer (``close`` returns it);
    a take puts the decoded value in the user's kernel right there, so the answer says what arrived.
    """

    def __init__(self, offer: Offer, resolve: Callable[[OfferAnswer], None],
                 timeout: float = 0.0) -> None:
        import ipywidgets as w  # type: ignore[import-untyped]

        self.offer = offer
        self._resolve = resolve
        self.answer: OfferAnswer | None = None
        self.on_settle: Callable[[OfferPanel], Any] = lambda panel: None
        tight = w.Layout(width="auto")
        # The exact local name is on the button: the model cannot pick a name unseen.
        self.take = w.Button(description=f"Take {offer.name} into my kernel", icon="download",
                             button_style="primary", layout=tight,
                             tooltip=f"Copy the agent's {offer.name} into your kernel as {offer.name}")
        self.skip = w.Button(description="No thanks", icon="times", layout=tight,
                             tooltip="Leave it in the agent's kernel")
        self.text = w.HTML(offer_html(offer))
        after = f" (not taken after {timeout:g} s without an answer)" if timeout else ""
        self.status = w.HTML(f"<span style='color:{_WAIT}'>● waiting for your answer"
                             f"{html_text(after)}</span>")
        self.take.on_click(lambda _: self._take())
        self.skip.on_click(lambda _: self._answer(self._no("the user chose not to take it")))
        self.controls = w.HBox([self.take, self.skip],
                               layout=w.Layout(align_items="center", flex_flow="row wrap"))
        self.widget = _Box([self.text, self.controls, self.status])
        self.widget.add_class("ipyagent-offer-panel")
        self.widget.panel = self

    @staticmethod
    def _no(reason: str) -> OfferAnswer:
        from ..tools.offers import OfferAnswer

        return OfferAnswer(False, "click", reason=reason)

    def _take(self) -> None:
        if self.answer is not None:
            return  # a second click, or a click after the timeout: nothing more enters
        from ..tools.offers import OfferAnswer

        try:
            arrived = self.offer.take()
        except TypeError as exc:
            self._answer(OfferAnswer(False, "click", reason=str(exc)))
            return
        self._answer(OfferAnswer(True, "click", arrived))

    def _answer(self, answer: OfferAnswer) -> None:
        if self.answer is None:
            self._resolve(self.close(answer))

    def close(self, answer: OfferAnswer) -> OfferAnswer:
        """Settle with ``answer`` unless answered already; the answer that stands."""
        if self.answer is not None:
            return self.answer
        self.answer = answer
        for button in (self.take, self.skip):
            button.disabled = True
        self.controls.layout.display = "none"
        name = html_text(self.offer.name)
        if answer.taken:
            line = (f"<span style='color:{_OK}'>✓ <code>{name}</code> = "
                    f"{html_text(visible(answer.arrived))} is in your kernel now (a copy from "
                    "the agent's kernel)</span>")
        else:
            line = (f"<span style='color:{_BAD}'>✗ not taken: "
                    f"{html_text(visible(answer.reason))}</span>")
        self.status.value = line
        self.on_settle(self)
        return answer

    def __repr__(self) -> str:
        if self.answer is None:
            return f"<OfferPanel {self.offer.name}: waiting>"
        return f"<OfferPanel {self.offer.name}: {'taken' if self.answer.taken else 'not taken'}>"


def _box_class() -> type:
    import ipywidgets as w  # type: ignore[import-untyped]

    class ApprovalBox(w.VBox):
        """A VBox whose plain-text fallback says what was decided (for saved notebooks)."""

        panel: ApprovalPanel | OfferPanel

        def __repr__(self) -> str:
            panel = getattr(self, "panel", None)
            if isinstance(panel, OfferPanel):  # the offer's plain text: what was asked, answered
                state = ("waiting" if panel.answer is None else "taken" if panel.answer.taken
                         else f"not taken: {panel.answer.reason}")
                return visible(f"[ipyagent offer: {panel.offer.question()} — {state}]")
            if panel is None or panel.decision is None:
                return "[ipyagent approval: Approve / Deny / Edit / Always]"
            return f"[ipyagent approval: {describe(panel.decision, panel.call.name)}]"

    return ApprovalBox


def _Box(children: list[Any], **kwargs: Any) -> Any:  # noqa: N802 - a class made lazily (ipywidgets is heavy)
    global _BOX
    if _BOX is None:
        _BOX = _box_class()
    return _BOX(children, **kwargs)


_BOX: type | None = None


class WidgetApprover:
    """Asks with notebook buttons; bound by ``%agent`` to the cell that runs."""

    needs_event_loop = True

    def __init__(self, timeout: float | Callable[[], float] = 0.0) -> None:
        self.timeout = timeout  # seconds, or a callable (e.g. reading Agent.approval_timeout)
        self.dispatcher: Dispatcher | None = None
        self.headless = False
        self.show: Callable[[Any], Any] | None = None  # how to display a panel
        self.panels: list[ApprovalPanel] = []  # this run's panels (tests, interrupts)
        self.offers: list[OfferPanel] = []  # this run's offer_result panels

    def __repr__(self) -> str:
        state = "headless" if self.headless else ("bound" if self.dispatcher else "unbound")
        return f"<WidgetApprover {state}, timeout={self._timeout():g}s>"

    def bind(self, dispatcher: Dispatcher | None = None, *, headless: bool = False,
             show: Callable[[Any], Any] | None = None) -> None:
        """Draw the next panels in the calling cell (``%agent`` does this for each run)."""
        self.dispatcher = dispatcher or LoopDispatcher()
        self.headless = headless
        self.show = show
        self.panels = []
        self.offers = []

    def unbind(self) -> None:
        """Forget the cell: a later call from elsewhere must bind again, not draw in it."""
        self.dispatcher = None
        self.show = None

    def _timeout(self) -> float:
        value = self.timeout() if callable(self.timeout) else self.timeout
        return max(0.0, float(value or 0.0))

    async def decide(self, call: ToolCall) -> Decision:
        """Show the panel and wait for a click (on the engine loop)."""
        dispatcher = self.dispatcher
        if dispatcher is None:
            raise ApprovalError("the approval buttons have no cell to appear in: use %agent, "
                                "or call approver.bind() in the cell that awaits agent.arun()")
        timeout = self._timeout()
        if self.headless and not timeout:
            return Decision("deny", by="headless", reason=unattended_reason(
                call, "nobody could approve this call: the notebook runs without a frontend "
                      "to click in (nbclient, papermill or CI)"))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Decision] = loop.create_future()

        def resolve(decision: Decision) -> None:  # main thread → engine loop
            if not loop.is_closed():
                loop.call_soon_threadsafe(_settle, future, decision)

        holder: list[ApprovalPanel] = []

        def show(decision: Decision) -> Decision:  # the engine's decision, on the panel
            dispatcher.call(_each, holder, lambda panel: panel.settle(decision))
            return decision

        note = (f"denied after {timeout:g} s without an answer (Agent.approval_timeout)"
                if timeout else "")
        # Each call has its own future, reachable only from its own panel: a press on
        # another call's panel (an older one, another cell's) can never answer this one.
        dispatcher.call(self._open, call, resolve, note, holder)
        try:
            if timeout:
                return show(await asyncio.wait_for(asyncio.shield(future), timeout))
            return show(await future)
        except asyncio.TimeoutError:
            if future.done() and not future.cancelled():
                return show(future.result())  # a click won the race
            future.cancel()  # a press from now on finds it done: ignored
            return show(Decision("deny", by="timeout", detail=f"{timeout:g}s",
                                 reason=unattended_reason(
                                     call, f"nobody approved this call within {timeout:g} s "
                                           "(Agent.approval_timeout)")))
        except asyncio.CancelledError:
            future.cancel()
            dispatcher.call(_each, holder, lambda panel: panel.interrupted())
            raise

    async def confirm_mcp(self, request: Any) -> bool | str:
        """Ask, with buttons in the running cell, whether a directory file's MCP servers start."""
        from ..tools.mcp.trust import ask_in_notebook

        return await ask_in_notebook(self.dispatcher, self.headless, self._timeout(), request,
                                     self.show)

    async def confirm_changes(self, request: Any) -> bool | str:
        """Ask, with buttons in the running cell, whether the sandbox's code-like file
        changes reach the user's folder; True, False (kept in the sandbox), or why not asked."""
        from .changes_panel import ask_changes_in_notebook

        return await ask_changes_in_notebook(self.dispatcher, self.headless, self._timeout(),
                                             request, self.show)

    async def confirm_preview(self, request: Any) -> bool | str:
        """Ask, with buttons in the running cell, whether previews of the files a task
        names go to a remote endpoint; True, False, or why nobody was asked."""
        from .preview_panel import ask_preview_in_notebook

        return await ask_preview_in_notebook(self.dispatcher, self.headless, self._timeout(),
                                             request, self.show)

    async def offer_result(self, offer: Offer) -> OfferAnswer:
        """Show the offer with a take button in the running cell; wait for the answer.

        The panel, on the main thread, holds the one answer: a take decodes there and
        then; a timeout or an interrupt asks the panel, so a take that came first wins and
        the model is told what really happened."""
        from ..tools.offers import OfferAnswer

        dispatcher = self.dispatcher
        if dispatcher is None:
            return OfferAnswer(False, "headless", reason="no notebook cell to show the offer in")
        timeout = self._timeout()
        if self.headless and not timeout:
            return OfferAnswer(False, "headless", reason="nobody could click: the notebook runs "
                               "without a frontend (nbclient, papermill or CI)")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[OfferAnswer] = loop.create_future()

        def resolve(answer: OfferAnswer) -> None:  # main thread → engine loop
            if not loop.is_closed():
                loop.call_soon_threadsafe(_settle, future, answer)

        holder: list[OfferPanel] = []

        def close(answer: OfferAnswer) -> None:  # main thread: the panel's answer is final
            for panel in holder:
                resolve(panel.close(answer))

        dispatcher.call(self._open_offer, offer, resolve, timeout, holder)
        try:
            if timeout:
                return await asyncio.wait_for(asyncio.shield(future), timeout)
            return await future
        except asyncio.TimeoutError:
            dispatcher.call(close, OfferAnswer(False, "timeout", reason=(
                f"nobody answered within {timeout:g} s (Agent.approval_timeout)")))
            return await future
        except asyncio.CancelledError:
            dispatcher.call(close, OfferAnswer(False, "interrupt", reason="interrupted"))
            raise

    def _open_offer(self, offer: Offer, resolve: Callable[[OfferAnswer], None], timeout: float,
                    holder: list[OfferPanel]) -> None:
        panel = OfferPanel(offer, resolve, timeout)
        holder.append(panel)
        self.offers.append(panel)
        if self.show is not None:
            self.show(panel.widget)
            return
        from IPython.display import display

        handle = display(panel.widget, display_id=True)
        panel.on_settle = lambda p: handle.update(p.widget)

    def _open(self, call: ToolCall, resolve: Callable[[Decision], None], note: str,
              holder: list[ApprovalPanel]) -> None:
        panel = ApprovalPanel(call, resolve, note)
        holder.append(panel)
        self.panels.append(panel)
        if self.show is not None:
            self.show(panel.widget)
            return
        from IPython.display import display

        handle = display(panel.widget, display_id=True)
        # Re-send the bundle once decided: its text/plain then records the decision, so a
        # saved notebook viewed without the widget state still says what happened.
        panel.on_settle = lambda p: handle.update(p.widget)


def _each(panels: list[ApprovalPanel], fn: Callable[[ApprovalPanel], None]) -> None:
    for panel in panels:
        fn(panel)


_T = TypeVar("_T")


def _settle(future: asyncio.Future[_T], answer: _T) -> None:
    if not future.done():
        future.set_result(answer)
