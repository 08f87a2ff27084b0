"""The README stays true: its configuration table is what the code says."""

from pathlib import Path

from ipyagent._doc import END, START, config_table

README = Path(__file__).parents[1] / "README.md"


def test_config_table_is_current():
    text = README.read_text()
    table = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert table == config_table(), "run: python -m ipyagent._doc --write README.md"
