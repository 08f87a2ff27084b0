"""What the memory layer reads of an agent's settings (``engine.settings.AgentSettings``).

The engine sits above memory, so memory names the settings it reads in a ``Protocol``
instead of importing them; mypy still checks that ``AgentSettings`` fits wherever an agent
is passed (``Memory(agent)``, ``embed(settings, ...)``).
"""

from __future__ import annotations

from typing import Protocol

from ..models.providers import Endpoint

__all__ = ["MemorySettings"]


class MemorySettings(Protocol):
    """The ``Agent.memory*`` settings, and the endpoint and timeout embeddings are fetched with."""

    @property
    def memory(self) -> str: ...
    @property
    def memory_path(self) -> str: ...
    @property
    def memory_global_path(self) -> str: ...
    @property
    def memory_max_entries(self) -> int: ...
    @property
    def memory_top_k(self) -> int: ...
    @property
    def memory_min_relevance(self) -> float: ...
    @property
    def memory_retriever(self) -> str: ...
    @property
    def memory_embedding_model(self) -> str: ...
    @property
    def memory_min_similarity(self) -> float: ...
    @property
    def endpoint(self) -> Endpoint: ...
    @property
    def timeout(self) -> float: ...
