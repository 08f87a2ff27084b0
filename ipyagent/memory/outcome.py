"""The note a run leaves behind: its task, its answer in a sentence, what it made, what failed.

``outcome_text`` is deterministic (``Agent.memory_write = "outcome"``: no model call):
the task, the answer's first sentence, the files the file tools wrote, the names the
python calls assigned at top level, and each failed call with its error line.
``model_request`` is the one extra request ``memory_write = "model"`` makes: the same facts
and the answer, for the model to condense.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Iterable

from .._util.text import one_line
from ..context.items import Message, ToolCall, ToolResult
from ..models.base import OUTCOME_PROMPT, ModelRequest

__all__ = ["outcome_text", "model_request", "made_names"]

_WRITES = {"write_file", "edit_file"}
_ERROR_LINE = re.compile(r"^\s*(\w+(?:Error|Exception|Interrupt)\b.*)$", re.MULTILINE)


def _first_sentence(text: str, limit: int = 220) -> str:
    flat = " ".join(text.replace("`", "").split())
    match = re.search(r"(.+?[.!?])(\s|$)", flat)
    return one_line(match.group(1) if match else flat, limit)


def made_names(code: str) -> list[str]:
    """The names ``code`` binds at top level (assignments, defs, classes, imports)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in tree.body:
        targets: list[Any] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Name):
                    names.append(sub.id)
    return [n for n in dict.fromkeys(names) if not n.startswith("_")]


def _error_line(result: ToolResult) -> str:
    found = _ERROR_LINE.findall(result.output or "")
    return one_line(found[-1] if found else (result.output or "failed").strip(), 160)


def outcome_text(task: str, items: Iterable[Any], answer: str) -> str:
    """The deterministic outcome note of one run."""
    items = list(items)
    results = {i.call_id: i for i in items if isinstance(i, ToolResult)}
    files: list[str] = []
    names: list[str] = []
    failures: list[str] = []
    for call in (i for i in items if isinstance(i, ToolCall)):
        result = results.get(call.id)
        if result is None or result.meta.get("denied") or result.meta.get("skipped"):
            continue
        if result.error:
            failures.append(f"{call.name}: {_error_line(result)}")
            continue
        args = call.arguments if isinstance(call.arguments, dict) else {}
        if call.name in _WRITES and isinstance(args.get("path"), str):
            files.append(args["path"])
        elif call.name == "python" and isinstance(args.get("code"), str):
            names += made_names(args["code"])
    parts = [f"Task: {one_line(' '.join(task.split()), 200)}"]
    if answer.strip():
        parts.append(f"Answer: {_first_sentence(answer)}")
    if files:
        parts.append("Files written: " + ", ".join(dict.fromkeys(files)))
    if names:
        parts.append("Variables made: " + ", ".join(list(dict.fromkeys(names))[:12]))
    if failures:
        parts.append("Failed: " + "; ".join(failures[:3]))
    return ". ".join(p.rstrip(".") for p in parts) + "."


def model_request(task: str, items: Iterable[Any], answer: str) -> ModelRequest:
    """The one extra request of ``memory_write = "model"``: the facts and the answer."""
    facts = outcome_text(task, items, answer)
    body = (f"{facts}\n\nThe final answer was:\n{answer.strip()[:3000]}\n\n"
            "Write the note now.")
    return ModelRequest(system=OUTCOME_PROMPT, items=[Message("user", body)], tools=[])
