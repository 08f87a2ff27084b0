""""⟲ rewind to here" under each step of a run in a notebook.

The button asks first: it shows what the rewind would do (``RewindPlan.question``: the steps
dropped, the files put back, the python calls re-run, what stands) with **Rewind** and
**Cancel**, and does nothing until Rewind is clicked. It finds its step by the step's own
reply (the item, else an equal one) in the conversation you are on, then in the other
branches (the step of a first attempt lives on in the branch a rewind kept), so an old
button never rewinds the wrong step. A rewind that would re-run code that did not run in
this session is left to ``%agent rewind N``, which asks about each call in its cell.
"""

from __future__ import annotations

import asyncio
import html
from typing import TYPE_CHECKING, Any, Callable

from .._util.text import visible

if TYPE_CHECKING:
    from ..context.events import Step
    from ..context.items import Item
    from ..engine.agent import Agent

__all__ = ["step_action", "RewindButton", "find_step"]

_CLASS: type | None = None


def _box_class() -> type:
    global _CLASS
    if _CLASS is None:
        import ipywidgets as w  # type: ignore[import-untyped]

        class RewindBox(w.VBox):
            """The button, the question and what happened (a plain-text fallback when saved)."""

            number = 0

            def __repr__(self) -> str:
                return f"[ipyagent: `%agent rewind {self.number}` goes back to this step]"

        _CLASS = RewindBox
    return _CLASS


def step_action(magics: Any, agent: Agent) -> Callable[[Step], Any]:
    """What ``NotebookDisplay`` shows under each finished step of ``agent``'s run."""

    def action(step: Step) -> Any:
        turn = _turn_of(agent, step)
        if turn is None:  # the step recorded no reply (the endpoint failed): nothing to go to
            return None
        return RewindButton(magics, agent, turn, step.index).box

    return action


def _turn_of(agent: Agent, step: Step) -> Item | None:
    """The first item of ``step``'s reply in ``agent``'s context (the newest such)."""
    for item in reversed(list(agent.context)):
        turn = item.meta.get("turn") if isinstance(item.meta, dict) else None
        if isinstance(turn, dict) and turn.get("step") == step.index:
            return item
    return None


def find_step(current: Agent, turn: Item) -> tuple[Agent, int] | None:
    """(the agent, the step number) whose step starts with ``turn``: the conversation you
    are on first, then its other branches; None when no branch holds it any more."""
    from ..context.steps import locate_turn

    agents = [current] + ([b.agent for b in current.tree if b.agent is not current]
                          if current.tree is not None else [])
    for agent in agents:  # this very item first, anywhere; then an equal one
        if any(item is turn for item in agent.context):
            n = locate_turn(list(agent.context), turn)
            if n is not None:
                return agent, n
    for agent in agents:
        n = locate_turn(list(agent.context), turn)
        if n is not None:
            return agent, n
    return None


class RewindButton:
    """One step's "rewind to here": a button, then the question, then what happened."""

    def __init__(self, magics: Any, agent: Agent, turn: Item, number: int) -> None:
        import ipywidgets as w

        self.magics, self.agent, self.turn = magics, agent, turn
        self.button = w.Button(description="⟲ rewind to here", tooltip=(
            f"Go back to the end of step {number}: later steps are dropped (kept as a branch), "
            "their file changes undone, the kernel rebuilt; asks first"),
            layout=w.Layout(width="auto"))
        self.button.add_class("ipyagent-rewind")
        self.question = w.HTML(value="")
        self.question.add_class("ipyagent-rewind-question")
        self.go = w.Button(description="Rewind", button_style="warning", layout=w.Layout(width="auto"))
        self.cancel = w.Button(description="Cancel", layout=w.Layout(width="auto"))
        self.choice = w.HBox([self.go, self.cancel], layout=w.Layout(display="none"))
        self.status = w.HTML(value="")
        self.status.add_class("ipyagent-rewind-status")
        self.progress = w.IntProgress(value=0, min=0, max=1, layout=w.Layout(display="none"))
        self.box = _box_class()([self.button, self.question, self.choice, self.progress,
                                 self.status], layout=w.Layout(align_items="flex-start"))
        self.box.add_class("ipyagent-rewind-box")
        self.box.number = number
        self.target: tuple[Agent, int] | None = None
        self.button.on_click(lambda _: self.ask())
        self.go.on_click(lambda _: self.rewind())
        self.cancel.on_click(lambda _: self._close("Not rewound."))

    def __repr__(self) -> str:
        return repr(self.box)

    def _say(self, text: str, colour: str = "#666") -> None:
        self.status.value = (f"<div style='color:{colour};white-space:pre-wrap'>"
                             f"{html.escape(visible(text))}</div>")

    def _close(self, said: str) -> None:
        self.choice.layout.display = "none"
        self.question.value = ""
        self.button.disabled = False
        self._say(said)

    def ask(self) -> None:
        """Show what a rewind to this step would do, and Rewind / Cancel (main thread)."""
        current = self.magics.agent_if_made or self.agent
        found = find_step(current, self.turn)
        if found is None:
            self._say("This step is in no branch of this conversation any more.", "#b35900")
            return
        agent, n = found
        try:
            plan = agent.rewind_plan(n)
        except Exception as exc:  # noqa: BLE001 - said on the widget, never a traceback
            self._say(f"Cannot rewind here: {exc}", "#b35900")
            return
        where = ""
        if agent is not current and agent.tree is not None:
            where = (f"This step is in branch {agent.tree.name_of(agent)}: rewinding goes on "
                     "with that branch.\n")
        text = where + plan.question()
        blocked = ""
        if plan.ask:
            blocked = (f"{plan.ask} of the kept calls did not run in this session: run "
                       f"`%agent rewind {n}` in a cell, which asks about each.")
        elif not plan.dropped:
            blocked = "Nothing to undo: this is the last step."
        self.question.value = ("<div class='ipyagent-rewind-plan' style='white-space:pre-wrap;"
                               "border-left:3px solid #d08700;padding-left:6px'>"
                               f"{html.escape(text)}</div>")
        self.target = (agent, n)
        self.go.disabled = bool(blocked)
        self.choice.layout.display = "flex"
        self.button.disabled = True
        self._say(blocked)

    def rewind(self) -> None:
        """Do it (main thread: the rewind runs on the engine loop; the widget follows it)."""
        from .._util import eventloop as _eventloop

        if self.target is None:
            return
        if self.magics.runner.running:
            self._say("A run is in progress: rewind after it ends.", "#b35900")
            return
        agent, n = self.target
        self.choice.layout.display = "none"
        self.go.disabled = True
        plan_total = max(1, agent.rewind_plan(n).reruns)
        self.progress.max, self.progress.value = plan_total, 0
        self.progress.layout.display = "flex"
        self._say(f"Rewinding to step {n}…")
        self.magics.runner.running = True  # no %agent run meanwhile: the context is moving
        loop = _running_loop()

        def on_event(event: Any) -> None:  # engine thread
            from ..context.events import ToolCallFinished

            if isinstance(event, ToolCallFinished):
                self._on_main(loop, self._advance)

        future = _eventloop.submit(agent.arewind(n, on_event=on_event))
        future.add_done_callback(lambda f: self._on_main(loop, self._finished, agent, f))

    def _advance(self) -> None:
        self.progress.value = min(self.progress.max, self.progress.value + 1)

    def _finished(self, agent: Agent, future: Any) -> None:
        self.magics.runner.running = False
        self.progress.layout.display = "none"
        self.question.value = ""
        self.button.disabled = False
        try:
            report = future.result()
        except Exception as exc:  # noqa: BLE001 - said on the widget
            self._say(f"The rewind failed: {exc}", "#b35900")
            return
        if agent.tree is not None and agent is not self.magics.agent_if_made:
            agent.tree.switch(agent.tree.name_of(agent))
            self.magics.use_agent(agent)
        self._say(str(report), "#1a7f37" if report.ok else "#b35900")

    @staticmethod
    def _on_main(loop: asyncio.AbstractEventLoop | None, fn: Callable[..., None],
                 *args: Any) -> None:
        """Run ``fn`` where widgets are updated: the kernel's loop when there is one."""
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(fn, *args)
        else:
            fn(*args)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
