"""AGENTS.md: found beside the notebook or up to the repository root, added to the system prompt."""

from __future__ import annotations

from pathlib import Path

from ipyagent import Agent
from ipyagent.context.events import Notice
from ipyagent.engine.agent import DEFAULT_SYSTEM_PROMPT
from ipyagent.instructions.agents_md import MARKER, MAX_CHARS, find_agents_md, with_agents_md
from ipyagent.instructions.skills import MARKER as SKILLS
from ipyagent.instructions.skills import without_skills
from tests.helpers.scripted_model import ScriptedModel, text


def tree(tmp_path: Path) -> Path:
    """outer/AGENTS.md, outer/repo/.git, outer/repo/AGENTS.md, outer/repo/nb/deep/."""
    (tmp_path / "outer" / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "outer" / "repo" / "nb" / "deep").mkdir(parents=True)
    (tmp_path / "outer" / "AGENTS.md").write_text("Above the repo: never used.")
    (tmp_path / "outer" / "repo" / "AGENTS.md").write_text("Use uv. Run pytest -q.")
    return tmp_path / "outer" / "repo"


def test_nearest_file_wins_and_the_search_stops_at_the_repo_root(tmp_path: Path) -> None:
    repo = tree(tmp_path)
    assert find_agents_md(repo / "nb" / "deep") == repo / "AGENTS.md"
    (repo / "nb" / "AGENTS.md").write_text("Notebook rules.")
    assert find_agents_md(repo / "nb" / "deep") == repo / "nb" / "AGENTS.md"
    (repo / "AGENTS.md").unlink()
    (repo / "nb" / "AGENTS.md").unlink()
    assert find_agents_md(repo / "nb") is None  # outer/AGENTS.md is above the repo root
    lone = tmp_path / "lone" / "sub"
    lone.mkdir(parents=True)
    (tmp_path / "lone" / "AGENTS.md").write_text("x")
    assert find_agents_md(lone) is None  # outside a repository: only the notebook's own folder
    assert find_agents_md(tmp_path / "lone") == tmp_path / "lone" / "AGENTS.md"


def test_text_joins_the_system_prompt_once_and_is_announced_once(tmp_path: Path) -> None:
    repo = tree(tmp_path)
    notices: list[str] = []
    model = ScriptedModel([text("one"), text("two")])
    with Agent(client=model, python_tool=False, cwd=str(repo / "nb")) as agent:
        assert agent.agents_md_path == repo / "AGENTS.md"
        assert agent.system_prompt == DEFAULT_SYSTEM_PROMPT  # the setting itself is unchanged
        for task in ("a", "b"):
            agent.run(task, on_event=lambda e: isinstance(e, Notice) and notices.append(e.message))
        agent.reset()
        assert MARKER in agent.context.system
    system = model.requests[0].system
    # AGENTS.md, then the skills' listing (always the last section).
    assert system.startswith(DEFAULT_SYSTEM_PROMPT)
    assert without_skills(system).endswith("Use uv. Run pytest -q.") and SKILLS in system
    assert system.count(MARKER) == 1 and str(repo / "AGENTS.md") in system
    assert notices == [f"AGENTS.md: {repo / 'AGENTS.md'} is in the system prompt"]


def test_turned_off_or_absent(tmp_path: Path) -> None:
    repo = tree(tmp_path)
    with Agent(python_tool=False, cwd=str(repo), agents_md=False) as agent:
        assert agent.agents_md_path is None
        assert without_skills(agent.context.system) == DEFAULT_SYSTEM_PROMPT
    with Agent(python_tool=False, cwd=str(tmp_path), skills_enabled=False) as agent:
        assert agent.context.system == DEFAULT_SYSTEM_PROMPT


def test_idempotent_and_capped(tmp_path: Path) -> None:
    path = tmp_path / "AGENTS.md"
    path.write_text("rules " * 10_000)
    once = with_agents_md("Base.", path)
    assert with_agents_md(once, path) == once  # a saved transcript's prompt already holds it
    assert f"cut at {MAX_CHARS} characters" in once and len(once) < MAX_CHARS + 500
    assert with_agents_md("Base.", None) == "Base."


def test_a_transcript_continued_beside_it_does_not_repeat_it(tmp_path: Path) -> None:
    repo = tree(tmp_path)
    with Agent(client=ScriptedModel([text("hi")]), python_tool=False, cwd=str(repo)) as agent:
        agent.run("hello")
        saved = agent.save(tmp_path / "run.ipynb")
    again = Agent.from_transcript(saved, client=ScriptedModel([]), python_tool=False,
                                  cwd=str(repo))
    with again:
        assert again.context.system.count(MARKER) == 1


def test_a_symlink_out_of_the_repository_is_not_read(tmp_path: Path, monkeypatch) -> None:
    """A cloned repository's AGENTS.md may be a symlink to ~/.ssh/id_rsa or /proc/self/environ
    (the user's kernel's environment, its tokens): its text would go into the system prompt,
    to the provider. Only files that lie inside the repository are read."""
    import os

    monkeypatch.setenv("IPYAGENT_TEST_ENV_SECRET", "hunter2-in-the-environment")
    repo, outside = tmp_path / "repo", tmp_path / "private"
    (repo / ".git").mkdir(parents=True)
    outside.mkdir()
    (outside / "id_rsa").write_text("-----BEGIN PRIVATE KEY----- not for the provider")
    for target in (outside / "id_rsa", Path("/proc/self/environ")):
        (repo / "AGENTS.md").unlink(missing_ok=True)
        os.symlink(target, repo / "AGENTS.md")
        found = find_agents_md(repo)
        system = with_agents_md("sys", found)
        assert "PRIVATE KEY" not in system and "hunter2" not in system, target
    (repo / "AGENTS.md").unlink()
    (repo / "docs").mkdir()
    (repo / "docs" / "agents.md").write_text("Use tabs.")
    os.symlink("docs/agents.md", repo / "AGENTS.md")  # inside the repository: read
    assert "Use tabs." in with_agents_md("sys", find_agents_md(repo))


def test_a_file_that_says_it_is_empty_reads_as_empty(tmp_path: Path) -> None:
    """No more bytes are read than the file's size (procfs files say 0 and stream on)."""
    from ipyagent.instructions.agents_md import read_agents_md

    path = tmp_path / "AGENTS.md"
    path.write_text("x" * (5 * MAX_CHARS))
    assert len(read_agents_md(path)) < MAX_CHARS + 100
    if Path("/proc/self/environ").exists():
        assert read_agents_md(Path("/proc/self/environ")) == ""
