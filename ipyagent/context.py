"""``Context``: the conversation as an ordered, editable list of items.

It is data: the same items are sent to the model, shown to the user and saved. It acts
like a list (``len``, indexing, slicing, iteration, ``append``/``insert``/``pop``/
``remove``) and keeps a per-item token estimate so that appending is O(1).
"""

from __future__ import annotations

import html
from typing import Any, Callable, Iterable, Iterator, MutableSequence, overload

from ._text import one_line, visible
from .items import Item, Message, Reasoning, Summary, ToolCall, ToolResult, item_from_dict
from .tokens import TokenCounter

__all__ = ["Context"]

_ITEM_TYPES = (Message, ToolCall, ToolResult, Reasoning, Summary)


class Context(MutableSequence[Item]):
    """The ordered items of a conversation plus its system prompt."""

    def __init__(self, items: Iterable[Item] = (), system: str = "",
                 counter: TokenCounter | None = None) -> None:
        self.system = system
        # Its own counter: calibration is per conversation (the tokenizer is shared).
        self.counter = counter or TokenCounter()
        # Set by the Agent (compaction.bind_settings) so that compaction_preview() needs no
        # arguments and follows the agent's current settings; compaction_settings overrides.
        self.settings_source: Callable[[], dict[str, Any]] | None = None
        self.compaction_settings: dict[str, Any] = {}
        self._items: list[Item] = []
        self._tokens: list[int] = []
        self._total = 0
        self.extend(items)

    # -- list protocol -------------------------------------------------------------
    @overload
    def __getitem__(self, index: int) -> Item: ...
    @overload
    def __getitem__(self, index: slice) -> Context: ...
    def __getitem__(self, index: int | slice) -> Item | Context:
        if isinstance(index, slice):
            return Context(self._items[index], system=self.system, counter=self.counter)
        return self._items[index]

    def __setitem__(self, index: int | slice, value: Any) -> None:  # type: ignore[override]
        if isinstance(index, slice):
            values = list(value)
            for v in values:
                _check(v)
            self._items[index] = values
        else:
            _check(value)
            self._items[index] = value
        self._recount()

    def __delitem__(self, index: int | slice) -> None:
        del self._items[index]
        self._recount()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self._items)

    def insert(self, index: int, value: Item) -> None:
        _check(value)
        self._items.insert(index, value)
        self._recount()

    def append(self, value: Item) -> None:
        """Append one item (O(1): only its own tokens are estimated)."""
        _check(value)
        self._items.append(value)
        n = self.counter.item(value)
        self._tokens.append(n)
        self._total += n

    def clear(self) -> None:
        self._items.clear()
        self._recount()

    def _recount(self) -> None:
        self._tokens = [self.counter.item(i) for i in self._items]
        self._total = sum(self._tokens)

    # -- helpers -------------------------------------------------------------------
    def add_user(self, text: str) -> Message:
        """Append a user message and return it."""
        msg = Message("user", text)
        self.append(msg)
        return msg

    @property
    def tokens(self) -> int:
        """Estimated tokens of the system prompt plus every item (calibrated)."""
        return self.counter.scaled(self.raw_tokens)

    @property
    def raw_tokens(self) -> int:
        """Uncalibrated estimate (what calibration compares with the server's count)."""
        return self._total + self.counter.raw(self.system) + 4

    def item_tokens(self, index: int) -> int:
        """Calibrated estimate of one item."""
        return self.counter.scaled(self._tokens[index])

    def compaction_preview(self, **settings: Any) -> Any:
        """What compaction would summarise and keep now (nothing changes)."""
        from .compaction import preview

        base = self.settings_source() if self.settings_source is not None else {}
        return preview(self, **{**base, **self.compaction_settings, **settings})

    def tool_call(self, call_id: str) -> ToolCall | None:
        """The call with this id, if present."""
        for item in self._items:
            if isinstance(item, ToolCall) and item.id == call_id:
                return item
        return None

    def to_dicts(self) -> list[dict[str, Any]]:
        return [i.to_dict() for i in self._items]

    @classmethod
    def from_dicts(cls, data: Iterable[dict[str, Any]], system: str = "",
                   counter: TokenCounter | None = None) -> Context:
        return cls((item_from_dict(d) for d in data), system=system, counter=counter)

    def copy(self) -> Context:
        return Context.from_dicts(self.to_dicts(), system=self.system, counter=self.counter)

    def to_notebook(self) -> Any:
        """The context as an nbformat v4 notebook (one cell per item)."""
        from .transcripts.export import context_to_notebook

        return context_to_notebook(self)

    # -- reprs ---------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"<Context: {self._count()}, ~{self.tokens} tokens>"

    def _count(self) -> str:
        return f"{len(self)} item{'' if len(self) == 1 else 's'}"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Context):
            return self._items == other._items and self.system == other.system
        if isinstance(other, list):
            return self._items == other
        return NotImplemented

    def _repr_html_(self) -> str:
        rows = []
        for i, (item, raw) in enumerate(zip(self._items, self._tokens)):
            tok = self.counter.scaled(raw)
            rows.append(
                f"<tr><td style='text-align:right'>{i}</td><td>{html.escape(item.label)}</td>"
                f"<td style='text-align:left'>{html.escape(item.summary())}</td>"
                f"<td style='text-align:right'>{tok}</td></tr>"
            )
        system = html.escape(one_line(self.system)[:120])
        return (
            "<div class='ipyagent-context'>"
            f"<div><b>Context</b> — {self._count()}, ~{self.tokens:,} tokens</div>"
            f"<div style='color:#666;font-size:90%'>system: {system}</div>"
            "<table><thead><tr><th>#</th><th>kind</th><th style='text-align:left'>summary</th>"
            "<th>tokens</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>"
        )

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        # The notebook table's columns: index, kind, tokens, summary (tokens before the
        # summary, so a long summary cannot push them out of sight).
        import shutil

        room = max(20, shutil.get_terminal_size((110, 24)).columns - 30)  # one line a row
        lines = [repr(self), f"  {'#':>3}  {'kind':<12} {'tokens':>6}  summary"]
        for i, (item, raw) in enumerate(zip(self._items, self._tokens)):
            lines.append(f"  {i:>3}  {item.label:<12} {self.counter.scaled(raw):>6}  "
                         f"{one_line(item.summary(), room)}")
        p.text(visible("\n".join(lines)))  # terminal IPython prints it as is


def _check(value: object) -> None:
    if not isinstance(value, _ITEM_TYPES):
        raise TypeError(
            f"a Context holds Message/ToolCall/ToolResult/Reasoning/Summary items, "
            f"not {type(value).__name__}"
        )
