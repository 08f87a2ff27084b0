"""offer_result and "code → new cell" in a real ipykernel driven as JupyterLab drives it.

The frontend sends the comm messages a browser sends for a click; the user's kernel gets
the offered value only after the click on "Take … into my kernel", and each python card
carries the button whose code is the call's (the insertion itself is the browser's: see
tests/test_e2e_browser.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.kernel_frontend import Cell, Frontend
from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls

pytestmark = pytest.mark.slow

FIT_CODE = "fit = {'slope': 2.5, 'n': 12}\nprint('fitted')"


@pytest.fixture(scope="module")
def fe(tmp_path_factory: pytest.TempPathFactory):
    frontend = Frontend(cwd=str(tmp_path_factory.mktemp("offer")))
    loaded = frontend.run("%load_ext ipyagent\nimport ipyagent\n"
                          "%config Agent.share_namespace = 'off'\n"
                          "%config Agent.approval = 'auto'")
    assert loaded.reply["status"] == "ok", loaded.text()
    yield frontend
    frontend.close()


def execute_in_cell(fe: Frontend, code: str, cell_id: str) -> Cell:
    """An execute_request carrying JupyterLab's ``cellId`` metadata."""
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
               "allow_stdin": True, "stop_on_error": False}
    msg = fe.kc.session.msg("execute_request", content, metadata={"cellId": cell_id})
    fe.kc.shell_channel.send(msg)
    cell = Cell(msg["header"]["msg_id"])
    fe.cells[cell.msg_id] = cell
    return cell


def scripted(fe: Frontend, srv: ScriptedServer) -> None:
    cell = fe.run(f"%config Agent.model = 'scripted'\n%config Agent.base_url = '{srv.base_url}'\n"
                  "%agent reset")
    assert cell.reply["status"] == "ok", cell.text()


def code_buttons(fe: Frontend) -> list[dict[str, Any]]:
    return [s for s in fe.widgets.values() if "cell_id" in s and "code" in s]


def user_value(fe: Frontend, expr: str) -> str:
    cell = fe.run(f"print(repr({expr}))")
    return cell.text().strip()


def test_an_offer_enters_the_users_kernel_only_by_the_click(fe: Frontend) -> None:
    offer = ("offer_result", {"name": "fit", "description": "<script>x()</script> the trend"})
    with ScriptedServer([reply_tool_calls([("python", {"code": FIT_CODE}), offer]),
                         reply_text("It is yours.")]) as srv:
        scripted(fe, srv)
        fe.run("fit = 'mine'")
        cell = execute_in_cell(fe, "%agent fit a trend", "cell-42")
        take = fe.wait_for_button("Take fit into my kernel")
        fe.pump_for(1.0)
        assert not cell.done  # the run waits for the answer
        texts = [s.get("value", "") for s in fe.widgets.values() if s.get("_model_name") == "HTMLModel"]
        offer_text = next(t for t in texts if "The agent offers" in t)
        assert "&lt;script&gt;" in offer_text and "<script" not in offer_text
        assert "replaces your `fit` (str &#x27;mine&#x27;)" in offer_text
        fe.click(take)
        fe.pump_until(lambda: cell.done, 60)
        assert cell.reply["status"] == "ok", cell.text()
        [tool] = [m for m in srv.requests[1].body["messages"]
                  if m["role"] == "tool" and "took a copy" in m["content"]]
        assert "mine" not in tool["content"]
    assert user_value(fe, "fit") == "{'slope': 2.5, 'n': 12}"
    # The python card has its "code → new cell" button, bound to this cell, with the code that ran.
    [button] = [b for b in code_buttons(fe) if b["cell_id"] == "cell-42"]
    assert button["code"] == FIT_CODE and "new cell" in button["label"]


def test_no_thanks_leaves_the_kernel_as_it_was(fe: Frontend) -> None:
    offer = ("offer_result", {"name": "model_fit", "description": "a fit"})
    with ScriptedServer([reply_tool_calls([("python", {"code": "model_fit = 3"}), offer]),
                         reply_text("Fine.")]) as srv:
        scripted(fe, srv)
        cell = fe.execute("%agent fit")
        fe.wait_for_button("Take model_fit into my kernel")
        fe.click(fe.wait_for_button("No thanks"))
        fe.pump_until(lambda: cell.done, 60)
        assert cell.reply["status"] == "ok", cell.text()
        tool = [m["content"] for m in srv.requests[1].body["messages"] if m["role"] == "tool"][-1]
        assert "did not take `model_fit`" in tool
    assert "NameError" in fe.run("model_fit").text()
