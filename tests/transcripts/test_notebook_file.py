"""Reading a transcript without nbformat: the same answer, and nbformat for any other shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from ipyagent.errors import TranscriptError
from ipyagent.transcripts.notebook_file import read_notebook, structure_problem
from ipyagent.transcripts.transcript import read
from tests.helpers.transcript_runs import rich_agent

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """The rich scripted run (python cells, files, an image, an edit, a denial), saved."""
    work = tmp_path_factory.mktemp("rich")
    agent = rich_agent(str(work))
    try:
        assert agent.run("draw it").stop_reason == "done"
        return agent.save(work / "run.ipynb")
    finally:
        agent.close()


def same(a, b) -> bool:
    return ([i.to_dict() for i in a.items], a.cells, a.settings, a.usage, a.system) == (
        [i.to_dict() for i in b.items], b.cells, b.settings, b.usage, b.system)


def test_what_save_writes_passes_the_check_and_reads_as_nbformat_reads_it(saved: Path,
                                                                         tmp_path: Path) -> None:
    data = json.loads(saved.read_text())
    assert structure_problem(data) is None and read_notebook(saved) == data
    # The same file as Jupyter would write it back (sources as lists of lines, reindented).
    resaved = tmp_path / "resaved.ipynb"
    nbformat.write(nbformat.read(saved, as_version=4), resaved)
    assert structure_problem(json.loads(resaved.read_text())) is None
    assert same(read(saved), read(resaved))
    assert read(resaved).cells and all(isinstance(c, str) for v in read(resaved).cells.values()
                                       for c in v)


def test_reading_a_transcript_imports_no_nbformat(saved: Path) -> None:
    """nbformat's import compiles its validator's grammars: seconds a load must not wait."""
    code = ("import sys; from ipyagent.transcripts.transcript import read; "
            f"t = read({str(saved)!r}); print(len(t.items), 'nbformat' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split()
    assert out == [str(len(read(saved).items)), "False"]


@pytest.mark.parametrize("damage,problem,refused", [
    (lambda nb: nb.update(nbformat=3), "nbformat 3.5, not 4.x", "missing an expected key: worksheets"),
    (lambda nb: nb.update(nbformat_minor=True), "nbformat 4.True, not 4.x", None),
    (lambda nb: nb["cells"][1].pop("metadata"), "cell 1 is not", "missing an expected key: metadata"),
    (lambda nb: nb["cells"][2].update(source=["a", 1]), "cell 2 is not", "expected str instance"),
    (lambda nb: nb["cells"][0].update(cell_type="heading"), "cell 0 is not", None),
    (lambda nb: nb.update(cells={}), "no metadata mapping or cell list", None),
])
def test_any_other_shape_goes_to_nbformat_and_loses_nothing(saved: Path, tmp_path: Path,
                                                            damage, problem, refused) -> None:
    """A hand edit the check does not accept is read as nbformat reads it: what it can read
    is read (every item, from the metadata), what it cannot is one line naming the file."""
    nb = json.loads(saved.read_text())
    damage(nb)
    assert structure_problem(nb).startswith(problem)
    edited = tmp_path / "edited.ipynb"
    edited.write_text(json.dumps(nb))
    if refused:
        with pytest.raises(TranscriptError, match=f"cannot read .*not a notebook .*{refused}") as info:
            read(edited)
        assert str(edited) in str(info.value) and "\n" not in str(info.value)
    else:
        assert [i.to_dict() for i in read(edited).items] == [i.to_dict() for i in read(saved).items]


def test_a_hand_edited_cell_still_stops_a_rerun(saved: Path, tmp_path: Path) -> None:
    """The check only decides how the file is parsed; verifying the cells is unchanged."""
    nb = json.loads(saved.read_text())
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code"
                and isinstance(c["metadata"].get("ipyagent"), dict))
    cell["source"] = "print('not what ran')"
    edited = tmp_path / "edited.ipynb"
    edited.write_text(json.dumps(nb))
    with pytest.raises(TranscriptError, match="differs from the recorded code"):
        read(edited).verify_cells()


def test_each_loaded_context_holds_its_own_copies(saved: Path) -> None:
    transcript = read(saved)
    first, second = transcript.context, transcript.context
    assert [i.to_dict() for i in first] == [i.to_dict() for i in transcript.items]
    call = next(i for i in first if i.type == "tool_call")
    call.arguments["edited"] = True
    call.meta["note"] = "mine"
    assert all("edited" not in i.arguments and "note" not in i.meta
               for ctx in (second, transcript.items) for i in ctx if i.type == "tool_call")
