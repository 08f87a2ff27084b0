"""Tool calls written as text: every shape small models use, leniency, and what is not a call."""

from __future__ import annotations

import json

import pytest

from ipyagent.models.written_calls import (
    REPAIRED,
    blocks_on_one_line_repaired,
    canonical_call,
    find_written_calls,
    flat_answer,
    how_to_call,
    leading_zeros_repaired,
    line_breaks_in_strings_repaired,
    recover_calls,
)

TOOLS = {"python", "read_file"}
CALL = {"name": "python", "arguments": {"code": "2**100"}}


@pytest.mark.parametrize("text", [
    "```json\n" + json.dumps(CALL) + "\n```",
    "```tool_call\n" + json.dumps(CALL) + "\n```",
    "```\n" + json.dumps(CALL) + "\n```",
    "<tool_call>\n" + json.dumps(CALL) + "\n</tool_call>",
    "<tool_call>" + json.dumps(CALL),  # the closing tag never came (a stop sequence ate it)
    '<|python_tag|>{"name": "python", "parameters": {"code": "2**100"}}<|eom_id|>',
    "<|python_tag|>2**100<|eom_id|>",  # Llama's built-in code interpreter: plain code
    '<function=python>{"code": "2**100"}</function>',
    'functions.python: {"code": "2**100"}',
    '[TOOL_CALLS] [{"name": "python", "arguments": {"code": "2**100"}}]',
    json.dumps(CALL),
    '{"name": "python", "parameters": {"code": "2**100"}}',
    '{"type": "function", "function": {"name": "python", "arguments": "{\\"code\\": \\"2**100\\"}"}}',
])
def test_each_shape_is_one_call(text: str) -> None:
    around, calls = find_written_calls(text, TOOLS)
    assert [(c.name, c.arguments) for c in calls] == [("python", {"code": "2**100"})]
    assert around == ""


def test_the_text_around_is_kept_and_the_call_taken_out() -> None:
    text = ("I will compute it.\n\n<tool_call>\n" + json.dumps(CALL) + "\n</tool_call>\n\n"
            "Then I will report.")
    around, calls = find_written_calls(text, TOOLS)
    assert around == "I will compute it.\n\nThen I will report." and len(calls) == 1


def test_several_calls_in_one_reply_in_order() -> None:
    text = ("First:\n<tool_call>\n" + json.dumps(CALL) + "\n</tool_call>\n"
            '```json\n{"name": "read_file", "arguments": {"path": "a.csv"}}\n```')
    _, calls = find_written_calls(text, TOOLS)
    assert [c.name for c in calls] == ["python", "read_file"]
    _, row = find_written_calls('<tool_call>\n{"name": "python", "arguments": {"code": "1"}}\n'
                                '{"name": "python", "arguments": {"code": "2"}}\n</tool_call>', TOOLS)
    assert [c.arguments for c in row] == [{"code": "1"}, {"code": "2"}]


def test_lenient_arguments_in_a_written_call() -> None:
    text = ('```json\n{"name": "python", "arguments": {"code": """import math\n'
            'print(math.sqrt(2))""",},}\n```')
    _, calls = find_written_calls(text, TOOLS)
    assert calls[0].arguments == {"code": "import math\nprint(math.sqrt(2))"}
    _, calls = find_written_calls("{'name': 'python', 'arguments': {'code': 'for i in range(2):\n\tprint(i)'}}",
                                  TOOLS)
    assert calls[0].arguments == {"code": "for i in range(2):\n\tprint(i)"}


def test_an_unreadable_call_of_an_offered_tool_is_still_a_call_with_its_problem() -> None:
    text = '<tool_call>{"name": "python", "arguments": {"code": "print(1)}</tool_call>'
    around, calls = recover_calls(text, TOOLS)
    (call,) = calls
    assert call.name == "python" and call.meta["from_text"] and call.meta["written_problem"]
    assert call.raw_arguments == '{"name": "python", "arguments": {"code": "print(1)}'
    assert around == ""
    told = how_to_call("python", call.meta["written_problem"], {"code": "print(2**100)"})
    assert canonical_call("python", {"code": "print(2**100)"}) in told and "not run" in told


def test_a_name_with_nothing_after_it_is_a_call_to_tell_how_to_write() -> None:
    # What llama-cpp-python's chatml-function-calling streamed for tool_choice "auto" (measured).
    around, calls = recover_calls("functions.python:", TOOLS)
    assert around == "" and [c.name for c in calls] == ["python"]
    assert calls[0].meta["written_problem"] == "no arguments object followed the name"
    assert find_written_calls("See functions.shell: for that.", TOOLS) == ("See functions.shell: for that.", [])


def test_recovered_calls_are_marked_and_get_ids() -> None:
    _, calls = recover_calls(json.dumps(CALL) + "\n" + "<tool_call>" + json.dumps(CALL) + "</tool_call>", TOOLS)
    assert len(calls) == 2 and all(c.meta == {"from_text": True} for c in calls)
    assert calls[0].id != calls[1].id and all(c.id.startswith("call_") for c in calls)


def test_an_imagined_result_after_the_call_is_not_kept() -> None:
    text = "<tool_call>" + json.dumps(CALL) + "</tool_call>\n<tool_response>42</tool_response>\nIt is 42."
    around, calls = find_written_calls(text, TOOLS)
    assert len(calls) == 1 and around == ""


@pytest.mark.parametrize("text", [
    "The answer is 42.",
    '{"name": "Ada", "arguments": 3}',  # JSON, but no such tool
    '```json\n{"name": "2^100", "arguments": {"type": "integer", "value": 100}}\n```',
    # A code example is code shown, not a call, even if it spells one.
    '```python\nprint({"name": "python", "arguments": {"code": "1"}})\n```',
    "Wrap each call in <tool_call> tags.",
    '{"name": "python"}',  # a bare object needs its arguments to be a call
    '<tool_call>{"name": "shell", "arguments": {"cmd": "rm -rf /"}}</tool_call>',  # not offered
    "functions.shell: {\"cmd\": \"ls\"}",
    '{"result": {"name": "python", "arguments": {"code": "1"}}}',  # data that contains one
])
def test_what_is_not_a_call_of_an_offered_tool_stays_text(text: str) -> None:
    assert find_written_calls(text, TOOLS) == (text, [])


def test_no_offered_tools_means_no_calls() -> None:
    assert find_written_calls(json.dumps(CALL), []) == (json.dumps(CALL), [])


def test_the_recorded_explanation_with_json_in_it_is_left_alone() -> None:
    from tests.helpers.scripted_apis import LOCAL_CORPUS

    path = LOCAL_CORPUS / "llama-cpp-python__stream-json-in-text-not-a-call.json"
    text = json.loads(path.read_text())["expected"]["text"]
    assert find_written_calls(text, TOOLS) == (text, [])


def test_a_call_written_html_escaped_is_read_unescaped() -> None:
    """llama-cpp-python's chatml-function-calling template HTML-escapes the messages, and the
    model then writes its call escaped, with the code's quotes escaped too (seen there)."""
    text = ("&lt;tool_call&gt;\n{&#34;name&#34;: &#34;python&#34;, &#34;arguments&#34;: "
            "{&#34;code&#34;: \\'print(2**100)\\'}}\n&lt;/tool_call&gt;\n\nThe result follows.")
    around, calls = find_written_calls(text, ["python"])
    assert [(c.name, c.arguments) for c in calls] == [("python", {"code": "print(2**100)"})]
    assert around == "The result follows."
    # Escaped text that holds no call of an offered tool stays exactly as it was.
    shown = "Use &lt;b&gt; for bold: {&#34;name&#34;: &#34;bold&#34;, &#34;arguments&#34;: {}}"
    assert find_written_calls(shown, ["python"]) == (shown, [])


# -- measured at 1.5B: "\n" meant for Python, read by JSON as a line break in a string -------
def test_a_line_break_that_splits_a_string_literal_is_written_back_as_backslash_n() -> None:
    written = ('<tool_call>\n{"name": "python", "arguments": {"code": "lines = open(\'a.ini\')'
               '.readlines()\\nlines[2] = \'threshold = 0.75\\n\'\\nprint(lines)"}}\n</tool_call>')
    _, (call,) = recover_calls(written, ["python"])
    assert call.arguments["code"] == ("lines = open('a.ini').readlines()\n"
                                      "lines[2] = 'threshold = 0.75\\n'\nprint(lines)")
    compile(call.arguments["code"], "<t>", "exec")
    assert call.meta[REPAIRED].startswith("line breaks inside a string literal")


@pytest.mark.parametrize("code", [
    "print(1)\nx = 2",  # compiles: untouched
    'x = """a\nb"""',  # a line break inside a triple-quoted string is fine
    "def (",  # another SyntaxError: not ours to fix
    "x = 'never closed",  # no line after it to join
])
def test_code_that_compiles_or_that_this_cannot_fix_is_left_alone(code: str) -> None:
    assert line_breaks_in_strings_repaired(code) is None
    _, (call,) = recover_calls(json.dumps({"name": "python", "arguments": {"code": code}}), ["python"])
    assert call.arguments["code"] == code and REPAIRED not in call.meta


def test_the_repair_stands_when_another_error_remains() -> None:
    # Measured at 1.5B: "...; lines[5] = 'threshold = 0.75\n'; with open(...) as f: ..." is
    # a SyntaxError after the repair too, but now the one the model has to fix.
    code = "x = 1; s = 'a\n'; with open('f') as f: pass"
    assert line_breaks_in_strings_repaired(code) == "x = 1; s = 'a\\n'; with open('f') as f: pass"


# -- measured at 1.5B: a block statement after ';', written again word for word when asked ---
def test_a_block_after_a_semicolon_goes_to_a_line_of_its_own() -> None:
    code = "import re; with open('app.log') as f: print(len(re.findall(r'ERROR', f.read())))"
    _, (call,) = recover_calls(json.dumps({"name": "python", "arguments": {"code": code}}), ["python"])
    assert call.arguments["code"] == ("import re\nwith open('app.log') as f: "
                                      "print(len(re.findall(r'ERROR', f.read())))")
    assert call.meta[REPAIRED] == "a block statement after ';' moved to a line of its own"
    # two blocks one after the other, at the line's own indentation
    assert blocks_on_one_line_repaired(
        "def f():\n    x = 1; for i in range(3): print(i)\nf()") == (
        "def f():\n    x = 1\n    for i in range(3): print(i)\nf()")
    assert blocks_on_one_line_repaired(
        "with open('a') as f: s = f.read(); with open('b', 'w') as g: g.write(s)") == (
        "with open('a') as f: s = f.read()\nwith open('b', 'w') as g: g.write(s)")


def test_a_block_after_another_blocks_colon_goes_one_level_deeper() -> None:
    """Seen at 1.5B: ``for item, quantity in inventory.items(): if quantity == 0: print(item)``,
    a SyntaxError, then the same call again."""
    code = "for item, quantity in inventory.items(): if quantity == 0: print(item)"
    _, (call,) = recover_calls(json.dumps({"name": "python", "arguments": {"code": code}}), ["python"])
    assert call.arguments["code"] == ("for item, quantity in inventory.items():\n"
                                      "    if quantity == 0: print(item)")
    assert call.meta[REPAIRED] == "a block statement after another block's ':' moved to a line of its own"
    assert blocks_on_one_line_repaired("if x: print(1)\nelse: if y: print(2)") == (
        "if x: print(1)\nelse:\n    if y: print(2)")
    both = "import json; for k, v in d.items(): if v: print(k)"
    kinds: set[str] = set()
    assert blocks_on_one_line_repaired(both, kinds=kinds) == (
        "import json\nfor k, v in d.items():\n    if v: print(k)") and kinds == {";", ":"}
    # A colon inside brackets (a dict, a slice) or a lambda's is no block's.
    assert blocks_on_one_line_repaired("x = {'if': 1}; print(x[1:2])") is None
    assert blocks_on_one_line_repaired("f = lambda v: v if v else 0") is None


def test_both_repairs_in_one_call() -> None:
    """The edit-config call of issue 33 at 1.5B: a '\\n' read as a line break, then a block."""
    code = "x = 1; s = 'a\n'; with open('f') as f: pass"
    _, (call,) = recover_calls(json.dumps({"name": "python", "arguments": {"code": code}}), ["python"])
    assert call.arguments["code"] == "x = 1; s = 'a\\n'\nwith open('f') as f: pass"
    assert call.meta[REPAIRED] == ("line breaks inside a string literal written as \\n; "
                                   "a block statement after ';' moved to a line of its own")


def test_leading_zeros_python_refuses_are_taken_off() -> None:
    """At 1.5B: ``datetime(2026, 12, 06)``, a SyntaxError, the same call four more times."""
    code = "from datetime import date\nprint((date(2026, 12, 06) - date(1990, 05, 17)).days)"
    _, (call,) = recover_calls(json.dumps({"name": "python", "arguments": {"code": code}}), ["python"])
    assert call.arguments["code"] == ("from datetime import date\n"
                                      "print((date(2026, 12, 6) - date(1990, 5, 17)).days)")
    assert call.meta[REPAIRED] == "leading zeros taken off whole numbers (06 is 6)"
    for fine in ["x = '06'", "x = 0x06", "x = 0", "x = 1.05", "x = 0o7", "# 06\nx = 1"]:
        assert leading_zeros_repaired(fine) is None, fine
    assert leading_zeros_repaired("x = 007 + 00") == "x = 7 + 00"  # 00 is a valid 0


def test_a_regex_word_boundary_that_json_read_as_a_backspace_is_written_back() -> None:
    r"""A model writes ``r'\b\w+\b'`` in its JSON with one backslash: JSON reads ``\b`` as a
    backspace (``\w`` is kept as written), which no code means."""
    written = '{"name": "python", "arguments": {"code": "import re\\nprint(re.findall(r\'\\b\\w+\\b\', t))"}}'
    _, (call,) = recover_calls(written, ["python"])
    assert call.arguments["code"] == "import re\nprint(re.findall(r'\\b\\w+\\b', t))"
    assert call.meta[REPAIRED] == "\\b and \\f that JSON read as control characters written back"
    _, (plain,) = recover_calls('{"name": "python", "arguments": {"code": "print(1)"}}', ["python"])
    assert REPAIRED not in plain.meta


@pytest.mark.parametrize("code", [
    "x = 1; print(x)",  # compiles
    "x = 1; y = (",  # another SyntaxError
    "s = 'a; with b: c'; t = (",  # the ';' in a string is not one
    "f(a; with b: c)",  # inside brackets: no statement boundary
    "x = 1; with open('f') as f: y = (",  # split, it still does not compile: left as written
])
def test_a_semicolon_this_cannot_help_is_left_alone(code: str) -> None:
    assert blocks_on_one_line_repaired(code) is None


def test_two_broken_strings_and_other_tools_untouched() -> None:
    assert line_breaks_in_strings_repaired("a = 'x\n'\nb = \"y\n\"") == "a = 'x\\n'\nb = \"y\\n\""
    _, (call,) = recover_calls('{"name": "write_file", "arguments": {"path": "a.py", '
                               '"content": "x = \'a\\nb\'"}}', ["write_file"])
    assert call.arguments["content"] == "x = 'a\nb'"  # file content is data: never changed


@pytest.mark.parametrize("reply, answer", [
    ('{"name": "final_answer", "answer": "3.03 s"}', "3.03 s"),
    ('{"final_answer": "2.142857142857143"}', "2.142857142857143"),  # measured at 0.5B
    ('```json\n{"final_answer": 42}\n```', "42"),
    ('{"final_answer": "x", "other": 1}', None),  # not only the answer: not read as one
    ('{"answer": "x"}', None),
    ("The answer is 4.", None),
])
def test_an_answer_tool_call_written_flat(reply: str, answer: str | None) -> None:
    assert flat_answer(reply, "final_answer") == answer
