"""What the wire throws at us, against a real HTTP server on 127.0.0.1 (tests/scripted_server.py).

Lone UTF-16 surrogates in the conversation, llama.cpp's ``error:`` stream lines, streams cut
off without a finish reason, an HTML page where the API should be, a daily quota's
``retry-after`` and retries that must not leak to stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any, AsyncIterator, Callable

import pytest

from ipyagent import Agent
from ipyagent.items import Message, ToolCall
from ipyagent.models.base import ModelRequest
from ipyagent.models.http import encode_json
from ipyagent.models.openai_chat import OpenAIChatModel

from scripted_server import ScriptedServer, collect, http_error, raw_sse, reply_text, sse_event

KEY = "sk-SENTINEL-wire42"


@pytest.fixture
async def make_model(scripted_server: ScriptedServer) -> AsyncIterator[Callable[..., OpenAIChatModel]]:
    """Chat models pointed at the scripted server (no backoff), closed after the test."""
    made: list[OpenAIChatModel] = []

    def make(**options: Any) -> OpenAIChatModel:
        options.setdefault("backoff", 0)
        model = OpenAIChatModel("test-model", scripted_server.base_url, KEY, **options)
        made.append(model)
        return model

    yield make
    for model in made:
        await model.aclose()


def ask(*items: Any) -> ModelRequest:
    return ModelRequest("You are terse.", list(items) or [Message("user", "hi")])


def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    """One chat-completion chunk as an SSE event."""
    return sse_event({"object": "chat.completion.chunk", "model": "m",
                      "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


# ------------------------------------------------------------------ lone surrogates


def test_encode_json_keeps_utf8_joins_pairs_and_replaces_lone_halves() -> None:
    assert encode_json({"t": "h\u00e9llo \U0001F600"}) == '{"t":"h\u00e9llo \U0001F600"}'.encode()
    assert encode_json({"t": "\ud83d" + "\ude00"}) == '{"t":"\U0001F600"}'.encode()
    assert encode_json({"a": "x\ud83d", "b": "\ude00y"}) == '{"a":"x\ufffd","b":"\ufffdy"}'.encode()


async def test_lone_surrogate_in_the_conversation_is_sent_not_raised(scripted_server, make_model) -> None:
    scripted_server.script([reply_text("ok")])
    call = ToolCall("call_1", "now", {"q": "\ud83d"})
    _, turn = await collect(make_model().stream(ask(
        Message("user", "hi"), Message("assistant", "Smile \ud83d" + "\ude00 and \ud83d"), call)))
    assert turn.text == "ok"
    sent = scripted_server.bodies[0]["messages"]
    assert sent[2]["content"] == "Smile \U0001F600 and \ufffd"
    assert json.loads(sent[2]["tool_calls"][0]["function"]["arguments"]) == {"q": "\ufffd"}


def test_agent_keeps_running_after_a_streamed_lone_surrogate(scripted_server) -> None:
    def now() -> str:
        """The time."""
        return "noon"

    lone = ('data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"Smile \\ud83d!"}}]}\n\n'
            + chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                     "function": {"name": "now", "arguments": "{}"}}]})
            + chunk({}, "tool_calls") + "data: [DONE]\n\n")
    scripted_server.script([raw_sse(lone), reply_text("Done."), reply_text("Again.")])
    with Agent(model="m", base_url=scripted_server.base_url, approval="auto",
               python_tool=False, file_tools=False, tools=[now]) as agent:
        first = agent.run("go")
        second = agent.run("more")
    assert (first.stop_reason, first.error, first.text) == ("done", None, "Done.")
    assert (second.stop_reason, second.text) == ("done", "Again.")
    assert scripted_server.bodies[1]["messages"][2]["content"] == "Smile \ufffd!"


# ------------------------------------------------------------------ retries reach the user once


def test_a_retry_is_not_also_printed_raw_to_stderr(scripted_server) -> None:
    """With no logging configured, a retry is a Retrying event only (no last-resort stderr line)."""
    scripted_server.script([http_error(429, {"error": {"message": "slow down"}}, {"retry-after": "0"}),
                            reply_text("ok")])
    script = textwrap.dedent(f"""
        import asyncio
        from ipyagent.items import Message
        from ipyagent.models.base import ModelRequest
        from ipyagent.models.openai_chat import OpenAIChatModel

        async def main():
            async with OpenAIChatModel("m", {scripted_server.base_url!r}, "k", backoff=0) as model:
                request = ModelRequest("s", [Message("user", "hi")])
                print([type(e).__name__ async for e in model.stream(request)])

        asyncio.run(main())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Retrying" in done.stdout and "TurnComplete" in done.stdout
    assert done.stderr == ""
