"""``Context``: the conversation as an ordered, editable list of items.

It is data: the same items are sent to the model, shown to the user and saved. It acts
like a list (``len``, indexing, slicing, iteration, ``append``/``insert``/``pop``/
``remove``) and keeps a per-item token estimate, made when the item enters, so that
appending, inserting, replacing or deleting an item re-estimates only that item.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, MutableSequence, overload

from .items import Item, Message, Reasoning, Summary, ToolCall, ToolResult, item_from_dict
from .table import ContextTable
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
            self._recount()
        else:
            _check(value)
            self._items[index] = value
            n = self.counter.item(value)
            self._total += n - self._tokens[index]
            self._tokens[index] = n

    def __delitem__(self, index: int | slice) -> None:
        # Only the removed items' estimates go: a long run's context is not re-estimated.
        del self._items[index]
        removed = self._tokens[index]
        del self._tokens[index]
        self._total -= sum(removed) if isinstance(removed, list) else removed

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self._items)

    def insert(self, index: int, value: Item) -> None:
        _check(value)
        self._items.insert(index, value)
        n = self.counter.item(value)
        self._tokens.insert(index, n)
        self._total += n

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
        from .plugs import preview

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
        from .plugs import context_to_notebook

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

    def table(self, start: int | None = None, stop: int | None = None) -> ContextTable:
        """Rows ``start`` to ``stop - 1`` as a table, numbered as here (a long context's own
        table shows its first and last rows and says how many are between)."""
        return ContextTable(self, start, stop)

    def _repr_html_(self) -> str:
        return ContextTable(self)._repr_html_()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(ContextTable(self).text())  # terminal IPython prints it as is


def _check(value: object) -> None:
    if not isinstance(value, _ITEM_TYPES):
        raise TypeError(
            f"a Context holds Message/ToolCall/ToolResult/Reasoning/Summary items, "
            f"not {type(value).__name__}"
        )
