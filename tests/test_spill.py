"""A saved result's large display values leave memory for a private file and come back whole."""

from __future__ import annotations

import base64
import copy
import json
import os
import pickle
import warnings

import pytest

from ipyagent import Agent, Message, ToolCall, ToolResult, tool
from ipyagent.context import spill as _spill
from ipyagent.context.items import unfold
from ipyagent.context.spill import Spilled, SpillStore, held, outputs_of, raw_outputs, raw_replaced, spill
from ipyagent.models.http import encode_json as _ENCODE

_THRESHOLD = SpillStore.threshold
PNG = base64.b64encode(bytes(range(256)) * 40).decode()  # ~13 KB


def _plot(n: int = 0) -> ToolResult:
    return ToolResult(f"c{n}", f"<Figure {n}>", name="plot", outputs=[
        {"output_type": "stream", "name": "stdout", "text": "drawing\n" * 400},
        {"output_type": "display_data", "metadata": {"image/png": {"width": 4}},
         "data": {"image/png": PNG + str(n), "text/html": ["<b>" * 400, "\ud83d half</b>"],
                  "application/json": {"rows": list(range(500))}, "text/plain": f"<Figure {n}>"}}],
        meta={"images": [{"mime": "image/png", "data": PNG}]})


def test_a_spilled_result_reads_back_whole_and_holds_only_references():
    result = _plot()
    before = copy.deepcopy(result.to_dict())
    assert spill(result)
    bundle = raw_outputs(result)[1]["data"]
    assert {m for m, v in bundle.items() if isinstance(v, Spilled)} == {
        "image/png", "text/html", "application/json"}
    assert bundle["text/plain"] == "<Figure 0>"  # small values stay
    assert raw_outputs(result)[0]["text"] == "drawing\n" * 400  # streams are not display payloads
    assert held(result) == len("<Figure 0>")
    assert result.to_dict() == before and outputs_of(result) == before["outputs"]
    assert json.loads(result.to_json())["outputs"][1]["data"]["text/html"][1] == "\ud83d half</b>"
    assert result == ToolResult.from_dict(before)
    assert copy.deepcopy(result).outputs == before["outputs"]
    assert pickle.loads(pickle.dumps(result)).outputs == before["outputs"]
    assert held(result) == len("<Figure 0>")  # none of those kept the values on it
    assert not spill(result)  # once


def test_the_same_payload_is_stored_once(monkeypatch):
    store = SpillStore()
    monkeypatch.setattr(_spill, "_store", store)
    first, second = _plot(), _plot()
    end = store._end
    spill(first)
    grown = store._end - end
    spill(second)
    assert store._end - end == grown > 0
    store.close()


def test_an_edit_in_place_of_a_spilled_result_sticks_and_the_next_spill_takes_it():
    """A notebook user appends to ``result.outputs`` or edits a bundle: it must not be lost."""
    result = _plot()
    spill(result)
    extra = {"output_type": "stream", "name": "stdout", "text": "kept"}
    result.outputs.append(extra)
    result.outputs[1]["data"]["text/html"] = "<b>edited</b>" * 200
    assert len(result.outputs) == 3 and result.outputs[2] == extra
    assert result.outputs[1]["data"]["text/html"] == "<b>edited</b>" * 200
    assert result.to_dict()["outputs"][2] == extra
    assert held(result) > 15_000  # read back onto the item, until it is spilled again
    bundle = result.outputs[1]["data"]
    assert spill(result) is None  # not while the bundle is held here: an edit of it must stick
    bundle["text/html"] = "<i>edited</i>" * 200
    del bundle
    assert spill(result) and held(result) < 100
    extra["text"] = "kept, then edited"  # a spill keeps this output as it is: still the item's
    assert outputs_of(result)[1]["data"]["text/html"] == "<i>edited</i>" * 200
    assert outputs_of(result)[2]["text"] == "kept, then edited"
    result.outputs = [{"output_type": "stream", "name": "stdout", "text": "new"}]
    assert result.outputs == [{"output_type": "stream", "name": "stdout", "text": "new"}]


def test_threshold_zero_spills_nothing(monkeypatch):
    monkeypatch.setattr(SpillStore, "threshold", 0)
    result = _plot()
    assert not spill(result)
    assert held(result) > 15_000


@pytest.mark.parametrize("damage", ["truncate", "overwrite"])
def test_a_gone_or_damaged_spill_file_gives_a_note_not_a_crash(damage, monkeypatch):
    store = SpillStore()
    monkeypatch.setattr(_spill, "_store", store)
    monkeypatch.setattr(_spill, "_said", set())
    result = _plot(7)
    spill(result)
    if damage == "truncate":
        os.truncate(store.path, 0)
    else:
        with open(store.path, "r+b") as f:
            f.write(b"X" * 64)  # the first value: the PNG
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        outputs = result.outputs
        result.to_dict()
    bundle = outputs[1]["data"]
    assert "image/png" not in bundle
    assert "is lost" in bundle["text/plain"] and "image/png" in bundle["text/plain"]
    lines = {str(w.message) for w in said}
    assert len(lines) == 1 and ("gone" in lines.pop()) == (damage == "truncate")
    if damage == "overwrite":  # the others were not touched: they still read back
        assert bundle["application/json"] == {"rows": list(range(500))}
    store.close()


def test_redaction_reads_and_replaces_a_spilled_result():
    from ipyagent.trust.redaction import redact_result

    secret = "sk-test-" + "q" * 40
    result = ToolResult("c", "x", outputs=[{"output_type": "display_data", "metadata": {},
                                            "data": {"text/html": f"<p>{secret}</p>" + "x" * 2000}}])
    spill(result)
    assert redact_result(result, {"KEY": secret}) == ["KEY"]
    assert secret not in json.dumps(result.outputs)


def test_a_full_disk_keeps_the_payloads_in_memory_and_says_so(monkeypatch):
    import errno

    store = SpillStore()
    monkeypatch.setattr(_spill, "_store", store)
    monkeypatch.setattr(_spill, "_said", set())
    real = os.write

    def full(fd: int, data: bytes) -> int:
        if fd == store._fd and len(data) > 5000:
            real(fd, data[:100])  # part of it, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(_spill.os, "write", full)
    result = _plot(3)
    before = result.to_dict()
    with pytest.warns(RuntimeWarning, match="stay in memory"):
        assert not spill(result)
    assert result.to_dict() == before and held(result) > 15_000
    monkeypatch.setattr(_spill.os, "write", real)
    assert spill(result)  # space again: the offsets follow the partial write
    assert result.to_dict() == before
    store.close()


def test_comparing_results_reads_a_payload_back_only_when_the_rest_is_equal(monkeypatch):
    spilled, fresh = _plot(4), _plot(4)
    spill(spilled)
    reads = []
    real = SpillStore.get
    monkeypatch.setattr(SpillStore, "get", lambda self, ref: reads.append(ref) or real(self, ref))
    others = [_plot(n) for n in range(3)]
    assert spilled not in others and reads == []
    assert spilled == fresh and reads  # the same content, one of them spilled
    fresh.outputs = []
    assert spilled != fresh
    assert ToolResult("a", "x") == ToolResult("a", "x") != ToolResult("a", "y")


def test_a_tool_cannot_forge_a_reference():
    """A reference is an object, not a JSON shape: a dict that looks like one is data."""
    fake = {"offset": 0, "length": 10**6, "digest": "00" * 32, "store": "/etc/passwd"}
    result = ToolResult("c", "x", outputs=[{"output_type": "display_data", "metadata": {},
                                            "data": {"application/json": fake, "text/plain": "y" * 2000}}])
    spill(result)
    assert result.outputs[0]["data"]["application/json"] == fake


# -- a run: autosave spills, every reader still gets the payloads, the requests do not change
@tool
async def plot(n: int) -> ToolResult:
    """Draw plot n."""
    return _plot(n)


def _run(tmp_path, spill_on: bool, monkeypatch):
    from ipyagent.models import http
    from tests.helpers.scripted_apis import any_api_reply
    from tests.helpers.scripted_server import ScriptedServer

    monkeypatch.setattr(SpillStore, "threshold", _THRESHOLD if spill_on else 0)
    monkeypatch.setenv("IPYAGENT_TEST_KEY", "k")
    sent: list[bytes] = []
    monkeypatch.setattr(http, "encode_json", lambda body: sent.append(_ENCODE(body)) or sent[-1])
    script = [any_api_reply("", [("plot", {"n": n})]) for n in range(3)] + [any_api_reply("done")]
    with ScriptedServer(script) as srv:
        agent = Agent(model="m", base_url=srv.base_url, api_key_env="IPYAGENT_TEST_KEY",
                      tools=[plot], python_tool=False, file_tools=False, send_images=True,
                      autosave=str(tmp_path / f"auto-{spill_on}.ipynb"))
        agent.run("plot three")
        agent.close()
    return agent, sent


def _dicts(items):
    """The items' dicts without their approval decisions (they hold times)."""
    out = [i.to_dict() for i in items]
    for d in out:
        d["meta"].pop("decision", None)
    return out


def test_a_run_spills_its_saved_payloads_and_sends_the_same_bytes(tmp_path, monkeypatch):
    from ipyagent.transcripts.transcript import read

    off, sent_off = _run(tmp_path, False, monkeypatch)
    on, sent_on = _run(tmp_path, True, monkeypatch)
    assert len(sent_on) == 4 and sent_on == sent_off  # what the model is sent does not change
    results = [i for i in on.context if isinstance(i, ToolResult)]
    assert len(results) == 3
    assert all(held(r) < 100 for r in results)  # spilled once autosaved
    assert all(held(r) > 15_000 for r in off.context if isinstance(r, ToolResult))
    assert _dicts(on.context) == _dicts(off.context)
    # every reader gets the full payload: export, save elsewhere, the context table
    nb_on, nb_off = on.context.to_notebook(), off.context.to_notebook()
    assert [c["outputs"] for c in nb_on.cells if c["cell_type"] == "code"] == \
        [c["outputs"] for c in nb_off.cells if c["cell_type"] == "code"]
    saved = on.save(tmp_path / "copy.ipynb")
    assert _dicts(read(saved).items) == _dicts(read(off.save(tmp_path / "off.ipynb")).items)
    assert len(on.context._repr_html_()) == len(off.context._repr_html_())
    assert PNG in (tmp_path / "auto-True.ipynb").read_text()


def test_compaction_keeps_references(tmp_path):
    from ipyagent.engine.compaction import _stub

    result = _plot()
    spill(result)
    cleared = _stub(result)
    assert raw_outputs(cleared) is raw_outputs(result)
    assert cleared.outputs == result.outputs


def test_a_saved_notebook_is_not_rendered_again_after_spilling(tmp_path):
    """The autosave's copy of a spilled item's fields follows it: the next save reuses its text."""
    from ipyagent.transcripts.notebook_text import NotebookText

    agent = Agent(model="demo", python_tool=False, file_tools=False)
    agent.context.extend([Message("user", "go"), ToolCall("c0", "plot", {"n": 0}), _plot()])
    cache = NotebookText()
    kw = dict(header={}, kernel_name="python3", metadata={}, secrets={})
    path = tmp_path / "t.ipynb"
    first = cache.text(agent.context, **kw)
    path.write_text(first)
    cache.written(path)
    assert held(agent.context[-1]) < 100
    calls = []
    real = ToolResult.to_dict
    ToolResult.to_dict = lambda self: calls.append(self) or real(self)  # type: ignore[method-assign]
    try:
        again = cache.text(agent.context, **kw)
    finally:
        ToolResult.to_dict = real  # type: ignore[method-assign]
    assert again == first and calls == []
    agent.close()


def test_an_edit_in_place_after_a_save_reaches_the_next_save_and_is_spilled_again(tmp_path):
    from ipyagent.transcripts.notebook_text import NotebookText

    agent = Agent(model="demo", python_tool=False, file_tools=False)
    agent.context.extend([Message("user", "go"), ToolCall("c0", "plot", {"n": 0}), _plot()])
    cache = NotebookText()
    kw = dict(header={}, kernel_name="python3", metadata={}, secrets={})
    path = tmp_path / "t.ipynb"

    def save() -> str:
        text = cache.text(agent.context, **kw)
        path.write_text(text)
        cache.written(path)
        return text

    save()
    result = agent.context[-1]
    assert held(result) < 100
    result.outputs.append({"output_type": "stream", "name": "stdout", "text": "appended by hand\n"})
    result.outputs[1]["data"]["application/json"]["rows"][0] = "edited by hand"
    second = save()
    assert "appended by hand" in second and "edited by hand" in second
    assert held(result) < 100  # spilled again once saved
    assert save() == second  # and not rendered again after that
    # a list kept across a save stays the item's: an edit through it reaches the next save
    kept = result.outputs
    assert save() == second and held(result) > 15_000  # not spilled while it is held
    kept.append({"output_type": "stream", "name": "stdout", "text": "after the save\n"})
    third = save()
    assert "after the save" in third and held(result) > 15_000
    del kept
    assert save() == third and held(result) < 100  # tried again at the next save, unchanged
    assert save() == third and "after the save" in json.dumps(result.to_dict())
    agent.close()


def test_steps_after_a_save_read_no_spilled_payload_back(tmp_path, monkeypatch):
    """The hot paths (the autosave's change check, the requests, with images sent) leave
    spilled values where they are: a long run does not read every plot back each step."""
    reads: list[Spilled] = []
    real = SpillStore.get
    monkeypatch.setattr(SpillStore, "get", lambda self, ref: reads.append(ref) or real(self, ref))
    on, _ = _run(tmp_path, True, monkeypatch)
    assert reads == []
    assert all(held(r) < 100 for r in on.context if isinstance(r, ToolResult))


# -- the spill file is bounded: dead values (no item refers to them) are dropped by a rewrite
@pytest.fixture
def small_store(monkeypatch):
    store = SpillStore()
    monkeypatch.setattr(_spill, "_store", store)
    monkeypatch.setattr(SpillStore, "compact_floor", 20_000)
    yield store
    store.close()


def _kept(item) -> int:
    """Characters the item's fields hold, each reference counted as one short word (not
    ``held``: this counts whatever is there, however it is nested)."""
    return len(json.dumps(vars(item), default=lambda ref: "ref", ensure_ascii=False))


def _bytes(*results: ToolResult) -> int:
    """Bytes of the distinct values the results refer to."""
    refs = {v for r in results for o in raw_outputs(r) for v in o.get("data", {}).values()
            if isinstance(v, Spilled)}
    return sum(ref.length for ref in refs)


def test_dead_values_are_dropped_by_a_rewrite_and_the_live_ones_read_back(small_store):
    import gc
    import stat

    results = [_plot(n) for n in range(6)]
    wanted = [r.to_dict() for r in results]
    for r in results:
        spill(r)
    assert small_store.live_bytes == small_store.size == _bytes(*results)
    assert small_store.rewrites == 0
    keep = results[4:]
    del results
    gc.collect()
    assert small_store.live_bytes == _bytes(*keep) < small_store.size / 2  # four of six died
    fresh = _plot(99)
    spill(fresh)  # the next write finds dead bytes over the live ones and the floor
    assert small_store.rewrites == 1
    assert small_store.size == small_store.live_bytes == _bytes(*keep, fresh)
    assert os.path.getsize(small_store.path) == small_store.size
    assert [r.to_dict() for r in keep] == wanted[4:]
    assert outputs_of(fresh)[1]["data"]["image/png"] == PNG + "99"
    assert stat.S_IMODE(os.stat(small_store.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(small_store.path)).st_mode) == 0o700
    assert os.listdir(os.path.dirname(small_store.path)) == ["payloads.bin"]


def test_a_value_read_again_after_its_result_died_reuses_its_bytes(small_store):
    import gc

    first = _plot(1)
    spill(first)
    size = small_store.size
    del first
    gc.collect()
    assert small_store.live_bytes == 0
    again = _plot(1)
    spill(again)
    assert small_store.size == size == small_store.live_bytes
    assert outputs_of(again)[1]["data"]["image/png"] == PNG + "1"


def test_a_rewrite_checks_each_value_and_a_damaged_one_reads_as_lost(small_store, monkeypatch):
    import gc

    monkeypatch.setattr(_spill, "_said", set())
    results = [_plot(n) for n in range(4)]
    for r in results:
        spill(r)
    damaged = raw_outputs(results[0])[1]["data"]["image/png"]
    with open(small_store.path, "r+b") as f:
        f.seek(damaged.offset)
        f.write(b"X" * 32)
    del results[1:]
    gc.collect()
    small_store.compact()
    assert small_store.size == small_store.live_bytes  # the damaged value was left out
    with pytest.warns(RuntimeWarning, match="could not be read back"):
        bundle = outputs_of(results[0])[1]["data"]
    assert "image/png" not in bundle and "is lost" in bundle["text/plain"]
    assert bundle["application/json"] == {"rows": list(range(500))}


def test_a_long_session_that_drops_items_keeps_the_spill_file_bounded(tmp_path, small_store):
    """Saved, then dropped from the context (a reset, compaction, an edit): the file stays
    within about twice its live bytes (plus the floor), whatever the number of steps."""
    from ipyagent.transcripts.notebook_text import NotebookText

    agent = Agent(model="demo", python_tool=False, file_tools=False)
    cache = NotebookText()
    kw = dict(header={}, kernel_name="python3", metadata={}, secrets={})
    path = tmp_path / "t.ipynb"
    agent.context.append(Message("user", "go"))
    largest = 0
    for n in range(40):
        agent.context.extend([ToolCall(f"c{n}", "plot", {"n": n}), _plot(n)])
        if len(agent.context) > 7:
            del agent.context[1:3]  # the oldest call and result leave the context
        path.write_text(cache.text(agent.context, **kw))
        cache.written(path)
        largest = max(largest, os.path.getsize(small_store.path))
    live = _bytes(*(i for i in agent.context if isinstance(i, ToolResult)))  # three plots
    assert largest <= 2 * max(live, SpillStore.compact_floor) + 16_000
    assert small_store.live_bytes == live
    assert small_store.rewrites > 3
    assert [outputs_of(i) for i in agent.context if isinstance(i, ToolResult)] == \
        [_plot(n).outputs for n in range(37, 40)]
    agent.close()


# -- a compaction summary's replaced items: their payloads are spilled too, and come back whole
def test_a_summary_spills_the_payloads_of_the_results_it_replaced(tmp_path):
    from ipyagent import Summary
    from ipyagent.engine.compaction import replaced_items, truncation_summary
    from ipyagent.transcripts.notebook_text import NotebookText

    summary = truncation_summary([ToolCall("c0", "plot", {"n": 0}), _plot(0),
                                  ToolCall("c1", "plot", {"n": 1}), _plot(1)], "test")
    twin = Summary.from_dict(copy.deepcopy(summary.to_dict()))  # never spilled
    kw = dict(header={}, kernel_name="python3", metadata={}, secrets={})

    def context(s: Summary) -> Agent:
        agent = Agent(model="demo", python_tool=False, file_tools=False)
        agent.context.extend([Message("user", "go"), s, Message("assistant", "done")])
        return agent

    agent, other = context(summary), context(twin)
    cache = NotebookText()
    path = tmp_path / "t.ipynb"
    first = cache.text(agent.context, **kw)
    path.write_text(first)
    cache.written(path)
    assert held(summary) < 100 and held(twin) > 30_000
    assert _kept(twin) - _kept(summary) > 2 * 15_000  # two plots' display values (meta images stay)
    assert PNG + "1" in first
    assert NotebookText().text(agent.context, **kw) == first == NotebookText().text(other.context, **kw)
    assert summary == twin and summary.to_dict() == twin.to_dict()
    assert [outputs_of(r) for r in unfold([summary]) if isinstance(r, ToolResult)] == \
        [_plot(0).outputs, _plot(1).outputs]
    assert held(summary) < 100  # none of that kept the values on it
    merged = replaced_items([summary, Message("user", "more")])  # a later compaction merges it
    assert held({"replaced": merged}) < 100
    assert Summary("s", merged).to_dict() == Summary("s", replaced_items([twin, Message("user", "more")])).to_dict()
    # a read of ``replaced`` brings the values back onto it, and an edit in place sticks
    summary.replaced[1]["outputs"].append({"output_type": "stream", "name": "stdout", "text": "by hand"})
    assert held(summary) > 30_000
    assert summary.to_dict()["replaced"][1]["outputs"][-1]["text"] == "by hand"
    again = cache.text(agent.context, **kw)
    cache.written(path)
    assert "by hand" in again and held(summary) < 100
    agent.close()
    other.close()


def test_an_autosaved_run_that_compacts_spills_its_summary_and_the_file_keeps_every_plot(tmp_path):
    """A real run against a local server: compaction summarises the oldest plots; once the
    autosave wrote the summary, its replaced results hold references, and the transcript
    still holds every plot."""
    from ipyagent import Summary
    from ipyagent.context.tokens import TokenCounter
    from ipyagent.transcripts.transcript import read
    from tests.helpers.scripted_apis import asks_summary
    from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls

    @tool
    async def big_plot(i: int) -> ToolResult:
        """Draw plot i."""
        result = _plot(i)
        result.output = f"plot {i}: " + "lorem ipsum " * 120
        result.meta = {}  # send_images is off: no images for the model
        return result

    count = iter(range(100))

    def reply(body):
        usage = {"prompt_tokens": 10, "completion_tokens": 5}
        if asks_summary(body):
            return reply_text("- drew the earlier plots", usage=usage)
        return reply_tool_calls([("big_plot", {"i": next(count)})], usage=usage)

    path = tmp_path / "auto.ipynb"
    with ScriptedServer(fallback=reply) as srv:
        agent = Agent(model="m", base_url=srv.base_url, tools=[big_plot], python_tool=False,
                      file_tools=False, context_window=2048, request_max_tokens=256,
                      compact_target=0.8, max_steps=10, max_retries=0, autosave=str(path),
                      answer_at_limit=False)
        agent.context.counter = TokenCounter(use_tokenizer=False)
        agent.run("plot ten times")
        agent.close()
    summaries = [i for i in agent.context if isinstance(i, Summary)]
    assert summaries and any(d["type"] == "tool_result" for d in raw_replaced(summaries[0]))
    def results(item) -> int:
        return sum(d["type"] == "tool_result" for d in raw_replaced(item)) if isinstance(item, Summary) else 1

    # a plot's display values are ~30 KB; its text and stream output ~5 KB stay
    assert all(_kept(i) < 8_000 * results(i) for i in agent.context)
    text = path.read_text()
    assert all(PNG + str(i) in text for i in range(10))
    plots = [_plot(i).outputs for i in range(10)]
    assert [outputs_of(r) for r in unfold(agent.context) if isinstance(r, ToolResult)] == plots
    saved = [r for r in unfold(read(path).items) if isinstance(r, ToolResult)]
    assert [r.outputs[1]["data"]["image/png"] for r in saved] == [PNG + str(i) for i in range(10)]


def test_compacting_spilled_results_reads_none_of_their_values_back(monkeypatch):
    from ipyagent.engine.compaction import truncation_summary

    results = [_plot(n) for n in range(3)]
    for r in results:
        spill(r)
    reads: list[Spilled] = []
    real = SpillStore.get
    monkeypatch.setattr(SpillStore, "get", lambda self, ref: reads.append(ref) or real(self, ref))
    summary = truncation_summary([x for n, r in enumerate(results)
                                  for x in (ToolCall(f"c{n}", "plot", {"n": n}), r)], "test")
    assert reads == [] and held(summary) < 100  # the summary holds the references
    assert [d["outputs"] for d in summary.to_dict()["replaced"] if d["type"] == "tool_result"] == \
        [_plot(n).outputs for n in range(3)]


def test_an_edit_of_a_read_never_reaches_what_a_stub_shares():
    """Compaction's stub of a result shares its references; a read of one is the reader's own."""
    from ipyagent.engine.compaction import _stub

    result = _plot()
    spill(result)
    stub = _stub(result)
    result.outputs[0]["text"] = "edited"
    result.outputs[1]["metadata"]["image/png"]["width"] = 99
    assert stub.outputs == _plot().outputs


def test_a_real_python_call_s_displays_are_spilled_once_autosaved(tmp_path, monkeypatch):
    """Through a real sibling kernel: nothing of the kernel's keeps the output dicts, so
    they are not taken for lists a user holds (which are left in memory until released)."""
    from tests.helpers.scripted_apis import any_api_reply
    from tests.helpers.scripted_server import ScriptedServer

    monkeypatch.setenv("IPYAGENT_TEST_KEY", "k")
    code = ("from IPython.display import HTML, display\n"
            "for i in range(2): display(HTML('<b>x</b>' * 500 + str(i)))\nprint('hi')")
    script = [any_api_reply("", [("python", {"code": code})]) for _ in range(2)] + [any_api_reply("done")]
    with ScriptedServer(script) as srv:
        agent = Agent(model="m", base_url=srv.base_url, api_key_env="IPYAGENT_TEST_KEY",
                      approval="auto", file_tools=False, autosave=str(tmp_path / "a.ipynb"))
        agent.run("go")
        agent.close()
    results = [i for i in agent.context if isinstance(i, ToolResult)]
    assert len(results) == 2 and all(held(r) < 100 for r in results)
    assert [o["data"]["text/html"] for o in outputs_of(results[1]) if "data" in o] == \
        ["<b>x</b>" * 500 + "0", "<b>x</b>" * 500 + "1"]


def _saved_run(tmp_path):
    from ipyagent.transcripts.notebook_text import NotebookText

    agent = Agent(model="demo", python_tool=False, file_tools=False)
    agent.context.extend([Message("user", "go"), ToolCall("c0", "plot", {"n": 0}), _plot()])
    cache, path = NotebookText(), tmp_path / "t.ipynb"
    kw = dict(header={}, kernel_name="python3", metadata={}, secrets={})
    return agent, cache, path, (lambda: cache.text(agent.context, **kw))


def test_an_edit_between_a_render_and_its_write_reaches_the_next_save(tmp_path):
    """The user's thread edits a result while the engine's save writes the text made before:
    the spill after the write must not take the edited item for the saved one (its copy of
    the fields was renewed, so the next save reused the old text and lost the edit)."""
    agent, cache, path, render = _saved_run(tmp_path)
    text = render()
    agent.context[-1].outputs[1]["data"]["text/html"] = ["edited while it was written"]
    path.write_text(text)
    cache.written(path)
    assert "edited while it was written" in render()
    agent.close()


def test_a_read_in_another_thread_during_a_spill_gets_the_list_before_or_after_the_swap(
        tmp_path, monkeypatch):
    """The user's main thread reads and edits ``result.outputs`` while the engine loop's save
    spills it (its payload being written to the spill file): the read waits for the swap,
    so the edit lands on the item's list and reaches the next save."""
    import threading

    agent, cache, path, render = _saved_run(tmp_path)
    result = agent.context[-1]
    path.write_text(render())
    real, started, user = _spill.SpillStore.put, threading.Event(), []

    def edit() -> None:
        started.set()
        result.outputs[1]["data"]["text/html"] = ["edited by the user's thread"]

    def put(self, data):
        if not user:
            user.append(threading.Thread(target=edit))
            user[0].start()
            started.wait(5)
            user[0].join(0.3)  # the edit happens now unless the read waits for the swap
        return real(self, data)

    monkeypatch.setattr(_spill.SpillStore, "put", put)
    cache.written(path)
    user[0].join(5)
    assert "edited by the user's thread" in render()
    assert "edited by the user's thread" in json.dumps(result.to_dict())
    agent.close()
