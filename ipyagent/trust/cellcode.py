"""The model's code made safe to put in a notebook cell: what the cell shows is what runs.

An editor draws a bidi override, an isolate or a zero-width character as nothing (or
reorders the text around it): CodeMirror marks U+202E and the isolates but not U+202A-C,
U+200B-F or U+2060-4, so ``note = "<U+202B>#  fee = fee * 10 ; "`` read as a string and a
comment and ran ``fee = fee * 10``. So every such character — Unicode's controls (Cc) but
tab and newline, format characters (Cf: U+200B-F, U+202A-E, U+2060-4, U+2066-9, U+FEFF and
the rest), line and paragraph separators, lone surrogates — is written as an escape
(``\\u202b``) where Python reads an escape as that same character: inside a string
literal that is not raw. Anywhere else (a comment, a raw string, the code itself) it
cannot be written so, and the code is refused with a sentence saying where. The escaped
code is checked to parse to the same syntax tree as the original, so it runs the same.
"""

from __future__ import annotations

import ast
import io
import tokenize
import unicodedata

__all__ = ["UnsafeCode", "cell_text", "hidden_characters"]

_ALWAYS = {chr(c) for r in ((0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064),
                            (0x2066, 0x2069), (0xFEFF, 0xFEFF)) for c in range(r[0], r[1] + 1)}


class UnsafeCode(ValueError):
    """The code holds a hidden character where it cannot be written as an escape."""


def _hidden(ch: str) -> bool:
    if ch in "\t\n":
        return False
    return ch in _ALWAYS or unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs")


def hidden_characters(code: str) -> list[tuple[int, int, str]]:
    """(line, column, character) of each hidden character in ``code`` (lines from 1).

    A CR that ends a line (CRLF) is a line ending, not hidden: every editor shows it so."""
    found = []
    for number, line in enumerate(code.split("\n"), 1):
        for col, ch in enumerate(line):
            if _hidden(ch) and not (ch == "\r" and col == len(line) - 1):
                found.append((number, col, ch))
    return found


def _name(ch: str) -> str:
    return f"U+{ord(ch):04X} ({unicodedata.name(ch, 'a control character').title()})"


def _escape(ch: str, raw_bytes: bool) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if raw_bytes:  # cannot happen in valid code (bytes literals are ASCII): refuse instead
        raise UnsafeCode(f"a bytes literal holds {_name(ch)}")
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _refuse(line: int, col: int, ch: str, where: str) -> UnsafeCode:
    return UnsafeCode(f"the code holds {_name(ch)} at line {line}, column {col + 1}, {where}: "
                      "there it cannot be written as a visible escape, and an editor may draw "
                      "the code around it differently from how it runs, so it was not put in a "
                      "cell; ask the agent for the code without that character")


def cell_text(code: str) -> str:
    """``code`` with every hidden character inside a string literal written as an escape;
    ``UnsafeCode`` (one sentence: what, where, what to do) when one is anywhere else."""
    found = hidden_characters(code)
    if not found:
        return code
    try:
        tree = ast.dump(ast.parse(code))
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (SyntaxError, tokenize.TokenError, ValueError):
        line, col, ch = found[0]
        raise _refuse(line, col, ch, "in code that is not plain Python (it does not parse)") from None
    lines = code.split("\n")
    edits: dict[tuple[int, int], str] = {}
    for line, col, ch in found:
        token = next((t for t in tokens if t.start <= (line, col) < t.end), None)
        kind = token.type if token is not None else None
        if token is None or kind not in (tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", -1)):
            where = "in a comment" if kind == tokenize.COMMENT else "outside any string"
            raise _refuse(line, col, ch, where)
        prefix = _prefix(token, tokens)
        if "r" in prefix:
            raise _refuse(line, col, ch, "in a raw string (where an escape is not read as one)")
        edits[(line, col)] = _escape(ch, "b" in prefix)
    out = "\n".join("".join(edits.get((n, c), ch) for c, ch in enumerate(text))
                    for n, text in enumerate(lines, 1))
    try:
        same = ast.dump(ast.parse(out)) == tree
    except SyntaxError:  # an escape inside an f-string's expression part (Python < 3.12)
        same = False
    if not same:  # what runs must not change
        line, col, ch = found[0]
        raise _refuse(line, col, ch, "where an escape would change what the code does")
    return out


def _prefix(token: tokenize.TokenInfo, tokens: list[tokenize.TokenInfo]) -> str:
    """The lower-case prefix of the string literal ``token`` is (or is part of)."""
    if token.type == tokenize.STRING:
        text = token.string
    else:  # an f-string's literal part (3.12+): its FSTRING_START says the prefix
        starts = [t for t in tokens if t.type == getattr(tokenize, "FSTRING_START", -1)
                  and t.start < token.start]
        text = starts[-1].string if starts else ""
    return text[:len(text) - len(text.lstrip("rRbBuUfF"))].lower()
