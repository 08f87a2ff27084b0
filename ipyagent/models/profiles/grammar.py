"""A GBNF grammar from the tool schemas: a reply is free text, or text and then calls.

llama.cpp's servers constrain decoding to a GBNF grammar (llama-cpp-python's ``grammar``
field; llama-server's ``grammar``). The grammar made here allows exactly two kinds of reply,
so a small model can still answer in words but cannot write a malformed call:

- text that never contains the syntax's reserved text (``<tool`` for ``<tool_call>``) or
  a ```` ```json ```` fence, and
- such text, then one or more calls in the profile's ``CallSyntax`` (or in a ```` ```json ````
  fence, the way small models write them unasked), each naming an offered
  tool with arguments that match its JSON schema (strings, numbers, integers, booleans,
  null, enums and consts, arrays, nested objects with their required keys, anyOf/oneOf,
  type lists), then nothing but whitespace.

Everything in a schema is data: tool names, enum values and keys reach the grammar only as
JSON text inside escaped GBNF literals, and rule names are made here (``t0-args``), never
from a schema. A schema part this generator does not model (``$ref``, patterns) accepts any
JSON value there; objects list their keys in the schema's order, optional ones may be left
out. A schema too large to constrain well (``MAX_RULES``) gives arguments as any JSON object.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from .syntax import HERMES, CallSyntax

__all__ = ["call_grammar", "gbnf_literal", "MAX_RULES", "FENCE", "BARE_CALL"]

MAX_RULES = 1500  # beyond this a tool's arguments are any JSON object
MAX_DEPTH = 8  # schema nesting followed; deeper parts accept any JSON value
# A string may hold raw newlines, tabs and carriage returns (strict JSON may not). Why:
# Qwen2.5-Coder writes its code with raw newlines (``lenient_json`` reads them); a grammar
# that forbade them made it write the code on one line: a SyntaxError (measured at 1.5B).
# And a backslash before any other printable character (``\w``, ``\d``, ``\.``), kept as
# written by ``lenient_json``: strict JSON's escapes only left the 1.5B no way to write a
# regex's ``\w`` with one backslash, and it wrote ``re.findall(r'', …)`` (a fresh5 task).
# Not before ``'``: allowed, the 0.5B wrote ``open('poem.txt', \'r\')`` (lenient_json reads
# ``\'`` as ``'``, as it must for a single-quoted string; it broke Python's ``'it\'s'``).

_BASE = r'''
ws ::= [ \t\n]{0,20}
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* )? ws "}"
array ::= "[" ws ( value ( ws "," ws value )* )? ws "]"
string ::= "\"" char* "\""
char ::= [^"\\\x7F\x00-\x08\x0B\x0C\x0E-\x1F] | "\\" ( ["\\/bfnrt] | "u" hex hex hex hex | [^"'\\/bfnrtu\x00-\x1F\x7F] )
hex ::= [0-9a-fA-F]
integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
number ::= integer ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
boolean ::= "true" | "false"
'''.strip()


def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal: quotes, backslashes and every character outside
    printable ASCII escaped, so no text can end the literal or the rule."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04X}")
        else:
            out.append(f"\\U{code:08X}")
    return '"' + "".join(out) + '"'


def _json_literal(value: Any) -> str:
    """The GBNF literal of ``value`` written as JSON (how the model must write it)."""
    return gbnf_literal(json.dumps(value, ensure_ascii=False))


class _Rules:
    def __init__(self) -> None:
        self.rules: dict[str, str] = {}

    def add(self, name: str, body: str) -> str:
        self.rules[name] = body
        return name

    def schema(self, name: str, schema: Any, depth: int = 0) -> str:
        """A rule (or an expression) for values matching ``schema``."""
        if depth > MAX_DEPTH or not isinstance(schema, dict) or len(self.rules) > MAX_RULES:
            return "value"
        if "const" in schema:
            return _json_literal(schema["const"])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self.add(name, " | ".join(_json_literal(v) for v in schema["enum"]))
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                return self.add(name, " | ".join(
                    self.schema(f"{name}-{i}", option, depth + 1) for i, option in enumerate(options)))
        kind = schema.get("type")
        if isinstance(kind, list):
            return self.add(name, " | ".join(
                self.schema(f"{name}-{i}", {**schema, "type": k}, depth + 1) for i, k in enumerate(kind)))
        if kind == "string":
            return "string"
        if kind == "integer":
            return "integer"
        if kind == "number":
            return "number"
        if kind == "boolean":
            return "boolean"
        if kind == "null":
            return '"null"'
        if kind == "array":
            item = self.schema(f"{name}-item", schema.get("items"), depth + 1) if "items" in schema else "value"
            return self.add(name, f'"[" ws ( {item} ( ws "," ws {item} )* )? ws "]"')
        if kind == "object" or "properties" in schema:
            return self.object(name, schema, depth)
        return "value"

    def object(self, name: str, schema: dict[str, Any], depth: int) -> str:
        props = schema.get("properties")
        if not isinstance(props, dict) or not props:
            return "object"
        required = set(schema.get("required") or []) if isinstance(schema.get("required"), list) else set()
        keys = list(props)
        pairs = [f"{_json_literal(key)} ws \":\" ws {self.schema(f'{name}-p{i}', props[key], depth + 1)}"
                 for i, key in enumerate(keys)]
        n = len(keys)
        # head(i): nothing written yet from key i on; tail(i): a key was written, commas lead.
        for i in reversed(range(n)):
            nxt_tail = f"{name}-tail{i + 1}" if i + 1 < n else ""
            nxt_head = f"{name}-head{i + 1}" if i + 1 < n else ""
            kv = f"{pairs[i]} {nxt_tail}".strip()
            if keys[i] in required:
                if i:
                    self.add(f"{name}-tail{i}", f'ws "," ws {kv}')
                self.add(f"{name}-head{i}", kv)
            else:
                if i:
                    self.add(f"{name}-tail{i}", f'( ws "," ws {pairs[i]} )? {nxt_tail}'.strip())
                self.add(f"{name}-head{i}", f"{kv} | {nxt_head}" if nxt_head else f'{kv} | ""')
        return self.add(name, f'"{{" ws {name}-head0 ws "}}"')


def _without(words: tuple[str, ...], rules: _Rules, lead: str = "") -> str:
    """Rules for text that never contains any of ``words``: an automaton whose states are
    the words' prefixes (the longest one the text ends with), one rule per state.
    ``lead``: the text is not empty and its first character is none of these (the rule
    returned is then ``lead``, which goes on as ``text0``)."""
    prefixes = sorted({w[:i] for w in words for i in range(len(w))}, key=lambda p: (len(p), p))
    number = {p: i for i, p in enumerate(prefixes)}

    def step(state: str, ch: str) -> str | None:
        seen = state + ch
        if any(seen.endswith(w) for w in words):
            return None  # a word completed: not allowed
        return next(seen[i:] for i in range(len(seen) + 1) if seen[i:] in number)

    alphabet = sorted({c for w in words for c in w})
    for state in prefixes:
        options = ['""']
        moves = {ch: step(state, ch) for ch in alphabet}
        for ch, target in moves.items():
            if target:  # a longer prefix; None (a word) has no way on
                options.append(f"{gbnf_literal(ch)} text{number[target]}")
        # Every other character starts over.
        listed = "".join(_class_char(c) for c, t in moves.items() if t != "")
        options.append(f"[^{listed}] text0")
        rules.add(f"text{number[state]}", " | ".join(options))
        if state == "" and lead:  # the first character: not empty, and none of ``lead``
            extra = "".join(_class_char(c) for c in lead if c not in listed)
            starts = [o for c, o in zip([c for c, t in moves.items() if t], options[1:-1])
                      if c not in lead]
            rules.add("lead", " | ".join(starts + [f"[^{listed}{extra}] text0"]))
    return "lead" if lead else "text0"


def _class_char(ch: str) -> str:
    """``ch`` escaped for a GBNF character class."""
    code = ord(ch)
    if ch in "]\\^-[":
        return "\\" + ch
    if 0x20 <= code < 0x7F:
        return ch
    return f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


# The shape small models write a call in whatever they were asked (recorded: Qwen2.5-Coder
# 0.5B and 1.5B in text mode): allowed as a call, so the grammar follows the model instead
# of fighting it, and reserved in free text, so such a block is always a well-formed call.
FENCE = "```json"
# A call written as bare JSON inside text (measured at 0.5B, after a first character the
# grammar allowed: '>{"name": "python", …}'): reserved in the text of tagged syntaxes.
BARE_CALL = '{"name"'


def call_grammar(specs: Sequence[dict[str, Any]], syntax: CallSyntax = HERMES, *,
                 allow_text: bool = True, say_something: bool = False,
                 one_call: bool = False) -> str:
    """The GBNF grammar of a reply to a request offering the tools ``specs``.

    A call is written in ``syntax``, as one object in a ```` ```json ```` fence, or (where
    the syntax has a tag) as one bare object.
    ``allow_text``: free text (without ``syntax.reserved_text`` or the fence, and not
    starting with ``{``) is a reply too, alone or before the calls; else only calls.
    Measured at 0.5B: free text that could start with ``{`` held calls written as bare
    JSON, outside the grammar (``{"name": "final_answer", "answer": "14.6"}``, arguments
    cut off mid-string); without it, the same reply came as a held ```` ```json ```` call. ``say_something``: the reply is not
    empty (text that starts with a visible character other than ``<`` and a backtick, or calls).
    ``one_call`` (with ``allow_text=False``): exactly one call (measured at 1.5B: held to
    calls, the model wrote the same failing call five times in one reply).
    """
    rules = _Rules()
    bodies = []
    for i, spec in enumerate(specs):
        plain = spec.get("function", spec) if spec.get("type") == "function" else spec
        name = plain.get("name")
        if not isinstance(name, str) or not name:
            continue
        before = len(rules.rules)
        args = rules.schema(f"t{i}-args", plain.get("parameters") or {"type": "object"})
        if len(rules.rules) > MAX_RULES:  # too large to constrain well: any object
            for key in list(rules.rules)[before:]:
                del rules.rules[key]
            args = "object"
        if args not in ("object", "value") and not args.startswith("t"):
            args = "object"  # a non-object schema: the arguments are still an object
        rules.add(f"t{i}-call", f'"{{" ws "\\"name\\"" ws ":" ws {_json_literal(name)} ws "," ws '
                                f'{gbnf_literal(json.dumps(syntax.arguments_key))} ws ":" ws {args} ws "}}"')
        bodies.append(f"t{i}-call")
    if not bodies:
        raise ValueError("no tool with a name to build a call grammar for")
    rules.add("body", " | ".join(bodies))
    open_tag, close_tag = syntax.open.strip(), syntax.close.strip()
    inner = 'ws "[" ws body ( ws "," ws body )* ws "]" ws' if syntax.as_list else "ws body ws"
    call = " ".join(p for p in (gbnf_literal(open_tag) if open_tag else "", inner,
                                gbnf_literal(close_tag) if close_tag else "") if p)
    # Also a bare object where the syntax has a tag (measured at 0.5B: its calls come bare;
    # refused that form, it wrote a fence whose code gained a stray '}' before the quote).
    bare = " | body" if open_tag else ""
    rules.add("call", f'{call} | {gbnf_literal(FENCE)} ws body ws "```"{bare}')
    rules.add("calls", "call ( ws call )* ws")
    reserved = (*syntax.reserved_text, FENCE)
    if open_tag:  # a bare JSON call is not a form of this syntax: never in text either
        reserved += (BARE_CALL,)
    if not allow_text:
        root = "ws call ws" if one_call else "ws calls"
    elif open_tag:  # text never starts as JSON does: a call is written in a form held here
        lead = _without(reserved, rules, lead="{ \t\n")
        root = f"ws ( {lead} calls? | calls )" + ("" if say_something else "?")
    else:  # a bare JSON call: text is a reply that does not start as JSON does
        rules.add("prose", f'"" | [^{{ \\t\\n] {_without(reserved, rules)}')
        root = "ws calls | prose"
    lines = [f"root ::= {root}"] + [f"{k} ::= {v}" for k, v in rules.rules.items()]
    return "\n".join(lines) + "\n" + _BASE + "\n"
