"""Replay: recorded turns against a fresh kernel; the report."""

from __future__ import annotations

from ipyagent import Agent, Message, ToolCall, ToolResult
from ipyagent.context.items import Summary, unfold
from ipyagent.transcripts.replay import replay
from ipyagent.transcripts.transcript import read
from tests.helpers.scripted_model import ScriptedModel, calls, text
from tests.helpers.transcript_runs import EDITED, PROPOSED, rich_agent

# -- unfolding a compacted record ---------------------------------------------------------

def test_flatten_puts_compacted_items_first():
    old = [Message("user", "a").to_dict(), Message("assistant", "b").to_dict()]
    items = list(unfold([Summary("a then b", replaced=old), Message("user", "c")], keep_summaries=True))
    assert [type(i).__name__ for i in items] == ["Message", "Message", "Summary", "Message"]


# -- replay against real kernels ----------------------------------------------------------

def test_replay_of_a_deterministic_run_is_reproduced(tmp_path):
    agent = Agent(model="demo", cwd=str(tmp_path))
    try:
        agent.run("Use Python to compute `2**100`")
        path = agent.save(tmp_path / "demo.ipynb")
        pid = agent.kernel.pid
        before = [i.to_dict() for i in agent.context]
        report = agent.replay(path)
        # The user's agent and kernel were not touched.
        assert agent.kernel.pid == pid and [i.to_dict() for i in agent.context] == before
    finally:
        agent.close()
    assert report.reproduced
    assert (report.steps, report.compared, report.differences) == (3, 2, [])
    assert repr(report) == "<ReplayReport reproduced: 2 python calls in 3 steps, 0 differ>"
    assert "reproduced" in report._repr_html_()
    # The replayed conversation is the recorded one.
    assert [i.to_dict()["type"] for i in report.context] == [i["type"] for i in before]
    # A small window passed along never makes the replay compact (a summary request would
    # take the next recorded turn): the recorded turns are replayed as they were.
    heard: list = []
    small = replay(path, cwd=str(tmp_path), approval="auto", context_window=300,
                   on_event=heard.append)
    assert small.reproduced and (small.steps, small.compared) == (3, 2), small.notes
    # What is replayed is said first (a new user saw the replay's cards ask with no word why).
    assert heard[0].message == ("Replaying demo.ipynb: its 2 python calls run again in a fresh "
                                "sibling kernel (each runs without asking); the report compares "
                                "what they print with the recording.")


def test_replay_follows_recorded_decisions_and_normalises(tmp_path):
    agent = rich_agent(str(tmp_path))
    try:
        agent.run("draw it")
        path = agent.save(tmp_path / "rich.ipynb")
    finally:
        agent.close()
    report = replay(path, cwd=str(tmp_path), approval="auto")
    # The timestamp differs, yet it reproduces; the denied call did not run; the edit did.
    assert report.reproduced, str(report)
    assert (report.compared, report.reused, report.not_run) == (3, 1, 1)
    assert not (tmp_path / "DENIED_CALL_RAN").exists()
    codes = [i.arguments.get("code") for i in report.context if isinstance(i, ToolCall)]
    assert EDITED in codes and PROPOSED not in codes


def test_replay_reports_the_step_whose_output_changed(tmp_path):
    (tmp_path / "data.txt").write_text("alpha")
    model = ScriptedModel([calls(("python", {"code": "x = 2 + 2\nprint(x)"})),
                           calls(("python", {"code": "print(open('data.txt').read(), x)"})),
                           text("read it")])
    agent = Agent(client=model, cwd=str(tmp_path))
    try:
        agent.run("read the file")
        path = agent.save(tmp_path / "run.ipynb")
    finally:
        agent.close()
    assert replay(path, cwd=str(tmp_path), approval="auto").reproduced
    # A result the loop later cut to fit the context window compares by its full outputs.
    transcript = read(path)
    cut = [i for i in transcript.items if isinstance(i, ToolResult)][1]
    cut.output, cut.meta["cut_chars"] = "alp[… 3 characters cut …]", 3
    assert replay(transcript, cwd=str(tmp_path), approval="auto").reproduced
    (tmp_path / "data.txt").write_text("beta")
    report = replay(path, cwd=str(tmp_path), approval="auto")
    assert not report.reproduced and report.compared == 2
    [diff] = report.differences
    assert (diff.step, diff.call_id) == (2, "call_0_python")
    assert diff.code == "print(open('data.txt').read(), x)"
    assert (diff.recorded, diff.new) == ("alpha 4", "beta 4")
    assert "-alpha 4" in diff.diff() and "+beta 4" in diff.diff()
    assert repr(report) == ("<ReplayReport NOT reproduced: 2 python calls in 3 steps, 1 differ, "
                            "first at step 2 (call_0_python)>")
    html = report._repr_html_()
    assert "not reproduced" in html and "alpha 4" in html and "beta 4" in html
    assert "step 2, call call_0_python" in str(report)
    from IPython.lib.pretty import pretty

    assert pretty(report) == str(report)  # terminal IPython shows the differences
    one = type(report)(source="x", steps=1, compared=1)
    assert repr(one) == "<ReplayReport reproduced: 1 python call in 1 step, 0 differ>"


def test_a_recording_whose_calls_were_all_denied_does_not_read_as_reproduced(tmp_path):
    """A new user replayed a run whose only call was denied and read "reproduced … 0 differ":
    nothing was checked, and the report says so."""
    with Agent(model="demo", approval="deny", cwd=str(tmp_path)) as agent:
        agent.run("Use Python to compute 2**100")
        path = agent.save(tmp_path / "denied.ipynb")
    report = replay(path, cwd=str(tmp_path), approval="auto")
    assert (report.compared, report.not_run) == (0, 1)
    assert repr(report) == ("<ReplayReport nothing re-run: 0 python calls in 1 step, 0 differ; "
                            "1 call not run when recorded (denied, skipped or interrupted), "
                            "so not checked>")
    assert "nothing re-run" in report._repr_html_() and "not checked" in report._repr_html_()


def test_replay_counts_an_error_that_appears(tmp_path):
    (tmp_path / "data.txt").write_text("1")
    model = ScriptedModel([calls(("python", {"code": "import os; os.remove('data.txt'); print('ok')"})),
                           text("removed")])
    agent = Agent(client=model, cwd=str(tmp_path))
    try:
        agent.run("remove it")
        path = agent.save(tmp_path / "run.ipynb")
    finally:
        agent.close()
    report = replay(path, cwd=str(tmp_path), approval="auto")  # the file is gone now: FileNotFoundError
    [diff] = report.differences
    assert not diff.recorded_error and diff.new_error and "FileNotFoundError" in diff.new


async def test_areplay_awaits_from_a_running_loop(tmp_path):
    model = ScriptedModel([calls(("python", {"code": "print(sum(range(10)))"})), text("45")])
    agent = Agent(client=model, cwd=str(tmp_path))
    try:
        await agent.arun("sum it")  # as a notebook cell would
        path = agent.save(tmp_path / "run.ipynb")
        report = await agent.areplay(path)
    finally:
        agent.close()
    assert report.reproduced and report.compared == 1
    assert [i.output for i in report.context if isinstance(i, ToolResult)] == ["45"]


def test_replay_reuses_file_tool_and_mcp_results_never_redoes_them(tmp_path):
    """A write_file call recorded in the transcript is not run again on replay (a missing
    file is re-created from the record, as its cell shows), and an mcp.json in the
    directory must not be started (its tools answered from the record)."""
    import json
    import sys

    model = ScriptedModel([calls(("write_file", {"path": "out.txt", "content": "first"})),
                           text("Written.")])
    with Agent(client=model, approval="auto", python_tool=False, cwd=str(tmp_path),
               workspace=str(tmp_path)) as agent:
        assert agent.run("write it").stop_reason == "done"
        path = agent.save(tmp_path / "files.ipynb")
    (tmp_path / "out.txt").unlink()
    marker = tmp_path / "MCP_STARTED"
    server = tmp_path / "server.py"
    server.write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    (tmp_path / "mcp.json").write_text(json.dumps(
        {"mcpServers": {"calc": {"command": sys.executable, "args": [str(server)]}}}))
    report = replay(path, cwd=str(tmp_path), approval="auto")
    assert report.reproduced and report.reused == 1, str(report)
    # Reused, not re-run: the recorded file is back as the agent left it.
    assert (tmp_path / "out.txt").read_text() == "first"
    assert "re-created out.txt as the agent wrote it" in " ".join(report.notes)
    assert not marker.exists()
    result = next(i for i in report.context if isinstance(i, ToolResult))
    assert result.meta.get("replayed")


# -- the trust boundary: replay runs only what the cells show, asks first, elsewhere -------

def _two_call_run(tmp_path, first: str, second: str):
    """A saved run of two python calls (real sibling kernel); returns its path."""
    model = ScriptedModel([calls(("python", {"code": first})), calls(("python", {"code": second})),
                           text("done")])
    work = tmp_path / "recorded"
    work.mkdir()
    # The recorded code writes its marker beside the workspace: bound into the sandbox.
    with Agent(client=model, approval="auto", file_tools=False, cwd=str(work),
               sandbox_paths={str(tmp_path): "rw"}) as agent:
        assert agent.run("go").stop_reason == "done"
        return agent.save(tmp_path / "run.ipynb")


def test_hidden_code_of_a_call_no_cell_shows_is_never_run(tmp_path):
    """A crafted notebook: its cells show print('hello'); the metadata records a second call
    that 'killed the kernel' (so the notebook shows it as text only, never as a code cell)
    whose code writes a marker. Replay must not run it: one line, and a difference."""
    import nbformat

    marker = tmp_path / "HIDDEN_CODE_RAN"
    path = _two_call_run(tmp_path, "print('hello')", "print('bye')")
    nb = nbformat.read(path, as_version=4)
    items = nb.metadata.ipyagent["items"]
    hidden = [i for i in items if i["type"] == "tool_call"][1]
    hidden["arguments"]["code"] = f"open({str(marker)!r}, 'w').write('x')"
    [i for i in items if i["type"] == "tool_result"][1]["meta"]["status"] = "died"
    nbformat.write(nb, path)  # the cells still show print('hello') and print('bye')
    with Agent(model="demo", approval="auto", python_tool=False, cwd=str(tmp_path)) as user:
        report = user.replay(path)
    assert not marker.exists()
    assert not report.reproduced and report.compared == 2, str(report)
    [diff] = report.differences
    assert diff.call_id == hidden["id"] and diff.new.startswith("(replay: not run")
    [line] = [n for n in report.notes if n.startswith("did not run python call")]
    assert "killed the kernel in the recording" in line and "\n" not in line
    outputs = [i.output for i in report.context if isinstance(i, ToolResult)]
    assert outputs[0] == "hello"  # the visible cell did run


def test_replay_asks_by_default_and_headless_denies_in_one_line(tmp_path):
    marker = tmp_path / "RAN_WITHOUT_APPROVAL"
    path = _two_call_run(tmp_path, f"open({str(marker)!r}, 'w').write('x')", "print(1)")
    marker.unlink()
    report = replay(path, cwd=str(tmp_path))  # no approval given: 'ask'; pytest's stdin is no terminal
    assert not marker.exists()
    assert not report.reproduced
    [line] = [n for n in report.notes if "not approved" in n]
    assert line.startswith("2 calls not approved, so not run: nobody could approve this "
                           "replayed call") and "approval='auto'" in line and "\n" not in line


def test_what_replay_asks_about_is_the_code_that_runs(tmp_path):
    """The approver sees each call with the code that will run (an edited call: the edit),
    and only calls that run something; the user's denial is followed."""
    agent = rich_agent(str(tmp_path))
    try:
        agent.run("draw it")
        path = agent.save(tmp_path / "rich.ipynb")
    finally:
        agent.close()
    asked: list[str] = []

    def hook(call: ToolCall):
        asked.append(call.arguments.get("code", call.name))
        return "approve" if call.arguments.get("code") != EDITED else "not this one"

    from ipyagent.engine.approval import CallbackApprover

    report = replay(path, cwd=str(tmp_path), approval_hook=CallbackApprover(hook))
    # The recorded denial is not asked about again; `add` is answered from the recording.
    assert asked[-1] == EDITED and PROPOSED not in asked and "add" not in asked
    assert len(asked) == 3
    assert not report.reproduced and [d.code for d in report.differences] == [EDITED]
    assert "1 call not approved, so not run: not this one" in report.notes


def test_replay_runs_in_a_fresh_temporary_directory_unless_given_cwd(tmp_path, monkeypatch):
    import os

    mine = tmp_path / "mine"
    mine.mkdir()
    path = _two_call_run(tmp_path, "import os; open('MARKER', 'w').write('x'); print(os.getcwd())",
                         "print(2)")
    monkeypatch.chdir(mine)
    with Agent(model="demo", approval="auto", python_tool=False) as user:
        report = user.replay(path)
    assert not (mine / "MARKER").exists() and not (tmp_path / "MARKER").exists()
    printed = next(i.output for i in report.context if isinstance(i, ToolResult)).splitlines()[0]
    assert printed == report.cwd and report.cwd.startswith(os.path.realpath(tempfile_dir()))
    assert not os.path.exists(report.cwd)  # removed afterwards
    assert any(n.startswith("ran in a fresh empty directory") for n in report.notes)
    there = replay(path, approval="auto", cwd=str(mine))
    assert (mine / "MARKER").exists() and there.cwd == str(mine)


def tempfile_dir() -> str:
    import tempfile

    return tempfile.gettempdir()


def test_a_recorded_timeout_never_lifts_yours(tmp_path):
    import nbformat

    path = _two_call_run(tmp_path, "import time; time.sleep(4); print('slept')", "print(2)")
    nb = nbformat.read(path, as_version=4)
    nb.metadata.ipyagent["settings"].update(tool_timeout=0, memory_limit="")
    nbformat.write(nb, path)
    report = replay(path, approval="auto", limits={"tool_timeout": 1.0})
    assert report.differences and report.differences[0].new_error  # interrupted after 1 s
    [line] = [n for n in report.notes if n.startswith("ignored from")]
    assert line.startswith(f"ignored from {path}: tool_timeout=0 (no limit)")


def test_percent_agent_replay_in_a_headless_notebook_shows_each_call_and_denies(tmp_path):
    """A real kernel run by nbclient: `%agent replay` asks with the cell's approver, which
    headless denies (one line); `--approve auto` runs it; the calls are shown in the cell."""
    import nbformat
    from nbclient import NotebookClient

    marker = tmp_path / "REPLAYED"
    code = f"open({str(marker)!r}, 'a').write('x'); print('wrote')"
    path = _two_call_run(tmp_path, code, "print(2)")
    marker.unlink()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in [
        "%load_ext ipyagent",
        f"%agent replay {path}",
        "print(_.notes[0])",
        f"%agent replay {path} --approve auto --cwd {tmp_path}",
    ]])
    NotebookClient(nb, kernel_name="python3", timeout=120,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    denied, note, allowed = nb.cells[1], nb.cells[2], nb.cells[3]
    shown = " ".join(str(o.get("data", {}).get("text/plain", "")) for o in denied.outputs)
    assert code in shown and "denied" in shown
    assert note.outputs[0]["text"].startswith("2 calls not approved, so not run: nobody could "
                                              "approve this call: the notebook runs without")
    assert "reproduced: 2 python calls" in allowed.outputs[-1]["data"]["text/plain"]
    assert marker.read_text() == "x"  # only the approved replay wrote it


def test_replay_verifies_the_files_a_call_changed(tmp_path):
    from ipyagent.kernel.sandbox import probe
    from ipyagent.kernel.staging import probe_overlay

    if probe()[0] is None or probe_overlay():
        import pytest

        pytest.skip("no staged sandbox here")
    code = "open('out.csv', 'w').write('a,b\\n1,2\\n')"
    model = ScriptedModel([calls(("python", {"code": code})), text("written")])
    agent = Agent(client=model, cwd=str(tmp_path))
    try:
        agent.run("write it")
        [result] = [i for i in agent.context if isinstance(i, ToolResult)]
        [change] = result.meta["changes"]
        assert change["path"] == "out.csv" and change["status"] == "applied"
        path = agent.save(tmp_path / "run.ipynb")
    finally:
        agent.close()
    assert read(path).items and any(
        isinstance(i, ToolResult) and i.meta.get("changes") for i in read(path).items)
    assert replay(path, approval="auto").reproduced  # a fresh directory: made again, same bytes
    # A transcript whose recorded file differs from what the code makes: reported.
    text_ = path.read_text().replace(change["sha256"], "0" * 64)
    (tmp_path / "forged.ipynb").write_text(text_)
    report = replay(tmp_path / "forged.ipynb", approval="auto")
    assert not report.reproduced and "out.csv" in report.differences[0].new


def test_replay_runs_recorded_code_as_it_ran_and_names_the_file_visibly(tmp_path, monkeypatch):
    """Found by a review: a replay mended recorded calls again (a transcript recorded before
    the repairs then failed "not what its cell shows"), and the file's name in the replay's
    first line could write a line of its own."""
    import ipyagent.engine.step as step
    from ipyagent.context.events import Notice

    monkeypatch.setattr(step, "repaired_code", lambda code: (code, ""))  # as recorded before
    code = "print(len('a\bb'))"  # a backspace JSON read, never mended when this was recorded
    agent = Agent(client=ScriptedModel([calls(("python", {"code": code})), text("3")]),
                  approval="auto", cwd=str(tmp_path))
    try:
        agent.run("go")
        path = agent.save(tmp_path / "run\n[info] ipyagent: trusted\u202e.ipynb")
    finally:
        agent.close()
    monkeypatch.undo()
    heard: list = []
    report = replay(path, cwd=str(tmp_path), approval="auto", on_event=heard.append)
    assert report.reproduced and report.compared == 1, report.notes
    first = heard[0]
    assert isinstance(first, Notice) and "\n" not in first.message and "\u202e" not in first.message
