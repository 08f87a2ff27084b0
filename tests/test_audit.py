"""The audit trail: every executed tool call has exactly one decision, saved and listed."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import nbformat
import pytest

from ipyagent import Agent, Decision, ToolCall, ToolResult
from ipyagent.context.audit import Audit
from ipyagent.engine.approval import TerminalApprover
from ipyagent.frontends.widgets import WidgetApprover
from ipyagent.tools.base import Tool
from ipyagent.transcripts.transcript import read
from tests.helpers.scripted_model import ScriptedModel, calls, text

BAD = "<img src=x onerror=alert(1)>"


def recording_tool(name: str, ran: list[str]) -> Tool:
    """A tool that records the id of every call it actually executes (the ground truth)."""

    async def handler(call: ToolCall) -> ToolResult:
        ran.append(call.id)
        return ToolResult(call.id, f"{name} ran with {call.arguments}", name=name)

    return Tool(name=name, description=f"{name} something",
                parameters={"type": "object", "properties": {"x": {"type": "integer"}}},
                handler=handler)


def decisions_by_call(items: list[Any]) -> dict[str, list[dict[str, Any]]]:
    """Every decision record in the items, per (step, call id) of the result that holds it."""
    found: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        record = getattr(item, "meta", {}).get("decision")
        if record is None:
            continue
        assert isinstance(item, ToolResult), f"a decision outside a result: {item}"
        found.setdefault(f"{record['step']}:{item.call_id}", []).append(record)
    return found


def assert_one_decision_per_executed_call(agent: Agent, ran: list[str]) -> None:
    """Walk the context: each result that executed has exactly one approving record; a
    denied one has a deny record and did not execute."""
    records = decisions_by_call(list(agent.context))
    assert all(len(r) == 1 for r in records.values()), records
    executed = 0
    for item in agent.context:
        if not isinstance(item, ToolResult):
            continue
        record = item.meta.get("decision")
        if item.meta.get("denied"):
            assert record is not None and record["action"] == "deny", item
        elif item.meta.get("skipped"):
            assert record is None
        else:
            assert record is not None and record["action"] in ("approve", "edit"), item
            executed += 1
        at = dt.datetime.fromisoformat(record["at"].replace("Z", "+00:00")) if record else None
        assert at is None or at.utcoffset() == dt.timedelta(0)  # UTC
    assert executed == len(ran)  # no call ran without an approving record, none twice
    rows = list(agent.audit())
    assert sum(r.ran for r in rows) == len(ran)


def test_demo_run_under_auto_records_the_policy_for_every_call() -> None:
    with Agent(model="demo", approval="auto") as agent:
        result = agent.run("Use Python to compute 2**100")
        assert result.stop_reason == "done"
        results = [i for i in agent.context if isinstance(i, ToolResult)]
        assert results and all(r.meta["decision"]["by"] == "policy" for r in results)
        assert all(r.meta["decision"]["detail"] == "auto" for r in results)
        assert_one_decision_per_executed_call(agent, ran=[r.call_id for r in results])
        assert len(agent.audit()) == len(results)


def test_ask_mode_records_hook_allow_list_always_edit_and_deny(tmp_path: Any) -> None:
    ran: list[str] = []
    answers = iter([
        True,  # step 1, a: the hook approves
        Decision("edit", arguments={"x": 99}),  # step 2, a: edited
        Decision("deny", reason="not that", by="user"),  # step 3, a: denied with a reason
        Decision("approve", scope="always"),  # step 4, a: always
    ])
    asked: list[str] = []

    def hook(call: ToolCall) -> Any:
        asked.append(call.id)
        return next(answers)

    model = ScriptedModel([
        calls(("a", {"x": 1}), ("b", {"x": 1})),  # b is on the allow list
        calls(("a", {"x": 2})),
        calls(("a", {"x": 3})),
        calls(("a", {"x": 4})),
        calls(("a", {"x": 5}), (BAD, {"x": 6})),  # a: Always; the unknown tool: asked
        text("done"),
    ])
    answers_then = iter([Decision("deny", by="user")])  # the bad tool: a bare deny stops

    def hook_all(call: ToolCall) -> Any:
        if call.name == BAD:
            return next(answers_then)
        return hook(call)

    agent = Agent(client=model, python_tool=False, file_tools=False, approval="ask",
                  allow=["b"], approval_hook=hook_all,
                  tools=[recording_tool("a", ran), recording_tool("b", ran)])
    result = agent.run("go")
    assert result.stop_reason == "denied"
    assert_one_decision_per_executed_call(agent, ran)
    rows = agent.audit().rows
    summary = [(r.step, r.tool, r.decision, r.by, r.detail) for r in rows]
    assert summary == [
        (1, "a", "approve", "hook", "True"),
        (1, "b", "approve", "allow-list", "b"),
        (2, "a", "edit", "hook", ""),
        (3, "a", "deny", "user", ""),
        (4, "a", "approve", "hook", ""),
        (5, "a", "approve", "always", "call_0_a"),  # Always, given at step 4's call
        (5, BAD, "deny", "user", ""),
    ]
    edited = next(i for i in agent.context if isinstance(i, ToolResult)
                  and i.meta["decision"]["action"] == "edit")
    assert edited.meta["decision"]["edited"]["original"] == {"x": 2}
    assert '-  "x": 2' in edited.meta["decision"]["edited"]["diff"]
    assert '+  "x": 99' in edited.meta["decision"]["edited"]["diff"]
    assert len(ran) == 5 and len(asked) == 4

    # Saved and read back: the records survive; the Audit cell lists them, escaped.
    path = agent.save(tmp_path / "run.ipynb")
    nb = nbformat.read(path, as_version=4)
    cell = nb.cells[-1]
    assert cell.metadata["ipyagent"]["kind"] == "audit"
    assert cell.source.startswith("#### Audit")
    assert "<img" not in cell.source and "&lt;img src=x onerror=alert(1)&gt;" in cell.source
    # The call that set Always says so, and the one it approved names it.
    assert "| 4 | call\\_0\\_a | a | approve + Always (this conversation) | hook |" in cell.source
    assert "| 5 | call\\_0\\_a | a | approve | always (given at call\\_0\\_a) |" in cell.source
    loaded = read(path)
    assert [(r.tool, r.by) for r in Audit.of(loaded.items)] == [(r.tool, r.by) for r in rows]

    from IPython.lib.pretty import pretty

    table = pretty(agent.audit())  # terminal IPython: the table, not just its summary
    assert table.splitlines()[0] == "<Audit: 7 calls, 5 ran, 2 denied>"
    assert table.splitlines()[1].split() == ["step", "call", "id", "tool", "decision", "by",
                                            "at", "edited", "sha256"]
    assert "always (given at call_0_a)" in table and "approve + Always (this conversation)" in table
    assert "<img src=x onerror=alert(1)>" in table and "\x1b" not in table
    html = agent.audit()._repr_html_()
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    # Seen by a new user: "Audit — Audit: …", right-aligned cells, empty columns shown.
    assert html.startswith("<div><b>Audit</b>: 7 calls, 5 ran, 2 denied<table>")
    assert ">edited</th>" in html and "text-align:left" in html  # one call was edited
    filled = {c for r in rows for c, v in zip(("edited", "sha256"), (r.edited, r.sha256)) if v}
    assert all((f">{c}</th>" in html) == (c in filled) for c in ("edited", "sha256"))
    assert repr(agent.audit()) == "<Audit: 7 calls, 5 ran, 2 denied>"
    assert list(rows[0]) == [1, "call_0_a", "a", "approve", "hook", rows[0].at, False, ""]


def test_a_transcript_without_decisions_still_loads(tmp_path: Any) -> None:
    ran: list[str] = []
    agent = Agent(client=ScriptedModel([calls(("a", {"x": 1})), text("ok")]), python_tool=False,
                  file_tools=False, approval="auto", tools=[recording_tool("a", ran)])
    agent.run("go")
    path = agent.save(tmp_path / "run.ipynb")
    nb = nbformat.read(path, as_version=4)
    for item in nb.metadata["ipyagent"]["items"]:  # as an older ipyagent wrote it
        item.get("meta", {}).pop("decision", None)
    nb.cells.pop()  # and without the Audit cell
    nbformat.write(nb, path)
    old = Agent.from_transcript(path, python_tool=False, file_tools=False)
    (row,) = old.audit()
    assert row.decision == "" and "no decision recorded" in row.note
    assert "no decision recorded" in old.audit()._repr_html_()


def test_terminal_answers_record_the_key() -> None:
    call = ToolCall("c1", "python", {"code": "1"})
    for typed, action, scope in (("y", "approve", "once"), ("a", "approve", "always"),
                                 ("n", "deny", "once")):
        answers = iter([typed, ""])
        approver = TerminalApprover(input_fn=lambda prompt, it=answers: next(it),
                                    show_call=False)
        decision = asyncio.run(approver.decide(call))
        assert (decision.action, decision.scope, decision.by, decision.detail) == (
            action, scope, "terminal", typed)
    answers = iter(["e", "2", "."])
    approver = TerminalApprover(input_fn=lambda prompt: next(answers), show_call=False)
    decision = asyncio.run(approver.decide(call))
    assert (decision.action, decision.by, decision.detail) == ("edit", "terminal", "e")
    assert decision.arguments == {"code": "2"}


@pytest.mark.parametrize("mode, by, detail", [("auto", "policy", "auto"),
                                               ("deny", "policy", "deny"),
                                               ("ask", "headless", "")])
def test_policy_and_headless_decisions_say_so(mode: str, by: str, detail: str) -> None:
    ran: list[str] = []
    agent = Agent(client=ScriptedModel([calls(("a", {"x": 1})), text("ok")]), python_tool=False,
                  file_tools=False, approval=mode, tools=[recording_tool("a", ran)])
    agent.run("go")
    (row,) = agent.audit()
    assert (row.by, row.detail) == (by, detail)
    assert_one_decision_per_executed_call(agent, ran)


def test_clicks_are_recorded_with_the_button_and_always_names_its_call() -> None:
    """Real ApprovalPanels in process: Always on the first call, later calls by 'always'."""
    ran: list[str] = []
    approver = WidgetApprover()
    agent = Agent(client=ScriptedModel([calls(("a", {"x": 1})), calls(("a", {"x": 2})),
                                        calls(("a", {"x": 3})), text("ok")]),
                  python_tool=False, file_tools=False, approval="ask", approval_hook=approver,
                  tools=[recording_tool("a", ran)])
    buttons = iter(["approve", "always"])

    async def main() -> None:
        loop = asyncio.get_running_loop()
        # The "user" presses a button as soon as its panel is shown.
        approver.bind(show=lambda widget: loop.call_soon(
            getattr(widget.panel, next(buttons)).click))
        await agent.arun("go")
        await asyncio.sleep(0.05)

    asyncio.run(main())
    assert [(r.by, r.detail) for r in agent.audit()] == [
        ("click", "Approve"), ("click-always", "Always"), ("always", "call_0_a")]
    assert len(approver.panels) == 2  # the third call was not asked
    assert [p.decision.by for p in approver.panels] == ["click", "click-always"]
    assert_one_decision_per_executed_call(agent, ran)


def test_every_decision_a_person_makes_is_a_row_with_what_moved(tmp_path: Any) -> None:
    """Take, decline, pull, push and the API other code calls (apply, undo): each a row,
    with the sha256 of what moved, saved and read back, escaped where shown."""
    from ipyagent.context.audit import person_decided
    from ipyagent.tools.offers import OfferAnswer, offer_tool

    class Person:
        async def decide(self, call: ToolCall) -> Decision:
            return Decision("approve", by="click")

        async def offer_result(self, offer: Any) -> OfferAnswer:
            if offer.name == "fit":
                return OfferAnswer(True, "click", offer.take())
            return OfferAnswer(False, "click", reason="the user chose not to take it")

    script = [calls(("python", {"code": "fit = [1, 2]\nother = 3"}),
                    ("offer_result", {"name": "fit", "description": "x"}),
                    ("offer_result", {"name": "other", "description": "y"})), text("done")]
    mine: dict[str, Any] = {"mine": {"n": 1}}
    with Agent(client=ScriptedModel(script), approval="ask", file_tools=False, shell_tool="off",
               cwd=str(tmp_path), approval_hook=Person()) as agent:
        agent.copy_target = mine
        agent.tools.add(offer_tool(agent))
        agent.run("go")
        agent.push(mine=mine["mine"])
        agent.pull("fit", "fit_again")
        person_decided(agent.context, "apply", f"2 file changes {BAD}", by="click",
                       sha256="ab" * 32, tell="[ipyagent: the user applied 2 file changes]")
        person_decided(agent.context, "undo", "the last apply", by="click")
        audit = agent.audit()
        agent.save(tmp_path / "run.ipynb")
    people = [(r.decision, r.tool, r.by, bool(r.sha256)) for r in audit if r.person]
    assert people == [("take", "fit", "click", True), ("decline", "other", "click", False),
                      ("push", "mine", "user", True), ("pull", "fit_again", "user", True),
                      ("apply", f"2 file changes {BAD}", "click", True),
                      ("undo", "the last apply", "click", False)]
    take = next(r for r in audit if r.decision == "take")
    copies = next(i for i in agent.context if isinstance(i, ToolResult) and i.call_id == take.call_id)
    assert take.sha256 == copies.meta["copies"][0]["sha256"]  # the bytes that crossed
    assert repr(audit) == "<Audit: 3 calls, 3 ran, 0 denied, 6 other decisions>"
    assert "&lt;img" in audit._repr_html_() and "<img" not in audit._repr_html_()
    assert "the user applied 2 file changes" in agent.context[-1].content  # the model is told
    loaded = read(tmp_path / "run.ipynb")
    assert [(r.decision, r.sha256) for r in Audit.of(loaded.items) if r.person] == \
        [(r.decision, r.sha256) for r in audit if r.person]


def test_the_notebook_table_shows_hidden_characters_as_escapes() -> None:
    """Found by a review: the HTML view escaped only HTML, so a model-chosen call id kept its
    U+202E (the text view showed it as an escape)."""
    from ipyagent import Agent
    from tests.helpers.scripted_model import ScriptedModel, calls, text

    ran: list[str] = []
    model = ScriptedModel([calls(("a", {"x": 1})), text("done")])
    agent = Agent(client=model, tools=[recording_tool("a", ran)], python_tool=False,
                  file_tools=False, approval="auto")
    model.replies[0].tool_calls[0].id = "call\u202eevil"
    agent.run("go")
    html = agent.audit()._repr_html_()
    assert "\u202e" not in html and "⟨U+202E⟩" in html
    agent.close()
