"""The time limits of a model request hold against real servers on 127.0.0.1 that keep a
connection busy without answering: keep-alive comments forever, one byte at a time, a
long wait before the first byte, events that never end. Each ends in one line naming the
limit and the setting to raise; only a stall mid-reply is retried."""

from __future__ import annotations

from typing import Any

import pytest

from ipyagent.context.events import Discarded, TextDelta
from ipyagent.context.items import Message
from ipyagent.errors import ModelTimeoutError
from ipyagent.models.anthropic import AnthropicModel
from ipyagent.models.base import ModelRequest, Retrying
from ipyagent.models.openai_responses import OpenAIResponsesModel
from ipyagent.models.timeouts import Timeouts
from tests.helpers.scripted_apis import anthropic_reply, responses_reply
from tests.helpers.scripted_server import Endless, Trickle, collect, reply_text, sse_event

KEY = "sk-SENTINEL-timeouts7"


def ask() -> ModelRequest:
    return ModelRequest("You are terse.", [Message("user", "hi")])


def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    return sse_event({"object": "chat.completion.chunk", "model": "m",
                      "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


HALF = chunk({"role": "assistant", "content": "The answer"})


async def events_until_error(stream: Any) -> tuple[list[Any], BaseException]:
    seen: list[Any] = []
    with pytest.raises(ModelTimeoutError) as info:
        async for event in stream:
            seen.append(event)
    return seen, info.value


async def test_keepalives_forever_end_at_the_first_token_limit_and_are_not_retried(
        scripted_server, make_model) -> None:
    scripted_server.script([Endless(": keep-alive\n\n", every=0.1), reply_text("never asked for")])
    model = make_model(timeouts=Timeouts(first_token=0.5, idle=0.2), max_retries=3)
    seen, error = await events_until_error(model.stream(ask()))
    assert str(error) == ("no reply within Agent.first_token_timeout=0.5 s (keep-alives do not "
                          "count): raise it for a slow server — a CPU model can read a long prompt "
                          f"for minutes ({scripted_server.base_url}/chat/completions)")
    # a slow server is as slow again: one request, no Retrying
    assert seen == [] and len(scripted_server.bodies) == 1


async def test_a_wait_before_the_first_byte_ends_at_the_first_token_limit(scripted_server, make_model) -> None:
    scripted_server.script([reply_text("late", delay=1.5), reply_text("never asked for")])
    model = make_model(timeouts=Timeouts(first_token=0.3), max_retries=2)
    _, error = await events_until_error(model.stream(ask()))
    assert "Agent.first_token_timeout=0.3 s" in str(error) and len(scripted_server.bodies) == 1


async def test_events_without_a_token_do_not_start_the_reply(scripted_server, make_model) -> None:
    """A Responses-style stream that says it is working, then thinks unseen for too long."""
    role_only = chunk({"role": "assistant", "content": ""})
    scripted_server.script([Endless(": keep-alive\n\n", before=role_only + role_only, every=0.1)])
    model = make_model(timeouts=Timeouts(first_token=0.5, idle=0.2), max_retries=0)
    seen, error = await events_until_error(model.stream(ask()))
    assert seen == [] and str(error).startswith(
        "no reply within Agent.first_token_timeout=0.5 s (keep-alives do not count; 2 events, "
        "no token yet): raise it")


async def test_one_byte_at_a_time_is_not_an_event(scripted_server, make_model) -> None:
    scripted_server.script([Trickle(HALF + chunk({}, "stop"), every=0.2)])
    _, error = await events_until_error(make_model(timeouts=Timeouts(first_token=0.5)).stream(ask()))
    assert "no reply within Agent.first_token_timeout=0.5 s" in str(error)


async def test_a_reply_that_trickles_after_it_started_stalls_at_the_idle_limit(
        scripted_server, make_model) -> None:
    scripted_server.script([Trickle(chunk({"content": " is 42"}) + chunk({}, "stop"), before=HALF, every=0.2)])
    model = make_model(timeouts=Timeouts(idle=0.5), max_retries=0)
    seen, error = await events_until_error(model.stream(ask()))
    assert str(error).startswith("the reply stalled: no event for Agent.idle_timeout=0.5 s after 1 "
                                 "event (keep-alives and partial lines do not count); raise it")
    assert [type(e) for e in seen] == [TextDelta, Discarded]
    assert seen[1].line == "discarded: the reply stalled"


async def test_keepalives_after_the_reply_started_are_a_stall_that_is_asked_again(
        scripted_server, make_model) -> None:
    scripted_server.script([Endless(": ping\n\n", before=HALF, every=0.1), reply_text("The answer is 42.")])
    model = make_model(timeouts=Timeouts(idle=0.5), max_retries=1)
    events, turn = await collect(model.stream(ask()))
    assert turn.text == "The answer is 42." and len(scripted_server.bodies) == 2
    kinds = [type(e).__name__ for e in events]
    assert kinds[:3] == ["TextDelta", "Discarded", "Retrying"]
    retry = next(e for e in events if isinstance(e, Retrying))
    assert "Agent.idle_timeout=0.5 s" in retry.message and "retry 1 of 1" in retry.message


async def test_events_that_never_end_stop_at_the_request_limit(scripted_server, make_model) -> None:
    scripted_server.script([Endless(chunk({"content": "."}), before=HALF, every=0.05), reply_text("never")])
    model = make_model(timeouts=Timeouts(idle=0.3, total=0.8), max_retries=3)
    seen, error = await events_until_error(model.stream(ask()))
    assert str(error) == ("no complete reply within Agent.request_timeout=0.8 s (retries included): "
                          "raise it for long replies from a slow server "
                          f"({scripted_server.base_url}/chat/completions)")
    assert len(scripted_server.bodies) == 1 and isinstance(seen[-1], Discarded)
    assert seen[-1].line == "discarded: out of time (Agent.request_timeout)"  # no "asking again"


async def test_no_limit_at_zero(scripted_server, make_model) -> None:
    scripted_server.script([Trickle(HALF + chunk({}, "stop"), every=0.01)])
    _, turn = await collect(make_model(timeouts=Timeouts(first_token=0, idle=0, total=0)).stream(ask()))
    assert turn.text == "The answer"


async def test_the_old_timeout_argument_is_the_idle_limit(make_model) -> None:
    model = make_model(timeout=7)
    assert model.timeouts == Timeouts(first_token=600, idle=7, total=1800)


@pytest.mark.parametrize("api", ["responses", "anthropic"])
async def test_every_wire_format_holds_to_the_limits(scripted_server, api) -> None:
    reply = responses_reply("hi") if api == "responses" else anthropic_reply("hi")
    scripted_server.script([Endless(": keep-alive\n\n", every=0.1), reply])
    client = OpenAIResponsesModel if api == "responses" else AnthropicModel
    async with client("m", scripted_server.base_url, KEY, timeouts=Timeouts(first_token=0.4),
                      backoff=0) as model:
        _, error = await events_until_error(model.stream(ask()))
        assert "no reply within Agent.first_token_timeout=0.4 s" in str(error)
        _, turn = await collect(model.stream(ask()))  # the limits do not break a good reply
    assert turn.text == "hi"


@pytest.mark.parametrize("api", ["responses", "anthropic"])
async def test_every_wire_format_asks_again_after_a_drop_mid_reply(scripted_server, api) -> None:
    from tests.helpers.scripted_server import Reset

    make = responses_reply if api == "responses" else anthropic_reply
    usage = ({"input_tokens": 30, "output_tokens": 4, "total_tokens": 34} if api == "responses"
             else {"input_tokens": 30, "output_tokens": 4})
    first = make("Half of an answer", usage=usage).events({}, 1)
    cut = 5 if api == "responses" else 4  # past the first text deltas, before the end
    scripted_server.script([Reset("".join(first[:cut])), make("The whole answer.")])
    client = OpenAIResponsesModel if api == "responses" else AnthropicModel
    async with client("m", scripted_server.base_url, KEY, backoff=0) as model:
        events, turn = await collect(model.stream(ask()))
    assert turn.text == "The whole answer." and len(scripted_server.bodies) == 2
    discarded = [e for e in events if isinstance(e, Discarded)]
    assert [e.line for e in discarded] == ["discarded: the connection dropped; asking again"]
    shown = "".join(e.text for e in events[: events.index(discarded[0])] if isinstance(e, TextDelta))
    assert shown and "Half of an answer".startswith(shown)
    if api == "anthropic":  # its input tokens come first, in message_start: still billed
        assert discarded[0].usage["input_tokens"] == 30
