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
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._util.text import one_line
from ..context.buffer import Context
from ..context.events import Notice, Usage, live_emitter
from ..context.items import Item, ToolCall, ToolResult
from ..context.steps import copy_items, count_steps
from ..errors import ConfigError
from .rebuild import arebuild, rerun_steps
from .tree import (
    INDEX_KEY,
    ROOT,
    Branch,
    Branches,
    branch_line,
    branch_record,
    check_name,
    checked_record,
    restore_branch,
    tree_of,
)

if TYPE_CHECKING:
    from ..engine.agent import Agent
    from ..tools.base import Tool

__all__ = ["Branch", "Branches", "tree_of", "fork", "keep_dropped", "cancel_deferred",
           "ROOT", "check_name", "branch_record", "branch_line", "restore_branch", "save_tree",
           "read_index", "load_tree", "INDEX_KEY", "deferred"]

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
    branch = tree.add(made, name, parent=here, at_step=at_step, how="rewind")
    if made.autosave:  # on disk now: the rewound conversation's next autosave drops these steps
        from .transcript import Autosave

        Autosave(made).save()
    return branch


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
    from ..tools.offers import OFFER_TOOL, offer_tool

    own = {t.name: t for t in made.tools}
    for name in list(own):
        made.tools.remove(name)
    for t in agent.tools:
        made.tools.add(offer_tool(made) if t.name == OFFER_TOOL else own.get(t.name, t))


# -- the deferred re-run ------------------------------------------------------------------
_ORIGINAL = "ipyagent_original"  # the wrapping handler's attribute: the tool it stands in for


def _defer_rebuild(agent: Agent, items: list[Item]) -> None:
    """Wrap ``agent``'s python tool: its first call re-runs ``items``' python calls first."""
    if "python" not in agent.tools or not rerun_steps(items):
        return
    original = agent.tools["python"]
    assert original.handler is not None
    run = original.handler
    ref = weakref.ref(agent)  # the tool belongs to the agent, not the other way round

    async def handler(call: ToolCall) -> ToolResult:
        owner = ref()
        if owner is None or not cancel_deferred(owner):  # once, whatever happens
            return await run(call)
        report = await arebuild(owner, items=items, ran_here=owner.ran_here, compare=True)
        line = f"this branch's own sibling kernel: {report.line()}"
        emit = live_emitter.get()
        if emit is not None:
            ok = report.ok and not report.differences
            emit(Notice(line, "info" if ok else "warning"))
        result = await run(call)
        result.meta["rebuild"] = line
        return result

    setattr(handler, _ORIGINAL, original)
    agent.tools.add(dataclasses.replace(original, handler=handler))


def _pending(agent: Agent) -> Tool | None:
    tool = agent.tools["python"] if "python" in agent.tools else None
    return getattr(tool.handler, _ORIGINAL, None) if tool is not None else None


def cancel_deferred(agent: Agent) -> bool:
    """Forget ``agent``'s pending re-run of its history (a rewind or a rebuild did it);
    True when one was pending."""
    original = _pending(agent)
    if original is None:
        return False
    original.description = agent.tools["python"].description  # said since (a remote kernel)
    agent.tools.add(original)
    return True


def deferred(agent: Agent) -> bool:
    """True while ``agent``'s history has not been re-run in its sibling yet."""
    return _pending(agent) is not None


# -- transcripts of branches ---------------------------------------------------------------
def _stem(target: Path) -> str:
    return target.name[:-len(".ipynb")] if target.name.endswith(".ipynb") else target.name


def save_tree(agent: Agent, path: Any) -> Path:
    """Save every branch of ``agent``'s conversation: ``agent``'s at ``path`` (as ``save``),
    each other one as ``STEM.NAME.ipynb`` beside it, and the index ``STEM.branches.ipynb``
    (a table of them). Returns ``path``'s file."""
    from .transcript import save

    tree = tree_of(agent)
    here = tree.name_of(agent)
    target = save(agent, path)
    stem, folder = _stem(target), target.parent
    files = {here: target.name}
    for branch in tree:
        if branch.name != here:
            files[branch.name] = save(branch.agent, folder / f"{stem}.{branch.name}.ipynb").name
    _write_index(tree, here, files, folder / f"{stem}.branches.ipynb", agent)
    return target


def _write_index(tree: Branches, here: str, files: dict[str, str], where: Path,
                 agent: Agent) -> Path:
    from ..trust.secrets import key_envs
    from ..trust.untrusted import markdown_literal
    from .transcript import write_notebook

    rows = tree.rows()
    entries = [{"name": r["name"], "parent": r["parent"] or None, "at_step": r["at_step"],
                "steps": r["steps"], "file": files[r["name"]]} for r in rows]
    table = ["| branch | left | steps | last answer | file |", "|---|---|---|---|---|"]
    for r in rows:
        left = f"{r['parent']} at step {r['at_step']}" if r["parent"] else ""
        answer = markdown_literal(one_line(r["last_answer"], 80)).replace("|", "\\|")
        table.append(f"| {r['name']}{' ●' if r['name'] == here else ''} | {left} | {r['steps']} "
                     f"| {answer} | [{files[r['name']]}]({files[r['name']]}) |")
    text = "\n".join(["# ipyagent branches", "",
                      "One conversation, tried more than one way: each branch is a transcript "
                      "of its own (Run All re-does it, `%agent replay FILE` checks it, `%agent "
                      "load FILE` goes on with it); `%agent load` on this index brings all of "
                      "them back. ● is the one that was current.", "", *table])
    nb = {"nbformat": 4, "nbformat_minor": 5,
          "metadata": {INDEX_KEY: {"format": 1, "current": here, "branches": entries}},
          "cells": [{"cell_type": "markdown", "id": "branches", "metadata": {}, "source": text}]}
    from nbformat import from_dict

    return write_notebook(from_dict(nb), where, key_env=key_envs(agent))


def read_index(path: Any) -> dict[str, Any] | None:
    """The index a ``save_tree`` wrote at ``path`` (None: not an index); ``TranscriptError``
    for a damaged one."""
    from ..errors import TranscriptError
    from .notebook_file import read_notebook

    source = Path(path).expanduser()
    try:
        nb = read_notebook(source)
    except Exception:  # noqa: BLE001 - not a notebook: the transcript reader says why
        return None
    data = (nb.get("metadata") or {}).get(INDEX_KEY) if isinstance(nb, dict) else None
    if data is None:
        return None
    entries = data.get("branches") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise TranscriptError(f"{source}: the branch index is damaged (no branches)")
    checked = []
    for entry in entries:
        record = checked_record({**entry, "how": "loaded"} if isinstance(entry, dict) else None,
                                 10**9)
        file = entry.get("file") if isinstance(entry, dict) else None
        # Only a file beside the index, named as a save names it: never a path elsewhere.
        if record is None or not isinstance(file, str) or "/" in file or "\\" in file \
                or file.startswith(".") or not file.endswith(".ipynb"):
            raise TranscriptError(f"{source}: the branch index is damaged (an entry is not a "
                                  "branch name and a notebook beside it)")
        checked.append({**record, "file": str(source.parent / file)})
    current = data.get("current")
    if not isinstance(current, str) or current not in [c["name"] for c in checked]:
        current = checked[0]["name"]
    return {"current": current, "branches": checked}


def load_tree(agent: Agent, index: dict[str, Any]) -> Any:
    """Load every branch an index lists: the current one into ``agent`` (returned: its
    Transcript), each other as a branch agent whose sibling re-runs its history (asked
    first: it did not run in this session) at its first python call."""
    from .transcript import load_into, read

    transcripts = {e["name"]: read(e["file"]) for e in index["branches"]}  # all read, or none
    current = index["current"]
    agent.tree = None
    loaded = load_into(agent, transcripts[current])
    tree = Branches()
    for entry in index["branches"]:
        name = entry["name"]
        if name == current:
            tree.add(agent, name, parent=entry["parent"], at_step=entry["at_step"], how="loaded")
            continue
        made = _like(agent, name)
        made.tree = None
        load_into(made, transcripts[name])
        cancel_deferred(made)
        _defer_rebuild(made, list(made.context))
        made.renumber_steps()
        tree.add(made, name, parent=entry["parent"], at_step=entry["at_step"], how="loaded")
    tree.current = current
    return loaded
