"""Tables made from the code: settings (traitlets) and provider presets.

The documentation's ``{ipyagent-table}`` directive (docs/_ext/ipyagent_docs.py) puts them in
the pages at build time, so no page holds a hand-copied setting. Run it with ``python -m``
to print them; ``--write FILE`` replaces each table between its ``<!-- NAME:start -->`` /
``<!-- NAME:end -->`` markers in a file of your own.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from ._util.text import one_line

START, END = "<!-- config-table:start -->", "<!-- config-table:end -->"


def config_table() -> str:
    """A Markdown table: every configurable Agent trait, its default and help."""
    from .engine.agent import Agent

    rows = ["| setting | default | what it does |", "|---|---|---|"]
    for name, trait in sorted(Agent.class_traits(config=True).items()):
        default = trait.default_value_repr() if hasattr(trait, "default_value_repr") else ""
        if len(default) > 40:
            default = default[:37] + "..."
        text = one_line(trait.help or "").replace("|", "\\|")
        rows.append(f"| `Agent.{name}` | `{default}` | {text} |")
    return "\n".join(rows)


def provider_table() -> str:
    from .models.providers import provider_table as table

    return table()


TABLES: dict[str, Callable[[], str]] = {"config-table": config_table,
                                        "provider-table": provider_table}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def section(text: str, name: str) -> str:
    """The current content between ``name``'s markers."""
    start, end = markers(name)
    return text.split(start, 1)[1].split(end, 1)[0].strip()


def write(readme: Path) -> None:
    text = readme.read_text()
    for name, make in TABLES.items():
        start, end = markers(name)
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{start}\n{make()}\n{end}{tail}"
    readme.write_text(text)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        write(Path(sys.argv[2]))
    else:
        for make in TABLES.values():
            print(make(), end="\n\n")
