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

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.jupyter_server_helper import JupyterServer

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips, loudly
    expect = None  # type: ignore[assignment]

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "artifacts" / "e2e"
CHROMIUM = os.environ.get("IPYAGENT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic"]
BIG = "1267650600228229401496703205376"  # 2**100
LOAD = 90_000  # ms: JupyterLab's first load on a busy 2-core machine
RUN = 60_000  # ms: a kernel start, a sibling kernel start, a tool call
if expect is not None:
    # Every wait in the page follows a kernel or a model: Playwright's 5 s default for
    # expect() is too short on a busy 2-core machine (the second card came at ~6 s).
    expect.set_options(timeout=RUN)


def _skip_loudly(reason: str) -> None:
    message = f"E2E BROWSER TEST NOT RUN: {reason}"
    warnings.warn(message, pytest.PytestWarning, stacklevel=2)  # in the warnings summary
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless Chromium (Debian's), fresh user-data-dir; a loud skip if it is missing."""
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        _skip_loudly(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    try:
        subprocess.run([CHROMIUM, "--version"], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        _skip_loudly(f"{CHROMIUM} does not start: {exc}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # the [test] extra installs it
        _skip_loudly("playwright is not installed (pip install -e '.[test]')")
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 1000})
        context.set_default_timeout(RUN)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture(params=["lab", "notebook"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JupyterServer]:
    """A Jupyter server over a temporary copy of the quickstart; no kernel outlives it."""
    app = request.param
    if app == "notebook":
        pytest.importorskip("notebook", reason="Jupyter Notebook 7 is not installed")
    else:
        pytest.importorskip("jupyterlab", reason="JupyterLab is not installed")
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(REPO / "notebooks" / "quickstart.ipynb", root)
    srv = JupyterServer(root, tmp_path / "home", app=app)
    _anywidget_labextension(tmp_path / "home" / "data")
    srv.start()
    kernels: list[int] = []
    try:
        yield srv
        kernels = srv.kernel_pids()
    finally:
        kernels = kernels or srv.kernel_pids()
        srv.close()
    _assert_gone(kernels)


def _assert_gone(pids: list[int]) -> None:
    import psutil

    deadline = time.monotonic() + 15
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.2)
    assert not alive, f"kernels outlived the server: {alive}"


# -- what a person does ------------------------------------------------------------------
@contextlib.contextmanager
def notebook_server(tmp_path: Path, cells: list[str], name: str,
                    app: str = "lab") -> Iterator[tuple[JupyterServer, Path]]:
    """A Jupyter server (JupyterLab or Notebook 7) over one new notebook of ``cells``; on
    the way out it is closed, and no kernel it started may outlive it."""
    pytest.importorskip("jupyterlab" if app == "lab" else "notebook",
                        reason=f"{'JupyterLab' if app == 'lab' else 'Jupyter Notebook 7'} is not installed")
    import nbformat

    root = tmp_path / "root"
    root.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    path = root / name
    nbformat.write(nb, path)
    srv = JupyterServer(root, tmp_path / "home", app=app)
    _anywidget_labextension(tmp_path / "home" / "data")
    srv.start()
    kernels: list[int] = []
    try:
        yield srv, path
        kernels = srv.kernel_pids()
    finally:
        kernels = kernels or srv.kernel_pids()
        srv.close()
    _assert_gone(kernels)


@contextlib.contextmanager
def scripted_lab(tmp_path: Path, replies: list[Any], task: str, name: str, *settings: str,
                 app: str = "lab", after: tuple[str, ...] = ()) -> Iterator[tuple[JupyterServer, Any, Path]]:
    """A notebook whose first cell loads ipyagent against a scripted model server on
    127.0.0.1 (``replies``), then runs the ``settings`` lines, and whose second runs
    ``%agent task`` (then the ``after`` cells): the server, the model and the notebook's path."""
    from tests.helpers.scripted_server import ScriptedServer

    model = ScriptedServer(replies)
    model.start()
    setup = "\n".join(["%load_ext ipyagent", "%config Agent.model = 'scripted'",
                       f"%config Agent.base_url = '{model.base_url}'", *settings])
    try:
        with notebook_server(tmp_path, [setup, f"%agent {task}", *after], name, app) as (srv, path):
            yield srv, model, path
    finally:
        model.close()


def dismiss_dialogs(page: Any) -> list[str]:
    """Answer any Jupyter dialog with its default button; returns what they said.

    On a loaded machine JupyterLab can open the notebook before it has the kernel specs
    and ask which kernel to start; its default is the notebook's own (python3). A person
    would press Enter too.
    """
    seen: list[str] = []

    def answer(dialog: Any) -> None:
        seen.append(" ".join(dialog.inner_text().split()))
        print(f"dismissed a dialog: {seen[-1]!r}")
        dialog.locator(".jp-Dialog-button.jp-mod-accept").first.click()

    page.add_locator_handler(page.locator(".jp-Dialog"), answer)
    page.on("dialog", lambda dialog: dialog.dismiss())  # browser alerts (none expected)
    return seen


def code_cell(page: Any, source: str) -> Any:
    """The code cell whose editor shows ``source``."""
    return page.locator(".jp-CodeCell").filter(
        has=page.locator(".jp-InputArea-editor", has_text=source)).first


def outputs(cell: Any) -> Any:
    return cell.locator(".jp-Cell-outputArea")


def output_text(cell: Any) -> str:
    return str(outputs(cell).inner_text())


def prompt(cell: Any) -> Any:
    """The execution count left of the cell: '[ ]:', '[*]:' (busy) or '[3]:'."""
    return cell.locator(".jp-InputArea-prompt")


def run_cell(cell: Any) -> None:
    """Click into the cell's editor and press Shift+Enter; wait until the prompt shows it.

    A click that lands while the page is still settling can lose its keypress; the prompt
    staying as it was (nothing queued, nothing ran) is the sign, and then one retry is safe.
    """
    editor = cell.locator(".jp-InputArea-editor")
    before = prompt(cell).inner_text().strip()
    for attempt in range(2):
        editor.scroll_into_view_if_needed()
        editor.click()
        editor.locator(".cm-content").press("Shift+Enter")
        try:
            expect(prompt(cell)).not_to_have_text(before, timeout=15_000 if not attempt else RUN)
            return
        except AssertionError:
            if attempt:
                raise


def add_cell_below(page: Any, cell: Any, source: str) -> Any:
    """Select ``cell``, insert a code cell below (B), type ``source`` into it."""
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    page.keyboard.press("Enter")
    page.keyboard.type(source)
    new = code_cell(page, source)
    expect(new).to_be_visible()
    return new


def wait_text(cell: Any, text: str, timeout: float = RUN) -> None:
    """Wait until the cell's outputs show ``text`` (the failure shows what they do show)."""
    expect(outputs(cell)).to_contain_text(text, timeout=timeout)


def wait_idle(cell: Any, timeout: float = RUN) -> None:
    """Wait until the cell's prompt is a number again (the run ended)."""
    expect(prompt(cell)).to_have_text(re.compile(r"\[\d+\]"), timeout=timeout)


def button(cell: Any, label: str, enabled: bool = True) -> Any:
    """The cell's widget button labelled ``label`` (only clickable ones unless told)."""
    state = ":enabled" if enabled else ""
    return outputs(cell).locator(f"button.jupyter-button{state}",
                                 has_text=re.compile(rf"^\s*{re.escape(label)}\s*$"))


def shot(cell: Any, name: str, app: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / (name if app == "lab" else f"notebook7-{name}")
    cell.scroll_into_view_if_needed()
    cell.screenshot(path=str(path))
    return path


# -- the test ----------------------------------------------------------------------------
def test_quickstart_approve_then_deny_in_browser(browser: Any, server: JupyterServer) -> None:
    app = server.app
    for stale in ARTIFACTS.glob(f"failed-{app}.png"):
        stale.unlink()
    page = browser.new_page()
    dialogs = dismiss_dialogs(page)
    try:
        page.goto(server.url_for("quickstart.ipynb"), timeout=LOAD)
        load = code_cell(page, "%load_ext ipyagent")
        expect(load).to_be_visible(timeout=LOAD)

        # 0. The extension loads and says: demo model, calls need approval.
        run_cell(load)
        wait_text(load, "approval", timeout=LOAD)  # the first kernel start can be slow
        banner = output_text(load)
        assert "model demo" in banner and "approval ask" in banner, banner

        # 1. The quickstart's own %agent cell (approval ask, demo model).
        cell = code_cell(page, "%agent Use Python to compute 2**100")
        run_cell(cell)

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
    except BaseException:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)  # what the page showed when it failed
        page.screenshot(path=str(ARTIFACTS / f"failed-{app}.png"), full_page=True)
        print(f"dialogs answered: {dialogs}\njupyter {app} log:\n{server.log()}")
        raise
    finally:
        page.close()


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
    page = browser.new_page()
    dismiss_dialogs(page)
    try:
        page.goto(server.url_for("hostile.ipynb"), timeout=LOAD)
        setup = code_cell(page, "%load_ext ipyagent")
        expect(setup).to_be_visible(timeout=LOAD)
        run_cell(setup)
        wait_text(setup, "approval", timeout=LOAD)
        cell = code_cell(page, "%agent answer me")
        run_cell(cell)
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
        page.screenshot(path="/tmp/render-hostile.png", full_page=True)
        shot(cell, "hostile-reply.png", "lab")
    except BaseException:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "failed-hostile.png"), full_page=True)
        print(f"jupyter lab log:\n{server.log()}")
        raise
    finally:
        page.close()


# -- the Edit box ------------------------------------------------------------------------
def test_edit_keeps_its_keys_and_runs_the_edited_code(browser: Any, server: JupyterServer) -> None:
    """Tab, Shift-Tab, Enter and letters typed into Edit stay there: the cell stays a code
    cell, the card stays, Escape cancels, Ctrl-Enter runs the edited code."""
    app = server.app
    page = browser.new_page()
    dismiss_dialogs(page)
    try:
        page.goto(server.url_for("quickstart.ipynb"), timeout=LOAD)
        load = code_cell(page, "%load_ext ipyagent")
        expect(load).to_be_visible(timeout=LOAD)
        run_cell(load)
        wait_text(load, "approval", timeout=LOAD)
        cell = code_cell(page, "%agent Use Python to compute 2**100")
        run_cell(cell)
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
    except BaseException:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"failed-edit-{app}.png"), full_page=True)
        print(f"jupyter {app} log:\n{server.log()}")
        raise
    finally:
        page.close()


# -- the card's actions: "code → new cell" and an offered result -------------------------
OFFER_CODE = "fit = {'slope': 2.5, 'n': 12}\nprint('fitted', fit['slope'])"
OFFER_DESCRIPTION = "<img src=x onerror=\"window.__pwned=4\"> **the trend** \x1b[2K"


def _anywidget_labextension(data_dir: Path) -> None:
    """anywidget's labextension where this server looks, when pip put it beside the package
    (a ``--target`` install) rather than under ``sys.prefix``."""
    import sys

    try:
        import anywidget
    except ImportError:  # a dependency: the tests that need it say so
        return
    if (Path(sys.prefix) / "share/jupyter/labextensions/anywidget").is_dir():
        return
    beside = Path(anywidget.__file__).resolve().parents[1] / "share/jupyter/labextensions/anywidget"
    if beside.is_dir():
        shutil.copytree(beside, data_dir / "labextensions" / "anywidget", dirs_exist_ok=True)


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
    page = browser.new_page()
    dismiss_dialogs(page)
    try:
        page.goto(server.url_for("offer.ipynb"), timeout=LOAD)
        setup = code_cell(page, "%load_ext ipyagent")
        expect(setup).to_be_visible(timeout=LOAD)
        run_cell(setup)
        wait_text(setup, "approval", timeout=LOAD)
        cell = code_cell(page, "%agent fit a trend")
        run_cell(cell)
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
        after = code_cell(page, "print('fit is', fit)")
        run_cell(after)
        wait_text(after, "fit is {'slope': 2.5, 'n': 12}")
        assert page.evaluate(LIVE_ATTRIBUTES) == []
    except BaseException:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "failed-offer.png"), full_page=True)
        print(f"jupyter lab log:\n{server.log()}")
        raise
    finally:
        page.close()


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
    page = browser.new_page()
    dismiss_dialogs(page)
    try:
        page.goto(flood_lab.url_for("flood.ipynb"), timeout=LOAD)
        setup = code_cell(page, "%load_ext ipyagent")
        expect(setup).to_be_visible(timeout=LOAD)
        run_cell(setup)
        wait_text(setup, "approval", timeout=LOAD)
        cell = code_cell(page, "%agent print a lot")
        run_cell(cell)
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
    except BaseException:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "failed-fold.png"), full_page=True)
        print(f"jupyter lab log:\n{flood_lab.log()}")
        raise
    finally:
        page.close()


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
    page = browser.new_page()
    dismiss_dialogs(page)
    try:
        page.goto(server.url_for("changes.ipynb"), timeout=LOAD)
        setup = code_cell(page, "%load_ext ipyagent")
        expect(setup).to_be_visible(timeout=LOAD)
        run_cell(setup)
        wait_text(setup, "approval", timeout=LOAD)
        cell = code_cell(page, "%agent write the files")
        run_cell(cell)
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
    except BaseException:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "failed-changes.png"), full_page=True)
        print(f"jupyter lab log:\n{server.log()}")
        raise
    finally:
        page.close()
