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

__all__ = ["Overflow", "context_overflow", "overflow_hint"]

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


@dataclass
class Overflow:
    """The server's refusal of an over-long prompt, and its own count when it gave one."""

    prompt_tokens: int | None = None


def context_overflow(exc: BaseException) -> Overflow | None:
    """An ``Overflow`` when ``exc`` says the prompt is over the model's context window."""
    if not isinstance(exc, ModelError):
        return None
    if isinstance(exc, ModelHTTPError) and exc.status_code not in (400, 413, 422, 500):
        return None  # auth, rate limits and the like never mean "too long"
    body = getattr(exc, "body", None)
    text = str(exc) + " " + (body if isinstance(body, str) else json.dumps(body, default=str))
    if not _SAYS_OVERFLOW.search(text):
        return None
    for pattern in _PROMPT_TOKENS:
        found = pattern.search(text)
        if found:
            return Overflow(int(found.group(1)))
    return Overflow()


def overflow_hint(context_window: int) -> str:
    """What to change after a refusal the step could not recover from."""
    if not context_window:
        return ("; set Agent.context_window to the model's window (e.g. %config "
                "Agent.context_window = 8192) so the context is compacted before it gets too long")
    return (f"; even after compacting: Agent.context_window={context_window} may be larger "
            "than the server's own window (llama.cpp -c, Ollama num_ctx, vLLM --max-model-len)")
