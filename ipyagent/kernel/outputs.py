"""Output collection for the sibling kernel: IOPub messages in, nbformat outputs and model text out.

Two audiences read the same outputs. The notebook keeps them whole (images included),
bounded only where unbounded input would otherwise sit in memory: stream text keeps a
head and a tail of at most ``max_output_bytes`` characters, so 100 MB of prints never
accumulates. The model gets ``Execution.text``: plain text, no ANSI codes, images as a
short placeholder, truncated head + tail to ``max_model_chars``.
"""

from __future__ import annotations

import base64
import html
import re
import struct
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._util.nesting import bounded
from .._util.text import head_tail, omitted

__all__ = ["Execution", "OutputCollector", "Status", "collapse_carriage_returns", "finish", "model_text",
           "strip_ansi"]

# "unknown": a remote kernel's connection dropped mid-call (kernel/remote.py), never re-sent.
Status = Literal["ok", "error", "timeout", "died", "unknown"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
_OUTPUT_TYPES = ("stream", "display_data", "execute_result", "error")


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (colours in tracebacks, cursor moves)."""
    return _ANSI.sub("", text)


def collapse_carriage_returns(text: str) -> str:
    """What a terminal would show for progress bars: the last segment after each ``\\r``."""
    if "\r" not in text:
        return text
    lines = text.replace("\r\n", "\n").split("\n")
    return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in lines)


def _png_size(b64: str) -> tuple[int, int] | None:
    """Width and height from a base64 PNG's IHDR chunk (first 24 bytes), or None."""
    try:
        head = base64.b64decode(b64[:32])
    except (ValueError, TypeError):
        return None
    if len(head) >= 24 and head[:8] == b"\x89PNG\r\n\x1a\n":
        width, height = struct.unpack(">II", head[16:24])
        return width, height
    return None


def _size_label(n_bytes: int) -> str:
    if n_bytes >= 1024 * 1024:
        return f"{n_bytes / (1024 * 1024):.1f} MB"
    if n_bytes >= 1024:
        return f"{round(n_bytes / 1024)} KB"
    return f"{n_bytes} B"


def image_placeholder(mime: str, payload: Any, metadata: dict[str, Any] | None = None) -> str:
    """A short stand-in for an image, e.g. ``[image/png 640x480, 23 KB]``."""
    raw = payload if isinstance(payload, str) else "".join(payload)
    # base64 text carries 3 bytes per 4 characters; SVG is plain text.
    n_bytes = len(raw) if mime == "image/svg+xml" else len(raw.strip()) * 3 // 4
    size = _png_size(raw) if mime == "image/png" else None
    meta = (metadata or {}).get(mime, {}) if isinstance(metadata, dict) else {}
    if size is None and isinstance(meta, dict) and "width" in meta and "height" in meta:
        size = (meta["width"], meta["height"])
    dims = f" {size[0]}x{size[1]}" if size else ""
    return f"[{mime}{dims}, {_size_label(n_bytes)}]"


def _text(value: Any) -> str:
    """nbformat allows multiline strings as lists of lines."""
    return value if isinstance(value, str) else "".join(value)


def _data_text(data: dict[str, Any], metadata: dict[str, Any] | None) -> str:
    """Model text for a mime bundle: image placeholders, else text/plain, else a placeholder."""
    images = [image_placeholder(m, v, metadata) for m, v in data.items() if m.startswith("image/")]
    if images:
        return "\n".join(images)
    if "text/plain" in data:
        return _text(data["text/plain"])
    if data:
        mime = next(iter(data))
        return f"[{mime} output, {len(_text(data[mime])) if isinstance(data[mime], (str, list)) else 0} characters]"
    return ""


_CHAINED = re.compile(r"\n\s*(?:The above exception was the direct cause of the following "
                      r"exception:|During handling of the above exception, another exception "
                      r"occurred:)\s*\n")
_FRAME = re.compile(r"^File (.+?):\d+, in ")
_CELL = re.compile(r"^Cell (In\[\d+\], line \d+)(, in <\w+>)?", re.M)
_PACKAGE = re.compile(r"[/\\](?:site|dist)-packages[/\\]([\w.-]+)|^([\w.-]+)[/\\][\w/\\.-]+\.(?:pyx|pxi|pxd)$")
_STDLIB = re.compile(r"[/\\]lib[/\\]python3[\d.]*[/\\]|^<frozen ")


def _library(path: str) -> str | None:
    """The package a traceback frame's file belongs to ("" for the standard library), or
    None for the user's own code."""
    package = _PACKAGE.search(path)
    if package:
        return (package.group(1) or package.group(2)).split(".")[0]
    return "" if _STDLIB.search(path) else None


def short_traceback(tb: str) -> str:
    """An IPython traceback as the model needs it: the last exception of a chain, the frames
    of the user's code (``Cell In[…]``, files outside the installed packages), a line for
    the frames inside libraries, and the error. Why: a pandas ``KeyError`` is ~50 lines of
    pandas internals; at 0.5B the model then called ``read_file`` on pandas' own source
    paths instead of fixing its column. The notebook keeps the whole traceback."""
    chains = _CHAINED.split(tb)
    blocks = [b for b in re.split(r"\n[ \t]*\n", chains[-1].strip("\n")) if b.strip()]
    if len(blocks) < 2:
        return tb
    kept: list[str] = []
    skipped: list[str] = []  # the libraries of the frames left out, in a row

    def flush() -> None:
        if skipped:
            names = ", ".join(dict.fromkeys(n for n in skipped if n)) or "the standard library"
            kept.append(f"[… {len(skipped)} frame{'s' * (len(skipped) != 1)} inside {names} …]")
            skipped.clear()

    last_cell = None  # "Cell In[N], line L" of the frame kept last
    for block in blocks:
        first = block.lstrip("\n").splitlines()[0]
        cell = _CELL.search(block)
        if cell is not None and cell.group(1) == last_cell and cell.group(2):
            # A generator or lambda on the line just shown: nothing new, and IPython may
            # print the cell's first line under it (measured: "----> 3 import json").
            continue
        last_cell = cell.group(1) if cell is not None else None
        frame = _FRAME.match(first)
        library = _library(frame.group(1)) if frame else None
        if library is not None:
            skipped.append(library)
            continue
        flush()
        kept.append(block)
    flush()
    earlier = "[… an earlier exception inside a library led to this one …]\n\n" if len(chains) > 1 else ""
    return earlier + "\n\n".join(kept)


def model_text(outputs: Sequence[Mapping[str, Any]], max_chars: int = 10_000) -> str:
    """The text the model sees for a list of nbformat outputs."""
    parts: list[str] = []
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            parts.append(collapse_carriage_returns(strip_ansi(_text(out.get("text", "")))))
        elif kind in ("execute_result", "display_data"):
            text = strip_ansi(_data_text(out.get("data", {}), out.get("metadata")))
            parts.append(text if text.endswith("\n") else text + "\n")
        elif kind == "error":
            tb = short_traceback(strip_ansi("\n".join(out.get("traceback", []))))
            parts.append((tb or f"{out.get('ename')}: {out.get('evalue')}") + "\n")
    return head_tail("".join(parts).rstrip("\n"), max_chars)


def output_from_msg(kind: str, content: dict[str, Any]) -> dict[str, Any]:
    """An nbformat v4 output (a plain dict) for an IOPub message.

    Built directly rather than with ``nbformat.v4.output_from_msg``: that validates every
    output against the JSON schema, which costs ~5 ms per MB of text on each call — and
    importing nbformat at all costs ~20 MB in the user's kernel (jsonschema), which the
    sibling kernel's client does not need.
    """
    if kind == "stream":
        return {"output_type": "stream", "name": _str(content.get("name"), "stdout"),
                "text": _str(content.get("text"))}
    if kind == "error":
        traceback = content.get("traceback")
        if traceback is not None and not isinstance(traceback, list):
            raise TypeError(f"a traceback is {type(traceback).__name__}, not a list")
        return {
            "output_type": "error",
            "ename": _str(content.get("ename")),
            "evalue": _str(content.get("evalue")),
            "traceback": [_str(line) for line in traceback] if traceback is not None else [],
        }
    out: dict[str, Any] = {
        "output_type": kind,
        "data": _bounded(content.get("data", {})),
        "metadata": _bounded(content.get("metadata", {})),
    }
    if kind == "execute_result":
        out["execution_count"] = _count(content.get("execution_count"))
    return out


def _str(value: Any, default: str = "") -> str:
    """A text field as the protocol has it (missing: ``default``); TypeError for another
    type (a server's list, a number): the message is dropped and counted, not kept for a
    later join or save to fail on."""
    if isinstance(value, str):
        return value
    if value is None:
        return default
    raise TypeError(f"a text field is {type(value).__name__}, not str")


def _bounded(bundle: Any) -> dict[str, Any]:
    """A copy of a mime bundle (or its metadata), each value nested past ``MAX_NESTING``
    levels as its JSON text (``_util.nesting``: it would make every later save fail)."""
    return {key: bounded(value) for key, value in dict(bundle).items()}


class _Stream:
    """One stream output under construction: text chunks, so appends stay O(1)."""

    __slots__ = ("name", "chunks", "size")

    def __init__(self, name: str) -> None:
        self.name = name
        self.chunks: deque[str] = deque()
        self.size = 0

    def append(self, text: str) -> None:
        self.chunks.append(text)
        self.size += len(text)

    def drop_front(self, n: int) -> int:
        """Drop up to ``n`` characters from the front; returns how many were dropped."""
        dropped = 0
        while self.chunks and dropped < n:
            first = self.chunks[0]
            if len(first) <= n - dropped:
                self.chunks.popleft()
                dropped += len(first)
            else:
                cut = n - dropped
                self.chunks[0] = first[cut:]
                dropped += cut
        self.size -= dropped
        return dropped

    def text(self) -> str:
        return "".join(self.chunks)


class OutputCollector:
    """Turns one request's IOPub messages into nbformat outputs with bounded stream text."""

    def __init__(self, max_output_bytes: int = 2_000_000, max_rich_outputs: int = 200,
                 max_rich_bytes: int = 50_000_000) -> None:
        self.max_output_bytes = max_output_bytes
        # Displays (plots, HTML) are kept whole, but not without end: a loop that displays
        # 10,000 figures must not fill the user's kernel and the transcript.
        self.max_rich_outputs = max_rich_outputs
        self.max_rich_bytes = max_rich_bytes
        self._rich_kept = 0
        self._rich_bytes = 0
        self._rich_dropped = 0
        self._rich_dropped_bytes = 0
        self._items: list[_Stream | dict[str, Any]] = []
        self._head_left = max_output_bytes // 2
        self._tail: deque[_Stream] = deque()  # streams that took text after the head filled
        self._tail_size = 0
        self._dropped = 0
        self._clear_pending = False
        self.execution_count: int | None = None
        self.unreadable = 0  # messages skipped because they could not be deserialized

    def add(self, msg: dict[str, Any]) -> None:
        """Take one IOPub message (already filtered to this request)."""
        kind = msg["header"]["msg_type"]
        content = msg["content"]
        if kind == "clear_output":
            if content.get("wait"):
                self._clear_pending = True
            else:
                self._clear()
            return
        if kind == "execute_input":
            self.execution_count = _count(content.get("execution_count"))
            return
        if kind == "update_display_data":
            self._update_display(content)
            return
        if kind not in _OUTPUT_TYPES:
            return
        if self._clear_pending:
            self._clear_pending = False
            self._clear()
        if kind == "stream":
            self._add_stream(_str(content.get("name"), "stdout"), _str(content.get("text")))
            return
        out = output_from_msg(kind, content)
        display_id = (content.get("transient") or {}).get("display_id")
        if display_id:
            # Kept outside nbformat's schema fields so update_display_data can find it.
            out["_display_id"] = display_id
        if kind == "execute_result":
            self.execution_count = _count(content.get("execution_count")) or self.execution_count
        elif kind == "display_data" and not self._keep_rich(out):
            return
        self._items.append(out)

    def _keep_rich(self, out: dict[str, Any]) -> bool:
        """Count a display output against the caps; False when it is past them."""
        size = _data_size(out.get("data", {}))
        if (self._rich_kept >= self.max_rich_outputs
                or self._rich_bytes + size > self.max_rich_bytes):
            self._rich_dropped += 1
            self._rich_dropped_bytes += size
            return False
        self._rich_kept += 1
        self._rich_bytes += size
        return True

    def _clear(self) -> None:
        self._items.clear()
        self._rich_kept = self._rich_bytes = self._rich_dropped = self._rich_dropped_bytes = 0
        self._tail.clear()
        self._tail_size = 0
        self._dropped = 0
        self._head_left = self.max_output_bytes // 2

    def _update_display(self, content: dict[str, Any]) -> None:
        """Replace the displays of that id; each counts against the caps with its new size
        (an update past them is dropped and counted: displays updated to ever larger
        bundles grew the user's kernel without bound)."""
        display_id = (content.get("transient") or {}).get("display_id")
        data, metadata = _bounded(content.get("data", {})), _bounded(content.get("metadata", {}))
        size = _data_size(data)
        for item in self._items:
            if isinstance(item, dict) and item.get("_display_id") == display_id:
                old = _data_size(item.get("data") or {}) if item.get("output_type") == "display_data" else 0
                if self._rich_bytes - old + size > self.max_rich_bytes:
                    self._rich_dropped += 1
                    self._rich_dropped_bytes += size
                    continue
                self._rich_bytes += size - old
                item["data"], item["metadata"] = data, metadata

    def _stream_for(self, name: str) -> _Stream:
        last = self._items[-1] if self._items else None
        if isinstance(last, _Stream) and last.name == name:
            return last
        stream = _Stream(name)
        self._items.append(stream)
        return stream

    def _add_stream(self, name: str, text: str) -> None:
        if not text:
            return
        if self._head_left > 0:
            head, text = text[: self._head_left], text[self._head_left :]
            self._stream_for(name).append(head)
            self._head_left -= len(head)
            if not text:
                return
        last = self._items[-1] if self._items else None
        if self._tail and last is self._tail[-1] and isinstance(last, _Stream) and last.name == name:
            stream = last
        else:
            # A fresh stream for the tail, so text kept in the head is never trimmed.
            stream = _Stream(name)
            self._items.append(stream)
            self._tail.append(stream)
        tail_limit = self.max_output_bytes - self.max_output_bytes // 2
        if len(text) > tail_limit:
            self._dropped += len(text) - tail_limit
            text = text[-tail_limit:]
        stream.append(text)
        self._tail_size += len(text)
        while self._tail_size > tail_limit and self._tail:
            oldest = self._tail[0]
            dropped = oldest.drop_front(self._tail_size - tail_limit)
            self._tail_size -= dropped
            self._dropped += dropped
            if oldest.size == 0:
                self._tail.popleft()
                if oldest is not stream:
                    self._items.remove(oldest)

    @property
    def has_error(self) -> bool:
        """True when an error output was seen."""
        return any(isinstance(i, dict) and i.get("output_type") == "error" for i in self._items)

    @property
    def dropped_chars(self) -> int:
        """Stream characters dropped to stay within ``max_output_bytes``."""
        return self._dropped

    def outputs(self) -> list[dict[str, Any]]:
        """The finished nbformat outputs (consecutive same-name streams merged)."""
        marker_at = self._tail[0] if self._dropped and self._tail else None
        result: list[dict[str, Any]] = []
        for item in self._items:
            if isinstance(item, _Stream):
                text = item.text()
                if item is marker_at:
                    text = f"\n{omitted(self._dropped)}\n{text}"
                if not text:
                    continue
                prev = result[-1] if result else None
                if prev is not None and prev.get("output_type") == "stream" and prev["name"] == item.name:
                    prev["text"] += text
                else:
                    result.append(output_from_msg("stream", {"name": item.name, "text": text}))
            else:
                out = {k: v for k, v in item.items() if k != "_display_id"}
                result.append(out)
        if self._rich_dropped:
            note = (f"[{self._rich_dropped} more displayed outputs ({_size_label(self._rich_dropped_bytes)}) "
                    f"were not kept: at most {self.max_rich_outputs} displays or "
                    f"{_size_label(self.max_rich_bytes)} per call]\n")
            result.append(output_from_msg("stream", {"name": "stderr", "text": note}))
        return result


def _data_size(data: Mapping[str, Any]) -> int:
    """About how many bytes a display bundle holds (base64 images, HTML, text)."""
    size = 0
    for value in data.values():
        if isinstance(value, str):
            size += len(value)
        elif isinstance(value, list):
            size += sum(len(v) for v in value if isinstance(v, str))
        else:
            size += len(str(value))
    return size


@dataclass
class Execution:
    """The result of running code in the sibling kernel."""

    status: Status
    outputs: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""
    execution_count: int | None = None
    duration: float = 0.0
    restarted: bool = False
    error_name: str | None = None

    @property
    def ok(self) -> bool:
        """True when the code ran to completion without an exception."""
        return self.status == "ok"

    def __repr__(self) -> str:
        first = self.text.strip().splitlines()[0] if self.text.strip() else ""
        if len(first) > 60:
            first = first[:59] + "…"
        extra = ", restarted" if self.restarted else ""
        return (
            f"<Execution {self.status} [{self.execution_count}] {self.duration * 1000:.0f} ms"
            f"{extra}: {first!r}>"
        )

    def _repr_html_(self) -> str:
        colour = {"ok": "#2a7", "error": "#c33", "timeout": "#c80", "died": "#c33", "unknown": "#c80"}[self.status]
        note = " · kernel restarted" if self.restarted else ""
        return (
            f"<div><b style='color:{colour}'>{self.status}</b> "
            f"<small>[{self.execution_count}] {self.duration:.3f} s · {len(self.outputs)} outputs{note}</small>"
            f"<pre style='white-space:pre-wrap'>{html.escape(self.text)}</pre></div>"
        )


def finish(collector: OutputCollector, status: Status, reply: Mapping[str, Any], *, note: str = "",
           pre_note: str = "", started: float, restarted: bool, max_model_chars: int) -> Execution:
    """The ``Execution`` of one call: its outputs, and the model's text with the notes around it
    (one assembly for the local sibling and a remote kernel)."""
    outputs = collector.outputs()
    for_model = outputs
    if status == "timeout":
        for_model = [o for o in outputs if o.get("ename") != "KeyboardInterrupt"]
    text = model_text(for_model, max_model_chars)
    if collector.unreadable:
        note = (f"[{collector.unreadable} output message(s) from the kernel could not be "
                "read (bad signature) and were skipped.]" + (f" {note}" if note else ""))
    if note:
        text = f"{text}\n{note}" if text else note
    if pre_note:
        text = f"{pre_note}\n{text}"
    return Execution(
        status=status, outputs=outputs, text=text,
        execution_count=_count(reply.get("execution_count")) or collector.execution_count,
        duration=time.monotonic() - started, restarted=restarted,
        error_name=_name(reply.get("ename") or next((o.get("ename") for o in reversed(outputs)
                                                     if o.get("output_type") == "error"), None))
        if status == "error" else None)


def _count(value: Any) -> int | None:
    """An execution count as the protocol has it (a positive int), else None: a server's
    reply of another type (a string, a list nested 500 deep) must not reach the items."""
    return value if type(value) is int and value > 0 else None


def _name(value: Any) -> str | None:
    """An exception's name as a short string, or None."""
    return value[:200] if isinstance(value, str) and value else None
