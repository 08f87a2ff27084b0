"""Runs as notebooks: export, save and read, restore, autosave, re-running and replay.

``export`` turns a context into notebook cells, ``transcript`` saves, reads and restores
them (and autosaves after each step), ``file_record`` re-creates the files the agent
wrote, ``rebuild`` re-runs a transcript's code cells, ``replay`` re-runs its recorded
model turns and reports differences. Above the engine: ``Agent.save/load/from_transcript/
replay/rebuild_kernel`` and ``Context.to_notebook`` reach these through plugs, filled here.

May import: ``engine``, ``memory``, ``instructions``, ``tools``, ``kernel``, ``models``,
``context``, ``trust``, ``_util``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

from ..context import plugs as context_plugs
from ..engine import plugs as engine_plugs

if TYPE_CHECKING:
    from ..engine.agent import Agent
    from . import rebuild, replay, rewind, transcript, tree

    def _fit(a: transcript.Autosave, r: rebuild.Rebuild, t: transcript.Transcript,
             p: replay.ReplayReport, rp: rewind.RewindPlan, rr: rewind.RewindReport,
             b: tree.Branch, bs: tree.Branches,
             ) -> tuple[engine_plugs.Autosaver, engine_plugs.Rebuild, engine_plugs.Transcript,
                        engine_plugs.ReplayReport, engine_plugs.RewindPlan,
                        engine_plugs.RewindReport, engine_plugs.Branch[Agent],
                        engine_plugs.Branches[Agent]]:
        """mypy's check that what these plugs return fits the Protocols the engine names
        it by (the plugs themselves return ``Any``)."""
        return a, r, t, p, rp, rr, b, bs


# The plugs this layer fills for context and engine, which call them and may not import it.
# Each loads its module at its first call, so ``import ipyagent`` stays light.
def _here() -> SimpleNamespace:
    from . import branches, export, rebuild, replay, rewind, transcript

    return SimpleNamespace(branches=branches, export=export, rebuild=rebuild, replay=replay,
                           rewind=rewind, transcript=transcript)


context_plugs.context_to_notebook.fill_later(lambda: _here().export.context_to_notebook)
engine_plugs.arebuild.fill_later(lambda: _here().rebuild.arebuild)
engine_plugs.areplay.fill_later(lambda: _here().replay.areplay)
engine_plugs.arewind.fill_later(lambda: _here().rewind.arewind)
engine_plugs.Autosave.fill_later(lambda: _here().transcript.Autosave)
engine_plugs.cancel_deferred.fill_later(lambda: _here().branches.cancel_deferred)
engine_plugs.fork.fill_later(lambda: _here().branches.fork)
engine_plugs.from_transcript.fill_later(lambda: _here().transcript.from_transcript)
engine_plugs.load_into.fill_later(lambda: _here().transcript.load_into)
engine_plugs.load_tree.fill_later(lambda: _here().branches.load_tree)
engine_plugs.plan.fill_later(lambda: _here().rewind.plan)
engine_plugs.read.fill_later(lambda: _here().transcript.read)
engine_plugs.read_index.fill_later(lambda: _here().branches.read_index)
engine_plugs.replay.fill_later(lambda: _here().replay.replay)
engine_plugs.save.fill_later(lambda: _here().transcript.save)
engine_plugs.save_tree.fill_later(lambda: _here().branches.save_tree)
engine_plugs.tree_of.fill_later(lambda: _here().branches.tree_of)
