"""Branches: fork, the tree, and a branch's own kernel made only when it runs (issue 31)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ipyagent import Agent
from ipyagent.context.items import Message
from ipyagent.context.steps import count_steps
from ipyagent.errors import ConfigError
from ipyagent.transcripts.branches import deferred
from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls


def python(code: str, call_id: str) -> Any:
    return reply_tool_calls([("python", {"code": code}, call_id)])


def test_a_fork_shares_the_history_and_runs_it_only_at_its_first_python_call(tmp_path: Path) -> None:
    script = [python("x = 40", "f1"), reply_text("x is set.")]
    with ScriptedServer(script) as srv, Agent(model="m", base_url=srv.base_url, approval="auto",
                                              cwd=str(tmp_path), max_retries=0) as agent:
        agent.run("set x")
        alt = agent.fork("alt")
        try:
            assert alt.context == agent.context and alt.context is not agent.context
            assert all(a is not b for a, b in zip(alt.context, agent.context))
            assert alt.kernel_if_started is None and deferred(alt)  # no cost yet
            alt.context[0].content = "an edit in the fork"
            assert agent.context[0].content == "set x"  # stays in the fork

            srv.script([reply_text("No code needed.")])
            alt.run("just answer")
            assert alt.kernel_if_started is None  # a text answer costs no kernel either

            srv.script([python("print(x + 2)", "f2"), reply_text("42")])
            seen: list[Any] = []
            alt.run("use x", on_event=seen.append)
            result = next(r for r in alt.context if getattr(r, "call_id", "") == "f2")
            assert result.output.startswith("42") and not result.error
            assert result.meta["rebuild"] == ("this branch's own sibling kernel: re-ran 1 python "
                                              "call in the sibling kernel")
            assert any("re-ran 1 python call" in getattr(e, "message", "") for e in seen)
            assert not deferred(alt) and alt.tools["python"].handler is not None
            assert agent.kernel.execute("x").status == "ok"  # the parent's kernel untouched
            assert alt.kernel is not agent.kernel

            rows = {r["name"]: r for r in agent.branches.rows()}
            assert rows["alt"]["parent"] == "main" and rows["alt"]["at_step"] == 2
            assert rows["alt"]["steps"] == 5 and rows["main"]["steps"] == 2
            assert rows["alt"]["last_answer"] == "42" and rows["main"]["current"]
            assert agent.branches.switch("alt") is alt and agent.branches.current == "alt"
        finally:
            alt.close()


def test_names_are_words_and_unique(tmp_path: Path) -> None:
    with Agent(model="demo", python_tool=False, cwd=str(tmp_path)) as agent:
        agent.context.add_user("hi")
        first = agent.fork()
        assert agent.branches.name_of(first) == "fork-1"
        assert agent.branches.name_of(agent.fork()) == "fork-2"
        for bad, said in (("two words", "a branch name is one word"),
                          ("fork-1", "there is a branch 'fork-1' already"),
                          ("\u202eevil", "a branch name is one word")):
            with pytest.raises(ConfigError, match=said) as caught:
                agent.fork(bad)
            assert "\u202e" not in str(caught.value)  # a name's controls are shown, not obeyed
        with pytest.raises(ConfigError, match="no branch 'nope'; the branches are main, fork-1, fork-2"):
            agent.branches.switch("nope")
        agent.branches.close()


def test_a_fork_keeps_settings_tools_and_approval(tmp_path: Path) -> None:
    from ipyagent.tools.base import tool

    @tool
    def lookup(term: str) -> str:
        """Look a term up."""
        return term

    def hook(call: Any) -> Any:
        raise AssertionError("not asked here")

    with Agent(model="demo", python_tool=False, cwd=str(tmp_path), max_steps=7, tools=[lookup],
               approval_hook=hook, memory_tool=False, autosave=str(tmp_path / "run.ipynb")) as agent:
        agent.tools.remove("list_files")  # the user's own choice of tools carries over too
        agent.context.append(Message("user", "task"))
        made = agent.fork("b")
        try:
            assert made.max_steps == 7 and made.memory_tool is False and made.cwd == str(tmp_path)
            assert made.tools.names == agent.tools.names and made.tools["lookup"] is lookup
            assert made.approval_hook is agent.approval_hook and made.ran_here is agent.ran_here
            assert made.autosave == str(tmp_path / "run.b.ipynb")  # never the parent's file
            assert count_steps(made.context) == 0
        finally:
            made.close()


HOSTILE = "<img src=x onerror=\"window.__pwned=1\"> | col \u202eevil\x1b[2J"


def test_the_tables_and_the_index_show_the_models_text_as_text(tmp_path: Path) -> None:
    import json

    with Agent(model="demo", python_tool=False, file_tools=False, cwd=str(tmp_path)) as agent:
        agent.context.add_user("hi")
        agent.context.append(Message("assistant", HOSTILE, meta={"turn": {"step": 1}}))
        alt = agent.fork("alt")
        page = agent.branches._repr_html_()
        assert "<img" not in page and "&lt;img" in page
        text = agent.branches.text()
        assert "\u202e" not in text and "\x1b" not in text
        agent.save(tmp_path / "run.ipynb")
        index = json.loads((tmp_path / "run.branches.ipynb").read_text())
        cell = "".join(index["cells"][0]["source"])
        assert "<img" not in cell and "\\| col" in cell  # a | cannot break the table
        alt.close()


def test_a_damaged_branch_record_is_one_warning_and_the_conversation_loads(tmp_path: Path) -> None:
    import json

    with Agent(model="demo", python_tool=False, cwd=str(tmp_path)) as agent:
        agent.context.add_user("hi")
        alt = agent.fork("alt")
        path = alt.save(tmp_path / "alt.ipynb")
        alt.close()
    nb = json.loads(path.read_text())
    for bad in ({"name": "../../x", "parent": "main", "at_step": 0, "how": "fork"},
                {"name": "ok", "parent": "main", "at_step": -3, "how": "fork"},
                {"name": "ok", "parent": "\u202e", "at_step": 0, "how": "fork"},
                "not a mapping"):
        nb["metadata"]["ipyagent"]["branch"] = bad
        path.write_text(json.dumps(nb))
        with Agent(model="demo", python_tool=False, cwd=str(tmp_path)) as fresh:
            with pytest.warns(UserWarning, match="metadata.ipyagent.branch is damaged"):
                fresh.load(path)
            assert len(fresh.context) == 1 and fresh.tree is None
