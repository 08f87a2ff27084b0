"""Final replies that end a run ``done`` but deserve a word to the user.

Why: a run that ends ``done`` with an empty answer, a filtered one, or a tool call the
model *wrote as text* in a form ``written_calls`` could not recover (a tool that is not
offered, a format it does not know) looks like a silent success. The stop reason stays
``done`` — the reply is what the model sent — and a one-line notice says what happened and
what to try.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from .lenient_json import loads

__all__ = ["final_reply_notice"]

_FILTERED = {"content_filter": "the provider's content filter stopped the reply",
             "refusal": "the model refused", "safety": "the provider's safety filter stopped the reply"}
# Hermes/Qwen ``<tool_call>{…}``, Llama ``<function=name>``, Mistral ``[TOOL_CALLS]``.
_TAGGED_CALL = re.compile(r"<(?:tool_call|function_call)>\s*\{|<function=[\w.-]+>|\[TOOL_CALLS\]")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


def final_reply_notice(text: str, finish_reason: str | None, has_reasoning: bool,
                       tool_names: Iterable[str]) -> str | None:
    """A one-line notice for a final reply that looks wrong, else None."""
    if finish_reason in _FILTERED:
        return f"The run ended because {_FILTERED[finish_reason]} (finish_reason={finish_reason!r})."
    if not text.strip():
        return ("The model sent an empty reply" + (" (only reasoning)" if has_reasoning else "")
                + f" (finish_reason={finish_reason!r}); ask again or check the model's logs.")
    tools = set(tool_names)
    name = _written_tool_call(text, tools)
    if name is not None:
        if name and name not in tools:  # recovered otherwise: only an unknown name is left
            offered = ", ".join(sorted(tools)) or "none"
            return (f"The model wrote a call of a tool that does not exist ({name!r}; offered: "
                    f"{offered}), so nothing ran; ask again, naming the tool to use.")
        return (f"The model wrote a tool call{f' to {name!r}' if name else ''} as text, in a form "
                "ipyagent could not read: the server may not support tool calling for this "
                "model (llama.cpp: start it with --jinja; Ollama: a model tagged 'tools'; or "
                "set Agent.tool_mode = 'text').")
    return None


def _written_tool_call(text: str, tools: set[str]) -> str | None:
    """The tool name (or "") when ``text`` is a tool call in writing; None otherwise."""
    stripped = text.strip()
    if _TAGGED_CALL.search(stripped):
        inner = re.search(r'"name"\s*:\s*"([^"]+)"', stripped)
        return inner.group(1) if inner else ""
    fenced = _FENCE.match(stripped)
    body = fenced.group(1) if fenced else stripped
    if not body.startswith("{"):
        return None
    try:
        value: Any = loads(body)  # leniently: small models write triple quotes and the like
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters"))
    # The whole reply is one call-shaped object: a call, even of a tool that does not exist.
    if value["name"] in tools and arguments is not None or isinstance(arguments, dict):
        return str(value["name"])
    return None
