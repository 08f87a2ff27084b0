"""A URL with no chat API behind it ends at once, with the one fix to try (issue 30, item 10).

Real servers on 127.0.0.1 answer the way the real ones do when base_url is wrong: an
Ollama-like server that serves only ``/v1/...`` (Go's "404 page not found"), a FastAPI
server's ``{"detail": "Not Found"}``, Python's own ``http.server`` (501 to a POST, an
HTML page), a proxy's 405 page, a notebook server's 403 page, LM Studio's 200
"Unexpected endpoint". Each is asked exactly once (no retries) and the error is one line.
"""

from __future__ import annotations

import functools
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from ipyagent import Agent
from ipyagent.errors import ModelError, ModelResponseError, ModelStreamError, RequestRejected, ServerError
from ipyagent.models.base import ModelRequest
from ipyagent.models.endpoint_hint import endpoint_hint, says_no_api_here
from ipyagent.models.openai_chat import OpenAIChatModel
from ipyagent.models.openai_responses import OpenAIResponsesModel
from tests.helpers.scripted_server import collect, sse_event
from tests.helpers.web_servers import LocalWeb, Page, Seen

KEY = "sk-SENTINEL-hint-0451"


def _chat_stream(text: str) -> Page:
    """A whole streamed Chat Completions reply saying ``text``."""
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
              {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
    body = "".join(sse_event(c) for c in chunks) + "data: [DONE]\n\n"
    return Page(body.encode(), 200, {"Content-Type": "text/event-stream"})


def ollama_like() -> LocalWeb:
    """Serves chat only under /v1; every other path is Go's plain-text 404, as Ollama's is."""
    web = LocalWeb()
    web.route("/v1/chat/completions", lambda seen: _chat_stream("Hello from /v1."))
    for path in ("/chat/completions", "/responses", "/v1/responses"):
        web.route(path, not_found_text)
    return web


def not_found_text(seen: Seen) -> Page:
    return Page(b"404 page not found", 404, {"Content-Type": "text/plain; charset=utf-8"})


@pytest.fixture
def file_server(tmp_path) -> Iterator[str]:
    """Python's own ``http.server`` (a file server): it answers POST 501 with an HTML page."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path)))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


async def ask_once(model: OpenAIChatModel | OpenAIResponsesModel) -> ModelError:
    """The error one request ends with."""
    try:
        with pytest.raises(ModelError) as info:
            await collect(model.stream(ModelRequest("", [])))
    finally:
        await model.aclose()
    return info.value


def chat(base_url: str) -> OpenAIChatModel:
    # Retries with no backoff: a test that counts requests sees any retry at once.
    return OpenAIChatModel("m", base_url, api_key=KEY, max_retries=3, backoff=0)


def posts(web: LocalWeb) -> list[str]:
    return [s.path for s in web.seen if s.method == "POST"]


async def test_missing_v1_ends_at_once_naming_the_url_to_try() -> None:
    with ollama_like() as web:
        error = await ask_once(chat(web.url))
        assert isinstance(error, RequestRejected) and error.status_code == 404
        text = str(error)
        assert text.startswith("HTTP 404: 404 page not found; base_url has no API version in it")
        assert f"try Agent.base_url = '{web.url}/v1'" in text and "\n" not in text and KEY not in text
        assert posts(web) == ["/chat/completions"]  # once: no retries
        # The fix it names works.
        model = chat(f"{web.url}/v1")
        _, turn = await collect(model.stream(ModelRequest("", [])))
        await model.aclose()
        assert turn.text == "Hello from /v1."


async def test_a_base_url_naming_the_endpoint_says_where_to_stop() -> None:
    with LocalWeb() as web:
        web.route("/v1/chat/completions/chat/completions",
                  lambda seen: Page(json.dumps({"detail": "Not Found"}).encode(), 404,
                                    {"Content-Type": "application/json"}))
        error = await ask_once(chat(f"{web.url}/v1/chat/completions"))
        assert str(error).startswith("HTTP 404: Not Found; base_url names the endpoint itself")
        assert f"try Agent.base_url = '{web.url}/v1'" in str(error)
        assert len(posts(web)) == 1


async def test_a_file_server_501_is_not_retried_and_is_called_what_it_is(file_server: str) -> None:
    model = chat(f"{file_server}/v1")
    error = await ask_once(model)
    assert isinstance(error, ServerError) and error.status_code == 501
    text = str(error)
    assert "answered a web page where an OpenAI-compatible API serves POST" in text
    assert f"{file_server}/v1/chat/completions" in text and "\n" not in text
    assert "retry" not in text.lower()


async def test_a_405_page_and_a_403_page_end_at_once() -> None:
    with LocalWeb() as web:
        page = b"<html><head><title>405 Not Allowed</title></head><body>nginx</body></html>"
        web.route("/v1/chat/completions", Page(page, 405))
        error = await ask_once(chat(f"{web.url}/v1"))
        assert error.status_code == 405 and "OpenAI-compatible API serves POST" in str(error)  # type: ignore[attr-defined]
        web.route("/api/v1/chat/completions",
                  Page(b"<html><title>403: Forbidden</title><body>'_xsrf' argument missing</body></html>", 403))
        error = await ask_once(chat(f"{web.url}/api/v1"))
        assert error.status_code == 403 and "answered a web page" in str(error)  # type: ignore[attr-defined]
        assert posts(web) == ["/v1/chat/completions", "/api/v1/chat/completions"]


async def test_the_responses_api_on_a_chat_only_server_says_set_api_chat() -> None:
    with ollama_like() as web:
        model = OpenAIResponsesModel("m", f"{web.url}/v1", api_key=KEY, max_retries=3, backoff=0)
        error = await ask_once(model)
        assert "may not speak the 'responses' API (POST responses)" in str(error)
        assert "Agent.api = 'chat'" in str(error)
        assert posts(web) == ["/v1/responses"]


async def test_lm_studio_unexpected_endpoint_200_gets_the_hint() -> None:
    with LocalWeb() as web:
        web.route("/chat/completions", Page(
            json.dumps({"error": "Unexpected endpoint or method. (POST /chat/completions)"}).encode(),
            200, {"Content-Type": "application/json"}))
        error = await ask_once(chat(web.url))
        assert isinstance(error, ModelStreamError)
        assert f"try Agent.base_url = '{web.url}/v1'" in str(error)


async def test_an_html_page_with_200_names_the_fix() -> None:
    with LocalWeb() as web:
        web.route("/chat/completions", Page(b"<!doctype html><html><title>Open WebUI</title></html>"))
        error = await ask_once(chat(web.url))
        assert isinstance(error, ModelResponseError)
        assert str(error).startswith(f"got an HTML page ('Open WebUI') from {web.url}/chat/completions")
        assert f"try Agent.base_url = '{web.url}/v1'" in str(error)


async def test_a_model_not_found_404_is_the_providers_message_without_a_url_hint() -> None:
    body = {"error": {"code": "model_not_found", "type": "invalid_request_error",
                      "message": "The model `gpt-5.2-proo` does not exist or you do not have access to it."}}
    with LocalWeb() as web:
        web.route("/v1/chat/completions", Page(json.dumps(body).encode(), 404, {"Content-Type": "application/json"}))
        error = await ask_once(chat(f"{web.url}/v1"))
        assert "does not exist" in str(error) and "base_url" not in str(error)
        assert len(posts(web)) == 1  # a 404 was never retried


async def test_a_transient_502_page_is_still_retried() -> None:
    with LocalWeb() as web:
        web.route("/v1/chat/completions", Page(b"<html><title>502 Bad Gateway</title></html>", 502))
        error = await ask_once(chat(f"{web.url}/v1"))
        assert isinstance(error, ServerError) and "base_url" not in str(error)
        assert len(posts(web)) == 4  # the first attempt and three retries


def test_the_agent_run_ends_with_the_one_line(tmp_path) -> None:
    with ollama_like() as web, Agent(model="m", base_url=web.url, python_tool=False, shell_tool="off",
                                     file_tools=False, max_retries=3,
                                     cwd=str(tmp_path)) as agent:
        result = agent.run("hi")
        assert result.stop_reason == "error" and len(posts(web)) == 1
        assert result.error is not None and "\n" not in result.error
        assert f"try Agent.base_url = '{web.url}/v1'" in result.error


@pytest.mark.parametrize(("status", "message", "html", "expected"), [
    (404, "Not Found", False, True),
    (404, "model 'qwen' not found, try pulling it first", False, False),
    (405, "Method Not Allowed", False, True),
    (501, "Unsupported method ('POST')", True, True),
    (403, "Forbidden", True, True),
    (403, "invalid api key", False, False),
    (400, "bad request", False, False),
    (500, "Internal Server Error", True, False),  # a proxy's page for a passing fault
    (200, "Unexpected endpoint or method. (POST /chat/completions)", False, True),
])
def test_says_no_api_here(status: int, message: str, html: bool, expected: bool) -> None:
    assert says_no_api_here(status, message, html=html) is expected


@pytest.mark.parametrize(("base", "path", "start"), [
    ("http://127.0.0.1:11434", "chat/completions", "base_url has no API version"),
    ("https://generativelanguage.googleapis.com/v1beta/openai", "chat/completions", "the server at"),
    ("https://openrouter.ai/api/v1", "chat/completions", "the server at"),
    ("http://h/v1/chat/completions", "chat/completions", "base_url names the endpoint itself"),
    ("http://h/v1", "messages", "the server may not speak the 'anthropic' API"),
])
def test_endpoint_hint_picks_the_likely_fix(base: str, path: str, start: str) -> None:
    assert endpoint_hint(base, path, status=404, html=False).startswith(start)
