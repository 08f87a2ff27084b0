"""Rebuilding the sibling's state from a loaded conversation (``--rerun``)."""

from __future__ import annotations

from pathlib import Path

from ipyagent import Agent, Message, ToolCall, ToolResult
from ipyagent.context.items import Summary
from ipyagent.transcripts.rebuild import Rebuild, python_calls_that_ran
from tests.helpers.scripted_model import ScriptedModel, calls, text


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
        # Both demo calls re-ran; the first (which failed on len(int)) failed again, as it
        # had when recorded: expected, not a failure (issue 17, finding 10).
        report = warm.rebuild_kernel(restart=True)
        assert report.ran == 2 and report.failed == [] and report.ok
        assert [f[:2] for f in report.expected] == [(1, "error")]
        assert report.line() == (
            "re-ran 2 python calls in the sibling kernel; 1 call ended in an error as "
            "recorded (expected) — call 1: TypeError: object of type 'int' has no len()")


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


# -- --rerun runs under an approval policy, in a fresh directory (issue 12) ------------------

def _marker_run(tmp_path: Path, first: str, second: str = "print(2)") -> Path:
    """A saved run of two python calls (real sibling kernel); returns its path."""
    from tests.helpers.scripted_model import ScriptedModel, calls, text

    model = ScriptedModel([calls(("python", {"code": first})), calls(("python", {"code": second})),
                           text("done")])
    work = tmp_path / "recorded"
    work.mkdir()
    # The recorded code writes its marker beside the workspace: bound into the sandbox.
    with Agent(client=model, approval="auto", file_tools=False, cwd=str(work),
               sandbox_paths={str(tmp_path): "rw"}) as agent:
        assert agent.run("go").stop_reason == "done"
        return agent.save(tmp_path / "run.ipynb")


def test_rerun_under_ask_with_nobody_to_ask_runs_nothing_and_says_so(tmp_path: Path) -> None:
    """A transcript someone sent you: loading it with --rerun must not run its code unasked."""
    marker = tmp_path / "RAN_WITHOUT_APPROVAL"
    path = _marker_run(tmp_path, f"open({str(marker)!r}, 'w').write('x')")
    marker.unlink()
    # The re-run happens in a fresh temp dir; the marker beside it is bound into the sandbox.
    with Agent(model="demo", approval="ask", cwd=str(tmp_path), sandbox_paths={str(tmp_path): "rw"}) as agent:
        transcript = agent.load(path, rerun=True)  # no hook, pytest's stdin is no terminal
        assert not marker.exists()
        assert len(agent.context) == len(transcript.items)  # the conversation did load
        report = transcript.rebuild
        assert report.ran == 0 and not report.ok
        line = report.line()
        assert "\n" not in line and line.startswith("re-ran 0 python calls in the sibling kernel; "
                                                    "stopped at step 1 of 2 (python call ")
        assert "nobody could approve this re-run" in line and "--approve auto" in line
        assert "2 steps not re-run: the conversation is loaded, but the sibling kernel has " \
               "only what ran before" in line
        [row] = report.audit()
        assert (row.decision, row.by, row.ran) == ("deny", "headless", False)
        # The policy the user chose: auto re-runs it, and says who decided.
        again = agent.load(path, rerun=True, approval="auto").rebuild
    assert marker.exists() and again.ok and again.ran == 2
    assert [(r.by, r.detail, r.ran) for r in again.audit()] == [("policy", "auto", True)] * 2


def test_the_approver_sees_exactly_the_code_that_runs_and_a_denial_stops(tmp_path: Path) -> None:
    first, second = "a = 41  # first", "open('SECOND', 'w').write(str(a + 1))"
    path = _marker_run(tmp_path, first, second)
    asked: list[tuple[str, dict[str, object]]] = []

    def hook(call: ToolCall) -> str:
        asked.append((call.name, dict(call.arguments)))
        return "approve" if call.arguments.get("code") == first else "not that one"

    with Agent(model="demo", approval="ask", approval_hook=hook) as agent:
        report = agent.load(path, rerun=True).rebuild
        assert agent.kernel.execute("print(a)").text.strip() == "41"  # the approved step ran
        cwd = report.cwd
    assert asked == [("python", {"code": first}), ("python", {"code": second})]
    assert not (Path(cwd) / "SECOND").exists()
    assert report.ran == 1 and "stopped at step 2 of 2" in report.line()
    assert "not approved: not that one" in report.line()
    rows = report.audit()
    assert [(r.decision, r.by) for r in rows] == [("approve", "hook"), ("deny", "hook")]
    assert all(r.at for r in rows)  # stamped like a live decision


def test_an_edit_at_the_approval_is_not_run(tmp_path: Path) -> None:
    from ipyagent.engine.approval import Decision

    path = _marker_run(tmp_path, "print(1)")

    def edit(call: ToolCall) -> Decision:
        return Decision("edit", arguments={"code": "open('EDITED', 'w')"}, by="hook")

    with Agent(model="demo", approval="ask", approval_hook=edit) as agent:
        report = agent.load(path, rerun=True).rebuild
    assert report.ran == 0 and not (Path(report.cwd) / "EDITED").exists()
    assert "runs only the code its cells show" in report.line()


def test_rerun_runs_in_a_fresh_temporary_directory_unless_given_cwd(tmp_path: Path,
                                                                   monkeypatch: object) -> None:
    import os
    import tempfile

    import pytest

    mine = tmp_path / "mine"
    mine.mkdir()
    path = _marker_run(tmp_path, "import os; open('MARKER', 'w').write('x'); here = os.getcwd()")
    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.chdir(mine)
    with Agent(model="demo", approval="auto") as agent:
        report = agent.load(path, rerun=True).rebuild
        here = agent.kernel.execute("print(here)").text.strip()
        assert agent.cwd == report.cwd == here  # the conversation goes on there
    assert report.fresh and here.startswith(os.path.realpath(tempfile.gettempdir()))
    assert (Path(here) / "MARKER").exists() and not (mine / "MARKER").exists()
    assert f"it runs in a fresh empty directory, {here}, for the rest of this conversation" \
           in report.line()
    with Agent(model="demo", approval="auto") as agent:
        there = agent.load(path, rerun=True, cwd=str(mine)).rebuild
    assert (mine / "MARKER").exists() and there.cwd == str(mine) and not there.fresh
    assert "fresh" not in there.line()
    # from_transcript: the new agent's cwd= is the choice; without it, a fresh directory.
    with Agent.from_transcript(path, rerun=True, approval="auto") as warm:
        assert warm.cwd != str(mine) and (Path(warm.cwd) / "MARKER").exists()


def test_percent_agent_load_rerun_in_a_headless_notebook_asks_and_denies(tmp_path: Path) -> None:
    """A real kernel run by nbclient: `%agent load PATH --rerun` shows each step in the cell
    and asks the cell's approver (ask, the magics' default), which headless denies in one
    line; nothing ran, the conversation loaded. `--approve auto` re-runs it."""
    import nbformat
    from nbclient import NotebookClient

    marker = tmp_path / "RERAN"
    code = f"open({str(marker)!r}, 'a').write('x'); print('wrote')"
    path = _marker_run(tmp_path, code)
    marker.unlink()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in [
        "%load_ext ipyagent",
        f"%agent load {path} --rerun",
        f"import ipyagent, os; print(len(ipyagent.current().context), os.path.exists({str(marker)!r}))",
        f"%agent load {path} --rerun --approve auto --cwd {tmp_path}",
        "import os; print(ipyagent.current().cwd == os.path.realpath('.'))",
    ]])
    NotebookClient(nb, kernel_name="python3", timeout=120,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    denied, state, allowed, cwd = nb.cells[1], nb.cells[2], nb.cells[3], nb.cells[4]
    shown = " ".join(str(o.get("data", {}).get("text/plain", "")) for o in denied.outputs)
    assert code in shown and "denied" in shown  # the card showed the code it asked about
    said = "".join(o.get("text", "") for o in denied.outputs if o.get("name") == "stdout")
    [line] = [x for x in said.splitlines() if "re-ran" in x]
    assert line.startswith("ipyagent: re-ran 0 python calls in the sibling kernel; stopped at "
                           "step 1 of 2") and "--approve auto" in line
    assert "nobody could approve this call: the notebook runs without" in line
    assert len(read_items(path)) == int(state.outputs[0]["text"].split()[0])
    assert state.outputs[0]["text"].split()[1] == "False"  # nothing ran
    said = "".join(o.get("text", "") for o in allowed.outputs if o.get("name") == "stdout")
    assert "ipyagent: re-ran 2 python calls in the sibling kernel\n" in said
    assert marker.read_text() == "x"
    assert cwd.outputs[0]["text"].strip() == "True"  # --cwd DIR: the conversation goes on there


def read_items(path: Path) -> list[object]:
    from ipyagent.transcripts.transcript import read

    return list(read(path).items)


def test_a_call_that_fails_now_but_ran_fine_when_recorded_is_a_failure(tmp_path: Path) -> None:
    marker = tmp_path / "present"
    marker.write_text("x")
    code = f"open({str(marker)!r}).read()"
    with Agent(client=ScriptedModel([calls(("python", {"code": code})), text("ok")]),
               approval="auto", cwd=str(tmp_path)) as first:
        first.run("read it")
        path = first.save(tmp_path / "run.ipynb")
    marker.unlink()
    with Agent.from_transcript(path, cwd=str(tmp_path)) as again:
        report = again.rebuild_kernel()
    assert [f[:2] for f in report.failed] == [(1, "error")] and report.expected == []
    assert "1 failed — call 1: error: FileNotFoundError" in report.line()


def test_rerun_reapplies_data_files_and_leaves_code_waiting(tmp_path: Path) -> None:
    import pytest

    from ipyagent.kernel.sandbox import probe
    from ipyagent.kernel.staging import probe_overlay

    if probe()[0] is None or probe_overlay():
        pytest.skip("no staged sandbox here")
    code = "open('out.csv', 'w').write('a\\n1\\n'); open('helper.py', 'w').write('X = 1\\n')"
    model = ScriptedModel([calls(("python", {"code": code})), text("done")])
    with Agent(client=model, cwd=str(tmp_path)) as agent:
        agent.run("write them")
        assert (tmp_path / "out.csv").exists() and not (tmp_path / "helper.py").exists()
        path = agent.save(tmp_path / "run.ipynb")
    (tmp_path / "out.csv").unlink()
    with Agent(model="demo", cwd=str(tmp_path), approval="auto") as again:
        transcript = again.load(path, rerun=True, cwd=tmp_path)
        assert (tmp_path / "out.csv").read_text() == "a\n1\n"  # a data file: back
        assert not (tmp_path / "helper.py").exists()  # code: waits for the person
        assert [c.path for c in again.changes()] == ["helper.py"]
        line = transcript.rebuild.line()  # type: ignore[attr-defined]
        assert "1 file change the re-run made waits in the sandbox (%agent changes)" in line
