"""Issue 30's papercuts, checked in a real JupyterLab in headless Chromium.

The harness (Chromium, Playwright, a Jupyter server in a temporary home) is
``tests/helpers/browser.py``'s and ``tests/helpers/labs.py``'s; each test here builds its own
small notebook on the demo model.
Screenshots go to ``artifacts/e2e/`` (a person looks at them; the tests read the page).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser import (
    button,
    expect,
    load_extension,
    open_notebook,
    output_text,
    outputs,
    run_code,
    shot,
    wait_idle,
    wait_text,
)
from tests.helpers.jupyter_server_helper import JupyterServer
from tests.helpers.labs import notebook_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(400)]

SETUP = "%load_ext ipyagent\n%config Agent.approval = 'ask'"


def _lab(tmp_path: Path, cells: list[str], name: str = "papercuts.ipynb") -> Iterator[JupyterServer]:
    with notebook_server(tmp_path, cells, name) as (srv, _):
        yield srv


# -- item 6: what runs is what the box shows ---------------------------------------------
TASKS = ["Use Python to compute 2**100", "Use Python to compute 3**40", "Use Python to compute 7**30"]


def _typed(trial: int) -> str:
    """A one-line program whose output proves it arrived whole (its own length and tail)."""
    payload = "".join(chr(ord("a") + (i * 7 + trial) % 26) for i in range(150))
    return f"s = '{payload}'; print('whole', len(s), s[-6:], 'trial-{trial}-END')"


@pytest.fixture
def edit_lab(tmp_path: Path) -> Iterator[JupyterServer]:
    yield from _lab(tmp_path, [SETUP, *(f"%agent {t}" for t in TASKS)])


def test_ctrl_enter_right_after_fast_typing_runs_exactly_the_box(
        browser: Any, edit_lab: JupyterServer) -> None:
    """Issue 30 item 6: 150 characters typed with no delay, then Ctrl-Enter at once, three
    times; each time the code that ran, the card and the output are the box's whole text."""
    with open_notebook(browser, edit_lab, "papercuts.ipynb", "edit-race") as page:
        load_extension(page, "approval ask")
        for trial, task in enumerate(TASKS):
            cell = run_code(page, f"%agent {task}")
            button(cell, "Edit").click()
            editor = outputs(cell).locator(".ipyagent-editor textarea")
            expect(editor).to_be_focused()
            page.keyboard.press("ControlOrMeta+a")
            page.keyboard.press("Delete")
            typed = _typed(trial)
            page.keyboard.type(typed)  # no delay between keys
            page.keyboard.press("ControlOrMeta+Enter")  # and none before running
            wait_text(cell, "✎ edited by you, then run")
            wait_idle(cell)
            payload = typed.split("'")[1]
            wait_text(cell, f"whole 150 {payload[-6:]} trial-{trial}-END")
            shown = cell.locator(".ipyagent-card").first.locator("pre").first.inner_text()
            assert shown.strip() == typed, (trial, shown)
        shot(cell, "edit-race.png")


# -- item 9: the clutter list ------------------------------------------------------------
def _status_bar(page: Any) -> str:
    """The kernel's state as JupyterLab's status bar says it ('Idle', 'Busy', ...)."""
    text = " ".join(page.locator(".jp-StatusBar-Widget").all_inner_texts())
    found = re.search(r"\|\s*(\w+)", text)
    return found.group(1) if found else text


@pytest.fixture
def clutter_lab(tmp_path: Path) -> Iterator[JupyterServer]:
    yield from _lab(tmp_path, [SETUP, "%agent Use Python to compute 2**100"])


def test_the_card_in_a_browser_says_each_thing_once_inside_its_frame(
        browser: Any, clutter_lab: JupyterServer) -> None:
    """Issue 30 item 9 in JupyterLab: 'waiting' said once; while the Edit box is open,
    Approve and Always wait and the box keeps inside the card's width; the status bar
    says Busy while the agent cell runs (it said Idle once the first widget appeared);
    what a call printed is inside its card; where autosave writes is said after the
    answer, just before the footer."""
    with open_notebook(browser, clutter_lab, "papercuts.ipynb", "clutter") as page:
        load_extension(page, "approval ask")
        cell = run_code(page, "%agent Use Python to compute 2**100")
        approve = button(cell, "Approve")
        expect(approve).to_be_visible()
        card = cell.locator(".ipyagent-card").first
        expect(card).to_contain_text("waiting for approval")
        page.wait_for_timeout(1500)  # the widget manager's control requests come and go
        assert output_text(cell).count("waiting for") == 1, output_text(cell)
        assert _status_bar(page) == "Busy", _status_bar(page)
        shot(cell, "clutter-waiting.png")

        button(cell, "Edit").click()
        editor = outputs(cell).locator(".ipyagent-editor")
        expect(editor).to_be_visible()
        page.keyboard.type("# " + "a long comment " * 30)
        expect(button(cell, "Approve")).to_have_count(0)  # no enabled Approve while editing
        expect(button(cell, "Always")).to_have_count(0)
        expect(button(cell, "Approve", enabled=False)).to_be_visible()
        right = card.bounding_box()["x"] + card.bounding_box()["width"]
        box = editor.bounding_box()
        assert box["x"] + box["width"] <= right + 1, (box, right)  # inside the card's width
        shot(cell, "clutter-editing.png")
        button(cell, "Cancel").click()
        expect(approve).to_be_enabled()

        approve.click()
        expect(cell.locator(".ipyagent-card")).to_have_count(2)  # the demo model's fix
        assert _status_bar(page) == "Busy", _status_bar(page)
        button(cell, "Approve").click()
        wait_idle(cell)
        first, second = cell.locator(".ipyagent-card").nth(0), cell.locator(".ipyagent-card").nth(1)
        expect(first.locator(".ipyagent-card-output")).to_contain_text("TypeError")
        expect(first.locator(".ipyagent-card-output")).to_contain_text("value = 1267650600228229401496703205376")
        expect(second.locator(".ipyagent-card-output")).to_contain_text("digits: 31")
        expect(second).to_contain_text("approved by you")
        text = output_text(cell)
        assert text.count("approved by you") == 2, text  # in each card's header, once
        answer = text.index("(This answer was produced by the built-in demo model")
        saved = text.index("autosaving this conversation to")
        footer = text.index("✓ done · 3 steps")
        assert answer < saved < footer, text
        expect(page.locator(".jp-StatusBar-Widget")).to_contain_text("Idle")
        shot(cell, "clutter-done.png")
