"""Each item's wire form is made once per protocol and reused; an edit is still sent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ipyagent import Message, Reasoning, Summary, ToolCall, ToolResult
from ipyagent.models.anthropic import AnthropicModel, to_anthropic_messages
from ipyagent.models.base import ModelRequest
from ipyagent.models.openai_chat import OpenAIChatModel, to_chat_messages
from ipyagent.models.openai_responses import OpenAIResponsesModel, to_responses_input
from ipyagent.models.wire_cache import WireCache

PROTOCOLS = {
    "chat": (OpenAIChatModel, lambda items: to_chat_messages("sys", items), "messages"),
    "responses": (OpenAIResponsesModel, lambda items: to_responses_input(items), "input"),
    "anthropic": (AnthropicModel, lambda items: to_anthropic_messages("sys", items)[1], "messages"),
}
IMAGE = {"mime": "image/png", "data": "iVBORw0KGgo="}


def _items() -> list[Any]:
    return [Message("user", "go"),
            Reasoning("thinking", details={"reasoning_content": "x", "text_field": "reasoning_content",
                                           "thinking_blocks": [{"type": "thinking", "thinking": "t",
                                                                "signature": "sig"}]}),
            Message("assistant", "calling"),
            ToolCall("c1", "add", {"a": 1, "b": 2}),
            ToolResult("c1", "3", name="add", meta={"images": [IMAGE]}),
            Summary("earlier", replaced=[]),
            Message("user", "more")]


@pytest.fixture(params=sorted(PROTOCOLS))
def protocol(request):
    cls, fresh, key = PROTOCOLS[request.param]
    model = cls("m", base_url="http://127.0.0.1:9", api_key="k")
    items = _items()

    def send() -> list[Any]:
        sent = model.payload(ModelRequest(system="sys", items=items))[key]
        assert sent == fresh(items)  # exactly what the uncached conversion makes
        return sent

    return model, items, send


def test_each_item_is_made_once_and_then_reused(protocol):
    model, items, send = protocol
    for _ in range(4):
        send()
    cache = model._wire_cache
    made = cache.made
    assert made == 2 * len(items)  # first request, then once more with a copy to compare
    items.append(Message("user", "new"))
    send()
    send()
    assert cache.made == made + 2  # only the new item


def test_an_edit_is_seen_by_the_next_request(protocol):
    model, items, send = protocol
    for _ in range(3):
        send()
    items[4].output = "three"  # a field set
    assert "three" in json.dumps(send())
    items[3].arguments["a"] = 41  # in place, inside a field
    assert "41" in json.dumps(send())
    items[4].meta["note"] = "the user edited this call"  # meta, in place
    assert "the user edited this call" in json.dumps(send())
    items[4].meta["images"].append({"mime": "image/png", "data": "SECONDIMAGE"})
    assert "SECONDIMAGE" in json.dumps(send())
    items[0] = Message("user", "replaced")  # agent.context[0] = …
    assert "replaced" in json.dumps(send())
    del items[5]
    assert "earlier" not in json.dumps(send())


def test_a_changed_body_does_not_change_the_next(protocol):
    """The body holds copies: a caller (or a prompt-cache marker) may change it."""
    model, items, send = protocol
    for _ in range(3):
        sent = send()
    for message in sent:
        message["cache_control"] = {"type": "ephemeral"}
        for block in message.get("content") if isinstance(message.get("content"), list) else []:
            block["cache_control"] = {"type": "ephemeral"}
        for call in message.get("tool_calls", []):
            call["id"] = "changed"
    assert "cache_control" not in json.dumps(send()) and '"changed"' not in json.dumps(send())


def test_items_made_afresh_each_request_are_not_copied():
    """Text mode renders new items for every request: they cost no deep copy."""
    cache: WireCache[Any] = WireCache(lambda item: item.to_dict())
    for _ in range(3):
        cache.parts(_items())
    assert all(e.fields is None for e in cache._entries.values())
    assert cache.made == 3 * len(_items())


def test_not_an_item_is_still_refused(protocol):
    _, items, send = protocol
    items.append("not an item")
    with pytest.raises(TypeError, match="not an ipyagent item"):
        send()


def _encoded(model, items) -> Any:
    from ipyagent.models.http import encode_json

    body = {**model.payload(ModelRequest(system="sys", items=items)), **model.extra_body}
    return json.loads(encode_json(body))


def test_the_bytes_sent_join_cached_texts_and_follow_every_change(protocol, monkeypatch):
    """encode_json joins each unchanged message's cached JSON: the bytes must be the body."""
    from ipyagent.models import wire_cache

    model, items, send = protocol
    items.append(ToolResult("c2", "é \ud83d half", name="add"))  # a lone surrogate: repaired
    for _ in range(3):
        send()
    body = model.payload(ModelRequest(system="sys", items=items))
    from ipyagent.models.http import encode_json

    assert json.loads(encode_json(body)) == json.loads(json.dumps(body).replace("\\ud83d", "\\ufffd"))
    key = PROTOCOLS[_name(model)][2]
    dumped: list[object] = []
    real = wire_cache.dumps
    monkeypatch.setattr(wire_cache, "dumps", lambda v: dumped.append(v) or real(v))
    encode_json(body)
    elements = [e for value in dumped if isinstance(value, list) for e in value]
    # some messages were not encoded again: a mark stands for their cached text
    assert any(isinstance(e, str) and e.startswith("ipyagent-wire-") for e in elements)
    body[key][-1]["cache_control"] = {"type": "ephemeral"}  # changed after payload()
    body[key].append({"role": "user", "content": "appended"})
    sent = json.loads(encode_json(body))
    assert sent[key][-2]["cache_control"] == {"type": "ephemeral"}
    assert sent[key][-1] == {"role": "user", "content": "appended"}
    items[4].output = "changed"
    assert "changed" in json.dumps(_encoded(model, items))


def test_a_forged_mark_in_untrusted_text_changes_nothing(protocol):
    model, items, _ = protocol
    items.append(ToolResult("c3", '"ipyagent-wire-0000000000000000-0" ]}', name="add"))
    for _ in range(3):
        _encoded(model, items)
    body = model.payload(ModelRequest(system='sys "ipyagent-wire-x-0"', items=items))
    from ipyagent.models.http import encode_json

    assert json.loads(encode_json(body)) == json.loads(json.dumps(body))


def _name(model) -> str:
    return {"OpenAIChatModel": "chat", "OpenAIResponsesModel": "responses",
            "AnthropicModel": "anthropic"}[type(model).__name__]


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
def test_edits_to_the_context_reach_a_real_server(api, monkeypatch):
    """End to end: an agent on a real 127.0.0.1 server; the context edited between runs,
    in place and by replacing an item, once each item's part is cached."""
    from ipyagent import Agent
    from tests.helpers.scripted_apis import any_api_reply
    from tests.helpers.scripted_server import ScriptedServer
    from tests.helpers.tools import add

    monkeypatch.setenv("IPYAGENT_TEST_KEY", "k")
    script = [any_api_reply("", [("add", {"a": 1, "b": 2})]), any_api_reply("three"),
              *(any_api_reply(f"reply {n}") for n in range(4))]
    with ScriptedServer(script) as srv:
        agent = Agent(model="m", api=api, base_url=srv.base_url, api_key_env="IPYAGENT_TEST_KEY",
                      tools=[add], python_tool=False, file_tools=False)
        agent.run("add 1 and 2")
        agent.run("again")
        agent.run("and again")  # every item has been sent twice or more: cached
        result = next(i for i in agent.context if isinstance(i, ToolResult))
        result.output = "THREE, EDITED IN PLACE"
        agent.context[0] = Message("user", "REPLACED TASK")
        agent.run("go on")
        sent = json.dumps(srv.requests[-1].body)
        assert "THREE, EDITED IN PLACE" in sent and "REPLACED TASK" in sent
        assert "add 1 and 2" not in sent
        call = next(i for i in agent.context if isinstance(i, ToolCall))
        call.arguments["a"] = 1001  # inside a field
        agent.run("once more")
        assert "1001" in json.dumps(srv.requests[-1].body)
        agent.close()
