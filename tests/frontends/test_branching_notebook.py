"""``%agent rewind N`` in a real notebook executed by nbclient: the awaiting cell re-runs the
kept calls (a progress bar), shows the report, and the next cells see the folder, the kernel
and the branches as they now are."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.frontends.test_aware_notebook import text
from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls

pytestmark = pytest.mark.slow


def test_rewind_fork_and_switch_in_a_notebook(tmp_path: Path) -> None:
    replies = [reply_tool_calls([("python", {"code": f"n{i} = {i}\nopen('n{i}.txt', 'w').write('{i}')"})])
               for i in (1, 2, 3)] + [reply_text("Three."),
                                      reply_tool_calls([("python", {"code": "print(n1 + n2, 'n3' in globals())"})]),
                                      reply_text("Three again.")]
    with ScriptedServer(replies) as srv:
        sources = [
            f"%load_ext ipyagent\n%config Agent.model = 'scripted'\n"
            f"%config Agent.base_url = '{srv.base_url}'\n%config Agent.autosave = ''\n"
            "%config Agent.approval = 'auto'",
            "%agent make three files",
            "%agent rewind 2",
            "import os; print(sorted(f for f in os.listdir() if f.endswith('.txt')))",
            "%agent add n1 and n2",
            "%agent branches",
            "%agent context",
        ]
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
        NotebookClient(nb, timeout=180, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
    cells = [text(c) for c in nb.cells]
    assert "rewound to step 2: dropped 2 steps, kept as branch &#x27;main-1&#x27;" in cells[2]
    assert "put back in your folder: n3.txt" in cells[2]
    widgets = [o for o in nb.cells[2].outputs if "application/vnd.jupyter.widget-view+json"
               in o.get("data", {})]
    assert widgets, "no progress bar"
    assert "['n1.txt', 'n2.txt']" in cells[3]
    assert "3 False" in cells[4]  # steps 1-2's variables in the rebuilt kernel, not step 3's
    assert "main-1" in cells[5] and "Three." in cells[5]
    assert cells[6].count("class='ipyagent-step'") == 4  # steps 1-2, then the new 3-4
