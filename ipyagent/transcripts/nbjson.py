"""JSON text laid out as nbformat writes it (indent 1, sorted keys, UTF-8 as is), fast.

``json.dumps`` with an indent runs the standard library's pure-Python encoder: a generator
per nesting level, ~1 µs a value. Autosave lays out every new item, cell, header and the
notebook's metadata at every step, so this writes the plain JSON types itself (strings
through the C ``encode_basestring``) and hands anything else — a subclass, a dict with
keys that are not strings — to ``json.dumps``, whose text is the reference: the two agree
byte for byte (a test compares them on random values).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["dumps"]

_string = json.encoder.encode_basestring  # the C one where the interpreter has it
_float = float.__repr__
_INFINITY = float("inf")


def dumps(value: Any, depth: int = 0) -> str:
    """``value`` as nbformat writes it, for a place ``depth`` levels deep (each line but
    the first indented by ``depth`` spaces: JSON strings hold no raw newline)."""
    out: list[str] = []
    _write(value, out, "\n" + " " * depth)
    return "".join(out)


def _reference(value: Any, newline: str) -> str:
    text = json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False, separators=(",", ": "))
    return text.replace("\n", newline) if newline != "\n" else text


def _write(value: Any, out: list[str], newline: str) -> None:
    """Append ``value``'s text; ``newline``: a line break and the current indent."""
    kind = type(value)
    if kind is str:
        out.append(_string(value))
    elif kind is dict:
        if not value:
            out.append("{}")
            return
        if not all(type(k) is str for k in value):  # json converts and sorts such keys itself
            out.append(_reference(value, newline))
            return
        inner = newline + " "
        lead = "{" + inner
        for key in sorted(value):
            out.append(lead)
            out.append(_string(key))
            out.append(": ")
            _write(value[key], out, inner)
            lead = "," + inner
        out.append(newline + "}")
    elif kind is list or kind is tuple:
        if not value:
            out.append("[]")
            return
        inner = newline + " "
        lead = "[" + inner
        for element in value:
            out.append(lead)
            _write(element, out, inner)
            lead = "," + inner
        out.append(newline + "]")
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif kind is int:
        out.append(int.__repr__(value))
    elif kind is float:
        if value != value:
            out.append("NaN")
        elif value == _INFINITY:
            out.append("Infinity")
        elif value == -_INFINITY:
            out.append("-Infinity")
        else:
            out.append(_float(value))
    else:  # a subclass, or what json refuses: its own text, or its own error
        out.append(_reference(value, newline))
