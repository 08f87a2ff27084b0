"""The Model protocol and its events: what every client yields and how the loop shows it."""

from __future__ import annotations

from typing import Any, AsyncIterator

from ipyagent import Agent
from ipyagent.context.events import Notice
from ipyagent.context.events import TextDelta as EventsTextDelta
from ipyagent.models.anthropic import AnthropicModel
from ipyagent.models.base import (
    ClientNotice,
    Model,
    ModelEvent,
    ModelRequest,
    Retrying,
    TextDelta,
    Turn,
    TurnComplete,
)
from ipyagent.models.cache import CachedModel
from ipyagent.models.demo import DemoModel
from ipyagent.models.openai_chat import OpenAIChatModel
from ipyagent.models.openai_responses import OpenAIResponsesModel
from ipyagent.models.recorded import ReplayModel
from tests.helpers.scripted_model import ScriptedModel


def test_every_client_and_wrapper_is_a_model(tmp_path: Any) -> None:
    url = "http://127.0.0.1:9/v1"
    clients = [OpenAIChatModel("m", url), OpenAIResponsesModel("m", url), AnthropicModel("m", url),
               DemoModel(), ReplayModel([]), ScriptedModel()]
    clients.append(CachedModel(clients[0], tmp_path / "cache"))
    assert all(isinstance(c, Model) for c in clients)
    assert CachedModel(clients[0], tmp_path / "cache").name == "m"  # the wrapped model's name
    assert not isinstance(object(), Model)


def test_the_events_share_the_models_and_the_loops_types() -> None:
    assert TextDelta is EventsTextDelta  # a listener receives the client's own events
    a, b = Turn(), Turn()
    a.tool_calls.append(None)  # type: ignore[arg-type]
    assert b.tool_calls == [] and ModelRequest("s", []).tools == []  # no shared defaults
    retry = Retrying(2, 3, 1.25, "HTTP 503: down")
    assert retry.message == "HTTP 503: down — retry 2 of 3 in 1.2s"


class Chatty:
    """A model that says it retries and notes something before its answer."""

    name = "chatty"

    async def aclose(self) -> None:
        return None

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield Retrying(1, 3, 0.5, "HTTP 429: slow down")
        yield ClientNotice("replayed from the cache")
        yield TextDelta("answer")
        yield TurnComplete(Turn(text="answer", finish_reason="stop"))


def test_retrying_and_client_notices_reach_the_listeners_as_warnings(tmp_path: Any) -> None:
    seen: list[Any] = []
    with Agent(client=Chatty(), python_tool=False, file_tools=False, cwd=str(tmp_path)) as agent:
        result = agent.run("hi", on_event=seen.append)
    assert result.text == "answer" and result.stop_reason == "done"
    notices = [(e.message, e.level) for e in seen if isinstance(e, Notice)]
    assert notices[:2] == [("HTTP 429: slow down — retry 1 of 3 in 0.5s", "warning"),
                           ("replayed from the cache", "warning")]
    assert [e.text for e in seen if isinstance(e, TextDelta)] == ["answer"]
