"""The engine: the tool-calling loop and what it decides.

``agent`` is ``Agent``: its settings are traitlets (``settings``), what it reaches outside
itself is built on first use (``resources``: the model client, the sibling, MCP servers,
AGENTS.md). ``step`` runs one iteration in five phases (prepare -> request -> record -> run
calls -> decide stop); ``approval`` decides whether a call may run (a policy, a person or a
hook); ``compaction`` keeps each request inside the model's context window; ``previews``
puts previews of the files a task names before it (asking first for a remote endpoint). The engine
reaches the frontends only through listeners (events); ``plugs`` are the agent's methods
whose work lies in the transcripts layer above it (save, load, replay, rebuild).

May import: ``memory``, ``instructions``, ``tools``, ``kernel``, ``models``, ``context``,
``trust``, ``_util``.
"""

from __future__ import annotations

from types import SimpleNamespace

from ..context import plugs as context_plugs


# The plugs this layer fills for context, which call them and may not import it.
# Each loads its module at its first call, so ``import ipyagent`` stays light.
def _here() -> SimpleNamespace:
    from . import compaction

    return SimpleNamespace(compaction=compaction)


context_plugs.preview.fill_later(lambda: _here().compaction.preview)
