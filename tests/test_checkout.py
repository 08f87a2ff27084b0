"""What the repository tracks: the files of the project, never a machine's own."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tracked() -> list[tuple[str, str]]:
    """``(mode, path)`` of every tracked file; skips outside a git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"git is not available: {exc}")
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [(line.split()[0], line.split("\t", 1)[1]) for line in out.stdout.splitlines()]


def test_no_symlink_and_no_environment_is_tracked() -> None:
    """A worktree's ``.venv`` symlink was once committed (``.venv/`` in .gitignore matched
    only a directory), and a merge replaced a checkout's own environment with it."""
    tracked = _tracked()
    assert not [path for mode, path in tracked if mode == "120000"]
    heads = {path.split("/", 1)[0] for _, path in tracked}
    assert not heads & {".venv", ".venv-llama", "venv", "node_modules", "artifacts"}
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert {".venv", ".venv-llama"} <= set(ignored)  # a file or a link of that name too
