"""A repository's ``.ipyagent/skills`` (or ``.ipyagent``) that is itself a symlink to a
folder elsewhere on the disk: its skills are not taken, and read_file cannot open their files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipyagent import Agent
from ipyagent._util import eventloop as _eventloop
from ipyagent.context.items import ToolCall
from ipyagent.instructions.skills import find_skills


def _plant(root: Path, name: str) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "SKILL.md").write_text(f"---\nname: {name}\ndescription: d\n---\nbody\n")
    (root / name / "notes.txt").write_text("OTHER-PROJECT-SECRET\n")
    return root / name


def _swap_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path, Path]:
    """(the repo, its project skill's folder, where that folder is moved aside, a private
    folder elsewhere that a symlink can point to), with an empty home."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    secret = tmp_path / "ssh"
    secret.mkdir()
    repo = tmp_path / "repo"
    folder = _plant(repo / ".ipyagent" / "skills", "tools")
    return repo, folder, folder.with_name("tools.away"), secret


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


def test_a_skill_folder_swapped_for_a_symlink_after_it_was_found_is_not_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The sandboxed code can write the workspace, so it can swap a project skill's folder
    # for a symlink between the moment read_file finds the skills and the moment it opens
    # the file; the wrapper below makes that moment come every time.
    import ipyagent.engine.agent as agent_module

    repo, folder, away, secret = _swap_world(tmp_path, monkeypatch)
    (secret / "notes.txt").write_text("PRIVATE-KEY\n")
    found = agent_module.skills_of

    def found_then_swapped(agent: object) -> object:
        if folder.is_symlink():  # the real folder back while the skills are looked for…
            folder.unlink()
            away.rename(folder)
        result = found(agent)  # type: ignore[arg-type]
        folder.rename(away)  # …and the symlink in its place when the file is opened
        folder.symlink_to(secret)
        return result

    monkeypatch.setattr(agent_module, "skills_of", found_then_swapped)
    with Agent(python_tool=False, cwd=str(repo)) as agent:
        reads = [_eventloop.run_sync(agent.tools.execute(ToolCall("c1", "read_file", {"path": path})))
                 for path in (str(secret / "notes.txt"), str(folder / "notes.txt"))]
    for read in reads:
        assert read.error and "PRIVATE-KEY" not in read.output, read.output


def test_load_skill_after_the_folder_was_swapped_for_a_symlink_reads_nothing_of_the_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ipyagent.instructions.skills.use as use_module

    repo, folder, away, secret = _swap_world(tmp_path, monkeypatch)
    (secret / "SKILL.md").write_text("---\nname: tools\ndescription: d\n---\nSECRET-BODY\n")
    (secret / "id_ed25519").write_text("PRIVATE-KEY\n")
    found = use_module.skills_of

    def found_then_swapped(agent: object) -> object:
        result = found(agent)  # type: ignore[arg-type]
        folder.rename(away)
        folder.symlink_to(secret)
        return result

    monkeypatch.setattr(use_module, "skills_of", found_then_swapped)
    with Agent(python_tool=False, cwd=str(repo)) as agent:
        result = _eventloop.run_sync(agent.tools.execute(ToolCall("c1", "load_skill", {"name": "tools"})))
    assert "SECRET-BODY" not in result.output and "id_ed25519" not in result.output, result.output
    assert result.error
