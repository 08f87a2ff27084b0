"""Every flow the docs describe, with the demo model and no key (issue 30, item 7).

A real user kernel driven as JupyterLab drives it (``kernel_frontend.Frontend``) and the
real sibling kernel: the namespace picture and a NameError met in the sibling (the copy
is offered and the call runs again), ``%agent fix`` (the fixed cell comes back as a new
cell, checked in the sibling, never run here), an offer (``offer_result``: the value
arrives only by the click), a file change (``write_file``) and memory (``remember``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ipyagent.memory import fts5_available
from tests.helpers.kernel_frontend import Cell, Frontend

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fe(tmp_path_factory: pytest.TempPathFactory):
    cwd = tmp_path_factory.mktemp("flows")
    frontend = Frontend(cwd=str(cwd))
    frontend.cwd = cwd  # type: ignore[attr-defined]
    loaded = frontend.run("c = get_ipython().config\n"
                          f"c.Agent.memory_global_path = {str(cwd / 'global.sqlite')!r}\n"
                          "c.Agent.autosave = ''\n"
                          "del c\n%load_ext ipyagent\n%config Agent.approval = 'auto'")
    assert loaded.reply["status"] == "ok", loaded.text()
    yield frontend
    frontend.close()


def done(fe: Frontend, cell: Cell, timeout: float = 90) -> str:
    fe.pump_until(lambda: cell.done, timeout)
    assert cell.reply is not None and cell.reply["status"] == "ok", cell.text()
    return cell.text()


def test_the_namespace_picture_and_a_name_error_met_in_the_sibling(fe: Frontend) -> None:
    assert fe.run("sales = {'jan': 3, 'feb': 5, 'mar': 8}").reply["status"] == "ok"
    text = done(fe, fe.execute("%agent --new summarise sales"))
    assert "the agent sees: sales" in text  # the picture, shown in the cell
    assert "copied `sales` (dict of 3" in text  # the NameError in the sibling: a copy, recorded
    assert "I used your `sales` (copied from your kernel when my code needed it)" in text
    assert "dict 3" in text and "['jan', 'feb', 'mar']" in text  # what the sibling printed


def test_agent_fix_proposes_a_checked_cell_and_runs_nothing_here(fe: Frontend) -> None:
    assert fe.run("prices = [3, 4, 5]").reply["status"] == "ok"
    failing = fe.run("mean = sum(prices) / len(prics)\nprint(mean)")
    assert failing.reply["status"] == "error"
    cell = fe.execute("%agent --new fix")
    text = done(fe, cell)
    assert "`prics` is not defined, `prices` is: a typo" in text
    assert "Checked in the sibling kernel, it runs and prints" in text and "4.0" in text
    payloads = [p for p in cell.reply.get("payload", []) if p.get("source") == "set_next_input"]
    assert [p["text"] for p in payloads] == ["mean = sum(prices) / len(prices)\nprint(mean)"]
    assert fe.run("print('mean' in globals())").text().strip() == "False"  # nothing ran here
    # The README's example: no certain fix, and the answer says so.
    assert fe.run("1/0").reply["status"] == "error"
    cell = fe.execute("%agent --new fix")
    text = done(fe, cell)
    assert "I know no certain fix for this ZeroDivisionError" in text
    [payload] = [p for p in cell.reply.get("payload", []) if p.get("source") == "set_next_input"]
    assert payload["text"].startswith("try:\n    1/0\nexcept ZeroDivisionError as exc:")


def test_an_offered_result_arrives_only_by_the_click(fe: Frontend) -> None:
    assert fe.run("print('value' in globals())").text().strip() == "False"
    cell = fe.execute("%agent --new Use Python to compute 2**100 and offer me the result")
    try:
        take = fe.wait_for_button("Take value into my kernel", timeout=90)
    except TimeoutError:
        raise AssertionError(cell.text()) from None
    fe.click(take)
    text = done(fe, cell)
    assert "The offer: The user took a copy of `value` into their kernel" in text
    assert fe.run("print(value == 2**100)").text().strip() == "True"


def test_a_file_the_task_asks_for_is_written_with_write_file(fe: Frontend) -> None:
    target = Path(fe.cwd) / "result.txt"  # type: ignore[attr-defined]
    text = done(fe, fe.execute("%agent --new Use Python to compute 2**100 and save the result to result.txt"))
    assert "write_file" in text and "The file: created result.txt" in text
    assert target.read_text() == "value = 1267650600228229401496703205376\ndigits: 31\n"


@pytest.mark.skipif(not fts5_available(), reason="this SQLite has no FTS5")
def test_remember_keeps_a_note_with_the_tool(fe: Frontend) -> None:
    fact = "the sales data is in s3://acme/sales/2026/ and uses ; as delimiter"
    off = done(fe, fe.execute(f"%agent --new Please remember that {fact}"))
    assert "I have no memory tool here" in off and "%config Agent.memory = 'on'" in off
    assert fe.run("%config Agent.memory = 'on'").reply["status"] == "ok"
    text = done(fe, fe.execute(f"%agent --new Please remember that {fact}"))
    assert "remember" in text and "Noted (remembered as note #" in text
    listed = fe.run("%agent memory").text()
    assert "s3://acme/sales/2026/" in listed
