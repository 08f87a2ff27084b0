"""Which profile a model gets: forced by ``Agent.model_profile``, or read from what is known.

What is known (``ServerFacts``): the configured model name, the ids ``/v1/models`` lists,
llama.cpp's ``/props`` (model path, chat template) where the server has it, the GGUF
header (``general.name``, ``general.architecture``, ``tokenizer.chat_template``) where the
file is on this machine, and, for llama-cpp-python's server, which of the families' marker
tokens its tokenizer reads as one token (``/extras/tokenize``: a model served under an
alias such as ``local`` names nothing else). All of it is text we did not write: it is only matched against
patterns here, and shown only made visible and cut to one short line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..._util.text import one_line, visible_name
from .catalog import GENERIC, PROFILES, Profile, profile_named
from .gguf import GGUFInfo

__all__ = ["ServerFacts", "choose_profile", "family_of_name", "family_of_template",
           "family_of_tokens", "LLAMA_CPP_OWNERS", "VOCAB_MARKERS"]

LLAMA_CPP_OWNERS = ("me", "llamacpp")  # how llama-cpp-python and llama-server list their model


@dataclass(frozen=True)
class ServerFacts:
    """What the server and the model file said (empty where they said nothing)."""

    model_ids: tuple[str, ...] = ()
    owners: tuple[str, ...] = ()  # /v1/models' owned_by: "me" (llama-cpp-python), "llamacpp"
    props: bool = False  # the server answered /props (llama.cpp's llama-server)
    props_model: str = ""  # /props' model_alias or model_path
    chat_template: str = ""  # the served template (from /props or the GGUF)
    template_from: str = ""  # where chat_template was read
    gguf: GGUFInfo | None = None
    gguf_path: str = ""
    special_tokens: tuple[str, ...] = ()  # of VOCAB_MARKERS, those the tokenizer reads as one token

    @property
    def llama_cpp(self) -> bool:
        """The server looks like llama.cpp's (llama-server or llama-cpp-python): worth a
        grammar probe."""
        return self.props or any(o in LLAMA_CPP_OWNERS for o in self.owners)

    @property
    def calls_come_as_text(self) -> str:
        """Why a native request's calls would come back as text anyway, or "".

        llama-cpp-python's server (``owned_by: "me"``, no ``/props``) renders the tools with
        the model's template but parses calls from the reply only for a forced
        ``tool_choice``: under ``"auto"`` every call it returns is text in the content.
        """
        if "me" in self.owners and not self.props:
            return ("llama-cpp-python's server returns a call in the tool_calls field only "
                    "for a forced tool_choice; under 'auto' its calls come back as text")
        return ""


# Name patterns, most specific first (SmolLM2 is a "llama" architecture; Qwen3 before Qwen2).
_NAMES = (
    ("smollm2", re.compile(r"smol[\s_-]*lm", re.I)),
    ("qwen3", re.compile(r"qwen[\s_-]*3", re.I)),
    ("qwen2.5", re.compile(r"qwen[\s_-]*2", re.I)),
    ("gemma3", re.compile(r"gemma", re.I)),
    ("phi", re.compile(r"\bphi[\s_-]*[34]", re.I)),
    ("mistral", re.compile(r"mistral|ministral|mixtral|devstral", re.I)),
    ("llama3", re.compile(r"llama[\s_-]*3", re.I)),
)
_ARCHITECTURES = {"qwen2": "qwen2.5", "qwen3": "qwen3", "qwen3moe": "qwen3", "gemma3": "gemma3",
                  "gemma2": "gemma3", "gemma": "gemma3", "phi3": "phi"}
# Markers a family's chat template carries (checked in this order).
_TEMPLATES = (
    ("qwen3", ("<tool_call>", "<think>")),
    ("qwen2.5", ("<tool_call>", "<|im_start|>")),
    ("llama3", ("<|start_header_id|>",)),
    ("mistral", ("[TOOL_CALLS]",)),
    ("mistral", ("[INST]",)),
    ("gemma3", ("<start_of_turn>",)),
    ("phi", ("<|tool_call|>",)),
    ("phi", ("<|assistant|>", "<|end|>")),
)


# Marker tokens of each family's vocabulary (checked in this order; all must be one token).
# Qwen3 and Qwen2.5 share ChatML and <tool_call>; Qwen3 adds <think>. SmolLM2 has ChatML
# without <tool_call>: no profile is chosen from its vocabulary alone.
_VOCABULARY = (
    ("qwen3", ("<|im_start|>", "<tool_call>", "<think>")),
    ("qwen2.5", ("<|im_start|>", "<tool_call>")),
    ("llama3", ("<|start_header_id|>", "<|eom_id|>")),
    ("mistral", ("[TOOL_CALLS]",)),
    ("gemma3", ("<start_of_turn>",)),
    ("phi", ("<|tool_call|>",)),
)
VOCAB_MARKERS = tuple(dict.fromkeys(m for _, marks in _VOCABULARY for m in marks))


def family_of_tokens(tokens: tuple[str, ...]) -> str | None:
    """The profile whose marker tokens are all in ``tokens``, or None."""
    return next((profile for profile, marks in _VOCABULARY if all(m in tokens for m in marks)),
                None)


def family_of_name(name: str) -> str | None:
    """The profile a model name points to, or None."""
    return next((profile for profile, pattern in _NAMES if pattern.search(name)), None)


def family_of_template(template: str) -> str | None:
    """The profile a chat template's markers point to, or None."""
    return next((profile for profile, marks in _TEMPLATES if all(m in template for m in marks)),
                None)


def _shown(text: str) -> str:
    return visible_name(one_line(text, 60))


def choose_profile(setting: str, model: str, facts: ServerFacts | None = None) -> Profile:
    """The profile for ``model`` under ``Agent.model_profile = setting``, with why."""
    facts = facts or ServerFacts()
    template = facts.chat_template or (facts.gguf.chat_template if facts.gguf else "")
    where = facts.template_from or ("the GGUF file" if facts.gguf and facts.gguf.chat_template else "")
    template_tools = ("tools" in template) if template else None
    if setting != "auto":
        return profile_named(setting).chosen("set by Agent.model_profile",
                                             template_tools=template_tools)
    clues: list[tuple[str, str]] = []  # (what was read, its text)
    if facts.gguf is not None:
        clues.append(("the GGUF's general.name", facts.gguf.name))
    if facts.props_model:
        clues.append(("the server's /props", facts.props_model))
    clues += [("the server's model id", i) for i in facts.model_ids]
    clues.append(("the model name", model))
    for what, text in clues:
        found = family_of_name(text)
        if found:
            return _chosen(found, f"{what} {_shown(text)!r}", template, where, template_tools)
    if facts.gguf is not None and facts.gguf.architecture in _ARCHITECTURES:
        found = _ARCHITECTURES[facts.gguf.architecture]
        return _chosen(found, f"the GGUF's architecture {_shown(facts.gguf.architecture)!r}",
                       template, where, template_tools)
    found = family_of_template(template) if template else None
    if found:
        return _chosen(found, f"the chat template in {where}", template, where, template_tools)
    found = family_of_tokens(facts.special_tokens)
    if found:
        marks = ", ".join(next(m for p, m in _VOCABULARY if p == found))
        return _chosen(found, f"the server's tokenizer (one token each: {marks})", template, where,
                       template_tools)
    return GENERIC.chosen("no family recognised", template_tools=template_tools)


def _chosen(name: str, why: str, template: str, where: str, template_tools: bool | None) -> Profile:
    if template and not template_tools:
        why += f"; the chat template in {where} has no tool calling"
    return PROFILES[name].chosen(why, template_tools=template_tools)
