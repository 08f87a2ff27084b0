"""How the demo model fixes a failing cell (``%agent fix``): a few honest rules, no LLM.

``fix_request`` reads the task ``%agent fix`` sends (the cell's source and its traceback);
``propose_fix`` finds the line that raised and applies the rule for its error, if one fits:
a missing import, a misspelt name, ``len`` of a number, a string joined to a number, a
missing key, a misspelt method of a built-in type, a module to install. Anything else gets
the failing line wrapped in ``try``/``except``, and the explanation says that is all it is.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import re
from dataclasses import dataclass

__all__ = ["FIX_MARK", "TRACEBACK_MARK", "Fix", "fix_request", "propose_fix"]

# The words ``frontends.aware.fix_task`` puts around the cell and its traceback (a test
# keeps them equal: a model may not import the frontends).
FIX_MARK = "The cell in my notebook that raised:"
TRACEBACK_MARK = "Its traceback:"

_IMPORTS = {
    "np": "import numpy as np", "pd": "import pandas as pd",
    "plt": "import matplotlib.pyplot as plt", "sns": "import seaborn as sns",
    "math": "import math", "os": "import os", "re": "import re", "json": "import json",
    "sys": "import sys", "time": "import time", "random": "import random",
    "datetime": "import datetime", "statistics": "import statistics",
    "itertools": "import itertools", "collections": "import collections",
    "Path": "from pathlib import Path", "Counter": "from collections import Counter",
    "defaultdict": "from collections import defaultdict",
}
_METHODS = {("list", "push"): "append", ("list", "add"): "append", ("set", "append"): "add",
            ("dict", "has_key"): "get", ("str", "contains"): "find"}
_ERROR_LINE = re.compile(r"^(\w+(?:Error|Exception|Warning))(?::\s*(.*))?$")


@dataclass
class Fix:
    """The fixed cell and one sentence on what was wrong (``certain``: a rule fitted)."""

    source: str
    why: str
    certain: bool = True
    checkable: bool = True  # False: running it in the sibling would not show anything (an install)


def fix_request(task: str) -> tuple[str, str] | None:
    """``(cell source, traceback)`` from a ``%agent fix`` task, or None for any other task."""
    if FIX_MARK not in task and TRACEBACK_MARK not in task:
        return None
    source = ""
    found = re.search(re.escape(FIX_MARK) + r"\s*\n(`{3,})python\n(.*?)\n\1", task, re.S)
    if found:
        source = found.group(2)
    tb = re.search(re.escape(TRACEBACK_MARK) + r"\s*\n(`{3,})[^\n]*\n(.*?)\n\1", task, re.S)
    if tb is None:
        return None
    return source, tb.group(2)


def _error(traceback: str) -> tuple[str, str]:
    """The error's type and message: the traceback's last 'XError: …' line."""
    for line in reversed(traceback.strip().splitlines()):
        found = _ERROR_LINE.match(line.strip())
        if found:
            return found.group(1), (found.group(2) or "").strip()
    return "", ""


# A frame of the cell itself: IPython's "Cell In[3], line 2", or a file name it made up
# (<ipython-input-…>, /tmp/ipykernel_123/456.py, <cell>).
_CELL_FRAME = re.compile(r'(?:Cell In\[\d+\]|File "(?:<[^>]*>|[^"]*ipykernel_\d+[/\\]\d+\.py)"), line (\d+)')


def _failing_line(lines: list[str], traceback: str) -> int | None:
    """The index of the cell's line that raised: the last traceback line that is one of
    them (IPython prints the cell's lines), else the last frame of the cell by number."""
    stripped = [line.strip() for line in lines]
    for line in reversed(traceback.splitlines()):
        text = re.sub(r"^\s*(-+>\s*)?(\d+\s+)?", "", line).strip()
        if text and text in stripped:
            return len(stripped) - 1 - stripped[::-1].index(text)
    numbers = [int(n) for n in _CELL_FRAME.findall(traceback)]
    if numbers and 1 <= numbers[-1] <= len(lines):
        return numbers[-1] - 1
    return len(lines) - 1 if len(lines) == 1 else None


def _assigned(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def propose_fix(source: str, traceback: str, known: list[str] | None = None) -> Fix | None:
    """A fixed version of ``source`` for the error in ``traceback``; None when there is no
    source to fix. ``known``: names the user's kernel has (the namespace picture)."""
    if not source.strip():
        return None
    kind, message = _error(traceback)
    lines = source.split("\n")
    at = _failing_line(lines, traceback)
    line = lines[at] if at is not None else ""

    def swap(i: int, new: str) -> str:
        return "\n".join(lines[:i] + [new] + lines[i + 1:])

    if kind == "NameError":
        name = re.search(r"name '(\w+)' is not defined", message)
        missing = name.group(1) if name else ""
        if missing in _IMPORTS:
            return Fix(f"{_IMPORTS[missing]}\n{source}", f"`{missing}` is used but never imported")
        pool = sorted(_assigned(source) | set(known or []) | set(dir(builtins)))
        close = difflib.get_close_matches(missing, pool, n=1, cutoff=0.75)
        if missing and close:
            fixed = re.sub(rf"\b{re.escape(missing)}\b", close[0], source)
            return Fix(fixed, f"`{missing}` is not defined, `{close[0]}` is: a typo")
    if kind == "TypeError" and "has no len()" in message and at is not None:
        new = re.sub(r"\blen\(([^()]+)\)", r"len(str(\1))", line)
        if new != line:
            return Fix(swap(at, new), "`len()` does not work on a number: count the digits of its "
                                      "text form instead")
    if kind == "TypeError" and "can only concatenate str" in message and at is not None:
        new = re.sub(r"(\+\s*)(?!str\()([A-Za-z_]\w*(?:\.\w+)*)\b(?!\s*\()", r"\1str(\2)", line)
        if new != line:
            return Fix(swap(at, new), "a string and a number cannot be joined with `+`: the "
                                      "number is turned into text first")
    if kind == "KeyError" and at is not None:
        key = message.strip()
        new = re.sub(rf"\[\s*{re.escape(key)}\s*\]", f".get({key})", line) if key else line
        if new != line:
            return Fix(swap(at, new), f"the key {key} is not there: `.get` gives None instead of "
                                      "raising")
    if kind == "AttributeError" and at is not None:
        found = re.search(r"'(\w+)' object has no attribute '(\w+)'", message)
        if found:
            owner, attr = found.groups()
            better = _METHODS.get((owner, attr))
            if better is None and isinstance(getattr(builtins, owner, None), type):
                names = [n for n in dir(getattr(builtins, owner)) if not n.startswith("_")]
                close = difflib.get_close_matches(attr, names, n=1, cutoff=0.7)
                better = close[0] if close else None
            new = line.replace(f".{attr}", f".{better}") if better else line
            if new != line:
                return Fix(swap(at, new), f"a {owner} has no `.{attr}`; `.{better}` does that")
    if kind in ("ModuleNotFoundError", "ImportError"):
        module = re.search(r"No module named '([\w.]+)'", message)
        if module:
            package = module.group(1).split(".")[0]
            return Fix(f"%pip install {package}\n{source}",
                       f"the module `{package}` is not installed in your kernel's environment",
                       checkable=False)
    return _guarded(lines, at, kind or "Exception", message)


def _guarded(lines: list[str], at: int | None, kind: str, message: str) -> Fix:
    """The failing line (or the whole cell) in try/except: not a fix, and said so."""
    first, last = (at, at) if at is not None else (0, len(lines) - 1)
    indent = re.match(r"\s*", lines[first]).group(0)  # type: ignore[union-attr]
    body = [indent + "    " + ln[len(indent):] if ln.startswith(indent) else "    " + ln
            for ln in lines[first:last + 1]]
    target = re.match(r"\s*([A-Za-z_]\w*)\s*=[^=]", lines[first])
    fallback = (f"{target.group(1)} = None  # no value: {kind}" if target
                else f"print('{kind}:', exc)")
    handler = f"{indent}except {kind} as exc:" if kind.isidentifier() else f"{indent}except Exception as exc:"
    guarded = [f"{indent}try:", *body, handler, f"{indent}    {fallback}"]
    if target:
        guarded.insert(-1, f"{indent}    print('{kind}:', exc)")
    fixed = "\n".join(lines[:first] + guarded + lines[last + 1:])
    said = f" ({message})" if message else ""
    return Fix(fixed, f"I know no certain fix for this {kind}{said}: this version catches it and "
                      "says so, so the rest of the cell runs; the cause is still to be found",
               certain=False)
