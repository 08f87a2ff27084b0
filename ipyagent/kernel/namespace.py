"""What the model is told about the user's variables: a bounded, secret-free picture.

The loop runs in the user's kernel but the model's code runs in the sibling, where the
user's variables are not. So before a run the model gets their names, types and, for
the common data types, their shape (``Agent.share_namespace``): enough to write
``df.plot(...)`` and to know it must ask for ``df`` to be copied first.

Left out: private names, IPython's own (``In``, ``Out``, ``_1``, ``exit``…), modules, and
ipyagent's own objects (the agent, its context). Shown by name and type only, the value
hidden: anything whose name or text looks secret (``trust.secrets_in``: ``db_pass``,
``passwd``, ``pwd``, ``token``, ``api_key``, ``dsn``, ``conn``, ``auth``…; a string holding
a secret of the environment, shaped like a key, or a URL with ``user:password@``). Only
values the user could see at a glance are shown: scalars and short strings; everything else
by shape.
"""

from __future__ import annotations

import hashlib
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..trust.secrets import secret_values
from ..trust.secrets_in import own_object, secret_name, secret_text

__all__ = ["NamespacePicture", "describe", "picture", "copy_record", "hidden_reason", "MODES"]

MODES = ("describe", "names", "off")
MAX_TOKENS = 1500
SHORT_STRING = 80
_IPYTHON_NAMES = {"In", "Out", "exit", "quit", "get_ipython", "display"}


@dataclass
class NamespacePicture:
    """The user's variables as the model sees them: ``text`` and the ``names`` in it."""

    names: list[str] = field(default_factory=list)
    text: str = ""
    more: int = 0  # left out for length ("and N more")

    def __bool__(self) -> bool:
        return bool(self.names)

    def summary(self) -> str:
        """``the agent sees: df, prices, …`` — one line for the cell."""
        shown = ", ".join(self.names[:8])
        extra = len(self.names) - 8 + self.more
        return "the agent sees: " + shown + (f", … ({extra} more)" if extra > 0 else "")


def hidden_reason(name: str, value: Any, secrets: Mapping[str, str]) -> str | None:
    """Why ``name``'s value may not be shown or copied unasked (its name or text looks
    secret), or None."""
    if secret_name(name):
        return "its name looks secret"
    if isinstance(value, (str, bytes, bytearray)):
        text = value if isinstance(value, str) else bytes(value).decode("latin-1")
        why = secret_text(text, secrets)
        if why:
            return f"it {why}"
    return None


def _listed(ns: Mapping[str, Any]) -> dict[str, Any]:
    """The user's variables the model may know exist: public, not IPython's, not modules,
    not ipyagent's own objects."""
    out = {}
    for name, value in list(ns.items()):
        if name.startswith("_") or name in _IPYTHON_NAMES or not name.isidentifier():
            continue
        if isinstance(value, types.ModuleType) or own_object(value):
            continue
        out[name] = value
    return out


def shareable(ns: Mapping[str, Any], secrets: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The user's variables that may be described and offered for copying: listed, and
    neither their name nor their text looks secret."""
    secrets = secret_values() if secrets is None else secrets
    return {n: v for n, v in _listed(ns).items() if hidden_reason(n, v, secrets) is None}


def _shape(value: Any) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple) and all(isinstance(n, int) for n in shape):
        return shape
    return None


def size_of(value: Any) -> int:
    """A rough size in bytes, for ordering (largest first) and the copy offer."""
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    with_usage = getattr(value, "memory_usage", None)
    if callable(with_usage) and _shape(value) is not None:
        try:
            total = with_usage(deep=True)
            return int(total.sum()) if hasattr(total, "sum") else int(total)
        except Exception:  # noqa: S110 - a size estimate only
            pass
    try:
        size = sys.getsizeof(value)
    except Exception:
        return 0
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        size += 64 * len(value)  # the items, roughly
    return size


def _token_like(text: str) -> bool:
    """A word of letters and digits long enough to be a key (``sk-…``, a hex token)."""
    return len(text) >= 16 and not any(c.isspace() for c in text) \
        and any(c.isdigit() for c in text) and any(c.isalpha() for c in text)


def describe(value: Any) -> str:
    """``DataFrame 1,200×5 (month: object, …)``, ``ndarray (3, 4) float64``, ``list of 3``…"""
    kind = type(value).__name__
    shape = _shape(value)
    if shape is not None and hasattr(value, "columns") and len(shape) == 2:
        cols = list(value.columns)
        dtypes = getattr(value, "dtypes", None)
        parts = []
        for col in cols[:12]:
            try:
                parts.append(f"{col}: {dtypes[col]}" if dtypes is not None else str(col))
            except Exception:
                parts.append(str(col))
        tail = ", …" if len(cols) > 12 else ""
        return f"{kind} {shape[0]:,}×{shape[1]:,} ({', '.join(parts)}{tail})"
    if shape is not None:
        dtype = getattr(value, "dtype", None)
        name = getattr(value, "name", None)
        extra = f" {dtype}" if dtype is not None else ""
        if kind == "Series" and name is not None:
            extra += f", name {str(name)[:40]!r}"
        dims = "×".join(f"{n:,}" for n in shape) or "scalar"
        return f"{kind} {dims}{extra}"
    if isinstance(value, bool) or value is None or isinstance(value, (int, float, complex)):
        text = repr(value)
        return f"{kind} {text}" if len(text) <= SHORT_STRING else f"{kind} ({len(text)} digits)"
    if isinstance(value, str):
        if len(value) <= SHORT_STRING and value.isprintable() and not _token_like(value):
            return f"str {value!r}"
        return f"str of {len(value):,} chars"
    if isinstance(value, (bytes, bytearray)):
        return f"{kind} of {len(value):,} bytes"
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return f"{kind} of {len(value):,}"
    if isinstance(value, type):
        return "class"
    if callable(value):
        return "function" if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)) \
            else f"callable {kind}"
    return kind


def picture(ns: Mapping[str, Any], mode: str = "describe", *, max_tokens: int = MAX_TOKENS,
            secrets: Mapping[str, str] | None = None) -> NamespacePicture:
    """The picture of ``ns`` for the model: largest first, bounded, ``and N more``."""
    if mode == "off":
        return NamespacePicture()
    secrets = secret_values() if secrets is None else secrets
    values = _listed(ns)
    hidden = {n: why for n, v in values.items() if (why := hidden_reason(n, v, secrets))}
    order = sorted(values, key=lambda n: (n in hidden, -size_of(values[n]), n))
    budget = max_tokens * 4  # ~4 characters per token
    lines: list[str] = []
    names: list[str] = []
    used = 0
    for name in order:
        if mode == "names":
            line = f"- {name}"
        elif name in hidden:  # the name and type stay; the value never leaves
            line = f"- {name}: {type(values[name]).__name__} (value hidden: {hidden[name]})"
        else:
            line = f"- {name}: {describe(values[name])}"
        if used + len(line) + 1 > budget:
            break
        lines.append(line)
        names.append(name)
        used += len(line) + 1
    more = len(order) - len(names)
    if not names:
        return NamespacePicture(more=more)
    if more:
        lines.append(f"- and {more} more")
    head = ("The user's notebook has these variables (in the user's own kernel, NOT in your "
            "python tool's kernel: ask the user to copy one with `%agent push NAME` if you "
            "need it, or use it and it will be offered for copying):")
    return NamespacePicture(names, head + "\n" + "\n".join(lines), more)


def copy_record(name: str, value: Any, payload: bytes, *, keep_below: int) -> dict[str, Any]:
    """What the transcript keeps of one copy: name, type, size, sha256; the payload when small."""
    import base64

    record: dict[str, Any] = {"name": name, "type": type(value).__name__,
                              "description": describe(value), "bytes": len(payload),
                              "sha256": hashlib.sha256(payload).hexdigest()}
    if len(payload) <= keep_below:
        record["payload"] = base64.b64encode(payload).decode("ascii")
    else:
        record["note"] = "payload too large to keep: provide this value to re-run"
    return record
