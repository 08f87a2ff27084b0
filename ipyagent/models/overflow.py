"""A request the server refused as longer than its context window.

Between requests ipyagent only estimates tokens (a tokenizer that may not be the model's,
calibrated by reported usage). When the estimate is low — a denser tokenizer, a server
that reports no usage — the server refuses the prompt. Its error is recognised here so
the step can count denser, compact, and try once more instead of ending the run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..errors import ModelError, ModelHTTPError

__all__ = ["Overflow", "context_overflow", "overflow_hint", "WINDOW_BOUNDS"]

# How servers say it (matched case-insensitively against the message and the body):
# OpenAI, Groq, vLLM, DeepSeek: "maximum context length is 8192 tokens. However, your
# messages resulted in 9013 tokens" / "context_length_exceeded"; OpenAI Responses: "exceeds
# the context window"; llama.cpp: "exceeds the available context size" /
# "exceed_context_size_error" with n_prompt_tokens; Anthropic: "prompt is too long:
# 210000 tokens > 200000 maximum"; LM Studio: "loaded with context length of only N tokens".
_SAYS_OVERFLOW = re.compile(
    r"maximum context length|context_length_exceeded|exceeds? the (?:available )?context"
    r"|context (?:window|size|length) (?:is )?exceeded|exceed_context_size|prompt is too long"
    r"|context length of only|input is too long|too many tokens in the (?:prompt|input)",
    re.IGNORECASE)
_PROMPT_TOKENS = (
    re.compile(r"resulted in (\d+) tokens", re.IGNORECASE),
    re.compile(r"\((\d+) in the messages", re.IGNORECASE),
    re.compile(r"prompt is too long: (\d+) tokens", re.IGNORECASE),
    re.compile(r'"n_prompt_tokens":\s*(\d+)'),
)
# The server's own window, where its refusal says it (OpenAI, vLLM and llama-cpp-python:
# "maximum context length is 8192 tokens"; llama.cpp: "n_ctx": 8192; Anthropic: "> 200000
# maximum"; LM Studio: "context length of only 4096 tokens"; llama-cpp-python's own
# message: "exceed context window of 8192").
_WINDOW = (
    re.compile(r"maximum context length is (\d+)", re.IGNORECASE),
    re.compile(r'"n_ctx":\s*(\d+)'),
    re.compile(r"tokens > (\d+) maximum", re.IGNORECASE),
    re.compile(r"context length of only (\d+)", re.IGNORECASE),
    re.compile(r"exceeds? context window of (\d+)", re.IGNORECASE),
)
# A window outside these bounds is not believed (a server cannot shrink the window to
# nothing, which would clear every result, nor claim one no model has).
WINDOW_BOUNDS = (1024, 10_000_000)


@dataclass
class Overflow:
    """The server's refusal of an over-long prompt, and its own count when it gave one."""

    prompt_tokens: int | None = None
    window: int | None = None  # the server's context window, when it says it (and it is plausible)


def context_overflow(exc: BaseException) -> Overflow | None:
    """An ``Overflow`` when ``exc`` says the prompt is over the model's context window."""
    if not isinstance(exc, ModelError):
        return None
    if isinstance(exc, ModelHTTPError) and exc.status_code not in (400, 413, 422, 500):
        return None  # auth, rate limits and the like never mean "too long"
    body = getattr(exc, "body", None)
    text = str(exc) + " " + (body if isinstance(body, str) else json.dumps(body, default=str))
    if not _SAYS_OVERFLOW.search(text) and not _WINDOW[-1].search(text):
        return None
    found = Overflow()
    for pattern in _PROMPT_TOKENS:
        match = pattern.search(text)
        if match:
            found.prompt_tokens = int(match.group(1))
            break
    for pattern in _WINDOW:
        match = pattern.search(text)
        if match and WINDOW_BOUNDS[0] <= int(match.group(1)) <= WINDOW_BOUNDS[1]:
            found.window = int(match.group(1))
            break
    return found


def overflow_hint(context_window: int) -> str:
    """What to change after a refusal the step could not recover from."""
    if not context_window:
        return ("; set Agent.context_window to the model's window (e.g. %config "
                "Agent.context_window = 8192) so the context is compacted before it gets too long")
    return (f"; even after compacting: Agent.context_window={context_window} may be larger "
            "than the server's own window (llama.cpp -c, Ollama num_ctx, vLLM --max-model-len)")
