"""The response cache, against a real OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import threading
import uuid

import pytest

from ipyagent import Agent, Message, ToolCall, ToolResult
from ipyagent.context.events import Notice
from ipyagent.models.base import ModelRequest, TextDelta, Turn, TurnComplete
from ipyagent.models.cache import CachedModel, CacheMiss, ResponseCache, request_key
from tests.helpers.scripted_model import ScriptedModel, text
from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls
from tests.helpers.tools import add


def random_id_script():
    """Two turns whose call ids are random, as real servers mint them."""
    return [
        lambda body: reply_tool_calls([("add", {"a": 2, "b": 3}, f"call_{uuid.uuid4().hex}")],
                                      text="adding"),
        lambda body: reply_tool_calls([("add", {"a": 5, "b": 5}, f"call_{uuid.uuid4().hex}")]),
        lambda body: reply_text("It is 10."),
    ]


def server_agent(srv: ScriptedServer, cache_path, **kw) -> Agent:
    return Agent(model="scripted-model", base_url=srv.base_url, api_key_env="",
                 python_tool=False, tools=[add], cache_path=str(cache_path), **kw)


def _untimed(context) -> list[dict]:
    """The items as saved, without the time each approval decision was made."""
    items = [i.to_dict() for i in context]
    for item in items:
        item.get("meta", {}).get("decision", {}).pop("at", None)
    return items


def test_second_run_makes_no_request_and_yields_the_same_transcript(tmp_path):
    db = tmp_path / "cache.sqlite"
    with ScriptedServer(random_id_script()) as srv:
        first = server_agent(srv, db, cache="on")
        r1 = first.run("add 2 and 3, then 5 and 5")
        assert r1.stop_reason == "done" and len(srv.bodies) == 3
        assert first.client.misses == 3 and first.client.hits == 0
        second = server_agent(srv, db, cache="on")
        r2 = second.run("add 2 and 3, then 5 and 5")
        assert len(srv.bodies) == 3  # the server saw nothing new
        assert second.client.hits == 3
        assert r2.text == r1.text == "It is 10."
        # Identical transcripts, random call ids included (only the decisions' clock differs).
        assert _untimed(second.context) == _untimed(first.context)
        # The same again when nothing may reach the model at all.
        third = server_agent(srv, db, cache="replay-only")
        assert third.run("add 2 and 3, then 5 and 5").text == "It is 10."
        assert len(srv.bodies) == 3
        for agent in (first, second, third):
            agent.close()
    assert len(ResponseCache(db)) == 3


def test_a_different_request_is_a_miss(tmp_path):
    db = tmp_path / "cache.sqlite"
    with ScriptedServer([reply_text("one"), reply_text("two")]) as srv:
        a = server_agent(srv, db, cache="on")
        a.run("first question")
        b = server_agent(srv, db, cache="on", temperature=0.5)  # sampling settings count
        assert b.run("first question").text == "two"
        assert len(srv.bodies) == 2
        a.close()
        b.close()


def test_replay_only_miss_is_a_clear_one_line_error(tmp_path):
    with ScriptedServer([reply_text("never sent")]) as srv:
        agent = server_agent(srv, tmp_path / "empty.sqlite", cache="replay-only")
        result = agent.run("not recorded")
        assert result.stop_reason == "error"
        assert "replay-only cache: no recorded reply" in result.error
        assert "Agent.cache = 'on'" in result.error and "\n" not in result.error
        assert srv.bodies == []
        assert len(agent.context) == 1  # only the task: the context stays valid
        agent.close()


def test_an_error_is_said_once_and_the_footer_points_to_it(tmp_path):
    import io

    from ipyagent.frontends.terminal import TerminalDisplay

    out = io.StringIO()
    with ScriptedServer([]) as srv:
        agent = server_agent(srv, tmp_path / "empty.sqlite", cache="replay-only")
        result = agent.run("not recorded", on_event=TerminalDisplay(out))
        agent.close()
    shown = out.getvalue()
    assert shown.count(result.error) == 1, shown
    assert f"[error] {result.error}" in shown
    assert shown.rstrip().splitlines()[-1].endswith("· the error above")
    assert result.footer().endswith(result.error)  # on its own, the footer still says it


def test_cache_setting_can_change_between_runs(tmp_path):
    model = ScriptedModel([text("live"), text("live again")])
    agent = Agent(client=model, python_tool=False, cache_path=str(tmp_path / "c.sqlite"))
    assert agent.client is model  # off by default
    agent.cache = "on"
    assert isinstance(agent.client, CachedModel) and agent.client.inner is model
    agent.run("hello")
    agent.reset()
    assert agent.run("hello").text == "live"  # from the cache
    assert len(model.requests) == 1
    agent.cache = "off"
    agent.reset()
    assert agent.run("hello").text == "live again"


def request(*items, **kw) -> ModelRequest:
    return ModelRequest(system="sys", items=list(items), **kw)


def test_key_ignores_ids_meta_and_varying_output_but_not_content():
    base = request(Message("user", "q"), ToolCall("call_a", "add", {"a": 1}),
                   ToolResult("call_a", "made at 2024-01-01 10:00:00"))
    same = request(Message("user", "q", meta={"x": 1}), ToolCall("call_zz", "add", {"a": 1}),
                   ToolResult("call_zz", "made at 2025-06-30 23:59:59", meta={"status": "ok"}))
    assert request_key("m", base) == request_key("m", same)
    different = [
        request(Message("user", "Q"), ToolCall("call_a", "add", {"a": 1}),
                ToolResult("call_a", "made at 2024-01-01 10:00:00")),
        request(Message("user", "q"), ToolCall("call_a", "add", {"a": 2}),
                ToolResult("call_a", "made at 2024-01-01 10:00:00")),
        request(Message("user", "q"), ToolCall("call_a", "add", {"a": 1}),
                ToolResult("call_b", "made at 2024-01-01 10:00:00")),  # answers another call
        request(Message("user", "q"), temperature=0.0),
    ]
    different.append(request(Message("user", "q"), ToolCall("call_a", "add", {"a": 1}),
                             ToolResult("call_a", "made at 2024-01-01 10:00:00",
                                        meta={"images": [{"mime": "image/png", "data": "AAAA"}]})))
    keys = {request_key("m", r) for r in different} | {request_key("m", base),
                                                       request_key("other-model", base)}
    assert len(keys) == 7
    assert request_key("m", request(tools=[{"name": "t"}])) != request_key("m", request())


def test_store_is_thread_safe(tmp_path):
    store = ResponseCache(tmp_path / "threads.sqlite")
    errors = []

    def work(n: int) -> None:
        try:
            for i in range(25):
                key = f"{n}-{i}"
                store.put(key, "m", [TextDelta(key), TurnComplete(Turn(text=key))])
                events = store.get(key)
                assert events is not None and events[-1].turn.text == key
        except Exception as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(store) == 200


async def test_only_whole_replies_are_recorded(tmp_path):
    from ipyagent.errors import ModelConnectionError

    store = ResponseCache(tmp_path / "c.sqlite")
    model = CachedModel(ScriptedModel([ModelConnectionError("dropped")]), store)
    with pytest.raises(ModelConnectionError):
        [e async for e in model.stream(request(Message("user", "q")))]
    assert len(store) == 0
    with pytest.raises(CacheMiss):
        [e async for e in CachedModel(ScriptedModel([]), store, mode="replay-only").stream(
            request(Message("user", "q")))]


def test_a_retried_reply_is_cached_without_the_retry(tmp_path):
    """A Retrying notice inside the stream is not part of the reply (it used to crash)."""
    from tests.helpers.scripted_server import http_error

    db = tmp_path / "cache.sqlite"
    with ScriptedServer([http_error(503, {"error": {"message": "busy"}}), reply_text("Fine.")]) as srv:
        agent = Agent(model="m", base_url=srv.base_url, python_tool=False, cache="on",
                      cache_path=str(db))
        agent.client.inner.retry.backoff = 0  # type: ignore[attr-defined]
        assert agent.run("hi").text == "Fine."
        agent.close()
        again = Agent(model="m", base_url=srv.base_url, python_tool=False, cache="replay-only",
                      cache_path=str(db))
        assert again.run("hi").text == "Fine." and len(srv.bodies) == 2
        again.close()


def test_a_reply_discarded_mid_stream_is_not_replayed_from_the_cache(tmp_path):
    """Only the whole reply is kept: a replay shows no half answer before it."""
    from tests.helpers.scripted_server import drop_connection_mid_stream

    half = [{"choices": [{"index": 0, "delta": {"content": "Half an ans"}, "finish_reason": None}]}]
    db = tmp_path / "cache.sqlite"
    with ScriptedServer([drop_connection_mid_stream(half), reply_text("Fine.")]) as srv:
        agent = Agent(model="m", base_url=srv.base_url, python_tool=False, cache="on",
                      cache_path=str(db))
        agent.client.inner.retry.backoff = 0  # type: ignore[attr-defined]
        assert agent.run("hi").text == "Fine."
        agent.close()
        again = Agent(model="m", base_url=srv.base_url, python_tool=False, cache="replay-only",
                      cache_path=str(db))
        texts: list[str] = []
        result = again.run("hi", on_event=lambda e: texts.append(e.text) if isinstance(e, TextDelta) else None)
        again.close()
    assert result.text == "Fine." and "".join(texts) == "Fine." and len(srv.bodies) == 2


def test_a_lone_surrogate_in_the_conversation_is_cached_and_saved(tmp_path):
    db = tmp_path / "cache.sqlite"
    agent = Agent(client=ScriptedModel([text("Smile \ud83d")]), python_tool=False, cache="on",
                  cache_path=str(db))
    assert agent.run("hi \udc00").stop_reason == "done"
    assert len(ResponseCache(db)) == 1
    path = agent.save(tmp_path / "run.ipynb")
    assert "\ufffd" in path.read_text(encoding="utf-8")
    agent.close()


def corrupt_with_random_bytes(db) -> None:
    import os

    db.write_bytes(os.urandom(8192))


def truncate_a_real_cache(db) -> None:
    cache = ResponseCache(db)
    for i in range(40):
        cache.put(f"key{i}", "m", [TurnComplete(Turn(text="x" * 3000))])
    size = db.stat().st_size
    with open(db, "r+b") as f:
        f.truncate(size // 2)


@pytest.mark.parametrize("damage", [corrupt_with_random_bytes, truncate_a_real_cache],
                         ids=["random-bytes", "truncated"])
def test_a_corrupt_cache_is_set_aside_with_one_warning_and_the_run_goes_on(
        tmp_path, caplog, damage):
    """Issue 12, finding 7: every run() raised until the file was deleted."""
    db = tmp_path / "cache.sqlite"
    damage(db)
    damaged = db.read_bytes()
    with ScriptedServer([reply_text("fresh"), reply_text("again")]) as srv:
        events: list = []
        with caplog.at_level("WARNING", logger="ipyagent.models.cache"), \
                server_agent(srv, db, cache="on") as agent:
            assert agent.run("hi", on_event=events.append).text == "fresh"
        warned = [e.message for e in events if isinstance(e, Notice)]
        (aside,) = tmp_path.glob("cache.sqlite.corrupt-*")
        assert len(warned) == 1 and "\n" not in warned[0]  # one line, in the run's display
        assert f"moved it to {aside.name}" in warned[0] and "started a new one" in warned[0]
        assert [r.getMessage() for r in caplog.records if r.name == "ipyagent.models.cache"] == warned
        assert aside.read_bytes() == damaged  # kept, for whoever wants to look
        assert len(ResponseCache(db)) == 1  # a fresh cache, holding this run's reply
        with server_agent(srv, db, cache="on") as agent:  # and it is used: no new request
            assert agent.run("hi").text == "fresh" and len(srv.bodies) == 1


def test_a_busy_cache_is_not_taken_for_a_corrupt_one(tmp_path):
    """Only a damaged file is set aside: "database is locked" (another writer) is not that."""
    import sqlite3

    from ipyagent._util.sqlite import is_corrupt as _is_corrupt

    db = tmp_path / "cache.sqlite"
    ResponseCache(db).put("k", "m", [TurnComplete(Turn(text="kept"))])
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process in the middle of a write
    try:
        with pytest.raises(sqlite3.OperationalError) as busy:
            sqlite3.connect(db, timeout=0).execute("SELECT 1 FROM responses").fetchall()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not _is_corrupt(busy.value)
    corrupt_with_random_bytes(tmp_path / "other.sqlite")
    with pytest.raises(sqlite3.DatabaseError) as broken:
        sqlite3.connect(tmp_path / "other.sqlite").execute("SELECT * FROM sqlite_master").fetchall()
    assert _is_corrupt(broken.value)
