"""Sphinx directives that write pages from the code at build time, never by hand.

* ``{ipyagent-table} config-table`` (or ``provider-table``): the Markdown table
  ``ipyagent._doc`` makes from the Agent's traitlets (each one's default and help) or
  from the provider presets.
* ``{ipyagent-api}``: one autodoc entry per name in ``ipyagent.__all__``, so the reference
  is exactly the public face a test pins.
"""

from __future__ import annotations

import inspect
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


class TableDirective(SphinxDirective):
    """A generated Markdown table, parsed in place."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        from ipyagent._doc import TABLES

        name = self.arguments[0]
        if name not in TABLES:
            raise self.error(f"unknown table {name!r}: one of {', '.join(TABLES)}")
        container = nodes.container(classes=["ipyagent-table"])
        self.state.nested_parse(StringList(TABLES[name]().splitlines(), source="ipyagent._doc"),
                                self.content_offset, container)
        return [container]


class ApiDirective(SphinxDirective):
    """``autoclass`` / ``autofunction`` / ``automodule`` for each public name, in order."""

    def run(self) -> list[nodes.Node]:
        import ipyagent

        lines: list[str] = []
        for name in ipyagent.__all__:
            if name.startswith("__"):
                continue  # __version__ is said in the page's text
            value = getattr(ipyagent, name)
            if inspect.ismodule(value):
                kind, options = "automodule", [":members:"]
            elif inspect.isclass(value):
                kind, options = "autoclass", [":members:"]
            else:
                kind, options = "autofunction", []
            lines += [f".. {kind}:: ipyagent.{name}", *(f"   {o}" for o in options), ""]
        container = nodes.container()
        # autodoc writes reStructuredText: inside a MyST page it must go through eval-rst,
        # or its output would be read as Markdown.
        fenced = ["```{eval-rst}", *lines, "```"]
        self.state.nested_parse(StringList(fenced, source="ipyagent.__all__"), self.content_offset,
                                container)
        return [container]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("ipyagent-table", TableDirective)
    app.add_directive("ipyagent-api", ApiDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
