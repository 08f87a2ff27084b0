"""A repository's ``.ipyagent/skills`` (or ``.ipyagent``) that is itself a symlink to a
folder elsewhere on the disk: its skills are not taken, and read_file cannot open their files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipyagent import Agent, _eventloop
from ipyagent.items import ToolCall
from ipyagent.skills import find_skills


def _plant(root: Path, name: str) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "SKILL.md").write_text(f"---\nname: {name}\ndescription: d\n---\nbody\n")
    (root / name / "notes.txt").write_text("OTHER-PROJECT-SECRET\n")
    return root / name


@pytest.mark.parametrize("linked", [".ipyagent/skills", ".ipyagent"])
def test_a_project_skills_folder_that_is_a_symlink_elsewhere_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, linked: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    # Another of the user's projects, with a skill of its own (not the user's ~/.ipyagent).
    other = tmp_path / "private" / ".ipyagent"
    folder = _plant(other / "skills", "private-notes")
    repo = tmp_path / "repo"  # a repository someone sent
    repo.mkdir()
    target = other / "skills" if linked.endswith("skills") else other
    (repo / linked).parent.mkdir(parents=True, exist_ok=True)
    (repo / linked).symlink_to(target)
    found = find_skills(repo, home=home)
    assert "private-notes" not in found.skills
    assert any("symlink" in p for p in found.problems), found.problems
    with Agent(python_tool=False, cwd=str(repo)) as agent:
        read = _eventloop.run_sync(agent.tools.execute(ToolCall(
            "c1", "read_file", {"path": str(folder / "notes.txt")})))
    assert read.error and "OTHER-PROJECT-SECRET" not in read.output
