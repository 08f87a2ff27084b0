"""Issue 31 in a real browser: "rewind to here" on a step of a run in JupyterLab.

JupyterLab on 127.0.0.1 (random port and token) over a notebook whose ``%agent`` talks to
a scripted OpenAI-compatible server; headless Chromium (Playwright) runs it, clicks the
second step's "⟲ rewind to here", reads the question (what is dropped and undone), cancels,
asks again, rewinds, then checks in new cells what a person would: the files in the folder
and the variables in the agent's kernel.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser import (
    add_cell_below,
    expect,
    load_extension,
    open_notebook,
    output_text,
    outputs,
    run_cell,
    run_code,
    shot,
    wait_idle,
    wait_text,
)
from tests.helpers.jupyter_server_helper import JupyterServer
from tests.helpers.labs import scripted_lab

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def rewind_lab(tmp_path: Path) -> Iterator[JupyterServer]:
    """JupyterLab over a notebook whose %agent makes a file at each of three steps."""
    from tests.helpers.scripted_server import reply_text, reply_tool_calls

    replies = [reply_tool_calls([("python", {"code": f"v{i} = {i}\nopen('e{i}.txt', 'w').write('{i}')\n"
                                                     f"print('made e{i}')"}, f"e{i}")])
               for i in (1, 2, 3)] + [reply_text("Made three files.")]
    with scripted_lab(tmp_path, replies, "make three files", "rewind.ipynb",
                      "%config Agent.approval = 'auto'", "%config Agent.autosave = ''") as (srv, _, _path):
        yield srv


def test_rewind_to_here_asks_then_goes_back(browser: Any, rewind_lab: JupyterServer) -> None:
    with open_notebook(browser, rewind_lab, "rewind.ipynb", "rewind") as page:
        load_extension(page)
        cell = run_code(page, "%agent make three files")
        wait_text(cell, "Made three files.")
        wait_idle(cell)
        boxes = outputs(cell).locator(".ipyagent-rewind-box")
        expect(boxes).to_have_count(4)  # one under each step, the answer's too
        second = boxes.nth(1)
        rewind = second.locator("button.ipyagent-rewind")

        # Step 2's button asks first: what goes, what is put back; nothing has changed.
        rewind.click()
        plan = second.locator(".ipyagent-rewind-plan")
        expect(plan).to_be_visible()
        text = plan.inner_text()
        assert "Rewind to step 2: drop steps 3–4" in text, text
        assert "Undo in your folder: e3.txt" in text, text
        assert "re-runs the 2 kept python calls" in text, text
        second.locator("button.jupyter-button", has_text="Cancel").click()
        status = second.locator(".ipyagent-rewind-status")
        expect(status).to_contain_text("Not rewound.")
        check = add_cell_below(page, cell, "import os; print(sorted(f for f in os.listdir() "
                                           "if f.endswith('.txt')))")
        run_cell(check)
        wait_text(check, "['e1.txt', 'e2.txt', 'e3.txt']")  # cancelled: all still there

        # Again, and Rewind this time.
        rewind.click()
        expect(plan).to_be_visible()
        shot(cell, "rewind-question.png")
        second.locator("button.jupyter-button", has_text=re.compile(r"^\s*Rewind\s*$")).click()
        expect(status).to_contain_text("rewound to step 2: dropped 2 steps, kept as branch 'main-1'")
        expect(status).to_contain_text("put back in your folder: e3.txt")
        expect(status).to_contain_text("re-ran 2 python calls")
        shot(cell, "rewind-done.png")
        run_cell(check)
        wait_text(check, "['e1.txt', 'e2.txt']")
        kernel = add_cell_below(page, check, "import ipyagent; a = ipyagent.current(); "
                                             "print(a.kernel.execute(\"print('v3' in globals(), "
                                             "v1 + v2)\").text, len(a.branches))")
        run_cell(kernel)
        wait_text(kernel, "False 3")  # steps 1-2's variables, none of step 3's
        assert output_text(kernel).strip().endswith("2"), output_text(kernel)
