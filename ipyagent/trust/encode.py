"""A value as bytes of data, made where the model's code runs (the sibling kernel).

Self-contained on purpose: its source is sent to the sibling and run there (``SOURCE``), so
it imports only the standard library, and numpy, pandas, pyarrow, matplotlib or PIL only
when the value is one of theirs (they are then imported already). What it makes is read on
the user's side by ``values.decode``, which trusts none of it: this side only has to be
right for honest values, and to refuse everything else with a sentence saying what to do.

The bytes: ``MAGIC``, an 8-byte big-endian header length, a UTF-8 JSON header
``{"v": tree, "buffers": [sizes]}``, then the buffers. In the tree, JSON's null, booleans,
numbers, strings and arrays (lists) are themselves; every other type is an object tagged
``{"$": name, ...}`` from a fixed list (tuple, set, dict, bytes, datetime, ndarray as
``.npy`` without pickle, DataFrame as Arrow IPC or as columns, PNG for figures and images).
"""

from __future__ import annotations

import io
import json
import math
import sys
from typing import Any

__all__ = ["MAGIC", "MAX_DEPTH", "Refused", "encode", "pull_answer"]

MAGIC = b"IPYAGENT-VALUE/1\n"
MAX_DEPTH = 100
_BIG_INT_DIGITS = 4000  # past this, an int goes as hex (str() of an int is bounded at 4300)


class Refused(Exception):
    """The value cannot cross as data; the message says what and what to do instead."""


def _type_name(v: Any) -> str:
    t = type(v)
    module = getattr(t, "__module__", "") or ""
    name = getattr(t, "__qualname__", t.__name__)
    return name if module in ("builtins", "__main__", "") else f"{module.split('.')[0]}.{name}"


def _advice(v: Any, where: str) -> str:
    """The sentence for a value that cannot cross: what it is and what to ask for instead."""
    name = _type_name(v)
    if isinstance(v, type):
        return (f"{where} is a class: classes cannot be copied safely (only data crosses); "
                "ask the agent for its source code, or for the data you want from it")
    if callable(v) and (hasattr(v, "__code__") or type(v).__name__ in ("builtin_function_or_method",
                                                                         "method")):
        return (f"{where} is a function: functions cannot be copied safely (only data "
                "crosses); ask the agent for its source code")
    if type(v).__name__ == "module":
        return f"{where} is a module: import it in your own kernel instead"
    hint = "ask the agent for its data as a dict, a list or a DataFrame"
    if hasattr(v, "get_params") or hasattr(v, "coef_") or hasattr(v, "params"):
        hint = "ask the agent for its parameters as a dict"
    elif hasattr(v, "__dict__"):
        hint = f"ask the agent for vars({where}) or the fields you need as a dict"
    elif hasattr(v, "__iter__"):
        hint = f"ask the agent for list({where})"
    short = name.rsplit(".", 1)[-1]
    full = f" ({name})" if name != short else ""
    return (f"{where} is a `{short}` object{full}: it cannot be copied safely — only data "
            f"crosses (numbers, strings, lists, dicts, arrays, DataFrames, figures); {hint}")


class _Encoder:
    def __init__(self, accept: tuple[str, ...]) -> None:
        self.accept = accept
        self.buffers: list[bytes] = []
        self.open: set[int] = set()  # ids of the containers being encoded (a cycle check)

    def buffer(self, data: bytes) -> int:
        self.buffers.append(bytes(data))
        return len(self.buffers) - 1

    def node(self, v: Any, where: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise Refused(f"{where} is nested more than {MAX_DEPTH} levels deep: it cannot be "
                          "copied; ask the agent for a flatter structure")
        t = type(v)
        if v is None or t is bool or t is str:
            return v
        if t is int:
            if abs(v) < 10 ** _BIG_INT_DIGITS:
                return v
            return {"$": "int", "v": hex(v)}
        if t is float:
            if math.isfinite(v):
                return v
            return {"$": "float", "v": "nan" if v != v else ("inf" if v > 0 else "-inf")}
        if t is complex:
            return {"$": "complex", "v": [self.node(v.real, where, depth + 1),
                                          self.node(v.imag, where, depth + 1)]}
        if t in (bytes, bytearray):
            return {"$": t.__name__, "b": self.buffer(v)}
        if t in (list, tuple, set, frozenset, dict) or _is_stdlib_mapping(v):
            return self.container(v, where, depth)
        special = self.special(v, where, depth)
        if special is not None:
            return special
        raise Refused(_advice(v, where))

    def container(self, v: Any, where: str, depth: int) -> Any:
        if id(v) in self.open:
            raise Refused(f"{where} contains itself (a cycle): it cannot be copied; ask the "
                          "agent for a copy without the cycle")
        self.open.add(id(v))
        try:
            t = type(v)
            if t is list:
                return [self.node(x, f"{where}[{i}]", depth + 1) for i, x in enumerate(v)]
            if t is tuple:
                return {"$": "tuple", "v": [self.node(x, f"{where}[{i}]", depth + 1)
                                            for i, x in enumerate(v)]}
            if t in (set, frozenset):
                return {"$": t.__name__, "v": [self.node(x, f"{where} item", depth + 1) for x in v]}
            pairs = [[self.node(k, f"{where} key {k!r:.40}", depth + 1),
                      self.node(x, f"{where}[{k!r:.40}]", depth + 1)] for k, x in v.items()]
            return {"$": {dict: "dict"}.get(t, t.__name__), "v": pairs}
        finally:
            self.open.discard(id(v))

    def special(self, v: Any, where: str, depth: int) -> Any:
        """Dates, decimals, numpy, pandas, figures and images; None if ``v`` is none of them."""
        import datetime
        import decimal
        import uuid

        t = type(v)
        if t is datetime.datetime or t is datetime.date or t is datetime.time:
            return {"$": t.__name__, "v": v.isoformat()}
        if t is datetime.timedelta:
            return {"$": "timedelta", "v": [v.days, v.seconds, v.microseconds]}
        if t is decimal.Decimal:
            return {"$": "decimal", "v": str(v)}
        if t is uuid.UUID:
            return {"$": "uuid", "v": str(v)}
        if t is range:
            return {"$": "range", "v": [v.start, v.stop, v.step]}
        module = getattr(t, "__module__", "") or ""
        np = sys.modules.get("numpy")
        if np is not None and (t is np.ndarray or isinstance(v, np.generic)):
            return self.numpy(v, where, np)
        if module.startswith("pandas") and t.__name__ in ("DataFrame", "Series"):
            return self.pandas(v, where, depth)
        if module.startswith("matplotlib") and t.__name__ == "Figure":
            return self.png(_figure_png(v), where, "figure")
        pil = sys.modules.get("PIL.Image")
        if pil is not None and isinstance(v, pil.Image):
            out = io.BytesIO()
            v.save(out, format="PNG")
            return self.png(out.getvalue(), where, "image")
        if module.startswith("IPython") and t.__name__ == "Image" and getattr(v, "format", "") == "png" \
                and isinstance(getattr(v, "data", None), bytes):
            return self.png(v.data, where, "image")
        return None

    def png(self, data: bytes, where: str, kind: str) -> Any:
        if "png" not in self.accept:
            raise Refused(f"{where} is a {kind}: your kernel cannot show images; ask the agent "
                          "to save it as a PNG file")
        return {"$": "png", "b": self.buffer(data), "kind": kind}

    def numpy(self, v: Any, where: str, np: Any) -> Any:
        if "numpy" not in self.accept:
            raise Refused(f"{where} is a numpy {'array' if type(v) is np.ndarray else 'number'}, "
                          f"and your kernel has no numpy: ask the agent for {where}.tolist()")
        array = np.asarray(v) if not isinstance(v, np.ndarray) else v
        if array.dtype.hasobject:
            raise Refused(f"{where} is a numpy array of Python objects (dtype object): it cannot "
                          f"be copied safely; ask the agent for {where}.tolist() or an array of "
                          "numbers or strings (e.g. astype(float) or astype(str))")
        out = io.BytesIO()
        np.lib.format.write_array(out, np.ascontiguousarray(array) if array.ndim else array,
                                  allow_pickle=False)
        tag = "ndarray" if type(v) is np.ndarray else "npscalar"
        return {"$": tag, "b": self.buffer(out.getvalue())}

    # -- pandas ---------------------------------------------------------------------
    def pandas(self, v: Any, where: str, depth: int) -> Any:
        if "pandas" not in self.accept:
            raise Refused(f"{where} is a pandas {type(v).__name__}, and your kernel has no pandas "
                          f"(or no numpy): ask the agent for {where}.to_dict()")
        series = type(v).__name__ == "Series"
        if "arrow" in self.accept:
            arrow = self.arrow(v, series)
            if arrow is not None:
                if series:
                    arrow["name"] = self.node(v.name, f"{where}.name", depth + 1)
                return arrow
        return self.columns(v, where, depth, series)

    def arrow(self, v: Any, series: bool) -> Any:
        """Arrow IPC of the frame (None when pyarrow is missing here or refuses it)."""
        try:
            import pyarrow as pa  # type: ignore[import-not-found,import-untyped,unused-ignore]
        except ImportError:
            return None
        frame = v.to_frame(name="values") if series else v
        try:
            table = pa.Table.from_pandas(frame, preserve_index=True)
            out = pa.BufferOutputStream()
            with pa.ipc.new_stream(out, table.schema) as writer:
                writer.write_table(table)
        except Exception:  # mixed object columns and such: the column form says what is wrong
            return None
        return {"$": "series" if series else "dataframe", "arrow": self.buffer(out.getvalue().to_pybytes())}

    def columns(self, v: Any, where: str, depth: int, series: bool) -> Any:
        import pandas as pd  # type: ignore[import-not-found,import-untyped,unused-ignore]

        if isinstance(v.index, pd.MultiIndex) or (not series and isinstance(v.columns, pd.MultiIndex)):
            raise Refused(f"{where} has a MultiIndex: without pyarrow it cannot be copied; ask the "
                          f"agent for {where}.reset_index() (and flat column names)")
        index = self.index(v.index, where, depth)
        if series:
            return {"$": "series", "name": self.node(v.name, f"{where}.name", depth + 1),
                    "data": self.column(v, f"{where}", depth), "index": index}
        cols = [{"name": self.node(name, f"{where} column name", depth + 1),
                 "data": self.column(v.iloc[:, i], f"{where}[{name!r:.40}]", depth)}
                for i, name in enumerate(v.columns)]
        return {"$": "dataframe", "columns": cols, "index": index}

    def index(self, index: Any, where: str, depth: int) -> Any:
        import pandas as pd

        name = self.node(index.name, f"{where}.index.name", depth + 1)
        if type(index) is pd.RangeIndex:
            return {"range": [index.start, index.stop, index.step], "name": name}
        return {"data": self.column(pd.Series(index, copy=False), f"{where}.index", depth), "name": name}

    def column(self, s: Any, where: str, depth: int) -> Any:
        import numpy as np
        import pandas as pd

        dtype = s.dtype
        if isinstance(dtype, pd.CategoricalDtype):
            return {"kind": "category", "ordered": bool(dtype.ordered),
                    "codes": self.numpy(s.cat.codes.to_numpy(), where, np)["b"],
                    "categories": self.column(pd.Series(dtype.categories), f"{where} categories", depth)}
        if isinstance(dtype, pd.DatetimeTZDtype):
            utc = s.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
            return {"kind": "datetimetz", "tz": str(dtype.tz), "b": self.numpy(utc, where, np)["b"]}
        is_object = isinstance(dtype, np.dtype) and dtype.kind == "O"
        if isinstance(dtype, pd.StringDtype) or is_object:
            values = [None if _missing(x) else x for x in s.tolist()]
            bad = next((x for x in values if x is not None and type(x) is not str), None)
            if bad is not None:
                raise Refused(f"{where} holds {_type_name(bad)} values: without pyarrow only "
                              "columns of numbers, dates, booleans or strings can be copied; ask "
                              f"the agent for {where}.astype(str), or for numbers")
            return {"kind": "str", "dtype": "object" if is_object else str(dtype), "v": values}
        if isinstance(dtype, pd.api.extensions.ExtensionDtype) and str(dtype) in _MASKED:
            base = {"b": "bool"}.get(dtype.kind, dtype.numpy_dtype.name)  # type: ignore[union-attr]
            mask = s.isna().to_numpy()
            data = s.to_numpy(dtype=base, na_value=False if base == "bool" else 0)
            return {"kind": "masked", "dtype": str(dtype), "b": self.numpy(data, where, np)["b"],
                    "mask": self.numpy(mask, where, np)["b"]}
        if isinstance(dtype, np.dtype) and dtype.kind in "biufcmM":
            return {"kind": "numpy", "b": self.numpy(s.to_numpy(), where, np)["b"]}
        raise Refused(f"{where} has the dtype {dtype}: without pyarrow it cannot be copied; ask the "
                      f"agent for {where}.astype(str) or a column of numbers")


_MASKED = ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64",
           "Float32", "Float64", "boolean")


def _missing(x: Any) -> bool:
    """None, NaN or pandas' NA (a string column's missing values)."""
    if x is None or (type(x) is float and x != x):
        return True
    return type(x).__name__ in ("NAType", "NaTType")


def _is_stdlib_mapping(v: Any) -> bool:
    import collections

    return type(v) in (collections.OrderedDict, collections.Counter)


def _figure_png(fig: Any) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png", bbox_inches="tight")
    return out.getvalue()


def encode(value: Any, accept: tuple[str, ...] = ("numpy", "pandas", "arrow", "png"),
           where: str = "the value") -> bytes:
    """``value`` as bytes of data (``Refused``, with what to do, for anything else).

    ``accept``: what the reading side can make (``numpy``, ``pandas``, ``arrow``, ``png``).
    """
    enc = _Encoder(tuple(accept))
    tree = enc.node(value, where, 0)
    header = json.dumps({"v": tree, "buffers": [len(b) for b in enc.buffers]},
                        separators=(",", ":"), allow_nan=False).encode("utf-8")
    return b"".join([MAGIC, len(header).to_bytes(8, "big"), header, *enc.buffers])


def pull_answer(ns: dict[str, Any], name: str, limit: int, accept: tuple[str, ...]) -> tuple[str, ...]:
    """What a pull evaluates to in the sibling: ``("ok", base64)`` or ``(error kind, message)``."""
    import base64

    if name not in ns:
        return ("NameError", f"name {name!r} is not defined in the sibling kernel")
    try:
        data = encode(ns[name], accept, name)
    except Refused as exc:
        return ("TypeError", f"cannot copy {name!r}: {exc}")
    except RecursionError:
        return ("TypeError", f"cannot copy {name!r}: it is nested too deeply")
    except Exception as exc:  # the value's own code failed (a property, savefig): say so
        return ("TypeError", f"cannot copy {name!r}: encoding it failed ({type(exc).__name__}: "
                             f"{str(exc)[:200]})")
    if len(data) > limit:
        return ("ValueError", f"cannot copy {name!r}: {len(data)} bytes, over max_transfer_bytes={limit}")
    return ("ok", base64.b64encode(data).decode("ascii"))


def _source() -> str:
    """This module's source, to run in the sibling (``exec`` into a fresh namespace)."""
    import inspect

    return inspect.getsource(sys.modules[__name__])
