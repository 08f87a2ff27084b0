"""The context as a table: one row per item, numbered as in the context.

A long run's context holds thousands of items; rendering every row makes a cell output
of megabytes that nobody scrolls. So the whole context shows its first and last rows with
one "… N more" row between, which says how to see the rest: ``agent.context.table(a, b)``
(or ``%agent context a:b``) shows rows ``a`` to ``b - 1``, in full, with their own numbers.
"""

from __future__ import annotations

import html
from typing import Any, Callable, Iterator, Mapping, Protocol

from .._util.text import one_line, visible
from .items import Item
from .tokens import TokenCounter

__all__ = ["ContextTable", "HEAD", "TAIL", "Rows"]

HEAD = 20  # rows shown before the "… N more" row
TAIL = 20  # and after it
_SLACK = 10  # up to this many rows past HEAD + TAIL are shown whole: folding 5 helps no one


class Rows(Protocol):
    """What the table reads of a ``Context`` (``buffer`` imports this module, not back)."""

    @property
    def system(self) -> str: ...
    @property
    def counter(self) -> TokenCounter: ...
    @property
    def settings_source(self) -> Callable[[], Mapping[str, Any]] | None: ...
    @property
    def tokens(self) -> int: ...
    def item_tokens(self, index: int) -> int: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> Item: ...
    def __iter__(self) -> Iterator[Item]: ...


def _items(n: int) -> str:
    return f"{n} item{'' if n == 1 else 's'}"


class ContextTable:
    """Rows ``start``..``stop`` of a context (a range shown in full); the whole context folded."""

    def __init__(self, context: Rows, start: int | None = None, stop: int | None = None) -> None:
        self.context = context
        self.whole = start is None and stop is None
        self.start, self.stop, _ = slice(start, stop).indices(len(context))
        self.stop = max(self.stop, self.start)

    def __repr__(self) -> str:
        return f"<ContextTable: rows {self.start}–{self.stop - 1} of {_items(len(self.context))}>"

    def _blocks(self) -> list[range | int]:
        """Row ranges to show, with the number of rows left out between them."""
        rows = range(self.start, self.stop)
        if not self.whole or len(rows) <= HEAD + TAIL + _SLACK:
            return [rows]
        return [rows[:HEAD], len(rows) - HEAD - TAIL, rows[-TAIL:]]

    def _more(self, hidden: int) -> str:
        first, last = self.start + HEAD, self.start + HEAD + hidden
        return (f"… {hidden:,} more items ({first}–{last - 1}): agent.context.table({first}, "
                f"{last}) or %agent context {first}:{last}")

    def _title(self) -> str:
        ctx = self.context
        shown = "" if self.whole else f", rows {self.start}–{self.stop - 1}"
        return f"Context — {_items(len(ctx))}{shown} · {self.sizes()}"

    def sizes(self) -> str:
        """The tokens the next request carries, as the run's footer counts them, and of what:
        'next request ~1,280 tokens: items ~279 · system prompt ~287 · tool specs ~714
        (estimated: chars/4)'. Without an agent (no tools known): the context's own."""
        ctx, counter = self.context, self.context.counter
        system = counter.scaled(counter.raw(ctx.system) + 4)
        items = max(0, ctx.tokens - system)
        specs = None
        if ctx.settings_source is not None:  # bound to an agent: its tools go in every request
            try:
                specs = int(ctx.settings_source().get("extra_tokens") or 0)
            except Exception:  # a title is decoration: never break the table
                specs = None
        parts = [f"items ~{items:,}", f"system prompt ~{system:,}"]
        if specs is not None:
            parts.append(f"tool specs ~{specs:,}")
        scale = f" ×{counter.scale:.2f}, calibrated by the server's counts" if counter.scale != 1.0 else ""
        total = ctx.tokens + (specs or 0)
        head = f"next request ~{total:,} tokens" if specs is not None else f"~{total:,} tokens"
        return f"{head}: {' · '.join(parts)} (estimated: {counter.method}{scale})"

    def _marks(self) -> dict[int, str]:
        """Where each step starts (``%agent rewind N`` takes these numbers)."""
        from .steps import step_marks

        return step_marks(list(self.context))

    def _repr_html_(self) -> str:
        ctx = self.context
        rows = []
        marks = self._marks()
        for block in self._blocks():
            if isinstance(block, int):
                rows.append(f"<tr><td></td><td colspan='3' style='text-align:left;color:#666'>"
                            f"{html.escape(self._more(block))}</td></tr>")
                continue
            for i in block:
                item = ctx[i]
                if i in marks:  # a step boundary: the number a rewind takes
                    rows.append(f"<tr class='ipyagent-step'><td></td><td colspan='3' style="
                                f"'text-align:left;color:#666;border-top:1px solid #bbb'>"
                                f"── {html.escape(marks[i])}</td></tr>")
                rows.append(
                    f"<tr><td style='text-align:right'>{i}</td><td>{html.escape(item.label)}</td>"
                    f"<td style='text-align:left'>{html.escape(item.summary())}</td>"
                    f"<td style='text-align:right'>{ctx.item_tokens(i)}</td></tr>")
        system = html.escape(one_line(ctx.system)[:120])
        title = html.escape(self._title()).replace("Context", "<b>Context</b>", 1)
        return (
            "<div class='ipyagent-context'>"
            f"<div>{title}</div>"
            f"<div style='color:#666;font-size:90%'>system: {system}</div>"
            "<table><thead><tr><th>#</th><th>kind</th><th style='text-align:left'>summary</th>"
            "<th>tokens</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>"
        )

    def text(self) -> str:
        """The table as plain lines (terminal IPython)."""
        ctx = self.context
        import shutil

        # The notebook table's columns, tokens before the summary so that a long summary
        # cannot push them out of sight; one line a row, as wide as the terminal.
        room = max(20, shutil.get_terminal_size((110, 24)).columns - 30)
        lines = [self._title(),  # the sizes as the notebook's title and the footer say them
                 f"  {'#':>3}  {'kind':<12} {'tokens':>6}  summary"]
        marks = self._marks()
        for block in self._blocks():
            if isinstance(block, int):
                lines.append(f"       {self._more(block)}")
                continue
            for i in block:
                if i in marks:
                    lines.append(f"       ── {marks[i]}")
                lines.append(f"  {i:>3}  {ctx[i].label:<12} {ctx.item_tokens(i):>6}  "
                             f"{one_line(ctx[i].summary(), room)}")
        return visible("\n".join(lines))

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())  # terminal IPython prints it as is
