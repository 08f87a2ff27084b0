"""Measured in a real JupyterLab (headless Chromium): "code → new cell" puts in the new cell
exactly the text the card shows, character for character, when the model's code hides a
bidi character in a string (issue 29: the cell drew ``note = "#  fee = fee * 10 ; "`` and
ran ``fee = fee * 10``); code that hides one in a comment gets no button, and its card says
why. The new cell's text is read three ways: the saved notebook file, the editor's lines
as drawn, and the card's text as drawn.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ipyagent.trust.cellcode import cell_text, hidden_characters
from tests.helpers.browser import (
    ARTIFACTS,
    expect,
    load_extension,
    open_notebook,
    outputs,
    prompt,
    run_code,
    wait_idle,
    wait_text,
)
from tests.helpers.jupyter_server_helper import JupyterServer
from tests.helpers.labs import scripted_lab

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

BIDI = 'fee = 1\nnote = "\u202b#  fee = fee * 10 ; "\nprint("fee is", fee)'
IN_COMMENT = "y = 2  # \u202e hidden in a comment"


@pytest.fixture(params=["lab", "notebook"])
def bidi_lab(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[JupyterServer, Path, str]]:
    """JupyterLab (or Notebook 7) over a notebook whose %agent runs the two python calls."""
    from tests.helpers.scripted_server import reply_text, reply_tool_calls

    app = request.param
    replies = [reply_tool_calls([("python", {"code": BIDI}), ("python", {"code": IN_COMMENT})]),
               reply_text("Both ran.")]
    with scripted_lab(tmp_path, replies, "compute the fee", "bidi.ipynb",
                      "%config Agent.approval = 'auto'", "%config Agent.share_namespace = 'off'",
                      "%config Agent.autosave = ''", app=app) as (srv, _, path):
        yield srv, path, app


def saved_sources(path: Path, count: int, timeout: float = 60) -> list[str]:
    """The cells' sources once the saved file has ``count`` cells."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        except json.JSONDecodeError:  # read while the server was writing it: read again
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            continue
        if len(cells) >= count or time.monotonic() > deadline:
            return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells]
        time.sleep(0.5)


def test_the_new_cell_is_the_cards_text_character_for_character(
        browser: Any, bidi_lab: tuple[JupyterServer, Path, str]) -> None:
    server, path, app = bidi_lab
    with open_notebook(browser, server, "bidi.ipynb", f"bidi-{app}") as page:
        load_extension(page)
        cell = run_code(page, "%agent compute the fee")
        wait_text(cell, "Both ran.")
        wait_idle(cell)
        wait_text(cell, "fee is 1")  # the code ran as written: nothing multiplied the fee
        cards = outputs(cell).locator(".ipyagent-card > pre")  # the code (its output is in the card too)
        expect(cards).to_have_count(2)
        card = cards.nth(0).evaluate("e => e.textContent")
        refused = cards.nth(1).evaluate("e => e.textContent")
        assert card == cell_text(BIDI) and hidden_characters(card) == [], repr(card)
        assert "⟨U+202E⟩" in refused and "\u202e" not in refused  # its stand-in, as before
        buttons = outputs(cell).locator(".ipyagent-cellcode-button")
        expect(buttons).to_have_count(1)  # the comment's call has none…
        expect(outputs(cell)).to_contain_text("code → new cell: not offered")  # …and says why
        expect(outputs(cell)).to_contain_text("in a comment")

        count = page.locator(".jp-Notebook .jp-Cell").count()
        buttons.first.click()
        expect(page.locator(".jp-Notebook .jp-Cell")).to_have_count(count + 1)
        inserted = page.locator(".jp-Notebook .jp-Cell").nth(2)
        expect(prompt(inserted)).to_have_text("[ ]:")  # not run
        drawn = inserted.locator(".cm-line").evaluate_all("ls => ls.map(l => l.textContent).join('\\n')")
        assert drawn == card, (drawn, card)  # the editor draws the card's text
        page.keyboard.press("Escape")
        page.keyboard.press("Control+s")
        sources = saved_sources(path, count + 1)
        assert sources[2] == card, (sources[2], card)  # the cell holds it, byte for byte
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        cell.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"{'' if app == 'lab' else 'notebook7-'}bidi-code-to-cell.png"))
