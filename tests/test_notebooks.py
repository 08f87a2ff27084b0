"""Every notebook in notebooks/ runs headless, top to bottom, on the demo model (nbclient)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def execute(name: str, tmp_path: Path) -> Any:
    """Run a copy of the notebook in tmp_path (it may write files next to itself)."""
    shutil.copy(NOTEBOOKS / name, tmp_path / name)
    nb = nbformat.read(tmp_path / name, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


def text(cell: Any) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type == "error":
            parts.append("\n".join(out.traceback))
        else:
            data = out.get("data", {})
            parts.append(data.get("text/markdown") or data.get("text/plain", ""))
    return "\n".join(parts)


def code_cells(nb: Any) -> dict[str, str]:
    return {c.source: text(c) for c in nb.cells if c.cell_type == "code"}


def test_every_notebook_is_tested() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == [
        "local-models.ipynb", "mcp.ipynb", "quickstart.ipynb", "step-through.ipynb"]


def test_quickstart(tmp_path: Path) -> None:
    cells = code_cells(execute("quickstart.ipynb", tmp_path))
    assert "ipyagent: model demo" in cells["%load_ext ipyagent"]
    asked = cells["%agent Use Python to compute 2**100"]
    # Headless: nobody can click, so nothing ran and the output says how to allow it.
    assert "nobody could approve this call" in asked and "Agent.approval = 'auto'" in asked
    assert "1267650600228229401496703205376" not in asked
    auto = cells["%agent --approve auto Use Python to compute 3**40"]
    assert "value = 12157665459056928801" in auto  # the computation, as a real output
    assert "```python\nvalue = 3**40" in auto  # the code that produced it, on a card
    assert "✓ done" in auto
    table = next(v for k, v in cells.items() if k.endswith("agent.context"))
    assert "Context" in table and "tool call" in table
    assert (tmp_path / "runs" / "quickstart-run.ipynb").exists()
    saved = nbformat.read(tmp_path / "runs" / "quickstart-run.ipynb", as_version=4)
    assert "3**40" in str(saved)


def test_step_through(tmp_path: Path) -> None:
    nb = execute("step-through.ipynb", tmp_path)
    cells = code_cells(nb)
    first = cells["%agent --step Use Python to compute 2**100"]
    assert "paused" in first and "value = 1267650600228229401496703205376" in first
    steps = [text(c) for c in nb.cells if c.cell_type == "code" and c.source == "%agent step"]
    assert len(steps) == 3
    assert "3**5" in steps[0]  # the step after the edit used the edited context
    assert "243" in steps[-1] and "stopped: done" in steps[-1]
    shown = next(c for c in nb.cells if c.cell_type == "code" and "to_notebook()" in c.source)
    html = shown.outputs[0]["data"]["text/html"]  # issue 30: not a bare tuple
    assert "<b>Notebook</b>" in html and "User: Use Python to compute 2**100" in html


def test_local_models_runs_without_a_server(tmp_path: Path) -> None:
    cells = code_cells(execute("local-models.ipynb", tmp_path))
    endpoint = next(v for k, v in cells.items() if k.startswith('%config Agent.provider = "ollama"'))
    assert "http://127.0.0.1:11434/v1" in endpoint
    status = next(v for k, v in cells.items() if k.startswith("import json"))
    assert "127.0.0.1:11434/v1" in status
    back = next(v for k, v in cells.items() if k.startswith("%config Agent.provider = None"))
    assert "model='demo'" in back


def test_mcp_lists_a_real_servers_tools_and_calls_one_once_allowed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mcp")
    trust_list = tmp_path / "config" / "trusted-mcp.json"
    monkeypatch.setenv("IPYAGENT_MCP_TRUST_FILE", str(trust_list))  # the kernel inherits it
    cells = code_cells(execute("mcp.ipynb", tmp_path))
    assert "calc [stdio] running" in cells["%agent mcp trust"]  # agreed to in a visible cell
    assert str(tmp_path / "mcp.json") in trust_list.read_text()
    listing = cells["%agent mcp"]
    assert "calc [stdio] running: calc__add, calc__word_count" in listing
    personas = next(v for k, v in cells.items() if k.startswith("%config Agent.personas"))
    assert "calculator" in personas and "calc__*" in personas and "data-analyst" in personas
    asked = cells["%agent -p calculator Use calc__add to add 2 and 40"]
    assert "nobody could approve this call" in asked and "Agent.allow = ['calc__add']" in asked
    allowed = next(v for k, v in cells.items() if k.startswith('%config Agent.allow = ["calc__add"]'))
    assert "✓ done" in allowed and "`calc__add`: 42" in allowed
