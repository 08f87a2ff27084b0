"""Files the agent wrote come back with its transcript: Run All, --rerun and replay."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from ipyagent import Agent
from ipyagent.context.items import ToolCall
from ipyagent.errors import TranscriptError
from ipyagent.transcripts.file_record import cell_source
from ipyagent.transcripts.transcript import read
from tests.helpers.scripted_model import ScriptedModel, calls, text

CSV = "city,people\nOslo,709000\n\"Zürich, CH\",447000\n"
READ = "print(open('data/cities.csv', encoding='utf-8').read().count('\\n'), 'rows')"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run that writes data/cities.csv, edits it, then reads it in python; saved."""
    work = tmp_path_factory.mktemp("wrote")
    model = ScriptedModel([
        calls(("write_file", {"path": "data/cities.csv", "content": CSV})),
        calls(("edit_file", {"path": "data/cities.csv", "old": "Oslo,709000", "new": "Oslo,717000"})),
        calls(("python", {"code": READ})),
        text("Three rows."),
    ])
    with Agent(client=model, approval="auto", cwd=str(work)) as agent:
        assert agent.run("make the file").stop_reason == "done"
        return agent.save(work / "run.ipynb")


def test_each_write_is_a_code_cell_that_recreates_the_file_as_left(saved: Path) -> None:
    nb = nbformat.read(saved, as_version=4)
    files = [c for c in nb.cells if c.metadata.get("ipyagent", {}).get("kind") == "file"]
    assert len(files) == 2
    assert 'Path(\'data/cities.csv\').write_text("""city,people\nOslo,709000' in files[0].source
    assert "Oslo,717000" in files[1].source  # the edit: the whole file as the edit left it


def test_run_all_elsewhere_has_the_agents_file(saved: Path, tmp_path: Path) -> None:
    nb = nbformat.read(saved, as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=60,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert (tmp_path / "data" / "cities.csv").read_text(encoding="utf-8") == CSV.replace("709000", "717000")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "3 rows" in code[-1].outputs[0]["text"]


def test_rerun_and_replay_elsewhere_recreate_a_missing_file_but_never_overwrite(saved: Path, tmp_path: Path) -> None:
    edited = CSV.replace("709000", "717000")
    (tmp_path / "a").mkdir()
    with Agent(model="demo", cwd=str(tmp_path / "a")) as agent:
        transcript = agent.load(saved, rerun=True, cwd=str(tmp_path / "a"))
    # Written, then edited: it ends as the agent left it, before the python call read it.
    assert (tmp_path / "a" / "data" / "cities.csv").read_text(encoding="utf-8") == edited
    assert transcript.rebuild.ok, transcript.rebuild
    assert transcript.rebuild.line() == ("re-ran 1 python call in the sibling kernel and "
                                         "re-created 2 files the agent wrote")
    other = tmp_path / "b"
    other.mkdir()
    with Agent(model="demo", cwd=str(other)) as agent:
        replayed = agent.replay(saved, cwd=str(other))
    assert replayed.reproduced, replayed
    assert (other / "data" / "cities.csv").read_text(encoding="utf-8") == edited
    assert any("re-created data/cities.csv" in n for n in replayed.notes)
    # A file changed since is left as is, and said so.
    (other / "data" / "cities.csv").write_text("mine\n")
    with Agent(model="demo", cwd=str(other)) as agent:
        again = agent.replay(saved, cwd=str(other))
    assert (other / "data" / "cities.csv").read_text() == "mine\n"
    assert any("did not re-create data/cities.csv" in n for n in again.notes)
    assert not again.reproduced  # the python call now counts 1 row


def test_an_edited_file_cell_is_refused(saved: Path, tmp_path: Path) -> None:
    nb = nbformat.read(saved, as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("ipyagent", {}).get("kind") == "file")
    cell.source = cell.source.replace("Oslo", "Bergen")
    edited = tmp_path / "edited.ipynb"
    nbformat.write(nb, edited)
    with pytest.raises(TranscriptError, match="re-creates data/cities.csv"):
        read(edited).verify_cells()


@pytest.mark.parametrize("content", ["plain\n", 'ends with a quote"', "tab\there", "back\\slash",
                                     "crlf\r\nline", '"""', "", "\x00nul"])
def test_the_cell_writes_exactly_the_text(tmp_path: Path, content: str) -> None:
    source = cell_source(ToolCall("c1", "write_file", {}), "out/x.txt", content)
    import os

    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(source, "<cell>", "exec"), {})
    finally:
        os.chdir(here)
    assert (tmp_path / "out" / "x.txt").read_bytes() == content.encode("utf-8")
