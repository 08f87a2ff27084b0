"""Long-term memory: notes kept in SQLite and found again before a related task.

``Memory`` (``agent.memories``) reads and writes the stores; ``MemoryStore`` is one SQLite
file (WAL, schema-versioned, FTS5 with our own relevance score, near-duplicates merged,
eviction past ``Agent.memory_max_entries``); ``notes_block`` is the labelled block the model
reads; ``outcome_text`` the deterministic note a run leaves; ``remember_tool`` the tool.
Off by default (``Agent.memory = "off"``): then nothing is read or written.

May import: ``tools``, ``models``, ``context``, ``trust``, ``_util``.
"""

from .notes import (
    BLOCK_END,
    BLOCK_LABEL,
    BLOCK_START,
    ENABLE_HINT,
    Memory,
    MemoryRefused,
    MemoryTable,
    Recalled,
    notes_block,
)
from .outcome import model_request, outcome_text
from .store import Added, Entry, MemoryFileError, MemoryStore, fts5_available
from .tool import TOOL_NAME, remember_tool

__all__ = ["Added", "BLOCK_END", "BLOCK_LABEL", "BLOCK_START", "ENABLE_HINT", "Entry", "Memory",
           "MemoryFileError", "MemoryRefused", "MemoryStore", "MemoryTable", "Recalled",
           "TOOL_NAME", "fts5_available", "model_request", "notes_block", "outcome_text",
           "remember_tool"]
