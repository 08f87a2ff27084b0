"""The tree of a conversation's branches: which agent is which branch, where each left its
parent, and what a branch's transcript records about itself.

Data only (no kernel, no file): ``branches`` makes branches, ``transcript`` records them.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._util.text import one_line, visible
from ..context.events import Usage
from ..context.items import Message, unfold
from ..context.steps import count_steps
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..engine.agent import Agent

__all__ = ["Branch", "Branches", "tree_of", "check_name", "ROOT", "INDEX_KEY", "branch_record",
           "branch_line", "restore_branch", "checked_record", "last_answer", "tokens"]

ROOT = "main"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_name(name: str) -> str:
    """``name`` if a branch may be called so (a word: letters, digits, ``_.-``), else
    ``ConfigError`` in one line."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name == "branches":
        raise ConfigError(f"a branch name is one word of letters, digits, '_', '.' or '-' "
                          f"(up to 64; not 'branches'), not {visible(repr(name))[:70]}")
    return name


@dataclass
class Branch:
    """One branch: its agent, the branch it left and the step it left it at."""

    name: str
    agent: Agent
    parent: str | None = None
    at_step: int | None = None  # the parent's step this branch shares up to
    how: str = "root"  # root | fork | rewind | loaded

    def __repr__(self) -> str:
        left = f" from {self.parent} at step {self.at_step}" if self.parent else ""
        return f"<Branch {self.name}{left}: {count_steps(self.agent.context)} steps>"


class Branches:
    """The branches of one conversation, by name; ``current`` is the one you are on."""

    def __init__(self) -> None:
        self._branches: dict[str, Branch] = {}
        self.current = ROOT

    # -- lookup ---------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Agent:
        return self.branch(name).agent

    def branch(self, name: str) -> Branch:
        """The ``Branch`` called ``name`` (``ConfigError`` naming the branches if none)."""
        found = self._branches.get(name)
        if found is None:
            raise ConfigError(f"no branch {visible(repr(name))[:70]}; the branches are "
                              f"{', '.join(self._branches) or 'none'}")
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._branches

    def __iter__(self) -> Iterator[Branch]:
        return iter(list(self._branches.values()))

    def __len__(self) -> int:
        return len(self._branches)

    @property
    def names(self) -> list[str]:
        return list(self._branches)

    def name_of(self, agent: Agent) -> str:
        """The name of ``agent``'s branch."""
        for branch in self._branches.values():
            if branch.agent is agent:
                return branch.name
        raise ConfigError("this agent is not a branch of this conversation")

    def new_name(self, stem: str) -> str:
        """``stem-1``, ``stem-2``…: the first not taken."""
        n = 1
        while f"{stem}-{n}" in self._branches:
            n += 1
        return f"{stem}-{n}"

    # -- changing ----------------------------------------------------------------------
    def add(self, agent: Agent, name: str, *, parent: str | None = None,
            at_step: int | None = None, how: str = "fork") -> Branch:
        """Register ``agent`` as branch ``name``."""
        check_name(name)
        if name in self._branches:
            raise ConfigError(f"there is a branch {name!r} already; give another name")
        branch = self._branches[name] = Branch(name, agent, parent, at_step, how)
        agent.tree = self
        return branch

    def switch(self, name: str) -> Agent:
        """Make ``name`` the current branch; returns its agent."""
        agent = self[name]
        self.current = name
        return agent

    def close(self) -> None:
        """Close every branch's agent (kernels, MCP servers, connections)."""
        for branch in self:
            branch.agent.close()

    # -- showing -----------------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        """One row per branch: name, parent, left at, steps, last answer, tokens."""
        return [{"name": b.name, "current": b.name == self.current, "parent": b.parent or "",
                 "at_step": b.at_step, "steps": count_steps(b.agent.context),
                 "last_answer": last_answer(b.agent.context), "tokens": tokens(b.agent.context)}
                for b in self]

    def __repr__(self) -> str:
        return f"<Branches {', '.join(self._branches)}; current {self.current}>"

    def text(self) -> str:
        """The table as plain lines (a terminal)."""
        lines = [f"  {'':1} {'branch':<16} {'from':<16} {'steps':>5} {'tokens':>8}  last answer"]
        for row in self.rows():
            left = f"{row['parent']}@{row['at_step']}" if row["parent"] else ""
            lines.append(f"  {'●' if row['current'] else ' '} {row['name']:<16} {left:<16} "
                         f"{row['steps']:>5} {row['tokens']:>8}  {one_line(row['last_answer'], 60)}")
        return visible("\n".join(lines))

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())

    def _repr_html_(self) -> str:
        cells = []
        for row in self.rows():
            left = (f"{html.escape(row['parent'])} at step {row['at_step']}" if row["parent"]
                    else "")
            mark = "●" if row["current"] else ""
            # The last answer is the model's text: escaped, never live.
            cells.append(f"<tr><td>{mark}</td><td>{html.escape(row['name'])}</td><td>{left}</td>"
                         f"<td style='text-align:right'>{row['steps']}</td>"
                         f"<td style='text-align:left'>{html.escape(one_line(row['last_answer'], 80))}</td>"
                         f"<td style='text-align:right'>{row['tokens']:,}</td></tr>")
        return ("<div class='ipyagent-branches'><b>Branches</b> — ● is the current one "
                "(<code>%agent switch NAME</code>)<table><thead><tr><th></th><th>branch</th>"
                "<th>left</th><th>steps</th><th style='text-align:left'>last answer</th>"
                "<th>tokens</th></tr></thead><tbody>" + "".join(cells) + "</tbody></table></div>")


def last_answer(items: Any) -> str:
    """The last thing the model said (text), or ''."""
    for item in reversed(list(items)):
        if isinstance(item, Message) and item.role == "assistant" and item.content.strip():
            return one_line(item.content, 200)
    return ""


def tokens(items: Any) -> int:
    """The tokens the branch's own model replies took, as the servers reported them."""
    total = 0
    for item in unfold(items):
        turn = item.meta.get("turn") if isinstance(item.meta, dict) else None
        usage = Usage.from_server(turn.get("usage")) if isinstance(turn, dict) and \
            isinstance(turn.get("usage"), dict) else None
        if usage is not None:
            total += usage.total
    return total


def tree_of(agent: Agent) -> Branches:
    """``agent``'s branches (made on first use, ``agent`` as the root ``main``)."""
    if agent.tree is None:
        Branches().add(agent, ROOT, how="root")
    assert isinstance(agent.tree, Branches)  # the agent knows its tree as a Protocol
    return agent.tree


INDEX_KEY = "ipyagent_branches"  # the index notebook's metadata
_HOWS = ("root", "fork", "rewind", "loaded")


def branch_record(agent: Agent) -> dict[str, Any] | None:
    """What a branch's transcript records: its name, parent and the step it left it at
    (None for a conversation that never branched)."""
    tree = agent.tree
    if tree is None:
        return None
    try:
        branch = tree.branch(tree.name_of(agent))
    except ConfigError:
        return None
    if len(tree) == 1 and branch.parent is None:
        return None
    return {"name": branch.name, "parent": branch.parent, "at_step": branch.at_step,
            "how": branch.how}


def branch_line(record: dict[str, Any]) -> str:
    """The header's line: ``alt (from main at step 2)``."""
    left = f" (from {record['parent']} at step {record['at_step']})" if record.get("parent") else ""
    return f"{record['name']}{left}"


def checked_record(record: Any, steps: int) -> dict[str, Any] | None:
    """A branch record read from a file, if every field is what a save writes (else None)."""
    if not isinstance(record, dict):
        return None
    name, parent, at, how = (record.get(k) for k in ("name", "parent", "at_step", "how"))
    ok = (isinstance(name, str) and bool(_NAME.fullmatch(name))
          and (parent is None or (isinstance(parent, str) and bool(_NAME.fullmatch(parent))))
          and (at is None or (isinstance(at, int) and not isinstance(at, bool) and 0 <= at <= steps))
          and how in _HOWS)
    return {"name": name, "parent": parent, "at_step": at, "how": how} if ok else None


def restore_branch(agent: Agent, transcript: Any) -> None:
    """After a load: the branch the transcript says it is (its name, parent, step), as this
    agent's place in its tree; a damaged record is said in one line and left out."""
    raw = getattr(transcript, "branch", None)
    if raw is None:
        return
    record = checked_record(raw, count_steps(agent.context))
    if record is None:
        import warnings

        warnings.warn(f"{transcript.path or 'the transcript'}: metadata.ipyagent.branch is "
                      "damaged; loaded as a conversation of its own", stacklevel=3)
        return
    tree = agent.tree
    if tree is None or (len(tree) == 1 and tree.names == [tree.name_of(agent)]):
        fresh = Branches()
        fresh.add(agent, record["name"], parent=record["parent"], at_step=record["at_step"],
                  how=record["how"])
        fresh.current = record["name"]
        return
    branch = tree.branch(tree.name_of(agent))  # a tree of other branches: keep its name there
    branch.parent, branch.at_step = record["parent"], record["at_step"]
