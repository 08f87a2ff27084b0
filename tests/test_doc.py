"""The generated tables (the docs' configuration and providers pages): one row per configurable trait."""

from __future__ import annotations

from pathlib import Path

from ipyagent import _doc
from ipyagent.engine.agent import Agent


def test_the_config_table_has_one_row_per_configurable_trait_with_its_default() -> None:
    rows = _doc.config_table().splitlines()
    assert rows[:2] == ["| setting | default | what it does |", "|---|---|---|"]
    traits = Agent.class_traits(config=True)
    names = [row.split("`")[1].removeprefix("Agent.") for row in rows[2:]]
    assert names == sorted(traits)
    for row, name in zip(rows[2:], names):
        cells = row.split(" | ")
        default = traits[name].default_value_repr()
        assert cells[1] == f"`{default if len(default) <= 40 else default[:37] + '...'}`"
        assert "\n" not in row and row.count(" | ") == 2  # a | in the help is escaped


def test_write_replaces_only_what_is_between_the_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    parts = ["# Title\n"]
    for name in _doc.TABLES:
        start, end = _doc.markers(name)
        parts.append(f"before {name}\n{start}\nstale\n{end}\nafter {name}\n")
    readme.write_text("".join(parts))
    _doc.write(readme)
    text = readme.read_text()
    assert text.startswith("# Title\n") and "stale" not in text
    for name, make in _doc.TABLES.items():
        assert _doc.section(text, name) == make().strip()
        assert f"before {name}\n" in text and f"after {name}\n" in text
    _doc.write(readme)
    assert readme.read_text() == text  # idempotent
