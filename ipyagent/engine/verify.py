"""Look before answering: when the run's evidence contradicts the final answer, ask again.

A turn with no tool calls is the model's final answer. Before the run ends ``done`` on it,
the rules of ``context.evidence`` hold it against what the run's tools returned (an error
it ignored, an empty, zero or NaN result, a number no output shows, a file it was asked to
write that nothing wrote). When one finds something, the loop tells the model so, once per
kind of finding and at most ``MAX_CHECKS`` times a run, as data: a user-role message that
says it is ipyagent's automatic check and not the person (``meta["check"]`` marks it; chat
APIs have no other role a local template accepts mid-conversation), and the run goes on for
the model to look again. The card and the terminal show one line; the message is in the
context, so a save keeps it and a replay feeds it back as it was (replay runs with the check off, so it never asks twice).

On by default for small or local models (``Agent.verify_answers = "auto"``): a loopback or
private-network endpoint, or a model id that names a size up to 8B; off for others.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from ..context.evidence import (
    ASKS_FOR_A_CALL,
    CHECK_KEY,
    Finding,
    asks_to_run_code,
    code_ran_cleanly,
    error_name,
    findings,
    person_denied,
    run_items,
)
from ..context.items import Item, Message, ToolCall, ToolResult, new_call_id
from ..models.providers import is_local_host
from ..models.written_calls import FROM_TEXT, shown_code
from .view import AgentView

__all__ = ["MAX_CHECKS", "verify_on", "small_model", "look_again", "check_message", "CHECK_LEAD",
           "shown_code_call", "FROM_BLOCK"]

MAX_CHECKS = 2  # verification turns per run, each on something not said before in it
# Rules that read the same evidence (the last call's error): one of them said is both said.
_ERROR_RULES = frozenset({"error_ignored", "last_call_failed"})  # both read the last error
_SAME_EVIDENCE = (_ERROR_RULES,)
CHECK_LEAD = "Note from ipyagent (an automatic check of your answer, not a message from the user):"
# A size in the model id: "qwen2.5-coder-1.5b", "llama3.2:3b", "smollm2-135m", "phi-3-mini-3.8B".
_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", re.I)
SMALL_B = 8.0  # billions of parameters: at most this counts as small
FROM_BLOCK = "from_block"  # ToolCall.meta key: the code is the block the reply showed


def small_model(model: str) -> bool:
    """True when the model id names a size up to ``SMALL_B`` billion parameters."""
    for number, unit in _SIZE.findall(model):
        size = float(number) / (1000 if unit.lower() == "m" else 1)
        if size <= SMALL_B:
            return True
    return False


def verify_on(agent: AgentView) -> bool:
    """Whether ``Agent.verify_answers`` is in force for this agent's model and endpoint."""
    setting = agent.verify_answers
    if setting != "auto":
        return bool(setting)
    if agent.model == "demo":
        return False  # the built-in demo answers from its plan; there is nothing to check
    host = urlsplit(agent.endpoint.base_url).hostname or ""
    return is_local_host(host) or small_model(agent.model)


def check_message(found: list[Finding]) -> Message:
    """The message that asks the model to look again (ipyagent's, labelled so)."""
    asks = " ".join(f.ask for f in found)
    text = (f"{CHECK_LEAD} {asks} If your answer is right after all, give it again; "
            "otherwise correct it.")
    return Message("user", text, meta={CHECK_KEY: {"rules": [f.rule for f in found],
                                                   "said": [f.said for f in found]}})


def look_again(agent: AgentView, answer: str, *, room: bool) -> str | None:
    """Ask the model to look again when the evidence contradicts ``answer`` (already the last
    item of the context); the line to show, or None (the run ends on the answer).

    ``room``: another step fits in ``max_steps``."""
    if not room or not verify_on(agent):
        return None
    items = list(agent.context)
    _, this_run = run_items(items)
    checks = [i for i in this_run if isinstance(i, Message) and CHECK_KEY in i.meta]
    if len(checks) >= MAX_CHECKS or (checks and _answered_the_same(this_run, checks[-1], answer)):
        return None  # a model that gives the same answer again stands by it
    said = {rule for check in checks for rule in _rules(check)}
    said |= {rule for group in _SAME_EVIDENCE if said & group for rule in group}
    if _a_new_error(this_run, checks):
        said -= _ERROR_RULES
    staged = getattr(agent.kernel_if_started, "stage", None) is not None
    can_run = any(t.name in ("python", "shell") for t in agent.offered_tools())
    if agent.approval == "deny":  # no call can run: a check that asks for one would end the run
        said |= set(ASKS_FOR_A_CALL)
    found = findings(items, answer, staged=staged, can_run=can_run, said=frozenset(said))
    if not found:
        return None
    agent.context.append(check_message(found))
    return f"checked the answer: {'; '.join(f.said for f in found)}; asked the model to look again"


def shown_code_call(agent: AgentView, text: str, offered: list[str]) -> tuple[str, ToolCall] | None:
    """``(the reply's other text, a python call of the block it showed)`` when a reply that
    would be the final answer shows Python instead of running it, the task asks for Python
    and no code of this run has run cleanly yet; None otherwise.

    Why: asked to use Python, a small model shows a ```` ```python ```` block ("when you run
    this code, it will output …"); asked to run it, the 1.5B rewrote it as a one-line call
    and dropped a line. The block is the model's own code; the call goes to approval like
    any other, and the card says where it came from. Only where answers are checked
    (``verify_on``): the same small or local models."""
    if "python" not in offered or not verify_on(agent) or agent.approval == "deny":
        return None  # under "deny" the call would only end the run: the block stays an answer
    task, this_run = run_items(list(agent.context))
    if not asks_to_run_code(task) or code_ran_cleanly(this_run):
        return None
    if person_denied(this_run):
        return None  # the person said no to a call: code they are shown is theirs to run
    shown = shown_code(text)
    if shown is None:
        return None
    around, code = shown
    return around, ToolCall(new_call_id(), "python", {"code": code},
                            meta={FROM_TEXT: True, FROM_BLOCK: True})


def _a_new_error(this_run: list[Item], checks: list[Message]) -> bool:
    """The last call failed with another error than the one the last error check was about
    (seen at 1.5B: told of a ValueError, it wrote another call, which failed with a
    NameError, and answered with its code's own "No product found" unchecked)."""
    about = [c for c in checks if set(_rules(c)) & _ERROR_RULES]
    if not about:
        return False
    at = next(n for n, i in enumerate(this_run) if i is about[-1])  # not by equality
    then = next((i for i in reversed(this_run[:at]) if isinstance(i, ToolResult)), None)
    now = next((i for i in reversed(this_run[at:]) if isinstance(i, ToolResult)
                and not i.meta.get("skipped") and not i.meta.get("denied")), None)
    return (then is not None and now is not None and now.error
            and error_name(now) is not None and error_name(now) != error_name(then))


def _rules(check: Message) -> list[str]:
    meta = check.meta.get(CHECK_KEY)
    rules = meta.get("rules") if isinstance(meta, dict) else None
    return [r for r in rules if isinstance(r, str)] if isinstance(rules, list) else []


def _answered_the_same(this_run: list[Item], check: Message, answer: str) -> bool:
    """The answer is the one the last check was about, word for word (spacing aside), and
    no call ran since that check (so there is no new evidence to hold it against)."""
    at = next(i for i, item in enumerate(this_run) if item is check)
    if any(isinstance(i, ToolResult) for i in this_run[at:]):
        return False
    before = [i for i in this_run[:at] if isinstance(i, Message) and i.role == "assistant"]
    return bool(before) and " ".join(before[-1].content.split()) == " ".join(answer.split())
