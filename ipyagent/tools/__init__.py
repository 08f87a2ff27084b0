"""What the model can call: the ``@tool``/``Toolbox`` base and the tools ipyagent ships.

``base`` holds ``Tool``, ``tool`` and ``Toolbox`` (the ``Executor`` the loop calls);
``python`` runs code in the sibling kernel; ``files`` holds the workspace file tools
(one path resolver, one atomic write); ``mcp/`` offers MCP servers' tools; ``web/``
holds ``web_search`` and ``fetch_url``.
"""

from .base import Tool, Toolbox, tool

__all__ = ["Tool", "Toolbox", "tool"]
