"""Code put in a cell is exactly what the card shows: hidden characters as escapes inside
string literals, refused anywhere else; and only code that ran, or a python fix block."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from ipyagent import Agent, Decision, ToolCall
from ipyagent.frontends.aware import code_of, fix_code, last_code_block
from ipyagent.frontends.notebook import card_html
from ipyagent.trust.cellcode import UnsafeCode, cell_text, hidden_characters
from tests.helpers.scripted_model import ScriptedModel, calls, text

ATTACK = 'note = "\u202b#  fee = fee * 10 ; "\nprint(note)'
# The issue's list: Cc/Cf but tab and newline, U+200B-F, U+202A-E, U+2060-4, U+2066-9, U+FEFF.
HIDDEN = ([chr(c) for c in range(1, 0x20) if chr(c) not in "\t\n\r"] + ["\x7f", "\x85", "\xad"]
          + [chr(c) for r in ((0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064), (0x2066, 0x2069))
             for c in range(r[0], r[1] + 1)] + ["\ufeff", "\u2028", "\u2029", "\U000e0041"])


def test_the_issues_attack_becomes_escapes_that_run_the_same() -> None:
    out = cell_text(ATTACK)
    assert out == 'note = "\\u202b#  fee = fee * 10 ; "\nprint(note)'
    assert hidden_characters(out) == [] and out.isascii()
    assert ast.dump(ast.parse(out)) == ast.dump(ast.parse(ATTACK))
    ns_raw: dict[str, Any] = {"print": lambda *a: None}
    ns_cell: dict[str, Any] = {"print": lambda *a: None}
    exec(ATTACK, ns_raw)  # noqa: S102 - the test's own strings
    exec(out, ns_cell)  # noqa: S102
    assert ns_raw["note"] == ns_cell["note"]


@pytest.mark.parametrize("ch", HIDDEN, ids=lambda c: f"U+{ord(c):04X}")
def test_each_hidden_character_is_an_escape_in_a_string(ch: str) -> None:
    for code in (f"s = '{ch}'", f'b = f"a{{1}}{ch}"', f"t = '''x\n{ch}\n'''"):
        # (NUL cannot be in Python source at all, and CR ends a line: neither is tested here.)
        out = cell_text(code)
        assert ch not in out and hidden_characters(out) == []
        assert ast.dump(ast.parse(out)) == ast.dump(ast.parse(code))


@pytest.mark.parametrize(("code", "where"), [
    ("x = 1  # \u202e reversed comment", "in a comment"),
    ("s = r'\u200b'", "in a raw string"),
    ("y = 1\u200b", "does not parse"),
    ("%time z = '\u202e'", "does not parse"),
])
def test_anywhere_else_it_is_refused_in_a_sentence(code: str, where: str) -> None:
    with pytest.raises(UnsafeCode, match="not put in a cell; ask the agent") as info:
        cell_text(code)
    assert where in str(info.value) and "U+" in str(info.value)


def test_the_card_shows_the_text_the_cell_gets() -> None:
    call = ToolCall("c1", "python", {"code": ATTACK})
    html = card_html(call, "✓ done")
    assert "\\u202b" in html and "\u202b" not in html
    bad = ToolCall("c2", "python", {"code": "x = 1  # \u202e"})
    assert "⟨U+202E⟩" in card_html(bad, "✓ done")  # refused: its stand-in, as before


class Answers:
    """Approve, deny or edit each python call in turn."""

    def __init__(self, *answers: Decision) -> None:
        self.answers = list(answers)

    async def decide(self, call: ToolCall) -> Decision:
        return self.answers.pop(0)


def test_code_takes_the_last_call_that_ran_as_it_ran(tmp_path: Path) -> None:
    from IPython.core.error import UsageError

    script = [calls(("python", {"code": "a = 1"})), calls(("python", {"code": "b = 2"})),
              calls(("python", {"code": "c = 3"})), text("done")]
    answers = Answers(Decision("approve", by="click"),
                      Decision("edit", arguments={"code": "b = 'edited'"}, by="click"),
                      Decision("deny", by="click", reason="no"))
    with Agent(client=ScriptedModel(script), approval="ask", file_tools=False, shell_tool="off",
               cwd=str(tmp_path), approval_hook=answers) as agent:
        agent.run("go")
        assert code_of(agent, None) == "b = 'edited'"  # not the denied c = 3, not b = 2
        assert code_of(agent, 1) == "a = 1"
        with pytest.raises(UsageError, match="did not run"):
            code_of(agent, 3)


def test_fix_takes_the_python_block_never_an_output_block(tmp_path: Path) -> None:
    answer = ("Use a float:\n```python\nratio = 3 / 4\n```\nExpected output:\n```\n0.75\n```\n"
              "~~~text\nnot code\n~~~")
    assert last_code_block(answer) == "ratio = 3 / 4"
    assert last_code_block("Expected output:\n```\n0.75\n```") is None
    task = "Explain and fix this error."
    with Agent(client=ScriptedModel([text("Expected output:\n```\n0.75\n```")]), approval="auto",
               file_tools=False, shell_tool="off", python_tool=False, cwd=str(tmp_path)) as agent:
        agent.run(task)
        code, why = fix_code(agent.context, task)
    assert code is None and "no ```python block" in why
    with Agent(client=ScriptedModel([calls(("python", {"code": "ratio = 3 / 4"})),
                                     text("Done, see above.\n```\n0.75\n```")]),
               approval="auto", file_tools=False, shell_tool="off", cwd=str(tmp_path)) as agent:
        agent.run(task)
        code, why = fix_code(agent.context, task)
    assert code == "ratio = 3 / 4" and "the python the agent ran" in why
