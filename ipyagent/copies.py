"""Copies between the user's kernel and the sibling: explicit, one value at a time, recorded.

Nothing is shared: ``push`` pickles a value of the user's kernel into the sibling, ``pull``
brings a copy of a sibling value back, and each copy becomes a user message in the context
(``meta["copy"]``: name, type, size, sha256, and the payload when small) — so the model
knows the name now exists where its code runs, and the transcript can recreate it.
"""

from __future__ import annotations

import base64
import pickle
from typing import TYPE_CHECKING, Any

from ._text import one_line
from .items import Message
from .kernel.transfer import PROTOCOL, serialize
from .namespace import copy_record, describe

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["push", "pull", "KEEP_PAYLOAD", "human_size", "recorded_copies"]

KEEP_PAYLOAD = 256 * 1024  # pickled bytes kept in the transcript (larger: a note says so)


def human_size(n: int) -> str:
    """``180 KB``, ``1.2 MB``."""
    size = float(n)
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{int(size)} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} bytes"


def _record(agent: Agent, text: str, record: dict[str, Any]) -> None:
    agent.context.append(Message("user", text, meta={"copy": record}))


async def push(agent: Agent, values: dict[str, Any], *, why: str = "the user copied") -> list[dict[str, Any]]:
    """Copy each of ``values`` into the sibling; the records (also appended to the context)."""
    kernel = agent.kernel
    records = []
    for name, value in values.items():
        payload = serialize({name: value}, kernel.max_transfer_bytes)
        await kernel.push_payload_async(payload, [name])
        record = copy_record(name, value, base64.b64decode(payload), keep_below=KEEP_PAYLOAD)
        record["direction"] = "push"
        _record(agent, f"[ipyagent: {why} `{name}` ({one_line(describe(value), 200)}, "
                       f"{human_size(record['bytes'])} pickled) from the user's kernel into your "
                       f"python kernel; it is defined there now]", record)
        records.append(record)
    return records


async def pull(agent: Agent, name: str, local: str | None = None) -> Any:
    """A copy of the sibling's ``name`` (recorded; the caller puts it in the user's kernel)."""
    value = await agent.kernel.pull_async(name)
    try:
        data = pickle.dumps(value, protocol=PROTOCOL)
    except Exception:  # it came pickled; cloudpickle may be needed to pickle it again
        data = b""
    record = copy_record(name, value, data, keep_below=0)
    record.update(direction="pull", local=local or name)
    record.pop("note", None)
    as_ = f" as `{local}`" if local and local != name else ""
    _record(agent, f"[ipyagent: the user took a copy of `{name}` ({one_line(describe(value), 200)}) "
                   f"from your python kernel into their kernel{as_}]", record)
    return value


def recorded_copies(items: Any) -> list[dict[str, Any]]:
    """The pushes recorded in ``items`` (a context), oldest first."""
    out = []
    for item in items:
        meta = getattr(item, "meta", None) or {}
        if isinstance(meta.get("copy"), dict) and meta["copy"].get("direction") == "push":
            out.append(meta["copy"])
    return out
