"""Profiles and the call grammar through the loop, against a real HTTP server on 127.0.0.1.

The server is scripted (``ScriptedServer``) to look like llama-cpp-python where a test says
so (``owned_by: "me"`` in ``/v1/models``, no ``/props``): what is checked is what ipyagent
sends — the one grammar probe, then text-mode requests carrying the grammar and the
profile's stop strings — and what it says on the card.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ipyagent import Agent
from ipyagent.context.events import Notice
from ipyagent.context.items import Message, ToolCall, ToolResult
from ipyagent.models.base import ModelRequest
from ipyagent.models.openai_chat import OpenAIChatModel
from ipyagent.models.profiles import server
from ipyagent.models.profiles.server import PROBE_GRAMMAR, PROBE_WORD
from tests.helpers.scripted_server import ScriptedServer, http_error, json_reply, reply_text
from tests.test_profiles import _gguf, _recording, _str


def _probe_answer(word: str = PROBE_WORD) -> Any:
    return json_reply({"choices": [{"index": 0, "message": {"role": "assistant", "content": word},
                                    "finish_reason": "stop"}]})


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _agent(srv: ScriptedServer, **settings: Any) -> Agent:
    options = {"model": srv.model, "base_url": srv.base_url, "approval": "auto",
               "python_tool": False, "file_tools": False, "max_retries": 0, "tools": [add],
               "tool_mode": "text", **settings}
    return Agent(**options)


@pytest.fixture(autouse=True)
def fresh_answers() -> None:
    server.forget()


def test_a_llama_cpp_server_is_probed_once_and_text_requests_carry_the_grammar() -> None:
    events: list[Any] = []
    with ScriptedServer([_probe_answer(), reply_text('<tool_call>\n{"name": "add", "arguments": '
                                                     '{"a": 2, "b": 3}}\n</tool_call>'),
                         reply_text("2 + 3 = 5.")],
                        model="qwen2.5-coder-0.5b", owned_by="me") as srv:
        with _agent(srv) as agent:
            result = agent.run("add 2 and 3", on_event=events.append)
            context = list(agent.context)
        bodies = [r.body for r in srv.requests]
        gets = [r.path for r in srv.gets]
    assert result.stop_reason == "done" and "5" in result.text
    probe, *turns = bodies
    assert probe["grammar"] == PROBE_GRAMMAR and probe["stream"] is False and probe["max_tokens"] <= 8
    assert len(turns) == 2 and all("tools" not in b for b in turns)
    # The probe reads the very prompt the request then sends: the server's prompt cache stays.
    assert probe["messages"] == turns[0]["messages"]
    for body in turns:
        assert body["grammar"].startswith("root ::= ws ( lead calls? | calls )?\n") and '"\\"add\\""' in body["grammar"]
        assert body["stop"] == ["<tool_response>"]
    assert gets == ["/v1/models", "/props"]  # once per server, not per step
    said = [e.message for e in events if isinstance(e, Notice)]
    assert "Model profile qwen2.5 (Qwen2.5 / Qwen2.5-Coder; tested on qwen2.5-coder-0.5b, " \
           "qwen2.5-coder-1.5b): the server's model id 'qwen2.5-coder-0.5b'." in said
    assert sum(m.startswith("Calls constrained by a grammar") for m in said) == 1
    turns_meta = [i.meta["turn"] for i in context if "turn" in i.meta]
    assert [(t["tool_mode"], t["profile"], t["grammar"]) for t in turns_meta] == [
        ("text", "qwen2.5", True)] * 2  # recorded with the transcript


@pytest.mark.parametrize("probe", [_probe_answer("Hello! How can I help?"), http_error(500, {"error": "grammar?"})])
def test_a_server_that_ignores_or_refuses_the_grammar_never_gets_one(probe: Any) -> None:
    with ScriptedServer([probe, reply_text("5"), reply_text("5")], owned_by="me") as srv:
        with _agent(srv) as agent:
            agent.run("add 2 and 3")
            agent.run("and again")
        bodies = [r.body for r in srv.requests]
    assert len(bodies) == 3 and "grammar" in bodies[0]  # probed once, not again
    assert all("grammar" not in b for b in bodies[1:])


def test_a_server_that_is_not_llama_cpp_is_not_probed_and_forcing_sends_the_grammar() -> None:
    with ScriptedServer([reply_text("5")]) as srv:  # owned_by "scripted"
        with _agent(srv) as agent:
            agent.run("add 2 and 3")
        assert len(srv.requests) == 1 and "grammar" not in srv.requests[0].body
    with ScriptedServer([reply_text("5")]) as srv:
        with _agent(srv, constrain_calls=True, model_profile="llama3") as agent:
            agent.run("add 2 and 3")
        (body,) = [r.body for r in srv.requests]
    assert "grammar" in body and '"\\"parameters\\""' in body["grammar"]
    # llama3's syntax in the prompt: a bare object with "parameters"
    assert '{"name": "add", "parameters": {"a": "...", "b": "..."}}' in body["messages"][0]["content"]
    with ScriptedServer([reply_text("5")], owned_by="me") as srv:
        with _agent(srv, constrain_calls=False) as agent:
            agent.run("add 2 and 3")
        assert [("grammar" in r.body) for r in srv.requests] == [False]


def test_native_requests_never_carry_a_grammar_nor_pay_for_the_probe() -> None:
    with ScriptedServer([reply_text("5")], model="qwen2.5", owned_by="me") as srv:
        with _agent(srv, tool_mode="native") as agent:
            agent.run("add 2 and 3")
        (body,) = [r.body for r in srv.requests]
    assert "tools" in body and "grammar" not in body and "stop" not in body


def test_a_template_without_tools_starts_in_text_mode(tmp_path: Path) -> None:
    """A model file on this machine whose template has no tools (SmolLM2's, recorded) starts
    a new conversation in text mode. llama-cpp-python names its model by the file's path."""
    template = _recording("smollm2-135m")["model_file"]["gguf"]["tokenizer.chat_template"]
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(_gguf([("general.architecture", 8, _str("llama")),
                            ("general.name", 8, _str("Smollm2 135M")),
                            ("tokenizer.chat_template", 8, _str(template))]))
    events: list[Any] = []
    with ScriptedServer([_probe_answer("no"), reply_text("5")], model=str(gguf),
                        owned_by="me") as srv:
        with _agent(srv, tool_mode="auto") as agent:
            agent.run("add 2 and 3", on_event=events.append)
            state = repr(agent)
        body = srv.requests[-1].body
    assert "tools" not in body and "<tool_call>" in body["messages"][0]["content"]
    assert "tool_mode=auto(text)" in state
    said = " ".join(getattr(e, "message", "") for e in events)
    assert ("Tool calls as text from the start: the model profile smollm2: the GGUF's "
            "general.name 'Smollm2 135M'; the chat template in the GGUF file has no tool calling") in said


def test_on_llama_cpp_python_a_conversation_starts_in_text_mode_with_the_grammar() -> None:
    """llama-cpp-python's server returns calls as text under tool_choice 'auto' (measured:
    Qwen2.5-Coder-1.5B wrote them in a ```json fence): starting native would cost the
    server's prompt cache at the switch and leave the first call unconstrained."""
    events: list[Any] = []
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    with ScriptedServer([_probe_answer(), reply_text(call), reply_text("5")],
                        model="qwen2.5-coder-1.5b", owned_by="me") as srv:
        with _agent(srv, tool_mode="auto") as agent:
            result = agent.run("add 2 and 3", on_event=events.append)
        probe, *turns = [r.body for r in srv.requests]
    assert result.stop_reason == "done" and len(turns) == 2
    assert all("tools" not in b and b["grammar"].startswith("root ::=") for b in turns)
    # One system prompt for the whole conversation: the second request extends the first.
    assert turns[1]["messages"][:2] == turns[0]["messages"][:2]
    said = " ".join(getattr(e, "message", "") for e in events)
    assert "Tool calls as text from the start: llama-cpp-python's server returns" in said
    # llama-server (it answers /props) parses calls itself: native, as before.
    with ScriptedServer([reply_text("5")], model="qwen2.5-coder-1.5b", owned_by="llamacpp") as srv:
        with _agent(srv, tool_mode="auto") as agent:
            agent.run("add 2 and 3")
        assert "tools" in srv.requests[-1].body


def test_a_model_served_under_an_alias_is_known_by_its_tokenizer() -> None:
    """llama-cpp-python serving a model as ``--model_alias local`` names nothing: its
    tokenizer (/extras/tokenize) tells Qwen2.5 (<|im_start|> and <tool_call> one token each)."""
    events: list[Any] = []
    with ScriptedServer([_probe_answer(), reply_text("5")], model="local", owned_by="me",
                        special_tokens=("<|im_start|>", "<tool_call>")) as srv:
        with _agent(srv, tool_mode="auto") as agent:
            agent.run("add 2 and 3", on_event=events.append)
            agent.run("and again", on_event=events.append)
        asked = [g.body["input"] for g in srv.gets if g.path == "/extras/tokenize"]
        system = srv.requests[-1].body["messages"][0]["content"]
    assert asked[0] == "" and "<tool_call>" in asked and len(asked) == len(set(asked))  # once
    said = " ".join(getattr(e, "message", "") for e in events)
    assert ("Model profile qwen2.5 (Qwen2.5 / Qwen2.5-Coder; tested on qwen2.5-coder-0.5b, "
            "qwen2.5-coder-1.5b): the server's tokenizer (one token each: <|im_start|>, "
            "<tool_call>).") in said
    assert "For each function call, return a json object" in system  # Qwen's own wording
    # ChatML alone (SmolLM2's vocabulary) names no family; nor does a tokenizer that breaks.
    for tokens in [("<|im_start|>",), ()]:
        server.forget()
        with ScriptedServer([_probe_answer(), reply_text("5")], model="local", owned_by="me",
                            special_tokens=tokens) as srv:
            with _agent(srv, tool_mode="auto") as agent:
                agent.run("add 2 and 3")
                assert agent.profile_choice is not None
                assert agent.profile_choice.profile.name == "generic"


def test_the_reply_to_an_answer_check_is_constrained_to_what_it_asks() -> None:
    """After "use Python" answered with no call, the reply to ipyagent's check must be a call
    (no final_answer: measured at 1.5B, asked in words it showed a ```python block instead);
    after an empty answer, it must say something."""
    def python(code: str) -> str:
        """Run Python (a stand-in: the check needs a tool that runs code)."""
        return "5"

    call = '<tool_call>\n{"name": "python", "arguments": {"code": "print(2 + 3)"}}\n</tool_call>'
    with ScriptedServer([_probe_answer(), reply_text("1024"), reply_text(call), reply_text("5")],
                        model="qwen2.5-coder-1.5b", owned_by="me") as srv:
        with _agent(srv, verify_answers=True, tools=[python]) as agent:
            result = agent.run("Use Python to add 2 and 3.")
        _, first, checked, after = [r.body for r in srv.requests]
    assert result.text == "5" and len(result.steps) == 3
    assert first["grammar"].startswith("root ::= ws ( lead calls? | calls )?\n")
    assert checked["grammar"].startswith("root ::= ws call ws\n")  # one call, no more
    assert '"\\"final_answer\\""' not in checked["grammar"] and '"\\"python\\""' in checked["grammar"]
    assert after["grammar"].startswith("root ::= ws ( lead calls? | calls )?\n")  # the check answered: as before
    server.forget()
    with ScriptedServer([_probe_answer(), reply_text(""), reply_text("It is 5.")],
                        model="qwen2.5-coder-1.5b", owned_by="me") as srv:
        with _agent(srv, verify_answers=True) as agent:
            result = agent.run("What is 2 + 3?")
        said = srv.requests[-1].body["grammar"]
    assert result.text == "It is 5."
    assert said.startswith("root ::= ws ( lead calls? | calls )\n")


def test_a_reply_that_repeats_the_last_call_is_asked_again_for_the_answer() -> None:
    """Measured at 0.5B: with its answer printed, the model wrote the same call again, and
    again until the circuit breaker. Such a reply is discarded (shown so, recorded on the
    turn) and the same prompt asked again with the grammar holding the reply to one
    final_answer call; the
    tool ran once. Not when the check is off, nor after a failed call (running it again
    can be the fix's first step)."""
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    events: list[Any] = []
    final = '{"name": "final_answer", "arguments": {"answer": "It is 5."}}'
    with ScriptedServer([_probe_answer(), reply_text(call), reply_text(call), reply_text(final)],
                        model="qwen2.5-coder-0.5b", owned_by="me") as srv:
        with _agent(srv, verify_answers=True) as agent:
            result = agent.run("What is 2 + 3? Use the add tool.", on_event=events.append)
            items = list(agent.context)
        _, first, repeated, asked_again = [r.body for r in srv.requests]
    assert result.text == "It is 5." and result.stop_reason == "done"
    assert sum(1 for i in items if type(i).__name__ == "ToolResult") == 1  # ran once
    assert asked_again["messages"] == repeated["messages"]  # the same prompt: all of it cached
    assert repeated["grammar"].startswith("root ::= ws ( lead calls? | calls )?\n")
    # One final_answer call and nothing else (held to words, the 0.5B wrote "NULL" or
    # imitated the tool's result).
    assert asked_again["grammar"].startswith("root ::= ws call ws\n")
    assert '"\\"final_answer\\""' in asked_again["grammar"]
    assert '"\\"add\\""' not in asked_again["grammar"]
    answer = items[-1]
    assert answer.meta["turn"]["discarded"] == [call]
    lines = [e.line for e in events if type(e).__name__ == "Discarded"]
    assert lines == ["discarded: the model made its last add call again, whose result it has; "
                     "asked for its answer instead; asking again"]
    # Its result written back as code (the 0.5B ran 2**100's value as code): the same.
    server.forget()
    echo = '<tool_call>\n{"name": "python", "arguments": {"code": "5"}}\n</tool_call>'
    with ScriptedServer([_probe_answer(), reply_text(echo.replace('"5"', '"2 + 3"')),
                         reply_text(echo), reply_text(final)],
                        model="qwen2.5-coder-0.5b", owned_by="me") as srv:
        with _agent(srv, verify_answers=True, tools=[python]) as agent:
            assert agent.run("What is 2 + 3?").text == "It is 5."
            assert sum(1 for i in agent.context if type(i).__name__ == "ToolResult") == 1
    # The check off: the repeat runs (the circuit breaker's note tells the model).
    for settings, first_result in [({"verify_answers": False}, "5"),
                                   ({"verify_answers": True, "tools": [_fails],
                                     "repeat_temperature": 0}, None)]:
        server.forget()
        with ScriptedServer([_probe_answer(), reply_text(call.replace("add", settings.get(
                "tools", [add])[0].__name__)), reply_text(call.replace("add", settings.get(
                "tools", [add])[0].__name__)), reply_text("done")],
                model="qwen2.5-coder-0.5b", owned_by="me") as srv:
            with _agent(srv, **settings) as agent:
                agent.run("What is 2 + 3?")
                results = [i for i in agent.context if type(i).__name__ == "ToolResult"]
        assert len(results) == 2, settings
        if first_result:
            assert results[0].output == first_result


def python(code: str) -> str:
    """Run Python (a stand-in that prints 5)."""
    return "5"


def _fails(a: int, b: int) -> int:
    """Add two numbers (a stand-in that fails)."""
    raise ValueError("no")


def test_the_payload_carries_grammar_and_stop_only_when_set() -> None:
    client = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1")
    plain = client.payload(ModelRequest("", [Message("user", "hi")]))
    assert "grammar" not in plain and "stop" not in plain
    shaped = client.payload(ModelRequest("", [Message("user", "hi")], grammar='root ::= "x"',
                                         stop=("<tool_response>",)))
    assert shaped["grammar"] == 'root ::= "x"' and shaped["stop"] == ["<tool_response>"]


# -- what a server says is data -------------------------------------------------------------
def _facts_from(routes: dict[str, Any], model: str = "m") -> Any:
    import asyncio

    import httpx

    def answer(request: httpx.Request) -> httpx.Response:
        found = routes.get(request.url.path)
        if found is None:
            return httpx.Response(404, json={"error": "no"})
        return found if isinstance(found, httpx.Response) else httpx.Response(200, json=found)

    async def go() -> Any:
        server.forget()  # the answers are cached per server and model
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
            return await server.gather(http, "http://127.0.0.1:1/v1", model, local=True)

    return asyncio.run(go())


def test_garbage_from_the_server_gives_no_facts_and_no_error(tmp_path: Path) -> None:
    import os

    import httpx

    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)  # would block a reader forever: never opened
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("hello")
    facts = _facts_from({
        "/v1/models": {"data": [{"id": str(fifo), "owned_by": "me"}, {"id": 7}, "x",
                                {"id": str(not_gguf)}, {"id": "/etc/passwd"}]},
        "/props": httpx.Response(200, content=b"{not json"),
    })
    assert facts.model_ids == (str(fifo), str(not_gguf), "/etc/passwd") and facts.owners == ("me",)
    assert facts.gguf is None and facts.gguf_path == "" and not facts.props
    empty = _facts_from({"/v1/models": ["not", "a", "listing"], "/props": ["nor", "this"]})
    assert empty.model_ids == () and not empty.props and not empty.llama_cpp


def test_props_give_the_template_and_a_local_model_file_its_header(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(_gguf([("general.architecture", 8, _str("qwen2")),
                            ("general.name", 8, _str("Qwen2.5 Coder 1.5B Instruct"))]))
    template = "{%- if tools %}<|im_start|>system <tool_call>{% endif %}" + "x" * 100_000
    facts = _facts_from({"/v1/models": {"data": [{"id": "local", "owned_by": "llamacpp"}]},
                         "/props": {"model_path": str(gguf), "chat_template": template}},
                        model="local")
    assert facts.props and facts.llama_cpp and facts.gguf_path == str(gguf)
    assert facts.gguf is not None and facts.gguf.name == "Qwen2.5 Coder 1.5B Instruct"
    assert facts.chat_template == template[:64_000]  # bounded
    from ipyagent.models.profiles.detect import choose_profile

    chosen = choose_profile("auto", "local", facts)
    assert chosen.name == "qwen2.5" and chosen.template_tools is True


@pytest.mark.parametrize("rules, must", [
    (["no_call"], "call"), (["units"], "call"), (["zero"], "call"), (["unsupported_number"], "call"),
    (["empty_answer"], "say"), (["error_ignored"], "call"), (["last_call_failed"], "call"),
    (["file_unchanged"], ""), (["decimals"], "call"),
])
def test_which_checks_hold_the_reply_to_a_call(rules: list[str], must: str) -> None:
    """A check that asks to run something gets a call (a failed call too: the answer after
    the next call can still say it failed); an unwritten file leaves the reply free (the
    model may say why it did not write it)."""
    from ipyagent.context.evidence import CHECK_KEY
    from ipyagent.engine.step import _reply_must

    with Agent(model="demo", python_tool=False, file_tools=False) as agent:
        agent.context.append(Message("user", "task"))
        assert _reply_must(agent) == ""
        agent.context.append(Message("user", "check", meta={CHECK_KEY: {"rules": rules}}))
        assert _reply_must(agent) == must


def test_the_reply_after_a_failing_call_not_run_again_is_held_to_a_call() -> None:
    """Told in words that its failing call was not run, the 1.5B restated the note."""
    from ipyagent.engine.step import SAME_FAILURE, _reply_must

    with Agent(model="demo", python_tool=False, file_tools=False) as agent:
        agent.context.extend([Message("user", "task"), ToolCall("c1", "python", {"code": "1/0"}),
                              ToolResult("c1", "ZeroDivisionError", error=True, name="python")])
        assert _reply_must(agent) == ""  # a failure alone leaves the reply free
        agent.context.extend([ToolCall("c2", "python", {"code": "1/0"}),
                              ToolResult("c2", "Not run", error=True, name="python",
                                         meta={"skipped": SAME_FAILURE})])
        assert _reply_must(agent) == "call"


@pytest.mark.parametrize("reply, tokens", [
    (lambda body: __import__("httpx").Response(500, text="<script>alert(1)</script>"), ()),
    (lambda body: __import__("httpx").Response(200, text="not json"), ()),
    (lambda body: __import__("httpx").Response(200, json={"tokens": "\u202e<|im_start|>"}), ()),
    (lambda body: __import__("httpx").Response(200, json=[1, 2]), ()),
    # A server that calls every marker one token picks a profile: only the call format, never
    # a setting, an endpoint or a key, follows from it.
    (lambda body: __import__("httpx").Response(200, json={"tokens": [7] if body["input"] else []}),
     ("<|im_start|>", "<tool_call>", "<think>", "<|start_header_id|>", "<|eom_id|>",
      "[TOOL_CALLS]", "<start_of_turn>", "<|tool_call|>")),
])
def test_a_hostile_tokenizer_gives_no_facts_or_only_marker_names(reply: Any, tokens: tuple[str, ...]) -> None:
    import asyncio
    import json as json_module

    import httpx

    def handle(request: httpx.Request) -> httpx.Response:
        return reply(json_module.loads(request.content))

    async def ask() -> tuple[str, ...]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as http:
            return await server._one_token_markers(http, "http://127.0.0.1:9/v1", "local", None)

    assert asyncio.run(ask()) == tokens
