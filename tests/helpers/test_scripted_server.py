"""The scripted server itself: what other tests build on must behave as documented."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.helpers.scripted_server import Completion, ScriptedServer, http_error, reply_text, reply_tool_calls


def test_models_endpoint_and_request_log() -> None:
    with ScriptedServer(model="demo-7b") as srv:
        response = httpx.get(f"{srv.base_url}/models", headers={"X-Probe": "1"})
        assert response.json()["data"][0]["id"] == "demo-7b"
        (received,) = srv.gets  # GETs are kept apart from the POSTs (srv.requests)
        assert (received.method, received.path, received.headers["x-probe"]) == ("GET", "/v1/models", "1")


def test_empty_script_answers_a_clear_500() -> None:
    with ScriptedServer() as srv:
        response = httpx.post(f"{srv.base_url}/chat/completions", json={"messages": []})
        assert response.status_code == 500
        assert "script is empty" in response.json()["error"]["message"]


def test_replies_pop_in_order_and_callables_see_the_request() -> None:
    def echo_count(body: dict) -> Completion:
        return reply_text(f"{len(body['messages'])} messages", stream=False)

    with ScriptedServer([http_error(418, {"error": "teapot"}), echo_count]) as srv:
        url = f"{srv.base_url}/chat/completions"
        assert httpx.post(url, json={"messages": []}).status_code == 418
        body = httpx.post(url, json={"messages": [{"role": "user", "content": "a"}] * 3}).json()
        assert body["choices"][0]["message"]["content"] == "3 messages"
        assert srv.remaining == 0 and len(srv.bodies) == 2


def test_fallback_answers_when_the_script_is_done() -> None:
    with ScriptedServer(fallback=lambda body: reply_text("again", stream=False)) as srv:
        for _ in range(3):
            body = httpx.post(f"{srv.base_url}/chat/completions", json={}).json()
            assert body["choices"][0]["message"]["content"] == "again"


def test_stream_follows_the_request_and_is_chunked_sse() -> None:
    with ScriptedServer([reply_tool_calls([("f", {"x": 1})], fragments=2)]) as srv:
        with httpx.stream("POST", f"{srv.base_url}/chat/completions", json={"stream": True}) as response:
            assert response.headers["content-type"] == "text/event-stream"
            assert response.headers["transfer-encoding"] == "chunked"
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0  # usage last
    args = "".join(c["choices"][0]["delta"].get("tool_calls", [{}])[0].get("function", {}).get("arguments", "") for c in chunks[:-1])
    assert json.loads(args) == {"x": 1}


@pytest.mark.parametrize("fragments", [1, 2, 5, 100])
def test_fragments_split_arguments_exactly(fragments: int) -> None:
    reply = reply_tool_calls([("f", {"code": "print('hello')"})], fragments=fragments)
    pieces = [c["choices"][0]["delta"]["tool_calls"][0] for c in reply.chunks({}, 1) if c["choices"] and "tool_calls" in c["choices"][0]["delta"]]
    assert len(pieces) == min(fragments, len('{"code": "print(\'hello\')"}'))
    assert "name" in pieces[0]["function"] and all("name" not in p["function"] for p in pieces[1:])
