"""Tools without native tool calling: a request rewritten so any chat template can carry it.

In ``Agent.tool_mode = "text"`` a request has no ``tools`` field. Instead the system prompt
holds the tool specs and the one call format (``<tool_call>{"name": …, "arguments": {…}}
</tool_call>``, which Hermes/Qwen-family models are trained on), each past call is written
back into its assistant message in that format, and each result goes back as a **user**
message of ``<tool_response>`` blocks: roles every template renders (some never render
``role: "tool"``; some double-encode arguments sent back as ``tool_calls``). It is done
here, on the provider-neutral items, so every wire protocol gets it alike.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any, Sequence

from ..context.items import Item, Message, Reasoning, ToolCall, ToolResult
from .base import ModelRequest
from .profiles.catalog import GENERIC, Profile
from .profiles.grammar import call_grammar
from .profiles.syntax import HERMES, CallSyntax

__all__ = ["as_text_request", "tools_prompt", "render_items", "example_arguments", "AFTER_RESULTS", "FINAL_ANSWER",
           "AS_WRITTEN", "as_written"]


# In text mode a small model writes tool calls, answer or not (Qwen2.5-Coder-0.5B called
# python with its answer as the code, step after step): a tool to answer with gives the
# run a way to end that such a model takes. It runs nothing: the call becomes the answer.
FINAL_ANSWER = "final_answer"
FINAL_ANSWER_SPEC = {
    "name": FINAL_ANSWER,
    "description": "Give the user your final answer, in plain text, and end.",
    "parameters": {"type": "object", "properties": {"answer": {
        "type": "string", "description": "The answer for the user."}},
        "required": ["answer"], "additionalProperties": False},
}


# After a turn's results. Why: measured on Qwen2.5-Coder-0.5B behind llama-cpp-python, the
# results alone (in this format, in Qwen's own, or as native tool messages) made it call the
# tool again with the result as code, step after step; this line made it answer.
AFTER_RESULTS = (f"Answer the user with these results (call {FINAL_ANSWER} with the answer), "
                 "unless you need another tool.")


def as_text_request(request: ModelRequest, profile: Profile = GENERIC, *,
                    grammar: bool = False, reply_must: str = "") -> ModelRequest:
    """``request`` for text mode: no ``tools``/``tool_choice``, specs in the system prompt,
    calls in ``profile``'s syntax, its stop strings; ``grammar``: the reply constrained to
    text or well-formed calls of the offered tools (for a server that takes GBNF), and
    further by ``reply_must``: ``"call"`` (one call of an offered tool, not
    ``final_answer``), ``"say"`` (not empty) or ``"final"``
    (one ``final_answer`` call: the answer, in the form the prompt offers for it)."""
    system, constrain = request.system, None
    syntax = profile.syntax
    if request.tools:
        specs = [*request.tools, FINAL_ANSWER_SPEC]
        section = (qwen_tools_prompt(specs) if profile.name in QWEN_WORDING
                   else tools_prompt(specs, syntax))
        system = (system.rstrip() + "\n\n" if system.strip() else "") + section
        if grammar and reply_must == "call":
            constrain = call_grammar(request.tools, syntax, allow_text=False, one_call=True)
        elif grammar and reply_must == "final":
            constrain = call_grammar([FINAL_ANSWER_SPEC], syntax, allow_text=False, one_call=True)
        elif grammar:
            constrain = call_grammar(specs, syntax, say_something=reply_must == "say")
    return replace(request, system=system, items=render_items(request.items, syntax), tools=[],
                   tool_choice=None, grammar=constrain or request.grammar,
                   stop=tuple(dict.fromkeys((*request.stop, *profile.stop))))


def example_arguments(spec: dict[str, Any]) -> dict[str, Any]:
    """Arguments to show in an example call of ``spec``: its required parameters."""
    if spec.get("name") == "python":
        return {"code": "print(2**100)"}
    params = spec.get("parameters") or {}
    props = params.get("properties") or {}
    names = params.get("required") or list(props)[:1]
    return {n: "..." for n in names}


def _plain(specs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The specs without a ``{"type": "function", "function": …}`` wrapper."""
    return [s.get("function", s) if s.get("type") == "function" else s for s in specs]


def _listing(plain: Sequence[dict[str, Any]]) -> str:
    """The specs one JSON line each, wrapped as chat templates write them."""
    return "\n".join(json.dumps({"type": "function", "function": s}, ensure_ascii=False)
                     for s in plain)


def tools_prompt(specs: Sequence[dict[str, Any]], syntax: CallSyntax = HERMES) -> str:
    """The system prompt's tool section: the specs and exactly how to call one (in
    ``syntax``, the call format the model's family is trained on)."""
    plain = _plain(specs)
    first = plain[0]
    listing = _listing(plain)
    example = syntax.write(str(first.get("name", "tool")), example_arguments(first))
    if syntax is HERMES:  # measured on Qwen2.5-Coder: kept word for word
        how = ("To call a tool, write a JSON object with its name and arguments within "
               "<tool_call></tool_call> tags, exactly like this:\n"
               f"{example}\n\n"
               "Write one <tool_call> block per call, then stop: ")
    else:
        where = f"after {syntax.open.strip()}" if syntax.open else "on its own"
        how = (f"To call a tool, write a JSON object with its name and "
               f"\"{syntax.arguments_key}\" {where}, exactly like this:\n{example}\n\n"
               "Write your calls, then stop: ")
    return ("# Tools\n\n"
            "You may call one or more tools. Their signatures are within <tools></tools>:\n"
            f"<tools>\n{listing}\n</tools>\n\n" + how +
            "each result comes back in a <tool_response> block. When you have the answer, "
            "call final_answer with it (or answer in plain text).")


# The profiles whose text-mode tool section is their chat template's own, word for word.
QWEN_WORDING = ("qwen2.5", "qwen3")


def qwen_tools_prompt(specs: Sequence[dict[str, Any]]) -> str:
    """The tool section exactly as the Qwen2.5/Qwen3 chat template writes it for native tools.

    Why: it is what the model was trained on, and a text-mode request then reads as the
    native one would. Measured at 1.5B (first replies to the twelve tasks of
    ``bench/local_models.py``, greedy, under the grammar): 10 of 12 were calls with this
    wording and 10 of 12 with ``tools_prompt``'s, so neither is known to call more often.
    The listing is ``tools_prompt``'s.
    """
    listing = _listing(_plain(specs))
    return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{listing}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments "
            "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


# Item meta: a text-mode reply exactly as the model wrote it, on the first item made from it
# (its message, or its first call when it had no text), with a digest of what was read from
# it. Why: the model writes its calls in a ```json fence or with its own spacing; written
# back in ``syntax`` instead, the server's prompt cache missed from the first changed token
# on (measured at 1.5B: ~2,650 of 18 tasks' 9,442 evaluated tokens were replies re-read).
AS_WRITTEN = "as_written"


def as_written(reply: str, content: str, calls: Sequence[ToolCall]) -> dict[str, str]:
    """The ``AS_WRITTEN`` meta of a reply ``reply`` read as the message ``content`` and ``calls``."""
    return {"reply": reply, "read_as": _digest(content, calls)}


def _digest(content: str, calls: Sequence[ToolCall]) -> str:
    read = [content, [[c.name, c.arguments, c.raw_arguments] for c in calls]]
    text = json.dumps(read, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _written_turn(items: Sequence[Item], position: int) -> tuple[str, int] | None:
    """``(the reply as written, the position after the turn's items)`` when the turn that
    starts at ``position`` is still exactly what was read from its reply (not edited at
    approval or in the buffer) and none of its calls failed; None otherwise."""
    item = items[position]
    meta = item.meta.get(AS_WRITTEN) if isinstance(item, (Message, ToolCall)) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("reply"), str):
        return None
    if isinstance(item, Message) and item.role != "assistant":
        return None
    content = item.content if isinstance(item, Message) else ""
    end = position + 1 if isinstance(item, Message) else position
    while end < len(items) and isinstance(items[end], ToolCall):
        end += 1
    calls = [c for c in items[position:end] if isinstance(c, ToolCall)]
    if meta.get("read_as") != _digest(content, calls):
        return None
    ids = {c.id for c in calls}
    if any(isinstance(r, ToolResult) and r.call_id in ids and r.error for r in items[end:]):
        # A failed call goes back in ``syntax``. Why: measured at 0.5B, shown its own failing
        # call as it wrote it, it wrote it again word for word until the circuit breaker
        # (4 of 24 tasks); that had not happened with the calls rewritten.
        return None
    return meta["reply"], end


def render_items(items: Sequence[Item], syntax: CallSyntax = HERMES) -> list[Item]:
    """The items with calls written into assistant messages (in ``syntax``, or as the model
    wrote them: ``AS_WRITTEN``) and results as user messages."""
    out: list[Item] = []
    reply: Message | None = None  # the assistant message of the current turn
    skip_to = 0  # items before this were written with their turn's reply

    def user(text: str) -> None:
        last = out[-1] if out else None
        if isinstance(last, Message) and last.role == "user":
            out[-1] = Message("user", last.content + "\n\n" + text)  # one user turn
        else:
            out.append(Message("user", text))

    for position, item in enumerate(items):
        if position < skip_to:
            continue
        as_was = _written_turn(items, position)
        if as_was is not None:
            reply = Message("assistant", as_was[0])
            out.append(reply)
            skip_to = as_was[1]
            continue
        if isinstance(item, ToolCall):
            written = syntax.write(item.name, item.raw_arguments if item.raw_arguments is not None
                                   else item.arguments)
            if reply is None:
                reply = Message("assistant", "")
                out.append(reply)
            reply.content = (reply.content.rstrip() + "\n\n" if reply.content.strip() else "") + written
        elif isinstance(item, Message) and item.role == "assistant":
            reply = Message("assistant", item.content)  # a new turn
            out.append(reply)
        elif isinstance(item, ToolResult):
            reply = None
            user(_response(item))
            if position + 1 == len(items) or not isinstance(items[position + 1], ToolResult):
                user(AFTER_RESULTS)
        elif isinstance(item, Reasoning):
            reply = None
            out.append(item)
        elif isinstance(item, Message) and item.role == "user":
            reply = None
            user(item.content)
        else:
            reply = None
            out.append(item)
    return out


def _response(result: ToolResult) -> str:
    """One result as the model reads it: Qwen's own ``<tool_response>`` block, bare.

    Why bare: measured on Qwen2.5-Coder-0.5B, a block with ``name=``/``error=`` attributes
    had the model answer with those attributes pasted into a call. Results come in the
    order of the calls; an error says so in its own text. A closing tag inside the output
    cannot end the block early.
    """
    body = result.for_model().replace("</tool_response>", "<\\/tool_response>")
    return f"<tool_response>\n{body}\n</tool_response>"
