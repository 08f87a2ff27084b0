"""Input transformers that make ``%agent`` cells await.

A widget click reaches the kernel only while a cell *awaits* (ipykernel >= 7.4), so a
top-level ``%agent``/``%%agent`` becomes ``await …agent_async(...)``: IPython's autoawait
runs the cell as a coroutine, the cell stays busy until the run ends (Run All waits for
it) and the kernel's loop keeps reading clicks meanwhile.

Two stages, because each sees something the other cannot:

* ``protect_question_marks`` (cleanup, before IPython's own transforms): IPython reads
  ``%agent what is this?`` as a help request for ``this``; a task may end with ``?``.
* ``await_agent_magics`` (post, after them): IPython's tokenizer has already turned real
  magics into ``get_ipython().run_line_magic('agent', …)`` calls (so a ``%agent`` inside a
  string is left alone); a call is rewritten only where ``await`` is legal (not in a
  ``def``): those stay blocking calls.
"""

from __future__ import annotations

import ast
import re

__all__ = ["protect_question_marks", "await_agent_magics"]

_QUESTION = re.compile(r"%agent(\s+\S.*?)\s*$")
_CALLS = {
    "line": "get_ipython().run_line_magic('agent', ",
    "cell": "get_ipython().run_cell_magic('agent', ",
}
_TARGET = "await __import__('ipyagent.frontends.magics').frontends.magics.agent_async({})"


def protect_question_marks(lines: list[str]) -> list[str]:
    """Turn ``%agent TASK?`` into an explicit magic call before help-syntax parsing."""
    if not lines or lines[0].lstrip().startswith("%%"):
        return lines  # a cell magic's body is its own business
    out = []
    for line in lines:
        end = "\n" if line.endswith("\n") else ""
        match = _QUESTION.fullmatch(line.rstrip("\n"))
        if match and line.rstrip().endswith("?") and not line.rstrip().rstrip("?").endswith("%agent"):
            out.append(f"get_ipython().run_line_magic('agent', {match.group(1).strip()!r}){end}")
        else:
            out.append(line)
    return out


def await_agent_magics(lines: list[str]) -> list[str]:
    """Rewrite ``%agent``/``%%agent`` calls into awaited coroutines where ``await`` is legal."""
    # Inside top-level blocks too (``if``, ``for``, ``with``), when the result still
    # compiles as a top-level-await cell; otherwise (a ``%agent`` inside a ``def``) only
    # the unindented ones, and the rest stay blocking calls.
    everywhere = [_rewrite(line, nested=True) or line for line in lines]
    if everywhere != lines and _compiles("".join(everywhere)):
        return everywhere
    return [_rewrite(line) or line for line in lines]


def _compiles(source: str) -> bool:
    try:
        compile(source, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except (SyntaxError, ValueError):
        return False
    return True


def _rewrite(line: str, nested: bool = False) -> str | None:
    text = line.rstrip("\n")
    body = text.lstrip() if nested else text
    indent = text[: len(text) - len(body)]
    for kind, prefix in _CALLS.items():
        if not (body.startswith(prefix) and body.endswith(")")):
            continue
        try:
            args = ast.literal_eval("(" + body[len(prefix):-1] + ",)")
        except (ValueError, SyntaxError):
            return None
        if not all(isinstance(a, str) for a in args) or len(args) != (1 if kind == "line" else 2):
            return None
        return indent + _TARGET.format(", ".join(repr(a) for a in args)) + "\n"
    return None
