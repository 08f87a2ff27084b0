"""Copies between the user's kernel and the sibling: recorded, and recreated by --rerun."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ipyagent import Agent
from ipyagent.copies import recorded_copies
from ipyagent.items import Message
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

    from ipyagent.approval import CallbackApprover

    report = replay(path, cwd=str(tmp_path), approval="ask", approval_hook=CallbackApprover(hook))
    assert asked.count("copy_variable") == 2 and "python" in asked
    assert sum("not approved" in n for n in report.notes) >= 2, report.notes
    assert not report.reproduced
