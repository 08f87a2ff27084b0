"""End to end: a real notebook, executed by nbclient, beside a project skill it follows."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from ipyagent.transcripts.transcript import read
from tests.test_notebooks import code_cells

pytestmark = pytest.mark.slow

SKILL = """\
---
name: plotting
description: "This project's plots: titled 'Checked by the skill', saved as skill-checked.png"
---
Every plot in this project has a title that starts with "Checked by the skill" and is saved
as skill-checked.png beside the notebook. Use this pattern:

```python
import matplotlib.pyplot as plt

fig, ax = plt.subplots()
ax.plot(x, y, label=label)
ax.set_title("Checked by the skill: " + title)
ax.set_xlabel(xlabel)
ax.set_ylabel(ylabel)
fig.savefig("skill-checked.png")
plt.show()
```
"""
CELLS = ["%load_ext ipyagent", "%agent skills",
         "%agent --approve auto Plot sin(x) from 0 to 3", "%agent save run.ipynb"]


def test_a_notebook_lists_loads_and_follows_a_project_skill(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no skills of the developer's own
    (tmp_path / ".ipyagent" / "skills" / "plotting").mkdir(parents=True)
    (tmp_path / ".ipyagent" / "skills" / "plotting" / "SKILL.md").write_text(SKILL)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    NotebookClient(nb, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    cells = code_cells(nb)
    html = next(o["data"]["text/html"] for o in nb.cells[1].outputs if "text/html" in o.get("data", {}))
    # The project's skill is shown, and that it hides the built-in one of its name.
    assert "this project (.ipyagent/skills)" in html and "Checked by the skill" in html
    assert "overrides the built-in one" in html and "hidden: .ipyagent/skills/plotting wins" in html
    run = json.dumps([c.get("outputs", []) for c in nb.cells[2:3]])
    assert "load_skill" in run and "✓ done" in cells[CELLS[2]]
    assert "image/png" in run  # plt.show() drew the figure in the cell
    # It followed the skill: the title and the file the skill asks for.
    assert (tmp_path / "skill-checked.png").stat().st_size > 1000
    transcript = read(tmp_path / "run.ipynb")
    loads = [i for i in transcript.items if getattr(i, "name", None) == "load_skill"]
    assert [getattr(i, "arguments", None) for i in loads[:1]] == [{"name": "plotting"}]
    assert "ax.set_title(\"Checked by the skill: \" + title)" in loads[1].output
    code = [i.arguments["code"] for i in transcript.items
            if getattr(i, "name", None) == "python" and hasattr(i, "arguments")]
    assert len(code) == 1 and 'fig.savefig("skill-checked.png")' in code[0]
    assert "- plotting: This project's plots" in transcript.system
