"""The model offers a value of its kernel to the user: the ``offer_result`` tool.

``offer_result(name, description)`` encodes ``name`` as data in the sibling *now*
(``trust.encode``: never a pickle) and decodes it here at once with code that cannot run
code (``trust.values``), so the question put to the person — a "take it" button in the
notebook, a y/N prompt on a terminal — shows what actually arrived: its type and shape, a
preview and the sha256, all made here; the model's description is shown as its words. A
value that cannot cross as data is refused before anyone is asked, with what to ask for
instead. Nothing enters the user's kernel without the answer: the decoded value is put
there only by the click, under the exact local name the button shows, and a value it would
replace is said on the question. The outcome is recorded in the call's result
(``meta["copies"]``, ``direction: "pull"``), as a pull is, and the person's answer is a
row of the audit (``audit.person_decided``).

The tool is offered only where it can work: a frontend that can ask (its approver has
``offer_result``) and a user namespace to put the value in (``Agent.copy_target``, set by
the magics). The offer's question is its own approval; ``approval = "deny"`` still refuses it.
"""

from __future__ import annotations

import builtins
import keyword
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Callable, MutableMapping, Protocol

from .._util.text import one_line
from ..context.audit import person_decided
from ..context.items import ToolCall, ToolResult
from ..kernel.base import Kernel
from ..kernel.copies import CopyPolicy, human_size
from ..kernel.namespace import describe
from ..trust.values import Undecodable, arrive
from .base import Tool, Toolbox

__all__ = ["OFFER_TOOL", "Offer", "OfferAnswer", "Offerer", "OfferAgent", "offer_tool",
           "local_name_problem"]

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
    description: str  # the model's words: untrusted, one line, bounded; shown as its words
    kind: str  # its type and shape, from the value decoded here (not the model's claim)
    size: int  # bytes that crossed
    sha256: str
    replaces: str | None  # what that name holds in the user's kernel now (None: nothing)
    take: Callable[[], str] = field(repr=False, default=lambda: "")  # assign -> what arrived
    preview: str = ""  # a short look at the decoded value, made here

    def question(self) -> str:
        """The offer in one plain line (a terminal, a saved notebook)."""
        line = (f"the agent offers `{self.name}`{_ascii_note(self.name)}: {self.kind} (decoded "
                f"here from {human_size(self.size)} of data; sha256 {self.sha256[:16]}…)")
        if self.description:
            line += f" — the agent's words: “{self.description}”"
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


class OfferAgent(Protocol):
    """What an offer uses of ``engine.agent.Agent`` (a layer above: named, not imported)."""

    @property
    def copy_target(self) -> MutableMapping[str, Any] | None: ...
    @property
    def tools(self) -> Toolbox: ...
    @property
    def kernel(self) -> Kernel: ...
    @property
    def policy(self) -> CopyPolicy: ...


def available(agent: OfferAgent) -> bool:
    """True when an offer can be put to someone and taken somewhere."""
    ui = agent.policy.ui
    return (agent.copy_target is not None and "python" in agent.tools
            and callable(getattr(ui, "offer_result", None)))


def offer_tool(agent: OfferAgent) -> Tool:
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


async def _offer(agent: OfferAgent, call: ToolCall) -> ToolResult:
    name = call.arguments.get("name")
    problem = local_name_problem(name) if isinstance(name, str) else "name must be a string"
    if problem:
        return _error(call, f"cannot offer it: {problem}")
    assert isinstance(name, str)
    target, ui = agent.copy_target, agent.policy.ui
    if target is None or not callable(getattr(ui, "offer_result", None)):
        return _error(call, "cannot offer it: nobody here can take it (no notebook or terminal)")
    try:  # encoded now and decoded here at once: the person sees, and takes, what arrived
        data = await agent.kernel.pull_payload_async(name)
        arrived = arrive(data)
    except (NameError, TypeError, ValueError) as exc:  # Undecodable is a ValueError
        why = f"what your kernel sent is not a value the user's side reads ({exc})" \
            if isinstance(exc, Undecodable) else one_line(exc, 300)
        return _error(call, f"cannot offer {name!r}: {one_line(why, 400)}")
    description = one_line(call.arguments.get("description", ""), DESCRIPTION_LIMIT)
    kind = one_line(describe(arrived.value), 200)
    record: dict[str, Any] = {"name": name, "direction": "pull", "offered": True, "local": name,
                              "type": kind, "bytes": arrived.size, "sha256": arrived.sha256}

    def take() -> str:
        """Put the decoded value in the user's kernel (on the person's answer only)."""
        target[name] = arrived.value
        return kind

    offer = Offer(call.id, name, description, kind, arrived.size, arrived.sha256,
                  replaced(target, name), take, arrived.preview)
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
    result = ToolResult(call.id, text, name=call.name, meta={"copies": [record]})
    person_decided(result, "take" if answer.taken else "decline", name, by=answer.by,
                   sha256=arrived.sha256 if answer.taken else None, reason=answer.reason,
                   call_id=call.id, detail="offer_result")
    return result
