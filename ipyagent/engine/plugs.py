"""What ``Agent`` offers and the transcripts layer supplies: saving, reading and loading a
transcript, autosave, rebuilding the sibling, replay (and what else ``Agent`` delegates there).

The engine may not import ``ipyagent.transcripts`` (it sits above), yet these are the agent's
methods. So ``Agent`` calls the plugs below, each named as the function it stands for, and
``ipyagent/transcripts/__init__.py`` fills them; ``import ipyagent`` imports that package, so
they are filled before an agent exists.
"""

from __future__ import annotations

from typing import Any

from .._util.plugs import Plug

__all__ = ["arebuild", "areplay", "arewind", "Autosave", "cancel_deferred", "fork",
           "from_transcript", "load_into", "load_tree", "plan", "read", "read_index", "replay",
           "save", "save_tree", "tree_of"]

_TRANSCRIPTS = "ipyagent.transcripts"

arebuild: Plug[..., Any] = Plug("transcripts.rebuild.arebuild", _TRANSCRIPTS)
areplay: Plug[..., Any] = Plug("transcripts.replay.areplay", _TRANSCRIPTS)
arewind: Plug[..., Any] = Plug("transcripts.rewind.arewind", _TRANSCRIPTS)
Autosave: Plug[..., Any] = Plug("transcripts.transcript.Autosave", _TRANSCRIPTS)
cancel_deferred: Plug[..., Any] = Plug("transcripts.branches.cancel_deferred", _TRANSCRIPTS)
fork: Plug[..., Any] = Plug("transcripts.branches.fork", _TRANSCRIPTS)
from_transcript: Plug[..., Any] = Plug("transcripts.transcript.from_transcript", _TRANSCRIPTS)
load_into: Plug[..., Any] = Plug("transcripts.transcript.load_into", _TRANSCRIPTS)
load_tree: Plug[..., Any] = Plug("transcripts.branches.load_tree", _TRANSCRIPTS)
plan: Plug[..., Any] = Plug("transcripts.rewind.plan", _TRANSCRIPTS)
read: Plug[..., Any] = Plug("transcripts.transcript.read", _TRANSCRIPTS)
read_index: Plug[..., Any] = Plug("transcripts.branches.read_index", _TRANSCRIPTS)
replay: Plug[..., Any] = Plug("transcripts.replay.replay", _TRANSCRIPTS)
save: Plug[..., Any] = Plug("transcripts.transcript.save", _TRANSCRIPTS)
save_tree: Plug[..., Any] = Plug("transcripts.branches.save_tree", _TRANSCRIPTS)
tree_of: Plug[..., Any] = Plug("transcripts.branches.tree_of", _TRANSCRIPTS)
