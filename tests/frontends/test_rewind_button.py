"""The "rewind to here" button, clicked in process (ipywidgets without a page): it asks first,
says what will be undone, finds its step in the branch that holds it, and does it."""

from __future__ import annotations

import io
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

import ipyagent
from ipyagent.context.steps import count_steps, step_spans
from ipyagent.frontends import magics
from ipyagent.frontends.rewind_button import RewindButton, find_step, step_action
from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls

pytest.importorskip("ipywidgets")


def python(code: str, call_id: str) -> Any:
    return reply_tool_calls([("python", {"code": code}, call_id)])


def turn(agent: Any, n: int) -> Any:
    return list(agent.context)[step_spans(list(agent.context))[n - 1].start]


def wait(predicate: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_it_asks_first_then_rewinds_and_an_old_button_finds_the_kept_branch(
        ip: Any, tmp_path: Path) -> None:
    script = [python("p = 1\nopen('b1.txt', 'w').write('1')", "b1"),
              python("q = 2\nopen('b2.txt', 'w').write('2')", "b2"),
              python("r = 3\nopen('b3.txt', 'w').write('3')", "b3"),
              reply_text("Three.")]
    with ScriptedServer(script) as srv:
        ip.run_line_magic("config", f"Agent.cwd = {str(tmp_path)!r}")
        with redirect_stdout(io.StringIO()):
            ip.run_line_magic("load_ext", "ipyagent")
        try:
            agent = ipyagent.current()
            agent.model, agent.base_url, agent.approval = "scripted", srv.base_url, "auto"
            agent.autosave, agent.max_retries = "", 0
            agent.run("three files")
            m = magics._MAGICS
            two, three = turn(agent, 2), turn(agent, 3)
            button = RewindButton(m, agent, two, 2)
            assert "rewind 2" in repr(button)

            button.button.click()  # asks first: nothing has changed yet
            question = button.question.value
            assert "Rewind to step 2: drop steps 3–4" in question
            assert "Undo in your folder: b3.txt" in question and "re-runs the 2 kept python" in question
            assert button.choice.layout.display == "flex" and not button.go.disabled
            assert count_steps(agent.context) == 4 and (tmp_path / "b3.txt").exists()
            button.cancel.click()
            assert "Not rewound." in button.status.value and button.question.value == ""
            assert count_steps(agent.context) == 4

            button.button.click()
            button.go.click()
            wait(lambda: "rewound to step 2" in button.status.value, "the rewind")
            assert count_steps(agent.context) == 2 and not (tmp_path / "b3.txt").exists()
            assert "put back in your folder: b3.txt" in button.status.value
            assert agent.kernel.execute("print('r' in globals(), q)").text.strip() == "False 2"
            assert not m.runner.running

            # Step 3's old button: that step lives on in the kept branch, and says so.
            assert find_step(agent, three) == (agent.branches["main-1"], 3)
            old = RewindButton(m, agent, three, 3)
            old.button.click()
            assert "This step is in branch main-1" in old.question.value
            old.go.click()
            wait(lambda: "rewound to step 3" in old.status.value, "the branch's rewind")
            first = agent.branches["main-1"]
            assert ipyagent.current() is first and count_steps(first.context) == 3
            assert agent.branches.current == "main-1"
            assert (tmp_path / "b3.txt").exists() is False  # its files stay as the folder is

            # The display hook: one button per finished step that recorded a reply.
            class Finished:
                index = 1

            assert step_action(m, first)(Finished()) is not None
        finally:
            ip.run_line_magic("unload_ext", "ipyagent")
            ip.config.pop("Agent", None)


def test_code_that_did_not_run_here_is_left_to_the_magic(ip: Any, tmp_path: Path) -> None:
    from ipyagent import Agent

    script = [python("s = 1", "s1"), python("t = 2", "s2"), reply_text("Two.")]
    with ScriptedServer(script) as srv, Agent(model="m", base_url=srv.base_url, approval="auto",
                                              cwd=str(tmp_path), max_retries=0) as first:
        first.run("two")
        path = first.save(tmp_path / "sent.ipynb")
    with redirect_stdout(io.StringIO()):
        ip.run_line_magic("load_ext", "ipyagent")
    try:
        agent = ipyagent.current()
        agent.autosave = ""
        agent.load(path)  # a transcript from elsewhere: its code never ran here
        button = RewindButton(magics._MAGICS, agent, turn(agent, 2), 2)
        button.button.click()
        assert button.go.disabled
        assert "2 of the kept calls did not run in this session: run `%agent rewind 2`" in \
            button.status.value
        assert count_steps(agent.context) == 3
    finally:
        ip.run_line_magic("unload_ext", "ipyagent")
