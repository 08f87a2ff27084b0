"""Done when: a note remembered in Monday's kernel is in Tuesday's request for a related
task (a new kernel, a real 127.0.0.1 server), shown collapsed in the cell, and not in the
request of an unrelated task."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipyagent.memory import BLOCK_LABEL, fts5_available
from tests.helpers.kernel_frontend import Frontend
from tests.helpers.memory import FACT, sent_text
from tests.helpers.scripted_server import ScriptedServer, reply_text

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not fts5_available(), reason="this SQLite has no FTS5")]


def setup(tmp_path: Path, extra: str = "") -> str:
    return ("c = get_ipython().config\n"
            "c.Agent.python_tool = False\n"  # no sibling kernel: this test is about memory
            "c.Agent.memory = 'on'\n"
            f"c.Agent.memory_global_path = {str(tmp_path / 'global.sqlite')!r}\n"
            "c.Agent.autosave = ''\n"
            "c.Agent.share_namespace = 'off'\n" + extra +
            "%load_ext ipyagent")


def test_monday_note_is_in_tuesday_request_and_cell(tmp_path: Path) -> None:
    monday = Frontend(cwd=str(tmp_path))
    try:
        cell = monday.run(setup(tmp_path))
        assert cell.reply["status"] == "ok", cell.text()
        cell = monday.run(f"%agent remember {FACT}")
        assert "remembered as note #1" in cell.text(), cell.text()
    finally:
        monday.close()
    assert (tmp_path / ".ipyagent" / "memory.sqlite").exists()  # beside the notebook

    with ScriptedServer(fallback=lambda body: reply_text("ok")) as srv:
        tuesday = Frontend(cwd=str(tmp_path))
        try:
            endpoint = (f"c.Agent.model = 'scripted'\nc.Agent.base_url = {srv.base_url!r}\n"
                        "c.Agent.approval = 'auto'\nc.Agent.memory_write = 'off'\n")
            cell = tuesday.run(setup(tmp_path, endpoint))
            assert cell.reply["status"] == "ok", cell.text()
            related = tuesday.run("%agent load the sales data and total it")
            assert related.reply["status"] == "ok", related.text()
            unrelated = tuesday.run("%agent --new what is the capital of France")
            assert unrelated.reply["status"] == "ok", unrelated.text()
        finally:
            tuesday.close()
        first, second = srv.bodies
    assert FACT in sent_text(first) and BLOCK_LABEL in sent_text(first)
    assert FACT not in sent_text(second)
    shown = [o["data"]["text/html"] for o in related.outputs
             if "ipyagent-memory" in o.get("data", {}).get("text/html", "")]
    assert len(shown) == 1 and shown[0].startswith("<details")  # collapsed
    assert "s3://acme/sales/2026/" in shown[0]
    assert not any("ipyagent-memory" in o.get("data", {}).get("text/html", "")
                   for o in unrelated.outputs)
