"""offer_result: the model offers a value of its kernel; only the person's answer brings it in."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from ipyagent import Agent, Decision, ToolCall, ToolResult
from ipyagent.engine.approval import TerminalApprover
from ipyagent.models.base import ModelRequest
from ipyagent.models.demo import DemoModel
from ipyagent.tools.offers import OFFER_TOOL, Offer, OfferAnswer, local_name_problem, offer_tool
from tests.helpers.scripted_model import ScriptedModel, calls, text

HOSTILE = ("<script>window.__pwned=1</script> **bold** [x](javascript:alert(1)) "
           "\x1b[2K\x1b[1Aerased")


class Person:
    """An approver that also answers offers (as the notebook and terminal ones do)."""

    def __init__(self, take: bool = True, before: Any = None) -> None:
        self.take = take
        self.before = before  # run just before answering (the sibling changing the value)
        self.offers: list[Offer] = []
        self.asked: list[str] = []

    async def decide(self, call: ToolCall) -> Decision:
        self.asked.append(call.name)
        return Decision("approve", by="click")

    async def offer_result(self, offer: Offer) -> OfferAnswer:
        self.offers.append(offer)
        if self.before is not None:
            await self.before()
        if not self.take:
            return OfferAnswer(False, "click", reason="the user chose not to take it")
        return OfferAnswer(True, "click", offer.take())


def offering(tmp_path: Path, replies: list[Any], person: Person | None, mine: dict[str, Any],
             approval: str = "auto") -> Agent:
    agent = Agent(client=ScriptedModel(replies), approval=approval, file_tools=False,
                  cwd=str(tmp_path), approval_hook=person)
    agent.copy_target = mine  # as the magics do: the user's namespace
    agent.tools.add(offer_tool(agent))
    return agent


FIT = calls(("python", {"code": "fit = {'slope': 2.5, 'n': 12}"}),
            ("offer_result", {"name": "fit", "description": "the fitted trend"}))


def results(agent: Agent) -> list[ToolResult]:
    return [i for i in agent.context if isinstance(i, ToolResult)]


def test_a_taken_offer_arrives_under_its_name_and_is_recorded(tmp_path: Path) -> None:
    mine: dict[str, Any] = {}
    person = Person()
    with offering(tmp_path, [FIT, text("done")], person, mine) as agent:
        agent.run("fit a trend")
        offered = agent.client.requests[0].tools  # type: ignore[attr-defined]
        [answer] = [r for r in results(agent) if r.name == OFFER_TOOL]
    assert OFFER_TOOL in [t["name"] for t in offered]
    assert mine["fit"] == {"slope": 2.5, "n": 12}
    assert "took a copy of `fit` into their kernel" in answer.output and not answer.error
    [record] = answer.meta["copies"]
    assert record["direction"] == "pull" and record["taken"] and len(record["sha256"]) == 64
    assert record["type"] == "dict of 2" and record["by"] == "click"
    assert person.asked == []  # auto: no approval asked; the offer is the only question


def test_nothing_enters_without_the_answer_and_the_model_is_told(tmp_path: Path) -> None:
    mine: dict[str, Any] = {"fit": "mine"}
    person = Person(take=False)
    with offering(tmp_path, [FIT, text("ok")], person, mine) as agent:
        agent.run("fit a trend")
        [answer] = [r for r in results(agent) if r.name == OFFER_TOOL]
    assert mine == {"fit": "mine"}
    assert "did not take `fit`" in answer.output and "do not assume" in answer.output
    assert person.offers[0].replaces == "your `fit` (str 'mine')"  # said on the question
    assert "mine" not in answer.output  # the model never hears the user's value


def test_what_is_taken_is_what_was_offered(tmp_path: Path) -> None:
    mine: dict[str, Any] = {}
    holder: list[Agent] = []

    async def change() -> None:  # the sibling's fit changes while the person reads
        await holder[0].kernel.execute_async("fit = 'swapped'")

    with offering(tmp_path, [FIT, text("ok")], Person(before=change), mine) as agent:
        holder.append(agent)
        agent.run("fit a trend")
        assert agent.kernel.pull("fit") == "swapped"
    assert mine["fit"] == {"slope": 2.5, "n": 12}


def test_ask_does_not_ask_twice_and_deny_refuses_the_offer(tmp_path: Path) -> None:
    mine: dict[str, Any] = {}
    person = Person()
    with offering(tmp_path, [FIT, text("ok")], person, mine, approval="ask") as agent:
        agent.run("fit a trend")
    assert person.asked == ["python"] and len(person.offers) == 1 and "fit" in mine
    mine.clear()
    person = Person()
    with offering(tmp_path, [FIT, text("ok")], person, mine, approval="deny") as agent:
        agent.run("fit a trend")
    assert person.offers == [] and mine == {}


@pytest.mark.parametrize("name", ["_secret", "In", "get_ipython", "class", "ｄｆ", "a b", "1x"])
def test_names_the_user_could_not_see_or_ipython_owns_are_refused(tmp_path: Path, name: str) -> None:
    mine: dict[str, Any] = {}
    person = Person()
    reply = calls(("offer_result", {"name": name, "description": "x"}))
    with offering(tmp_path, [reply, text("ok")], person, mine) as agent:
        agent.run("offer it")
        [answer] = results(agent)
    assert answer.error and "cannot offer it" in answer.output
    assert person.offers == [] and mine == {}
    assert local_name_problem(name)


def test_a_builtin_name_says_it_would_be_shadowed(tmp_path: Path) -> None:
    person = Person(take=False)
    reply = calls(("python", {"code": "len = 3"}), ("offer_result", {"name": "len", "description": ""}))
    with offering(tmp_path, [reply, text("ok")], person, {}) as agent:
        agent.run("offer it")
    assert "builtin `len`" in (person.offers[0].replaces or "")
    assert "REPLACES the builtin `len`" in person.offers[0].question()


def test_offered_only_where_someone_can_take_it(tmp_path: Path) -> None:
    model = ScriptedModel([text("a"), text("b"), text("c")])
    with Agent(client=model, approval="auto", file_tools=False, skills_enabled=False,
               cwd=str(tmp_path), shell_tool="off") as agent:
        agent.tools.add(offer_tool(agent))
        agent.run("one")  # no copy_target, no approver that can offer
        agent.copy_target = {}
        agent.approval_hook = lambda call: True  # a plain hook cannot ask about an offer
        agent.run("two")
        agent.approval_hook = Person()
        agent.run("three")
    names = [[t["name"] for t in r.tools] for r in model.requests]
    assert names == [["python"], ["python"], ["python", OFFER_TOOL]]


def test_the_demo_model_never_calls_it_uninvited() -> None:
    specs = [offer_tool(Agent.__new__(Agent)).spec()]  # the spec only: no agent needed
    other = {"name": "shout", "description": "Shout.", "parameters": {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}
    from ipyagent.context.items import Message

    demo = DemoModel()
    for tools in ([other, *specs], specs):
        request = ModelRequest(system="", items=[Message("user", "offer the result please")],
                               tools=tools)
        _, planned = demo._plan(request)
        assert OFFER_TOOL not in [c.name for c in planned]


def test_the_terminal_prompt_shows_untrusted_text_inert_and_takes_on_yes(tmp_path: Path) -> None:
    out = io.StringIO()
    mine: dict[str, Any] = {"fit": 1}
    answers = iter(["y"])
    prompt = TerminalApprover(input_fn=lambda p: next(answers), output=out)
    offer = Offer("c1", "fit", HOSTILE, "dict of 2", 100, "0" * 64, "your `fit` (int 1)",
                  lambda: (mine.__setitem__("fit", {"a": 1}), "dict of 1")[1])
    import asyncio

    answer = asyncio.run(prompt.offer_result(offer))
    shown = out.getvalue()
    assert answer.taken and mine["fit"] == {"a": 1}
    assert "\x1b" not in shown and "␛[2K" in shown  # the escape cannot erase the question
    assert "REPLACES your `fit`" in shown and "fit = dict of 1" in shown
    answers = iter(["n"])
    mine["fit"] = 1
    assert not asyncio.run(prompt.offer_result(offer)).taken and mine["fit"] == 1


def test_the_card_shows_what_arrived_not_what_the_model_claims(tmp_path: Path) -> None:
    from ipyagent.frontends.widgets import offer_html

    mine: dict[str, Any] = {}
    person = Person(take=False)
    claim = calls(("python", {"code": "fit = {'slope': 2.5, 'n': 12}"}),
                  ("offer_result", {"name": "fit", "description": "(pandas.DataFrame 1200x5, 186 bytes pickled)"}))
    with offering(tmp_path, [claim, text("ok")], person, mine) as agent:
        agent.run("fit a trend")
        sha = agent.context[-2].meta["copies"][0]["sha256"]
    [offer] = person.offers
    assert offer.kind == "dict of 2" and "slope" in offer.preview and offer.sha256 == sha
    question = offer.question()
    assert question.index("dict of 2") < question.index("the agent's words: “(pandas.DataFrame 1200x5")
    card = offer_html(offer)
    assert "<b>dict of 2</b>" in card and sha[:16] in card and "the agent's words:</span> “(pandas.DataFrame" in card
    assert "{&#x27;slope&#x27;: 2.5, &#x27;n&#x27;: 12}" in card  # the preview, made here


def test_a_value_that_is_not_data_is_refused_before_anyone_is_asked(tmp_path: Path) -> None:
    person = Person()
    reply = calls(("python", {"code": "class Fit:\n    params = {'a': 1}\nfit = Fit()"}),
                  ("offer_result", {"name": "fit", "description": "the fit"}))
    with offering(tmp_path, [reply, text("ok")], person, {}) as agent:
        agent.run("offer it")
        answer = [r for r in results(agent) if r.name == OFFER_TOOL][0]
    assert person.offers == [] and answer.error
    assert "cannot offer 'fit'" in answer.output and "parameters as a dict" in answer.output
