"""What a run's tokens cost, for models whose list prices are known.

A small, dated table of list prices (US dollars per million tokens), as the providers'
pricing pages gave them at ``PRICES_AS_OF``; ``Agent.prices`` overrides or adds entries
(a new model, a negotiated rate, a changed price) and can remove one (``None``). A model
not in the table, and any model on this machine or the local network, has no cost line:
an unknown price is not guessed, and a local model costs no tokens.

Cached prompt tokens are billed at ``cached_input`` (OpenAI: counted inside the prompt;
Anthropic: read from its cache), tokens written to Anthropic's cache at ``cache_write``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["Price", "PRICES", "PRICES_AS_OF", "price_for", "parse_prices", "cost_of"]

PRICES_AS_OF = "2025-10"  # when the table below was last checked against the providers


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens; ``source`` says whose list it is (or 'Agent.prices')."""

    input: float
    output: float
    cached_input: float | None = None  # None: cached tokens cost as much as others
    cache_write: float | None = None  # None: writing the cache costs as input does
    source: str = ""

    def __repr__(self) -> str:
        return f"Price(${self.input:g} in / ${self.output:g} out per 1M tokens, {self.source})"


def _openai(i: float, c: float, o: float) -> Price:
    return Price(i, o, cached_input=c, source=f"OpenAI's list prices of {PRICES_AS_OF}")


def _anthropic(i: float, o: float) -> Price:
    # Cache reads at a tenth of the input price, 5-minute cache writes at 1.25 times.
    return Price(i, o, cached_input=round(i * 0.1, 4), cache_write=round(i * 1.25, 4),
                 source=f"Anthropic's list prices of {PRICES_AS_OF}")


PRICES: dict[str, Price] = {
    "gpt-5": _openai(1.25, 0.125, 10.0),
    "gpt-5-mini": _openai(0.25, 0.025, 2.0),
    "gpt-5-nano": _openai(0.05, 0.005, 0.40),
    "gpt-4.1": _openai(2.0, 0.50, 8.0),
    "gpt-4.1-mini": _openai(0.40, 0.10, 1.60),
    "gpt-4.1-nano": _openai(0.10, 0.025, 0.40),
    "gpt-4o": _openai(2.50, 1.25, 10.0),
    "gpt-4o-mini": _openai(0.15, 0.075, 0.60),
    "o3": _openai(2.0, 0.50, 8.0),
    "o4-mini": _openai(1.10, 0.275, 4.40),
    "claude-opus-4-1": _anthropic(15.0, 75.0),
    "claude-opus-4": _anthropic(15.0, 75.0),
    "claude-sonnet-4-5": _anthropic(3.0, 15.0),
    "claude-sonnet-4": _anthropic(3.0, 15.0),
    "claude-3-7-sonnet": _anthropic(3.0, 15.0),
    "claude-haiku-4-5": _anthropic(1.0, 5.0),
    "claude-3-5-haiku": _anthropic(0.80, 4.0),
}

# A dated snapshot or alias of a model in the table: gpt-4o-2024-08-06,
# claude-sonnet-4-5-20250929, claude-3-5-haiku-latest.
_SUFFIX = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|latest)$")


def parse_prices(setting: Mapping[str, Any]) -> dict[str, Price | None]:
    """``Agent.prices`` as ``Price``s (None: no price for that model); ValueError, one
    line, for an entry that is not ``{"input": $, "output": $[, "cached_input": $,
    "cache_write": $]}`` per million tokens with numbers >= 0."""
    fields = ("input", "output", "cached_input", "cache_write")
    out: dict[str, Price | None] = {}
    for model, entry in setting.items():
        if entry is None:
            out[str(model)] = None
            continue
        if not isinstance(entry, Mapping) or not {"input", "output"} <= set(entry):
            raise ValueError(f"Agent.prices[{model!r}] must be None or a dict with 'input' and "
                             "'output' (US dollars per million tokens)")
        unknown = set(entry) - set(fields)
        if unknown:
            raise ValueError(f"Agent.prices[{model!r}]: unknown key(s) {', '.join(map(repr, sorted(unknown)))}; "
                             f"known: {', '.join(fields)}")
        values: dict[str, float | None] = {}
        for key in fields:
            value = entry.get(key)
            if value is None and key in ("cached_input", "cache_write"):
                values[key] = None
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
                    or value != value or value == float("inf"):
                raise ValueError(f"Agent.prices[{model!r}][{key!r}] must be a number >= 0 "
                                 f"(US dollars per million tokens), not {value!r}")
            values[key] = float(value)
        out[str(model)] = Price(values["input"] or 0.0, values["output"] or 0.0,
                                values["cached_input"], values["cache_write"], "Agent.prices")
    return out


def price_for(model: str, overrides: Mapping[str, Price | None] | None = None) -> Price | None:
    """The price of ``model`` (``overrides`` first, then the table; a dated snapshot or
    ``-latest`` alias takes its model's price); None when it is not known."""
    table: dict[str, Price | None] = {**PRICES, **(overrides or {})}
    for name in (model, _SUFFIX.sub("", model)):
        if name in table:
            return table[name]
    return None


def cost_of(price: Price, input_tokens: int, output_tokens: int, cache_read: int = 0,
            cache_write: int = 0) -> float:
    """US dollars for these tokens (``input_tokens`` counts the cached ones too)."""
    fresh = max(0, input_tokens - cache_read - cache_write)
    read = price.input if price.cached_input is None else price.cached_input
    write = price.input if price.cache_write is None else price.cache_write
    return (fresh * price.input + cache_read * read + cache_write * write
            + output_tokens * price.output) / 1_000_000
