"""The terminal rendering of a run: what a running call prints shows as it prints."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest

from ipyagent import Agent
from ipyagent.context.events import ToolCallFinished
from ipyagent.errors import ModelError
from ipyagent.frontends.terminal import TerminalDisplay
from ipyagent.models.base import ReasoningDelta
from tests.helpers.inert import harmless
from tests.helpers.scripted_model import ScriptedModel, calls, text


def run_shown(tmp_path: Any, *codes: str, max_output_lines: int = 10) -> tuple[str, list[str]]:
    """Run each code as a python call; (what the terminal shows, what it showed at each call's end)."""
    out = io.StringIO()
    display = TerminalDisplay(out, max_output_lines=max_output_lines)
    at_finish: list[str] = []

    def listener(event: Any) -> None:
        if isinstance(event, ToolCallFinished):
            at_finish.append(out.getvalue())
        display(event)

    model = ScriptedModel([calls(("python", {"code": c})) for c in codes] + [text("Done.")])
    with Agent(client=model, approval="auto", cwd=str(tmp_path)) as agent:
        assert agent.run("go", on_event=listener).stop_reason == "done"
    return out.getvalue(), at_finish


def test_output_shows_while_the_call_runs_then_only_what_was_not_shown(tmp_path) -> None:
    code = "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.2)\n'finished'"
    shown, at_finish = run_shown(tmp_path, code)
    assert "  ┆ tick 0\n  ┆ tick 1\n  ┆ tick 2\n" in at_finish[0]  # before the call ended
    assert shown.count("tick 0") == 1
    assert "  ┆ tick 2\n  └ 'finished'\n" in shown  # the result follows, nothing twice


def test_a_flood_shows_its_head_live_and_its_tail_with_the_error_at_the_end(tmp_path) -> None:
    shown, _ = run_shown(tmp_path, "for i in range(100): print('line', i)\n1/0", max_output_lines=10)
    lines = shown.splitlines()
    assert [ln for ln in lines if ln.startswith("  ┆ ")] == [f"  ┆ line {i}" for i in range(5)] + ["  ┆ …"]
    assert "  ✗ … 90 more lines …" in lines and "  ✗ line 99" in lines
    assert lines.index("  ✗ line 99") < next(i for i, ln in enumerate(lines) if "ZeroDivisionError:" in ln)
    assert "line 50" not in shown


def test_output_lines_0_shows_every_line(tmp_path) -> None:
    shown, _ = run_shown(tmp_path, "for i in range(100): print('line', i)\n'end'", max_output_lines=0)
    assert all(f"  ┆ line {i}\n" in shown for i in range(100)) and "more lines" not in shown


@pytest.mark.parametrize("code, last", [
    ("print('quiet')", "  └ done"),
    ("print('before')\nraise ValueError('bad')", "  ✗ ValueError: bad"),
])
def test_a_call_that_only_printed_ends_with_its_outcome(tmp_path, code, last) -> None:
    shown, _ = run_shown(tmp_path, code)
    card = shown.split("Done.")[0].rstrip().splitlines()
    assert card[-1] == last
    assert "  ✗ before" not in card and "  └ before" not in card  # printed live, not again


ERASE = "\x1b[2K\x1b[G"  # erase the line, cursor to column 1: what came before is gone


def test_nothing_the_model_or_a_tool_writes_reaches_the_terminal_as_a_control(tmp_path) -> None:
    """Issue 12, finding 3: text, code, tool names, arguments, output, results, errors."""
    hidden = "open('pwned', 'w').write('x')"
    code = f"{hidden}  # {ERASE}print('Hello, world!')\nprint('live\\x1b[1Aout'); 'res\\x1b[2Jult'"
    out = io.StringIO()
    display = TerminalDisplay(out, show_reasoning=True)
    display(ReasoningDelta("think\x1b]0;title\x07ing"))
    model = ScriptedModel([
        calls(("python", {"code": code}), text="Sure\x1b[2J."),
        calls(("no\x1b[2Ksuch\u202etool", {"arg": "a\u2066b\x9b"})),
        ModelError("the server said \x1b[31mno\x1b[0m"),
    ])
    with Agent(client=model, approval="auto", cwd=str(tmp_path)) as agent:
        agent.run("go", on_event=display)
    shown = out.getvalue()
    assert harmless(shown), repr(shown)
    assert f"  │ {hidden}  # ␛[2K␛[Gprint('Hello, world!')\n" in shown  # the code that runs
    assert "  ┆ live␛[1Aout\n" in shown and "Sure␛[2J." in shown and "think␛]0;title␇ing" in shown
    assert "┌ no␛[2Ksuch⟨U+202E⟩tool({\"arg\": \"a⟨U+2066⟩b⟨U+009B⟩\"})" in shown
    assert "the server said ␛[31mno␛[0m" in shown


def test_a_progress_bar_rewrites_only_its_own_line(tmp_path) -> None:
    shown, _ = run_shown(tmp_path, "import sys\nfor i in range(3): print(f'{i}/3', end='\\r', flush=True)\nprint('3/3 ok\\x08!')")
    live = [ln for ln in shown.split("\n") if ln.startswith("  ┆ ")]
    assert live and all(seg.startswith("  ┆ ") for ln in live for seg in ln.split("\r") if seg)
    assert "3/3 ok␈!" in shown and "\x08" not in shown


def test_an_edited_call_shows_the_code_that_ran(tmp_path) -> None:
    from ipyagent.engine.approval import Decision

    out = io.StringIO()
    model = ScriptedModel([calls(("python", {"code": "print('model')"})), text("Done.")])
    with Agent(client=model, approval="ask", cwd=str(tmp_path)) as agent:
        agent.approval_hook = lambda call: Decision(
            "edit", arguments={"code": "for i in range(2):\n    print('ran', i)"}, by="user")
        assert agent.run("go", on_event=TerminalDisplay(out)).stop_reason == "done"
    shown = out.getvalue()
    assert "  ✎ edited before running; what runs:\n  │ for i in range(2):\n  │     print('ran', i)\n" in shown
    assert "ran 1" in shown and "Note: the user edited" not in shown


def _shown_with_colour(tmp_path: Any, code: str, colour: bool | None) -> str:
    out = io.StringIO()
    model = ScriptedModel([calls(("python", {"code": code})), text("Done.")])
    with Agent(client=model, approval="auto", cwd=str(tmp_path)) as agent:
        assert agent.run("go", on_event=TerminalDisplay(out, colour=colour)).stop_reason == "done"
    return out.getvalue()


def test_colour_highlights_code_and_errors_after_the_text_was_made_visible(tmp_path) -> None:
    hostile = "s = '\x1b[2J\x1b]0;pwned\x07'\nprint(s)\nraise ValueError('bad')"
    shown = _shown_with_colour(tmp_path, hostile, colour=True)
    assert "\x1b[2J" not in shown and "\x1b]0;" not in shown and "\x07" not in shown
    assert "␛[2J" in shown  # the model's escape, shown as text
    escapes = set(re.findall(r"\x1b\[[0-9;]*m", shown))
    assert escapes and all(re.fullmatch(r"\x1b\[[0-9;]*m", e) for e in escapes)
    assert "\x1b[31m  ✗\x1b[0m \x1b[31mValueError\x1b[39m: bad\n" in shown  # IPython's red
    plain = _shown_with_colour(tmp_path, hostile, False)
    assert re.sub(r"\x1b\[[0-9;]*m", "", shown).split("── ")[0] == plain.split("── ")[0]


def _sgr_free(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_a_traceback_has_ipythons_colours_and_what_was_printed_stays_plain(tmp_path) -> None:
    """Issue 17, finding 5: tracebacks were plain red, IPython's are coloured by part."""
    from IPython.utils.PyColorize import theme_table
    from pygments.token import Token

    code = "def f(x):\n    return len(x)\nprint('before')\nf(3)"
    shown = _shown_with_colour(tmp_path, code, colour=True)
    theme = theme_table["neutral"]

    def painted(token: Any, text: str) -> str:
        return str(theme.format([(token, text)]))

    lines = shown.splitlines()
    assert "  ┆ before" in lines  # printed live, no colour
    assert painted(Token.ExcName, "TypeError") + ": object of type 'int' has no len()" in shown
    assert painted(Token.ExcName, "TypeError") + "                " in shown  # the header
    assert painted(Token.LinenoEm, "----> 4") in shown and painted(Token.LinenoEm, "      1") in shown
    assert painted(Token.FilenameEm, "In[1]") in shown and painted(Token.VName, "f") in shown
    assert painted(Token.Keyword, "return") in shown  # the code in the traceback, highlighted
    plain = _shown_with_colour(tmp_path, code, colour=False)
    assert _sgr_free(shown).split("── ")[0] == plain.split("── ")[0]  # colour adds nothing else


def test_a_faked_traceback_cannot_bring_its_own_escapes(tmp_path) -> None:
    """The parts are found in the plain text: the text's own controls stay visible."""
    fake = ("print('-' * 75)\nprint('Oops\x1b[8m   Traceback (most recent call last)')\n"
            "print('Cell \x1b]0;pwned\x07In[1], line 2')\n"
            "class E(Exception): pass\nraise E('\x1b[2J\x1b[30;40mhidden')")
    shown = _shown_with_colour(tmp_path, fake, colour=True)
    assert "␛[8m" in shown and "␛]0;pwned␇" in shown and "␛[2J␛[30;40mhidden" in shown
    escapes = set(re.findall(r"\x1b[^m]*m?", shown))
    assert all(re.fullmatch(r"\x1b\[[0-9;]*m", e) for e in escapes), escapes
    assert not any(e in escapes for e in ("\x1b[8m", "\x1b[30;40m", "\x1b[2J"))
    assert harmless(_sgr_free(shown))


def test_no_colour_when_piped_or_with_no_color(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert TerminalDisplay(io.StringIO()).colour is False  # piped
    assert TerminalDisplay(Tty()).colour is True
    monkeypatch.setenv("NO_COLOR", "1")
    assert TerminalDisplay(Tty()).colour is False
    assert "\x1b" not in _shown_with_colour(tmp_path, "print(1)", colour=None)


@pytest.mark.parametrize("colour", [False, True])
def test_a_reply_cut_mid_stream_gets_a_dim_line_saying_it_is_not_kept(colour: bool) -> None:
    from tests.helpers.scripted_server import ScriptedServer, drop_connection_mid_stream, reply_text

    half = [{"choices": [{"index": 0, "delta": {"content": "Half an ans"}, "finish_reason": None}]}]
    out = io.StringIO()
    with ScriptedServer([drop_connection_mid_stream(half), reply_text("The answer is 42.")]) as srv:
        with Agent(model="m", base_url=srv.base_url, python_tool=False, file_tools=False) as agent:
            agent.client.retry.backoff = 0
            result = agent.run("go", on_event=TerminalDisplay(out, colour=colour))
    assert result.text == "The answer is 42."
    marker = "  ⌫ discarded: the connection dropped; asking again (the text above is not kept)"
    lines = out.getvalue().splitlines()
    assert lines[0] == "Half an ans"
    assert lines[1] == (f"\x1b[2m{marker}\x1b[0m" if colour else marker)
    assert lines[2].startswith("[warning] connection dropped mid-stream") and "retry 1 of 3" in lines[2]
    assert "The answer is 42." in lines[3]


def test_a_call_run_because_of_always_says_so_on_its_line(tmp_path) -> None:
    from ipyagent.engine.approval import Decision

    out = io.StringIO()
    model = ScriptedModel([calls(("python", {"code": "print('one')"})),
                           calls(("python", {"code": "print('two')"})), text("Done.")])
    with Agent(client=model, approval="ask", cwd=str(tmp_path)) as agent:
        agent.approval_hook = lambda call: Decision("approve", scope="always", by="terminal")
        assert agent.run("go", on_event=TerminalDisplay(out)).stop_reason == "done"
    shown = out.getvalue()
    first, second = shown.split("  ┌ python")[1:]
    assert "Always" not in first  # the person answered this one
    assert ("  ✓ approved by Always (given at call_0_python), not asked again in this "
            "conversation\n") in second


def test_an_image_result_says_the_terminal_cannot_show_it() -> None:
    from ipyagent.context.items import ToolCall, ToolResult

    def shown(outputs: list[dict[str, Any]]) -> str:
        out = io.StringIO()
        call = ToolCall("c1", "python", {"code": "plt.show()"})
        TerminalDisplay(out, colour=False)(ToolCallFinished(call, ToolResult(
            "c1", "[image/png 690x390, 31 KB]", name="python", outputs=outputs)))
        return out.getvalue()

    png = {"output_type": "display_data", "data": {"image/png": "iVBOR", "text/plain": "<Figure>"},
           "metadata": {}}
    assert shown([png]) == ("  └ [image/png 690x390, 31 KB]\n"
                            "  (a terminal cannot show images: a saved transcript keeps them)\n")
    text_only = {"output_type": "execute_result", "data": {"text/plain": "2"}, "metadata": {}}
    assert "cannot show images" not in shown([text_only])


def test_the_answer_check_and_a_cut_are_one_line_each() -> None:
    from ipyagent import tool

    @tool
    def flaky(x: int) -> int:
        """Always fails."""
        raise RuntimeError(f"flaky broke on {x}")

    out = io.StringIO()
    model = ScriptedModel([calls(("flaky", {"x": 1})), text("It is 1234."),
                           text("It failed.\n<tool_response>\nok\n</tool_response>")])
    with Agent(client=model, tools=[flaky], python_tool=False, file_tools=False,
               verify_answers=True) as agent:
        agent.run("go", on_event=TerminalDisplay(out, colour=False))
    lines = out.getvalue().splitlines()
    assert ("[info] checked the answer: the last output was an error (RuntimeError); asked the "
            "model to look again") in lines
    assert ("[info] cut 35 characters that imitated tool output (a <tool_response> block) from "
            "the end of the answer; the transcript keeps them") in lines


def test_a_call_written_as_text_shows_as_its_card_and_an_answer_as_read() -> None:
    """In text mode a small model writes its call (and its answer) as a ```json call: the
    terminal, which cannot take back what it printed, holds such a line back until the reply
    is read, then shows the call's card and the answer, never the raw JSON."""
    from ipyagent import tool
    from tests.helpers.scripted_server import ScriptedServer, reply_text

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    call = 'I will add them.\n```json\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n```'
    answer = '```json\n{"name": "final_answer", "arguments": {"answer": "The sum is 5."}}\n```'
    out = io.StringIO()
    with ScriptedServer([reply_text(call), reply_text(answer)]) as srv:
        with Agent(model="m", base_url=srv.base_url, tools=[add], python_tool=False,
                   file_tools=False, approval="auto", tool_mode="text", verify_answers=False) as agent:
            result = agent.run("add 2 and 3", on_event=TerminalDisplay(out, colour=False))
    shown = out.getvalue()
    assert result.text == "The sum is 5."
    assert '"name"' not in shown and "```" not in shown, shown
    lines = [line for line in shown.splitlines() if not line.startswith("[info] Text mode")]
    assert lines[0] == "I will add them."
    assert any(line.startswith('  ┌ add({"a": 2, "b": 3})') for line in lines)
    assert "The sum is 5." in lines and lines[-1].startswith("── ")


def test_a_fence_that_is_not_a_call_is_printed_as_it_came() -> None:
    reply = 'Here is some JSON:\n```json\n{"city": "Lyon"}\n```\nand a block:\n```python\nprint(1)\n```'
    out = io.StringIO()
    model = ScriptedModel([text(reply)])
    with Agent(client=model, python_tool=False, file_tools=False) as agent:
        agent.run("go", on_event=TerminalDisplay(out, colour=False))
    assert out.getvalue().startswith(reply)


def test_held_and_read_text_reaches_the_terminal_made_visible() -> None:
    """What a held line turns into (the answer as read, or the held text released) goes out
    the same way as streamed text: no control, bidi or escape is obeyed."""
    from ipyagent import tool
    from tests.helpers.scripted_server import ScriptedServer, reply_text

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    answer = json.dumps({"name": "final_answer", "arguments": {
        "answer": "5\x1b[2J<script>alert(1)</script>\u202eevil"}})
    released = "Data:\n{not a call\x1b]0;title\x07 \u2066x}\n"
    out = io.StringIO()
    with ScriptedServer([reply_text(f"```json\n{answer}\n```"), reply_text(released)]) as srv:
        with Agent(model="m", base_url=srv.base_url, tools=[add], python_tool=False,
                   file_tools=False, approval="auto", tool_mode="text", verify_answers=False) as agent:
            agent.run("add 2 and 3", on_event=TerminalDisplay(out, colour=False))
            agent.run("show it", on_event=TerminalDisplay(out, colour=False))
    shown = out.getvalue()
    assert harmless(shown), repr(shown)
    assert "5␛[2J<script>alert(1)</script>⟨U+202E⟩evil" in shown
    assert "{not a call␛]0;title␇ ⟨U+2066⟩x}" in shown


def test_on_a_terminal_a_replys_code_block_shows_as_code_without_its_fences() -> None:
    """A new user's try: the demo's answer showed three backticks and a language raw."""
    reply = ("Here is how:\n```python\nx = 1\nprint(x)\n```\nand in shell:\n```bash\necho hi\n"
             "```\n```nosuchlang\nplain\x1b[2J\n```\nDone.")
    out = io.StringIO()
    model = ScriptedModel([text(reply)])
    with Agent(client=model, python_tool=False, file_tools=False) as agent:
        agent.run("go", on_event=TerminalDisplay(out, colour=True))
    shown = out.getvalue()
    plain = re.sub(r"\x1b\[[0-9;]*m", "", shown)
    assert "```" not in plain
    lines = plain.splitlines()
    assert lines[:7] == ["Here is how:", "    x = 1", "    print(x)", "and in shell:",
                         "    echo hi", "    plain␛[2J", "Done."]
    assert "\x1b[2J" not in shown  # the code's own controls are made visible first
    assert shown.count("\x1b[") > 4  # and the known languages highlighted


def test_what_ipyagent_told_the_model_is_shown_under_the_result() -> None:
    """The note the model got after a call's output (not the files-changed part, which the
    changes lines show; not the values line, which is in the output shown) is a line of its
    own, its hidden characters made visible."""
    from ipyagent.context.items import CHANGES_NOTE, VALUES, ToolCall, ToolResult

    def shown(meta: dict[str, Any]) -> str:
        out = io.StringIO()
        call = ToolCall("c1", "python", {"code": "x"})
        output = "NameError: x\nvalues when line 1 failed: y = 2"
        TerminalDisplay(out, colour=False)(ToolCallFinished(call, ToolResult(
            "c1", output, error=True, name="python", meta=meta)))
        return out.getvalue()

    said = shown({"note": "define x first\u202e", VALUES: "values when line 1 failed: y = 2"})
    assert said.endswith("  ℹ ipyagent's note to the model: define x first⟨U+202E⟩\n"), said
    assert said.count("values when line 1 failed") == 1
    changes = "applied to the user's folder: a.txt (now 1 line)"
    assert "ℹ" not in shown({"note": changes, CHANGES_NOTE: changes})
    assert shown({"note": f"define x; {changes}", CHANGES_NOTE: changes}).endswith(
        "ℹ ipyagent's note to the model: define x\n")
    # Wherever the files-changed part sits among the note's parts (found by a review).
    assert shown({"note": f"{changes}; the user sees 40 lines", CHANGES_NOTE: changes}).endswith(
        "ℹ ipyagent's note to the model: the user sees 40 lines\n")
