"""A model client that replays scripted turns in-process (a fake at the Model seam).

For loop-logic tests only; wire-format behaviour is tested against a real HTTP server.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Callable, Union

from ipyagent.context.items import ToolCall
from ipyagent.errors import ModelError
from ipyagent.models.base import (
    ModelEvent,
    ModelRequest,
    TextDelta,
    ToolCallDelta,
    Turn,
    TurnComplete,
)

Reply = Union[Turn, Exception, Callable[[ModelRequest], Turn]]


def text(t: str, **usage: int) -> Turn:
    return Turn(text=t, finish_reason="stop", usage=usage or None)


def calls(*specs: tuple[str, dict[str, Any]], text: str = "", **usage: int) -> Turn:
    tcs = [ToolCall(id=f"call_{i}_{name}", name=name, arguments=args)
           for i, (name, args) in enumerate(specs)]
    return Turn(text=text, tool_calls=tcs, finish_reason="tool_calls", usage=usage or None)


class ScriptedModel:
    """Yields the scripted replies in order; records every request."""

    name = "scripted"

    def __init__(self, replies: list[Reply] | None = None) -> None:
        self.replies: list[Reply] = list(replies or [])
        self.requests: list[ModelRequest] = []

    async def aclose(self) -> None:
        return None

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(ModelRequest(**{**request.__dict__, "items": list(request.items)}))
        if not self.replies:
            raise ModelError("scripted model: no reply left")
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        turn = reply(request) if callable(reply) else reply
        # Fresh ToolCall objects each time, as a real client would build.
        turn = Turn(text=turn.text, finish_reason=turn.finish_reason, usage=turn.usage,
                    tool_calls=[ToolCall(c.id, c.name, dict(c.arguments), c.raw_arguments)
                                for c in turn.tool_calls])
        if turn.text:
            yield TextDelta(turn.text)
        for i, c in enumerate(turn.tool_calls):
            yield ToolCallDelta(i, c.id, c.name, json.dumps(c.arguments))
        yield TurnComplete(turn)
