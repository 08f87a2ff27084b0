"""The call grammar made from tool schemas: its shape, its escaping, and that llama.cpp parses it.

The real parse (``LlamaGrammar.from_string`` in the llama-cpp-python venv) runs in a
subprocess and is marked ``real_server`` (that venv is CI's real-server one); everything
else reads the grammar text: every line must be a rule ``name ::= ...`` with a name made
here, and every literal must decode back to the exact JSON text of the name or value.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from ipyagent.models.profiles.grammar import BARE_CALL, FENCE, MAX_RULES, call_grammar, gbnf_literal
from ipyagent.models.profiles.syntax import HERMES, LLAMA3_JSON, MISTRAL, PHI4, SYNTAXES
from ipyagent.models.text_tools import FINAL_ANSWER_SPEC
from tests.helpers.llama_server import require_llama

PYTHON = {"name": "python", "description": "Run Python.",
          "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                         "required": ["code"], "additionalProperties": False}}
RICH = {"name": "plot", "parameters": {"type": "object", "properties": {
    "kind": {"type": "string", "enum": ["line", "bar"]},
    "points": {"type": "array", "items": {"type": "number"}},
    "size": {"type": "integer"},
    "style": {"type": "object", "properties": {"color": {"type": "string"},
                                               "bold": {"type": "boolean"}},
              "required": ["color"]},
    "title": {"type": ["string", "null"]},
    "mode": {"anyOf": [{"const": "fast"}, {"type": "integer"}]},
}, "required": ["kind", "points"]}}
# Names and values that would break or extend a grammar written carelessly.
NASTY = ['a"b', "back\\slash", "new\nline", 'x" | root ::= "pwned', "ünï\u202ecode",
         "emoji \U0001F600", "tab\tand\rcr", "]^-[", "\x00nul", "::=", "end\\"]
RULE = re.compile(r"^[a-z][a-z0-9-]* ::= ")


def _decode(literal: str) -> str:
    """A GBNF string literal back to its text (the escapes llama.cpp's parser reads)."""
    assert literal[0] == literal[-1] == '"'
    out, i, body = [], 0, literal[1:-1]
    while i < len(body):
        ch = body[i]
        assert ch != '"', f"an unescaped quote inside {literal!r}"
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        kind = body[i + 1]
        if kind in '"\\':
            out.append(kind)
            i += 2
        elif kind in "uU":
            width = 4 if kind == "u" else 8
            out.append(chr(int(body[i + 2:i + 2 + width], 16)))
            i += 2 + width
        else:
            raise AssertionError(f"unexpected escape \\{kind} in {literal!r}")
    return "".join(out)


def _literals(line: str) -> list[str]:
    return re.findall(r'"(?:[^"\\]|\\.)*"', line)


def _rules(grammar: str) -> dict[str, str]:
    rules = {}
    for line in grammar.strip().splitlines():
        assert RULE.match(line), f"not a rule line: {line!r}"
        name, body = line.split(" ::= ", 1)
        assert name not in rules, f"rule {name} defined twice"
        rules[name] = body
    return rules


def test_a_reply_is_text_then_optional_calls_of_the_offered_tools() -> None:
    rules = _rules(call_grammar([PYTHON, FINAL_ANSWER_SPEC]))
    assert rules["root"] == "ws ( lead calls? | calls )?"
    # The first character of text is not "{" (nor space): a call written as bare JSON would
    # be text the grammar does not hold; "<" and "`" go on in the automaton's own states.
    assert rules["lead"] == '"<" text1 | "`" text2 | [^<`{ \\u0009\\u000A] text0'
    assert rules["text0"] == '"" | "<" text1 | "`" text2 | "{" text3 | [^<`{] text0'
    assert _rules(call_grammar([PYTHON], say_something=True))["root"] == "ws ( lead calls? | calls )"
    assert rules["body"] == "t0-call | t1-call"
    # The tag, a ```json fence, or a bare object (the 0.5B's own way): each one held.
    assert rules["call"] == '"<tool_call>" ws body ws "</tool_call>" | "```json" ws body ws "```" | body'
    assert '"\\"python\\""' in rules["t0-call"] and "t0-args" in rules["t0-call"]
    assert rules["t0-args-head0"] == '"\\"code\\"" ws ":" ws string'  # required: no way around it
    # Every rule used is defined (llama.cpp refuses an undefined one).
    used = {n for body in rules.values() for n in re.findall(r"(?<![\"\w-])([a-z][a-z0-9-]*)(?![\"\w-])",
                                                               re.sub(r'"(?:[^"\\]|\\.)*"|\[[^\]]*\]', "", body))}
    assert used <= set(rules), used - set(rules)


def _class_chars(body: str) -> str:
    """The characters a GBNF class body lists (escapes read as llama.cpp reads them)."""
    out, i = [], 0
    while i < len(body):
        if body[i] == "\\" and body[i + 1] in "uU":
            width = 4 if body[i + 1] == "u" else 8
            out.append(chr(int(body[i + 2:i + 2 + width], 16)))
            i += 2 + width
        elif body[i] == "\\":
            out.append({"t": "\t", "n": "\n", "r": "\r"}.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def _accepts(rules: dict[str, str], text: str) -> bool:
    """Walk the text automaton (rules ``text*``) over ``text``: True when it accepts it."""
    texts = {n: b for n, b in rules.items() if n.startswith("text")}
    state = "text0"
    for ch in text:
        nxt = None
        for option in texts[state].split(" | "):
            if option.startswith('"') and option != '""':
                lit, target = option.rsplit(" ", 1)
                if _decode(lit) == ch:
                    nxt = target
            elif option.startswith("[^"):
                cls, target = option.rsplit(" ", 1)
                if ch not in _class_chars(cls[2:-1]) and nxt is None:
                    nxt = target
        if nxt is None:
            return False
        state = nxt
    return True


def test_free_text_can_never_hold_the_reserved_text() -> None:
    """Walk the text automaton: every prefix of a reserved word is a state, and no state has
    a way on with the character that completes one."""
    rules = _rules(call_grammar([PYTHON]))
    reserved = ("<tool", FENCE, BARE_CALL)

    assert _accepts(rules, "The answer is 42 < 43, see `x` and ``` code ```, {a: 1}, {\"x\": 2}.")
    assert _accepts(rules, "<to ol < tool ```js ```python\nprint(1)\n``` <t <too {\"nam")
    for word in reserved:
        assert not _accepts(rules, word) and not _accepts(rules, "hi " + word + " there")
        assert not _accepts(rules, "<" + word)
    assert not _accepts(rules, "<tool_response>2**100</tool_response>")  # a result it imagines
    assert not _accepts(rules, "<toolResponse>\n</toolResponse>\n3")  # its variant, seen at 1.5B
    assert not _accepts(rules, '>{"name": "python", "arguments": {}}')  # a bare call, seen at 0.5B


@pytest.mark.parametrize("syntax", list(SYNTAXES.values()), ids=list(SYNTAXES))
def test_each_syntax_writes_its_own_wrapper(syntax) -> None:  # type: ignore[no-untyped-def]
    rules = _rules(call_grammar([PYTHON], syntax))
    keys = [_decode(x) for x in _literals(rules["t0-call"])]
    assert json.dumps(syntax.arguments_key) in keys
    if syntax.open.strip():
        assert _decode(_literals(rules["call"])[0]) == syntax.open.strip()
    if syntax.as_list:
        assert '"[" ws body ( ws "," ws body )* ws "]"' in rules["call"]
    if syntax is LLAMA3_JSON:  # a bare object: text may not start as one does
        assert rules["root"] == "ws calls | prose" and rules["prose"].startswith('"" | [^{')


def test_schemas_become_rules_enums_required_nested_and_alternatives() -> None:
    rules = _rules(call_grammar([RICH]))
    kind = rules["t0-args-p0"]
    assert [_decode(x) for x in kind.split(" | ")] == ['"line"', '"bar"']
    assert rules["t0-args-p1"] == '"[" ws ( number ( ws "," ws number )* )? ws "]"'
    # required kind, points lead; the optional ones may each be left out
    assert rules["t0-args-head0"].startswith('"\\"kind\\"" ws ":" ws t0-args-p0 t0-args-tail1')
    assert rules["t0-args-tail1"].startswith('ws "," ws "\\"points\\""')
    assert rules["t0-args-tail2"].startswith('( ws "," ws "\\"size\\"" ws ":" ws integer )?')
    assert '"\\"color\\"" ws ":" ws string' in rules["t0-args-p3-head0"]
    assert rules["t0-args-p4"] == 'string | "null"'
    assert rules["t0-args-p5"] == '"\\"fast\\"" | integer'


def test_no_required_key_means_an_empty_object_is_fine() -> None:
    spec = {"name": "now", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}
    rules = _rules(call_grammar([spec]))
    assert rules["t0-args-head0"].endswith('| ""')


def test_a_huge_schema_gives_any_object_and_unknown_parts_any_value() -> None:
    props = {f"k{i}": {"type": "object", "properties": {f"j{j}": {"type": "string"} for j in range(40)}}
             for i in range(60)}
    grammar = call_grammar([{"name": "big", "parameters": {"type": "object", "properties": props}},
                            {"name": "ref", "parameters": {"type": "object", "properties": {
                                "x": {"$ref": "#/defs/x"}}, "required": ["x"]}}])
    rules = _rules(grammar)
    assert len(rules) < MAX_RULES + 100
    assert "object ws" in rules["t0-call"]  # too large: any object
    assert rules["t1-args-head0"] == '"\\"x\\"" ws ":" ws value'


@pytest.mark.parametrize("nasty", NASTY)
def test_tool_names_keys_and_enum_values_stay_data(nasty: str) -> None:
    spec = {"name": nasty, "parameters": {"type": "object", "properties": {
        nasty: {"type": "string", "enum": [nasty, "ok"]}}, "required": [nasty]}}
    grammar = call_grammar([spec, PYTHON])
    rules = _rules(grammar)  # every line is still one rule with a name made here
    assert set(rules) >= {"root", "body", "call", "calls", "t0-call", "t1-call"}
    assert "pwned" not in " ".join(rules)  # no rule of the schema's making
    name_literal = _literals(rules["t0-call"])[3]
    assert _decode(name_literal) == json.dumps(nasty, ensure_ascii=False)
    enum = [_decode(x) for x in _literals(rules["t0-args-p0"])]
    assert enum == [json.dumps(nasty, ensure_ascii=False), '"ok"']
    for body in rules.values():  # nothing outside printable ASCII is written raw
        assert all(0x20 <= ord(c) < 0x7F for c in body)


def test_literals_escape_everything_that_could_end_them() -> None:
    for text in NASTY:
        literal = gbnf_literal(text)
        assert _decode(literal) == text
        assert "\n" not in literal and "\r" not in literal


def test_no_tool_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no tool"):
        call_grammar([{"description": "nameless"}])


# ``LlamaGrammar.from_string`` (llama-cpp-python 0.3.36) only stores the text: the grammar is
# parsed when a sampler is made from it, against a model's vocabulary (read alone: fast).
_PARSE = """
import sys, llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
for path in sys.argv[2:]:
    text = open(path, encoding="utf-8").read()
    sampler = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, text.encode("utf-8"), b"root")
    print("parsed" if sampler else "REFUSED")
    if sampler:
        llama_cpp.llama_sampler_free(sampler)
"""


def _llama_parses(grammars: list[str], tmp_path: Path) -> list[str]:
    """For each grammar, what llama.cpp's own parser made of it: "parsed" or "REFUSED"."""
    python, model = require_llama("smollm2-135m")
    paths = []
    for i, grammar in enumerate(grammars):
        paths.append(tmp_path / f"g{i}.gbnf")
        paths[-1].write_text(grammar, encoding="utf-8")
    done = subprocess.run([str(python), "-c", _PARSE, str(model), *map(str, paths)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


@pytest.mark.real_server
def test_llama_cpp_parses_every_grammar_made_here(tmp_path: Path) -> None:
    nasty_spec = {"name": NASTY[3], "parameters": {"type": "object", "properties": {
        n: {"type": "string", "enum": NASTY} for n in NASTY}, "required": NASTY[:3]}}
    grammars = [call_grammar([PYTHON, FINAL_ANSWER_SPEC]), call_grammar([RICH, nasty_spec]),
                call_grammar([PYTHON], allow_text=False), call_grammar([PYTHON], say_something=True),
                call_grammar([PYTHON], allow_text=False, one_call=True)]
    grammars += [call_grammar([PYTHON, RICH], s) for s in (HERMES, LLAMA3_JSON, MISTRAL, PHI4)]
    # The check can fail: a grammar with an undefined rule is refused.
    broken = call_grammar([PYTHON]).replace("body ::=", "bodx ::=")
    assert _llama_parses([*grammars, broken], tmp_path) == ["parsed"] * len(grammars) + ["REFUSED"]


def test_strings_may_hold_raw_newlines_and_tabs_but_no_other_control() -> None:
    # Measured at 1.5B: forbidding the raw newlines Qwen2.5-Coder writes in its code made it
    # write the code on one line (a SyntaxError); lenient_json reads them.
    raw_class = _rules(call_grammar([PYTHON]))["char"].split(" | ")[0]
    char = re.compile(raw_class)  # a GBNF character class reads the same as a Python one
    assert all(char.fullmatch(c) for c in "a\n\t\r é😀")
    assert not any(char.fullmatch(c) for c in '"\\\x00\x07\x0b\x1b\x7f')


def test_strings_may_hold_a_backslash_before_any_printable_character() -> None:
    """At 1.5B, strict JSON escapes only left no way to write a regex's ``\\w`` with one
    backslash: the model wrote ``re.findall(r'', …)``. lenient_json keeps ``\\w`` as written."""
    from ipyagent.models.lenient_json import loads

    char = _rules(call_grammar([PYTHON]))["char"]
    assert '"\\\\" ( ["\\\\/bfnrt] | "u" hex hex hex hex | [^"\'\\\\/bfnrtu\\x00-\\x1F\\x7F] )' in char
    assert loads('{"code": "re.findall(r\'\\w+\\.\\d\', t)"}') == {"code": "re.findall(r'\\w+\\.\\d', t)"}
