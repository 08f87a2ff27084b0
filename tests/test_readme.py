"""The README stays true: its tables are what the code says."""

from pathlib import Path

import pytest

from ipyagent._doc import TABLES, section

README = Path(__file__).parents[1] / "README.md"


@pytest.mark.parametrize("name", TABLES)
def test_generated_tables_are_current(name):
    assert section(README.read_text(), name) == TABLES[name](), (
        "run: python -m ipyagent._doc --write README.md")
