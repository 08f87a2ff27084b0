"""Model clients: one module per wire protocol, all speaking ``items`` in, events out."""

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
