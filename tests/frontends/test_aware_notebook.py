"""A real notebook, executed by nbclient: the agent uses a variable defined in a cell above
(copied on its NameError), the user pulls its result, takes its code and asks for a fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls

pytestmark = pytest.mark.slow

CODE = "best = int(sales[sales[:, 1].argmax(), 0])\nprint('best month', best)"
FIX = "total = 10\nprint(total / 2)"


def text(cell: Any) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type == "error":
            parts.append("\n".join(out.traceback))
        else:
            data = out.get("data", {})
            parts.append(data.get("text/html") or data.get("text/markdown") or data.get("text/plain", ""))
    return "\n".join(parts)


def test_a_notebook_where_the_agent_uses_the_users_array_and_fixes_an_error(tmp_path: Path) -> None:
    replies = [reply_tool_calls([("python", {"code": CODE})]), reply_text("Month 3 sold most."),
               reply_tool_calls([("python", {"code": "sum(prices)"})]), reply_text("Not shared."),
               reply_text(f"Divide by 2:\n```python\n{FIX}\n```")]
    with ScriptedServer(replies) as srv:
        sources = [
            f"%load_ext ipyagent\n%config Agent.model = 'scripted'\n"
            f"%config Agent.base_url = '{srv.base_url}'\n%config Agent.autosave = ''\n"
            # The scripted "Not shared." answers a NameError without naming it: no answer
            # check here (tests/test_verify.py has its own), or it would take the next reply.
            "%config Agent.verify_answers = False",
            "import numpy as np\nsales = np.array([[1, 120.0], [2, 80.0], [3, 200.0]])",
            "%agent --approve auto which month sold most in sales?",
            "%agent pull best",
            "print('pulled', best)",
            "%agent code",
            "%config Agent.allow = ['python']\nprices = [1, 2]",
            "%agent --approve ask add up prices",
            "total = 10\nprint(total / 0)",
            "%agent fix",
        ]
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
        payloads: dict[int, list[dict[str, Any]]] = {}

        def on_executed(cell: Any, cell_index: int, execute_reply: Any) -> None:
            payloads[cell_index] = execute_reply["content"].get("payload", [])

        NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                       on_cell_executed=on_executed,
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
        requests = [r.body for r in srv.requests]
    cells = [text(c) for c in nb.cells]
    run = cells[2]
    # The model was told about sales (collapsed in the cell), used it, and it was copied.
    assert "<details><summary>the agent sees: sales" in run
    first = requests[0]["messages"]
    assert any("- sales: ndarray 3×2 float64" in m["content"] for m in first if m["role"] == "user")
    assert "best month 3" in run and "Month 3 sold most." in run
    tool = [m for m in requests[1]["messages"] if m["role"] == "tool"][0]["content"]
    assert tool.strip() == "best month 3"
    assert "best = int 3 (a copy from the agent's kernel)" in cells[3]
    assert "pulled 3" in cells[4]
    # code: the agent's code as a new cell, not run here.
    [offer] = payloads[5]
    assert offer["source"] == "set_next_input" and offer["text"] == CODE and offer["replace"] is False
    # ask, headless: the copy is refused and the model is told.
    told = [m for m in requests[3]["messages"] if m["role"] == "tool"][-1]["content"]
    assert "`prices` exists in the user's kernel but was not copied" in told
    # fix: the failing cell and its traceback reach the model; the fix comes as a new cell.
    asked = requests[4]["messages"][-1]["content"]
    assert "print(total / 0)" in asked and "ZeroDivisionError: division by zero" in asked
    [fix] = payloads[9]
    assert fix["source"] == "set_next_input" and fix["text"] == FIX
    assert "the proposed fix is in a new cell below" in cells[9]
