"""The quickstart in a real browser: a person sees the approval card and the clicks work.

JupyterLab (and Jupyter Notebook 7) on 127.0.0.1 with a random port and token, serving a
temporary copy of ``notebooks/quickstart.ipynb``; headless Chromium (Debian's, driven by
Playwright from PyPI) runs the ``%agent`` cell with approval ``ask`` on the demo model,
checks the card shows the code while nothing has run, clicks **Approve**, checks the tool
output and the answer; then runs a second task, clicks **Deny** with a reason, checks the
model was told and the cell says so. Every check reads the text a person would see.
Screenshots go to ``artifacts/e2e/``.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser import (
    ARTIFACTS,
    REPO,
    add_cell_below,
    button,
    expect,
    load_extension,
    open_notebook,
    output_text,
    outputs,
    prompt,
    run_cell,
    run_code,
    shot,
    wait_idle,
    wait_text,
)
from tests.helpers.jupyter_server_helper import JupyterServer
from tests.helpers.labs import jupyter_server, scripted_lab

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

BIG = "1267650600228229401496703205376"  # 2**100


@pytest.fixture(params=["lab", "notebook"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JupyterServer]:
    """A Jupyter server over a temporary copy of the quickstart; no kernel outlives it."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(REPO / "notebooks" / "quickstart.ipynb", root)
    with jupyter_server(tmp_path, root, request.param) as srv:
        yield srv


# -- the test ----------------------------------------------------------------------------
def test_quickstart_approve_then_deny_in_browser(browser: Any, server: JupyterServer) -> None:
    app = server.app
    dialogs: list[str] = []
    with open_notebook(browser, server, "quickstart.ipynb", app, dialogs) as page:
        # 0. The extension loads and says: demo model, calls need approval.
        load = load_extension(page)
        banner = output_text(load)
        assert "model demo" in banner and "approval ask" in banner, banner

        # 1. The quickstart's own %agent cell (approval ask, demo model).
        cell = run_code(page, "%agent Use Python to compute 2**100")

        # 2. The card shows the code and the buttons; nothing has run; the cell is busy.
        approve = button(cell, "Approve")
        expect(approve).to_be_visible()
        for label in ("Deny", "Edit", "Always"):
            expect(button(cell, label)).to_be_visible()
        card = cell.locator(".ipyagent-card").last
        expect(card).to_contain_text("waiting for approval")
        code = card.locator("pre").inner_text()
        assert "value = 2**100" in code and "print(f'digits: {len(value)}')" in code, code
        page.wait_for_timeout(1000)  # give a wrongly unattended run the chance to show itself
        text = output_text(cell)
        assert text.count("waiting for") == 1, text  # the card's header says it, once
        assert BIG not in text, "the code ran before anyone clicked"
        expect(prompt(cell)).to_have_text("[*]:")
        shot(cell, "waiting.png", app)

        # 3. Approve. The demo model's first try fails on purpose; approve its fix too.
        approve.click()
        wait_text(cell, "value = " + BIG)  # the approved code ran in the sibling kernel
        expect(cell.locator(".ipyagent-card")).to_have_count(2)  # the model's fix
        button(cell, "Approve").click()
        wait_text(cell, "✓ done")
        wait_idle(cell)
        text = output_text(cell)
        assert "digits: 31" in text, text  # the fixed call's output
        assert "I evaluated 2**100 in Python. The sibling kernel printed:" in text, text
        assert "(This answer was produced by the built-in demo model, not an LLM.)" in text
        assert text.count("approved by you") == 2, text  # in each card's header
        expect(button(cell, "Approve")).to_have_count(0)  # decided: every button disabled
        shot(cell, "approve.png", app)

        # 4. A second task in a new cell; deny it with a reason.
        denied = add_cell_below(page, cell, "%agent Use Python to compute 3**5")
        run_cell(denied)
        expect(button(denied, "Deny")).to_be_visible()
        code = denied.locator(".ipyagent-card").last.locator("pre").inner_text()
        assert "value = 3**5" in code, code
        outputs(denied).locator("input[type='text']").fill("use pen and paper")
        button(denied, "Deny").click()
        wait_text(denied, "not approved (use pen and paper)")  # the model was told
        wait_idle(denied)
        text = output_text(denied)
        assert "✗ denied by you: use pen and paper" in text, text  # the card says so
        assert ("Understood: the call was not approved (use pen and paper), so I did not "
                "run anything.") in text, text
        assert "value = 243" not in text and "digits: 3" not in text, "a denied call ran"
        expect(button(denied, "Approve")).to_have_count(0)
        shot(denied, "deny.png", app)
        if dialogs:
            warnings.warn(f"jupyter {app} asked, answered with the default: {dialogs}",
                          pytest.PytestWarning, stacklevel=1)


# -- a hostile reply ---------------------------------------------------------------------
# If it ever rendered as live HTML, this would mark the page and keep clicking Approve.
CLICKER = ("window.__pwned=1;setInterval(function(){document.querySelectorAll('button')"
           ".forEach(function(b){if(b.textContent.trim()==='Approve'){b.click()}})},100)")
HOSTILE = (
    "Here is **the bold answer**, with `a < b` in code and a < b in prose.\n\n"
    f"<img src=x onerror=\"{CLICKER}\">\n\n"
    f"- a list item\n\n  ```\n<img src=y onerror=\"{CLICKER}\">\n  ```\n\n"
    f"www.example.com/`<img src=z onerror=\"{CLICKER}\">`\n\n"
    "[click me](javascript:window.__pwned=2) and <details open ontoggle=\"window.__pwned=3\">\n\n"
    # JupyterLab cuts math out before marked runs: the cut took the fence's opening line.
    f"$x\n ```\n$ <img src=m onerror=\"{CLICKER}\">\n ```\n\n"
    # marked took the fence line for the definition's destination; a bare URL the backslash.
    f"[y]:\n```\n<img src=d onerror=\"{CLICKER}\">\n```\n\n"
    f"see www.example.com/\\<img src=u onerror=\"{CLICKER}\">"
)
LIVE_ATTRIBUTES = """() => [...document.querySelectorAll('.jp-OutputArea *')].flatMap(e =>
    [...e.attributes].filter(a => a.name.startsWith('on')
        || /^\\s*javascript:/i.test(a.value)).map(a => e.tagName + ' ' + a.name))"""


@pytest.fixture
def hostile_lab(tmp_path: Path) -> Iterator[tuple[JupyterServer, Any]]:
    """JupyterLab over a notebook whose %agent talks to a scripted server with HOSTILE."""
    from tests.helpers.scripted_server import reply_text, reply_tool_calls

    replies = [reply_tool_calls([("python", {"code": "print('RAN-' + 'UNASKED')"})], text=HOSTILE),
               reply_text("Understood.")]
    with scripted_lab(tmp_path, replies, "answer me", "hostile.ipynb",
                      "%config Agent.approval = 'ask'",
                      "%config Agent.approval_timeout = 12.0") as (srv, model, _):
        yield srv, model


def test_a_hostile_reply_runs_no_script_and_approves_nothing(
        browser: Any, hostile_lab: tuple[JupyterServer, Any]) -> None:
    server, model = hostile_lab
    with open_notebook(browser, server, "hostile.ipynb", "hostile") as page:
        load_extension(page)
        cell = run_code(page, "%agent answer me")
        # The answer rendered as Markdown; the card waits for a click nobody makes, until
        # Agent.approval_timeout denies it (a live script would have clicked Approve).
        expect(outputs(cell).locator("strong", has_text="the bold answer")).to_be_visible()
        expect(cell.locator(".ipyagent-card")).to_be_visible()
        wait_idle(cell)
        text = output_text(cell)
        assert page.evaluate("() => window.__pwned") is None, "script from the reply ran"
        assert "RAN-UNASKED" not in text, "the call ran with nobody clicking"
        assert "✓ approved" not in text and "denied — no answer" in text, text
        assert "a < b in prose" in text and "onerror=" in text, text  # shown, as text
        assert page.evaluate(LIVE_ATTRIBUTES) == []
        assert outputs(cell).locator("code", has_text="a < b").count() >= 1
        assert "RAN-UNASKED" not in json.dumps(model.bodies)  # nor did the model hear of a run
        cell.scroll_into_view_if_needed()
        shot(cell, "hostile-reply.png", "lab")


# -- the Edit box ------------------------------------------------------------------------
def test_edit_keeps_its_keys_and_runs_the_edited_code(browser: Any, server: JupyterServer) -> None:
    """Tab, Shift-Tab, Enter and letters typed into Edit stay there: the cell stays a code
    cell, the card stays, Escape cancels, Ctrl-Enter runs the edited code."""
    app = server.app
    with open_notebook(browser, server, "quickstart.ipynb", f"edit-{app}") as page:
        load_extension(page)
        cell = run_code(page, "%agent Use Python to compute 2**100")
        cells = page.locator(".jp-Notebook .jp-Cell").count()
        button(cell, "Edit").click()
        editor = outputs(cell).locator(".ipyagent-editor textarea")
        expect(editor).to_be_visible()
        expect(editor).to_be_focused()
        page.keyboard.press("Escape")  # cancels the edit: the editor closes, the card waits
        expect(editor).to_be_hidden()
        button(cell, "Edit").click()
        editor.click()
        page.keyboard.press("ControlOrMeta+a")
        page.keyboard.press("Delete")
        page.keyboard.type("for i in range(3):")
        page.keyboard.press("Enter")  # keeps the indent, adds one after the colon
        page.keyboard.press("Tab")
        page.keyboard.press("Shift+Tab")
        page.keyboard.type("print('rmab', i * 7)")  # r: raw cell, m: markdown, a/b: new cells
        expect(editor).to_have_value("for i in range(3):\n    print('rmab', i * 7)")
        # Nothing reached the notebook: still a code cell, still one card waiting.
        assert cell.get_attribute("class") and "jp-CodeCell" in cell.get_attribute("class")
        expect(page.locator(".jp-Notebook .jp-RawCell")).to_have_count(0)
        expect(cell.locator(".ipyagent-card")).to_have_count(1)
        # Approve waits while the box is open (it would run the model's version).
        expect(button(cell, "Approve", enabled=False)).to_be_visible()
        page.keyboard.press("ControlOrMeta+Enter")
        wait_text(cell, "rmab 14")  # the edited code ran
        wait_text(cell, "✎ edited by you, then run")
        wait_idle(cell)
        expect(editor).to_be_hidden()  # the editor gave way to the card
        card = cell.locator(".ipyagent-card").first
        assert "print('rmab', i * 7)" in card.locator("pre").first.inner_text()
        text = output_text(cell)
        assert "Note: the user edited" not in text, text  # not shown as kernel output
        expect(page.locator(".jp-Notebook .jp-RawCell")).to_have_count(0)
        assert cells == page.locator(".jp-Notebook .jp-Cell").count()  # no cell added
        shot(cell, "edit.png", app)


# -- the card's actions: "code → new cell" and an offered result -------------------------
OFFER_CODE = "fit = {'slope': 2.5, 'n': 12}\nprint('fitted', fit['slope'])"
OFFER_DESCRIPTION = "<img src=x onerror=\"window.__pwned=4\"> **the trend** \x1b[2K"


@pytest.fixture
def offer_lab(tmp_path: Path) -> Iterator[tuple[JupyterServer, Any]]:
    """JupyterLab over a notebook whose %agent runs a python call, then offers its result."""
    from tests.helpers.scripted_server import reply_text, reply_tool_calls

    replies = [reply_tool_calls([("python", {"code": OFFER_CODE}),
                                 ("offer_result", {"name": "fit", "description": OFFER_DESCRIPTION})],
                                text="I fitted the trend; take it if you want it."),
               reply_text("It is in your kernel as `fit`.")]
    with scripted_lab(tmp_path, replies, "fit a trend", "offer.ipynb",
                      "%config Agent.approval = 'auto'", "%config Agent.share_namespace = 'off'",
                      "fit = 'my old fit'", after=("print('fit is', fit)",)) as (srv, model, _):
        yield srv, model


SHOTS = Path(os.environ.get("IPYAGENT_SHOTS", str(ARTIFACTS)))


def test_code_to_a_new_cell_and_taking_an_offered_result(
        browser: Any, offer_lab: tuple[JupyterServer, Any]) -> None:
    server, _model = offer_lab
    with open_notebook(browser, server, "offer.ipynb", "offer") as page:
        load_extension(page)
        cell = run_code(page, "%agent fit a trend")
        take = button(cell, "Take fit into my kernel")
        expect(take).to_be_visible()
        wait_text(cell, "fitted 2.5")  # the python call ran in the sibling
        offer = outputs(cell).locator(".ipyagent-offer")
        expect(offer).to_contain_text("Taking it replaces your `fit` (str 'my old fit')")
        expect(offer).to_contain_text("<img src=x")  # the model's description, as text
        assert page.evaluate("() => window.__pwned") is None
        code = outputs(cell).locator(".ipyagent-cellcode-button")
        expect(code).to_have_count(1)
        expect(prompt(cell)).to_have_text("[*]:")  # the run waits for the answer
        SHOTS.mkdir(parents=True, exist_ok=True)
        cell.scroll_into_view_if_needed()
        cell.screenshot(path=str(SHOTS / "card-actions-offer-waiting.png"))

        # "code → new cell": a new cell right below the agent's, holding the code; not run.
        cells = page.locator(".jp-Notebook .jp-Cell").count()
        code.click()
        expect(page.locator(".jp-Notebook .jp-Cell")).to_have_count(cells + 1)
        inserted = page.locator(".jp-Notebook .jp-Cell").nth(2)
        expect(inserted.locator(".jp-InputArea-editor")).to_contain_text("fit = {'slope': 2.5")
        expect(prompt(inserted)).to_have_text("[ ]:")
        expect(outputs(cell).locator(".ipyagent-cellcode-status")).to_contain_text("new cell below")
        page.screenshot(path=str(SHOTS / "card-actions-new-cell.png"))

        # Take it: the run ends, the card says what arrived, the user's kernel has it.
        take.click()
        wait_text(cell, "is in your kernel now")
        wait_idle(cell)
        text = output_text(cell)
        assert "It is in your kernel as fit." in text, text
        cell.screenshot(path=str(SHOTS / "card-actions-offer-taken.png"))
        after = run_code(page, "print('fit is', fit)")
        wait_text(after, "fit is {'slope': 2.5, 'n': 12}")
        assert page.evaluate(LIVE_ATTRIBUTES) == []


# -- a long output, and Always -----------------------------------------------------------
FLOOD = ("for i in range(200):\n    print('line', i)\n"
         "print('</pre></details><script>window.__pwned=1</script>"
         "<img src=x onerror=\"window.__pwned=1\">')")


@pytest.fixture
def flood_lab(tmp_path: Path) -> Iterator[JupyterServer]:
    """JupyterLab over a notebook whose %agent prints 200 lines, then makes a second call."""
    from tests.helpers.scripted_server import reply_text, reply_tool_calls

    replies = [reply_tool_calls([("python", {"code": FLOOD})]),
               reply_tool_calls([("python", {"code": "print('second')"})]),
               reply_text("Done: 200 lines, shown above.")]
    with scripted_lab(tmp_path, replies, "print a lot", "flood.ipynb",
                      "%config Agent.approval = 'ask'") as (srv, _, _path):
        yield srv


def test_a_long_output_folds_and_opens_without_script_and_always_is_marked(
        browser: Any, flood_lab: JupyterServer) -> None:
    """Issue 17: a 200-line print folds to its head and tail; the toggle opens it in the
    page (no kernel round trip, no script); a call Always approved carries a marker."""
    with open_notebook(browser, flood_lab, "flood.ipynb", "fold") as page:
        load_extension(page)
        cell = run_code(page, "%agent print a lot")
        button(cell, "Always").click()
        wait_idle(cell)
        folded = outputs(cell).locator(".ipyagent-folded")
        expect(folded).to_have_count(1)
        middle = folded.locator("details > pre")
        expect(folded.locator("summary")).to_contain_text("⋯ 181 more lines (201 in all)")
        expect(folded).to_contain_text("line 9")
        expect(middle).to_be_hidden()  # line 10 … line 190: folded away
        assert folded.bounding_box()["height"] < 600, folded.bounding_box()
        shot(cell, "fold.png", "lab")
        folded.locator("summary").click()
        expect(middle).to_be_visible()
        expect(middle).to_contain_text("line 100")
        expect(folded).to_contain_text("</pre></details><script>")  # text, not markup
        assert page.evaluate("() => window.__pwned") is None, "script from the output ran"
        assert page.evaluate(LIVE_ATTRIBUTES) == []
        # The second call ran unasked, because of Always, and its card says so.
        second = cell.locator(".ipyagent-card").nth(1)
        expect(second.locator(".ipyagent-badge")).to_have_text("Always")
        expect(cell.locator(".ipyagent-card").first.locator(".ipyagent-badge")).to_have_count(0)
        shot(cell, "fold-open.png", "lab")


# -- the staged workspace: a call's file changes on its card, Apply for code-like ones ------
CHANGES_CODE = ("open('sales.csv', 'w').write('month,revenue\\njan,3\\n')\n"
                "open('evil<img src=x onerror=\"window.__pwned=1\">.csv', 'w').write('x')\n"
                "open('helper.py', 'w').write('def total():\\n    return 3\\n')\nprint('wrote 3 files')")


@pytest.fixture
def changes_lab(tmp_path: Path) -> Iterator[tuple[JupyterServer, Path]]:
    """JupyterLab over a notebook whose %agent writes a data file and a Python file."""
    from ipyagent.kernel.sandbox import probe
    from ipyagent.kernel.staging import probe_overlay

    if probe()[0] is None or probe_overlay():
        pytest.skip("no staged sandbox here")
    from tests.helpers.scripted_server import reply_text, reply_tool_calls

    replies = [reply_tool_calls([("python", {"code": CHANGES_CODE})]),
               reply_text("Wrote sales.csv and helper.py.")]
    with scripted_lab(tmp_path, replies, "write the files", "changes.ipynb",
                      "%config Agent.approval = 'auto'",
                      "%config Agent.share_namespace = 'off'") as (srv, _, path):
        yield srv, path.parent


def test_a_calls_file_changes_show_and_code_waits_for_apply(
        browser: Any, changes_lab: tuple[JupyterServer, Path]) -> None:
    server, root = changes_lab
    with open_notebook(browser, server, "changes.ipynb", "changes") as page:
        load_extension(page)
        cell = run_code(page, "%agent write the files")
        apply = button(cell, "Apply 1 change to my folder")
        expect(apply).to_be_visible()
        # The data files are in the folder already; the Python file waits for the click.
        assert (root / "sales.csv").read_text() == "month,revenue\njan,3\n"
        assert not (root / "helper.py").exists()
        panel = outputs(cell).locator(".ipyagent-changes-panel")
        expect(panel).to_contain_text("helper.py")
        expect(panel).to_contain_text("Python source")
        expect(prompt(cell)).to_have_text("[*]:")  # the run waits for the answer
        SHOTS.mkdir(parents=True, exist_ok=True)
        cell.screenshot(path=str(SHOTS / "card-changes-waiting.png"))
        apply.click()
        wait_idle(cell)
        assert (root / "helper.py").read_text() == "def total():\n    return 3\n"
        listed = outputs(cell).locator(".ipyagent-card-changes")
        expect(listed).to_contain_text("sales.csv")
        expect(listed).to_contain_text('evil<img src=x onerror="window.__pwned=1">.csv')
        assert page.evaluate("() => window.__pwned") is None
        wait_text(cell, "Wrote sales.csv and helper.py.")
        cell.screenshot(path=str(SHOTS / "card-changes-applied.png"))
        assert page.evaluate(LIVE_ATTRIBUTES) == []
