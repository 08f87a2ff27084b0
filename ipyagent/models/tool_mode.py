"""Which way the tools travel in a conversation: the native ``tools`` field, or text.

``Agent.tool_mode`` is ``"native"``, ``"text"`` or ``"auto"``. Under ``auto`` a conversation
starts native and switches to text **for the rest of the conversation** (one notice says
so and why) when the server refuses tools, answers a request carrying tools with an empty
stream, seems to drop the tools from the prompt, or when the model writes its calls as text
instead of using the native channel.

The switch is a fact about the conversation, so it is kept in it: each turn's
``meta["turn"]`` records the mode its request went in (``tool_mode``) and, on the turn that
switched, why (``tool_mode_switch``). A saved transcript, once loaded, goes on in the mode
it was in; a new conversation (a new ``Context``) starts native again.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable, Literal

from .._util.text import one_line
from ..context.items import Item, Summary, unfold_dicts
from ..context.spill import raw_replaced

if TYPE_CHECKING:
    from ..errors import ConfigError, ModelError

__all__ = ["TOOL_MODES", "Wire", "MODE_KEY", "SWITCH_KEY", "TEXT_ALREADY", "ToolModeState",
           "refused_tools", "empty_stream", "dropped_tools", "switch_notice", "text_start_notice"]

TOOL_MODES = ("auto", "native", "text")
Wire = Literal["native", "text"]
MODE_KEY = "tool_mode"  # meta["turn"]: the mode the turn's request was sent in
SWITCH_KEY = "tool_mode_switch"  # meta["turn"]: why "auto" switched to text at this turn

TEXT_ALREADY = "this conversation's requests went as text"  # why, when no switch said so
# What servers say when they will not take tools: Ollama ("… does not support tools"), a
# validation error naming the ``tools`` field, vLLM's "auto" tool choice without its flags.
_REFUSED = re.compile(r"does not support tools|\btools\b|tool[ _]choice|function[ _]calling",
                      re.I)
# llama-cpp-python's chatml-function-calling with a streamed tool_choice "auto": HTTP 200
# and an empty body. The client's message for it starts with this stable phrase.
EMPTY_STREAM = "the stream ended before any event"


class ToolModeState:
    """The conversation's mode under ``auto``: native until ``text_because`` is set."""

    def __init__(self, text_because: str | None = None) -> None:
        self.text_because = text_because
        self.lean_said = False  # the line on the tools text mode leaves out was shown

    @classmethod
    def of(cls, items: Iterable[Item]) -> ToolModeState:
        """The mode a conversation with these items is in (a compacted turn counts too)."""
        for turn in _turn_metas(items):
            why = turn.get(SWITCH_KEY)
            if why or turn.get(MODE_KEY) == "text":
                return cls(str(why or TEXT_ALREADY))
        return cls()

    def wire(self, setting: str) -> Wire:
        """How the next request carries the tools under ``Agent.tool_mode = setting``."""
        if setting == "auto":
            return "text" if self.text_because else "native"
        return "text" if setting == "text" else "native"

    def describe(self, setting: str) -> str:
        """For people: the setting and, under ``auto``, the mode in force."""
        if setting != "auto":
            return setting
        return f"auto (text: {self.text_because})" if self.text_because else "auto (native)"

    def __repr__(self) -> str:
        return f"<ToolModeState {'text' if self.text_because else 'native'}>"


def _turn_metas(items: Iterable[Item]) -> Iterable[dict[str, Any]]:
    for item in items:
        if isinstance(item, Summary):
            for d in unfold_dicts(raw_replaced(item)):
                turn = (d.get("meta") or {}).get("turn")
                if isinstance(turn, dict):
                    yield turn
        else:
            turn = item.meta.get("turn")
            if isinstance(turn, dict):
                yield turn


def refused_tools(exc: ModelError | ConfigError) -> str | None:
    """Why the server refused a request carrying tools, in a few words; None otherwise."""
    from ..errors import ModelHTTPError, ModelStreamError

    if isinstance(exc, (ModelHTTPError, ModelStreamError)) and _REFUSED.search(str(exc)):
        return f"the server refused native tool calling ({one_line(exc, 160)})"
    return None


def empty_stream(exc: ModelError | ConfigError) -> str | None:
    """Why: a request carrying tools got an empty 200 stream (chatml-function-calling)."""
    if EMPTY_STREAM in str(exc):
        return ("the server answered a request carrying tools with an empty stream "
                "(llama-cpp-python's chatml-function-calling cannot stream tool_choice 'auto')")
    return None


def dropped_tools(reported_input: int, without_tools: int, tools: int) -> str | None:
    """Why: the server counted about as many prompt tokens as the messages alone need.

    ``without_tools`` and ``tools`` are our (uncalibrated) estimates. Only a clear case
    counts: tool specs big enough to see (>= 150 tokens), a reported count consistent with
    the messages alone (at least half of them: a bogus tiny count is no evidence) and well
    short of messages plus a quarter of the specs (templates render specs compactly).
    """
    if tools < 150 or reported_input <= 0:
        return None
    if without_tools * 0.5 <= reported_input < without_tools + 0.25 * tools:
        return (f"the server's chat template seems to drop the tools: it counted "
                f"{reported_input:,} prompt tokens, while the messages alone are about "
                f"{without_tools:,} and the tool specs about {tools:,} more")
    return None


def switch_notice(why: str, *, resend: bool) -> str:
    """The one line that says the conversation now carries its tools as text."""
    then = ("the request is sent again with the tools" if resend else "from the next request the tools go")
    return (f"Tool calls as text from now on: {why}; {then} in the system prompt and calls "
            "are read from the reply, for the rest of this conversation (Agent.tool_mode="
            "'auto'; set 'text' to start that way, or 'native' to never switch).")


def text_start_notice(why: str) -> str:
    """The one line that says a new conversation carries its tools as text from the start."""
    return (f"Tool calls as text from the start: {why}; the tools go in the system prompt and "
            "calls are read from the reply, for this conversation (Agent.tool_mode='auto'; set "
            "'native' to send them in the tools field anyway).")
