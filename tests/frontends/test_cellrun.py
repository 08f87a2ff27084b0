"""One %agent run in a cell: one-run options applied and restored, blocking runs, error lines."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from IPython.core.error import UsageError

from ipyagent import Agent
from ipyagent.frontends.cellrun import OVERRIDES, CellRunner, Command, error_line, guard


def options(**given: Any) -> SimpleNamespace:
    return SimpleNamespace(**{**dict.fromkeys(OVERRIDES), "new": False, **given})


class Magics:
    """What CellRunner reads of the magics: the agent, the approver, where it runs."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.in_kernel = False
        self.shell = None
        self.unbound = 0
        self.approver = SimpleNamespace(unbind=self.unbind)
        self.warmed = False

    def get_agent(self) -> Agent:
        return self.agent

    def unbind(self) -> None:
        self.unbound += 1

    def settle_warmup(self) -> None:
        self.warmed = True


@pytest.fixture
def agent(tmp_path: Any) -> Any:
    with Agent(model="demo", python_tool=False, file_tools=False, approval="auto",
               cwd=str(tmp_path)) as a:
        yield a


def test_one_run_options_apply_inside_the_session_and_are_restored(agent: Agent) -> None:
    magics = Magics(agent)
    runner = CellRunner(magics)
    agent.context.add_user("earlier")
    with runner.session(Command("run", "t", options(approve="deny", max_steps=2, new=True))) as same:
        assert same is agent and runner.running and repr(runner) == "<CellRunner running>"
        assert (agent.approval, agent.max_steps) == ("deny", 2)
        assert len(agent.context) == 0  # --new
        with pytest.raises(UsageError, match="a run is already in progress"):
            runner.check_runnable(Command("run", "again", options()))
    assert (agent.approval, agent.max_steps) == ("auto", 20) and not runner.running
    assert magics.unbound == 1  # the approver never draws in a finished cell


def test_a_bad_option_is_a_usage_error_and_restores_what_was_set(agent: Agent) -> None:
    runner = CellRunner(Magics(agent))
    with pytest.raises(UsageError, match="max_steps"):
        with runner.session(Command("run", "t", options(approve="deny", max_steps="many"))):
            raise AssertionError("the session must not start")
    assert agent.approval == "auto" and not runner.running


def test_nothing_to_continue_without_a_task() -> None:
    with Agent(model="demo", python_tool=False, file_tools=False) as agent:
        with pytest.raises(UsageError, match="nothing to continue"):
            CellRunner(Magics(agent)).check_runnable(Command("step", None, options()))


def test_a_blocking_run_pumps_the_terminal_display_until_the_engine_is_done(
        agent: Agent, capsys: pytest.CaptureFixture[str]) -> None:
    magics = Magics(agent)
    runner = CellRunner(magics)
    runner.run_blocking(Command("run", "hello there", options()))
    assert magics.warmed and not runner.running and runner.pump is None
    assert [i.label for i in agent.context][0] == "user" and agent.context[-1].role == "assistant"
    assert agent.context[-1].content and agent.context[-1].content in capsys.readouterr().out


def test_guard_reports_the_end_even_of_a_failed_run() -> None:
    ended: list[str] = []

    async def fails() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        asyncio.run(guard(fails(), lambda: ended.append("done")))
    assert ended == ["done"]


def test_error_line_is_one_line_with_control_characters_visible() -> None:
    assert error_line(RuntimeError("first\nsecond \x1b[31mred")) == "first second \u241b[31mred"
