"""Model clients: one module per wire protocol, all speaking ``items`` in and events out,
and what reads the model's output.

``base`` is the interface (``Model``, ``ModelRequest``, the stream's events);
``openai_chat``, ``openai_responses`` and ``anthropic`` the wire protocols, over ``http``
(``sse`` framing, ``retry``, ``timeouts``, ``wire_cache``); ``cache`` the response cache,
``demo`` and ``recorded`` models that need no server, ``think`` and ``overflow`` reasoning
text and context-window errors; ``providers`` the presets (where a provider lives, which API
it speaks, which variable holds its key). For servers without native tool calling:
``text_tools`` rewrites a request so any chat template carries it, ``written_calls`` finds
the calls the model wrote as text (``lenient_json`` parses them), ``tool_mode`` decides
which way the tools travel, ``reply_checks`` flags final replies that deserve a word;
``profiles/`` says what works per model family and builds the grammar for constrained calls.

May import: ``context``, ``trust``, ``_util``.
"""

from .base import (
    Model,
    ModelEvent,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Turn,
    TurnComplete,
)

__all__ = [
    "Model",
    "ModelEvent",
    "ModelRequest",
    "ReasoningDelta",
    "TextDelta",
    "ToolCallDelta",
    "Turn",
    "TurnComplete",
]
