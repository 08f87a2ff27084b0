"""Copies between the user's kernel and the sibling: explicit, one value at a time, recorded.

Nothing is shared: ``push`` pickles a value of the user's kernel into the sibling (where a
pickle can do nothing the model's code could not), ``pull`` brings a copy of a sibling value
back as data, never as a pickle (``trust``), and each copy becomes a user message in the context
(``meta["copy"]``: name, type, size, sha256, and the payload when small) — so the model
knows the name now exists where its code runs, and the transcript can recreate it.
"""

from __future__ import annotations

import base64
import re
from typing import Any, Callable, Mapping, Protocol

from .._util.text import one_line
from ..context.buffer import Context
from ..context.decisions import Decision
from ..context.items import Message, ToolCall, ToolResult
from ..trust.provenance import RanHere
from .base import Kernel
from .namespace import copy_record, describe
from .transfer import serialize

__all__ = ["push", "pull", "KEEP_PAYLOAD", "human_size", "recorded_copies", "copy_missing",
           "missing_name", "CopyAgent", "CopyPolicy", "Decider"]


class Decider(Protocol):
    """Anything that decides on a tool call (``engine.approval.Approver`` names the same)."""

    async def decide(self, call: ToolCall) -> Decision: ...


class CopyPolicy(Decider, Protocol):
    """``engine.approval.ApprovalPolicy`` as a copy asks it: itself, or the person (``ui``)."""

    @property
    def ui(self) -> Decider | None: ...


class CopyAgent(Protocol):
    """What copies use of ``engine.agent.Agent`` (a layer above: named, not imported)."""

    @property
    def context(self) -> Context: ...
    @property
    def kernel(self) -> Kernel: ...
    @property
    def ran_here(self) -> RanHere: ...
    @property
    def approval(self) -> str: ...
    @property
    def copy_limit(self) -> str: ...
    @property
    def copy_source(self) -> Callable[[], Mapping[str, Any]] | None: ...
    @property
    def policy(self) -> CopyPolicy: ...

KEEP_PAYLOAD = 256 * 1024  # pickled bytes kept in the transcript (larger: a note says so)


def human_size(n: int) -> str:
    """``180 KB``, ``1.2 MB``."""
    size = float(n)
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{int(size)} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} bytes"


def _record(agent: CopyAgent, text: str, record: dict[str, Any]) -> None:
    """The copy as a user message (the model learns of it) and a row of the audit."""
    from ..context.audit import person_decided

    message = Message("user", text, meta={"copy": record})
    agent.context.append(message)
    verb = str(record["direction"])
    person_decided(message, verb, str(record.get("local") or record["name"]), by="user",
                   sha256=record.get("sha256"), detail=f"%agent {verb} or agent.{verb}()")
    agent.ran_here.add_copy(record.get("sha256"))  # the user's own: a rewind redoes it unasked


async def _push_one(agent: CopyAgent, name: str, value: Any, payload: str) -> dict[str, Any]:
    await agent.kernel.push_payload_async(payload, [name])
    record = copy_record(name, value, base64.b64decode(payload), keep_below=KEEP_PAYLOAD)
    record["direction"] = "push"
    return record


def secret_problem(agent: CopyAgent, name: str, value: Any, payload: str | None = None) -> str | None:
    """Why ``value`` may not go into the sibling unasked (it holds a secret: by its name, its
    text, anywhere inside, or in its pickled bytes; or it is ipyagent's own), or None."""
    from ..trust.secrets import find_secret, key_envs, secret_values
    from ..trust.secrets_in import own_object, secret_inside, secret_name

    secrets = secret_values(key_envs(agent))
    if own_object(value):
        return f"{name} is ipyagent's own {type(value).__name__}"
    if secret_name(name):
        return f"its name ({name}) looks secret"
    found = secret_inside(value, secrets, name)
    if found:
        return found
    if payload is not None and secrets:  # an object's attributes that no walk reached
        leaked = find_secret(base64.b64decode(payload).decode("latin-1"), secrets)
        if leaked:
            return f"{name} holds the value of ${leaked} somewhere inside"
    return None


async def push(agent: CopyAgent, values: dict[str, Any]) -> list[dict[str, Any]]:
    """Copy each of ``values`` into the sibling; the records (also appended to the context)."""
    payloads: dict[str, str] = {}
    for name, value in values.items():  # all or none: check every one before copying any
        why = secret_problem(agent, name, value)  # before pickling: the agent itself cannot be
        if not why:
            payloads[name] = serialize({name: value}, agent.kernel.max_transfer_bytes)
            why = secret_problem(agent, name, value, payloads[name])
        if why:
            raise ValueError(f"cannot push {name!r}: {why}; nothing was copied (the sandbox has a "
                             "network: secrets stay in your kernel). Push a copy without it")
    records = []
    for name, value in values.items():
        payload = payloads[name]
        record = await _push_one(agent, name, value, payload)
        _record(agent, f"[ipyagent: the user copied `{name}` ({one_line(describe(value), 200)}, "
                       f"{human_size(record['bytes'])} pickled) from the user's kernel into your "
                       f"python kernel; it is defined there now]", record)
        records.append(record)
    return records


_NAME_ERROR = re.compile(r"NameError: name '([A-Za-z_]\w*)' is not defined")
MAX_COPIES_PER_CALL = 5


def missing_name(result: ToolResult) -> str | None:
    """The name a failed python call's ``NameError`` reports, if any."""
    if not result.error:
        return None
    found = _NAME_ERROR.findall(result.output)
    return found[-1] if found else None


async def copy_missing(agent: CopyAgent, call: ToolCall, result: ToolResult,
                       emit: Callable[[Any], None]) -> bool:
    """After a python call failed with ``NameError`` for a variable the user's kernel has:
    offer the copy (``auto`` copies up to ``Agent.copy_limit`` unasked). True when copied,
    so the call should run again; else the result says why the value was not shared."""
    from ..context.events import Notice
    from ..context.items import new_call_id
    from .process import parse_memory

    name = missing_name(result)
    source = agent.copy_source
    if name is None or source is None:
        return False
    available = source()
    if name not in available:
        return False
    value = available[name]
    copies = result.meta.setdefault("copies", [])
    asked: str | None = None  # how the copy was answered, when someone was asked
    by = "policy"  # auto, under copy_limit: nobody was asked

    def refused(why: str) -> bool:
        copies.append({"name": name, "direction": "push", "copied": False, "reason": why})
        if asked is not None:  # a person (or a hook) said no: a row of the audit
            from ..context.audit import person_decided

            person_decided(result, "decline", name, by=asked, reason=why, call_id=call.id,
                           detail="copy offered after a NameError")
        result.output += (f"\n[ipyagent: `{name}` exists in the user's kernel but was not copied "
                          f"into yours: {why}. Do not assume it; ask the user, or work without it.]")
        return False

    if agent.approval == "deny":
        return refused("approval is 'deny'")
    try:
        payload = serialize({name: value}, agent.kernel.max_transfer_bytes)
    except (TypeError, ValueError) as exc:
        return refused(one_line(exc, 300))
    size = len(payload) * 3 // 4
    what = f"`{name}` ({one_line(describe(value), 200)}, ~{human_size(size)})"
    limit = parse_memory(agent.copy_limit) or 0
    # A value holding a secret is put to a person under every mode (the sandbox has a
    # network): no auto, allow-list or earlier "always" copies it unasked.
    secret = secret_problem(agent, name, value, payload)
    if secret or not (agent.approval == "auto" and size <= limit):
        question = ToolCall(new_call_id(), "copy_variable", {
            "name": name, "value": one_line(describe(value), 200), "size": human_size(size),
            "from": "your kernel", "into": "the agent's kernel",
            **({"warning": f"{secret} — the agent's kernel has a network"} if secret else {})})
        emit(Notice(f"copy {what} from your kernel into the agent's kernel?"
                    + (f" Careful: {secret}" if secret else ""), "warning" if secret else "info"))
        ui = agent.policy.ui
        if agent.approval == "auto" or secret:  # over copy_limit, or a secret: a person is asked
            decision = await ui.decide(question) if ui is not None else None
        else:
            decision = await agent.policy.decide(question)
        asked = (decision.by or "hook") if decision is not None else None
        if decision is None or not decision.approved:
            reason = (decision.reason if decision is not None else "") or "the user did not approve the copy"
            return refused(one_line(reason, 300))
        by = asked or by
    record = await _push_one(agent, name, value, payload)
    record["copied"] = True
    copies.append(record)
    from ..context.audit import person_decided

    person_decided(result, "push", name, by=by, sha256=record["sha256"], call_id=call.id,
                   detail="copy offered after a NameError")
    emit(Notice(f"copied {what} from your kernel into the agent's kernel", "info"))
    return True


async def pull(agent: CopyAgent, name: str, local: str | None = None) -> Any:
    """A copy of the sibling's ``name``, decoded here as data (never unpickled), recorded
    with the sha256 of the bytes that crossed; the caller puts it in the user's kernel."""
    from ..trust.values import Undecodable, arrive

    data = await agent.kernel.pull_payload_async(name)
    try:
        arrived = arrive(data)
    except Undecodable as exc:
        raise TypeError(f"cannot copy {name!r}: what the agent's kernel sent is not a value "
                        f"this side reads ({exc})") from None
    value = arrived.value
    record = copy_record(name, value, data, keep_below=0)
    record.update(direction="pull", local=local or name)
    record.pop("note", None)
    as_ = f" as `{local}`" if local and local != name else ""
    _record(agent, f"[ipyagent: the user took a copy of `{name}` ({one_line(describe(value), 200)}) "
                   f"from your python kernel into their kernel{as_}]", record)
    return value


def recorded_copies(items: Any) -> list[dict[str, Any]]:
    """The pushes recorded in ``items`` (a context), oldest first: ``%agent push`` and
    ``--with`` as user items, the copies a ``NameError`` offered in a result's meta."""
    out = []
    for item in items:
        meta = getattr(item, "meta", None) or {}
        found = [meta["copy"]] if isinstance(meta.get("copy"), dict) else list(meta.get("copies") or [])
        out += [c for c in found if c.get("direction") == "push" and c.get("copied", True)]
    return out
