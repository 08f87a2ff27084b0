"""What the wire throws at us, against a real HTTP server on 127.0.0.1 (tests/helpers/scripted_server.py).

Lone UTF-16 surrogates in the conversation, llama.cpp's ``error:`` stream lines, streams cut
off without a finish reason, a daily quota's ``retry-after`` and retries that must not leak
to stderr. What the base client does by itself is in test_http.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from ipyagent import Agent
from ipyagent.context.events import Notice
from ipyagent.context.items import Message
from ipyagent.errors import ModelStreamError, RateLimitError, ServerError
from ipyagent.models.base import ModelRequest
from ipyagent.models.openai_chat import OpenAIChatModel
from tests.helpers.scripted_server import collect, http_error, raw_sse, reply_text, sse_event

KEY = "sk-SENTINEL-wire42"


def record_waits(model: OpenAIChatModel) -> list[float]:
    """The backoff waits ``model`` will ask for, recorded instead of slept."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    model.retry.sleep = sleep
    return waits


def ask(*items: Any) -> ModelRequest:
    return ModelRequest("You are terse.", list(items) or [Message("user", "hi")])


def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    """One chat-completion chunk as an SSE event."""
    return sse_event({"object": "chat.completion.chunk", "model": "m",
                      "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


# ------------------------------------------------------------------ lone surrogates


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
        from ipyagent.context.items import Message
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


# ------------------------------------------------------------------ llama.cpp's `error:` lines

LLAMA_ERROR = ('error: {"code":400,"message":"the request exceeds the available context size, try increasing it",'
               '"type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}\n\n')


@pytest.mark.parametrize("before", ["", chunk({"role": "assistant", "content": "The answer is"})],
                         ids=["error-first", "error-mid-stream"])
async def test_llamacpp_error_line_is_the_error_with_the_servers_message(
        scripted_server, make_model, before) -> None:
    scripted_server.script([raw_sse(before + LLAMA_ERROR + "data: [DONE]\n\n")])
    with pytest.raises(ModelStreamError) as info:
        await collect(make_model().stream(ask()))
    text = str(info.value)
    assert "the request exceeds the available context size, try increasing it" in text
    assert scripted_server.base_url in text and "\n" not in text and KEY not in text


async def test_error_line_split_across_network_reads_is_still_read(scripted_server, make_model) -> None:
    scripted_server.script([raw_sse(chunk({"content": "Hi"}) + LLAMA_ERROR, chunk_size=3)])
    with pytest.raises(ModelStreamError, match="exceeds the available context size"):
        await collect(make_model().stream(ask()))


def test_agent_run_ends_in_error_not_done_on_a_mid_stream_error_line(scripted_server) -> None:
    # The error names the server's window (n_ctx): fitted, and asked once more; the same error
    # again ends the run with the server's message.
    broken = raw_sse(chunk({"role": "assistant", "content": "The answer is"})
                     + LLAMA_ERROR + "data: [DONE]\n\n")
    scripted_server.script([broken, broken])
    with Agent(model="m", base_url=scripted_server.base_url, python_tool=False, file_tools=False) as agent:
        result = agent.run("go")
    assert result.stop_reason == "error" and "exceeds the available context size" in (result.error or "")


# ------------------------------------------------------------------ a stream cut off without a finish reason


def test_stream_ending_without_a_finish_reason_gives_a_warning(scripted_server) -> None:
    scripted_server.script([raw_sse(chunk({"role": "assistant", "content": "The answer is"}))])
    seen: list[Any] = []
    with Agent(model="m", base_url=scripted_server.base_url, python_tool=False, file_tools=False) as agent:
        result = agent.run("go", on_event=seen.append)
    warnings = [e.message for e in seen if isinstance(e, Notice) and e.level == "warning"]
    assert result.text == "The answer is"
    assert any("without a finish reason" in w and "cut off" in w and scripted_server.base_url in w
               for w in warnings), warnings


# ------------------------------------------------------------------ a daily quota's retry-after


async def test_retry_after_beyond_the_limit_fails_at_once_saying_the_wait(scripted_server, make_model) -> None:
    quota = {"error": {"message": "Rate limit reached for tokens per day", "code": "rate_limit_exceeded"}}
    scripted_server.script([http_error(429, quota, {"retry-after": "3600"}), reply_text("never asked for")])
    model = make_model()
    waits = record_waits(model)
    with pytest.raises(RateLimitError) as info:
        await collect(model.stream(ask()))
    text = str(info.value)
    assert waits == [] and len(scripted_server.bodies) == 1
    assert text == ("HTTP 429: Rate limit reached for tokens per day; the server asks to wait 3600 s "
                    "(about 1 h), more than max_retry_after=60 s, so no retry "
                    f"({scripted_server.base_url}/chat/completions)")
    assert info.value.retry_after == 3600.0 and KEY not in text


async def test_retry_after_within_the_limit_is_still_waited(scripted_server, make_model) -> None:
    scripted_server.script([http_error(429, {"error": {"message": "slow down"}}, {"retry-after": "45"}),
                            reply_text("ok")])
    model = make_model()
    waits = record_waits(model)
    _, turn = await collect(model.stream(ask()))
    assert turn.text == "ok" and waits == [45.0]


# ------------------------------------------------------------------ a 500 that names a server setting


async def test_a_500_naming_a_server_flag_fails_at_once_with_what_to_change(scripted_server, make_model) -> None:
    # llama.cpp's answer to a request with tools when llama-server was started without --jinja
    jinja = {"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}}
    scripted_server.script([http_error(500, jinja), reply_text("never asked for")])
    model = make_model()
    waits = record_waits(model)
    with pytest.raises(ServerError) as info:
        await collect(model.stream(ask()))
    assert waits == [] and len(scripted_server.bodies) == 1
    assert str(info.value).startswith(
        "HTTP 500: tools param requires --jinja flag; restart llama-server with --jinja")


async def test_a_plain_500_is_still_retried(scripted_server, make_model) -> None:
    scripted_server.script([http_error(500, {"error": {"message": "Internal error"}}), reply_text("ok")])
    model = make_model()
    waits = record_waits(model)
    _, turn = await collect(model.stream(ask()))
    assert turn.text == "ok" and len(waits) == 1
