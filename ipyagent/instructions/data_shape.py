"""The shape of a data file's first bytes: a table's separator and column types, a JSON
document's outline. Text in, words out: nothing here opens a file or imports pandas, so it
runs in the user's kernel on any file the task names.

``table_shape`` sniffs the separator (``csv.Sniffer`` over the first lines, else a count of
``,`` ``;`` tab ``|`` that is the same on every line) and guesses each column's type from
the first rows (int, float, date, bool, str; blanks ignored). ``json_shape`` says the
top-level type, its keys or length, and the first element's keys.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SEPARATORS", "Table", "guess_type", "json_shape", "sniff_separator", "table_shape"]

SEPARATORS = ",;\t|"
SNIFF_LINES = 20  # lines the separator is judged on
TYPE_ROWS = 50  # rows each column's type is guessed from
_INT = re.compile(r"[+-]?\d{1,18}")
_FLOAT = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|infinity)", re.I)
_DATE = re.compile(r"\d{4}-\d{1,2}-\d{1,2}(?:[ T]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(?:Z|[+-]\d{2}:?\d{2})?"
                   r"|\d{1,2}/\d{1,2}/\d{2,4}|\d{4}/\d{1,2}/\d{1,2}")
_BOOL = {"true", "false"}
_NAMES = {",": "','", ";": "';'", "\t": "tab", "|": "'|'"}


@dataclass
class Table:
    """What the first lines of a delimited file show."""

    separator: str
    columns: list[tuple[str, str]] = field(default_factory=list)  # (name, type)
    rows: int = 0  # data rows in the lines given (the header not counted)

    @property
    def separator_name(self) -> str:
        """``';'``, ``tab``: how the separator is written in a sentence."""
        return _NAMES.get(self.separator, repr(self.separator))


def sniff_separator(lines: list[str]) -> str | None:
    """The separator of a delimited text's first ``lines``, or None when none is clear."""
    sample = [ln for ln in lines[:SNIFF_LINES] if ln.strip()]
    if not sample:
        return None
    try:
        found = csv.Sniffer().sniff("\n".join(sample), delimiters=SEPARATORS).delimiter
        if found in SEPARATORS and found in sample[0]:
            return found
    except csv.Error:
        pass
    # The Sniffer gives up on short or ragged samples: a separator that occurs the same
    # (non-zero) number of times on every line is one too; the most frequent such wins.
    best, best_count = None, 0
    for sep in SEPARATORS:
        counts = {_split_count(ln, sep) for ln in sample}
        if len(counts) == 1 and (n := counts.pop()) > best_count:
            best, best_count = sep, n
    return best


def _split_count(line: str, sep: str) -> int:
    """Fields in ``line`` minus one, quotes respected."""
    try:
        return len(next(csv.reader([line], delimiter=sep))) - 1
    except (csv.Error, StopIteration):
        return line.count(sep)


def guess_type(values: list[str]) -> str:
    """int, float, date, bool or str for a column's cells (blanks ignored; none: str)."""
    cells = [v.strip() for v in values if v.strip()]
    if not cells:
        return "str"
    for name, fits in (("int", _INT.fullmatch), ("float", _FLOAT.fullmatch),
                       ("date", _DATE.fullmatch)):
        if all(fits(c) for c in cells):
            return name
    if all(c.lower() in _BOOL for c in cells):
        return "bool"
    return "str"


def table_shape(text: str, separator: str | None = None, whole: bool = True) -> Table | None:
    """The separator, columns and types of delimited ``text`` (a file's first bytes; with
    ``whole`` False its last line may be cut and is left out), or None when it is not a table."""
    lines = text.splitlines()
    if not whole and len(lines) > 1:
        lines = lines[:-1]
    sep = separator or sniff_separator(lines)
    if sep is None:
        return None
    rows = list(csv.reader(io.StringIO("\n".join(lines)), delimiter=sep))
    rows = [r for r in rows if any(cell.strip() for cell in r)]
    if not rows:
        return None
    header, body = rows[0], rows[1:]
    columns = []
    for i, name in enumerate(header):
        cells = [r[i] for r in body[:TYPE_ROWS] if i < len(r)]
        columns.append((name.strip() or f"column {i + 1}", guess_type(cells)))
    return Table(sep, columns, len(body))


def json_shape(text: str) -> str | None:
    """``object with keys a, b, c``, ``array of 120 items; the first is an object with keys
    id, name``: the outline of a JSON document, or None when ``text`` does not parse."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return _outline(value)


def _outline(value: Any) -> str:
    if isinstance(value, dict):
        return f"object with {len(value)} key{'s' * (len(value) != 1)}: {_keys(value)}"
    if isinstance(value, list):
        head = f"array of {len(value)} item{'s' * (len(value) != 1)}"
        if not value:
            return head
        first = value[0]
        if isinstance(first, dict):
            nested = _nested_arrays(value[:SCANNED], first)
            return f"{head}; the first is an object with keys {_keys(first)}" + (
                f"; in each item, {nested}" if nested else "")
        return f"{head}; the first is {_kind(first)}"
    return _kind(value)


SCANNED = 1000  # items of an array looked at for the lengths of the arrays nested in them


def _nested_arrays(items: list[Any], first: dict[str, Any], limit: int = 3) -> str:
    """``items is an array of 1–2 objects with keys sku, qty, price``: the arrays the
    first object holds, their lengths across ``items`` and what the first one holds.
    Why: at 1.5B, shown orders whose items lists differ in length, the model summed
    ``order['items'][0]`` only."""
    parts = []
    for key, inner in first.items():
        if not isinstance(inner, list):
            continue
        lengths = [len(obj[key]) for obj in items
                   if isinstance(obj, dict) and isinstance(obj.get(key), list)]
        span = (f"{min(lengths)}–{max(lengths)}" if min(lengths) != max(lengths)
                else str(lengths[0]))
        holds = next((x for obj in items if isinstance(obj, dict)
                      for x in (obj.get(key) or [])[:1]), None)
        what = ("objects with keys " + _keys(holds) if isinstance(holds, dict)
                else f"items, the first {_kind(holds)}" if holds is not None else "items")
        parts.append(f"{str(key)[:40]} is an array of {span} {what}")
        if len(parts) == limit:
            break
    return "; ".join(parts)


def _keys(obj: dict[str, Any], limit: int = 20) -> str:
    names = [str(k) for k in list(obj)[:limit]]
    more = len(obj) - limit
    return ", ".join(names) + (f" and {more} more" if more > 0 else "") if names else "(none)"


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, list):
        return f"an array of {len(value)} items"
    return "an object"
