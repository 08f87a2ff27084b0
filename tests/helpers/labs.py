"""The browser tests' servers: a Jupyter server over a folder or over one new notebook, and a
notebook wired to a scripted model server; each closes its server and checks that no kernel
the server started outlives it.

The page side (Chromium, the cells, the waits) is ``tests/helpers/browser.py``.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.jupyter_server_helper import JupyterServer

__all__ = ["jupyter_server", "notebook_server", "scripted_lab"]

_APPS = {"lab": ("jupyterlab", "JupyterLab"), "notebook": ("notebook", "Jupyter Notebook 7")}


@contextlib.contextmanager
def jupyter_server(tmp_path: Path, root: Path, app: str = "lab") -> Iterator[JupyterServer]:
    """A started Jupyter server (JupyterLab or Notebook 7) over ``root``, its home in
    ``tmp_path/home``; a skip if the app is not installed. On the way out it is closed,
    and no kernel it started may outlive it."""
    module, title = _APPS[app]
    pytest.importorskip(module, reason=f"{title} is not installed")
    srv = JupyterServer(root, tmp_path / "home", app=app)
    _anywidget_labextension(tmp_path / "home" / "data")
    srv.start()
    kernels: list[int] = []
    try:
        yield srv
        kernels = srv.kernel_pids()
    finally:
        kernels = kernels or srv.kernel_pids()
        srv.close()
    _assert_gone(kernels)


@contextlib.contextmanager
def notebook_server(tmp_path: Path, cells: list[str], name: str,
                    app: str = "lab") -> Iterator[tuple[JupyterServer, Path]]:
    """A Jupyter server over one new notebook ``name`` of code ``cells`` (a python3 kernel):
    the server and the notebook's path."""
    import nbformat

    root = tmp_path / "root"
    root.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    path = root / name
    nbformat.write(nb, path)
    with jupyter_server(tmp_path, root, app) as srv:
        yield srv, path


@contextlib.contextmanager
def scripted_lab(tmp_path: Path, replies: list[Any], task: str, name: str, *settings: str,
                 app: str = "lab", after: tuple[str, ...] = ()) -> Iterator[tuple[JupyterServer, Any, Path]]:
    """A notebook whose first cell loads ipyagent against a scripted model server on
    127.0.0.1 (``replies``), then runs the ``settings`` lines, and whose second runs
    ``%agent task`` (then the ``after`` cells): the server, the model and the notebook's path."""
    from tests.helpers.scripted_server import ScriptedServer

    model = ScriptedServer(replies)
    model.start()
    setup = "\n".join(["%load_ext ipyagent", "%config Agent.model = 'scripted'",
                       f"%config Agent.base_url = '{model.base_url}'", *settings])
    try:
        with notebook_server(tmp_path, [setup, f"%agent {task}", *after], name, app) as (srv, path):
            yield srv, model, path
    finally:
        model.close()


def _assert_gone(pids: list[int]) -> None:
    import psutil

    deadline = time.monotonic() + 15
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.2)
    assert not alive, f"kernels outlived the server: {alive}"


def _anywidget_labextension(data_dir: Path) -> None:
    """anywidget's labextension where this server looks, when pip put it beside the package
    (a ``--target`` install) rather than under ``sys.prefix``."""
    try:
        import anywidget
    except ImportError:  # a dependency: the tests that need it say so
        return
    if (Path(sys.prefix) / "share/jupyter/labextensions/anywidget").is_dir():
        return
    beside = Path(anywidget.__file__).resolve().parents[1] / "share/jupyter/labextensions/anywidget"
    if beside.is_dir():
        shutil.copytree(beside, data_dir / "labextensions" / "anywidget", dirs_exist_ok=True)
