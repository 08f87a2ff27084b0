"""The documentation stays true: its code cells run, its tables come from the code.

``python -m sphinx -W docs docs/_build`` (in .ci/run) builds the pages and executes their
code cells with myst-nb; these tests run the same cells with nbclient inside the suite, and
check what must never be copied by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.snippets import ROOT, blocks, run_cells, text

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
CELL = "{code-cell} ipython3"
EXECUTED = [p for p in PAGES if blocks(p, CELL)]
# Pages whose ```python blocks show what needs a real model, a server or a key: shown, not run.
ILLUSTRATED = {"getting-started", "providers", "remote-kernels"}


def test_the_pages_that_run_code_are_executed_pages() -> None:
    assert {p.stem for p in EXECUTED} >= {"getting-started", "sandbox", "memory"}
    for page in EXECUTED:  # myst-nb runs a page's code cells only with a kernel in its front matter
        assert page.read_text().startswith("---\nfile_format: mystnb\nkernelspec:\n  name: python3\n")


@pytest.mark.slow
@pytest.mark.parametrize("page", EXECUTED, ids=[p.stem for p in EXECUTED])
def test_the_code_cells_of_a_page_run_as_written(page: Path, tmp_path: Path) -> None:
    nb = run_cells(blocks(page, CELL), tmp_path)  # raises at the first cell that fails
    shown = "\n".join(text(c) for c in nb.cells)
    assert "UsageError" not in shown and "nobody could approve" not in shown


def test_only_the_pages_that_need_a_server_hold_code_that_is_not_run() -> None:
    # Anything else a page shows as Python is a code cell, run at every build and here.
    assert {p.stem for p in PAGES if blocks(p, "python")} <= ILLUSTRATED


def test_every_page_is_in_the_table_of_contents() -> None:
    index = (DOCS / "index.md").read_text()
    assert {p.stem for p in PAGES} - {"index"} <= set(re.findall(r"^([a-z-]+)$", index, re.M))


def test_settings_and_providers_are_generated_never_copied() -> None:
    assert "```{ipyagent-table} config-table" in (DOCS / "configuration.md").read_text()
    assert "```{ipyagent-table} provider-table" in (DOCS / "providers.md").read_text()
    assert "```{ipyagent-api}" in (DOCS / "api.md").read_text()
    for page in [*PAGES, ROOT / "README.md"]:
        copied = re.findall(r"^\| `(?:Agent\.\w+|openai|ollama)` \|", page.read_text(), re.M)
        assert not copied, (page.name, copied)


def test_the_architecture_page_names_every_layer_and_every_top_module() -> None:
    from tests.test_layers import TOP, declared

    page = (DOCS / "architecture.md").read_text()
    named = set(re.findall(r"`([\w/]+?)/?`", page))
    assert set(declared()) | TOP <= named, (set(declared()) | TOP) - named


def test_no_page_points_outside_the_repository() -> None:
    for page in PAGES:
        assert "../shared" not in page.read_text() and "shared/corpus" not in page.read_text()
