"""The agent sees the notebook: the namespace picture, copies, the last error, cells above.

What crosses from the user's kernel: the picture (``namespace.picture``: names, types and
shapes, secret-looking names and values left out), the values the user copies (``push``,
``--with``), the last failing cell and its traceback (``fix``), the cells above
(``--cells N``) — each secret-redacted and bounded. What crosses back: a copy the user pulls,
or code offered as a *new cell* (``set_next_input``) that the user runs or not. The agent's
code never runs here.
"""

from __future__ import annotations

import re
import sys
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from .._util.text import head_tail, visible
from ..kernel.outputs import strip_ansi
from ..trust.secrets import scanner, secret_values
from ..trust.untrusted import html_text

if TYPE_CHECKING:
    from ..engine.agent import Agent

__all__ = ["FailedCell", "ErrorWatch", "prepare_run", "push_names", "pull_name", "code_of",
           "offer_cell", "fix_task", "cells_above", "last_code_block", "fix_code", "python_calls"]

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
    from ..context.evidence import CHECK_KEY, CONTINUE_KEY, LIMIT_KEY
    from ..context.items import Message
    from ..kernel.namespace import picture

    shell = magics.shell
    cells = getattr(cmd.options, "cells", None)
    if cells and cmd.task is not None:
        above = cells_above(shell, cells)
        if above:
            cmd.task = f"{cmd.task}\n\n{above}"
    # A new task, or `%agent step` after the user added a message: the picture goes just
    # before that message (the task stays the last thing the model reads).
    # Not after ipyagent's answer check (engine/verify), its "go on" after a cut reply, or its
    # word at the step limit: those messages are ours, not the user's.
    ends_with_user = bool(agent.context) and isinstance(agent.context[-1], Message) \
        and agent.context[-1].role == "user" and not any(
            key in agent.context[-1].meta for key in (CHECK_KEY, CONTINUE_KEY, LIMIT_KEY))
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
    from .._util import eventloop as _eventloop

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
    from ..kernel.copies import human_size

    return human_size(n)


def pull_name(magics: Any, agent: Agent, name: str, local: str | None) -> None:
    """``%agent pull NAME [as LOCAL]``: bring a copy of the sibling's variable here."""
    from .._util import eventloop as _eventloop
    from ..errors import IpyagentError
    from ..kernel.namespace import describe

    local = local or name
    if not local.isidentifier():
        raise UsageError(f"%agent pull: {local!r} is not a valid Python name")
    try:
        value = _eventloop.run_sync(agent.apull(name, local))
    except (NameError, TypeError, ValueError, IpyagentError) as exc:
        raise UsageError(visible(f"%agent pull: {exc}")) from None
    magics.shell.user_ns[local] = value
    print(visible(f"ipyagent: {local} = {describe(value)} (a copy from the agent's kernel)"))


def _ran(result: Any) -> bool:
    """True when the call whose result this is ran (approved or edited, not denied or skipped)."""
    if result is None:
        return False
    meta = result.meta
    record = meta.get("decision")
    if isinstance(record, dict):
        return record.get("action") in ("approve", "edit")
    return not (meta.get("denied") or meta.get("skipped") or meta.get("interrupted")) \
        and result.execution_count is not None


def python_calls(items: Any) -> list[tuple[Any, bool]]:
    """Every python call in ``items``, in order, and whether it ran (its arguments are the
    edited ones where the person edited it: the step records what ran)."""
    from ..context.items import ToolCall, ToolResult

    items = list(items)
    results: dict[str, list[Any]] = {}  # by call id, in order: ids may repeat across turns
    for item in items:
        if isinstance(item, ToolResult):
            results.setdefault(item.call_id, []).append(item)
    out = []
    for item in items:
        if isinstance(item, ToolCall):
            queue = results.get(item.id, [])
            result = queue.pop(0) if queue else None
            if item.name == "python" and isinstance(item.arguments, dict):
                out.append((item, _ran(result)))
    return out


def code_of(agent: Agent, n: int | None) -> str:
    """The code of the agent's last python call that ran (or of the ``n``-th call, from 1,
    if it ran): a denied or unanswered call's code is never offered as a cell."""
    calls = python_calls(agent.context)
    if not calls:
        raise UsageError("%agent code: the agent has made no python call in this conversation")
    if n is None:
        ran = [call for call, did in calls if did]
        if not ran:
            raise UsageError(f"%agent code: none of the agent's {len(calls)} python call"
                             f"{'s' * (len(calls) != 1)} ran (denied or not answered): nothing to put in a cell")
        return str(ran[-1].arguments.get("code", ""))
    if not 1 <= n <= len(calls):
        raise UsageError(f"%agent code: there are {len(calls)} python calls; give 1 to {len(calls)}")
    call, did = calls[n - 1]
    if not did:
        raise UsageError(f"%agent code {n}: that call did not run (denied or not answered); "
                         "its code is not put in a cell")
    return str(call.arguments.get("code", ""))


def offer_cell(magics: Any, code: str, what: str) -> None:
    """Put ``code`` in a new cell below (the execute reply's ``set_next_input`` payload);
    in a terminal, print it. It is never run here. Hidden characters inside string literals
    are written as escapes (``trust.cellcode``), so the cell shows what runs; elsewhere
    they keep the code out of the cell, said in one line."""
    from ..trust.cellcode import UnsafeCode, cell_text

    if magics.in_kernel:
        try:
            text = cell_text(code)
        except UnsafeCode as exc:
            print(visible(f"ipyagent: {what} was not put in a cell: {exc}"), file=sys.stderr)
            return
        magics.shell.set_next_input(text, replace=False)
        escaped = " (hidden characters in its strings written as escapes)" if text != code else ""
        print(f"ipyagent: {what} is in a new cell below{escaped} — read it, then run it if you want it")
    else:
        print(visible(f"ipyagent: {what} (not run):\n{code}"))


_PYTHON_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*(?:python3?|py|ipython3?)[ \t]*\n(.*?)\n[ \t]*\1[ \t]*$",
                           re.S | re.M | re.I)


def last_code_block(text: str) -> str | None:
    """The last fenced block of an answer labelled python (the proposed fix): never an
    unlabelled or other block (an "expected output" is not code to run)."""
    blocks = _PYTHON_FENCE.findall(text)
    return blocks[-1][1] if blocks else None


def fix_code(items: Any, task: str | None) -> tuple[str | None, str]:
    """What ``%agent fix`` offers as a cell, from the items after its task: the answer's
    python block, else the last python call that ran; (None, why) when there is neither."""
    from ..context.items import Message

    items = list(items)
    start = next((i for i in range(len(items) - 1, -1, -1) if isinstance(items[i], Message)
                  and items[i].role == "user" and items[i].content == task), -1)
    run = items[start + 1:]
    for item in reversed(run):
        if isinstance(item, Message) and item.role == "assistant":
            code = last_code_block(item.content)
            if code:
                return code, "the proposed fix"
            break
    ran = [call for call, did in python_calls(run) if did]
    if ran:
        return str(ran[-1].arguments.get("code", "")), "the proposed fix (the python the agent ran)"
    return None, ("the answer has no ```python block and the agent ran no python, so nothing "
                  "was put in a cell")
