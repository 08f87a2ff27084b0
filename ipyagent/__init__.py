"""ipyagent: a trustworthy LLM agent for IPython and Jupyter."""

from ._version import __version__
from .items import Message, Reasoning, Summary, ToolCall, ToolResult

__all__ = [
    "__version__",
    "Message",
    "Reasoning",
    "Summary",
    "ToolCall",
    "ToolResult",
]
