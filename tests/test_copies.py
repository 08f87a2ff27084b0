"""Copies between the user's kernel and the sibling: recorded, and recreated by --rerun."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ipyagent import Agent
from ipyagent.context.items import Message
from ipyagent.kernel.copies import recorded_copies
from tests.helpers.scripted_model import ScriptedModel, calls, text


def test_push_pull_are_recorded_and_rerun_recreates_the_copies(tmp_path: Path) -> None:
    prices = np.array([3.0, 4.0])
    user = {"prices": prices, "factor": 10}
    model = ScriptedModel([calls(("python", {"code": "scaled = prices * factor\nscaled.sum()"})),
                           text("70.")])
    with Agent(client=model, approval="auto", file_tools=False, cwd=str(tmp_path)) as agent:
        agent.copy_source = lambda: user  # as the magics do: the user's shareable variables
        records = agent.push(prices=prices)
        assert records[0]["name"] == "prices" and records[0]["type"] == "ndarray"
        result = agent.run("scale prices by factor")  # factor: copied on its NameError
        assert "70.0" in result.steps[0].results[0].output
        scaled = agent.pull("scaled", "scaled_local")
        assert list(scaled) == [30.0, 40.0]
        kinds = [c.get("direction") for c in recorded_copies(agent.context)]
        assert kinds == ["push", "push"]  # prices (by the user) and factor (on the NameError)
        assert any(isinstance(i, Message) and i.meta.get("copy", {}).get("direction") == "pull"
                   for i in agent.context)
        path = agent.save(tmp_path / "copies.ipynb")
    with Agent(model="demo", approval="auto", file_tools=False, cwd=str(tmp_path)) as again:
        again.load(path, rerun=True)
        assert list(again.kernel.pull("scaled")) == [30.0, 40.0]  # the copies came first
        assert again.kernel.pull("factor") == 10


def test_a_tampered_payload_is_not_recopied(tmp_path: Path) -> None:
    import nbformat

    with Agent(client=ScriptedModel([]), approval="auto", file_tools=False, cwd=str(tmp_path)) as agent:
        agent.push(numbers=[1, 2, 3])
        path = agent.save(tmp_path / "one.ipynb")
    nb = nbformat.read(path, as_version=4)
    for item in nb.metadata["ipyagent"]["items"]:
        if item.get("meta", {}).get("copy"):
            item["meta"]["copy"]["sha256"] = "0" * 64
    nbformat.write(nb, path)
    with Agent(model="demo", approval="auto", file_tools=False, cwd=str(tmp_path)) as again:
        report = again.load(path, rerun=True)
        assert "does not match its recorded sha256" in str(report.rebuild.failed)


def _copies_run(tmp_path: Path, big: bool = False) -> Path:
    """A run whose call needs a pushed copy and one its NameError copied; saved."""
    prices = np.array([3.0, 4.0]) if not big else np.arange(100_000, dtype=float)
    user = {"prices": prices, "factor": 10}
    model = ScriptedModel([calls(("python", {"code": "scaled = prices * factor\nscaled.sum()"})),
                           text("done.")])
    with Agent(client=model, approval="auto", file_tools=False, cwd=str(tmp_path)) as agent:
        agent.copy_source = lambda: user
        agent.push(prices=prices)
        agent.run("scale prices by factor")
        return agent.save(tmp_path / "copies.ipynb")


def test_replay_recreates_recorded_copies_in_its_fresh_sibling(tmp_path: Path) -> None:
    from ipyagent.transcripts.replay import replay

    path = _copies_run(tmp_path)
    report = replay(path, cwd=str(tmp_path), approval="auto")
    # Without the copies the replayed call would stop on NameError: prices, then factor.
    assert report.reproduced, str(report)
    assert report.compared == 1 and not report.notes, report.notes
    [result] = [i for i in report.context if getattr(i, "call_id", None)]
    assert "70.0" in result.output


def test_replay_of_a_copy_without_payload_says_it_must_be_provided(tmp_path: Path) -> None:
    from ipyagent.transcripts.replay import replay

    path = _copies_run(tmp_path, big=True)  # 800 KB pickled: over KEEP_PAYLOAD, not kept
    report = replay(path, cwd=str(tmp_path), approval="auto")
    [line] = [n for n in report.notes if "prices" in n]
    assert "must be provided" in line and "\n" not in line, line
    assert not report.reproduced  # the call that used it failed: said, not hidden


def test_replayed_copies_are_approved_like_calls_that_run(tmp_path: Path) -> None:
    from ipyagent.transcripts.replay import replay

    path = _copies_run(tmp_path)
    asked: list[str] = []

    def hook(call: object) -> bool:
        asked.append(getattr(call, "name", ""))
        return getattr(call, "name", "") != "copy_variable"  # refuse the copies only

    from ipyagent.engine.approval import CallbackApprover

    report = replay(path, cwd=str(tmp_path), approval="ask", approval_hook=CallbackApprover(hook))
    assert asked.count("copy_variable") == 2 and "python" in asked
    assert sum("not approved" in n for n in report.notes) >= 2, report.notes
    assert not report.reproduced


KEY = "sk-test-0123456789abcdefABCDEF"


class Asker:
    """The person at the approval UI: records each question, answers as told."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.asked: list[dict[str, object]] = []

    async def decide(self, call: object) -> object:
        from ipyagent import Decision

        self.asked.append(dict(call.arguments))  # type: ignore[attr-defined]
        return Decision("approve" if self.answer else "deny", by="click",
                        reason="" if self.answer else "no, it holds my key")


def test_a_dict_holding_a_secret_is_never_copied_unasked_under_auto(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    user = {"settings": {"model": "gpt", "nested": [{"key_used": KEY}]}}
    code = calls(("python", {"code": "print(settings['model'])"}))
    for answer in (False, True):
        asker = Asker(answer)
        with Agent(client=ScriptedModel([code, text("ok")]), approval="auto", file_tools=False,
                   shell_tool="off", cwd=str(tmp_path), allow=["copy_variable"],
                   approval_hook=asker) as agent:
            agent.copy_source = lambda: user
            result = agent.run("which model?")
            there = agent.kernel.execute("'settings' in globals()").text
        [question] = asker.asked  # asked even under auto, with copy_variable on the allow list
        assert "holds the value of $OPENAI_API_KEY" in str(question["warning"])
        assert KEY not in str(question) and KEY not in str(list(agent.context))
        assert there == repr(answer)  # copied only on a yes
        if not answer:
            assert "was not copied into yours" in result.steps[0].results[0].output
    with Agent(client=ScriptedModel([code, text("ok")]), approval="auto", file_tools=False,
               shell_tool="off", cwd=str(tmp_path)) as agent:  # nobody to ask: not copied
        agent.copy_source = lambda: user
        agent.run("which model?")
        assert agent.kernel.execute("'settings' in globals()").text == "False"


class Holder:
    def __init__(self, secret: str) -> None:
        self.inner = {"deep": [secret]}


def test_push_refuses_a_secret_anywhere_inside(tmp_path: Path, monkeypatch) -> None:
    import pytest

    monkeypatch.setenv("SERVICE_TOKEN", "tok-9f8e7d6c5b4a3")
    cases = {
        "cfg": ({"db": {"password": "hunter22"}}, r"cfg\['db'\]\['password'\] is named like a secret"),
        "env_copy": ([1, ("x", "Bearer tok-9f8e7d6c5b4a3")], r"env_copy\[1\]\[1\] holds the value of \$SERVICE_TOKEN"),
        "obj": (Holder("tok-9f8e7d6c5b4a3"), r"obj.inner\['deep'\]\[0\] holds the value of \$SERVICE_TOKEN"),
        "urls": (["postgresql://ana:pw-9x@db/sales"], r"urls\[0\] holds a password in a URL"),
        "lookup": ({"sk-live-0123456789abcdefgh": 1}, r"lookup key #0 looks like an API key"),
        "db_pass": ("whatever", r"its name \(db_pass\) looks secret"),
    }
    with Agent(client=ScriptedModel([]), approval="auto", file_tools=False, shell_tool="off",
               cwd=str(tmp_path)) as agent:
        for name, (value, says) in cases.items():
            with pytest.raises(ValueError, match=says) as info:
                agent.push(fine=1, **{name: value})
            assert "tok-9f8e7d6c5b4a3" not in str(info.value) and "sk-live" not in str(info.value)
        with pytest.raises(ValueError, match="ipyagent's own Agent"):
            agent.push(me=agent)
        assert agent.kernel.execute("'fine' in globals()").text == "False"  # all or none
        agent.push(fine={"password_hint": 3, "n": [1, 2]})  # a number under a secret-ish name is not a secret
