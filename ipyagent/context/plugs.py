"""What ``Context`` offers and a layer above supplies: ``to_notebook`` (the transcripts'
notebook export) and ``compaction_preview`` (the engine's compaction, which asks a model).

Filled by the ``__init__`` of the layer named beside each; ``import ipyagent`` imports both,
so they are filled before a context exists.
"""

from __future__ import annotations

from typing import Any

from .._util.plugs import Plug

__all__ = ["context_to_notebook", "preview"]

_ENGINE = "ipyagent.engine"
_TRANSCRIPTS = "ipyagent.transcripts"

context_to_notebook: Plug[..., Any] = Plug("transcripts.export.context_to_notebook", _TRANSCRIPTS)
preview: Plug[..., Any] = Plug("engine.compaction.preview", _ENGINE)
