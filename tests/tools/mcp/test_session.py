"""MCP results become ToolResults: text, images, errors and structured content."""

from __future__ import annotations

from ipyagent.tools.mcp.session import to_tool_result


def test_results_text_images_errors_and_structured_content() -> None:
    res = to_tool_result({"content": [{"type": "text", "text": "caption"},
                                      {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                                      {"type": "text", "text": "after"}]}, send_images=True)
    assert res.output == "caption\n[image/png image, 3 bytes]\nafter" and not res.error
    kinds = [o["output_type"] for o in res.outputs]
    assert kinds == ["stream", "display_data", "stream"]  # the notebook shows them in order
    assert res.outputs[1]["data"]["image/png"] == "AAAA"
    assert res.meta["images"] == [{"mime": "image/png", "data": "AAAA"}]
    assert "images" not in to_tool_result({"content": [
        {"type": "image", "data": "AAAA", "mimeType": "image/png"}]}).meta
    err = to_tool_result({"content": [{"type": "text", "text": "boom"}], "isError": True})
    assert err.error and err.output == "Error: boom" and err.outputs == []
    assert to_tool_result({"content": [], "structuredContent": {"n": 1}}).output == '{"n": 1}'
    assert to_tool_result({"content": [{"type": "resource", "resource": {
        "uri": "file:///a.txt", "text": "inside"}}]}).output == "inside"
    assert to_tool_result({"content": []}).output == "(no output)"
