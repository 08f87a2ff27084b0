"""The approval policy and its approvers: hooks, the terminal prompt, and nobody to ask."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from ipyagent.context.decisions import Decision
from ipyagent.context.items import ToolCall
from ipyagent.engine.approval import (
    ApprovalPolicy,
    CallbackApprover,
    TerminalApprover,
    TerminalOrDeny,
    edit_text,
    on_a_terminal,
)

CODE = ToolCall("c1", "python", {"code": "print(1)"})
ADD = ToolCall("c2", "add", {"a": 1, "b": 2})


def answers(*typed: str) -> tuple[list[str], object]:
    """An ``input_fn`` answering ``typed`` in order, and the prompts it was shown."""
    asked: list[str] = []
    feed: Iterator[str] = iter(typed)

    def input_fn(prompt: str) -> str:
        asked.append(prompt)
        return next(feed)

    return asked, input_fn


# -- ApprovalPolicy -------------------------------------------------------------------

async def test_modes_and_the_allow_list() -> None:
    assert (await ApprovalPolicy("auto").decide(CODE)).by == "policy"
    denied = await ApprovalPolicy("deny").decide(CODE)
    assert not denied.approved and "add 'python' to Agent.allow" in denied.reason
    allowed = await ApprovalPolicy("deny", allow=["python"]).decide(CODE)
    assert allowed.approved and (allowed.by, allowed.detail) == ("allow-list", "python")


async def test_ask_without_a_ui_is_denied_saying_how_to_allow() -> None:
    decision = await ApprovalPolicy("ask").decide(ADD)
    assert decision.action == "deny" and decision.by == "headless"
    assert "Agent.approval = 'auto'" in decision.reason and "'add'" in decision.reason


async def test_always_is_remembered_by_tool_with_the_call_that_said_so() -> None:
    asked: list[ToolCall] = []

    def hook(call: ToolCall) -> Decision:
        asked.append(call)
        return Decision("approve", scope="always", by="click-always")

    policy = ApprovalPolicy("ask", ui=CallbackApprover(hook))
    await policy.decide(ADD)
    again = await policy.decide(ToolCall("c9", "add", {"a": 5, "b": 6}))
    assert asked == [ADD] and policy.always == {"add": "c2"}
    assert again.approved and (again.by, again.detail) == ("always", "c2")
    assert (await policy.decide(CODE)).approved and len(asked) == 2  # other tools still ask


async def test_every_decision_is_stamped_and_a_shared_one_is_copied() -> None:
    shared = Decision("approve")
    policy = ApprovalPolicy("ask", ui=CallbackApprover(lambda call: shared))
    first, second = await policy.decide(CODE), await policy.decide(ADD)
    assert first.at.endswith("Z") and first.by == "hook"  # unset "by": the hook decided
    assert first is not shared and second is not first and shared.at == ""


# -- CallbackApprover -----------------------------------------------------------------

@pytest.mark.parametrize("value, action, reason", [
    (True, "approve", ""), ("approve", "approve", ""), ("y", "approve", ""),
    (False, "deny", "denied by the approval hook"), (None, "deny", "denied by the approval hook"),
    ("no", "deny", "denied by the approval hook"),
    ("too risky", "deny", "too risky"),  # any other text is the reason
])
async def test_hook_values(value: object, action: str, reason: str) -> None:
    decision = await CallbackApprover(lambda call: value).decide(CODE)  # type: ignore[arg-type,return-value]
    assert (decision.action, decision.reason, decision.by) == (action, reason, "hook")


async def test_async_hooks_are_awaited() -> None:
    async def hook(call: ToolCall) -> bool:
        return call.name == "add"

    assert (await CallbackApprover(hook).decide(ADD)).approved
    assert not (await CallbackApprover(hook).decide(CODE)).approved


# -- TerminalApprover -----------------------------------------------------------------

async def test_terminal_yes_always_and_no_with_a_reason() -> None:
    out = io.StringIO()
    asked, fn = answers("maybe", "Y")
    yes = await TerminalApprover(input_fn=fn, output=out).decide(CODE)  # type: ignore[arg-type]
    assert yes.approved and (yes.by, yes.detail) == ("terminal", "y")
    assert len(asked) == 2  # an unknown answer asks again
    assert "── tool call: python ──\nprint(1)" in out.getvalue()
    _, fn = answers("a")
    always = await TerminalApprover(input_fn=fn, show_call=False).decide(CODE)  # type: ignore[arg-type]
    assert always.scope == "always"
    asked, fn = answers("n", " not now ")
    no = await TerminalApprover(input_fn=fn, show_call=False).decide(CODE)  # type: ignore[arg-type]
    assert (no.action, no.reason) == ("deny", "not now") and asked[1].startswith("Reason")


async def test_the_call_shown_cannot_rewrite_the_terminal() -> None:
    out = io.StringIO()
    _, fn = answers("n", "")
    sneaky = ToolCall("c3", "python", {"code": "rm_all()  # \x1b[2K\x1b[1Gprint('hi')"})
    await TerminalApprover(input_fn=fn, output=out).decide(sneaky)  # type: ignore[arg-type]
    assert "\x1b" not in out.getvalue() and "␛[2K" in out.getvalue()


async def test_terminal_edit_without_an_editor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)
    _, fn = answers("e", "print(2)", "print(3)", ".")
    edited = await TerminalApprover(input_fn=fn, show_call=False).decide(CODE)  # type: ignore[arg-type]
    assert (edited.action, edited.arguments, edited.detail) == ("edit", {"code": "print(2)\nprint(3)"}, "e")
    _, fn = answers("e", '{"a": 10,', '"b": 20}', ".")
    json_edit = await TerminalApprover(input_fn=fn, show_call=False).decide(ADD)  # type: ignore[arg-type]
    assert json_edit.arguments == {"a": 10, "b": 20}
    _, fn = answers("e", "{not json", ".")
    bad = await TerminalApprover(input_fn=fn, show_call=False).decide(ADD)  # type: ignore[arg-type]
    assert bad.action == "deny" and "edited arguments were not JSON" in bad.reason


async def test_a_failing_input_reaches_the_caller() -> None:
    def broken(prompt: str) -> str:
        raise OSError("stdin went away")

    with pytest.raises(OSError, match="stdin went away"):
        await TerminalApprover(input_fn=broken, show_call=False).decide(CODE)


async def test_terminal_or_deny_with_nobody_at_a_terminal() -> None:
    assert not on_a_terminal()  # pytest's stdin is no terminal
    _, fn = answers()
    approver = TerminalOrDeny(fn, unattended=lambda call: f"nobody to approve {call.name}")  # type: ignore[arg-type]
    decision = await approver.decide(CODE)
    assert (decision.action, decision.by, decision.reason) == ("deny", "headless", "nobody to approve python")
    assert await approver.confirm_mcp(object()) == "nobody could agree: stdin is not a terminal"


# -- edit_text ------------------------------------------------------------------------

def test_edit_text_runs_the_editor_on_a_temporary_file() -> None:
    text, problem = edit_text("sed -i s/1/2/", "x = 1", ".py")
    assert (text, problem) == ("x = 2\n", None)


def test_edit_text_reports_an_editor_that_fails_or_is_missing() -> None:
    assert edit_text("false", "x", ".py") == ("", "the editor 'false' exited with 1")
    text, problem = edit_text("no-such-editor-here", "x", ".py")
    assert text == "" and problem is not None and "could not start the editor" in problem
