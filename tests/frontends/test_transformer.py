"""The %agent input transformers: a top-level %agent cell becomes an awaited coroutine."""

from __future__ import annotations

import ast
from typing import Any

from ipyagent.frontends.transformer import await_agent_magics, protect_question_marks

AWAIT = "await __import__('ipyagent.frontends.magics').frontends.magics.agent_async"


def test_question_mark_protection() -> None:
    assert protect_question_marks(["%agent what is this?\n"]) == [
        "get_ipython().run_line_magic('agent', 'what is this?')\n"]
    for untouched in (["%agent?\n"], ["%agent??\n"], ["%%agent\n", "%agent x?\n"],
                      ["x = 1\n"], ["%agent compute it\n"]):
        assert protect_question_marks(untouched) == untouched


def test_top_level_agent_magics_become_awaits(ip: Any) -> None:
    cell = ip.input_transformer_manager.transform_cell(
        "x = 1\n%agent compute 2**10\nif x:\n    %agent indented\ns = '''\n%agent in a string\n'''\n")
    lines = await_agent_magics(cell.splitlines(keepends=True))
    assert lines[1] == "await __import__('ipyagent.frontends.magics').frontends.magics.agent_async('compute 2**10')\n"
    assert lines[3] == "    await __import__('ipyagent.frontends.magics').frontends.magics.agent_async('indented')\n"
    assert "%agent in a string" in "".join(lines)
    # ``await`` is not legal inside a def: that one stays a blocking call.
    cell = ip.input_transformer_manager.transform_cell(
        "def f():\n    %agent inside\n%agent outside\n")
    lines = await_agent_magics(cell.splitlines(keepends=True))
    assert "run_line_magic('agent', 'inside')" in lines[1]
    assert lines[2] == "await __import__('ipyagent.frontends.magics').frontends.magics.agent_async('outside')\n"
    cell = ip.input_transformer_manager.transform_cell("%%agent --new\nLoad it.\nPlot it.\n")
    assert await_agent_magics(cell.splitlines(keepends=True)) == [
        "await __import__('ipyagent.frontends.magics').frontends.magics.agent_async('--new', 'Load it.\\nPlot it.\\n')\n"]


def test_question_marks_keep_the_line_end_and_quote_the_task() -> None:
    assert protect_question_marks(["%agent is it 'fine'?"]) == [
        "get_ipython().run_line_magic('agent', \"is it 'fine'?\")"]
    assert protect_question_marks([]) == []


def test_calls_that_are_not_plain_string_magics_stay_as_they_are() -> None:
    for line in ("get_ipython().run_line_magic('agent', task)\n",  # a variable, not a literal
                 "get_ipython().run_line_magic('agent', 'a', 'b')\n",  # a line magic takes one
                 "get_ipython().run_cell_magic('agent', 'x')\n",  # a cell magic takes two
                 "get_ipython().run_line_magic('time', 'x')\n"):  # another magic
        assert await_agent_magics([line]) == [line]


def test_the_rewritten_cell_compiles_as_top_level_await() -> None:
    lines = await_agent_magics(["for i in range(2):\n", "    get_ipython().run_line_magic('agent', 'go')\n"])
    assert lines[1] == f"    {AWAIT}('go')\n"
    compile("".join(lines), "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
