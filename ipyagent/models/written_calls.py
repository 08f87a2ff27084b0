"""Tool calls the model wrote as text: found, parsed leniently, made into ``ToolCall``s.

Why: served without a tool-call parser (llama-cpp-python with the model's own template,
a llama.cpp server without ``--jinja``, any server in ``Agent.tool_mode = "text"``), a
model *writes* its calls: ``<tool_call>{…}</tool_call>`` (Hermes, Qwen), a ```` ```json ````
or ```` ```tool_call ```` fence, ``<|python_tag|>`` (Llama 3.1), ``<function=NAME>{…}</function>``,
``functions.NAME: {…}``, Mistral's ``[TOOL_CALLS] […]``, Phi-4-mini's ``<|tool_call|>[…]``, or a bare ``{"name": …, "arguments": …}`` object. The stream then
carries only text and the run would end ``done`` with a call as its "answer".

Only the assistant's own reply text is read (never a tool result, never reasoning), and
only a call naming an **offered** tool counts: JSON in an explanation, a code example in
a ```` ```python ```` fence, or a call of a tool the persona hides stays text. A call of an
offered tool whose arguments cannot be read still becomes a call, marked with the problem,
so the model is told exactly how to write it (``how_to_call``) instead of being ignored.
"""

from __future__ import annotations

import html
import io
import json
import re
import tokenize
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..context.items import ToolCall, new_call_id
from .lenient_json import LenientJSONError, loads, parse_prefix

__all__ = ["WrittenCall", "SHAPES", "find_written_calls", "recover_calls", "how_to_call", "canonical_call",
           "flat_answer", "shown_code", "CALL_FENCES", "CALL_STARTS",
           "line_breaks_in_strings_repaired", "blocks_on_one_line_repaired", "FROM_TEXT", "PROBLEM", "REPAIRED"]

FROM_TEXT = "from_text"  # ToolCall.meta key: the call was recovered from the reply's text
REPAIRED = "repaired"  # ToolCall.meta key: what ipyagent changed in the written code, and why
PROBLEM = "written_problem"  # ToolCall.meta key: why its written arguments could not be read

_TAGS = re.compile(r"<(tool_call|function_call)>(.*?)(?:</\1>|$)", re.S)
_FUNCTION_TAG = re.compile(r"<function=([\w.-]+)>(.*?)(?:</function>|$)", re.S)
_MISTRAL = re.compile(r"\[TOOL_CALLS\](.*?)(?:</s>|$)", re.S)
_PHI_TAG = re.compile(r"<\|tool_call\|>(.*?)(?:<\|/tool_call\|>|$)", re.S)
_PYTHON_TAG = re.compile(r"<\|python_tag\|>(.*?)(?:<\|eom_id\|>|<\|eot_id\|>|$)", re.S)
_FENCE = re.compile(r"```[ \t]*([\w-]*)[^\n]*\n(.*?)(?:```|$)", re.S)
_FUNCTIONS_DOT = re.compile(r"\bfunctions\.([\w-]+)(?:\s*:\s*|\s*(?=\{))")
_NAME = re.compile(r"""["']?name["']?\s*:\s*["']([^"'\n]+)["']""")
# Fences whose language says "this is a call" (or says nothing); other languages are code.
CALL_FENCES = frozenset({"", "json", "json5", "tool_call", "tool_code", "tool", "function_call"})
# How a written call (other than in a fence) starts: the tags and forms ``SHAPES`` reads.
CALL_STARTS = ("<tool_call>", "<function_call>", "<|python_tag|>", "<function=", "[TOOL_CALLS]",
               "<|tool_call|>", "{", "functions.")


@dataclass
class WrittenCall:
    """One call found in the text: ``arguments`` None when they could not be read."""

    name: str
    arguments: dict[str, Any] | None
    written: str  # the call as the model wrote it
    problem: str | None = None


def canonical_call(name: str, arguments: dict[str, Any] | str) -> str:
    """The one way ipyagent writes a call as text (the Hermes/Qwen format)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return f'<tool_call>\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {args}}}\n</tool_call>'


def how_to_call(name: str, problem: str, example: dict[str, Any] | None = None) -> str:
    """What the model reads when its written call of ``name`` could not be read."""
    sample = example if example is not None else {"...": "..."}
    return (f"Your call of the tool {name!r} was not run: its arguments could not be read "
            f"({problem}). Write the call exactly like this, the arguments as one JSON object "
            "(strings in double quotes, a newline inside a string written as \\n):\n"
            + canonical_call(name, sample))


def find_written_calls(text: str, offered: Iterable[str],
                       first: str | None = None) -> tuple[str, list[WrittenCall]]:
    """``(the text around the calls, the calls)``, in the order written; ``text`` unchanged
    and no calls when it holds no call of an offered tool. ``first``: the shape (one of
    ``SHAPES``) the model's profile writes, looked for before the others."""
    tools = set(offered)
    if not tools or not text.strip():
        return text, []
    around, calls = _find(text, tools, first)
    if not calls and _ESCAPED_TAG.search(text):
        # A chat template that HTML-escapes messages (llama-cpp-python's
        # chatml-function-calling) teaches the model to write its calls escaped too.
        around, calls = _find(html.unescape(text), tools, first)
        if not calls:
            return text, []
    return around, calls


_ESCAPED_TAG = re.compile(r"&lt;/?(?:tool_call|function_call)&gt;|&#34;name&#34;|&quot;name&quot;")


SHAPES = ("tags", "mistral", "phi", "function_tag", "python_tag", "fence", "functions_dot", "bare")


def _find(text: str, tools: set[str], first: str | None = None) -> tuple[str, list[WrittenCall]]:
    found: list[tuple[int, int, list[WrittenCall]]] = []  # (start, end, calls) spans
    taken: list[tuple[int, int]] = []

    def free(start: int, end: int) -> bool:
        return all(end <= a or start >= b for a, b in taken)

    def take(start: int, end: int, calls: list[WrittenCall]) -> None:
        taken.append((start, end))
        if calls:
            found.append((start, end, calls))

    def tags() -> None:
        for m in _TAGS.finditer(text):
            if free(m.start(), m.end()):
                take(m.start(), m.end(), _calls_in(m.group(2), tools, tagged=True))

    def tagged(pattern: re.Pattern[str]) -> None:
        for m in pattern.finditer(text):
            if free(m.start(), m.end()):
                take(m.start(), m.end(), _calls_in(m.group(1), tools, tagged=True))

    def function_tag() -> None:
        for m in _FUNCTION_TAG.finditer(text):
            if free(m.start(), m.end()):
                take(m.start(), m.end(), _named(m.group(1), m.group(2), tools, m.group(0)))

    def python_tag() -> None:
        for m in _PYTHON_TAG.finditer(text):
            if free(m.start(), m.end()):
                take(m.start(), m.end(), _python_tag(m.group(1), tools, m.group(0)))

    def fence() -> None:
        for m in _FENCE.finditer(text):
            if not free(m.start(), m.end()):
                continue
            language = m.group(1).lower()
            if language in CALL_FENCES:
                take(m.start(), m.end(), _calls_in(m.group(2), tools, tagged=language.startswith("tool")))
            else:
                taken.append((m.start(), m.end()))  # code shown, not called: never looked into

    def functions_dot() -> None:
        for m in _FUNCTIONS_DOT.finditer(text):
            if free(m.start(), m.end()):
                end, calls = _after_name(text, m.end(), m.group(1), tools)
                take(m.start(), end, calls)

    finders = {"tags": tags, "mistral": lambda: tagged(_MISTRAL), "phi": lambda: tagged(_PHI_TAG),
               "function_tag": function_tag, "python_tag": python_tag, "fence": fence,
               "functions_dot": functions_dot,
               "bare": lambda: _bare_objects(text, tools, free, take)}
    # The profile's own shape is looked for first: where two shapes overlap, it wins.
    for shape in sorted(SHAPES, key=lambda s: s != first):
        finders[shape]()
    if not found:
        return text, []
    found.sort(key=lambda span: span[0])
    kept, position = [], 0
    for start, end, _ in found:
        kept.append(text[position:start])
        position = end
    kept.append(text[position:])
    # A small model may go on to write the result it imagines: that is not what ran.
    around = "".join(kept).split("<tool_response", 1)[0]
    around = re.sub(r"\n{3,}", "\n\n", around).strip()
    return around, [call for _, _, calls in found for call in calls]


def recover_calls(text: str, offered: Iterable[str],
                  first: str | None = None) -> tuple[str, list[ToolCall]]:
    """``find_written_calls`` as ``ToolCall``s marked ``meta["from_text"]``; a call whose
    arguments could not be read keeps what was written in ``raw_arguments``."""
    around, written = find_written_calls(text, offered, first)
    calls = []
    for w in written:
        meta: dict[str, Any] = {FROM_TEXT: True}
        arguments = w.arguments
        if arguments is None:
            meta[PROBLEM] = w.problem or "unreadable arguments"
        elif w.name == "python" and isinstance(arguments.get("code"), str):
            code, why = repaired_code(arguments["code"])
            if why:
                arguments = {**arguments, "code": code}
                meta[REPAIRED] = why
        calls.append(ToolCall(new_call_id(), w.name, arguments or {},
                              None if arguments is not None else w.written, meta))
    return around, calls


def repaired_code(code: str) -> tuple[str, str]:
    """A python call's ``code`` after the repairs below, and what they did ("" for none).
    Each mends only what cannot be meant (a control character no code means, a SyntaxError),
    so it applies to every python call, written as text or called natively."""
    why = []
    if "\b" in code or "\f" in code:
        # JSON reads a regex's \b as a backspace (and \f as a form feed): never meant as
        # such in code, and a raw one breaks r'\b\w+\b'.
        code = code.replace("\b", "\\b").replace("\f", "\\f")
        why.append("\\b and \\f that JSON read as control characters written back")
    if _compiles(code):  # the usual call: each repair below mends only a SyntaxError
        return code, "; ".join(why)
    repaired = line_breaks_in_strings_repaired(code)
    if repaired is not None:
        code = repaired
        why.append("line breaks inside a string literal written as \\n")
    repaired = leading_zeros_repaired(code)
    if repaired is not None:
        code = repaired
        why.append("leading zeros taken off whole numbers (06 is 6)")
    kinds: set[str] = set()
    repaired = blocks_on_one_line_repaired(code, kinds=kinds)
    if repaired is not None:
        code = repaired
        after = " or ".join(w for k, w in ((";", "';'"), (":", "another block's ':'")) if k in kinds)
        why.append(f"a block statement after {after} moved to a line of its own")
    return code, "; ".join(why)


def _compiles(code: str) -> bool:
    """True when ``code`` compiles, or is too long for any repair to look at."""
    if len(code) > 100_000:
        return True
    try:
        compile(code, "<call>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
        return False
    return True


def _repaired_where_it_fails(code: str, fix: Callable[[list[str], SyntaxError], bool],
                             limit: int = 20) -> str | None:
    """``code`` after ``fix`` mended its lines where each ``SyntaxError`` points, until it
    compiles, ``fix`` says it cannot help (False) or ``limit`` tries; None when nothing
    changed. Only compiled, never run."""
    if len(code) > 100_000:
        return None
    lines = code.split("\n")
    for _ in range(limit):
        try:
            compile("\n".join(lines), "<call>", "exec", dont_inherit=True)
            break
        except SyntaxError as exc:
            if not fix(lines, exc):
                break
        except (ValueError, OverflowError, RecursionError, MemoryError):
            return None
    repaired = "\n".join(lines)
    return repaired if repaired != code else None


_LEADING_ZEROS = "leading zeros in decimal integer literals"


def leading_zeros_repaired(code: str, limit: int = 20) -> str | None:
    """``code`` with the leading zeros Python refuses taken off its whole numbers
    (``datetime(2026, 12, 06)`` → ``6``), each where the compiler points; None when there is
    none. Why: at 1.5B, a date written so failed with this SyntaxError, and the model wrote
    the same call four more times. ``06`` means 6 to anyone who writes a date (Python 2's
    octal reading ended with it). The repair is what the person approves."""

    def fix(lines: list[str], exc: SyntaxError) -> bool:
        at, col = (exc.lineno or 0) - 1, (exc.offset or 0) - 1
        if _LEADING_ZEROS not in str(exc.msg) or not 0 <= at < len(lines):
            return False
        line = lines[at]
        zeros = re.match(r"0+(?=\d)", line[col:]) if 0 <= col < len(line) else None
        if zeros is None or (col and (line[col - 1].isalnum() or line[col - 1] in "._")):
            return False
        lines[at] = line[:col] + line[col + zeros.end():]
        return True

    return _repaired_where_it_fails(code, fix, limit)


_UNTERMINATED = re.compile(r"unterminated (?:f-)?string literal")


def line_breaks_in_strings_repaired(code: str, limit: int = 20) -> str | None:
    """``code`` with each line break that splits a one-line string literal written as
    ``\\n``; None when no such break keeps it from compiling.

    Why: a model writing Python inside JSON writes ``'a\\n'`` as ``"'a\n'"``, which JSON
    reads as a real line break in the string: ``SyntaxError: unterminated string literal``
    (measured at 1.5B, editing an .ini file, in two runs of two). Such a break is never
    valid Python, so the repair is safe even when another error remains (the model then
    reads that one). The repaired code is what the person approves.
    """

    def fix(lines: list[str], exc: SyntaxError) -> bool:
        at = (exc.lineno or 0) - 1
        if not _UNTERMINATED.search(str(exc.msg)) or not 0 <= at < len(lines) - 1:
            return False
        lines[at:at + 2] = [lines[at] + "\\n" + lines[at + 1]]
        return True

    return _repaired_where_it_fails(code, fix, limit)


_BLOCKS = frozenset({"with", "for", "if", "while", "try", "def", "class", "async"})


def blocks_on_one_line_repaired(code: str, limit: int = 20,
                                     kinds: set[str] | None = None) -> str | None:
    """``code`` with each block statement that follows ``;`` on one line moved to a line of
    its own, at that line's indentation, and each that follows another block's ``:`` (``for
    k, v in d.items(): if v == 0: print(k)``) moved to a line of its own one level deeper;
    None unless that makes it compile.

    Why: ``import re; with open('app.log') as f: print(…)`` is a SyntaxError, and a small
    model asked to fix it writes it again word for word (measured at 1.5B on three tasks of
    thirty, after a note that said what was wrong; and on a ``for …: if …:`` line once). A
    statement after ``;`` is at the same level as the one before it, so the block is too;
    ``with a: x; with b: y`` reads as two blocks one after the other (the only way it ran
    as written nowhere); a block after a header's colon is that header's body. Only
    compiled, never run; the repaired code is what the person approves. ``kinds`` gets the
    marks a block was moved after (``;``, ``:``)."""
    if len(code) > 100_000 or (";" not in code and ":" not in code):
        return None
    try:
        compile(code, "<call>", "exec", dont_inherit=True)
        return None  # valid as written: nothing to repair
    except SyntaxError:
        pass
    except (ValueError, OverflowError, RecursionError, MemoryError):
        return None
    lines = code.split("\n")
    moved: set[str] = set()
    for _ in range(limit):
        spot = _block_on_one_line(lines)
        if spot is None:
            return None
        row, cut, block, nested = spot
        moved.add(":" if nested else ";")
        line = lines[row]
        indent = line[:len(line) - len(line.lstrip())] + ("    " if nested else "")
        lines[row:row + 1] = [line[:cut + 1 if nested else cut].rstrip(), indent + line[block:]]
        try:
            compile("\n".join(lines), "<call>", "exec", dont_inherit=True)
        except SyntaxError:
            continue
        except (ValueError, OverflowError, RecursionError, MemoryError):
            return None
        if kinds is not None:
            kinds |= moved
        return "\n".join(lines)
    return None


def _block_on_one_line(lines: list[str]) -> tuple[int, int, int, bool] | None:
    """(line index, column of the ';' or ':', column of the keyword, whether it follows a
    ':') of the first ``; with``- or ``: if``-like spot outside brackets and strings; None
    when there is none (or the code cannot be tokenized)."""
    source = "\n".join(lines) + "\n"
    depth, after = 0, None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.OP and tok.string in "([{":
                depth += 1
            elif tok.type == tokenize.OP and tok.string in ")]}":
                depth -= 1
            elif tok.type == tokenize.OP and tok.string in (";", ":") and depth == 0:
                after = tok
                continue
            elif (after is not None and tok.type == tokenize.NAME
                  and tok.string in _BLOCKS and tok.start[0] == after.start[0]):
                return tok.start[0] - 1, after.start[1], tok.start[1], after.string == ":"
            after = None
    except (tokenize.TokenError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return None


def flat_answer(text: str, name: str) -> str | None:
    """The answer of a reply that is only ``{"name": NAME, "answer": …}`` or ``{NAME: …}`` —
    an answer tool's call with its arguments not nested (Qwen2.5-Coder-0.5B writes
    ``final_answer`` both ways); None for anything else. An answer tool runs nothing, so reading it this leniently
    risks only the answer's text."""
    body = text.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    if not body.startswith("{"):
        return None
    try:
        value = loads(body)
    except ValueError:
        return None
    if isinstance(value, dict) and value.get("name") == name and "answer" in value:
        answer = value["answer"]
    elif isinstance(value, dict) and list(value) == [name]:  # {"final_answer": "2.14"} (0.5B)
        answer = value[name]
    else:
        return None
    return answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)


_PYTHON_OPEN = re.compile(r"```[ \t]*(?:python3?|py|ipython)[ \t]*", re.I)


def shown_code(text: str) -> tuple[str, str] | None:
    """``(the text around, the code)`` of the one complete ```` ```python ```` block in a
    reply, when the code compiles; None for no block, several (alternatives as often as
    steps), one left open, or code that does not compile.

    Why: asked to use Python, Qwen2.5-Coder-1.5B answers three tasks of thirty with a block
    and "when you run this code, it will output …" instead of a call; asked again, it rewrote
    one as a one-line call and dropped the line that made the column it sorts by. The engine
    decides when a shown block is taken as the call (``engine/step``); only compiled here,
    never run. One pass over the lines (a reply of repeated fences is read in linear time)."""
    if len(text) > 100_000:
        return None
    lines = text.split("\n")
    blocks: list[tuple[int, int]] = []  # (opening line, closing line)
    opened: int | None = None
    for i, line in enumerate(lines):
        if opened is None:
            if _PYTHON_OPEN.fullmatch(line):
                opened = i
            elif line.lstrip().startswith("```"):
                return None  # another fence: a reply of several parts is not one block shown
        elif line.strip() == "```":
            blocks.append((opened, i))
            opened = None
    if opened is not None or len(blocks) != 1:
        return None
    first, last = blocks[0]
    code = "\n".join(lines[first + 1:last]).rstrip("\n")
    if not code.strip():
        return None
    try:
        compile(code, "<block>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
        return None
    around = ("\n".join(lines[:first]).rstrip() + "\n\n" + "\n".join(lines[last + 1:]).lstrip()).strip()
    return around, code


# -- the shapes ------------------------------------------------------------------------------
def _calls_in(body: str, tools: set[str], *, tagged: bool) -> list[WrittenCall]:
    """Calls in a tag's or fence's body: one object, a list of them, or several in a row."""
    stripped = body.strip()
    if not stripped.startswith(("{", "[")):
        return []
    try:
        value = loads(stripped)
        values: list[Any] = value if isinstance(value, list) else [value]
    except LenientJSONError:
        in_a_row = _objects_in_a_row(stripped)
        if in_a_row is None:
            return _unreadable(stripped, tools)
        values = in_a_row
    calls = []
    for v in values:
        call = _call_of(v, tools, stripped, require_arguments=not tagged)
        if call is not None:
            calls.append(call)
    return calls


def _objects_in_a_row(text: str) -> list[Any] | None:
    """``{…}\\n{…}``: several objects one after another (None: not that either)."""
    values, i = [], 0
    try:
        while i < len(text):
            value, i = parse_prefix(text, i)
            values.append(value)
            while i < len(text) and text[i] in " \t\r\n,;":
                i += 1
    except LenientJSONError:
        return None
    return values


def _call_of(value: Any, tools: set[str], written: str, *,
             require_arguments: bool) -> WrittenCall | None:
    """The call ``value`` (a parsed object) is, if it names an offered tool."""
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("function"), dict):  # {"type": "function", "function": {...}}
        value = value["function"]
    name = value.get("name")
    if not isinstance(name, str) or name not in tools:
        return None
    key = next((k for k in ("arguments", "parameters", "args", "input") if k in value), None)
    if key is None:
        if require_arguments:
            return None
        return WrittenCall(name, {}, written)
    return _with_arguments(name, value[key], written)


def _with_arguments(name: str, arguments: Any, written: str) -> WrittenCall:
    if isinstance(arguments, str):  # encoded twice, as JSON in a string
        try:
            arguments = loads(arguments) if arguments.strip() else {}
        except LenientJSONError as exc:
            return WrittenCall(name, None, written, f"the arguments are a string, not an object ({exc})")
    if not isinstance(arguments, dict):
        return WrittenCall(name, None, written,
                           f"the arguments are {type(arguments).__name__}, not an object")
    return WrittenCall(name, arguments, written)


def _unreadable(body: str, tools: set[str]) -> list[WrittenCall]:
    """A call body that is not even lenient JSON: a call with a problem if it names a tool."""
    m = _NAME.search(body)
    if m is None or m.group(1) not in tools:
        return []
    try:
        loads(body)
        problem = "no arguments object"
    except LenientJSONError as exc:
        problem = str(exc)
    return [WrittenCall(m.group(1), None, body, problem)]


def _named(name: str, body: str, tools: set[str], written: str) -> list[WrittenCall]:
    """``<function=NAME>{…}</function>`` and ``functions.NAME: {…}``: the name given apart."""
    if name not in tools:
        return []
    stripped = body.strip()
    if not stripped:
        return [WrittenCall(name, {}, written)]
    try:
        return [_with_arguments(name, loads(stripped), written)]
    except LenientJSONError as exc:
        return [WrittenCall(name, None, written, str(exc))]


def _python_tag(body: str, tools: set[str], written: str) -> list[WrittenCall]:
    """Llama 3.1: ``<|python_tag|>`` then a JSON call, or plain code for its code tool."""
    stripped = body.strip()
    if stripped.startswith(("{", "[")):
        calls = _calls_in(stripped, tools, tagged=True)
        if calls:
            return calls
    if stripped and "python" in tools and not stripped.startswith(("{", "[")):
        return [WrittenCall("python", {"code": stripped}, written)]
    return []


def _after_name(text: str, start: int, name: str, tools: set[str]) -> tuple[int, list[WrittenCall]]:
    """``functions.NAME: {…}``: the arguments object after the name. Nothing readable after
    it (llama-cpp-python's chatml-function-calling streams just ``functions.python:``) is a
    call with a problem: the model is then told how to write it."""
    if name not in tools:
        return start, []
    if not text.startswith("{", start):
        rest = text[start:]
        return len(text), [WrittenCall(name, None, rest, "no arguments object followed the name")]
    try:
        value, end = parse_prefix(text, start)
    except LenientJSONError as exc:
        return len(text), [WrittenCall(name, None, text[start:], str(exc))]
    return end, [_with_arguments(name, value, text[start:end])]


def _bare_objects(text: str, tools: set[str], free: Any, take: Any) -> None:
    """A bare ``{"name": TOOL, "arguments": {…}}`` anywhere outside the spans taken."""
    i = text.find("{")
    while i >= 0:
        if not free(i, i + 1):
            i = text.find("{", i + 1)
            continue
        try:
            value, end = parse_prefix(text, i)
        except LenientJSONError:
            m = re.compile(r"\{\s*" + _NAME.pattern).match(text, i)
            if m is not None and m.group(1) in tools and free(i, len(text)):
                # It names an offered tool but cannot be read: the rest of the reply is it.
                take(i, len(text), _unreadable(text[i:], tools))
                return
            i = text.find("{", i + 1)
            continue
        call = _call_of(value, tools, text[i:end], require_arguments=True)
        if call is not None and free(i, end):
            take(i, end, [call])
        i = text.find("{", end)
