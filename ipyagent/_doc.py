"""Generate the README's configuration table from the Agent's traitlets.

Run ``python -m ipyagent._doc`` to print it; ``--write README.md`` replaces the table
between the ``<!-- config-table -->`` markers. A test keeps the README in sync.
"""

from __future__ import annotations

import sys
from pathlib import Path

START, END = "<!-- config-table:start -->", "<!-- config-table:end -->"


def config_table() -> str:
    """A Markdown table: every configurable Agent trait, its default and help."""
    from .agent import Agent

    rows = ["| setting | default | what it does |", "|---|---|---|"]
    for name, trait in sorted(Agent.class_traits(config=True).items()):
        default = trait.default_value_repr() if hasattr(trait, "default_value_repr") else ""
        if len(default) > 40:
            default = default[:37] + "..."
        text = " ".join((trait.help or "").split()).replace("|", "\\|")
        rows.append(f"| `Agent.{name}` | `{default}` | {text} |")
    return "\n".join(rows)


def write(readme: Path) -> None:
    text = readme.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{config_table()}\n{END}{tail}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        write(Path(sys.argv[2]))
    else:
        print(config_table())
