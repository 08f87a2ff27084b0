"""The agent sees the notebook: the namespace picture, copies, the last error, cells above.

What crosses from the user's kernel: the picture (``namespace.picture``: names, types and
shapes, secret-looking names and values left out), the values the user copies (``push``,
``--with``), the last failing cell and its traceback (``fix``), the cells above
(``--cells N``) — each secret-redacted and bounded. What crosses back: a copy the user pulls,
or code offered as a *new cell* (``set_next_input``) that the user runs or not. The agent's
code never runs here.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from .._secrets import scanner, secret_values
from .._text import head_tail, visible
from .._untrusted import html_text
from ..kernel.outputs import strip_ansi

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["FailedCell", "ErrorWatch", "prepare_run", "push_names", "pull_name", "code_of",
           "offer_cell", "fix_task", "cells_above", "last_code_block"]

TRACEBACK_LIMIT = 6000
CELL_LIMIT = 4000
OUTPUT_LIMIT = 1000


def _redact(text: str) -> str:
    """``text`` with the environment's secret values replaced (the save guard's set)."""
    return scanner(secret_values()).redact(text)[0]


@dataclass
class FailedCell:
    """The last cell that raised: its source and its plain-text traceback."""

    source: str
    traceback: str


class ErrorWatch:
    """A ``post_run_cell`` hook that remembers the last cell that raised."""

    def __init__(self) -> None:
        self.last: FailedCell | None = None

    def __call__(self, result: Any) -> None:
        exc = getattr(result, "error_in_exec", None)
        if exc is None:
            return
        source = getattr(getattr(result, "info", None), "raw_cell", "") or ""
        if source.lstrip().startswith(("%agent", "%%agent")):
            return  # the agent's own cell failing is not the error to fix
        self.last = FailedCell(source, format_error(exc))

    def current(self) -> FailedCell | None:
        """The last failure seen, or the interpreter's own (``sys.last_value``) as a fallback."""
        if self.last is not None:
            return self.last
        exc = getattr(sys, "last_value", None)
        if exc is None:
            return None
        return FailedCell("", format_error(exc))


def format_error(exc: BaseException) -> str:
    """The traceback as plain text, without IPython's own frames (the cell's come first)."""
    tb = exc.__traceback__
    while tb is not None and "IPython" + "/core/" in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def fix_task(failed: FailedCell, task: str | None) -> str:
    """The task ``%agent fix`` sends: the failing cell's source and its traceback, bounded."""
    tb = head_tail(strip_ansi(failed.traceback), TRACEBACK_LIMIT)
    source = head_tail(failed.source, CELL_LIMIT)
    ask = (task or "").strip() or "Explain and fix this error."
    parts = [ask, "", "The cell in my notebook that raised:" if source else "",
             f"```python\n{source}\n```" if source else "",
             "Its traceback:", f"```\n{tb.rstrip()}\n```", "",
             "Answer with the fixed cell as one ```python block; I will run it in my kernel."]
    return _redact("\n".join(p for p in parts if p is not None))


def cells_above(shell: Any, n: int) -> str:
    """The last ``n`` cells' inputs (and text outputs, bounded) before this one."""
    ins = list(shell.user_ns.get("In", []))
    outs = shell.user_ns.get("Out", {})
    first = max(1, len(ins) - 1 - n)
    blocks = []
    for i in range(first, len(ins) - 1):
        source = ins[i]
        if not source.strip():
            continue
        block = f"In [{i}]:\n```python\n{head_tail(source, CELL_LIMIT)}\n```"
        if i in outs:
            try:
                shown = repr(outs[i])
            except Exception:
                shown = f"<{type(outs[i]).__name__}>"
            block += f"\nOut[{i}]:\n```\n{head_tail(strip_ansi(shown), OUTPUT_LIMIT)}\n```"
        blocks.append(block)
    if not blocks:
        return ""
    return _redact("The cells above in my notebook (my kernel, not yours):\n\n" + "\n\n".join(blocks))


def show_picture(in_kernel: bool, summary: str, text: str) -> None:
    """The picture, collapsed in the cell (escaped: names may be anything)."""
    if not in_kernel:
        print(visible(f"ipyagent: {summary}"), file=sys.stderr)
        return
    from IPython.display import display

    markup = (f"<details><summary>{html_text(summary)}</summary>"
              f"<pre>{html_text(text)}</pre></details>")
    display({"text/html": markup, "text/plain": visible(summary)}, raw=True)


def last_picture(agent: Agent) -> str | None:
    """The text of the last namespace picture in the conversation."""
    for item in reversed(agent.context):
        meta = getattr(item, "meta", None) or {}
        if "namespace" in meta:
            return str(getattr(item, "content", ""))
    return None


def prepare_run(magics: Any, agent: Agent, cmd: Any) -> None:
    """Before a run: copy ``--with`` names, add ``--cells``, tell the model the namespace."""
    from ..items import Message
    from ..namespace import picture

    shell = magics.shell
    cells = getattr(cmd.options, "cells", None)
    if cells and cmd.task is not None:
        above = cells_above(shell, cells)
        if above:
            cmd.task = f"{cmd.task}\n\n{above}"
    # A new task, or `%agent step` after the user added a message: the picture goes just
    # before that message (the task stays the last thing the model reads).
    ends_with_user = bool(agent.context) and isinstance(agent.context[-1], Message) \
        and agent.context[-1].role == "user"
    if agent.share_namespace != "off" and (cmd.task is not None or ends_with_user):
        pic = picture(user_variables(shell), agent.share_namespace)
        if pic and pic.text != last_picture(agent):  # else the model already has this one
            item = Message("user", pic.text, meta={"namespace": {
                "mode": agent.share_namespace, "names": pic.names, "more": pic.more}})
            if cmd.task is None:
                agent.context.insert(len(agent.context) - 1, item)
            else:
                agent.context.append(item)
            show_picture(magics.in_kernel, pic.summary(), pic.text)
    names = [n for n in (getattr(cmd.options, "with_", None) or "").replace(",", " ").split() if n]
    if names:
        push_names(magics, agent, names, quiet=True)


def user_variables(shell: Any) -> dict[str, Any]:
    """The user's namespace without what IPython put there itself (``user_ns_hidden``)."""
    if shell is None:  # no IPython shell (a stand-in, a script): no namespace to describe
        return {}
    hidden = getattr(shell, "user_ns_hidden", {}) or {}
    return {k: v for k, v in shell.user_ns.items() if not (k in hidden and hidden[k] is v)}


def push_names(magics: Any, agent: Agent, names: list[str], *, quiet: bool = False) -> None:
    """``%agent push NAME…``: copy the user's variables into the sibling, recorded."""
    from .. import _eventloop

    ns = magics.shell.user_ns
    missing = [n for n in names if n not in ns]
    if missing:
        raise UsageError(f"%agent push: not defined in your kernel: {', '.join(missing)}")
    values = {n: ns[n] for n in names}
    try:
        records = _eventloop.run_sync(agent.apush(**values))
    except (TypeError, ValueError) as exc:
        raise UsageError(visible(f"%agent push: {exc}")) from None
    for rec in records:
        print(visible(f"ipyagent: copied {rec['name']} ({rec['description']}, "
                      f"{_size(rec['bytes'])}) into the agent's kernel"),
              file=sys.stderr if quiet else sys.stdout)


def _size(n: int) -> str:
    from ..copies import human_size

    return human_size(n)


def pull_name(magics: Any, agent: Agent, name: str, local: str | None) -> None:
    """``%agent pull NAME [as LOCAL]``: bring a copy of the sibling's variable here."""
    from .. import _eventloop
    from ..errors import IpyagentError
    from ..namespace import describe

    local = local or name
    if not local.isidentifier():
        raise UsageError(f"%agent pull: {local!r} is not a valid Python name")
    try:
        value = _eventloop.run_sync(agent.apull(name, local))
    except (NameError, TypeError, ValueError, IpyagentError) as exc:
        raise UsageError(visible(f"%agent pull: {exc}")) from None
    magics.shell.user_ns[local] = value
    print(visible(f"ipyagent: {local} = {describe(value)} (a copy from the agent's kernel)"))


def code_of(agent: Agent, n: int | None) -> str:
    """The code of the agent's last (or ``n``-th, from 1) python call."""
    from ..items import ToolCall

    codes = [str(i.arguments.get("code", "")) for i in agent.context
             if isinstance(i, ToolCall) and i.name == "python" and isinstance(i.arguments, dict)]
    if not codes:
        raise UsageError("%agent code: the agent has made no python call in this conversation")
    if n is None:
        return codes[-1]
    if not 1 <= n <= len(codes):
        raise UsageError(f"%agent code: there are {len(codes)} python calls; give 1 to {len(codes)}")
    return codes[n - 1]


def offer_cell(magics: Any, code: str, what: str) -> None:
    """Put ``code`` in a new cell below (the execute reply's ``set_next_input`` payload);
    in a terminal, print it. It is never run here."""
    if magics.in_kernel:
        magics.shell.set_next_input(code, replace=False)
        print(f"ipyagent: {what} is in a new cell below — read it, then run it if you want it")
    else:
        print(visible(f"ipyagent: {what} (not run):\n{code}"))


def last_code_block(text: str) -> str | None:
    """The last fenced python block of an answer (the proposed fix)."""
    import re

    blocks = re.findall(r"(`{3,}|~{3,})[ \t]*(?:python|py|ipython)?[ \t]*\n(.*?)\n\1", text, re.S)
    return blocks[-1][1] if blocks else None
