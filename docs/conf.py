"""Sphinx configuration: MyST pages, executed with myst-nb, the pydata theme.

Build: ``python -m sphinx -W docs docs/_build`` (warnings are errors). Pages whose front
matter names a kernel are executed (their ``{code-cell}`` blocks run in a real ipykernel
with the demo model: no key, no network); the configuration page and the API reference
are generated from the code at build time (``_ext/ipyagent_docs.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))  # this checkout's ipyagent, installed or not

import ipyagent  # noqa: E402

project = "ipyagent"
author = "the ipyagent developers"
copyright = "2026, the ipyagent developers"
release = version = ipyagent.__version__

extensions = [
    "myst_nb",  # brings myst_parser; runs the pages' code cells
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # the docstrings' "Args:" sections
    "ipyagent_docs",  # the generated tables and API list
]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
# jupyter_execute: where myst-nb keeps the executed notebooks (beside _build).
exclude_patterns = ["_build", "_ext", "jupyter_execute", "**/.ipynb_checkpoints", "**/.ipyagent"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# Executed pages: every run, in a fresh temporary directory (autosaves and files the demo
# writes stay out of docs/); a cell that raises fails the build.
nb_execution_mode = "force"
nb_execution_in_temp = True
nb_execution_timeout = 300
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True
# A static page cannot run the card's widgets (the "code -> new cell" button): show their
# text form, and load no widget script from elsewhere.
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
nb_ipywidgets_js: dict[str, dict[str, str]] = {}

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "pydata_sphinx_theme"
html_title = "ipyagent"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_show_sourcelink = False
