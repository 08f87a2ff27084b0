"""The model offers a value of its kernel to the user: the ``offer_result`` tool.

``offer_result(name, description)`` pickles ``name`` in the sibling *now* (so what the user
takes is what was offered, byte for byte: its sha256 is recorded) and puts the question to
the person — a "take it" button in the notebook, a y/N prompt on a terminal. Nothing enters
the user's kernel without that answer: the bytes are unpickled there only by the click (as
``%agent pull`` would), under the exact local name the button shows, and a value it would
replace is said on the question. The outcome is recorded in the call's result
(``meta["copies"]``, ``direction: "pull"``), as a pull is.

The tool is offered only where it can work: a frontend that can ask (its approver has
``offer_result``) and a user namespace to put the value in (``Agent.copy_target``, set by
the magics). The offer's question is its own approval; ``approval = "deny"`` still refuses it.
"""

from __future__ import annotations

import builtins
import hashlib
import keyword
import pickle
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ._text import one_line
from .copies import human_size
from .items import ToolCall, ToolResult
from .namespace import describe
from .tools.base import Tool

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["OFFER_TOOL", "Offer", "OfferAnswer", "Offerer", "offer_tool", "local_name_problem"]

OFFER_TOOL = "offer_result"
DESCRIPTION_LIMIT = 300  # characters of the model's description shown on the question
_IPYTHON_NAMES = {"In", "Out", "exit", "quit", "get_ipython", "display"}

DESCRIPTION = ("Offer a variable of your python kernel to the user: they see a button to take "
               "a copy of it into their own notebook kernel under the same name. Use it for a "
               "result they will want to keep working with (a fitted model, a cleaned "
               "DataFrame). Nothing is copied unless they take it; the result says whether they did.")


@dataclass
class Offer:
    """One value the model offers: what the person is asked about."""

    call_id: str
    name: str  # the sibling's variable, and the name it gets in the user's kernel
    description: str  # the model's words: untrusted, one line, bounded
    kind: str  # its type (and shape), as the sibling reported it: untrusted
    size: int  # pickled bytes
    sha256: str
    replaces: str | None  # what that name holds in the user's kernel now (None: nothing)
    take: Callable[[], str] = field(repr=False, default=lambda: "")  # unpickle + assign -> what arrived

    def question(self) -> str:
        """The offer in one plain line (a terminal, a saved notebook)."""
        line = (f"the agent offers `{self.name}`{_ascii_note(self.name)} ({self.kind}, "
                f"{human_size(self.size)} pickled)")
        if self.description:
            line += f": {self.description}"
        if self.replaces:
            line += f" — taking it REPLACES {self.replaces}"
        return line


@dataclass
class OfferAnswer:
    """What the person answered: taken (and what arrived), or why not."""

    taken: bool
    by: str  # click | terminal | headless | timeout | interrupt
    arrived: str = ""  # describe() of the value now in the user's kernel
    reason: str = ""


class Offerer(Protocol):
    """A frontend that can put an offer to the person (the notebook's and the terminal's approvers)."""

    async def offer_result(self, offer: Offer) -> OfferAnswer: ...


def _ascii_note(name: str) -> str:
    """`` (non-ASCII name 'd\\u0430')`` for a name a look-alike could hide in, else ''."""
    return "" if name.isascii() else f" (non-ASCII name {ascii(name)})"


def local_name_problem(name: str) -> str | None:
    """Why ``name`` may not be given to a value in the user's kernel, or None."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        return f"{name!r} is not a valid Python name"
    if unicodedata.normalize("NFKC", name) != name:
        # Python reads `ｄｆ` as `df`: the dictionary key would not be the name typed.
        return f"{ascii(name)} is not in normal form (NFKC); use {unicodedata.normalize('NFKC', name)!r}"
    if name.startswith("_") or name in _IPYTHON_NAMES:
        return f"{name!r} is private or IPython's own; offer it under a public name"
    return None


def replaced(target: Any, name: str) -> str | None:
    """What taking ``name`` would replace in the user's kernel, said for the person."""
    if name in target:
        return f"your `{name}` ({one_line(describe(target[name]), 120)})"
    if hasattr(builtins, name):
        return f"the builtin `{name}` (your kernel would see this value instead)"
    return None


def available(agent: Agent) -> bool:
    """True when an offer can be put to someone and taken somewhere."""
    ui = agent.policy.ui
    return (agent.copy_target is not None and "python" in agent.tools
            and callable(getattr(ui, "offer_result", None)))


def offer_tool(agent: Agent) -> Tool:
    """The ``offer_result`` tool bound to ``agent`` (offered while ``available``)."""

    async def handler(call: ToolCall) -> ToolResult:
        return await _offer(agent, call)

    return Tool(
        name=OFFER_TOOL, description=DESCRIPTION,
        parameters={"type": "object", "properties": {
            "name": {"type": "string", "description": "The variable in your python kernel."},
            "description": {"type": "string", "description": "One line: what it is, for the user."}},
            "required": ["name", "description"], "additionalProperties": False},
        handler=handler, available=lambda: available(agent), asks_user=True)


def _error(call: ToolCall, text: str) -> ToolResult:
    return ToolResult(call.id, text, error=True, name=call.name)


async def _offer(agent: Agent, call: ToolCall) -> ToolResult:
    name = call.arguments.get("name")
    problem = local_name_problem(name) if isinstance(name, str) else "name must be a string"
    if problem:
        return _error(call, f"cannot offer it: {problem}")
    assert isinstance(name, str)
    target, ui = agent.copy_target, agent.policy.ui
    if target is None or not callable(getattr(ui, "offer_result", None)):
        return _error(call, "cannot offer it: nobody here can take it (no notebook or terminal)")
    try:  # pickled now: the person takes exactly what was offered
        payload, kind = await agent.kernel.pull_payload_async(name)
    except (NameError, TypeError, ValueError) as exc:
        return _error(call, f"cannot offer {name!r}: {one_line(exc, 300)}")
    description = one_line(call.arguments.get("description", ""), DESCRIPTION_LIMIT)
    record: dict[str, Any] = {"name": name, "direction": "pull", "offered": True, "local": name,
                              "type": one_line(kind, 120), "bytes": len(payload),
                              "sha256": hashlib.sha256(payload).hexdigest()}

    def take() -> str:
        """Unpickle the offered bytes into the user's kernel (on the person's answer only)."""
        try:
            value = pickle.loads(payload)
        except Exception as exc:
            raise TypeError(f"cannot unpickle {name!r} here ({type(exc).__name__}: {exc})") from exc
        target[name] = value
        return one_line(describe(value), 200)

    offer = Offer(call.id, name, description, record["type"], len(payload), record["sha256"],
                  replaced(target, name), take)
    record["replaced"] = offer.replaces is not None
    answer = await ui.offer_result(offer)  # type: ignore[union-attr]
    record.update(taken=answer.taken, by=answer.by)
    if answer.taken:
        record["description"] = answer.arrived
        text = (f"The user took a copy of `{name}` into their kernel as `{name}` "
                f"({answer.arrived}). Your kernel keeps its own `{name}`.")
    else:
        record["reason"] = answer.reason
        text = (f"The user did not take `{name}`"
                + (f" ({one_line(answer.reason, 200)})" if answer.reason else "")
                + ". Nothing was copied into their kernel; do not assume they have it.")
    return ToolResult(call.id, text, name=call.name, meta={"copies": [record]})
