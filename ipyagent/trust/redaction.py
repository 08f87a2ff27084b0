"""Secret values out of tool output, before the model, the display or a file sees it.

The loop passes every tool's live ``ToolOutput`` events through a ``LiveRedactor`` and its
``ToolResult`` through ``redact_result``: the python tool, the file tools, MCP and
user-defined tools all meet there, so they are redacted in one place. A secret in any form
``trust.secrets.SecretScanner`` knows becomes ``[redacted $NAME]``; an image whose data holds one
is dropped (rewriting base64 would only break it). ``redaction_notice`` is the one line the
user reads about it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from .secrets import SecretScanner, marker, scanner

__all__ = ["LiveRedactor", "Redactable", "redact_result", "redaction_notice"]


class Redactable(Protocol):
    """What ``redact_result`` rewrites of a ``context.items.ToolResult`` (a layer above)."""

    output: str
    outputs: list[dict[str, Any]]
    meta: dict[str, Any]

_TEXT_BINARY = ("image/svg+xml",)  # an image/* that is text, redacted like text


def _is_binary(mime: Any) -> bool:
    """True for base64-encoded payloads (PNG, JPEG, PDF…): dropped, never rewritten."""
    if not isinstance(mime, str) or "/" not in mime or mime in _TEXT_BINARY:
        return False
    return mime.startswith(("image/", "audio/", "video/")) or mime in ("application/pdf",
                                                                       "application/octet-stream")


def _joined(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _redact(obj: Any, scan: SecretScanner, names: dict[str, None], sep: str = "") -> Any:
    """``obj`` (JSON-like) with secrets redacted in every string; found names into ``names``."""
    if isinstance(obj, str):
        text, found = scan.redact(obj)
        names.update(dict.fromkeys(found))
        return text
    if isinstance(obj, list):
        if obj and all(isinstance(x, str) for x in obj):
            lines = [_redact(x, scan, names) for x in obj]
            whole = sep.join(lines)
            if scan.find(whole):  # split across elements (nbformat's lines, traceback frames)
                return [_redact(whole, scan, names)]
            return lines
        return [_redact(x, scan, names) for x in obj]
    if isinstance(obj, Mapping):
        out: dict[Any, Any] = {}
        dropped: list[str] = []
        for key, value in obj.items():
            binary = _is_binary(key) or (key == "data" and _is_binary(obj.get("mime")))
            if binary and isinstance(value, (str, list)):
                name = scan.find(_joined(value))
                if name:
                    names[name] = None
                    dropped.append(f"{marker(name)}: {key if _is_binary(key) else obj.get('mime')} "
                                   "output dropped")
                    continue
                out[key] = value
            else:
                out[key] = _redact(value, scan, names, "\n" if key == "traceback" else "")
        if dropped and any(_is_binary(k) for k in obj):  # a mime bundle: say it where it was
            plain = out.get("text/plain")
            out["text/plain"] = "\n".join([*dropped, *([_joined(plain)] if plain else [])])
        return out
    return obj


def redact_result(result: Redactable, secrets: SecretScanner | Mapping[str, str]) -> list[str]:
    """Redact ``result`` in place (output, rich outputs, meta); the names of what was found."""
    scan = secrets if isinstance(secrets, SecretScanner) else scanner(secrets)
    if not scan:
        return []
    names: dict[str, None] = {}
    result.output = _redact(result.output, scan, names)
    result.outputs = _redact(result.outputs, scan, names)
    meta = _redact(result.meta, scan, names)
    if isinstance(meta.get("images"), list):  # an image that held a secret lost its data
        meta["images"] = [i for i in meta["images"] if not isinstance(i, dict) or "data" in i]
    result.meta = meta
    return list(names)


def redaction_notice(names: list[str], tool: str) -> str:
    """``redacted $OPENAI_API_KEY from python's output``."""
    listed = ", ".join(f"${n}" for n in names)
    return f"redacted {listed} from {tool or 'a tool'}'s output"


class LiveRedactor:
    """Redacts a call's live ``ToolOutput`` events, per stream, across chunk boundaries.

    A chunk's tail that could be the start of a secret is held back until the next chunk
    (or ``flush`` at the end of the call) shows whether it is. Only tails of at least
    ``trust.secrets.MIN_HELD`` visible characters are held, so ordinary output is never
    delayed; a secret trickled out a few characters per flush can show live, but never in
    the result the model, the saved cell or a file gets.
    """

    def __init__(self, secrets: SecretScanner | Mapping[str, str]) -> None:
        self.scan = secrets if isinstance(secrets, SecretScanner) else scanner(secrets)
        self.names: dict[str, None] = {}
        self._held: dict[str, tuple[Any, str]] = {}  # stream name -> (last event, held text)

    def feed(self, event: Any) -> list[Any]:
        """The events to pass on for ``event`` (a ToolOutput is redacted; others pass)."""
        text = getattr(event, "text", None)
        if not self.scan or not isinstance(text, str) or not hasattr(event, "call"):
            return [event]
        _, held = self._held.pop(event.name, (None, ""))
        text, found = self.scan.redact(held + text)
        self.names.update(dict.fromkeys(found))
        cut = self.scan.held_from(text)
        if cut < len(text):
            self._held[event.name] = (event, text[cut:])
        return [dataclasses.replace(event, text=text[:cut])] if cut else []

    def flush(self) -> list[Any]:
        """The held tails, redacted, as events (the call ended)."""
        out = []
        for event, held in self._held.values():
            text, found = self.scan.redact(held)
            self.names.update(dict.fromkeys(found))
            out.append(dataclasses.replace(event, text=text))
        self._held.clear()
        return out
