"""``%agent rewind N``, ``fork``, ``switch``, ``branches`` in an in-process IPython shell
(terminal mode), against a real scripted server on 127.0.0.1 and a real sibling kernel."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Iterator

import pytest
from IPython.core.error import UsageError

import ipyagent
from ipyagent.context.steps import count_steps
from ipyagent.frontends import magics
from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls


def python(code: str, call_id: str) -> Any:
    return reply_tool_calls([("python", {"code": code}, call_id)])


THREE = [python("a = 1\nopen('m1.txt', 'w').write('1')", "m1"),
         python("b = 2\nopen('m2.txt', 'w').write('2')", "m2"),
         python("c = 3\nopen('m3.txt', 'w').write('3')", "m3"),
         reply_text("Made three.")]


@pytest.fixture
def session(ip: Any, tmp_path: Path) -> Iterator[tuple[Any, ScriptedServer, Path]]:
    """The extension loaded in ``tmp_path`` against a scripted server, calls auto-approved."""
    with ScriptedServer(list(THREE)) as srv:
        ip.run_line_magic("config", f"Agent.cwd = {str(tmp_path)!r}")
        with redirect_stdout(io.StringIO()):
            ip.run_line_magic("load_ext", "ipyagent")
        agent = ipyagent.current()
        agent.model, agent.base_url, agent.approval = "scripted", srv.base_url, "auto"
        agent.autosave, agent.max_retries = "", 0
        yield ip, srv, tmp_path
        ip.run_line_magic("unload_ext", "ipyagent")
        ip.config.pop("Agent", None)


def run(ip: Any, cell: str) -> tuple[str, str, Any]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        result = ip.run_cell(cell)
    return out.getvalue(), err.getvalue(), result


def test_the_subcommands_parse_and_their_words_stay_tasks_otherwise(ip: Any) -> None:
    with redirect_stdout(io.StringIO()):
        ip.run_line_magic("load_ext", "ipyagent")
    try:
        m = magics._MAGICS
        assert m is not None
        cmd = m.parse("rewind 3", None)
        assert (cmd.action, cmd.args) == ("rewind", ("3",))
        assert m.parse("rewind 3 --no-branch", None).args == ("3", "--no-branch")
        assert m.parse("rewind the tape to the start", None).action == "run"
        assert m.parse("fork", None).action == "fork" and m.parse("fork alt", None).args == ("alt",)
        assert m.parse("fork the repository and clone it", None).action == "run"
        assert m.parse("switch alt", None).args == ("alt",)
        assert m.parse("branches", None).action == "branches"
        assert m.parse("branches of the tree", None).action == "run"
        for line, said in (("rewind", "%agent rewind N"), ("switch", "%agent switch NAME")):
            with pytest.raises(UsageError, match=said):
                m.parse(line, None)
    finally:
        ip.run_line_magic("unload_ext", "ipyagent")


def test_rewind_fork_switch_and_branches_from_the_magic(session: Any) -> None:
    ip, srv, folder = session
    run(ip, "%agent Make three files")
    agent = ipyagent.current()
    assert count_steps(agent.context) == 4
    assert sorted(p.name for p in folder.iterdir()) == ["m1.txt", "m2.txt", "m3.txt"]

    out, err, _ = run(ip, "%agent rewind 1")
    assert "rewound to step 1: dropped 3 steps, kept as branch 'main-1'" in out
    assert "put back in your folder: m3.txt, m2.txt" in out and "re-ran 1 python call" in out
    assert ipyagent.current() is agent and count_steps(agent.context) == 1
    assert sorted(p.name for p in folder.iterdir()) == ["m1.txt"]
    assert agent.kernel.execute("print('b' in globals(), a)").text.strip() == "False 1"

    out, _, result = run(ip, "%agent branches")
    table = result.result
    assert [r["name"] for r in table.rows()] == ["main", "main-1"]
    assert "main-1           main@1" in table.text()

    out, _, _ = run(ip, "%agent fork alt")
    assert "forked branch alt from main at step 1" in out
    fork = ipyagent.current()
    assert fork is not agent and fork is agent.branches["alt"] and fork.kernel_if_started is None
    assert ip.configurables.count(fork) == 1 and agent not in ip.configurables

    out, _, _ = run(ip, "%agent switch main-1")
    assert "on branch main-1 (4 steps)" in out and count_steps(ipyagent.current().context) == 4
    _, err, _ = run(ip, "%agent switch nowhere")
    assert "no branch 'nowhere'; the branches are main, main-1, alt" in err
    _, err, _ = run(ip, "%agent rewind 9")
    assert "UsageError: %agent rewind: there is no step 9: the conversation has 4\n" == err
    run(ip, "%agent switch main")
    assert ipyagent.current() is agent
