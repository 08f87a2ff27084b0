"""The browser tests' page side, written once: headless Chromium (Debian's, driven by
Playwright from PyPI) as the ``browser`` fixture, a notebook page opened with its failure
artifacts, and what a person does in it (find a cell, run it, wait for its text, click).

``tests/conftest.py`` registers this module as a plugin, so the ``tests/test_e2e_*.py``
files get ``browser`` without importing it. Screenshots go to ``artifacts/e2e/``; the
servers the pages talk to come from ``tests/helpers/labs.py``.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
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

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts" / "e2e"
CHROMIUM = os.environ.get("IPYAGENT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic"]
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


# -- a page and what it leaves behind when a test fails ----------------------------------
@contextlib.contextmanager
def failure_artifacts(page: Any, server: JupyterServer, name: str,
                      dialogs: list[str] | None = None) -> Iterator[None]:
    """Whatever fails (or is interrupted) inside: a full-page screenshot
    ``artifacts/e2e/failed-{name}.png`` and the server's log printed, then the error goes on;
    the page is closed either way. A stale screenshot of that name goes first."""
    failed = ARTIFACTS / f"failed-{name}.png"
    failed.unlink(missing_ok=True)
    try:
        yield
    except BaseException:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)  # what the page showed when it failed
        page.screenshot(path=str(failed), full_page=True)
        if dialogs is not None:
            print(f"dialogs answered: {dialogs}")
        print(f"jupyter {server.app} log:\n{server.log()}")
        raise
    finally:
        page.close()


@contextlib.contextmanager
def open_notebook(browser: Any, server: JupyterServer, notebook: str, name: str,
                  dialogs: list[str] | None = None) -> Iterator[Any]:
    """A new page on ``notebook``, its Jupyter dialogs answered (what they said goes into
    ``dialogs`` when given), inside ``failure_artifacts(page, server, name)``."""
    page = browser.new_page()
    seen = dismiss_dialogs(page, dialogs)
    with failure_artifacts(page, server, name, seen):
        page.goto(server.url_for(notebook), timeout=LOAD)
        yield page


def dismiss_dialogs(page: Any, seen: list[str] | None = None) -> list[str]:
    """Answer any Jupyter dialog with its default button; returns what they said (``seen``).

    On a loaded machine JupyterLab can open the notebook before it has the kernel specs
    and ask which kernel to start; its default is the notebook's own (python3). A person
    would press Enter too.
    """
    said: list[str] = [] if seen is None else seen

    def answer(dialog: Any) -> None:
        said.append(" ".join(dialog.inner_text().split()))
        print(f"dismissed a dialog: {said[-1]!r}")
        dialog.locator(".jp-Dialog-button.jp-mod-accept").first.click()

    page.add_locator_handler(page.locator(".jp-Dialog"), answer)
    page.on("dialog", lambda dialog: dialog.dismiss())  # browser alerts (none expected)
    return said


# -- what a person does ------------------------------------------------------------------
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


def run_code(page: Any, source: str) -> Any:
    """The code cell whose editor shows ``source``, run (it may still be running)."""
    cell = code_cell(page, source)
    run_cell(cell)
    return cell


def load_extension(page: Any, shows: str = "approval") -> Any:
    """Run the notebook's ``%load_ext ipyagent`` cell and wait until its banner shows
    ``shows``; the page's first load and first kernel start can be slow (``LOAD``)."""
    setup = code_cell(page, "%load_ext ipyagent")
    expect(setup).to_be_visible(timeout=LOAD)
    run_cell(setup)
    wait_text(setup, shows, timeout=LOAD)
    return setup


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


def shot(target: Any, name: str, app: str = "lab") -> Path:
    """A screenshot of ``target`` (a cell, a card), scrolled into view, as
    ``artifacts/e2e/name`` (``notebook7-name`` in Notebook 7)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / (name if app == "lab" else f"notebook7-{name}")
    target.scroll_into_view_if_needed()
    target.screenshot(path=str(path))
    return path
