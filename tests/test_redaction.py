"""Secrets out of tool output: live chunks held across boundaries, results redacted in place."""

from __future__ import annotations

import base64
import uuid

from ipyagent.context.items import ToolResult
from ipyagent.trust.redaction import redact_result, redaction_notice


def test_live_output_is_redacted_across_chunks_without_delaying_other_text():
    from ipyagent.context.events import ToolOutput
    from ipyagent.context.items import ToolCall
    from ipyagent.trust.redaction import LiveRedactor

    key = "sk-live-" + uuid.uuid4().hex
    live = LiveRedactor({"K": key})
    call = ToolCall("c1", "python", {})
    shown = []
    for chunk in ["step 1 done\n", "key: ", key[:9], key[9:20], "\n", key[20:], "\nbye\n"]:
        shown += live.feed(ToolOutput(call, "stdout", chunk))
    shown += live.flush()
    assert shown[0].text == "step 1 done\n"  # ordinary output passes at once
    text = "".join(e.text for e in shown)
    assert key not in "".join(text.split()) and "[redacted $K]" in text and text.endswith("bye\n")
    assert list(live.names) == ["K"]


def test_live_output_passes_other_events_and_streams_apart():
    from ipyagent.context.events import Notice, ToolOutput
    from ipyagent.context.items import ToolCall
    from ipyagent.trust.redaction import LiveRedactor

    key = "sk-live-" + uuid.uuid4().hex
    live = LiveRedactor({"K": key})
    call = ToolCall("c1", "python", {})
    notice = Notice("not output")
    assert live.feed(notice) == [notice]
    shown = live.feed(ToolOutput(call, "stdout", "out " + key[:10]))
    shown += live.feed(ToolOutput(call, "stderr", "err " + key[10:]))  # another stream: no join
    shown += live.feed(ToolOutput(call, "stdout", key[10:] + " end"))
    shown += live.flush()
    out = "".join(e.text for e in shown if e.name == "stdout")
    assert out == "out [redacted $K] end" and live.flush() == []
    assert LiveRedactor({}).feed(ToolOutput(call, "stdout", key))[0].text == key  # nothing to hide


def test_redact_result_rewrites_text_drops_images_and_names_what_it_found():
    key = "sk-test-" + uuid.uuid4().hex
    png = base64.b64encode(b"\x89PNG" + key.encode()).decode()
    result = ToolResult("c1", f"the key is {key}", outputs=[
        {"output_type": "stream", "name": "stdout", "text": [f"{key[:12]}", f"{key[12:]}\n"]},
        {"output_type": "display_data", "data": {"image/png": png, "text/plain": "<Figure>"}},
        {"output_type": "error", "traceback": ["frame 1", f"KeyError: {key}"]},
    ], meta={"images": [{"mime": "image/png", "data": png}, {"mime": "image/png", "data": "AAAA"}]})
    assert redact_result(result, {"OPENAI_API_KEY": key}) == ["OPENAI_API_KEY"]
    assert result.output == "the key is [redacted $OPENAI_API_KEY]"
    stream, display, error = result.outputs
    assert "".join(stream["text"]) == "[redacted $OPENAI_API_KEY]\n"  # split across lines, still found
    assert display["data"] == {"text/plain": "[redacted $OPENAI_API_KEY]: image/png output dropped\n<Figure>"}
    assert error["traceback"] == ["frame 1", "KeyError: [redacted $OPENAI_API_KEY]"]
    assert result.meta["images"] == [{"mime": "image/png", "data": "AAAA"}]  # the clean one stays
    assert key not in repr(result.__dict__)
    clean = ToolResult("c1", "nothing here")
    assert redact_result(clean, {"K": key}) == [] and clean.output == "nothing here"
    assert redact_result(ToolResult("c1", key), {}) == []


def test_the_notice_is_one_line_naming_the_variables_and_the_tool():
    assert redaction_notice(["A", "B"], "python") == "redacted $A, $B from python's output"
    assert redaction_notice(["A"], "") == "redacted $A from a tool's output"
