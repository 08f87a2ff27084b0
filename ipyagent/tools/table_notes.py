"""ipyagent's notes on an error that came from how a workspace table was read: the file's first
lines say what the code missed (its separator, its header). Only a plain name's first two lines
are read, never through a symlink; only the file's own words about itself are quoted."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._util.pyast import parsed
from ..kernel.staging import read_head

__all__ = ["separator_note", "header_note", "header_fix"]


# A table read with the default separator: ``pd.read_csv('sales.csv')``, ``csv.DictReader(
# open('sales.csv'))`` with no ``sep=`` / ``delimiter=`` in the call.
_TABLE_READ = re.compile(r"""(?:read_csv|DictReader)\(\s*(?:open\(\s*)?['"]([A-Za-z_][\w.-]{0,99})['"]""")
_OTHER_SEPARATORS = {";": "';'", "\t": "'\\t'", "|": "'|'"}


def separator_note(code: str, outputs: list[dict[str, Any]], folder: Path | None) -> str:
    """ipyagent's note for a ``KeyError`` after a table was read with the default ``,`` from a
    workspace file whose first line has no comma but another separator, or "" (seen at 0.5B:
    ``pd.read_csv('sales.csv')`` of a ``;`` file, ``KeyError: 'amount'``, the same call four
    more times; the 1.5B answered 0 from such a read)."""
    if folder is None or not any(o.get("ename") == "KeyError" for o in outputs):
        return ""
    for found in _TABLE_READ.finditer(code):
        call = code[found.start():found.start() + 300].split(")\n", 1)[0]
        if re.search(r"\b(?:sep|delimiter|delim_whitespace)\s*=", call):
            continue
        name = found.group(1)
        lines = _first_lines(folder / name)
        if not lines or "," in lines[0]:
            continue
        first = lines[0]
        # The same count on the next line too: a table, not a sentence with one ';' in it.
        seps = [sep for sep in _OTHER_SEPARATORS if first.count(sep)
                and all(line.count(sep) == first.count(sep) for line in lines[1:2])]
        if len(seps) != 1 or len(lines) < 2:
            continue
        sep = _OTHER_SEPARATORS[seps[0]]
        how = (f"pd.read_csv({name!r}, sep={sep})" if "read_csv" in found.group(0)
               else f"csv.DictReader(open({name!r}), delimiter={sep})")
        shown = _cut(first)
        return (f"{name}'s first line is {shown!r}: its columns are separated by {sep}, not by "
                f"commas, so the read gave one column. Read it with {how}, and run the call again.")
    return ""


# A value Python could not read as a number (``int('age\\n')``, ``float('price')``), as the
# message quotes it, and a file the code names in a string.
_NOT_A_NUMBER = re.compile(r"^(?:invalid literal for int\(\) with base \d+|could not convert "
                           r"string to float): ('.{0,200}'|\".{0,200}\")$")
_NAMED_FILE = re.compile(r"""['"]([A-Za-z_][\w.-]{0,99}\.[A-Za-z0-9]{1,10})['"]""")
_FIELDS = re.compile(r"[,;\t|]")


def header_note(code: str, outputs: list[dict[str, Any]], folder: Path | None,
                failed_at: Sequence[int] = ()) -> str:
    """ipyagent's note for a ``ValueError`` from reading a table's header as a number: the
    value is a column name on the first line of a file the code names, above a number on the
    second, or "" (seen at 1.5B: ``int(line.split(',')[1])`` over people.csv's lines failed on
    ``'age\\n'``, and the same call came four more times). ``failed_at``: the code's lines
    the traceback points at (the loop there is the one to change)."""
    if folder is None:
        return ""
    for out in outputs:
        found = (_NOT_A_NUMBER.match(str(out.get("evalue", "")))
                 if out.get("ename") == "ValueError" else None)
        if found is None:
            continue
        try:
            value = ast.literal_eval(found.group(1))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        word = str(value).strip().strip("'\"").strip()
        # A column's name is short; a long one is not quoted (it could read as a sentence).
        for name in dict.fromkeys(_NAMED_FILE.findall(code)) if 0 < len(word) <= 40 else ():
            lines = _first_lines(folder / name)
            if len(lines) < 2:
                continue
            header, row = (_fields(line) for line in lines)
            at = header.index(word) if word in header else -1
            if at < 0 or at >= len(row) or not _number(row[at]) or _number(word):
                continue
            first = _cut(lines[0])
            seps = [sep for sep in ",;\t|" if sep in lines[0]]
            delimiter = f", delimiter={seps[0]!r}" if seps and seps[0] != "," else ""
            by_name = f"read the rows by column name with csv.DictReader(open({name!r}){delimiter})"
            rewritten = _rewritten(code, failed_at)
            how = (f"read it with pd.read_csv({name!r}{', sep=' + repr(seps[0]) if delimiter else ''})"
                   " (its first line names the columns)" if "read_csv" in code else
                   f"skip that line: write line {rewritten[0]} as {rewritten[1].strip()}, or {by_name}"
                   if rewritten else f"skip that line ({_skip(code, name)}) or {by_name}")
            return (f"{word!r} is a column name, not a value: {name}'s first line is {first!r}, "
                    f"its header. {how[0].upper()}{how[1:]}, and run the call again.")
    return ""


def _skip(code: str, name: str) -> str:
    """How to skip a file's first line, in the code's own names: ``lines[1:] where your code
    loops over lines`` for a list of its lines, ``next(f) once, before for line in f`` for an
    open file; a list of all but the first line of ``name`` when the code shows neither (seen
    at 1.5B: told "next(f) once before looping over the open file f" of code that held
    ``lines = file.readlines()``, it wrote ``next(f)``, and met "name 'f' is not defined")."""
    tree = parsed(code)
    if tree is None:
        return f"as in lines = open({name!r}).readlines()[1:], then loop over lines"
    listed = _listed(tree)
    opened = {item.optional_vars.id for n in ast.walk(tree) if isinstance(n, ast.With)
              for item in n.items if isinstance(item.optional_vars, ast.Name)}
    for loop in ast.walk(tree):
        if not (isinstance(loop, (ast.For, ast.comprehension)) and isinstance(loop.target, ast.Name)
                and isinstance(loop.iter, ast.Name)):
            continue
        over, item = loop.iter.id, loop.target.id
        if over in listed and len(over) <= 40:
            return f"{over}[1:] where your code loops over {over}: its first item is the header"
        if over in opened and len(over) <= 40 and len(item) <= 40:
            return f"next({over}) once, on a line before for {item} in {over}"
    return f"as in lines = open({name!r}).readlines()[1:], then loop over lines"


def _rewritten(code: str, failed_at: Sequence[int], limit: int = 200) -> tuple[int, str] | None:
    """``(line number, that line looping over lines[1:])`` for the loop over a list of a
    file's lines (by its name) on the line the traceback points at, or whose body holds it;
    None otherwise, or for a line over ``limit`` characters.

    Seen at 1.5B: told "lines[1:] where your code loops over lines" of code whose first loop
    already read ``lines[1:]`` and whose failing line 10, ``next((… for line in lines if
    float(…) == top), None)``, did not, it wrote the same call three more times."""
    tree = parsed(code)
    if tree is None or not failed_at:
        return None
    listed = _listed(tree)
    loops = [loop for loop in ast.walk(tree) if isinstance(loop, (ast.For, ast.comprehension))
             and isinstance(loop.iter, ast.Name) and loop.iter.id in listed
             and loop.iter.lineno == loop.iter.end_lineno]
    source = re.split(r"\r\n|\r|\n", code)  # Python's own line ends, no others
    for number in dict.fromkeys(failed_at):
        here = [loop.iter for loop in loops if loop.iter.lineno == number]
        if not here:  # the failing line is in a for loop's body: the loop's own line
            around = [loop for loop in loops if isinstance(loop, ast.For)
                      and loop.lineno < number <= (loop.end_lineno or 0)]
            if around:
                inner = max(around, key=lambda loop: loop.lineno)
                here = [loop.iter for loop in loops if loop.iter.lineno == inner.iter.lineno]
        if not here or not 0 < here[0].lineno <= len(source):
            continue
        at = here[0].lineno
        if len(source[at - 1]) > limit:
            continue
        line = source[at - 1].encode()  # ast's offsets count UTF-8 bytes
        for end in sorted({name.end_col_offset or 0 for name in here}, reverse=True):
            line = line[:end] + b"[1:]" + line[end:]
        return at, line.decode(errors="replace")
    return None


def header_fix(code: str, failed_at: Sequence[int]) -> tuple[str, str] | None:
    """``(code with the failing line's loop over lines[1:], what changed)``, as the header
    note says it (not for a pandas read: that note says another way)."""
    rewritten = None if "read_csv" in code else _rewritten(code, failed_at)
    if rewritten is None:
        return None
    number, line = rewritten
    lines = re.split(r"(\r\n|\r|\n)", code)  # the line ends kept, at the odd places
    lines[2 * (number - 1)] = line
    return "".join(lines), f"line {number} loops over its list from [1:], past the header"


def _listed(tree: ast.AST) -> set[str]:
    """The names set, outside a loop, to a file's lines: ``x.readlines()``, or
    ``x.read().split(…)`` / ``.splitlines()`` (``fields = line.split(',')`` inside a loop is
    a row's fields, not the file's lines)."""
    in_loops = {id(n) for loop in ast.walk(tree) if isinstance(loop, (ast.For, ast.While))
                for n in ast.walk(loop) if n is not loop}
    return {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and id(n) not in in_loops
            and _lines_of_a_file(n.value) for t in n.targets if isinstance(t, ast.Name)}


def _lines_of_a_file(value: ast.expr) -> bool:
    """``f.readlines()``, ``f.read().split('\\n')``, ``f.read().splitlines()``."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return False
    if value.func.attr == "readlines":
        return True
    inner = value.func.value
    return (value.func.attr in ("split", "splitlines") and isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Attribute) and inner.func.attr == "read")


def _cut(line: str, limit: int = 60) -> str:
    """A file's line as a note quotes it (then as a repr)."""
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _fields(line: str) -> list[str]:
    return [field.strip().strip("'\"").strip() for field in _FIELDS.split(line)]


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _first_lines(path: Path, limit: int = 4096) -> list[str]:
    """The first two lines of a regular file of the workspace (never through a symlink)."""
    head = read_head(path, limit)
    if head is None:
        return []
    text = head.decode("utf-8", "replace").lstrip("\ufeff")
    return [line.rstrip("\r") for line in text.split("\n")[:2] if line.strip()]
