"""``%agent skills``, ``%agent -s NAME TASK`` and ``ipyagent run -s NAME`` as a user types them."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Iterator

import pytest
from IPython.core.error import UsageError

import ipyagent
from ipyagent import ToolCall
from ipyagent.context.items import Message
from ipyagent.transcripts.transcript import read
from tests.frontends.test_cli import run as run_cli

SKILL = "---\nname: house-plots\ndescription: Our plots \x1b[2K<b>bold</b>\n---\nTitle them.\n"


@pytest.fixture
def loaded(ip: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The extension loaded in a notebook directory holding one project skill."""
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / ".ipyagent" / "skills" / "house-plots").mkdir(parents=True)
    (tmp_path / ".ipyagent" / "skills" / "house-plots" / "SKILL.md").write_text(SKILL)
    with redirect_stdout(io.StringIO()):
        ip.run_line_magic("load_ext", "ipyagent")
    agent = ipyagent.current()
    agent.approval, agent.autosave, agent.cwd, agent.python_tool = "auto", "", str(tmp_path), False
    yield ip
    ip.run_line_magic("unload_ext", "ipyagent")
    ip.config.pop("Agent", None)


def test_skills_lists_them_with_controls_visible(loaded: Any) -> None:
    table = loaded.run_line_magic("agent", "skills")
    plain = repr(table)
    assert "house-plots" in plain and "[.ipyagent/skills]" in plain and "plotting" in plain
    assert "\x1b" not in plain and "␛[2K" in plain
    assert "<b>bold" not in table._repr_html_() and "&lt;b&gt;bold" in table._repr_html_()


def test_dash_s_loads_the_skill_before_the_task(loaded: Any) -> None:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        loaded.run_line_magic("agent", "-s house-plots --skill plotting say hello")
    items = list(ipyagent.current().context)
    skills = [i.meta["skill"]["name"] for i in items if isinstance(i, Message) and "skill" in i.meta]
    assert skills == ["house-plots", "plotting"]
    assert items[2].content == "say hello"  # after both skills, as the task
    assert not [i for i in items if isinstance(i, ToolCall) and i.name == "load_skill"]


def test_dash_s_with_an_unknown_name_is_one_line_and_runs_nothing(loaded: Any) -> None:
    with pytest.raises(UsageError, match=r"unknown skill 'house-plot' \(did you mean house-plots\?\)"):
        loaded.run_line_magic("agent", "-s house-plot say hello")
    assert len(ipyagent.current().context) == 0


def test_cli_dash_s(tmp_path: Path) -> None:
    proc = run_cli("run", "-s", "plotting", "--approve", "auto", "--save", "run.ipynb",
                   "Plot exp(x) from 0 to 2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "following the skill `plotting`" in proc.stdout and "load_skill" not in proc.stdout
    items = read(tmp_path / "run.ipynb").items
    assert items[0].meta["skill"]["name"] == "plotting" and items[1].content.startswith("Plot exp")
    bad = run_cli("run", "-s", "nope", "x", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown skill 'nope'" in bad.stderr
