"""A Context as an nbformat v4 notebook: what ran is code, what was said is Markdown.

* user / assistant / system messages → Markdown cells with a label heading;
* a ``python`` tool call that ran → a **code cell** whose outputs are the sibling kernel's
  real outputs and whose ``execution_count`` is the kernel's, so Run All re-does the work;
  a call that raised keeps its error output and is tagged ``raises-exception`` so Run All
  carries on past it, as the agent did;
* an edited call → a note with what the model proposed, then the code that actually ran;
* denied, skipped, interrupted, timed-out or kernel-killing calls and every other tool
  → Markdown cells that say what happened (their code is shown, never re-run);
* compacted items (inside a ``Summary``) are rendered before the summary, because the
  code they ran is what later cells rely on;
* the lossless item list is in ``metadata["ipyagent"]`` — cells are for people, the
  metadata is what ``load`` reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, Iterable, Mapping

from .._util.text import one_line
from .._version import __version__
from ..context.evidence import CHECK_KEY, LIMIT_KEY
from ..context.items import (
    PREVIEW_KEY,
    Item,
    Message,
    Reasoning,
    Summary,
    ToolCall,
    ToolResult,
    code_of,
    item_from_dict,
    skip_reason,
    told_model,
    unfold,
)
from ..context.spill import outputs_of, raw_replaced
from ..engine.approval import PERSON
from ..tools.files import recorded_file
from ..trust.untrusted import fence as _fence
from ..trust.untrusted import inline_code, markdown_text, sibling_bundle
from .file_record import cell_source
from .node import NotebookNode, from_dict

__all__ = ["context_to_notebook", "notebook_dict", "groups", "header_cell", "audit_cell",
           "FORMAT", "MAX_CELL_TEXT", "NBFORMAT"]

FORMAT = 1  # version of metadata["ipyagent"]; bump on incompatible changes
MAX_CELL_TEXT = 20_000  # Markdown cells show at most this much of a tool's text output
NOT_RERUN = ("timeout", "died")  # statuses whose code must not run again on Run All
NBFORMAT = (4, 5)  # what ``nbformat.v4.new_notebook`` writes

# Keys nbformat's schema allows per output type (others, like a display id, are dropped).
_OUTPUT_KEYS = {
    "stream": ("name", "text"),
    "display_data": ("data", "metadata"),
    "execute_result": ("data", "metadata", "execution_count"),
    "error": ("ename", "evalue", "traceback"),
}


def context_to_notebook(context: Any, header: Mapping[str, Any] | None = None, *,
                        kernel_name: str = "python3",
                        metadata: Mapping[str, Any] | None = None,
                        audit: bool = False) -> NotebookNode:
    """The notebook for ``context``; ``header`` (label → value) becomes the first cell;
    ``audit`` adds an "Audit" cell at the end (how each tool call was decided). nbformat
    is not imported (see ``node``); the result is a valid v4 notebook."""
    return from_dict(notebook_dict(context, header, kernel_name=kernel_name,
                                            metadata=metadata, audit=audit))


def notebook_dict(context: Any, header: Mapping[str, Any] | None = None, *,
                  kernel_name: str = "python3", metadata: Mapping[str, Any] | None = None,
                  audit: bool = False) -> dict[str, Any]:
    """``context_to_notebook`` as plain dicts (nbformat not imported, nothing validated)."""
    items = list(context)
    cells: list[dict[str, Any]] = []
    if header is not None:
        cells.append(header_cell(header, context.system))
    for _group, render in groups(items):
        cells.extend(render())
    for index, cell in enumerate(cells):
        # By position, not random: saving the same run twice gives the same file, and a
        # continued run only adds cells (clean diffs under version control).
        cell["id"] = f"ipyagent-{index}"
    last = audit_cell(items) if audit else None
    if last is not None:
        cells.append(last)
    return skeleton(context.system, [i.to_dict() for i in items], cells, kernel_name, metadata)


def skeleton(system: str, items: Any, cells: Any, kernel_name: str,
             metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The notebook around its cells and items."""
    return {"cells": cells,
            "metadata": {"kernelspec": {"name": kernel_name,
                                        "display_name": "Python 3 (ipykernel)",
                                        "language": "python"},
                         "language_info": {"name": "python"},
                         "ipyagent": {"format": FORMAT, "version": __version__, "system": system,
                                      "items": items, **(metadata or {})}},
            "nbformat": NBFORMAT[0], "nbformat_minor": NBFORMAT[1]}


def audit_cell(items: list[Item]) -> dict[str, Any] | None:
    """The "Audit" cell (how each tool call was decided), None when nothing was called."""
    if not any(isinstance(i, (ToolCall, Summary)) for i in items):
        return None
    from ..context.audit import Audit

    cell = _md(Audit.of(items).markdown(), kind="audit")
    cell["id"] = "ipyagent-audit"  # the last cell, rewritten in place on every save
    return cell


# -- cells ------------------------------------------------------------------------
Cells = list[dict[str, Any]]


def groups(items: list[Item]) -> Iterator[tuple[tuple[Item | None, ...], Callable[[], Cells]]]:
    """``items`` as groups whose cells depend on nothing else (a call and its result, any
    other item alone), each with what renders its cells: a writer may reuse the cells of a
    group none of whose items changed."""
    results = _results_by_call(items)
    call_ids = {i.id for i in items if isinstance(i, ToolCall)}
    for item in items:
        if isinstance(item, ToolCall):
            queue = results.get(item.id, [])
            result = queue.pop(0) if queue else None
            yield (item, result), partial(_listed, _call_cells, item, result)
        elif isinstance(item, ToolResult):
            if item.call_id not in call_ids:  # its call was edited out of the context
                yield (item,), partial(_listed, _cells, [item])
        else:
            yield (item,), partial(_listed, _cells, [item])


def _listed(make: Callable[..., Iterable[dict[str, Any]]], *args: Any) -> Cells:
    return list(make(*args))


def _cells(items: list[Item], compacted: bool = False) -> Iterable[dict[str, Any]]:
    """The cells of ``items``; ``compacted``: they are a summary's, already unfolded."""
    results = _results_by_call(items)
    call_ids = {i.id for i in items if isinstance(i, ToolCall)}
    for item in items:
        if isinstance(item, Message) and item.role == "user" and PREVIEW_KEY in item.meta:
            # File content (engine.previews): its lines shown as they are, in a fence.
            head, _, rest = item.content.partition("\n")
            yield _md(f"#### File preview\n\n{markdown_text(head)}\n\n{_fence(rest)}", kind=item.role)
        elif isinstance(item, Message) and LIMIT_KEY in item.meta:
            # max_steps was reached after calls: ipyagent asked for the answer (answer_at_limit).
            yield _md(f"#### ipyagent: the step limit\n\n{markdown_text(item.content)}",
                      kind="check")
        elif isinstance(item, Message) and CHECK_KEY in item.meta:
            # ipyagent's answer check (engine/verify): ours, not the person's words.
            yield _md(f"#### ipyagent checked the answer\n\n{markdown_text(item.content)}",
                      kind="check")
        elif isinstance(item, Message):
            yield _md(f"#### {item.role.capitalize()}\n\n{markdown_text(item.content)}",
                      kind=item.role)
        elif isinstance(item, Reasoning):
            text = item.content or "(opaque reasoning data, kept in the metadata)"
            yield _md(f"<details><summary>Reasoning</summary>\n\n{_fence(text)}\n\n</details>",
                      kind="reasoning")
        elif isinstance(item, ToolCall):
            queue = results.get(item.id, [])
            result = queue.pop(0) if queue else None
            yield from _call_cells(item, result)
        elif isinstance(item, ToolResult):
            if item.call_id not in call_ids:  # its call was edited out of the context
                yield _md(f"**Tool result** {inline_code(item.name or '?')} "
                          f"({inline_code(item.call_id)}, its call "
                          f"is not in the context)\n\n{_fence(_clip(item.full_output))}", kind="result")
        elif isinstance(item, Summary):
            # An older transcript's summary may hold summaries: their items come unfolded,
            # each inner summary after its items, as one run of cells.
            inner = [] if compacted else list(
                unfold((item_from_dict(d) for d in raw_replaced(item)), keep_summaries=True))
            if inner:
                ran = sum(not isinstance(i, Summary) for i in inner)
                yield _md(f"*The next {ran} items were later compacted into a summary; "
                          "the model no longer sees them, but their code ran.*", kind="note")
                yield from _cells(inner, compacted=True)
            yield _md(f"#### Summary of earlier conversation\n\n{markdown_text(item.content)}",
                      kind="summary")


def _results_by_call(items: list[Item]) -> dict[str, list[ToolResult]]:
    """Results queued per call id, in order (call ids may repeat across tasks)."""
    out: dict[str, list[ToolResult]] = {}
    for item in items:
        if isinstance(item, ToolResult):
            out.setdefault(item.call_id, []).append(item)
    return out


def _call_cells(call: ToolCall, result: ToolResult | None) -> Iterable[dict[str, Any]]:
    code = call.arguments.get("code") if call.name == "python" else None
    meta = result.meta if result is not None else {}
    if not isinstance(code, str) or call.raw_arguments is not None:
        yield _md(_describe_call(call, result), kind="tool", call_id=call.id)
        written = recorded_file(result)
        if written is not None:  # Run All re-creates the file the agent wrote
            cell = _code(cell_source(call, *written))
            cell["metadata"]["ipyagent"] = {"call_id": call.id, "kind": "file"}
            yield cell
        yield from _told(call, result)
        return
    why = _not_run_reason(result)
    if why:
        text = (f"**`python` call {markdown_text(one_line(why, 10_000))}** ({inline_code(call.id)})\n\n"
                f"{_fence(code, 'python')}")
        if result is not None and result.output and meta.get("status") in NOT_RERUN:
            text += f"\n\nRecorded output:\n\n{_fence(_clip(result.output))}"
        yield _md(text, kind="tool", call_id=call.id)
        yield from _told(call, result)
        return
    original = call.meta.get("original_arguments")
    if meta.get("edited") or original is not None:
        proposed = (original or {}).get("code", json.dumps(original, ensure_ascii=False))
        yield _md("**Edited by the user before it ran.** The model proposed:\n\n"
                  f"{_fence(str(proposed), 'python')}\n\nThe next cell is the code that ran.",
                  kind="note", call_id=call.id)
    assert result is not None
    cell = _code(code, _count(result.execution_count), [_output(o) for o in outputs_of(result)])
    cell["metadata"]["ipyagent"] = {"call_id": call.id, "status": meta.get("status", "ok")}
    if result.error:
        # The agent carried on after the error; so must Run All (nbclient and Jupyter honour this tag).
        cell["metadata"]["tags"] = ["raises-exception"]
    yield cell
    yield from _told(call, result)


def _told(call: ToolCall, result: ToolResult | None) -> Iterable[dict[str, Any]]:
    """What ipyagent told the model after the call's outputs (values, then its note), in the
    model's order, kept with the run: for every call, run or not, python or not."""
    if result is None:
        return
    note, values = told_model(result)
    if note or values:
        told = [f"{_fence(line)}" for line in (values, note) if line]
        yield _md(f"*ipyagent told the model, after this call's outputs* ({inline_code(call.id)}):"
                  "\n\n" + "\n\n".join(told), kind="note", call_id=call.id)


def _not_run_reason(result: ToolResult | None) -> str:
    """Why a python call is shown as Markdown instead of a code cell ('' when it is code)."""
    if result is None:
        return "not answered (the run stopped before it ran)"
    meta = result.meta
    if meta.get("denied"):
        by = ("the user" if meta.get("by") in PERSON
              else f"the approval {meta.get('by') or 'policy'}")
        reason = meta.get("reason")
        return f"denied by {by}" + (f": {reason}" if reason else "")
    if meta.get("skipped"):
        return f"not run ({skip_reason(meta)})"
    if meta.get("interrupted"):
        return "interrupted by the user"
    if meta.get("status") == "timeout":
        return "timed out (not re-run by Run All)"
    if meta.get("status") == "died":
        return "killed the kernel (not re-run by Run All)"
    if "status" not in meta and result.execution_count is None and not outputs_of(result):
        return f"did not run: {one_line(result.output, 200)}"  # e.g. no python tool on offer
    return ""


def _describe_call(call: ToolCall, result: ToolResult | None) -> str:
    code = code_of(call.name, call.arguments) if call.raw_arguments is None else None
    # A shell command is shown as the command (never a code cell: Run All, --rerun and
    # replay do not run it again; replay answers it from the recording).
    lang, args = code or ("json", call.raw_arguments if call.raw_arguments is not None
                          else json.dumps(call.arguments, indent=2, ensure_ascii=False))
    lines = [f"**Tool call** {inline_code(call.name)} ({inline_code(call.id)})",
             _fence(args, lang)]
    if result is None:
        lines.append("*Not answered: the run stopped before it ran.*")
    elif result.meta.get("denied") or result.meta.get("skipped") or result.meta.get("interrupted"):
        lines.append(f"*Not run:* {markdown_text(one_line(result.output, 300))}")
    else:
        label = "Error" if result.error else "Result"
        lines.append(f"**{label}:**\n\n{_fence(_clip(result.full_output))}")
    return "\n\n".join(lines)


def header_cell(header: Mapping[str, Any], system: str) -> dict[str, Any]:
    """The first cell: the header's table (label → value) and the system prompt."""
    title = header.get("title", "ipyagent transcript")
    rows = [f"| {k} | {_cell_text(v)} |" for k, v in header.items()
            if k not in ("title", "note") and v not in (None, "", [])]
    text = [f"# {title}", "", "| setting | value |", "|---|---|", *rows]
    if header.get("note"):
        text += ["", str(header["note"])]
    if system:
        text += ["", "<details><summary>System prompt</summary>", "", _fence(system), "",
                 "</details>"]
    return _md("\n".join(text), kind="header")


# -- helpers ----------------------------------------------------------------------
# Cells and outputs are plain dicts shaped as ``nbformat.v4.new_*`` makes them, which
# validate each one against the schema (seconds per save on a long run); the tests
# validate what these make.
def _md(text: str, kind: str, call_id: str | None = None) -> dict[str, Any]:
    meta = {"ipyagent": {"kind": kind, **({"call_id": call_id} if call_id else {})}}
    return {"cell_type": "markdown", "metadata": meta, "source": text}


def _code(source: str, execution_count: int | None = None,
          outputs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"cell_type": "code", "execution_count": execution_count, "metadata": {},
            "outputs": outputs or [], "source": source}


def _output(out: Mapping[str, Any]) -> dict[str, Any]:
    """An nbformat output from a recorded dict, keeping only the schema's keys."""
    kind = out.get("output_type", "stream")
    node = {"output_type": kind, **{k: out[k] for k in _OUTPUT_KEYS.get(kind, ()) if k in out}}
    if kind in ("execute_result", "display_data"):
        if kind == "execute_result":
            node["execution_count"] = _count(node.get("execution_count"))
        # What the model's code displayed, made as inert here as in the live cell: a saved
        # transcript opened and trusted later must not run it either.
        data, metadata, note = sibling_bundle(dict(node.get("data") or {}),
                                              dict(node.get("metadata") or {}))
        if note:
            data["text/plain"] = (_text(data["text/plain"]) + "\n" if "text/plain" in data
                                  else "") + note
        node["data"], node["metadata"] = data, metadata
    elif kind == "error":
        node.setdefault("ename", "Error")
        node.setdefault("evalue", "")
        node.setdefault("traceback", [])
    return node


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "".join(value)


def _count(value: Any) -> int | None:
    """A valid nbformat execution count (a positive int) or None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _clip(text: str) -> str:
    if len(text) <= MAX_CELL_TEXT:
        return text
    return text[:MAX_CELL_TEXT] + f"\n[… {len(text) - MAX_CELL_TEXT} more characters in the metadata]"


def _cell_text(value: Any) -> str:
    """A value for a Markdown table cell (no pipes or newlines)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return one_line(text, 200).replace("|", "\\|")
