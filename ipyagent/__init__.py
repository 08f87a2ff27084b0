"""ipyagent: a trustworthy LLM agent for IPython and Jupyter.

``%load_ext ipyagent`` in a notebook, or ``from ipyagent import Agent`` in a script.
"""

from __future__ import annotations

import logging
from typing import Any

from . import errors

# Imported for what it does: it fills the plugs through which Agent.save/load/replay and
# Context.to_notebook reach the transcripts layer above them (engine/plugs.py).
from . import transcripts as transcripts
from ._version import __version__
from .context.buffer import Context
from .context.events import RunResult, Step, Usage
from .context.items import Message, Reasoning, Summary, ToolCall, ToolResult
from .engine.agent import Agent
from .engine.approval import Decision
from .tools.base import Tool, Toolbox, tool

# Library convention: records go nowhere until the application configures logging, so
# Python's last-resort handler never prints them raw to stderr (a red block in a cell)
# next to the Notice that already told the user.
logging.getLogger("ipyagent").addHandler(logging.NullHandler())

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
    "current",
    "errors",
    "load_ipython_extension",
    "tool",
    "unload_ipython_extension",
]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext ipyagent``: the ``%agent`` magics, the sibling kernel started in the background."""
    from .frontends.magics import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext ipyagent``: remove the magics and stop the sibling sibling."""
    from .frontends.magics import unload_ipython_extension as unload

    unload(ipython)


def current() -> Agent:
    """The ``Agent`` behind the ``%agent`` magics."""
    from .frontends.magics import current as agent

    return agent()  # type: ignore[no-any-return]


def __getattr__(name: str) -> Any:
    # The kernel module pulls in jupyter_client/zmq: import it only when asked for.
    if name in ("SiblingKernel", "Execution"):
        from . import kernel

        return getattr(kernel, name)
    raise AttributeError(f"module 'ipyagent' has no attribute {name!r}")
