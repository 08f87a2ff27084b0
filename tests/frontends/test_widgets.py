"""Approval panels driven in process (``button.click()`` runs the same handler a click does):
a decision arrives only through the panel of that call, once, and the record says how."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ipyagent import Decision, ToolCall
from ipyagent._util.mainthread import Dispatcher
from ipyagent.frontends.widgets import ApprovalPanel, WidgetApprover


class HeldDispatcher(Dispatcher):
    """Main-thread jobs held until ``flush()``: a busy main thread, so races can be staged."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        self.jobs.append((fn, args))

    def flush(self) -> None:
        while self.jobs:
            fn, args = self.jobs.pop(0)
            fn(*args)


def settles(panel: ApprovalPanel) -> list[Decision]:
    """Every decision the panel was settled with (what its saved output says, in order)."""
    seen: list[Decision] = []
    panel.on_settle = lambda p: seen.append(p.decision)  # type: ignore[arg-type]
    return seen


async def until(predicate: Callable[[], bool]) -> None:
    for _ in range(400):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("timed out")


def test_a_click_after_the_timeout_is_ignored_and_does_not_change_the_record() -> None:
    held = HeldDispatcher()
    approver = WidgetApprover(timeout=0.05)
    approver.bind(held, show=lambda widget: None)
    call = ToolCall("call_a", "python", {"code": "print(1)"})

    async def main() -> tuple[Decision, list[Decision], ApprovalPanel]:
        task = asyncio.ensure_future(approver.decide(call))
        await until(lambda: bool(held.jobs))
        held.flush()  # the panel is shown
        panel = approver.panels[0]
        seen = settles(panel)
        decision = await task  # timed out; its settle waits on the busy main thread
        panel.approve.click()  # the click lands before the timeout's settle
        assert panel.decision is None or not panel.decision.approved
        held.flush()
        panel.approve.click()  # and after it
        panel.always.click()
        await asyncio.sleep(0.02)
        return decision, seen, panel

    decision, seen, panel = asyncio.run(main())
    assert (decision.action, decision.by) == ("deny", "timeout")
    assert [(d.action, d.by) for d in seen] == [("deny", "timeout")]  # settled once: no answer
    assert panel.decision is not None and panel.decision.by == "timeout"
    assert "no answer" in panel.status.value and "✓" not in panel.status.value
    assert all(b.disabled for b in panel.buttons)


def test_a_click_on_another_calls_panel_does_not_decide_this_one() -> None:
    held = HeldDispatcher()
    approver = WidgetApprover(timeout=0.05)
    approver.bind(held, show=lambda widget: None)
    a = ToolCall("call_a", "python", {"code": "print('a')"})
    b = ToolCall("call_b", "python", {"code": "print('b')"})

    async def main() -> tuple[Decision, Decision, list[Decision], list[Decision]]:
        first = asyncio.ensure_future(approver.decide(a))
        await until(lambda: bool(held.jobs))
        held.flush()
        panel_a = approver.panels[0]
        seen_a = settles(panel_a)
        decided_a = await first  # a timed out; its settle is held (a busy main thread)
        approver.timeout = 0  # b waits for a click
        second = asyncio.ensure_future(approver.decide(b))
        await until(lambda: len(held.jobs) == 2)
        # b is the call awaiting now; a's panel still has live buttons: "click them all".
        for button in (panel_a.approve, panel_a.always, panel_a.deny):
            button.click()
        await asyncio.sleep(0.05)
        assert not second.done()
        held.flush()  # a's settle, then b's panel
        panel_b = approver.panels[1]
        seen_b = settles(panel_b)
        panel_a.approve.click()
        await asyncio.sleep(0.05)
        assert not second.done()  # b waits for its own panel
        panel_b.deny.click()
        decided_b = await second
        held.flush()
        return decided_a, decided_b, seen_a, seen_b

    decided_a, decided_b, seen_a, seen_b = asyncio.run(main())
    assert decided_a.by == "timeout"
    assert [(d.action, d.by) for d in seen_a] == [("deny", "timeout")]  # the clicks changed nothing
    assert (decided_b.action, decided_b.by, decided_b.detail) == ("deny", "click", "Deny")
    assert [(d.action, d.by) for d in seen_b] == [("deny", "click")]


def test_a_double_click_records_once() -> None:
    held = HeldDispatcher()
    approver = WidgetApprover()
    approver.bind(held, show=lambda widget: None)
    call = ToolCall("call_a", "add", {"a": 1})

    async def main() -> tuple[Decision, list[Decision], ApprovalPanel]:
        task = asyncio.ensure_future(approver.decide(call))
        await until(lambda: bool(held.jobs))
        held.flush()
        panel = approver.panels[0]
        seen = settles(panel)
        panel.approve.click()
        assert all(b.disabled for b in panel.buttons)  # disabled at the first press
        panel.approve.click()
        panel.deny.click()
        panel.edit.click()
        decision = await task
        held.flush()
        panel.deny.click()  # after the decision
        await asyncio.sleep(0.02)
        held.flush()
        return decision, seen, panel

    decision, seen, panel = asyncio.run(main())
    assert (decision.action, decision.by, decision.detail) == ("approve", "click", "Approve")
    assert [(d.action, d.by, d.detail) for d in seen] == [("approve", "click", "Approve")]
    assert panel.editor.layout.display == "none"  # the late Edit opened nothing


def test_run_edited_counts_only_after_edit_opened_the_editor() -> None:
    """A script can click the hidden "Run edited" button after filling the hidden editor."""
    proposed: list[Decision] = []
    panel = ApprovalPanel(ToolCall("call_a", "python", {"code": "print(1)"}), proposed.append)
    panel.editor.value = "import os; os.system('echo pwned')"
    panel.run_edited.click()
    assert proposed == [] and panel.decision is None
    panel.edit.click()
    sent: list[Any] = []
    panel.editor.send = sent.append  # what goes to the box in the page
    panel.editor.value = "print(2"  # the synced state lags behind the box
    panel.run_edited.click()
    assert sent == [{"event": "submit"}] and proposed == []  # asks the box for its text
    # The box answers with its text in the run message: that text runs, not the lagging state.
    panel.editor._message(panel.editor, {"event": "run", "value": "print(2)"}, [])
    assert [(d.action, d.by, d.detail, d.arguments) for d in proposed] == [
        ("edit", "click", "Edit", {"code": "print(2)"})]


def test_the_editor_keys_run_and_cancel_and_the_card_shows_the_edit() -> None:
    """Ctrl/Cmd-Enter (a "run" message) runs the edit, Escape ("cancel") closes the editor;
    once decided the editor gives way to the card, with a diff against the model's code."""
    from ipyagent.frontends.editor import _editor_class

    assert _editor_class() is not None, "anywidget is a dependency: the editor keeps its keys"
    proposed: list[Decision] = []
    panel = ApprovalPanel(ToolCall("call_a", "python", {"code": "print(1)"}), proposed.append)
    editor = panel.editor
    editor._message(editor, {"event": "run"}, [])  # hidden editor: not an edit
    assert proposed == []
    panel.edit.click()
    assert editor.layout.display == ""
    editor._message(editor, {"event": "cancel"}, [])
    assert editor.layout.display == "none" and proposed == []
    panel.edit.click()
    editor.value = "for i in range(3):"  # the state synced so far: a prefix of the box
    editor._message(editor, {"event": "run", "value": "for i in range(3):\n    print(i)"}, [])
    assert [(d.action, d.arguments) for d in proposed] == [
        ("edit", {"code": "for i in range(3):\n    print(i)"})]
    assert editor.disabled
    panel.settle(proposed[0])
    assert editor.layout.display == "none" and panel.run_edited.layout.display == "none"
    assert "-print(1)" in panel.status.value and "+    print(i)" in panel.status.value
    assert "edited by you, then run" in panel.status.value


def test_the_editor_script_ships_in_the_package_and_builds_no_html() -> None:
    from pathlib import Path

    import ipyagent.frontends

    script = (Path(ipyagent.frontends.__file__).parent / "static" / "editor.js").read_text()
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script  # textContent only
    assert "stopPropagation" in script and "data-lm-suppress-shortcuts" in script


def test_a_denied_panel_gives_way_to_the_card_header() -> None:
    """The card's header says the denial; the panel does not say it a second time."""
    proposed: list[Decision] = []
    panel = ApprovalPanel(ToolCall("call_a", "python", {"code": "print(1)"}), proposed.append)
    panel.reason.value = "no"
    panel.deny.click()
    panel.settle(proposed[0])
    assert panel.widget.layout.display == "none"
    assert "denied by you: no" in repr(panel.widget)  # the saved notebook's text still says it


# -- offer_result: the take button -------------------------------------------------------
def _offer(mine: dict[str, Any], description: str = "the fit", replaces: str | None = None) -> Any:
    from ipyagent.tools.offers import Offer

    def take() -> str:
        mine["fit"] = {"slope": 2.5}
        return "dict of 1"

    return Offer("call_o", "fit", description, "dict of 1", 120, "0" * 64, replaces, take)


def test_an_offer_is_taken_only_by_its_click_and_says_what_arrived() -> None:
    held = HeldDispatcher()
    approver = WidgetApprover()
    approver.bind(held, show=lambda widget: None)
    mine: dict[str, Any] = {}

    async def main() -> Any:
        task = asyncio.ensure_future(approver.offer_result(_offer(mine)))
        await until(lambda: bool(held.jobs))
        held.flush()
        [panel] = approver.offers
        assert panel.take.description == "Take fit into my kernel"
        await asyncio.sleep(0.05)
        assert mine == {} and not task.done()  # nothing enters before the click
        panel.take.click()
        answer = await task
        panel.take.click()  # a second click changes nothing
        return answer, panel

    answer, panel = asyncio.run(main())
    assert answer.taken and answer.by == "click" and mine == {"fit": {"slope": 2.5}}
    assert "is in your kernel now" in panel.status.value and panel.take.disabled
    assert "taken" in repr(panel.widget)


def test_a_take_that_beats_the_timeout_is_what_the_model_hears() -> None:
    held = HeldDispatcher()
    approver = WidgetApprover(timeout=0.05)
    approver.bind(held, show=lambda widget: None)
    mine: dict[str, Any] = {}

    async def main() -> Any:
        task = asyncio.ensure_future(approver.offer_result(_offer(mine)))
        await until(lambda: bool(held.jobs))
        held.flush()
        await asyncio.sleep(0.15)  # timed out; its close waits on the busy main thread
        approver.offers[0].take.click()  # the click lands first
        held.flush()
        return await task

    answer = asyncio.run(main())
    assert answer.taken and mine  # in the kernel, and the model is told so


def test_a_headless_offer_is_not_taken_and_shows_nothing() -> None:
    approver = WidgetApprover()
    shown: list[Any] = []
    approver.bind(HeldDispatcher(), headless=True, show=shown.append)
    mine: dict[str, Any] = {}
    answer = asyncio.run(approver.offer_result(_offer(mine)))
    assert not answer.taken and answer.by == "headless" and not shown and mine == {}


def test_the_offer_renders_untrusted_text_inert() -> None:
    from ipyagent.frontends.widgets import offer_html

    hostile = ("<script>window.__pwned=1</script> **bold** [x](javascript:alert(1)) "
               "<img src=x onerror=alert(1)> \x1b[2Kerased")
    markup = offer_html(_offer({}, hostile, replaces="your `fit` (str '<b>old</b>')"))
    assert "<script" not in markup and "<img" not in markup and "<b>old" not in markup
    assert "&lt;script&gt;" in markup and "\x1b" not in markup and "␛[2K" in markup
    assert "⚠ Taking it replaces your `fit`" in markup


def test_the_panel_does_not_repeat_the_cards_waiting_line() -> None:
    """Issue 30: the card's header and the panel both said 'waiting for approval'."""
    panel = ApprovalPanel(ToolCall("call_a", "python", {"code": "print(1)"}), lambda d: None)
    assert panel.status.layout.display == "none" and "waiting" not in panel.status.value
    timed = ApprovalPanel(ToolCall("call_b", "python", {"code": "print(1)"}), lambda d: None,
                          note="denied after 12 s without an answer (Agent.approval_timeout)")
    assert timed.status.layout.display == "" and "denied after 12 s" in timed.status.value
    panel.settle(Decision("approve", by="click"))
    assert panel.status.layout.display == "" and "approved by you" in panel.status.value


def test_approve_and_always_wait_while_the_edit_box_is_open() -> None:
    """Approve while editing would run the model's version, not what the box shows."""
    proposed: list[Decision] = []
    panel = ApprovalPanel(ToolCall("call_a", "python", {"code": "print(1)"}), proposed.append)
    panel.edit.click()
    assert panel.approve.disabled and panel.always.disabled and panel.edit.disabled
    assert not panel.deny.disabled and not panel.run_edited.disabled
    panel.approve.click()  # a script's click on the disabled button changes nothing either
    panel.always.click()
    assert proposed == [] and panel.pressed is None
    panel.cancel_edit.click()
    assert not (panel.approve.disabled or panel.always.disabled or panel.edit.disabled)
    panel.approve.click()
    assert [d.action for d in proposed] == ["approve"]
