"""Memory around a run: the notes before its task, the outcome note after it ends ``done``.

``Agent`` calls these two and says what they return to its listeners; everything else
about memory is ``Memory``'s.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from ..context.buffer import Context
from ..context.events import Event, MemoryRecalled, Notice, RunResult, Usage
from ..context.items import Message
from ..models.base import Model
from .notes import Memory, MemoryRefused
from .outcome import model_request, outcome_text

__all__ = ["MemoryAgent", "recall", "write_outcome"]


class MemoryAgent(Protocol):
    """What these two use of ``engine.agent.Agent`` (a layer above: named, not imported)."""

    @property
    def memories(self) -> Memory: ...
    @property
    def memory_write(self) -> str: ...
    @property
    def context(self) -> Context: ...
    @property
    def usage(self) -> Usage: ...
    @property
    def client(self) -> Model: ...
    @property
    def log(self) -> logging.Logger: ...


def recall(agent: MemoryAgent, task: str) -> list[Event]:
    """Before a task: the relevant notes as one labelled user message in the context
    (``meta["memory"]``: which notes, so a transcript records them); what to say."""
    memories = agent.memories
    if not memories.on:
        return []
    # Notes the conversation already has (sent before, here or in a loaded transcript,
    # or kept by its own runs) are not sent again.
    seen = set(memories.written)
    for item in agent.context:
        meta = getattr(item, "meta", None) or {}
        if isinstance(meta.get("memory"), dict):
            seen.update(str(i) for i in meta["memory"].get("ids", []))
    found = memories.recall(task, exclude=seen)
    said: list[Event] = [Notice(n, "warning") for n in memories.take_notices()]
    if found is None:
        return said
    agent.context.append(Message("user", found.text, meta={"memory": found.meta()}))
    return [*said, MemoryRecalled(found.summary(), found.text, found.meta()["ids"])]


async def write_outcome(agent: MemoryAgent, task: str | None, first: int,
                        result: RunResult) -> list[Event]:
    """After a run that ended ``done``: its outcome note (``Agent.memory_write``); what to say."""
    memories = agent.memories
    if not memories.on or agent.memory_write == "off" or result.stop_reason != "done" \
            or not task or not task.strip():
        return []
    said: list[Event] = []
    items = list(agent.context)[first:]
    text, how = outcome_text(task, items, result.text), "outcome"
    if agent.memory_write == "model":
        written, usage = await _by_model(agent, model_request(task, items, result.text))
        if usage is not None:
            result.usage.add(usage)
            agent.usage.add(usage)
        if written:
            text, how = written, "the model's note"
        else:
            said.append(Notice("memory: the model wrote no note; kept the deterministic "
                               "outcome instead", "warning"))
    try:
        added = memories.remember(text, source="run", kind="outcome")
    except MemoryRefused as exc:
        return [*said, Notice(f"memory: this run's outcome was {exc}", "warning")]
    memories.written.add(added.entry.label)
    verb = "updated" if added.merged else "kept"
    return [*said, Notice(f"memory: {verb} note #{added.entry.label} ({how} of this run)", "info")]


async def _by_model(agent: MemoryAgent, req: Any) -> tuple[str, Usage | None]:
    """The one extra request of ``memory_write = "model"``; ("", usage) when it failed."""
    from ..errors import IpyagentError
    from ..models.base import TurnComplete

    turn = None
    try:
        async for event in agent.client.stream(req):
            if isinstance(event, TurnComplete):
                turn = event.turn
    except (IpyagentError, OSError) as exc:
        agent.log.warning("ipyagent: the memory note request failed: %s", exc)
        return "", None
    if turn is None:
        return "", None
    usage = Usage.from_server(turn.usage) or Usage(0, len(turn.text) // 4 + 1, 1, estimated=True)
    return " ".join(turn.text.split())[:1200], usage
