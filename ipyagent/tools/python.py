"""The built-in ``python`` tool: the model's code runs in the agent's sibling kernel."""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import os
import re
import time
import tokenize
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .._util.pyast import last_assigned, parsed, set_from_none, shadowed, split_joined, subtracted
from ..context.events import ToolOutput, live_emitter
from ..context.items import NO_OUTPUT, SHOWN, VALUES, ToolCall, ToolResult
from ..context.spill import outputs_of
from ..errors import KernelError
from ..kernel.base import confinement, for_the_model
from ..kernel.outputs import strip_ansi
from .base import Tool
from .changes import settle_changes
from .line_values import values_on_line
from .table_notes import header_fix, header_note, separator_note

if TYPE_CHECKING:
    from ..kernel.base import Kernel

__all__ = ["python_tool", "python_description", "PythonHost", "error_note", "failing_part"]


class PythonHost(Protocol):
    """What the python tool needs of its agent: the kernel and two settings, read per call."""

    @property
    def kernel(self) -> Kernel: ...
    tool_timeout: float
    send_images: bool
    workspace: str

    @property
    def workspace_path(self) -> Path: ...

DESCRIPTION = ("Run Python code in a persistent, isolated IPython kernel and return what it "
               "prints, the value of the last expression, or the error.")


def python_description(remote: bool, remote_files: bool) -> str:
    """The tool's description; with a remote kernel it says where code and files are (not the URL:
    an internal host name is no business of the model's provider)."""
    if not remote:
        return DESCRIPTION
    files = ("the file tools act on that machine's files too" if remote_files else
             "the file tools (read_file, write_file, list_files, edit_file) act on the user's "
             "machine, not that one: a file one of them writes is not there")
    return f"{DESCRIPTION} The kernel runs on a remote Jupyter server: {files}."


def python_tool(agent: PythonHost) -> Tool:
    """The ``python`` tool bound to ``agent`` (its kernel, its ``send_images`` setting)."""

    async def run_python(call: ToolCall) -> ToolResult:
        emit = live_emitter.get()
        on_stream = (lambda name, text: emit(ToolOutput(call, name, text))) if emit else None
        kernel = agent.kernel
        kernel.timeout = agent.tool_timeout or None  # read per call: %config applies at once; 0: no limit
        code = str(call.arguments["code"])
        try:
            execution = await kernel.execute_async(code, on_stream=on_stream)
        except KernelError as exc:  # e.g. a remote server that went away: no URL for the model
            raise KernelError(for_the_model(kernel, str(exc))) from None
        # Where it ran, recorded with it: a transcript shows whether the code was sandboxed.
        meta: dict[str, Any] = {"status": execution.status, "sandbox": confinement(kernel)}
        if agent.send_images:
            meta["images"] = _images(execution.outputs)
        result = ToolResult(
            call_id=call.id, name=call.name, output=execution.text or NO_OUTPUT,
            error=execution.status != "ok", outputs=list(execution.outputs),
            execution_count=execution.execution_count, meta=meta)
        note, _ = _note_and_fix(agent, code, execution.outputs, execution.execution_count)
        # What ipyagent asks the kernel after a failed call shares one deadline: a value's
        # own __repr__ (the sandboxed code's) could otherwise hold each question to the limit.
        deadline = time.monotonic() + min(AFTER_CALL_SECONDS, agent.tool_timeout or AFTER_CALL_SECONDS)
        if not note and execution.status == "error":
            note = await _shadow_note(kernel, code, execution.outputs, deadline)
        if execution.status == "error" and _raised(execution.outputs):
            # Which part of a long line failed: IPython's traceback shows the whole line
            # (Python's own carets are not in it), and a small model writes one-liners.
            # Its own second at least: the code may have replaced traceback.extract_tb.
            span = await kernel.error_span_async(timeout=max(1.0, deadline - time.monotonic()))
            place = failing_part(code, span)
            note = "; ".join(filter(None, [note.rstrip("."), place])) if place else note
            values = (await values_on_line(kernel, code, span[0], deadline)
                      if span and not _transformed(re.split(r"\r\n|\r|\n", code)) else "")
            if values:  # the sandboxed code's values: with its output, not in ipyagent's note
                result.output = f"{result.output.rstrip()}\n{values}"
                result.meta[VALUES] = values
        if note:
            result.meta["note"] = note
            if result.error:
                result.meta[ERROR_NOTE] = note  # said again if the same call is written again
        await settle_changes(agent, result)  # the staged workspace: what reaches your folder
        silent = (not execution.text and not execution.outputs and not result.error
                  and not result.meta.get("changes"))
        name = last_assigned(code) if silent else None
        if name:
            # What the last line set, as the kernel shows it (Jupyter would show the value
            # of a last expression; a small model often ends on an assignment and then
            # answers a number it never saw).
            shown = await kernel.short_repr_async(name)
            if shown is not None:
                result.output = f"{NO_OUTPUT[:-1]}; {name} = {shown})"
                result.meta[SHOWN] = name
            else:
                result.meta["note"] = (f"the code printed nothing: to see the value it "
                                       f"computed, print it, as in print({name}).")
        return result

    return Tool(
        name="python", description=DESCRIPTION,
        parameters={"type": "object", "properties": {"code": {
            "type": "string", "description": "Python source to execute."}},
            "required": ["code"], "additionalProperties": False},
        handler=run_python)


# ipyagent's note for an error the model can act on: the error's name, the pattern that reads
# the one name in its message (nothing else of the message reaches the note), the note.
# Why: measured at 1.5B (issue 33), after "No module named 'sympy'" the model answered from
# memory (the error alone does not say the standard library can do the job); shown a file's
# preview it used the file's name as a variable (``users`` for users.json), twice.
_ERROR_NOTES = (
    ("ModuleNotFoundError", re.compile(r"^No module named '([\w.]{1,100})'"),
     "{name} is not installed where your code runs: do it with the standard library or a "
     "module that is installed, and run the call again.", "The module"),
    ("NameError", re.compile(r"^name '([A-Za-z_]\w{0,99})' is not defined"),
     "nothing your code ran so far defined {name}: define it first (a file the task names "
     "is not loaded until your code reads it).", ""),
    # Seen at 0.5B: ``1000 * (1 + 0.05)^10`` three times, then a made-up amount.
    ("TypeError", re.compile(r"^unsupported operand type\(s\) for \^(=)?: "),
     "in Python ^ is a bitwise XOR, not a power: write a power with **{example}, and run the "
     "call again.", ""),
    # Seen at 1.5B: ``timesheet['end'] - timesheet['start']`` of 'HH:MM' text, three times.
    ("TypeError", re.compile(r"^unsupported operand type\(s\) for ([-+/])=?: "
                             r"(?:'str' and '(?!NoneType')[\w.]{1,40}'|"
                             r"'(?!NoneType')[\w.]{1,40}' and 'str')$"),
     "a value there is text (str), as read from a file: convert it first, with int(x) or "
     "float(x) for a number; a time such as '17:30' with h, m = map(int, x.split(':')), or "
     "pd.to_datetime(column, format='%H:%M') for a table's column; and run the call again.", ""),
    # Seen at 1.5B: ``timesheet['start'].dt.time()`` of a column of 'HH:MM' text, twice.
    ("AttributeError", re.compile(r"^Can only use (\.dt) accessor with datetimelike values"),
     "the column holds text, not dates or times: convert it first, as in "
     "pd.to_datetime(df['start'], format='%H:%M') for times such as '09:00' (a date "
     "'2024-03-15' needs no format), and run the call again.", ""),
    # Seen at 1.5B: ``max(readings, key=…)['name']`` (max of a dict is a key), four more times.
    ("TypeError", re.compile(r"^(string) indices must be integers(?:$|, not 'str')"),
     "the value your code indexed with a name (as in x['name']) is a str, not a dict: "
     "max(d, …), min(d, …), sorted(d) and for k in d give a dict's keys, so use the key as it "
     "is (or d[key] for its value), and run the call again.", ""),
    # Seen at 1.5B: ``timedelta(seconds=7384).strftime('%H:%M:%S')``, then 7384.0 as H:MM:SS.
    ("AttributeError", re.compile(r"^'datetime\.timedelta' object has no attribute '(strftime)'"),
     "a timedelta has no strftime: split its seconds with divmod, as in h, rest = "
     "divmod(int(td.total_seconds()), 3600); m, s = divmod(rest, 60); "
     "print(f'{{h}}:{{m:02}}:{{s:02}}'), and run the call again.", ""),
    # Seen at 0.5B: ``print(mean_score:.2f)``, "invalid decimal literal", four times.
    ("SyntaxError", re.compile(r"\(\s*([A-Za-z_][\w.]*(?:\[[^\]\n]{0,40}\])?)\s*:\s*[<>^=]?[+-]?,?\.\d+[fe%]?\s*\)"),
     "a format such as :.2f goes inside an f-string's braces: write print(f\"{{value:.2f}}\"), "
     "not print(value:.2f), and run the call again.", ""),
    # Seen at 0.5B: ``…; above_20_count = len(…); return above_20_count`` as the cell.
    ("SyntaxError", re.compile(r"'(return)' outside function"),
     "a python call runs as a notebook cell, not as a function: print the value (as in "
     "print(x)) instead of returning it, and run the call again.", ""),
    # Seen at 1.5B: ``with open(…) as f: lines = f.readlines(); …; with open(…, 'w') as f: …``
    # on one line, run twice unchanged; read from the traceback's code line, not the message.
    ("SyntaxError", re.compile(r";\s*(with|for|if|while|def|class|try)\b[^\n]*:", re.M),
     "a {name} statement cannot follow ';' on one line: write the code on several lines (a "
     "line break inside the JSON string is \\n), indented, and run the call again.", ""),
)


# How code reads a file, by extension (the NameError note's example).
# With its import: the 1.5B copied ``users = json.load(…)`` as it was and met "name 'json'
# is not defined".
_READ_AS = {".csv": "import pandas as pd; {v} = pd.read_csv({f!r})",
            ".tsv": "import pandas as pd; {v} = pd.read_csv({f!r}, sep='\\t')",
            ".json": "import json; {v} = json.load(open({f!r}))",
            ".parquet": "import pandas as pd; {v} = pd.read_parquet({f!r})",
            ".xlsx": "import pandas as pd; {v} = pd.read_excel({f!r})"}
# Without pandas where the code runs (a fresh ``pip install ipyagent`` has none): the
# standard library's reading, so the note's example does not fail in turn.
_READ_PLAIN = {".csv": "import csv; {v} = list(csv.DictReader(open({f!r})))",
               ".tsv": "import csv; {v} = list(csv.DictReader(open({f!r}), delimiter='\\t'))"}


def _read_as(extension: str) -> str:
    """How the note's example reads a file of ``extension`` (pandas only where installed:
    the sibling runs this Python's environment)."""
    how = _READ_AS.get(extension, "{v} = open({f!r}).read()")
    if extension in _READ_PLAIN and importlib.util.find_spec("pandas") is None:
        return _READ_PLAIN[extension]
    return how


_READ_INTO = {".csv": "df", ".tsv": "df", ".parquet": "df", ".xlsx": "df", ".json": "data"}
# A module used without its import (the usual names), and the import it needs.
_IMPORTS = {"json": "import json", "pd": "import pandas as pd", "np": "import numpy as np",
            "math": "import math", "re": "import re", "os": "import os", "csv": "import csv",
            "datetime": "import datetime", "statistics": "import statistics",
            "plt": "import matplotlib.pyplot as plt", "time": "import time",
            "random": "import random", "sys": "import sys", "pathlib": "import pathlib"}
# A tool's name called as a Python function (seen at 0.5B: ``print(len(read_file('orders.csv')))``,
# then the same call twice more), and what does its work in Python.
_TOOLS_IN_PYTHON = {
    "read_file": "in Python, read a file with open(path).read(), and run the call again.",
    "write_file": "in Python, write a file with open(path, 'w').write(text), and run the call again.",
    "edit_file": "in Python, read the file with open(path).read(), change the text, write it back "
                 "with open(path, 'w').write(text), and run the call again.",
    "list_files": "in Python, list a folder with import os; print(os.listdir('.')), and run the "
                  "call again.",
    "final_answer": "print the value in your code, run the call again, and give your answer "
                    "after its result.",
}
_PLAIN_FILE = re.compile(r"^[A-Za-z_]\w{0,99}\.[A-Za-z0-9]{1,10}\Z")


def error_note(outputs: list[dict[str, Any]], files: Sequence[str] = ()) -> str:
    """ipyagent's note for the error in ``outputs`` (``_ERROR_NOTES``), or "". ``files``:
    the names in the workspace folder, for a NameError whose name is one's stem (at 0.5B,
    ``StringIO(scores.csv)`` failed three times on the note alone)."""
    for out in outputs:
        found = _missing_name(out, files)
        if found and found[0] in _IMPORTS:
            return (f"{found[0]!r} is a module your code did not import: start the code "
                    f"with {_IMPORTS[found[0]]}, and run the call again.")
        if found and found[0] in _TOOLS_IN_PYTHON:
            return (f"{found[0]} is one of your tools, not a Python function: "
                    f"{_TOOLS_IN_PYTHON[found[0]]}")
        if found and found[1]:
            missing, named = found[0], found[1]
            extension = "." + named.rsplit(".", 1)[1].lower()
            how = _read_as(extension)
            if found[2]:
                # ``app.log.split(…)``: the file's name written as code. Read into a name of
                # its own (seen at 0.5B: the stem's name then met "str has no attribute log").
                name = _READ_INTO.get(extension, "text")
                return (f"{named} is the name of a file in the workspace, not a name in "
                        f"Python: read the file in your code first, for example "
                        f"{how.format(v=name, f=named)}, use {name} where your code wrote "
                        f"{named}, and run the call again.")
            # "Keep the rest": at 1.5B the note's example alone became the next call
            # (``users = json.load(…); print(len(users))``), and the filter was lost.
            return (f"nothing your code ran so far defined {missing!r}; the workspace "
                    f"has a file {named}: start your code with "
                    f"{how.format(v=missing, f=named)}, keep the rest of your code "
                    "as it was, and run the call again.")
    for out in outputs:
        if out.get("output_type") != "error":
            continue
        for ename, pattern, note, unnamed in _ERROR_NOTES:
            if out.get("ename") == ename:
                code_line = ename == "SyntaxError"  # what it says is in the code it shows
                text = (_traceback_text(out)
                        if code_line else str(out.get("evalue", "")))
                matched = pattern.search(text) if code_line else pattern.match(text)
                if matched or unnamed:
                    return note.format(name=repr(matched.group(1)) if matched else unnamed,
                                       example=_power_example(out) if ename == "TypeError" else "")
    return ""


class Workspace(Protocol):
    """Where the code's files are: what the notes read (a local workspace only)."""

    @property
    def workspace(self) -> str: ...

    @property
    def workspace_path(self) -> Path: ...


def note_fix(agent: Workspace, code: str, result: ToolResult) -> tuple[str, str] | None:
    """``(the code as ipyagent's note on its failed ``result`` says to change it, what
    changed)``, or None: read again from the code and the result's outputs each time it is
    asked (never kept in the result, where a transcript someone sent could set it)."""
    if not result.error:
        return None
    return _note_and_fix(agent, code, list(outputs_of(result)), result.execution_count)[1]


def _note_and_fix(agent: Workspace, code: str, outputs: list[dict[str, Any]],
                  count: int | None) -> tuple[str, tuple[str, str] | None]:
    """ipyagent's note on a call's outputs, and, where the note says a change that is the
    code's own text changed mechanically, ``(the code so changed, what changed)``: the
    statements on a line set apart, a missing import of a usual module, a header skipped on
    the failing line. Applied only if the model writes the same failing call again."""
    joined = joined_note(code, outputs)
    if joined:
        found = split_joined(code)
        return joined, (found[1], f"the statements on line {found[0]} set apart") if found else None
    files = _names_here(agent, outputs)
    note = error_note(outputs, files)
    if note:
        return note, import_fix(code, outputs, files)
    folder = _folder(agent)
    note = separator_note(code, outputs, folder)
    if note:
        return note, None
    failed_at = _failed_at(outputs, count)
    note = header_note(code, outputs, folder, failed_at)
    if note:
        return note, header_fix(code, failed_at)
    note = none_note(code, outputs)
    if note:
        return note, none_fix(code, outputs)
    return clock_note(code, outputs), None


def import_fix(code: str, outputs: list[dict[str, Any]],
               files: Sequence[str] = ()) -> tuple[str, str] | None:
    """``(code with a first line that defines the missing name, what changed)``, as
    ``error_note`` says it: a usual module's import (``_IMPORTS``), or the read of the
    workspace file whose stem the name is (``users`` for users.json), where the code does
    not write the file's name as code. Only those: the name comes from the sandbox's error."""
    for out in outputs:
        found = _missing_name(out, files)
        if not found:
            continue
        missing, named, as_code = found
        line = _IMPORTS.get(missing)
        if line is None and named and not as_code:
            line = _read_as("." + named.rsplit(".", 1)[1].lower()).format(v=missing, f=named)
        if line is not None:
            return f"{line}\n{code}", f"{line} added as the first line"
    return None


def _missing_name(out: dict[str, Any], files: Sequence[str]) -> tuple[str, str, bool] | None:
    """For a NameError output: ``(the name, the workspace file whose stem it is or "",
    whether the traceback writes that file's name as code)``; None for another output."""
    found = (_ERROR_NOTES[1][1].match(str(out.get("evalue", "")))
             if out.get("ename") == "NameError" else None)
    if not found:
        return None
    named = next((f for f in files if _PLAIN_FILE.match(f)
                  and f.rsplit(".", 1)[0] == found.group(1)), "")
    as_code = bool(named) and bool(re.search(
        rf"(?<![\w'\"./]){re.escape(named)}(?![\w'\"])", _traceback_text(out)))
    return found.group(1), named, as_code


def joined_note(code: str, outputs: list[dict[str, Any]], limit: int = 600) -> str:
    """ipyagent's note when a SyntaxError came only from two statements on one line with no
    line break between them: the code with the breaks, when it is short (``split_joined``)."""
    if not any(o.get("ename") == "SyntaxError" for o in outputs):
        return ""
    found = None if _transformed(re.split(r"\r\n|\r|\n", code)) else split_joined(code)
    if found is None:
        return ""
    number, fixed = found
    # As the call's JSON string: a note is one line, and \n is what the model writes there.
    example = (f", as in the code {json.dumps(fixed, ensure_ascii=False)}"
               if len(fixed) <= limit else "")
    return (f"line {number} holds two statements with no line break between them, and Python "
            "needs each on a line of its own: run the code again with a line break (\\n in the "
            f"JSON of your call) before each statement{example}.")


_CLOCK_ERROR = re.compile(r"^unsupported operand type\(s\) for -=?: 'datetime\.(time|datetime|date)' "
                          r"and 'datetime\.(time|datetime|date)'$")


def clock_note(code: str, outputs: list[dict[str, Any]]) -> str:
    """ipyagent's note when a time of day (``datetime.time``) was subtracted, or taken from a
    date, with the subtraction in minutes written in the code's own names (those of the
    subtraction on the line the traceback points at), or "" (seen at 1.5B: ``end_time -
    start_time`` of two ``datetime.time`` twice, then told "or subtract datetime.datetime
    values", a datetime minus a time)."""
    error, found = next(((o, m) for o in outputs if o.get("ename") == "TypeError"
                         and (m := _CLOCK_ERROR.match(str(o.get("evalue", ""))))), ({}, None))
    if found is None or "time" not in found.groups():
        return ""
    if "date" in found.groups():  # a date has no hour: it needs a time of day first
        return ("a date and a time of day (datetime.time) cannot be subtracted: make both "
                "datetimes first, as in datetime.datetime.combine(day, t), and run the call "
                "again.")
    pointed = [int(m.group(1)) for m in _ARROW.finditer(_traceback_text(error))]
    pair = subtracted(code, pointed)
    a, b = pair or ("end", "start")
    which = "" if pair else " for two times end and start"
    return ("a time of day (datetime.time) cannot be subtracted, nor be taken from a datetime: "
            f"count both in minutes and subtract those, as in print(({a}.hour * 60 + "
            f"{a}.minute) - ({b}.hour * 60 + {b}.minute)){which}, and run the call again.")


_NONE_ERROR = re.compile(r"'NoneType'")  # has no len(), is not subscriptable, has no attribute …


def _none_error(outputs: list[dict[str, Any]]) -> str | None:
    """The message of an error about a None used as a value, or None."""
    return next((str(o.get("evalue", "")) for o in outputs
                 if o.get("ename") in ("TypeError", "AttributeError")
                 and _NONE_ERROR.search(str(o.get("evalue", "")))), None)


def none_note(code: str, outputs: list[dict[str, Any]]) -> str:
    """ipyagent's note when a value is None because the code set its name to what a method
    that works in place returned (``rows = df[…].to_csv('fr.csv')``, ``names = names.sort()``,
    ``inplace=True``), or "" (seen at 1.5B: ``len(fr_customers)`` after such a ``to_csv``,
    "object of type 'NoneType' has no len()", and the same call four more times)."""
    error = _none_error(outputs)
    if error is None:
        return ""
    found = set_from_none(code, error[:300])
    if not found:
        return ""
    name, method = found[-1]
    does = "writes" if method.startswith("to_") or method == "savefig" else "works in place"
    return (f"{name} is None: your code set it to what .{method}(…) returned, and "
            f"{method}(…) {does} and returns None. Keep the value in {name} first, call "
            f".{method}(…) on a line of its own (without assigning what it returns), and run "
            "the call again.")


def none_fix(code: str, outputs: list[dict[str, Any]]) -> tuple[str, str] | None:
    """``(code with the name kept first and the method called on a line of its own, what
    changed)``, as ``none_note`` says it: ``fr = df[…].to_csv(p)`` becomes ``fr = df[…]`` and
    ``fr.to_csv(p)``; ``names = names.sort()`` becomes ``names.sort()``. Only a statement on
    one line of its own."""
    error = _none_error(outputs)
    found = set_from_none(code, error[:300]) if error is not None else []
    tree = parsed(code) if found else None
    if tree is None:
        return None
    name, method = found[-1]
    lines = re.split(r"(\r\n|\r|\n)", code)  # the line ends kept, at the odd places
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name
                and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == method and node.lineno == node.end_lineno):
            continue
        line = lines[2 * (node.lineno - 1)].encode()  # ast's offsets count UTF-8 bytes
        if line[:node.col_offset].strip() or line[node.end_col_offset or 0:].strip():
            return None  # another statement shares its line
        receiver = line[node.value.func.value.col_offset:node.value.func.value.end_col_offset or 0]
        rest = line[node.value.func.value.end_col_offset or 0:node.end_col_offset or 0]
        indent, own = line[:node.col_offset], name.encode()
        new = (indent + own + rest if receiver == own
               else indent + own + b" = " + receiver + b"\n" + indent + own + rest)
        lines[2 * (node.lineno - 1)] = new.decode(errors="replace")
        return ("".join(lines), f"line {node.lineno}: {name} keeps the value, and "
                                f".{method}(…) is called on a line of its own")
    return None


_NOT_CALLABLE = re.compile(r"^'([A-Za-z_]\w{0,39})' object is not callable")


AFTER_CALL_SECONDS = 5.0  # for ipyagent's own questions to the kernel after a failed call
# Types the note names (the error message's word); another is "a value" (the message is the
# sandboxed code's: it can raise any TypeError it likes).
_KINDS = frozenset({"int", "float", "str", "list", "dict", "tuple", "set", "bool", "NoneType",
                    "bytes", "complex", "ndarray", "Series", "DataFrame", "float64", "int64"})


async def _shadow_note(kernel: Kernel, code: str, outputs: list[dict[str, Any]],
                       deadline: float) -> str:
    """ipyagent's note when a name of Python's own (``sum``) was set to a value and then
    called: "'int' object is not callable". "" otherwise.

    Why: seen at 1.5B, ``sum = sum(map(int, …))`` inside a loop failed on its second line
    with "'int' object is not callable", and the same call was written four more times. The
    value stays in the kernel, so even a right call fails until it is deleted. Which name:
    one the code both assigns and calls, or else one it calls that the kernel holds as
    something else than Python's own (the kernel's short repr decides; nothing of it is
    quoted). The type named is the error message's."""
    error = next((o for o in outputs if o.get("ename") == "TypeError"), None)
    found = _NOT_CALLABLE.match(str(error.get("evalue", ""))) if error else None
    if found is None:
        return ""
    called, assigned = shadowed(code)
    name = assigned[0] if assigned else None
    for candidate in [] if name else called[:8]:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        shown = await kernel.short_repr_async(candidate, timeout=left)
        # "<…>": a function, a class, a module — the model's own def filter(…) or numpy's
        # sum after a star import is no value in the way, and not to be deleted.
        if shown is not None and not shown.startswith("<"):
            name = candidate
            break
    if name is None:
        return ""
    kind = found.group(1)
    what = f"{'an' if kind[0] in 'aeiouAEIOU' else 'a'} {kind}" if kind in _KINDS else "a value"
    that = kind if kind in _KINDS else "value"
    return (f"{name} is Python's own {name}(), and a value your code set ({what}) now "
            f"has its name in the kernel, so calling {name}(…) calls that {that}: start your "
            f"code with del {name}, keep your value in a name of its own (as in "
            f"{_OWN_NAME.get(name, name + '_value')}), and run the call again.")


_OWN_NAME = {"sum": "total", "max": "largest", "min": "smallest", "len": "count",
             "list": "items", "str": "text", "dict": "table", "input": "answer", "round": "rounded"}

ERROR_NOTE = "error_note"  # ToolResult.meta: ipyagent's note on a failed call's error
_NOT_RAISED = ("SyntaxError", "IndentationError", "TabError")  # found compiling: no frame ran
PART_CHARS = 120  # of the failing part quoted in the note


def _raised(outputs: list[dict[str, Any]]) -> bool:
    return any(o.get("output_type") == "error" and o.get("ename") not in _NOT_RAISED
               for o in outputs)


def failing_part(code: str, span: tuple[int, int, int, int] | None) -> str:
    """ipyagent's note naming the part of a line that raised (``span``: the kernel's
    ``error_span_async``), quoted from ``code`` as the model wrote it; "" when the span is
    the whole line, does not fit the code, or is not an expression in it."""
    if span is None:
        return ""
    line_no, end_line, start, end = span
    lines = re.split(r"\r\n|\r|\n", code)  # as Python counts lines
    if line_no != end_line or not 1 <= line_no <= len(lines) or _transformed(lines):
        return ""
    raw = lines[line_no - 1].encode("utf-8", "surrogatepass")
    if not 0 <= start < end <= len(raw):
        return ""
    part = raw[start:end].decode("utf-8", "replace").strip()
    whole = raw.decode("utf-8", "replace").strip()
    try:
        ast.parse(part, mode="eval")  # a span that is not an expression there: not the one
        comment = any(t.type == tokenize.COMMENT
                      for t in tokenize.generate_tokens(io.StringIO(part).readline))
    except (SyntaxError, ValueError, RecursionError, MemoryError, tokenize.TokenError):
        return ""
    if comment:  # only the expression is quoted in ipyagent's note, never words beside it
        return ""
    if not part or part == whole or len(whole) < 40 or part.isidentifier():
        return ""  # the traceback's line (or a NameError's message) already says it
    if len(part) > PART_CHARS:
        part = part[:PART_CHARS // 2] + " … " + part[-PART_CHARS // 2:]
    where = f" of line {line_no}" if len(lines) > 1 else ""
    return f"the error was raised by this part{where}: {' '.join(part.split())}"


def _transformed(lines: list[str]) -> bool:
    """IPython changes such a cell before it compiles it (a common indent taken off, prompts,
    magics, ``!`` commands, ``?`` help), so the kernel's columns do not fit the code sent."""
    first = next((line for line in lines if line.strip()), "")
    return first[:1].isspace() or any(
        line.lstrip().startswith((">>>", "...", "%", "!")) or line.rstrip().endswith("?")
        for line in lines)


_ARROW = re.compile(r"^-+> ?(\d{1,6}) (.{1,200})$", re.M)  # IPython's "----> 3 code"
_ARITHMETIC = re.compile(r"^[\w .+\-*/%()=,\[\]^]+$")


_CELL_FRAME = re.compile(r"^Cell In ?\[(\d{1,9})\], line (\d{1,6})", re.M)  # "Cell In[1], line 10"


def _failed_at(outputs: list[dict[str, Any]], count: int | None) -> list[int]:
    """The code's lines an error's traceback points at, innermost first: this cell's frames
    only (``count``: its execution count). A library's line numbers are not the code's, nor
    a function's from an earlier call (found by a review: a function defined in the first
    call put its line 2 among the second call's)."""
    return [int(m.group(2)) for out in outputs if out.get("output_type") == "error"
            for m in _CELL_FRAME.finditer(_traceback_text(out))
            if count is not None and int(m.group(1)) == count][::-1]


def _traceback_text(out: dict[str, Any]) -> str:
    """An error output's traceback as plain text."""
    return strip_ansi("\n".join(map(str, out.get("traceback") or [])))


def _power_example(out: dict[str, Any]) -> str:
    """``, as in: 1000 * (1 + 0.05)**10``: the failing line with ** for ^ (the 0.5B copied
    the note's own example, ``** (1.05 ** 10)``, as its code)."""
    line = _ARROW.search(_traceback_text(out))
    code = line.group(2).strip() if line else ""
    # Only arithmetic is quoted back in ipyagent's note: no strings, no comments.
    if "^" not in code or len(code) > 120 or not _ARITHMETIC.match(code):
        return " (as in 2 ** 10)"
    return ", as in: " + code.replace("^", "**")


def _folder(agent: Workspace) -> Path | None:
    """The local workspace folder, or None (a remote one is not ours to read)."""
    return None if agent.workspace == "remote" else agent.workspace_path


def _names_here(agent: Workspace, outputs: list[dict[str, Any]], limit: int = 500) -> list[str]:
    """The names in the workspace folder (not below it), only after a NameError, and only
    for a local workspace; [] when it cannot be listed."""
    if agent.workspace == "remote" or not any(o.get("ename") == "NameError" for o in outputs):
        return []
    try:
        with os.scandir(agent.workspace_path) as entries:
            return [e.name for _, e in zip(range(limit), entries) if e.is_file(follow_symlinks=False)]
    except OSError:
        return []


def _images(outputs: list[dict[str, Any]], limit: int = 4) -> list[dict[str, str]]:
    """Base64 PNG/JPEG images from nbformat outputs, for models that can see."""
    found = []
    for out in outputs:
        for mime in ("image/png", "image/jpeg"):
            data = out.get("data", {}).get(mime)
            if data:
                found.append({"mime": mime, "data": "".join(data) if isinstance(data, list) else data})
    return found[:limit]
