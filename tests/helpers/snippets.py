"""The README's and the docs' examples, as written, run for real.

``python_blocks`` finds a Markdown file's ```` ```python ```` blocks (the README's notebook
snippets) or its ``{code-cell}`` blocks (the docs pages myst-nb executes); ``run_cells``
executes them in order as one notebook in a fresh ipykernel with nbclient.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)


def blocks(path: Path, info: str) -> list[str]:
    """The bodies of the fenced blocks of ``path`` whose info string is ``info``."""
    return [m["body"] for m in _FENCE.finditer(path.read_text()) if m["info"].strip() == info]


def python_blocks(path: Path) -> list[str]:
    """What a notebook would run: README's python blocks, or a page's code cells."""
    return blocks(path, "python") + blocks(path, "{code-cell} ipython3")


def run_cells(cells: list[str], cwd: Path, approval: str | None = None) -> Any:
    """Execute ``cells`` in a fresh kernel in ``cwd``; returns the executed notebook.

    ``approval`` set: the kernel's IPython profile configures ``Agent.approval`` (the test
    plays the person who clicks Approve); None: as written, headless (nobody clicks)."""
    import nbclient
    import nbformat

    env = dict(os.environ)
    if approval is not None:
        profile = cwd / ".ipython" / "profile_default"
        profile.mkdir(parents=True)
        (profile / "ipython_config.py").write_text(f"c.Agent.approval = {approval!r}\n")
        env["IPYTHONDIR"] = str(cwd / ".ipython")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(cwd)}})
    client.execute(env=env)  # a cell that raises raises CellExecutionError here
    return nb


def text(cell: Any) -> str:
    """Everything a cell showed, as text."""
    parts = []
    for out in cell.outputs:
        if "text" in out:
            parts.append(out["text"])
        data = out.get("data", {})
        parts.append(data.get("text/plain", "") + data.get("text/markdown", ""))
        if out.get("output_type") == "error":
            parts.append(f"{out['ename']}: {out['evalue']}")
    return "\n".join(parts)
