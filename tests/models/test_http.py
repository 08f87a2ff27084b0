"""StreamingHTTPModel, the base of every HTTP client, against a real server on 127.0.0.1.

A protocol supplies ``payload()`` and ``new_assembler()``; the base does the rest: the
JSON body that survives lone surrogates, the key read per request and sent in a header,
SSE or a whole JSON body, errors inside a 200, pages and text where the API should be.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ipyagent.context.events import Notice
from ipyagent.context.items import Message, ToolCall
from ipyagent.errors import ModelResponseError, ModelStreamError
from ipyagent.models.base import ModelEvent, ModelRequest, TextDelta, Turn
from ipyagent.models.http import EnvKey, HeaderAuth, ProviderError, StreamingHTTPModel, encode_json
from tests.helpers.scripted_server import collect, json_reply, raw_sse, reply_text, sse_event

KEY = "sk-SENTINEL-http42"


def ask(*items: Any) -> ModelRequest:
    return ModelRequest("You are terse.", list(items) or [Message("user", "hi")])


class WordsAssembler:
    """A made-up protocol: ``{"word": …}`` events, then ``{"stop": reason}``."""

    def __init__(self) -> None:
        self.events_seen = 0
        self._turn = Turn()

    def feed(self, event: str | None, data: dict[str, Any]) -> list[ModelEvent]:
        self.events_seen += 1
        if event == "error":
            raise ProviderError(data)
        if "word" in data:
            self._turn.text += data["word"]
            return [TextDelta(data["word"])]
        self._turn.finish_reason = data.get("stop")
        return []

    def feed_body(self, body: dict[str, Any]) -> list[ModelEvent]:
        self.events_seen += 1
        self._turn.text, self._turn.finish_reason = body["text"], "stop"
        return [TextDelta(body["text"])]

    def turn(self) -> Turn:
        return self._turn


class WordsModel(StreamingHTTPModel):
    path = "words"

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        return {"model": self.name, "say": request.items[-1].content}

    def new_assembler(self) -> WordsAssembler:
        return WordsAssembler()


def words(*events: dict[str, Any]) -> str:
    return "".join(sse_event(e) for e in events) + "data: [DONE]\n\n"


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


async def test_a_complete_stream_gives_no_cut_off_warning(scripted_server, make_model) -> None:
    scripted_server.script([reply_text("All here."), reply_text("No [DONE] either.", done=False)])
    for _ in range(2):
        events, turn = await collect(make_model().stream(ask()))
        assert not [e for e in events if isinstance(e, Notice)] and turn.finish_reason == "stop"


async def test_html_page_with_200_says_to_check_base_url(scripted_server, make_model) -> None:
    page = "<!doctype html><html><head><title>Open WebUI</title></head><body></body></html>"
    scripted_server.script([raw_sse(page, content_type="text/html; charset=utf-8")])
    with pytest.raises(ModelResponseError) as info:
        await collect(make_model().stream(ask()))
    text = str(info.value)
    assert text.startswith("got an HTML page ('Open WebUI') from http://127.0.0.1:")
    assert "check Agent.base_url and Agent.provider" in text and "\n" not in text and KEY not in text
    assert info.value.url == f"{scripted_server.base_url}/chat/completions"


async def test_plain_text_200_quotes_the_body(scripted_server, make_model) -> None:
    scripted_server.script([raw_sse("Ollama is running", content_type="text/plain")])
    with pytest.raises(ModelResponseError, match="neither an event stream nor JSON: Ollama is running"):
        await collect(make_model().stream(ask()))


async def test_the_base_posts_the_protocols_payload_with_the_key_read_per_request(
        scripted_server, monkeypatch: pytest.MonkeyPatch) -> None:
    scripted_server.script([raw_sse(words({"word": "Hel"}, {"word": "lo"}, {"stop": "stop"})),
                            json_reply({"text": "whole"})])
    monkeypatch.setenv("IPYAGENT_TEST_WORDS_KEY", "first-key")
    async with WordsModel("w", scripted_server.base_url, EnvKey("IPYAGENT_TEST_WORDS_KEY"), backoff=0,
                          extra_headers={"X-Test": "1"}, extra_body={"extra": True}) as model:
        assert model.key_env == "IPYAGENT_TEST_WORDS_KEY" and "first-key" not in repr(vars(model))
        events, turn = await collect(model.stream(ask()))
        assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
        assert turn.text == "Hello" and turn.finish_reason == "stop"
        monkeypatch.setenv("IPYAGENT_TEST_WORDS_KEY", "second-key")  # changed between requests
        _, turn = await collect(model.stream(ask()))
        assert turn.text == "whole"  # a whole JSON body instead of a stream
    first, second = scripted_server.requests
    assert first.path == "/v1/words" and first.body == {"model": "w", "say": "hi", "extra": True}
    assert first.headers["authorization"] == "Bearer first-key" and first.headers["x-test"] == "1"
    assert second.headers["authorization"] == "Bearer second-key"


async def test_an_error_event_keeps_the_turn_so_far_and_never_the_key(scripted_server) -> None:
    scripted_server.script([raw_sse(sse_event({"word": "partial"})
                                    + sse_event({"message": f"overloaded ({KEY})", "code": "busy"}, "error"))])
    async with WordsModel("w", scripted_server.base_url, KEY, backoff=0) as model:
        assert KEY not in repr(model) and KEY not in repr(vars(model))
        with pytest.raises(ModelStreamError) as info:
            await collect(model.stream(ask()))
    assert str(info.value) == f"overloaded (***) [busy] ({scripted_server.base_url}/words)"
    assert info.value.turn.text == "partial"  # usage and output of the failed turn still count
    assert len(scripted_server.requests) == 1  # an error inside a 200 is not retried


async def test_an_empty_stream_and_a_cut_off_one_say_so(scripted_server) -> None:
    scripted_server.script([raw_sse(""), raw_sse(words({"word": "The answer is"}))])
    async with WordsModel("w", scripted_server.base_url, backoff=0) as model:
        with pytest.raises(ModelResponseError, match="the stream ended before any event"):
            await collect(model.stream(ask()))
        events, _ = await collect(model.stream(ask()))
    [notice] = [e for e in events if isinstance(e, Notice)]
    assert notice.level == "warning" and "after 13 characters: the reply may be cut off" in notice.message
    assert "authorization" not in scripted_server.requests[0].headers  # no key: no header


def test_header_auth_puts_the_key_in_one_header_and_never_shows_it() -> None:
    import httpx

    request = httpx.Request("POST", "http://127.0.0.1:9/x")
    auth = HeaderAuth(KEY, header="x-api-key", prefix="")
    sent = next(auth.auth_flow(request))
    assert sent.headers["x-api-key"] == KEY and "authorization" not in sent.headers
    assert repr(auth) == "HeaderAuth(x-api-key: ***)" and repr(EnvKey("K")) == "EnvKey('K')"
