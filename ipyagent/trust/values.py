"""Bytes from the model's side made into a value here, by code that cannot run code.

``decode`` reads what ``encode`` made in the sibling, but trusts none of it: the JSON
header is parsed as plain data, every tag is looked up in a fixed table of the types this
module makes (builtins, dates, decimals, numpy arrays read with ``allow_pickle=False`` and
their size checked against their header first, pandas frames from Arrow IPC without
extension types or from plain columns, PNG images); nothing in the bytes names a module,
a class or a callable. Anything else is ``Undecodable`` with one line saying why.

``arrive`` is what a person is shown before a value enters their kernel: the value, its
sha256 and size, and a short preview made here from the decoded value (not the model's
description of it).
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import io
import json
import re
import reprlib
import uuid
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from .encode import MAGIC, MAX_DEPTH

__all__ = ["Arrived", "Undecodable", "accepted", "arrive", "decode", "preview"]

PREVIEW_LIMIT = 600  # characters of preview on a card
_TZ = re.compile(r"^(?:UTC|[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+)*|[+-]\d\d:\d\d)$")
_MASKED = ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64",
           "Float32", "Float64", "boolean")
_PNG = b"\x89PNG\r\n\x1a\n"


class Undecodable(ValueError):
    """The bytes are not a value this side makes (damaged, hostile, or of a refused type)."""


@dataclass
class Arrived:
    """A value decoded here, with what the person is shown about it."""

    value: Any = field(repr=False)
    sha256: str
    size: int  # bytes that crossed
    preview: str = ""  # made here from the decoded value, bounded


def accepted() -> tuple[str, ...]:
    """What this side can make, for the encoder: ``numpy``, ``pandas``, ``arrow``, ``png``.

    Found without importing them (a pull of a dict must not import pandas here)."""
    from importlib.util import find_spec

    found = ["png"]
    if find_spec("numpy") is not None:
        found.append("numpy")
        if find_spec("pandas") is not None:
            found.append("pandas")
            if _arrow_is_safe():
                found.append("arrow")
    return tuple(found)


def _arrow_is_safe() -> bool:
    """pyarrow is here and new enough never to unpickle an extension type (CVE-2023-47248)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        parts = re.findall(r"\d+", version("pyarrow"))[:3]
    except PackageNotFoundError:
        return False
    return tuple(int(p) for p in parts) >= (14, 0, 1)


def arrive(data: bytes) -> Arrived:
    """``data`` decoded, with its sha256, size and preview (``Undecodable`` when it is not a value)."""
    value = decode(data)
    return Arrived(value, hashlib.sha256(data).hexdigest(), len(data), preview(value))


def decode(data: bytes) -> Any:
    """The value ``data`` holds; ``Undecodable`` (one line) for anything else."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise Undecodable("not bytes")
    data = bytes(data)
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
        raise Undecodable("not an ipyagent value (no header): nothing was decoded")
    start = len(MAGIC) + 8
    size = int.from_bytes(data[len(MAGIC):start], "big")
    if size > len(data) - start:
        raise Undecodable("the header is longer than the data")
    try:
        header = json.loads(data[start:start + size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise Undecodable(f"the header is not JSON ({type(exc).__name__})") from None
    except RecursionError:
        raise Undecodable("the header is nested too deeply") from None
    if not isinstance(header, dict) or not isinstance(header.get("buffers"), list) or "v" not in header:
        raise Undecodable("the header has no value or no buffer list")
    sizes = header["buffers"]
    if not all(type(n) is int and n >= 0 for n in sizes) or sum(sizes) != len(data) - start - size:
        raise Undecodable("the buffer sizes do not add up to the data")
    buffers, at = [], start + size
    for n in sizes:
        buffers.append(data[at:at + n])
        at += n
    return _Decoder(buffers).node(header["v"], 0)


class _Decoder:
    """One payload's tree made into values; only the tags in ``_TAGS`` exist."""

    def __init__(self, buffers: list[bytes]) -> None:
        self.buffers = buffers

    def buffer(self, node: dict[str, Any], key: str = "b") -> bytes:
        index = node.get(key)
        if type(index) is not int or not 0 <= index < len(self.buffers):
            raise Undecodable(f"a {node.get('$', 'column')!s:.20} names no buffer")
        return self.buffers[index]

    def node(self, node: Any, depth: int) -> Any:
        if depth > MAX_DEPTH + 2:
            raise Undecodable(f"the value is nested more than {MAX_DEPTH} levels deep")
        if node is None or type(node) in (bool, int, float, str):
            return node
        if type(node) is list:
            return [self.node(x, depth + 1) for x in node]
        if type(node) is not dict:
            raise Undecodable(f"an unexpected {type(node).__name__} in the header")
        tag = node.get("$")
        make = _TAGS.get(tag) if isinstance(tag, str) else None
        if make is None:
            raise Undecodable(f"an unknown kind of value {str(tag)[:30]!r}: nothing was decoded")
        try:
            return make(self, node, depth + 1)
        except Undecodable:
            raise
        except RecursionError:
            raise Undecodable("the value is nested too deeply") from None
        except Exception as exc:  # a malformed field: one line, never a traceback
            raise Undecodable(f"a malformed {tag} ({type(exc).__name__}: {str(exc)[:120]})") from None

    def items(self, node: dict[str, Any], depth: int) -> list[Any]:
        values = node.get("v")
        if type(values) is not list:
            raise Undecodable(f"a {node['$']} without its items")
        return [self.node(x, depth) for x in values]

    def pairs(self, node: dict[str, Any], depth: int) -> list[tuple[Any, Any]]:
        out = []
        for pair in node.get("v") or []:
            if type(pair) is not list or len(pair) != 2:
                raise Undecodable(f"a {node['$']} entry that is not a key and a value")
            out.append((self.node(pair[0], depth), self.node(pair[1], depth)))
        return out


def _str(node: dict[str, Any], key: str = "v") -> str:
    value = node.get(key)
    if type(value) is not str:
        raise Undecodable(f"a {node.get('$')} without its text")
    return value


def _float(d: _Decoder, node: dict[str, Any], depth: int) -> float:
    text = _str(node)
    if text not in ("nan", "inf", "-inf"):
        raise Undecodable(f"a float tagged {text[:20]!r}")
    return float(text)


def _int(d: _Decoder, node: dict[str, Any], depth: int) -> int:
    return int(_str(node), 16)  # hex: no digit limit, no quadratic parse


def _complex(d: _Decoder, node: dict[str, Any], depth: int) -> complex:
    re_, im = d.items(node, depth)
    if not all(type(x) in (int, float) for x in (re_, im)):
        raise Undecodable("a complex of non-numbers")
    return complex(re_, im)


def _timedelta(d: _Decoder, node: dict[str, Any], depth: int) -> datetime.timedelta:
    days, seconds, micro = node["v"]
    if not all(type(x) is int for x in (days, seconds, micro)):
        raise Undecodable("a timedelta of non-integers")
    return datetime.timedelta(days, seconds, micro)


def _range(d: _Decoder, node: dict[str, Any], depth: int) -> range:
    start, stop, step = node["v"]
    if not all(type(x) is int for x in (start, stop, step)):
        raise Undecodable("a range of non-integers")
    return range(start, stop, step)


def _dict_of(cls: Callable[[Any], Any]) -> Callable[[_Decoder, dict[str, Any], int], Any]:
    return lambda d, node, depth: cls(d.pairs(node, depth))


# Every type that can be made, and how: the bytes choose among these and nothing else.
_TAGS: dict[str, Callable[[_Decoder, dict[str, Any], int], Any]] = {
    "int": _int,
    "float": _float,
    "complex": _complex,
    "tuple": lambda d, node, depth: tuple(d.items(node, depth)),
    "set": lambda d, node, depth: set(d.items(node, depth)),
    "frozenset": lambda d, node, depth: frozenset(d.items(node, depth)),
    "dict": _dict_of(dict),
    "OrderedDict": _dict_of(OrderedDict),
    "Counter": _dict_of(lambda pairs: Counter(dict(pairs))),
    "bytes": lambda d, node, depth: d.buffer(node),
    "bytearray": lambda d, node, depth: bytearray(d.buffer(node)),
    "datetime": lambda d, node, depth: datetime.datetime.fromisoformat(_str(node)),
    "date": lambda d, node, depth: datetime.date.fromisoformat(_str(node)),
    "time": lambda d, node, depth: datetime.time.fromisoformat(_str(node)),
    "timedelta": _timedelta,
    "decimal": lambda d, node, depth: decimal.Decimal(_str(node)),
    "uuid": lambda d, node, depth: uuid.UUID(_str(node)),
    "range": _range,
}


# -- numpy --------------------------------------------------------------------------
def _numpy() -> Any:
    try:
        import numpy as np
    except ImportError:
        raise Undecodable("it holds a numpy array and your kernel has no numpy") from None
    return np


def read_npy(data: bytes) -> Any:
    """An array from ``.npy`` bytes, never unpickling: object dtypes are refused, and the
    header's shape must account for exactly the bytes that follow it."""
    np = _numpy()
    fmt = np.lib.format
    stream = io.BytesIO(data)
    try:
        version = fmt.read_magic(stream)
        read_header = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(version)
        if read_header is None:
            raise Undecodable(f"an array in .npy format {version}, which is not read here")
        shape, fortran, dtype = read_header(stream, max_header_size=10_000)
    except Undecodable:
        raise
    except Exception as exc:
        raise Undecodable(f"an array whose .npy header is damaged ({str(exc)[:120]})") from None
    if dtype.hasobject:
        raise Undecodable("an array of Python objects (dtype object): it would need pickle, which "
                          "is never used; ask the agent for numbers or strings")
    count = 1
    for n in shape:
        count *= n
    body = data[stream.tell():]
    if count * dtype.itemsize != len(body):
        raise Undecodable(f"an array whose header claims shape {shape} of {dtype} "
                          f"({count * dtype.itemsize} bytes) but {len(body)} bytes follow")
    array = np.frombuffer(body, dtype=dtype, count=count).copy()  # a copy: writable, ours
    return array.reshape(shape[::-1]).transpose() if fortran else array.reshape(shape)


def _ndarray(d: _Decoder, node: dict[str, Any], depth: int) -> Any:
    return read_npy(d.buffer(node))


def _npscalar(d: _Decoder, node: dict[str, Any], depth: int) -> Any:
    array = read_npy(d.buffer(node))
    if array.shape != ():
        raise Undecodable("a numpy number that is not 0-dimensional")
    return array[()]


_TAGS["ndarray"] = _ndarray
_TAGS["npscalar"] = _npscalar


# -- images -------------------------------------------------------------------------
def png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a PNG, or None when ``data`` is not one."""
    if not data.startswith(_PNG) or len(data) < 24 or data[12:16] != b"IHDR":
        return None
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _png(d: _Decoder, node: dict[str, Any], depth: int) -> Any:
    from IPython.display import Image

    data = d.buffer(node)
    if png_size(data) is None:
        raise Undecodable("an image that is not a PNG")
    return Image(data=data, format="png")


_TAGS["png"] = _png


# -- pandas -------------------------------------------------------------------------
def _pandas() -> Any:
    try:
        import pandas as pd  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        raise Undecodable("it holds a pandas object and your kernel has no pandas") from None
    return pd


def _arrow_frame(data: bytes) -> Any:
    """A DataFrame from Arrow IPC bytes; extension types (which could name code) refused."""
    if not _arrow_is_safe():
        raise Undecodable("it holds a DataFrame in Arrow form and your kernel has no pyarrow "
                          "14.0.1 or newer")
    import pyarrow as pa  # type: ignore[import-not-found,import-untyped,unused-ignore]

    try:
        table = pa.ipc.open_stream(pa.BufferReader(data)).read_all()
    except Exception as exc:
        raise Undecodable(f"a DataFrame whose Arrow data is damaged ({str(exc)[:120]})") from None

    def plain(t: Any) -> bool:
        if isinstance(t, pa.ExtensionType):
            return False
        return all(plain(t.field(i).type) for i in range(t.num_fields)) if t.num_fields else True

    for f in table.schema:
        if not plain(f.type):
            raise Undecodable(f"a DataFrame column {str(f.name)[:40]!r} of an Arrow extension type, "
                              "which is not read here")
    return table.to_pandas()


def _column(d: _Decoder, col: Any, depth: int) -> Any:
    """One column (a pandas Series without its index) from its description."""
    pd = _pandas()
    np = _numpy()
    if type(col) is not dict:
        raise Undecodable("a column that is not described")
    kind = col.get("kind")
    if kind == "numpy":
        array = read_npy(d.buffer(col))
        if array.ndim != 1 or array.dtype.kind not in "biufcmM":
            raise Undecodable("a column that is not one-dimensional numbers, booleans or dates")
        return pd.Series(array, copy=False)
    if kind == "str":
        values = col.get("v")
        if type(values) is not list or not all(v is None or type(v) is str for v in values):
            raise Undecodable("a text column holding something other than strings")
        dtype = col.get("dtype")
        if dtype not in ("object", "str", "string"):
            raise Undecodable(f"a text column of dtype {str(dtype)[:20]!r}")
        return pd.Series(values, dtype=dtype)
    if kind == "masked":
        dtype = col.get("dtype")
        if dtype not in _MASKED:
            raise Undecodable(f"a column of dtype {str(dtype)[:20]!r}")
        data, mask = read_npy(d.buffer(col)), read_npy(d.buffer(col, "mask"))
        if data.shape != mask.shape or data.ndim != 1 or mask.dtype != np.bool_ or data.dtype.kind not in "biuf":
            raise Undecodable("a column whose values and mask do not match")
        return pd.Series(pd.array(data, dtype=dtype)).mask(mask)
    if kind == "category":
        codes = read_npy(d.buffer(col, "codes"))
        categories = _column(d, col.get("categories"), depth + 1)
        if codes.ndim != 1 or codes.dtype.kind != "i" or (len(codes) and (
                codes.max() >= len(categories) or codes.min() < -1)):
            raise Undecodable("a category column whose codes are out of range")
        return pd.Series(pd.Categorical.from_codes(codes, categories=pd.Index(categories),
                                                   ordered=bool(col.get("ordered"))))
    if kind == "datetimetz":
        tz = col.get("tz")
        if type(tz) is not str or not _TZ.match(tz) or ".." in tz:
            raise Undecodable("a date column with an unreadable time zone")
        array = read_npy(d.buffer(col))
        if array.ndim != 1 or array.dtype.kind != "M":
            raise Undecodable("a date column that holds no dates")
        return pd.Series(array).dt.tz_localize("UTC").dt.tz_convert(tz)
    raise Undecodable(f"a column of an unknown kind {str(kind)[:20]!r}")


def _index(d: _Decoder, node: Any, depth: int) -> Any:
    pd = _pandas()
    if type(node) is not dict:
        raise Undecodable("a DataFrame without its index")
    name = d.node(node.get("name"), depth)
    if "range" in node:
        start, stop, step = node["range"]
        if not all(type(x) is int for x in (start, stop, step)):
            raise Undecodable("a range index of non-integers")
        return pd.RangeIndex(start, stop, step, name=name)
    return pd.Index(_column(d, node.get("data"), depth), name=name)


def _frame(d: _Decoder, node: dict[str, Any], depth: int) -> Any:
    pd = _pandas()
    if "arrow" in node:
        return _arrow_frame(d.buffer(node, "arrow"))
    columns = node.get("columns")
    if type(columns) is not list:
        raise Undecodable("a DataFrame without its columns")
    index = _index(d, node.get("index"), depth)
    data = [_column(d, c.get("data") if type(c) is dict else None, depth) for c in columns]
    if any(len(s) != len(index) for s in data):
        raise Undecodable("a DataFrame whose columns and index differ in length")
    frame = pd.concat([s.set_axis(index) for s in data], axis=1) if data else pd.DataFrame(index=index)
    frame.columns = pd.Index([d.node(c.get("name"), depth) for c in columns])
    return frame


def _series(d: _Decoder, node: dict[str, Any], depth: int) -> Any:
    name = d.node(node.get("name"), depth)
    if "arrow" in node:
        frame = _arrow_frame(d.buffer(node, "arrow"))
        if frame.shape[1] != 1:
            raise Undecodable("a Series whose Arrow data has more than one column")
        return frame.iloc[:, 0].rename(name)
    index = _index(d, node.get("index"), depth)
    data = _column(d, node.get("data"), depth)
    if len(data) != len(index):
        raise Undecodable("a Series whose values and index differ in length")
    return data.set_axis(index).rename(name)


_TAGS["dataframe"] = _frame
_TAGS["series"] = _series


# -- what the person is shown -------------------------------------------------------
class _Repr(reprlib.Repr):
    """reprlib's bounded repr, dicts in their own order (reprlib sorts their keys)."""

    def repr_dict(self, x: dict[Any, Any], level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        shown = [f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}"
                 for k, v in list(x.items())[:self.maxdict]]
        return "{" + ", ".join(shown + (["..."] if len(x) > self.maxdict else [])) + "}"


_REPR = _Repr()
_REPR.maxstring = 80
_REPR.maxother = 80
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = _REPR.maxdict = 8
_REPR.maxlevel = 3


def preview(value: Any, limit: int = PREVIEW_LIMIT) -> str:
    """A short look at a decoded value (its head), made here; at most ``limit`` characters."""
    kind = type(value).__name__
    try:
        if kind in ("DataFrame", "Series") and type(value).__module__.startswith("pandas"):
            text = value.head(5).to_string(max_cols=8, max_colwidth=30) if kind == "DataFrame" \
                else value.head(5).to_string(max_rows=5)
        elif kind == "ndarray":
            np = _numpy()
            text = np.array2string(value, threshold=20, edgeitems=3, max_line_width=100)
        elif kind == "Image" and isinstance(getattr(value, "data", None), bytes):
            size = png_size(value.data)
            text = f"PNG image {size[0]}×{size[1]}" if size else "PNG image"
        else:
            text = _REPR.repr(value)
    except Exception as exc:  # a preview is never worth an error
        text = f"(no preview: {type(exc).__name__})"
    return text if len(text) <= limit else text[: limit - 1] + "…"
