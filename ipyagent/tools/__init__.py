"""What the model can call: the ``@tool``/``Toolbox`` base and the tools ipyagent ships.

``base`` holds ``Tool``, ``tool`` and ``Toolbox`` (the ``Executor`` the loop calls);
``python`` runs code in the sibling kernel, ``shell`` a command there; ``files`` holds the
workspace file tools (one path resolver, one atomic write), ``remote_files`` the same on a
remote kernel, ``changes`` the sandbox's pending file changes (apply, discard, undo);
``offers`` is ``offer_result`` (the model offers a value of its kernel to the user);
``mcp/`` offers MCP servers' tools; ``web/`` holds ``web_search`` and ``fetch_url``.

May import: ``kernel``, ``context``, ``trust``, ``_util``.
"""

from .base import Tool, Toolbox, tool

__all__ = ["Tool", "Toolbox", "tool"]
