"""The README stays true and short: its examples run as written, its links lead somewhere.

The notebook snippets run in a real kernel (nbclient), once as the person who clicks Approve
would see them and once headless, where nobody clicks; the terminal tour's commands run as
typed. What the README used to hold lives in docs/ (tests/test_docs.py).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.snippets import ROOT, blocks, python_blocks, run_cells, text

README = ROOT / "README.md"
BIG = "1267650600228229401496703205376"  # 2**100


def test_the_readme_fits_on_a_screen_or_two() -> None:
    assert len(README.read_text().split()) <= 1200


def test_every_link_and_image_of_the_readme_exists() -> None:
    targets = re.findall(r"\]\(([^)#]+)\)", README.read_text())
    assert "docs/_static/card-waiting.png" in targets
    local = [t for t in targets if "://" not in t]
    assert local and all((ROOT / t).exists() for t in local), [t for t in local if not (ROOT / t).exists()]
    pages = {p.stem for p in (ROOT / "docs").glob("*.md")}
    linked = {Path(t).stem for t in local if t.startswith("docs/") and t.endswith(".md")}
    assert pages - linked <= {"index", "changelog"}, pages - linked  # every page is reachable


def test_the_readme_names_no_path_outside_the_repository() -> None:
    assert "shared/" not in README.read_text() and "../" not in README.read_text()


@pytest.mark.slow
def test_the_notebook_tour_runs_as_written_approved(tmp_path: Path) -> None:
    cells = python_blocks(README)
    assert cells[0].strip() == "%load_ext ipyagent" and len(cells) == 5
    nb = run_cells(cells, tmp_path, approval="auto")
    shown = [text(c) for c in nb.cells]
    assert "ipyagent: model demo" in shown[0]
    assert BIG in shown[1] and "✓ done" in shown[1]
    assert "a card per tool call" not in shown[1]  # the comment stayed a comment
    # Each line magic that shows something is the last line of its cell (a new user pasted
    # the tour as one cell, and the context table, not the last line, never showed).
    assert shown[2].startswith("Context — 8 items") and "tool result" in shown[2], shown[2]
    assert (tmp_path / "powers.ipynb").exists()
    assert "ReplayReport reproduced: 2 python calls" in shown[3], shown[3]
    assert shown[4].startswith("Message(assistant: '[demo model] I evaluated"), shown[4]


@pytest.mark.slow
def test_the_notebook_tour_runs_headless_as_written(tmp_path: Path) -> None:
    nb = run_cells(python_blocks(README), tmp_path)  # raises if a cell fails
    assert "nobody could approve this call" in text(nb.cells[1])
    assert len(nb.cells) == 5


def _tour() -> list[list[str]]:
    (block,) = [b for b in blocks(README, "bash") if "ipyagent repl" in b]
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def _ipyagent(words: list[str]) -> list[str]:
    assert words[0] == "ipyagent"
    return [sys.executable, "-c", "from ipyagent.frontends.cli import main; main()", *words[1:]]


@pytest.mark.slow
def test_the_terminal_tour_runs_as_typed(tmp_path: Path) -> None:
    pexpect = pytest.importorskip("pexpect")
    first, repl, unattended = _tour()
    child = pexpect.spawn(_ipyagent(first)[0], _ipyagent(first)[1:], cwd=str(tmp_path),
                          encoding="utf-8", timeout=120)
    for _ in range(2):  # the demo's two calls, each asked
        child.expect(r"Run it\?")
        child.sendline("y")
    child.expect(pexpect.EOF)
    child.close()
    assert "243" in child.before and child.exitstatus == 0
    done = subprocess.run(_ipyagent(repl), input="/help\n", capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and "/context" in done.stdout, done.stdout + done.stderr
    done = subprocess.run(_ipyagent(unattended), capture_output=True, text=True, cwd=tmp_path,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and "1024" in done.stdout, done.stdout + done.stderr
    assert (tmp_path / "run.ipynb").exists()
