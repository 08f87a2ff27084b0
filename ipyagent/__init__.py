"""ipyagent: a trustworthy LLM agent for IPython and Jupyter.

``%load_ext ipyagent`` in a notebook, or ``from ipyagent import Agent`` in a script.
"""

from __future__ import annotations

from typing import Any

from . import errors
from ._version import __version__
from .agent import Agent
from .approval import Decision
from .context import Context
from .events import RunResult, Step, Usage
from .items import Message, Reasoning, Summary, ToolCall, ToolResult
from .tools import Tool, Toolbox, tool

__all__ = [
    "__version__",
    "Agent",
    "Context",
    "Decision",
    "Execution",
    "Message",
    "Reasoning",
    "RunResult",
    "SiblingKernel",
    "Step",
    "Summary",
    "Tool",
    "ToolCall",
    "ToolResult",
    "Toolbox",
    "Usage",
    "errors",
    "tool",
]


def __getattr__(name: str) -> Any:
    # The kernel module pulls in jupyter_client/zmq: import it only when asked for.
    if name in ("SiblingKernel", "Execution"):
        from . import kernel

        return getattr(kernel, name)
    raise AttributeError(f"module 'ipyagent' has no attribute {name!r}")
