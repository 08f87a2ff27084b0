"""Code offered as a new cell, in a real notebook executed by nbclient: ``%agent code`` takes
the last call that ran (never a denied one), with hidden characters written as escapes
(the card shows the same text) or refused in a sentence; ``%agent fix`` never takes an
output block. The set_next_input payloads are read from the execute replies.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from ipyagent.trust.cellcode import cell_text
from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls

pytestmark = pytest.mark.slow

ATTACK = 'fee = 1\nnote = "\u202b#  fee = fee * 10 ; "\nprint("fee is", fee)'
DENIED = "fee = fee * 10"
COMMENT = "x = 1  # \u202e hidden in a comment"


def text(cell: Any) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type == "error":
            parts.append("\n".join(out.traceback))
        else:
            data = out.get("data", {})
            parts.append(data.get("text/html") or data.get("text/plain", ""))
    return "\n".join(parts)


def test_code_and_fix_insert_only_what_ran_as_the_card_shows_it(tmp_path: Path) -> None:
    replies = [reply_tool_calls([("python", {"code": ATTACK})]), reply_text("Ran."),
               reply_tool_calls([("python", {"code": DENIED})]),  # denied: the run stops
               reply_tool_calls([("python", {"code": COMMENT})]), reply_text("Ran too."),
               reply_text("The fix:\nExpected output:\n```\n0.5\n```")]
    with ScriptedServer(replies) as srv:
        sources = [
            f"%load_ext ipyagent\n%config Agent.model = 'scripted'\n"
            f"%config Agent.base_url = '{srv.base_url}'\n%config Agent.autosave = ''\n"
            "%config Agent.share_namespace = 'off'",
            "%agent --approve auto compute the fee",
            "%agent --approve ask raise the fee",  # headless: denied
            "%agent code",
            "%agent --approve auto set x",
            "%agent code",
            "1 / 0",
            "%agent fix",
        ]
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
        payloads: dict[int, list[dict[str, Any]]] = {}

        def on_executed(cell: Any, cell_index: int, execute_reply: Any) -> None:
            payloads[cell_index] = execute_reply["content"].get("payload", [])

        NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                       on_cell_executed=on_executed,
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
    cells = [text(c) for c in nb.cells]
    assert "fee is 1" in cells[1]  # the attack ran as written: fee stayed 1
    assert "denied" in cells[2].lower()
    [offer] = payloads[3]  # the call that ran, not the denied one
    escaped = cell_text(ATTACK)
    assert offer["source"] == "set_next_input" and offer["text"] == escaped
    assert "\\u202b" in offer["text"] and "\u202b" not in offer["text"] and DENIED not in offer["text"].split("\n")
    card = html.unescape(re.sub(r"<[^>]+>", "", cells[1]))
    assert escaped in card  # the card shows the very text the cell gets
    assert "written as escapes" in cells[3]
    assert payloads[5] == []  # bidi in a comment: refused
    assert "U+202E" in cells[5] and "in a comment" in cells[5] and "not put in a cell" in cells[5]
    assert payloads[7] == []  # an output block is not a fix
    assert "no ```python block" in cells[7]
