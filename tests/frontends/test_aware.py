"""The agent sees the notebook (terminal IPython, in process): the namespace picture,
push/pull, --with, --cells, code and fix — against a scripted HTTP model and a real sibling."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from typing import Any, Iterator

import pytest

import ipyagent
from ipyagent.context.items import Message, ToolResult
from ipyagent.transcripts.transcript import read
from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls


@pytest.fixture
def loaded(ip: Any) -> Iterator[Any]:
    with redirect_stdout(io.StringIO()):
        ip.run_line_magic("load_ext", "ipyagent")
    ip.run_line_magic("config", "Agent.approval = 'auto'")
    ipyagent.current().autosave = ""
    before = set(ip.user_ns)
    yield ip
    for name in set(ip.user_ns) - before:  # the shell is shared: leave no variables behind
        del ip.user_ns[name]
    ip.run_line_magic("unload_ext", "ipyagent")
    ip.config.pop("Agent", None)


def run(ip: Any, cell: str, history: bool = False) -> tuple[str, str, Any]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        result = ip.run_cell(cell, store_history=history)
    return out.getvalue(), err.getvalue(), result


def scripted(ip: Any, srv: ScriptedServer) -> None:
    ip.run_line_magic("config", "Agent.model = 'scripted'")
    ip.run_line_magic("config", f"Agent.base_url = '{srv.base_url}'")


def user_texts(srv: ScriptedServer, i: int) -> list[str]:
    return [m["content"] for m in srv.requests[i].body["messages"] if m["role"] == "user"]


def test_the_model_is_told_the_namespace_secrets_left_out_and_it_is_recorded(
        loaded: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VENDOR_TOKEN", "vt-1234567890abcdef")
    with ScriptedServer([reply_text("Seen."), reply_text("Again.")]) as srv:
        scripted(loaded, srv)
        run(loaded, "import numpy as np\nprices = np.arange(6.0)\nOPENAI_API_KEY = 'sk-x'\n"
                    "pasted = 'vt-1234567890abcdef'\nlabel = 'sales'")
        out, err, result = run(loaded, "%agent --new what do I have?")
        assert result.success, err
        assert "the agent sees: " in err and "prices" in err and "sk-x" not in err
        picture, task = user_texts(srv, 0)
        assert task == "what do I have?"
        assert "- prices: ndarray 6 float64" in picture and "- label: str 'sales'" in picture
        # Secret-looking names and values: the name and type stay, the value never leaves.
        assert "- OPENAI_API_KEY: str (value hidden: its name looks secret)" in picture
        assert "- pasted: str (value hidden: it holds the value of $VENDOR_TOKEN)" in picture
        assert "sk-x" not in picture and "vt-1234567890abcdef" not in picture and "np:" not in picture
        # The same namespace again: not repeated.
        out, err, result = run(loaded, "%agent and now?")
        assert result.success, err
        assert "the agent sees" not in err
        assert sum("notebook has these variables" in t for t in user_texts(srv, 1)) == 1
        path = ipyagent.current().save(tmp_path / "run.ipynb")
    saved = [i for i in read(path).items if isinstance(i, Message) and "namespace" in i.meta]
    assert saved and "prices" in saved[0].meta["namespace"]["names"]


def test_share_namespace_off_and_names(loaded: Any) -> None:
    with ScriptedServer([reply_text("a"), reply_text("b")]) as srv:
        scripted(loaded, srv)
        run(loaded, "import numpy as np\nprices = np.arange(6.0)")
        loaded.run_line_magic("config", "Agent.share_namespace = 'off'")
        run(loaded, "%agent --new hi")
        assert user_texts(srv, 0) == ["hi"]
        loaded.run_line_magic("config", "Agent.share_namespace = 'names'")
        run(loaded, "%agent --new hi")
        assert "- prices\n" in user_texts(srv, 1)[0] + "\n" and "ndarray" not in user_texts(srv, 1)[0]


def test_push_pull_round_trip_and_with(loaded: Any) -> None:
    with ScriptedServer([reply_tool_calls([("python", {"code": "fit = prices * 2\nfit.sum()"})]),
                         reply_text("Doubled.")]) as srv:
        scripted(loaded, srv)
        run(loaded, "import numpy as np\nprices = np.arange(6.0)")
        out, err, result = run(loaded, "%agent --new --with prices double prices")
        assert result.success, err
        assert "copied prices (ndarray 6 float64" in err
        assert "np.float64(30.0)" in out  # the model's code found prices in the sibling
        out, err, result = run(loaded, "%agent pull fit as doubled")
        assert result.success, err
        assert "doubled = ndarray 6 float64" in out
        assert list(loaded.user_ns["doubled"]) == [0, 2, 4, 6, 8, 10]
        assert "fit" not in loaded.user_ns  # only the name asked for
        loaded.user_ns["extra"] = {"a": 1}
        out, err, result = run(loaded, "%agent push extra")
        assert result.success, err
        assert ipyagent.current().kernel.pull("extra") == {"a": 1}
    copies = [i.meta["copy"] for i in ipyagent.current().context if "copy" in i.meta]
    assert [(c["direction"], c["name"]) for c in copies] == [
        ("push", "prices"), ("pull", "fit"), ("push", "extra")]
    assert len(copies[0]["sha256"]) == 64 and "payload" in copies[0]


def test_push_says_what_is_missing_or_unpicklable(loaded: Any) -> None:
    out, err, result = run(loaded, "%agent push nothing_here")
    assert "not defined in your kernel: nothing_here" in err + str(result.error_in_exec)
    run(loaded, "gen = (i for i in range(3))")
    out, err, result = run(loaded, "%agent push gen")
    message = err + str(result.error_in_exec)
    assert "cannot push 'gen'" in message and "not picklable" in message


def test_code_prints_the_last_or_nth_python_call(loaded: Any) -> None:
    with ScriptedServer([reply_tool_calls([("python", {"code": "a = 1"})]),
                         reply_tool_calls([("python", {"code": "b = 2"})]), reply_text("ok")]) as srv:
        scripted(loaded, srv)
        run(loaded, "%agent --new two calls")
        out, _, _ = run(loaded, "%agent code")
        assert out.rstrip().endswith("b = 2") and "not run" in out
        out, _, _ = run(loaded, "%agent code 1")
        assert out.rstrip().endswith("a = 1")
        _, err, result = run(loaded, "%agent code 7")
        assert "there are 2 python calls" in err + str(result.error_in_exec)


def test_fix_sends_the_failing_cell_and_its_traceback_and_offers_the_fix(loaded: Any) -> None:
    fixed = "total = sum([1, 2])\nprint(total / 2)"
    with ScriptedServer([reply_text(f"Divide by 2, not 0:\n```python\n{fixed}\n```")]) as srv:
        scripted(loaded, srv)
        run(loaded, "total = sum([1, 2])\nprint(total / 0)")
        out, err, result = run(loaded, "%agent --new fix")
        assert result.success, err
        task = user_texts(srv, 0)[-1]
        assert task.startswith("Explain and fix this error.")
        assert "print(total / 0)" in task and "ZeroDivisionError: division by zero" in task
        assert "\x1b[" not in task and "interactiveshell" not in task
        assert out.rstrip().endswith(fixed) and "the proposed fix (not run)" in out
        assert "total" in loaded.user_ns and loaded.user_ns.get("_fixed") is None


def test_cells_above_are_added_on_request(loaded: Any) -> None:
    with ScriptedServer([reply_text("ok")]) as srv:
        scripted(loaded, srv)
        run(loaded, "first_value = 11", history=True)
        run(loaded, "first_value * 3", history=True)
        out, err, result = run(loaded, "%agent --new --cells 2 what did I do?", history=True)
        assert result.success, err
        task = user_texts(srv, 0)[-1]
        assert task.startswith("what did I do?")
        assert "first_value = 11" in task and "first_value * 3" in task and "33" in task


def test_a_name_error_for_a_user_variable_copies_it_under_auto_and_runs_again(loaded: Any) -> None:
    with ScriptedServer([reply_tool_calls([("python", {"code": "print(revenue * 3)"})]),
                         reply_text("Tripled.")]) as srv:
        scripted(loaded, srv)
        run(loaded, "revenue = 14")
        out, err, result = run(loaded, "%agent --new triple revenue")
        assert result.success, err
        assert "42" in out and "copied `revenue` (int 14" in out + err
        [tool] = [m for m in srv.requests[1].body["messages"] if m["role"] == "tool"]
        assert tool["content"].strip() == "42"  # the model sees the call that worked
    [res] = [i for i in ipyagent.current().context if isinstance(i, ToolResult)]
    [copy] = res.meta["copies"]
    assert copy["name"] == "revenue" and copy["copied"] and len(copy["sha256"]) == 64


def test_a_copy_asked_and_refused_tells_the_model_the_value_was_not_shared(loaded: Any) -> None:
    # ask: nobody at this (non-tty) terminal can answer, so the call is denied first;
    # allowing python leaves only the copy to ask about, and it is refused.
    loaded.run_line_magic("config", "Agent.approval = 'ask'")
    loaded.run_line_magic("config", "Agent.allow = ['python']")
    try:
        with ScriptedServer([reply_tool_calls([("python", {"code": "print(revenue * 3)"})]),
                             reply_text("I cannot see it.")]) as srv:
            scripted(loaded, srv)
            run(loaded, "revenue = 14")
            ipyagent.current().reset(kernel=True)  # a sibling where revenue was never copied
            out, err, result = run(loaded, "%agent --new triple revenue")
            assert result.success, err
            assert "copy `revenue` (int 14" in out + err
            [tool] = [m for m in srv.requests[1].body["messages"] if m["role"] == "tool"]
            assert "NameError" in tool["content"]
            assert "`revenue` exists in the user's kernel but was not copied" in tool["content"]
    finally:
        loaded.run_line_magic("config", "Agent.approval = 'auto'")
        loaded.run_line_magic("config", "Agent.allow = []")


def test_over_copy_limit_auto_asks_and_secret_names_are_never_offered(loaded: Any) -> None:
    loaded.run_line_magic("config", "Agent.copy_limit = '1KB'")
    try:
        with ScriptedServer([reply_tool_calls([("python", {"code": "len(big_list)"})]),
                             reply_tool_calls([("python", {"code": "len(DB_PASSWORD)"})]),
                             reply_text("ok")]) as srv:
            scripted(loaded, srv)
            ipyagent.current().reset(kernel=True)
            run(loaded, "big_list = list(range(5000))\nDB_PASSWORD = 'hunter2hunter2'")
            out, err, result = run(loaded, "%agent --new count")
            assert result.success, err
            tools = [m["content"] for m in srv.requests[2].body["messages"] if m["role"] == "tool"]
            assert "`big_list` exists in the user's kernel but was not copied" in tools[0]
            assert "NameError" in tools[1] and "exists in the user's kernel" not in tools[1]
    finally:
        loaded.run_line_magic("config", "Agent.copy_limit = '50MB'")


def test_braces_expand_in_agent_cells_as_in_lines(loaded: Any) -> None:
    with ScriptedServer([reply_text("a"), reply_text("b")]) as srv:
        scripted(loaded, srv)
        loaded.user_ns["city"] = "Lyon"
        loaded.run_line_magic("config", "Agent.share_namespace = 'off'")
        try:
            run(loaded, "%agent --new weather in {city}")
            run(loaded, "%%agent --new\nweather in {city}, as {{json}}")
        finally:
            loaded.run_line_magic("config", "Agent.share_namespace = 'describe'")
        assert user_texts(srv, 0) == ["weather in Lyon"]
        assert user_texts(srv, 1) == ["weather in Lyon, as {json}"]


def test_secret_looking_variables_are_never_pushed(loaded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VENDOR_TOKEN", "vt-1234567890abcdef")
    run(loaded, "db_password = 'hunter2hunter2'\nplain = 'vt-1234567890abcdef'")
    for name, says in (("db_password", "its name (db_password) looks secret"),
                       ("plain", "plain holds the value of $VENDOR_TOKEN")):
        _, err, result = run(loaded, f"%agent push {name}")
        assert says in err + str(result.error_in_exec)
        assert "hunter2" not in err + str(result.error_in_exec)
    assert not any("copy" in i.meta for i in ipyagent.current().context)


def test_a_changed_namespace_is_told_again_between_steps(loaded: Any) -> None:
    with ScriptedServer([reply_tool_calls([("python", {"code": "1 + 1"})]), reply_text("done")]) as srv:
        scripted(loaded, srv)
        run(loaded, "alpha = 1")
        run(loaded, "%agent --new --step go")
        run(loaded, "import ipyagent\nbeta = [1, 2]\nipyagent.current().context.add_user('and beta?')")
        out, err, result = run(loaded, "%agent step")
        assert result.success, err
        told = [t for t in user_texts(srv, 1) if "notebook has these variables" in t]
        assert len(told) == 2 and "- beta: list of 2" in told[1] and "beta" not in told[0]
        assert user_texts(srv, 1)[-1] == "and beta?"  # the user's message stays last


def test_no_namespace_picture_slips_in_before_ipyagents_answer_check(loaded: Any) -> None:
    # The answer check (engine/verify) ends the context with a user-role message of ours: a
    # `%agent step` after it is no new user message, so nothing is inserted before it.
    with ScriptedServer([reply_tool_calls([("python", {"code": "1 / 0"})]), reply_text("It is 5."),
                         reply_text("It failed: division by zero.")]) as srv:
        scripted(loaded, srv)
        run(loaded, "alpha = 1")
        run(loaded, "%agent --new --step go")
        out, err, result = run(loaded, "%agent step")
        assert result.success, err
        assert "checked the answer: the last output was an error (ZeroDivisionError)" in out + err
        run(loaded, "gamma = 3")
        out, err, result = run(loaded, "%agent step")
        assert result.success, err
        told = user_texts(srv, 2)
        assert told[-1].startswith("Note from ipyagent (an automatic check of your answer")
        assert not any("gamma" in t for t in told)
