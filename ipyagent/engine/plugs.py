"""What ``Agent`` offers and the transcripts layer supplies: saving, reading and loading a
transcript, autosave, rebuilding the sibling, replay (and what else ``Agent`` delegates there).

The engine may not import ``ipyagent.transcripts`` (it sits above), yet these are the agent's
methods. So ``Agent`` calls the plugs below, each named as the function it stands for, and
``ipyagent/transcripts/__init__.py`` fills them; ``import ipyagent`` imports that package, so
they are filled before an agent exists.

What those functions return is named here too, as ``Protocol``s of what callers use (the
classes themselves live in ``transcripts``): ``Agent.rewind`` returns a ``RewindReport``,
``Agent.branches`` is ``Branches``, and mypy checks that the transcripts' classes fit.
"""

from __future__ import annotations

from typing import Any, Iterator, Protocol, Sequence, TypeVar

from .._util.plugs import Plug
from ..context.events import Notice

__all__ = ["arebuild", "areplay", "arewind", "Autosave", "cancel_deferred", "fork",
           "from_transcript", "load_into", "load_tree", "plan", "read", "read_index", "replay",
           "save", "save_tree", "tree_of",
           "Autosaver", "Branch", "Branches", "Rebuild", "ReplayReport", "RewindPlan",
           "RewindReport", "Transcript"]

A = TypeVar("A")  # the agent: ``engine.agent.Agent``, which imports this module
A_co = TypeVar("A_co", covariant=True)


class Autosaver(Protocol):
    """``transcripts.transcript.Autosave``: writes the transcript after each step."""

    def save(self) -> Notice | None: ...


class Rebuild(Protocol):
    """``transcripts.rebuild.Rebuild``: what re-running a conversation's python calls did."""

    cwd: str
    fresh: bool

    @property
    def ok(self) -> bool: ...
    def line(self) -> str: ...


class Transcript(Protocol):
    """``transcripts.transcript.Transcript``: a saved run, as read back."""

    @property
    def path(self) -> str | None: ...
    @property
    def rebuild(self) -> Rebuild | None: ...
    def verify_cells(self) -> None: ...


class ReplayReport(Protocol):
    """``transcripts.replay.ReplayReport``: what a replay reproduced and what differed."""

    @property
    def reproduced(self) -> bool: ...
    @property
    def differences(self) -> Sequence[Any]: ...


class RewindPlan(Protocol):
    """``transcripts.rewind.RewindPlan``: what a rewind would do."""

    @property
    def dropped(self) -> int: ...
    @property
    def reruns(self) -> int: ...
    @property
    def ask(self) -> int: ...
    def question(self) -> str: ...


class RewindReport(Protocol):
    """``transcripts.rewind.RewindReport``: what a rewind did."""

    @property
    def ok(self) -> bool: ...
    def line(self) -> str: ...


class Branch(Protocol[A_co]):
    """``transcripts.tree.Branch``: one branch, its agent, where it left its parent."""

    parent: str | None
    at_step: int | None

    @property
    def name(self) -> str: ...
    @property
    def agent(self) -> A_co: ...
    @property
    def how(self) -> str: ...


class Branches(Protocol[A]):
    """``transcripts.tree.Branches``: a conversation's branches by name."""

    @property
    def names(self) -> list[str]: ...
    def __getitem__(self, name: str) -> A: ...
    def __contains__(self, name: object) -> bool: ...
    def __iter__(self) -> Iterator[Branch[A]]: ...
    def __len__(self) -> int: ...
    def branch(self, name: str) -> Branch[A]: ...
    def name_of(self, agent: A) -> str: ...
    def switch(self, name: str) -> A: ...
    def close(self) -> None: ...
    def text(self) -> str: ...

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
