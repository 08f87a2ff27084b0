"""Rebuilding the sibling's state from a loaded conversation (``--rerun``)."""

from __future__ import annotations

from pathlib import Path

from ipyagent import Agent, Message, ToolCall, ToolResult
from ipyagent.items import Summary
from ipyagent.rebuild import Rebuild, python_calls_that_ran


def py(call_id: str, code: str) -> ToolCall:
    return ToolCall(call_id, "python", {"code": code})


def test_only_calls_that_ran_in_order_summaries_unfolded() -> None:
    folded = [py("a", "x = 1"), ToolResult("a", "", name="python")]
    items = [
        Summary("earlier work", replaced=[i.to_dict() for i in folded]),
        Message("user", "go on"),
        py("b", "y = x + 1"), ToolResult("b", "", name="python"),
        py("c", "rm()"), ToolResult("c", "denied", error=True, meta={"denied": True}),
        py("d", "z = 3"), ToolResult("d", "skipped", error=True, meta={"skipped": True}),
        py("e", "w = 4"), ToolResult("e", "stop", error=True, meta={"interrupted": True}),
        py("f", "boom()"), ToolResult("f", "NameError", error=True, name="python"),
        ToolCall("g", "read_file", {"path": "a.txt"}), ToolResult("g", "text"),
        py("h", "never answered"),
    ]
    assert [c.arguments["code"] for c in python_calls_that_ran(items)] == [
        "x = 1", "y = x + 1", "boom()"]  # an error still ran: its side effects count


def test_report_says_what_failed_in_one_line() -> None:
    report = Rebuild(ran=3, failed=[(2, "error", "NameError: name 'q' is not defined")])
    assert not report.ok
    assert report.line() == ("re-ran 3 python calls in the sibling kernel; 1 failed — "
                             "call 2: error: NameError: name 'q' is not defined")
    assert "NameError" in report._repr_html_()


def test_from_transcript_rerun_brings_the_variables_back(tmp_path: Path) -> None:
    with Agent(model="demo", approval="auto", cwd=str(tmp_path)) as first:
        assert first.run("Use Python to compute 2**100").stop_reason == "done"
        path = first.save(tmp_path / "run.ipynb")
    with Agent.from_transcript(path, cwd=str(tmp_path)) as cold:
        assert cold.kernel.execute("value").status == "error"  # NameError: starts empty
    with Agent.from_transcript(path, rerun=True, cwd=str(tmp_path)) as warm:
        r = warm.kernel.execute("print(value)")
        assert r.status == "ok" and "1267650600228229401496703205376" in r.text
        # Both demo calls re-ran; the first (which failed on len(int)) failed again.
        report = warm.rebuild_kernel(restart=True)
        assert report.ran == 2 and [f[:2] for f in report.failed] == [(1, "error")]
