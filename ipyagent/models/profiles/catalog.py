"""The profiles: per model family, the call syntax, the stop strings and what its template does.

A profile is ``tested`` only when a test replays a recording of that family's real output
(``tests/data/families/``); the others were written from the family's documented chat
template (``source``) and say ``untested`` wherever they are shown. ``generic`` is today's
behaviour, kept for any model no profile matches.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .syntax import HERMES, LLAMA3_JSON, MISTRAL, PHI4, CallSyntax

__all__ = ["Profile", "PROFILES", "GENERIC", "profile_named"]

# What a model that imagines its tool's result writes next: text mode stops it there.
_IMAGINED_RESULT = "<tool_response>"


@dataclass(frozen=True)
class Profile:
    """How to talk tools with one family of models (see the module docstring)."""

    name: str
    family: str  # for people
    syntax: CallSyntax
    stop: tuple[str, ...] = ()  # stop strings for a text-mode request
    # Whether the family's own chat template renders a ``tools`` field: False starts a
    # conversation in text mode under ``tool_mode = "auto"`` (the tools would not reach it);
    # None: not known for the family (the template read from the server decides, if any).
    template_tools: bool | None = None
    tested: tuple[str, ...] = ()  # the recordings (tests/data/families/NAME.json) it is tested on
    source: str = ""  # the documented chat template it was written from
    why: str = ""  # how it was chosen (set by detection)

    @property
    def untested(self) -> bool:
        return not self.tested

    def chosen(self, why: str, *, template_tools: bool | None = None) -> Profile:
        """This profile, with why it was chosen and what the served template showed."""
        tools = self.template_tools if template_tools is None else template_tools
        return replace(self, why=why, template_tools=tools)

    def describe(self) -> str:
        """One line for people: name, family, tested or not, why."""
        state = "tested on " + ", ".join(self.tested) if self.tested else "untested"
        return f"{self.name} ({self.family}; {state}){': ' + self.why if self.why else ''}"

    def _repr_markdown_(self) -> str:
        return f"**model profile** `{self.name}` — {self.family}; " + (
            f"tested on real recordings of {', '.join(self.tested)}" if self.tested
            else "*untested* (written from " + self.source + ")") + (
            f"; chosen because {self.why}" if self.why else "")


GENERIC = Profile("generic", "any other model", HERMES, (_IMAGINED_RESULT,),
                  source="ipyagent's own text-mode format (the Hermes/Qwen one)")

PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("qwen2.5", "Qwen2.5 / Qwen2.5-Coder", HERMES, (_IMAGINED_RESULT,), True,
            tested=("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"),
            source="the Qwen2.5 chat template's <tool_call> instruction"),
    Profile("qwen3", "Qwen3", HERMES, (_IMAGINED_RESULT,), True,
            source="the Qwen3 chat template (Hermes <tool_call>, <think> reasoning)"),
    Profile("smollm2", "SmolLM2", HERMES, (_IMAGINED_RESULT,), None,
            tested=("smollm2-135m",),
            source="the SmolLM2-Instruct card (<tool_call> with a JSON list)"),
    # Recorded: only the base Gemma 3 270M (its GGUF has no chat template; it continues
    # the prompt), which tests detection, not this profile's calls: untested.
    Profile("gemma3", "Gemma 3", HERMES, (_IMAGINED_RESULT, "<end_of_turn>"), False,
            source="Gemma's function-calling guide: no tool tokens, the format is the prompt's"),
    Profile("llama3", "Llama 3.1 / 3.2 / 3.3", LLAMA3_JSON, ("<|eom_id|>", _IMAGINED_RESULT), True,
            source="Meta's Llama 3.2 prompt format, JSON based tool calling"),
    Profile("phi", "Phi-3.5 / Phi-4-mini", PHI4, (_IMAGINED_RESULT,), None,
            source="the Phi-4-mini-instruct card (<|tool|> specs, <|tool_call|> calls)"),
    Profile("mistral", "Mistral / Ministral", MISTRAL, (_IMAGINED_RESULT,), True,
            source="mistral-common's v3 tokenizer ([AVAILABLE_TOOLS], [TOOL_CALLS])"),
    GENERIC,
)}


def profile_named(name: str) -> Profile:
    """The profile called ``name``; a ``ValueError`` naming the known ones otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"no model profile {name!r}; known: auto, {', '.join(PROFILES)}") from None
