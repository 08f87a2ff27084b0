"""Rebuilding the sibling's state from a loaded conversation (``--rerun``)."""

from __future__ import annotations

from pathlib import Path

from ipyagent import Agent, Message, ToolCall, ToolResult
from ipyagent.items import Summary
from ipyagent.transcripts.rebuild import Rebuild, python_calls_that_ran


def py(call_id: str, code: str) -> ToolCall:
    return ToolCall(call_id, "python", {"code": code})


def ran(call_id: str, status: str = "ok") -> ToolResult:
    return ToolResult(call_id, "", error=status != "ok", name="python", meta={"status": status})


def test_only_calls_shown_as_code_cells_in_order_summaries_unfolded() -> None:
    folded = [py("a", "x = 1"), ran("a")]
    items = [
        Summary("earlier work", replaced=[i.to_dict() for i in folded]),
        Message("user", "go on"),
        py("b", "y = x + 1"), ran("b"),
        py("c", "rm()"), ToolResult("c", "denied", error=True, meta={"denied": True}),
        py("d", "z = 3"), ToolResult("d", "skipped", error=True, meta={"skipped": True}),
        py("e", "w = 4"), ToolResult("e", "stop", error=True, meta={"interrupted": True}),
        py("f", "boom()"), ran("f", "error"),
        py("t", "while True: pass"), ran("t", "timeout"),
        py("k", "import os; os._exit(1)"), ran("k", "died"),
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


def _demo_transcript(tmp_path: Path) -> Path:
    with Agent(model="demo", approval="auto", cwd=str(tmp_path)) as first:
        first.run("Use Python to compute 2**100")
        return first.save(tmp_path / "run.ipynb")


def test_code_that_differs_from_its_cell_is_refused_never_run(tmp_path: Path) -> None:
    """Replay and --rerun run what the cells show; hidden metadata code is refused."""
    import nbformat
    import pytest

    from ipyagent.errors import TranscriptError

    path = _demo_transcript(tmp_path)
    nb = nbformat.read(path, as_version=4)
    call = next(i for i in nb.metadata.ipyagent["items"] if i["type"] == "tool_call")
    call["arguments"]["code"] = "open('PWNED', 'w').write('x')"  # the cell still shows the real code
    tampered = tmp_path / "tampered.ipynb"
    nbformat.write(nb, tampered)
    with Agent(model="demo", approval="auto", cwd=str(tmp_path)) as agent:
        with pytest.raises(TranscriptError, match="differs from the recorded code"):
            agent.load(tampered, rerun=True)
        with pytest.raises(TranscriptError, match="differs from the recorded code"):
            agent.replay(tampered)
        with pytest.raises(TranscriptError, match="differs from the recorded code"):
            Agent.from_transcript(tampered, rerun=True)
    assert not (tmp_path / "PWNED").exists()
    # An edited visible cell is refused the same way (what runs must be what was recorded).
    nb = nbformat.read(path, as_version=4)
    next(c for c in nb.cells if c.cell_type == "code").source = "raise ValueError"
    nbformat.write(nb, tampered)
    with Agent(model="demo", approval="auto", cwd=str(tmp_path)) as agent:
        with pytest.raises(TranscriptError, match="differs"):
            agent.replay(tampered)
        agent.load(tampered)  # without --rerun nothing runs: loading the conversation is fine
    # Byte for byte: even whitespace the cell does not show is refused.
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code")
    cell.source = cell.source + "\n"
    nbformat.write(nb, tampered)
    with pytest.raises(TranscriptError, match="differs from the recorded code"):
        Agent.from_transcript(tampered, rerun=True, cwd=str(tmp_path)).close()


def test_load_restarts_a_sibling_that_holds_another_conversations_variables(tmp_path: Path) -> None:
    path = _demo_transcript(tmp_path)
    with Agent(model="demo", approval="auto", cwd=str(tmp_path)) as agent:
        assert agent.kernel.execute("value = 343").status == "ok"
        agent.load(path)
        assert agent.kernel.execute("value").status == "error"  # not a stale 343
        transcript = agent.load(path, rerun=True)
        assert transcript.rebuild.ran == 2
        assert "1267650600228229401496703205376" in agent.kernel.execute("value").text
