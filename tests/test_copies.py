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
