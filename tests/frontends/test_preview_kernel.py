"""In a real kernel: ``%agent`` with a task naming a file shows the preview collapsed on the
card (its line readable, its text escaped), the preview is in the request the 127.0.0.1
server got, and ``%agent context`` lists it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.kernel_frontend import Frontend
from tests.helpers.memory import sent_text
from tests.helpers.scripted_server import ScriptedServer, reply_text

pytestmark = [pytest.mark.slow]

LINE = "previewed sales.csv (2 rows, separator ';', columns region:str, amount:int)"


def test_the_card_shows_the_preview_collapsed_and_the_server_got_it(tmp_path: Path) -> None:
    (tmp_path / "sales.csv").write_text("region;amount\n<b>north</b>;10\nsouth;12\n")
    with ScriptedServer(fallback=lambda body: reply_text("The total is 22.")) as srv:
        frontend = Frontend(cwd=str(tmp_path))
        try:
            cell = frontend.run("c = get_ipython().config\nc.Agent.python_tool = False\n"
                                "c.Agent.autosave = ''\nc.Agent.share_namespace = 'off'\n"
                                f"c.Agent.model = 'scripted'\nc.Agent.base_url = {srv.base_url!r}\n"
                                "c.Agent.approval = 'auto'\n%load_ext ipyagent")
            assert cell.reply["status"] == "ok", cell.text()
            run = frontend.run("%agent What is the total amount in sales.csv?")
            assert run.reply["status"] == "ok", run.text()
            context = frontend.run("%agent context")
        finally:
            frontend.close()
        (first,) = srv.bodies
    assert LINE in sent_text(first) and "<b>north</b>;10" in sent_text(first)
    shown = [o["data"]["text/html"] for o in run.outputs
             if "ipyagent-preview" in o.get("data", {}).get("text/html", "")]
    assert len(shown) == 1 and shown[0].startswith("<details")  # collapsed
    assert LINE.replace("'", "&#x27;") in shown[0]
    assert "<b>north" not in shown[0] and "&lt;b&gt;north&lt;/b&gt;;10" in shown[0]
    assert "[ipyagent: previewed sales.csv" in context.text()
