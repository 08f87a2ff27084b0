"""``loads``: JSON as small models write it inside a tool call written as text.

Why: a 0.5B model that writes its call as text rarely writes strict JSON. Measured on
Qwen2.5-Coder 0.5B/1.5B: multi-line code in Python triple quotes (``"code": \"\"\"…\"\"\"``),
raw newlines and tabs inside strings, trailing commas, single quotes, ``True``/``None``.
``json.loads`` refuses all of them; ``eval`` would run them. This is a small tokenizer
that accepts exactly those slips and nothing executable: it builds dicts, lists, strings,
numbers, booleans and None, and raises ``LenientJSONError`` (with the position) otherwise.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["loads", "parse_prefix", "LenientJSONError"]

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORDS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
_ESCAPES = {'"': '"', "'": "'", "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n",
            "r": "\r", "t": "\t"}


class LenientJSONError(ValueError):
    """The text is not even lenient JSON; ``pos`` is where reading stopped."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(f"{message} at character {pos}")
        self.pos = pos


def loads(text: str, *, close_strings: bool = True) -> Any:
    """The value ``text`` holds (strict JSON first, then the lenient reading).
    ``close_strings``: close a string left open before the closing brackets (a written call;
    never where a server's cut could look so: the native arguments of a reply cut short)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return _whole(text)
    except LenientJSONError as exc:
        repaired = _close_last_string(text, exc) if close_strings else None
        if repaired is None:
            raise
        return _whole(repaired)


def _whole(text: str) -> Any:
    value, end = parse_prefix(text, _skip(text, 0))
    end = _skip(text, end)
    if end != len(text):
        raise LenientJSONError("unexpected text after the value", end)
    return value


def _close_last_string(text: str, exc: LenientJSONError) -> str | None:
    """``{"code": "print(1)}}`` -> ``{"code": "print(1)"}}``: a string left open up to the
    closing brackets at the very end (measured: Qwen2.5-Coder-0.5B drops that quote) is
    closed just before them. Only that case; the user still sees the code before it runs."""
    if "string was not closed" not in str(exc):
        return None
    body = text.rstrip()
    closers = len(body) - len(body.rstrip("}] \t\n"))
    if not closers:
        return None
    quote = text[exc.pos] * (3 if text.startswith(text[exc.pos] * 3, exc.pos) else 1)
    return body[:len(body) - closers] + quote + body[len(body) - closers:]


def parse_prefix(text: str, start: int = 0) -> tuple[Any, int]:
    """The value starting at ``start`` and the index just past it (text may follow)."""
    return _Reader(text).value(start)


def _skip(text: str, i: int) -> int:
    """Past whitespace and ``//`` or ``#`` line comments."""
    n = len(text)
    while i < n:
        if text[i].isspace():
            i += 1
        elif text.startswith("//", i) or text[i] == "#":
            newline = text.find("\n", i)
            i = n if newline < 0 else newline + 1
        else:
            break
    return i


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text

    def value(self, i: int) -> tuple[Any, int]:
        text = self.text
        i = _skip(text, i)
        if i >= len(text):
            raise LenientJSONError("the text ended where a value was expected", i)
        c = text[i]
        if c == "{":
            return self.obj(i + 1)
        if c == "[":
            return self.array(i + 1)
        if c in "\"'":
            return self.string(i)
        if c == "\\" and text[i + 1:i + 2] in ("'", '"'):
            return self.escaped_string(i)
        number = _NUMBER.match(text, i)
        if number:
            raw = number.group()
            return (float(raw) if any(ch in raw for ch in ".eE") else int(raw)), number.end()
        word = _WORD.match(text, i)
        if word and word.group() in _WORDS:
            return _WORDS[word.group()], word.end()
        raise LenientJSONError(f"unexpected {c!r}", i)

    def obj(self, i: int) -> tuple[dict[str, Any], int]:
        text = self.text
        out: dict[str, Any] = {}
        while True:
            i = _skip(text, i)
            if i >= len(text):
                raise LenientJSONError("an object was not closed", i)
            if text[i] == "}":
                return out, i + 1
            if text[i] in "\"'":
                key, i = self.string(i)
            else:
                word = _WORD.match(text, i)  # a bare key, as in a Python or JS literal
                if not word:
                    raise LenientJSONError(f"expected a key, found {text[i]!r}", i)
                key, i = word.group(), word.end()
            i = _skip(text, i)
            if i >= len(text) or text[i] not in ":=":
                raise LenientJSONError("expected ':' after a key", i)
            out[str(key)], i = self.value(i + 1)
            i = _skip(text, i)
            if i < len(text) and text[i] == ",":
                i += 1  # a trailing comma before '}' is accepted by the next turn
            elif i < len(text) and text[i] != "}":
                raise LenientJSONError(f"expected ',' or '}}', found {text[i]!r}", i)

    def array(self, i: int) -> tuple[list[Any], int]:
        text = self.text
        out: list[Any] = []
        while True:
            i = _skip(text, i)
            if i >= len(text):
                raise LenientJSONError("a list was not closed", i)
            if text[i] == "]":
                return out, i + 1
            item, i = self.value(i)
            out.append(item)
            i = _skip(text, i)
            if i < len(text) and text[i] == ",":
                i += 1
            elif i < len(text) and text[i] != "]":
                raise LenientJSONError(f"expected ',' or ']', found {text[i]!r}", i)

    def escaped_string(self, i: int) -> tuple[str, int]:
        """``\\'…\\'``: a string whose quotes were escaped as if inside another string
        (a model copying an escaped prompt); its content is taken as written."""
        text = self.text
        fence = text[i:i + 2]
        end = text.find(fence, i + 2)
        if end < 0:
            raise LenientJSONError("an escaped string was not closed", i)
        return text[i + 2:end], end + 2

    def string(self, i: int) -> tuple[str, int]:
        text = self.text
        quote = text[i]
        if text.startswith(quote * 3, i):
            # Python triple quotes hold code: taken verbatim (no escapes), because a model
            # that writes ``print("a\nb")`` inside them means those characters.
            end = text.find(quote * 3, i + 3)
            if end < 0:
                raise LenientJSONError("a triple-quoted string was not closed", i)
            return text[i + 3:end], end + 3
        out: list[str] = []
        j = i + 1
        while j < len(text):
            c = text[j]
            if c == quote:
                return "".join(out), j + 1
            if c == "\\" and j + 1 < len(text):
                nxt = text[j + 1]
                if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[j + 2:j + 6]):
                    out.append(chr(int(text[j + 2:j + 6], 16)))
                    j += 6
                    continue
                if nxt in _ESCAPES:
                    out.append(_ESCAPES[nxt])
                else:  # an escape JSON does not know (a regex's \d): kept as written
                    out.append(c + nxt)
                j += 2
                continue
            out.append(c)  # raw newlines and tabs included: that is the leniency
            j += 1
        raise LenientJSONError("a string was not closed", i)
