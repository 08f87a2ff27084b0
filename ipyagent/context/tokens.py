"""Token estimates: a real tokenizer when one is installed, a calibrated guess otherwise.

Exact counts only come from the server (``usage.prompt_tokens``). Between requests we
estimate: with ``tiktoken`` (optional extra ``ipyagent[tokens]``) when its encoding is
available locally, else ~4 characters per token. Every reported usage *calibrates* the
estimate: ``scale`` tracks reported / estimated, so budgets follow the real tokenizer of
whatever model is behind the endpoint.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Callable, Sequence

from .items import Item, Message, Reasoning, Summary, ToolCall, ToolResult

__all__ = ["TokenCounter", "item_text", "ITEM_OVERHEAD", "IMAGE_TOKENS"]

ITEM_OVERHEAD = 4  # role/framing tokens per message on the wire
# An image sent to a model that can see (Agent.send_images): providers bill a plot at
# roughly 250–1,600 tokens (OpenAI tiles, Anthropic's width×height/750); one figure in
# the middle of that range, calibrated like the rest by the usage the server reports.
IMAGE_TOKENS = 1000
# Calibration accepts a reported/estimated ratio implying 1 to 8 characters a token.
MIN_RATIO, MAX_RATIO = 0.5, 4.0
_log = logging.getLogger("ipyagent.context.tokens")


def item_text(item: Item) -> str:
    """The text of an item as a model would read it."""
    if isinstance(item, ToolCall):
        return item.name + (item.raw_arguments or json.dumps(item.arguments, ensure_ascii=False))
    if isinstance(item, ToolResult):
        return item.output
    if isinstance(item, (Message, Reasoning, Summary)):
        return item.content or ""
    return ""


_NOT_LOADED: Any = object()
_encoder: Any = _NOT_LOADED  # loaded once per process; every counter shares it


def _load_tiktoken() -> Callable[[str], int] | None:
    global _encoder
    if _encoder is _NOT_LOADED:
        _encoder = _try_tiktoken()
    return _encoder  # type: ignore[no-any-return]


def _try_tiktoken() -> Callable[[str], int] | None:
    try:
        import tiktoken  # type: ignore[import-not-found]  # optional: ipyagent[tokens]

        enc = tiktoken.get_encoding("o200k_base")
    except Exception:  # not installed, or its encoding file cannot be fetched offline
        return None
    return lambda text: len(enc.encode(text, disallowed_special=()))


class TokenCounter:
    """Counts tokens of text and items; calibrated by the server's reported usage.

    One per conversation: the calibration belongs to one model behind one endpoint.
    """

    def __init__(self, use_tokenizer: bool = True) -> None:
        self._encode = _load_tiktoken() if use_tokenizer else None
        self.scale = 1.0  # reported / estimated, smoothed
        self._lock = threading.Lock()
        self._specs: dict[tuple[Any, ...], tuple[int, list[Any]]] = {}  # see specs()

    @property
    def method(self) -> str:
        return "tiktoken" if self._encode else "chars/4"

    def raw(self, text: str) -> int:
        """Uncalibrated tokens of ``text``."""
        if self._encode is not None:
            return self._encode(text)
        return (len(text) + 3) // 4

    def specs(self, specs: Sequence[dict[str, Any]]) -> int:
        """Uncalibrated tokens of the tool specs a request carries (``json.dumps`` of them).

        Every step sends the same tools, and dumping and counting them cost more than the
        rest of the estimate: the count is kept per set of tools, told apart by name,
        description and schema object (held here, so its id is not reused). A schema changed
        in place keeps its old estimate until the tools change; calibration absorbs it.
        """
        key = tuple((s.get("name"), s.get("description"), id(s.get("parameters"))) for s in specs)
        memo = self._specs.get(key)
        if memo is None:
            memo = (self.raw(json.dumps(list(specs))), [s.get("parameters") for s in specs])
            if len(self._specs) >= 8:  # personas and MCP servers change the set: keep a few
                self._specs.clear()
            self._specs[key] = memo
        return memo[0]

    def item(self, item: Item) -> int:
        """Uncalibrated tokens of one item, with per-message overhead (and its images)."""
        images = item.meta.get("images") if isinstance(item, ToolResult) else None
        extra = IMAGE_TOKENS * len(images) if isinstance(images, list) else 0
        return ITEM_OVERHEAD + self.raw(item_text(item)) + extra

    def calibrate(self, estimated_raw: int, reported: int) -> None:
        """Fold one (estimate, server-reported) pair into ``scale``.

        A count no tokenizer could give is ignored: the raw estimate is about 4 characters
        a token, so a ratio outside [0.5, 4] means under 1 or over 8 characters a token —
        a server reporting 50 tokens for a 40,000-character prompt would otherwise let the
        context grow to several windows before compaction.
        """
        if estimated_raw <= 0 or reported <= 0:
            return
        ratio = reported / estimated_raw
        if not MIN_RATIO <= ratio <= MAX_RATIO:
            _log.debug("ignoring reported usage for calibration: %d tokens for an estimate of "
                       "%d (~%.1f characters a token)", reported, estimated_raw,
                       4 * estimated_raw / reported)
            return
        with self._lock:
            # Smooth, but react quickly at first: a small prompt's framing skews one sample.
            self.scale = ratio if self.scale == 1.0 else 0.5 * self.scale + 0.5 * ratio
            self.scale = min(max(self.scale, 0.25), 4.0)

    def count_denser(self, estimated_raw: int, counted: int | None, margin: float = 1.1) -> float:
        """The server counted more than the estimate (it refused an over-long prompt):
        count at least that densely from now on (×1.3 when it did not say how many).
        Returns the new scale."""
        with self._lock:
            if counted and estimated_raw > 0:
                wanted = counted / estimated_raw * margin
            else:
                wanted = self.scale * 1.3
            self.scale = min(max(self.scale, wanted), 4.0)
            return self.scale

    def scaled(self, raw: int) -> int:
        return int(raw * self.scale + 0.5)

    def __repr__(self) -> str:
        return f"<TokenCounter {self.method} ×{self.scale:.2f}>"

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "scale": self.scale}
