"""How a family writes a tool call as text: the wrapper around the JSON and its keys.

One ``CallSyntax`` serves three readers: the text-mode prompt shows the model its example
call in it (``write``), ``written_calls`` looks for its shape first (``shape``), and the
grammar (``grammar``) allows exactly it. ipyagent's parser still reads every other shape:
a syntax says what comes first, never what is the only thing understood.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["CallSyntax", "HERMES", "LLAMA3_JSON", "MISTRAL", "PHI4", "SYNTAXES"]


@dataclass(frozen=True)
class CallSyntax:
    """A call written as ``open + JSON + close``; ``as_list``: the JSON is a list of calls."""

    name: str
    open: str
    close: str
    shape: str  # the ``written_calls`` shape that reads it ("tags", "bare", "mistral", "phi")
    arguments_key: str = "arguments"
    as_list: bool = False
    # What free text may never contain under a call grammar (default: the opening tag).
    # Hermes reserves "<tool": a reply can then neither write a malformed call nor imitate
    # a <tool_response> (Qwen2.5-Coder-0.5B writes one after its code, recorded) nor its
    # <toolResponse> variant (with "<tool_" reserved, both the 0.5B recording and a 1.5B
    # answer wrote "<toolResponse>…</toolResponse>" and then the number).
    reserved: tuple[str, ...] = ()

    @property
    def reserved_text(self) -> tuple[str, ...]:
        return self.reserved or ((self.open.strip(),) if self.open.strip() else ())

    def call_json(self, name: str, arguments: dict[str, Any] | str) -> str:
        args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        return f'{{"name": {json.dumps(name, ensure_ascii=False)}, "{self.arguments_key}": {args}}}'

    def write(self, name: str, arguments: dict[str, Any] | str) -> str:
        """One call, as a model of this family writes it."""
        body = self.call_json(name, arguments)
        return f"{self.open}{'[' + body + ']' if self.as_list else body}{self.close}"


# Qwen2.5/Qwen3 and Hermes: the Qwen2.5 chat template's own instruction ("return a json
# object with function name and arguments within <tool_call></tool_call> XML tags").
HERMES = CallSyntax("hermes", "<tool_call>\n", "\n</tool_call>", "tags", reserved=("<tool",))
# Llama 3.1/3.2 JSON tool calling (llama.com, "Llama 3.2 ... prompt format", JSON based tool
# calling): a bare object, the arguments under "parameters".
LLAMA3_JSON = CallSyntax("llama3_json", "", "", "bare", arguments_key="parameters")
# Mistral (mistral-common tokenizer v3+): ``[TOOL_CALLS]`` then a JSON list of calls.
MISTRAL = CallSyntax("mistral", "[TOOL_CALLS]", "", "mistral", as_list=True)
# Phi-4-mini (its model card): ``<|tool_call|>`` a JSON list ``<|/tool_call|>``.
PHI4 = CallSyntax("phi4", "<|tool_call|>", "<|/tool_call|>", "phi", as_list=True)

SYNTAXES = {s.name: s for s in (HERMES, LLAMA3_JSON, MISTRAL, PHI4)}
