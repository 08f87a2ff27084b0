"""A saved result's large display values leave memory for a private file and come back whole."""

from __future__ import annotations

import base64
import copy
import json
import os
import pickle
import warnings

import pytest

from ipyagent import Agent, Message, ToolCall, ToolResult, _spill, tool
from ipyagent._spill import Spilled, SpillStore, held, raw_outputs, spill
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
    assert result.to_dict() == before and result.outputs == before["outputs"]
    assert json.loads(result.to_json())["outputs"][1]["data"]["text/html"][1] == "\ud83d half</b>"
    assert result == ToolResult.from_dict(before)
    assert copy.deepcopy(result).outputs == before["outputs"]
    assert pickle.loads(pickle.dumps(result)).outputs == before["outputs"]
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


def test_a_spilled_list_read_is_a_copy_and_assigning_outputs_replaces_it():
    result = _plot()
    spill(result)
    result.outputs.append({"output_type": "stream", "name": "stdout", "text": "lost"})
    assert len(result.outputs) == 2
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
    from ipyagent.redaction import redact_result

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
    from ipyagent.compaction import _stub

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
