"""The whole loop against a real OpenAI-compatible server on 127.0.0.1 and a real kernel."""

from __future__ import annotations

import logging

import pytest

from ipyagent import Agent, ToolResult
from tests.helpers.scripted_server import ScriptedServer, http_error, reply_text, reply_tool_calls

SENTINEL = "sk-SENTINEL-agent-0123456789"

# Every shape the corpus README lists for streamed tool calls.
SHAPES = {
    "fragments": dict(fragments=5),
    "whole-arguments": dict(fragments=1),
    "id-name-every-chunk": dict(fragments=4, repeat_id_name=True),
    "no-index": dict(fragments=3, omit_index=True),
    "no-done": dict(done=False),
    "comments-and-pings": dict(keepalives=True),
    "usage-on-every-chunk": dict(usage_on="every"),
    "finish-in-last-delta": dict(finish_own_chunk=False),
    "not-streamed": dict(stream=False),
}


@pytest.fixture(scope="module")
def agent():
    with Agent(model="test-model", approval="auto", max_retries=1) as agent:
        yield agent


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
def test_two_step_python_run_in_every_shape(agent, shape):
    options = SHAPES[shape]
    code = "x = 6 * 7\nprint(x)"
    with ScriptedServer([reply_tool_calls([("python", {"code": code}, "")], **options),
                         reply_text("The answer is 42.", **{k: v for k, v in options.items()
                                                            if k not in ("fragments", "repeat_id_name",
                                                                         "omit_index")})]) as srv:
        agent.reset()
        agent.base_url = srv.base_url
        result = agent.run("What is 6*7? Use Python.")
        bodies = srv.bodies
    assert result.stop_reason == "done", result
    assert result.text == "The answer is 42."
    tool_result = next(i for i in agent.context if isinstance(i, ToolResult))
    assert tool_result.output.strip() == "42" and not tool_result.error
    # The second request carried the call (with a synthesized id for "") and its result.
    messages = bodies[1]["messages"]
    call_id = messages[-2]["tool_calls"][0]["id"]
    assert call_id and messages[-1] == {"role": "tool", "tool_call_id": call_id, "content": "42"}


def test_key_reaches_the_server_but_never_a_repr_error_or_log(monkeypatch, caplog):
    monkeypatch.setenv("IPYAGENT_TEST_KEY", SENTINEL)
    caplog.set_level(logging.DEBUG)
    with ScriptedServer([reply_text("hi"),
                         http_error(401, {"error": {"message": "bad key"}})]) as srv:
        with Agent(model="m", base_url=srv.base_url, api_key_env="IPYAGENT_TEST_KEY",
                   python_tool=False, max_retries=0) as agent:
            ok = agent.run("hello")
            failed = agent.run("again")
            seen = [repr(agent), agent._repr_html_(), repr(agent.client), str(ok), str(failed),
                    failed.error or "", repr(agent.context), agent.context._repr_html_()]
        assert srv.requests[0].headers["authorization"] == f"Bearer {SENTINEL}"
        assert srv.base_url in failed.error
    assert failed.stop_reason == "error" and "HTTP 401: bad key" in failed.error
    for text in seen + [caplog.text]:
        assert SENTINEL not in text


def test_missing_key_is_not_sent(monkeypatch):
    monkeypatch.delenv("IPYAGENT_NO_KEY", raising=False)
    with ScriptedServer([reply_text("hi")]) as srv:
        with Agent(model="m", base_url=srv.base_url, api_key_env="IPYAGENT_NO_KEY",
                   python_tool=False) as agent:
            assert agent.run("hello").stop_reason == "done"
        assert "authorization" not in srv.requests[0].headers


def test_changing_settings_rebuilds_the_client():
    with ScriptedServer([reply_text("one")]) as a, ScriptedServer([reply_text("two")]) as b:
        with Agent(model="m", base_url=a.base_url, python_tool=False) as agent:
            assert agent.run("x").text == "one"
            agent.base_url = b.base_url
            assert agent.run("y").text == "two"
            agent.model = "other-model"
            b.script([reply_text("three")])
            agent.run("z")
        assert b.bodies[-1]["model"] == "other-model"


def test_retry_then_success_inside_a_run():
    with ScriptedServer([http_error(503, {"error": {"message": "busy"}}, headers={"retry-after": "0"}),
                         reply_text("after retry")]) as srv:
        events = []
        with Agent(model="m", base_url=srv.base_url, python_tool=False, max_retries=2) as agent:
            assert agent.run("x", on_event=events.append).text == "after retry"
        assert len(srv.bodies) == 2
    notices = [e.message for e in events if type(e).__name__ == "Notice"]
    assert len(notices) == 1 and "HTTP 503: busy" in notices[0] and "retry 1 of 2" in notices[0]


def test_model_code_that_kills_the_kernel_does_not_stop_the_agent(agent):
    script = [reply_tool_calls([("python", {"code": "x = 1"})]),
              reply_tool_calls([("python", {"code": "import os; os._exit(1)"})]),
              reply_tool_calls([("python", {"code": "print('alive', 'x' in globals())"})]),
              reply_text("The kernel restarted and x was lost.")]
    with ScriptedServer(script) as srv:
        agent.reset()
        agent.base_url = srv.base_url
        result = agent.run("crash the kernel")
        told = srv.bodies[2]["messages"][-1]["content"]
    assert result.stop_reason == "done"
    results = [i for i in agent.context if isinstance(i, ToolResult)]
    assert results[1].error and results[1].meta["status"] == "died"
    assert "kernel died" in told and "lost" in told  # the model was told
    assert results[2].output.strip() == "alive False"  # a fresh kernel ran the next call


def test_plots_reach_a_vision_model_only_with_send_images(agent):
    pytest.importorskip("matplotlib")
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"
    for send in (False, True):
        with ScriptedServer([reply_tool_calls([("python", {"code": code}), ("python", {"code": "1+1"})]),
                             reply_text("a line")]) as srv:
            agent.reset()
            agent.base_url = srv.base_url
            agent.send_images = send
            assert agent.run("plot it").stop_reason == "done"
            messages = srv.bodies[1]["messages"]
        result = next(i for i in agent.context if isinstance(i, ToolResult))
        assert any("image/png" in o.get("data", {}) for o in result.outputs)  # kept whole
        assert "[image/png" in messages[-2 if not send else -3]["content"]  # placeholder text
        if send:
            # Both tool messages stay together; the image follows them as a user message.
            assert [m["role"] for m in messages[-3:]] == ["tool", "tool", "user"]
            url = messages[-1]["content"][1]["image_url"]["url"]
            assert url.startswith("data:image/png;base64,iVBOR")
        else:
            assert messages[-1]["role"] == "tool"
    agent.send_images = False


def test_extra_body_reaches_the_server_for_every_api():
    with ScriptedServer([reply_text("ok"), reply_text("ok")]) as srv:
        with Agent(model="m", base_url=srv.base_url, python_tool=False, file_tools=False,
                   extra_body={"options": {"num_ctx": 16384}}) as agent:
            agent.run("x")
            agent.extra_body = {"options": {"num_ctx": 4096}}  # rebuilds the client
            agent.run("y")
        assert srv.bodies[0]["options"] == {"num_ctx": 16384}
        assert srv.bodies[1]["options"] == {"num_ctx": 4096}


def test_tokens_of_a_reply_that_failed_mid_stream_still_count():
    from tests.helpers.scripted_server import raw_sse, sse_event

    failing = raw_sse(sse_event({"choices": [{"index": 0, "delta": {"content": "par"}}],
                                 "usage": {"prompt_tokens": 40, "completion_tokens": 3}})
                      + sse_event({"error": {"message": "upstream overloaded"}}))
    with ScriptedServer([failing]) as srv:
        with Agent(model="m", base_url=srv.base_url, python_tool=False, max_retries=0) as agent:
            result = agent.run("x")
    assert result.stop_reason == "error" and "upstream overloaded" in result.error
    assert (agent.usage.input, agent.usage.output) == (40, 3)
    assert [type(i).__name__ for i in agent.context] == ["Message"]  # nothing half-done added


# ------------------------------------------------------------------ a stream broken mid-reply


def _chunk(delta: dict, usage: dict | None = None) -> dict:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            **({"usage": usage} if usage else {})}


def test_a_reply_cut_mid_stream_is_asked_again_and_only_the_whole_one_is_kept(tmp_path):
    from ipyagent.context.events import Discarded, Notice
    from ipyagent.transcripts.transcript import read
    from tests.helpers.scripted_server import Reset, sse_event

    def double(n: int) -> int:
        """Twice n."""
        ran.append(n)
        return 2 * n

    ran: list[int] = []
    half_call = {"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                 "function": {"name": "double", "arguments": '{"n": 2'}}]}
    broken = Reset(sse_event(_chunk({"role": "assistant", "content": "Half an ans"},
                                    {"prompt_tokens": 40, "completion_tokens": 3}))
                   + sse_event(_chunk(half_call)))
    good = reply_tool_calls([("double", {"n": 21})], usage={"prompt_tokens": 50, "completion_tokens": 5})
    seen: list = []
    saved = tmp_path / "run.ipynb"
    with ScriptedServer([broken, good, reply_text("42.", usage={"prompt_tokens": 60, "completion_tokens": 1})]) as srv:
        with Agent(model="m", base_url=srv.base_url, python_tool=False, file_tools=False, tools=[double],
                   approval="auto", autosave=str(saved)) as agent:
            agent.client.retry.sleep = _no_sleep
            result = agent.run("double 21", on_event=seen.append)
    assert (result.stop_reason, result.text) == ("done", "42.") and ran == [21]  # the half call never ran
    assert [e.line for e in seen if isinstance(e, Discarded)] == ["discarded: the connection dropped; asking again"]
    assert any(isinstance(e, Notice) and "retry 1 of" in e.message for e in seen)
    kinds = [(i.type, getattr(i, "content", "")) for i in agent.context]
    assert kinds == [("message", "double 21"), ("tool_call", ""), ("tool_result", ""), ("message", "42.")]
    assert agent.context[1].arguments == {"n": 21}
    # billed: the void reply's tokens too; recorded as the turn's: the whole reply's only
    assert (agent.usage.input, agent.usage.output) == (40 + 50 + 60, 3 + 5 + 1)
    assert (result.steps[0].usage.input, result.steps[0].usage.output) == (90, 8)
    assert agent.context[1].meta["turn"]["usage"] == {"prompt_tokens": 50, "completion_tokens": 5}
    assert "Half an ans" not in saved.read_text()  # the autosaved transcript never held it
    assert [i.type for i in read(saved).items] == [i.type for i in agent.context]


def test_a_drop_on_every_attempt_ends_in_error_with_the_context_still_valid():
    from tests.helpers.scripted_server import drop_connection_mid_stream

    half = [_chunk({"role": "assistant", "content": "Half"})]
    with ScriptedServer([drop_connection_mid_stream(half)] * 3 + [reply_text("Back.")]) as srv:
        with Agent(model="m", base_url=srv.base_url, python_tool=False, file_tools=False,
                   max_retries=2) as agent:
            agent.client.retry.sleep = _no_sleep
            failed = agent.run("go")
            assert failed.stop_reason == "error" and len(srv.bodies) == 3
            assert failed.error.startswith("connection dropped mid-stream") and "\n" not in failed.error
            assert [i.type for i in agent.context] == ["message"]  # nothing half-done added
            again = agent.run(None)  # the next request goes out and is accepted
    assert (again.stop_reason, again.text) == ("done", "Back.")
    assert [m["role"] for m in srv.bodies[-1]["messages"]] == ["system", "user"]


async def _no_sleep(seconds: float) -> None:
    pass


def test_a_server_that_only_sends_keepalives_ends_the_run_with_the_setting_to_raise():
    from tests.helpers.scripted_server import Endless

    with ScriptedServer([Endless(": keep-alive\n\n", every=0.1), reply_text("never asked for")]) as srv:
        with Agent(model="m", base_url=srv.base_url, python_tool=False, file_tools=False,
                   first_token_timeout=0.5) as agent:
            result = agent.run("go")
        assert len(srv.bodies) == 1  # not retried: a server that slow is as slow again
    assert result.stop_reason == "error" and "\n" not in result.error
    assert result.error.startswith("no reply within Agent.first_token_timeout=0.5 s")
    assert [i.type for i in agent.context] == ["message"]


def test_a_server_that_counts_nothing_is_billed_as_the_meter_counts_the_request():
    """No usage in the reply (some local servers): the request's own estimate, the same
    figure the footer's meter and the context table give, marked estimated."""
    from ipyagent.context.events import StepStarted
    from ipyagent.frontends.cellrun import request_meter

    with ScriptedServer([reply_tool_calls([("python", {"code": "print(7)"})], usage=False),
                         reply_text("7", usage=False)]) as srv, \
            Agent(model="m", base_url=srv.base_url, approval="auto", shell_tool="off") as agent:
        before: list[int] = []
        result = agent.run("print 7", on_event=lambda e: isinstance(e, StepStarted)
                           and before.append(request_meter(agent)[0]))
    assert result.ok and [s.usage.input for s in result.steps] == before
    assert all(s.usage.estimated for s in result.steps) and "estimated" in result.footer()
