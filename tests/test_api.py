"""The public API is a decision: renames must show up here."""

import ipyagent


def test_public_api_is_pinned():
    assert sorted(ipyagent.__all__) == sorted([
        "__version__", "Agent", "Context", "Decision", "Execution", "Message", "Reasoning",
        "RunResult", "SiblingKernel", "Step", "Summary", "Tool", "ToolCall", "ToolResult",
        "Toolbox", "Usage", "errors", "tool", "current", "load_ipython_extension",
        "unload_ipython_extension",
    ])
    for name in ipyagent.__all__:
        assert getattr(ipyagent, name) is not None, name
