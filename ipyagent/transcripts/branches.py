"""Branches: one conversation tried more than one way, nothing lost.

``agent.fork(name)`` makes a new agent that shares the history so far (copies of its items:
an edit in one branch stays there) with its own sibling kernel, and a rewind keeps the steps
it drops as a branch. Every agent of a conversation shares one ``Branches`` (the tree:
``agent.branches``), where each branch records its parent and the step it left it at.

Cheap: a branch copies items, never re-runs anything when it is made. Its own sibling
starts at its first use and re-runs the python calls of its history just before its first
python call (code that ran in this session after a yes runs again without asking; the
rest is approved first), so a branch that is never run costs no kernel at all.
"""

from __future__ import annotations

import dataclasses
import html
import re
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._text import one_line, visible
from ..context import Context
from ..errors import ConfigError
from ..events import Notice, Usage, live_emitter
from ..items import Item, Message, ToolCall, ToolResult, unfold
from ..steps import copy_items, count_steps
from .rebuild import arebuild, rerun_steps

if TYPE_CHECKING:
    from ..agent import Agent
    from ..tools.base import Tool

__all__ = ["Branch", "Branches", "tree_of", "fork", "keep_dropped", "cancel_deferred",
           "ROOT", "check_name"]

ROOT = "main"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_name(name: str) -> str:
    """``name`` if a branch may be called so (a word: letters, digits, ``_.-``), else
    ``ConfigError`` in one line."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"a branch name is one word of letters, digits, '_', '.' or '-' "
                          f"(up to 64), not {visible(repr(name))[:70]}")
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
    assert agent.tree is not None
    return agent.tree


# -- making branches ---------------------------------------------------------------------
def fork(agent: Agent, name: str | None = None) -> Agent:
    """A new agent with copies of ``agent``'s items, as branch ``name`` of its tree."""
    tree = tree_of(agent)
    name = check_name(name) if name is not None else tree.new_name("fork")
    if name in tree:
        raise ConfigError(f"there is a branch {name!r} already; give another name")
    made = _like(agent, name)
    tree.add(made, name, parent=tree.name_of(agent), at_step=count_steps(agent.context),
             how="fork")
    return made


def keep_dropped(agent: Agent, at_step: int) -> Branch:
    """Before a rewind to ``at_step``: the whole conversation so far, as a new branch."""
    tree = tree_of(agent)
    here = tree.name_of(agent)
    name = tree.new_name(here)
    made = _like(agent, name)
    return tree.add(made, name, parent=here, at_step=at_step, how="rewind")


def _like(agent: Agent, name: str) -> Agent:
    """An agent with ``agent``'s settings, tools, approval UI and copies of its items; its
    sibling kernel is not started, and re-runs the history at its first python call."""
    names = [n for n in agent.trait_names(config=True) if n != "persona"]
    settings = {n: getattr(agent, n) for n in names}
    if settings.get("autosave"):
        settings["autosave"] = _autosave_for(str(settings["autosave"]), name)
    client = agent.resources.client_if_made if agent.client_is_injected else None
    made = type(agent)(parent=agent.parent, client=client,
                       http_client=agent.resources.http_client,
                       approval_hook=agent.approval_hook, start_kernel=False, **settings)
    if agent.persona:
        made.persona = agent.persona  # enters it (its settings), then the ones set since:
        for n in names:
            if getattr(made, n) != getattr(agent, n):
                setattr(made, n, getattr(agent, n))
    _same_tools(agent, made)
    items = copy_items(agent.context)
    made.context = Context(items, system=agent.context.system)
    made.usage = Usage.from_dict(agent.usage.to_dict())
    made.copy_source, made.copy_target = agent.copy_source, agent.copy_target
    made.policy.always.update(agent.policy.always)
    made.ran_here = agent.ran_here  # the same session: what ran after a yes is known
    made.listeners.extend(agent.listeners)
    made.renumber_steps()
    _defer_rebuild(made, items)
    return made


def _autosave_for(setting: str, name: str) -> str:
    """A branch's autosave: the same directory, or ``run.NAME.ipynb`` beside a file."""
    path = Path(setting).expanduser()
    if setting.endswith(("/", "\\")) or path.is_dir():
        return setting
    stem = path.name[:-len(".ipynb")] if path.name.endswith(".ipynb") else path.name
    return str(path.with_name(f"{stem}.{name}.ipynb"))


def _same_tools(agent: Agent, made: Agent) -> None:
    """``made`` offers what ``agent`` offers, in its order: the tools ``made`` built for itself
    (python, shell, files… bound to its own kernel and settings), the user's tools as they
    are, ``offer_result`` made again for ``made``; none that ``agent`` dropped."""
    from ..offers import OFFER_TOOL, offer_tool

    own = {t.name: t for t in made.tools}
    for name in list(own):
        made.tools.remove(name)
    for t in agent.tools:
        made.tools.add(offer_tool(made) if t.name == OFFER_TOOL else own.get(t.name, t))


# -- the deferred re-run ------------------------------------------------------------------
_DEFERRED: weakref.WeakKeyDictionary[Any, tuple[Tool, Tool]] = weakref.WeakKeyDictionary()


def _defer_rebuild(agent: Agent, items: list[Item]) -> None:
    """Wrap ``agent``'s python tool: its first call re-runs ``items``' python calls first."""
    if "python" not in agent.tools or not rerun_steps(items):
        return
    original = agent.tools["python"]
    assert original.handler is not None
    run = original.handler

    async def handler(call: ToolCall) -> ToolResult:
        cancel_deferred(agent)  # once, whatever happens
        report = await arebuild(agent, items=items, ran_here=agent.ran_here, compare=True)
        line = f"this branch's own sibling kernel: {report.line()}"
        emit = live_emitter.get()
        if emit is not None:
            ok = report.ok and not report.differences
            emit(Notice(line, "info" if ok else "warning"))
        result = await run(call)
        result.meta["rebuild"] = line
        return result

    wrapper = dataclasses.replace(original, handler=handler)
    agent.tools.add(wrapper)
    _DEFERRED[agent] = (original, wrapper)


def cancel_deferred(agent: Agent) -> bool:
    """Forget ``agent``'s pending re-run of its history (a rewind or a rebuild did it);
    True when one was pending."""
    pair = _DEFERRED.pop(agent, None)
    if pair is None:
        return False
    original, wrapper = pair
    if "python" in agent.tools and agent.tools["python"] is wrapper:
        original.description = wrapper.description  # said since (a remote kernel)
        agent.tools.add(original)
    return True


def deferred(agent: Agent) -> bool:
    """True while ``agent``'s history has not been re-run in its sibling yet."""
    return agent in _DEFERRED
