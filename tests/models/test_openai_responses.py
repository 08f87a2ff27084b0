"""OpenAIResponsesModel against a real HTTP server on 127.0.0.1 speaking the Responses API."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ipyagent import Agent, Message, Reasoning, Summary, ToolCall, ToolResult
from ipyagent.errors import ModelResponseError, ModelStreamError, RequestRejected
from ipyagent.models.base import ModelRequest, ReasoningDelta, TextDelta, ToolCallDelta
from ipyagent.models.openai_responses import OpenAIResponsesModel, to_responses_input
from tests.helpers.scripted_apis import responses_error, responses_reply, without_sleeps
from tests.helpers.scripted_server import ScriptedServer, collect, http_error, raw_sse, sse_event
from tests.helpers.tools import add

KEY = "sk-SENTINEL-responses-9876"


def model(srv: ScriptedServer, **kw: Any) -> OpenAIResponsesModel:
    return without_sleeps(OpenAIResponsesModel("gpt-test", srv.base_url, KEY, backoff=0, **kw))


def request(*items: Any, **kw: Any) -> ModelRequest:
    return ModelRequest("Be brief.", list(items) or [Message("user", "hi")], **kw)


def test_two_step_tool_loop_through_the_agent(scripted_server: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """call -> result -> answer, with the reasoning item sent back before the call."""
    monkeypatch.setenv("IPYAGENT_TEST_KEY", KEY)
    scripted_server.script([
        responses_reply(tool_calls=[("add", {"a": 2, "b": 3}, "call_abc")],
                        reasoning="Two plus three: use the tool.", encrypted="gAAAA-opaque"),
        responses_reply("The sum is 5."),
    ])
    agent = Agent(model="gpt-test", api="responses", base_url=scripted_server.base_url, file_tools=False,
                  api_key_env="IPYAGENT_TEST_KEY", tools=[add], python_tool=False, skills_enabled=False)
    result = agent.run("What is 2+3?")

    assert result.stop_reason == "done" and result.text == "The sum is 5."
    assert [type(i).__name__ for i in agent.context] == ["Message", "Reasoning", "ToolCall", "ToolResult", "Message"]
    reasoning, call, output = agent.context[1], agent.context[2], agent.context[3]
    assert reasoning.content == "Two plus three: use the tool."
    assert call.id == "call_abc" and call.meta["item_id"] == "fc_1_0" and output.output == "5"
    assert result.usage.input > 0 and not result.usage.estimated  # the server's own counts

    first, second = scripted_server.requests
    assert first.path == second.path == "/v1/responses"
    assert first.headers["authorization"] == f"Bearer {KEY}"
    assert first.body["instructions"] == agent.context.system and first.body["store"] is False
    assert first.body["tools"] == [{"type": "function", "name": "add", "description": "Add two integers.",
                                    "parameters": add.parameters, "strict": False}]
    assert second.body["input"] == [
        {"role": "user", "content": "What is 2+3?"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Two plus three: use the tool."}],
         "encrypted_content": "gAAAA-opaque"},
        {"type": "function_call", "call_id": "call_abc", "name": "add", "arguments": '{"a": 2, "b": 3}'},
        {"type": "function_call_output", "call_id": "call_abc", "output": "5"},
    ]


async def test_streams_text_reasoning_and_parallel_calls(scripted_server: ScriptedServer) -> None:
    scripted_server.script([responses_reply("Adding both.", reasoning="Think first.",
                                   tool_calls=[("add", {"a": 1, "b": 2}), ("add", '{"a": 3, "b": 4}')])])
    async with model(scripted_server) as m:
        events, turn = await collect(m.stream(request()))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == turn.text == "Adding both."
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == turn.reasoning.content == "Think first."
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [
        ("call_1_0", "add", {"a": 1, "b": 2}), ("call_1_1", "add", {"a": 3, "b": 4})]
    starts = [(e.index, e.id) for e in events if isinstance(e, ToolCallDelta) and e.name]
    assert starts == [(0, "call_1_0"), (1, "call_1_1")]
    for i, call in enumerate(turn.tool_calls):
        assert json.loads("".join(e.arguments for e in events if isinstance(e, ToolCallDelta) and e.index == i)) == call.arguments
    assert turn.finish_reason == "completed" and turn.model == "scripted-responses"
    # No encrypted content: the item is kept (transcript) but there is nothing to replay.
    assert turn.reasoning.details["reasoning_items"][0]["id"] == "rs_1"
    assert to_responses_input([turn.reasoning]) == []


async def test_summary_parts_read_as_paragraphs() -> None:
    from ipyagent.models.openai_responses import ResponsesTurnAssembler

    a = ResponsesTurnAssembler()
    for part, text in ((0, "First."), (0, " More."), (1, "Second.")):
        a.feed("response.reasoning_summary_text.delta",
               {"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": part, "delta": text})
    assert a.turn().reasoning.content == "First. More.\n\nSecond."


@pytest.mark.parametrize("failed", [True, False], ids=["response.failed", "error-event"])
async def test_error_inside_a_200_stream(scripted_server: ScriptedServer, failed: bool) -> None:
    scripted_server.script([responses_error("The model is overloaded.", "server_is_overloaded", failed=failed, text="Par")])
    async with model(scripted_server) as m:
        with pytest.raises(ModelStreamError) as info:
            await collect(m.stream(request()))
    text = str(info.value)
    assert "The model is overloaded. [server_is_overloaded]" in text and "\n" not in text
    assert info.value.turn.text == "Par"  # type: ignore[attr-defined]
    assert len(scripted_server.requests) == 1  # an error the provider reported is not retried


async def test_5xx_is_retried_then_succeeds(scripted_server: ScriptedServer) -> None:
    scripted_server.script([http_error(503, {"error": {"message": "busy"}}), responses_reply("ok")])
    async with model(scripted_server) as m:
        _, turn = await collect(m.stream(request()))
    assert turn.text == "ok" and len(scripted_server.requests) == 2


async def test_auth_error_is_one_line_without_the_key(scripted_server: ScriptedServer) -> None:
    scripted_server.script([http_error(401, {"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}})])
    async with model(scripted_server) as m:
        with pytest.raises(RequestRejected) as info:
            await collect(m.stream(request()))
    assert KEY not in str(info.value) and "Incorrect API key provided" in str(info.value)
    assert len(scripted_server.requests) == 1


async def test_incomplete_response_reports_why(scripted_server: ScriptedServer) -> None:
    scripted_server.script([responses_reply("Cut sho", incomplete="max_output_tokens")])
    async with model(scripted_server) as m:
        _, turn = await collect(m.stream(request(max_tokens=5)))
    assert turn.text == "Cut sho" and turn.finish_reason == "max_output_tokens"
    assert scripted_server.requests[0].body["max_output_tokens"] == 5


async def test_a_json_body_instead_of_a_stream(scripted_server: ScriptedServer) -> None:
    scripted_server.script([responses_reply("whole", tool_calls=[("add", {"a": 1, "b": 1})], reasoning="hm", stream=False)])
    async with model(scripted_server) as m:
        events, turn = await collect(m.stream(request()))
    assert turn.text == "whole" and turn.tool_calls[0].arguments == {"a": 1, "b": 1}
    assert turn.reasoning.content == "hm" and turn.usage["input_tokens"] > 0
    assert [type(e).__name__ for e in events] == ["ReasoningDelta", "TextDelta", "ToolCallDelta", "ToolCallDelta", "TurnComplete"]


async def test_only_a_completed_event_still_gives_the_turn(scripted_server: ScriptedServer) -> None:
    """A server that sends just ``response.completed`` (no item events): output is read from it."""
    response = responses_reply("late", tool_calls=[("add", {"a": 0, "b": 0})]).response({}, 1)
    scripted_server.script([raw_sse(sse_event({"type": "response.completed", "response": response}, "response.completed"))])
    async with model(scripted_server) as m:
        _, turn = await collect(m.stream(request()))
    assert turn.text == "late" and [c.name for c in turn.tool_calls] == ["add"]


async def test_an_empty_stream_is_an_error(scripted_server: ScriptedServer) -> None:
    scripted_server.script([raw_sse(": nothing but a comment\n\n")])
    async with model(scripted_server) as m:
        with pytest.raises(ModelResponseError, match="ended before any event"):
            await collect(m.stream(request()))


async def test_request_shape(scripted_server: ScriptedServer) -> None:
    scripted_server.script([responses_reply("ok")])
    items = [
        Summary("Earlier we added numbers."),
        Message("system", "Prefer integers."),
        Message("user", "again"),
        Message("assistant", ""),  # an empty assistant message is dropped
        ToolCall("call_1", "add", {}, raw_arguments='{"a": 1,'),  # sent as the model wrote it
        ToolResult("call_1", "bad JSON", error=True),
        Reasoning("no opaque data"),  # nothing to replay
    ]
    async with model(scripted_server, extra_body={"reasoning": {"effort": "low"}}) as m:
        await collect(m.stream(request(*items, tools=[add.spec()], tool_choice="add", temperature=0.2)))
    body = scripted_server.requests[0].body
    assert body["input"] == [
        {"role": "user", "content": "Summary of earlier conversation: Earlier we added numbers."},
        {"role": "system", "content": "Prefer integers."},
        {"role": "user", "content": "again"},
        {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a": 1,'},
        {"type": "function_call_output", "call_id": "call_1", "output": "bad JSON"},
    ]
    assert body["tool_choice"] == {"type": "function", "name": "add"}
    assert body["temperature"] == 0.2 and body["reasoning"] == {"effort": "low"} and body["stream"] is True



def test_tool_result_images_follow_the_results_as_one_user_message() -> None:
    png = {"mime": "image/png", "data": "iVBORw0KGgo="}
    items = [ToolCall("c1", "python", {"code": "a"}), ToolCall("c2", "python", {"code": "b"}),
             ToolResult("c1", "<Figure>", meta={"images": [png]}), ToolResult("c2", "<Figure>", meta={"images": [png]}),
             Message("user", "and?")]
    wire = to_responses_input(items)
    assert [w.get("type", w.get("role")) for w in wire] == [
        "function_call", "function_call", "function_call_output", "function_call_output", "user", "user"]
    assert wire[4]["content"][1:] == [{"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}] * 2
    assert wire[5] == {"role": "user", "content": "and?"}
    assert to_responses_input(items[:3])[-1]["content"][0]["type"] == "input_text"  # at the end too


@pytest.mark.parametrize("text", [
    "<think>I should add.</think>\n\nThe sum is 3.",
    "I should add.\n</think>\n\nThe sum is 3.",  # the template opened <think> itself
], ids=["tags", "no-opening-tag"])
async def test_think_tags_in_output_text_become_reasoning(scripted_server: ScriptedServer, text: str) -> None:
    # A reasoning model served without a reasoning parser writes its thinking into the text.
    scripted_server.script([responses_reply(text)])
    events, turn = await collect(model(scripted_server).stream(request()))
    assert turn.text == "The sum is 3."
    assert turn.reasoning is not None and turn.reasoning.content.strip() == "I should add."
    if text.startswith("<think>"):  # streamed to the right place as it came
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "The sum is 3."
    # Nothing of it goes back as an answer, nor as a reasoning item a server cannot take.
    wire = to_responses_input([Message("user", "hi"), turn.reasoning, Message("assistant", turn.text)])
    assert "should add" not in json.dumps(wire)
