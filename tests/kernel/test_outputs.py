"""Output collection without a kernel: streams merged and bounded, displays capped, model text."""

from __future__ import annotations

import base64
from typing import Any

from ipyagent._util.text import head_tail
from ipyagent.kernel.outputs import OutputCollector, model_text
from tests.helpers.images import png_bytes


def _msg(kind: str, **content: Any) -> dict[str, Any]:
    return {"header": {"msg_type": kind}, "parent_header": {}, "content": content}


def test_collector_merges_streams_and_keeps_head_and_tail() -> None:
    c = OutputCollector(max_output_bytes=100)
    c.add(_msg("stream", name="stdout", text="HEAD" + "a" * 40))
    for i in range(1000):
        c.add(_msg("stream", name="stdout", text=f"line {i}\n"))
    c.add(_msg("stream", name="stdout", text="TAIL"))
    outputs = c.outputs()
    assert len(outputs) == 1 and outputs[0]["name"] == "stdout"
    text = outputs[0]["text"]
    assert text.startswith("HEAD") and text.endswith("TAIL")
    assert f"[… {c.dropped_chars} characters omitted …]" in text
    assert len(text) <= 100 + 60


def test_collector_bounds_interleaved_streams() -> None:
    c = OutputCollector(max_output_bytes=1000)
    for i in range(5000):
        c.add(_msg("stream", name="stdout" if i % 2 else "stderr", text="x" * 10))
    kept = sum(len(o["text"]) for o in c.outputs())
    assert kept <= 1000 + 60
    assert c.dropped_chars == 50_000 - 1000


def test_collector_clear_output_and_display_update() -> None:
    c = OutputCollector()
    c.add(_msg("stream", name="stdout", text="old"))
    c.add(_msg("clear_output", wait=True))
    c.add(_msg("display_data", data={"text/plain": "v1"}, metadata={}, transient={"display_id": "d"}))
    c.add(_msg("update_display_data", data={"text/plain": "v2"}, metadata={}, transient={"display_id": "d"}))
    assert c.outputs() == [{"output_type": "display_data", "data": {"text/plain": "v2"}, "metadata": {}}]


def test_model_text_strips_ansi_and_replaces_images() -> None:
    png = base64.b64encode(png_bytes(64, 48)).decode()
    outputs: list[dict[str, Any]] = [
        {"output_type": "stream", "name": "stdout", "text": "10%\r50%\r100%\ndone\n"},
        {"output_type": "display_data", "data": {"image/png": png, "text/plain": "<Figure>"}, "metadata": {}},
        {"output_type": "error", "ename": "E", "evalue": "v", "traceback": ["\x1b[0;31mE\x1b[0m: v"]},
    ]
    text = model_text(outputs)
    assert text.startswith("100%\ndone\n[image/png 64x48, ")
    assert "\x1b" not in text and text.endswith("E: v")
    assert head_tail("a" * 50 + "b" * 50, 20) == "a" * 10 + "\n[… 80 characters omitted …]\n" + "b" * 10


def test_collector_caps_displays_by_count_and_size_and_says_so() -> None:
    c = OutputCollector(max_rich_outputs=3, max_rich_bytes=10_000)
    for i in range(5):
        c.add(_msg("display_data", data={"text/plain": f"d{i}"}, metadata={}))
    c.add(_msg("execute_result", data={"text/plain": "'last'"}, metadata={}, execution_count=1))
    outs = c.outputs()
    assert [o["data"]["text/plain"] for o in outs if o["output_type"] == "display_data"] == ["d0", "d1", "d2"]
    assert outs[-2]["output_type"] == "execute_result"  # a result is always kept
    assert outs[-1]["name"] == "stderr" and outs[-1]["text"].startswith("[2 more displayed outputs")
    big = OutputCollector(max_rich_bytes=10_000)
    for _ in range(3):
        big.add(_msg("display_data", data={"image/png": "A" * 6000}, metadata={}))
    assert sum(o["output_type"] == "display_data" for o in big.outputs()) == 1
    assert "[2 more displayed outputs (12 KB) were not kept" in model_text(big.outputs())


def test_a_display_nested_past_the_bound_is_kept_as_its_json_text() -> None:
    """Nested 500 deep (the wire carries ~1,000): kept as one JSON string, so the writers
    that recurse per level (ours, nbformat's) do not fail at every later save."""
    import json

    from ipyagent._util.nesting import MAX_NESTING

    deep: Any = "leaf"
    for _ in range(500):
        deep = [deep]
    shallow = {"a": [{"b": list(range(3))}]}
    c = OutputCollector()
    c.add(_msg("display_data", data={"application/json": deep, "application/vnd.x+json": shallow,
                                     "text/plain": "x"}, metadata={"m": deep}))
    out = c.outputs()[0]
    assert json.loads(out["data"]["application/json"]) == deep  # the same data, as text
    assert out["data"]["application/vnd.x+json"] == shallow and out["data"]["text/plain"] == "x"
    assert json.loads(out["metadata"]["m"]) == deep
    edge: Any = 1
    for _ in range(MAX_NESTING):
        edge = [edge]
    c.add(_msg("display_data", data={"application/json": edge}, metadata={}))
    assert c.outputs()[1]["data"]["application/json"] == edge  # at the bound: as it is


def test_updated_displays_count_against_the_cap_with_their_new_size() -> None:
    """50 small displays each updated to 100 KB under a 10 KB cap: the updates past it are
    dropped and said (they were applied uncounted: 5 MB kept, without bound)."""
    c = OutputCollector(max_rich_bytes=10_000)
    for i in range(50):
        c.add(_msg("display_data", data={"text/plain": "x"}, metadata={}, transient={"display_id": f"d{i}"}))
    c.add(_msg("update_display_data", data={"text/plain": "small"}, metadata={},
               transient={"display_id": "d0"}))
    for i in range(50):
        c.add(_msg("update_display_data", data={"text/html": "y" * 100_000}, metadata={},
                   transient={"display_id": f"d{i}"}))
    outputs = c.outputs()
    assert sum(len(str(o.get("data", {}))) for o in outputs) < 20_000
    assert outputs[0]["data"] == {"text/plain": "small"}  # an update within the cap is applied
    assert "50 more displayed outputs" in outputs[-1]["text"], outputs[-1]


def test_an_execution_count_of_another_type_does_not_reach_the_execution() -> None:
    """A hostile server's counts (a string, a list nested deep, a bool) are None, not kept:
    nested 500 deep in a result's metadata, it made every later save fail."""
    import time

    from ipyagent.kernel.outputs import finish

    deep: Any = 1
    for _ in range(500):
        deep = [deep]
    for bad in ("7", deep, True, -3, 2.0, {"n": 1}):
        c = OutputCollector()
        c.add(_msg("execute_input", execution_count=bad, code="x"))
        c.add(_msg("execute_result", execution_count=bad, data={"text/plain": "1"}, metadata={}))
        done = finish(c, "error", {"execution_count": bad, "ename": deep}, started=time.monotonic(), restarted=False, max_model_chars=1000)
        assert done.execution_count is None and done.error_name is None, bad
        assert done.outputs[0]["execution_count"] is None
    c = OutputCollector()
    c.add(_msg("execute_input", execution_count=4, code="x"))
    assert finish(c, "ok", {"execution_count": "junk"}, started=time.monotonic(), restarted=False, max_model_chars=1000).execution_count == 4


def test_a_frame_nested_past_the_decoder_s_depth_is_dropped_not_raised() -> None:
    """JSON nested 200,000 deep raised RecursionError out of the websocket's reader task."""
    import json

    from ipyagent.kernel._channels import _decode, _decode_v1, _encode_v1

    deep = '{"channel": "iopub", "header": {}, "content": {"x": ' + "[" * 200_000 + "]" * 200_000 + "}}"
    assert _decode(deep) is None
    frame = _encode_v1("iopub", [{}, {}, {}, {}])
    assert _decode_v1(frame) is not None
    parts = [b"iopub", b"{}", b"{}", b"{}", ("[" * 200_000 + "]" * 200_000).encode()]
    offsets = [8 * (len(parts) + 2)]
    for part in parts:
        offsets.append(offsets[-1] + len(part))
    raw = b"".join([len(offsets).to_bytes(8, "little")] + [o.to_bytes(8, "little") for o in offsets] + parts)
    assert _decode_v1(raw) is None
    assert json.loads(json.dumps({"ok": 1}))  # the decoders still decode a plain frame


def test_text_fields_of_another_type_are_refused() -> None:
    """A hostile server's stream text as a list made ``outputs()`` raise TypeError (the call's
    outputs lost); an error's fields nested deep reached the items (every save failing).
    Such a message raises at ``add`` now: the kernels skip it and count it."""
    import pytest

    deep: Any = 1
    for _ in range(500):
        deep = [deep]
    c = OutputCollector()
    for bad in [_msg("stream", name="stdout", text=["a", ["b"]]), _msg("stream", name=deep, text="x"),
                _msg("error", ename=deep, evalue="v", traceback=[]),
                _msg("error", ename="E", evalue="v", traceback=[deep, "line"]),
                _msg("error", ename="E", evalue="v", traceback="not a list")]:
        with pytest.raises(TypeError):
            c.add(bad)
    c.add(_msg("stream", name="stdout", text="kept"))
    c.add(_msg("error", ename="E", evalue=None, traceback=None))
    assert c.outputs() == [{"output_type": "stream", "name": "stdout", "text": "kept"},
                           {"output_type": "error", "ename": "E", "evalue": "", "traceback": []}]
