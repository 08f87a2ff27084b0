"""Transcripts: save → validate → Run All with nbclient; load → continue; autosave; SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from ipyagent import Agent, ToolCall, ToolResult, __version__
from ipyagent.context.events import Notice, StepFinished
from ipyagent.errors import TranscriptError
from ipyagent.kernel.outputs import model_text
from ipyagent.kernel.sandbox import probe
from ipyagent.transcripts.replay import normalise
from ipyagent.transcripts.transcript import endpoint_note, read, to_notebook
from tests.helpers.scripted_model import ScriptedModel, calls, text
from tests.helpers.tools import add
from tests.helpers.transcript_runs import DELETE, EDITED, PNG_B64, PROPOSED, rich_agent

ROOT = Path(__file__).resolve().parents[2]  # where the `tests` package is importable from


@pytest.fixture(scope="module")
def rich(tmp_path_factory):
    """The rich scripted run, saved once: (items as dicts, saved path, work dir)."""
    work = tmp_path_factory.mktemp("rich")
    agent = rich_agent(str(work))
    try:
        result = agent.run("draw it")
        assert result.stop_reason == "done", result
        path = agent.save(work / "run")  # suffix added
        return [i.to_dict() for i in agent.context], path, work
    finally:
        agent.close()


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_saved_notebook_is_valid_and_shows_everything(rich):
    items, path, _ = rich
    assert path.suffix == ".ipynb" and path.exists()
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    header = nb.cells[0].source
    for expected in ("ipyagent transcript", "scripted", "injected client", __version__,
                     "| approval | ask |", "| max_steps | 20 |", "add, python"):
        assert expected in header, expected
    assert nb.metadata.kernelspec.name == "python3"
    kinds = [c.metadata["ipyagent"].get("kind", "code") for c in nb.cells]
    assert kinds == ["header", "user", "assistant", "code", "code", "tool", "tool", "note",
                     "code", "note", "assistant", "audit"]
    # What ipyagent told the model about the edited call, after that cell (not only in
    # `%agent context`): the run's notebook shows every word the model read.
    assert "the user edited this call before it ran" in nb.cells[9].source

    assert nb.cells[1].source == "#### User\n\ndraw it"
    assert nb.cells[-2].source.startswith("#### Assistant\n\nAll done")
    assert nb.cells[-1].source.startswith("#### Audit") and nb.cells[-1].id == "ipyagent-audit"


def test_code_cells_carry_the_real_outputs_and_counts(rich):
    items, path, _ = rich
    nb = nbformat.read(path, as_version=4)
    results = [d for d in items if d["type"] == "tool_result" and d["name"] == "python"
               and d["meta"].get("status")]
    cells = code_cells(nb)
    assert [c.source for c in cells] == [d["code"] for d in (
        i["arguments"] for i in items if i["type"] == "tool_call" and i["name"] == "python"
        and i["arguments"]["code"] != "open('DENIED_CALL_RAN', 'w').write('oops')")]
    assert [c.execution_count for c in cells] == [r["execution_count"] for r in results] == [1, 2, 3]
    image = cells[0].outputs[0]
    assert image.output_type == "display_data" and image.data["image/png"] == PNG_B64
    assert cells[1].outputs[0].output_type == "execute_result"
    assert cells[1].outputs[0].execution_count == 2 and cells[1].outputs[0].data["text/plain"] == "42"
    assert cells[2].source == EDITED


def test_denied_edited_and_other_tools_are_markdown(rich):
    _, path, _ = rich
    nb = nbformat.read(path, as_version=4)
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "denied by the user: no writing files" in md and DELETE in md
    assert "Edited by the user before it ran" in md and PROPOSED in md
    assert "**Tool call** `add`" in md and "**Result:**" in md
    # The denied code is shown, never runnable.
    assert all(DELETE not in c.source for c in code_cells(nb))


def test_metadata_is_lossless(rich):
    items, path, _ = rich
    transcript = read(path)
    assert [i.to_dict() for i in transcript.items] == items
    assert transcript.settings["approval"] == "ask" and transcript.settings["client"] == "scripted"
    assert transcript.usage["requests"] == 5
    assert "(1 from the user, 5 tool calls), model `scripted`" in transcript._repr_markdown_()
    meta = nbformat.read(path, as_version=4).metadata["ipyagent"]
    # The shell tool is offered where the sibling is sandboxed (Agent.shell_tool = "auto").
    shell = ["shell"] if probe()[0] is not None else []
    assert [t["name"] for t in meta["tools"]] == ["add", "python", *shell]


def test_run_all_with_nbclient_reproduces_the_recorded_outputs(rich):
    _, path, work = rich
    nb = nbformat.read(path, as_version=4)
    recorded = [json.loads(json.dumps(c.outputs)) for c in code_cells(nb)]
    NotebookClient(nb, kernel_name="python3", timeout=60,
                   resources={"metadata": {"path": str(work)}}).execute()
    fresh = code_cells(nb)
    assert [c.execution_count for c in fresh] == [1, 2, 3]
    for cell, old in zip(fresh, recorded):
        new = json.loads(json.dumps(cell.outputs))
        assert normalise(model_text(new)) == normalise(model_text(old)), cell.source
    # The timestamp really did change, and only normalisation made them equal.
    assert model_text(recorded[0]) != model_text(fresh[0].outputs)
    assert fresh[0].outputs[0].data["image/png"] == PNG_B64
    assert not (work / "DENIED_CALL_RAN").exists()


def test_error_cells_do_not_stop_run_all(tmp_path):
    agent = Agent(model="demo", cwd=str(tmp_path))
    try:
        agent.run("Use Python to compute `2**100`")  # the demo hits a TypeError, then recovers
        path = agent.save(tmp_path / "demo.ipynb")
    finally:
        agent.close()
    nb = nbformat.read(path, as_version=4)
    failing, recovering = code_cells(nb)
    assert failing.metadata.tags == ["raises-exception"]
    assert failing.outputs[-1].output_type == "error" and failing.outputs[-1].ename == "TypeError"
    NotebookClient(nb, kernel_name="python3", timeout=60).execute()  # raises if Run All stops
    assert "digits: 31" in "".join(o.get("text", "") for o in code_cells(nb)[1].outputs)


def test_context_to_notebook_without_header(rich):
    items, _, _ = rich
    agent = Agent(python_tool=False)
    agent.load(rich[1])
    nb = agent.context.to_notebook()
    nbformat.validate(nb)
    assert nb.cells[0].metadata["ipyagent"]["kind"] == "user"
    assert nb.metadata["ipyagent"]["items"] == items


def test_an_old_nested_summary_is_saved_as_one_run_of_cells_and_read_back(tmp_path):
    """Transcripts from before compaction flattened its summaries hold them nested."""
    from ipyagent.context.buffer import Context
    from ipyagent.context.items import Message, Summary

    inner: dict = {"type": "message", "role": "user", "content": "first", "meta": {}}
    for n in range(3):
        inner = {"type": "summary", "content": f"s{n}", "meta": {},
                 "replaced": [inner, {"type": "message", "role": "assistant",
                                      "content": f"a{n}", "meta": {}}]}
    ctx = Context([Summary("top", replaced=[inner]), Message("user", "now")], system="sys")
    nb = ctx.to_notebook()
    shown = [(c.metadata["ipyagent"]["kind"], c.source.rsplit("\n", 1)[-1]) for c in nb.cells]
    assert shown == [("note", shown[0][1]), ("user", "first"),
                     *((k, x) for n in range(3) for k, x in (("assistant", f"a{n}"), ("summary", f"s{n}"))),
                     ("summary", "top"), ("user", "now")]
    assert "next 4 items" in nb.cells[0].source  # the messages, not the summaries among them
    path = tmp_path / "old.ipynb"
    path.write_text(nbformat.writes(nb))
    assert read(path).items[0].replaced == [inner]


def test_load_continue_and_save_again(rich, tmp_path):
    items, path, _ = rich
    model = ScriptedModel([calls(("add", {"a": 2, "b": 3})), text("5, as before.")])
    agent = Agent.from_transcript(path, client=model, tools=[add], python_tool=False,
                                  approval="auto")
    assert [i.to_dict() for i in agent.context] == items
    assert agent.usage.requests == 5
    result = agent.run("and 2+3?")
    assert result.stop_reason == "done"
    # The model saw the whole restored conversation.
    assert len(model.requests[0].items) == len(items) + 1
    again = agent.save(tmp_path / "continued.ipynb")
    transcript = read(again)
    assert [i.to_dict() for i in transcript.items[: len(items)]] == items
    assert transcript.items[-1].content == "5, as before."
    assert transcript.usage["requests"] == 7
    nbformat.validate(nbformat.read(again, as_version=4))


def test_load_keeps_this_agents_settings_and_from_transcript_keeps_trust(rich):
    _, path, _ = rich
    agent = Agent(python_tool=False, approval="deny", max_steps=3)
    transcript = agent.load(path)
    assert agent.approval == "deny" and agent.max_steps == 3
    assert len(agent.context) == len(transcript.items) and agent.pending() is False
    fresh = Agent.from_transcript(path, python_tool=False)
    # Approval and endpoint are the loader's decisions, never the file's.
    assert fresh.approval == "auto" and fresh.base_url == ""


def test_saving_again_gives_the_same_cells_and_a_continued_run_only_adds(rich, tmp_path):
    items, path, _ = rich
    agent = Agent.from_transcript(path, python_tool=False, client=ScriptedModel([text("More.")]),
                                  tools=[add], approval="auto")
    again = nbformat.read(agent.save(tmp_path / "again.ipynb"), as_version=4)
    first = nbformat.read(path, as_version=4)
    # After the header and before the Audit trailer (rewritten in place, under a fixed id).
    body = lambda nb: [(c.id, c.cell_type, c.source) for c in nb.cells[1:-1]]  # noqa: E731
    assert body(again) == body(first)  # ids by position, not random
    assert again.cells[-1].source == first.cells[-1].source
    agent.run("and more?")
    more = nbformat.read(agent.save(tmp_path / "more.ipynb"), as_version=4)
    assert body(more)[: len(body(first))] == body(first)
    assert [c.id for c in (first.cells[-1], more.cells[-1])] == ["ipyagent-audit"] * 2
    nbformat.validate(more)


def _with_endpoint(path, tmp_path, name, **settings):
    """A copy of the transcript at ``path`` whose recorded settings say ``settings``."""
    nb = nbformat.read(path, as_version=4)
    nb.metadata["ipyagent"]["settings"].update(settings)
    nb.metadata["ipyagent"]["settings"].pop("client", None)
    out = tmp_path / name
    nbformat.write(nb, out)
    return out


def test_from_transcript_goes_on_at_a_local_endpoint_and_never_at_a_remote_one(rich, tmp_path):
    _, path, _ = rich
    local = _with_endpoint(path, tmp_path, "local.ipynb", model="qwen2.5:7b",
                           base_url="http://127.0.0.1:11434/v1", api_key_env="OPENAI_API_KEY")
    agent = Agent.from_transcript(local, python_tool=False)
    # Same machine: the conversation goes on where it ran, with no key taken from the file.
    assert (agent.model, agent.base_url) == ("qwen2.5:7b", "http://127.0.0.1:11434/v1")
    assert agent.api_key_env == "OPENAI_API_KEY" and agent.endpoint.key_env in ("", None)

    remote = _with_endpoint(path, tmp_path, "remote.ipynb", model="m-1",
                            base_url="https://llm.example.com/v1")
    with pytest.warns(UserWarning) as caught:
        agent = Agent.from_transcript(remote, python_tool=False)
    assert agent.base_url == "" and agent.model == "m-1"
    (line,) = [str(w.message) for w in caught]
    assert line == ("this conversation ran with m-1 at https://llm.example.com/v1; it goes on with "
                    "m-1; pass base_url='https://llm.example.com/v1' to go on there (an endpoint "
                    "off this machine is never taken from a file)")

    # The demo model at an endpoint: it never called one, and says so (issue 17, finding 10).
    agent = Agent(model="demo", base_url="http://127.0.0.1:59999/v1", python_tool=False)
    note = endpoint_note(agent, read(remote))
    assert note == ("this conversation ran with m-1 at https://llm.example.com/v1; it goes on "
                    "with the demo model (built in, offline); pass model='m-1', "
                    "base_url='https://llm.example.com/v1' to go on with it (an endpoint off "
                    "this machine is never taken from a file)")

    preset = _with_endpoint(path, tmp_path, "preset.ipynb", model="llama-3.1-8b-instant",
                            provider="groq", base_url="")
    agent = Agent.from_transcript(preset, python_tool=False)
    assert agent.provider == "groq" and agent.endpoint.key_env == "GROQ_API_KEY"


def test_a_transcript_never_loosens_a_limit_and_says_so_in_one_line(rich, tmp_path):
    """A crafted file with loose limits: the loader's limits stay, and one line names each
    value ignored; 0 / '' mean 'no limit', the loosest; a tighter value is applied."""
    from traitlets.config import Config

    _, path, _ = rich
    loose = _with_endpoint(path, tmp_path, "loose.ipynb", max_steps=100000, circuit_breaker=0,
                           tool_timeout=0, max_tokens=0, tool_output_limit=0, memory_limit="",
                           request_max_tokens=None, context_window=0, python_tool=True)
    with pytest.warns(UserWarning) as caught:
        agent = Agent.from_transcript(loose, python_tool=False,
                                      config=Config(Agent={"max_steps": 50, "memory_limit": "2GB"}))
    with agent:
        assert (agent.max_steps, agent.circuit_breaker, agent.tool_timeout) == (50, 3, 60.0)
        assert (agent.tool_output_limit, agent.memory_limit) == (20000, "2GB")
    [line] = [str(w.message) for w in caught if "ignored from" in str(w.message)]
    assert line == (f"ignored from {loose}: max_steps=100000 (looser than your 50), "
                    "circuit_breaker=0 (no limit), tool_output_limit=0 (no limit), "
                    "tool_timeout=0 (no limit), memory_limit='' (no limit) — a transcript can "
                    "tighten a limit, never loosen it; pass the setting to choose it")
    # python_tool=False was passed: the caller's choice, never compared (no line for it).
    tight = _with_endpoint(path, tmp_path, "tight.ipynb", max_steps=4, tool_timeout=5.0,
                           max_tokens=1000, memory_limit="1GB", python_tool=False)
    with Agent.from_transcript(tight) as agent:
        assert (agent.max_steps, agent.tool_timeout, agent.max_tokens) == (4, 5.0, 1000)
        assert (agent.memory_limit, agent.python_tool) == ("1GB", False)
    off = _with_endpoint(path, tmp_path, "on.ipynb", python_tool=True)
    with pytest.warns(UserWarning, match=r"python_tool=True \(looser than your False\)"):
        Agent.from_transcript(off, config=Config(Agent={"python_tool": False})).close()


def test_read_errors_are_one_line(tmp_path):
    with pytest.raises(TranscriptError, match="no such transcript"):
        read(tmp_path / "missing.ipynb")
    plain = tmp_path / "plain.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), plain)
    with pytest.raises(TranscriptError, match="not an ipyagent transcript"):
        read(plain)
    (tmp_path / "junk.ipynb").write_text("{not json")
    with pytest.raises(TranscriptError, match="cannot read") as info:
        read(tmp_path / "junk.ipynb")
    assert "\n" not in str(info.value)


def damaged_copy(path, tmp_path, damage):
    """A copy of the transcript at ``path`` whose ipyagent metadata ``damage`` changed."""
    nb = nbformat.read(path, as_version=4)
    damage(nb.metadata["ipyagent"])
    broken = tmp_path / "broken.ipynb"
    nbformat.write(nb, broken)
    return broken


@pytest.mark.parametrize("damage,message", [
    (lambda m: m.update(settings="oops"), "settings is damaged"),
    (lambda m: m.update(format="x"), "format is not a number"),
    (lambda m: next(i for i in m["items"] if i["type"] == "tool_result").update(outputs="oops"),
     "outputs are not a list"),
    (lambda m: next(i for i in m["items"] if i["type"] == "tool_call").update(arguments="oops"),
     "arguments are not a mapping"),
])
def test_damaged_metadata_is_one_line_naming_the_file(rich, tmp_path, damage, message):
    _, path, _ = rich
    broken = damaged_copy(path, tmp_path, damage)
    with pytest.raises(TranscriptError, match=message) as info:
        read(broken)
    assert str(broken) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("text", ["[]", '{"nbformat": 3, "nbformat_minor": 0, "metadata": {}}'])
def test_json_that_is_no_notebook_is_one_line(tmp_path, text):
    odd = tmp_path / "odd.ipynb"
    odd.write_text(text)
    with pytest.raises(TranscriptError, match="cannot read .*not a notebook") as info:
        read(odd)
    assert str(odd) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("damage,message", [
    (lambda m: next(i for i in m["items"] if i["type"] == "message").update(content=5),
     "message content is int"),
    (lambda m: next(i for i in m["items"] if i["type"] == "message").update(role="robot"),
     "role 'robot'"),
    (lambda m: next(i for i in m["items"] if i["type"] == "tool_result").update(output=None),
     "tool_result output is NoneType"),
    (lambda m: next(i for i in m["items"] if i["type"] == "tool_call").update(id=7),
     "tool_call id is int"),
])
def test_an_item_field_of_the_wrong_type_is_one_line(rich, tmp_path, damage, message):
    _, path, work = rich
    broken = damaged_copy(path, tmp_path, damage)
    with pytest.raises(TranscriptError, match=message) as info:
        Agent.from_transcript(broken, python_tool=False, file_tools=False)
    assert str(broken) in str(info.value) and "\n" not in str(info.value)


def test_a_damaged_setting_is_one_line_naming_it_and_can_be_overridden(rich, tmp_path):
    from ipyagent.transcripts.replay import replay

    _, path, work = rich
    nb = nbformat.read(path, as_version=4)
    nb.metadata["ipyagent"]["settings"].update(max_steps="lots", tool_timeout="soon")
    broken = tmp_path / "broken.ipynb"
    nbformat.write(nb, broken)
    with pytest.raises(TranscriptError, match=r"settings\.max_steps is damaged .*pass max_steps=") as info:
        Agent.from_transcript(broken, python_tool=False, file_tools=False, tool_timeout=5)
    assert str(broken) in str(info.value) and "\n" not in str(info.value)
    with Agent.from_transcript(broken, python_tool=False, file_tools=False, max_steps=3,
                               tool_timeout=5) as agent:
        assert agent.max_steps == 3
    with pytest.raises(TranscriptError, match=r"settings\.tool_timeout is damaged"):
        replay(broken, cwd=str(work))


def test_autosave_rewrites_after_every_step(tmp_path):
    target = tmp_path / "auto.ipynb"
    seen = []

    def on_event(event):
        if isinstance(event, StepFinished):
            seen.append(len(read(target).items))

    model = ScriptedModel([calls(("add", {"a": 1, "b": 1})), calls(("add", {"a": 2, "b": 2})),
                           text("4")])
    agent = Agent(client=model, tools=[add], python_tool=False, autosave=str(target))
    agent.run("go", on_event=on_event)
    assert seen == [3, 5, 6]  # user + (call, result) per step, then the answer
    assert read(target).items == list(agent.context)
    assert not [p for p in tmp_path.iterdir() if p.name != "auto.ipynb"]  # no temp files left


def test_autosave_directory_gives_each_conversation_a_file(tmp_path):
    runs = tmp_path / "runs"
    agent = Agent(client=ScriptedModel([text("a"), text("b"), text("c")]), python_tool=False,
                  autosave=str(runs) + "/")
    agent.run("one")
    agent.run("two")
    assert len(list(runs.glob("run-*.ipynb"))) == 1
    agent.reset()
    agent.run("three")
    files = sorted(runs.glob("run-*.ipynb"))
    assert len(files) == 2
    assert sorted(len(read(f).items) for f in files) == [2, 4]


def test_failing_autosave_is_a_notice_and_the_run_goes_on(tmp_path):
    (tmp_path / "afile").write_text("x")
    notices = []
    agent = Agent(client=ScriptedModel([calls(("add", {"a": 1, "b": 1})), text("2")]),
                  tools=[add], python_tool=False, autosave=str(tmp_path / "afile" / "run.ipynb"))
    result = agent.run("go", on_event=lambda e: isinstance(e, Notice) and notices.append(e))
    assert result.stop_reason == "done" and result.text == "2"
    # Said once, not after every step (two steps here).
    assert len(notices) == 1 and notices[0].level == "warning"
    assert notices[0].message.startswith("autosave failed: cannot write")
    assert "\n" not in notices[0].message
    (tmp_path / "afile").unlink()  # the problem is fixed: the next save works, and says where
    (tmp_path / "afile").mkdir()
    notices.clear()
    agent.context.add_user("again")
    agent.resources.inject(ScriptedModel([text("3")]))  # a second scripted reply
    agent.run(on_event=lambda e: isinstance(e, Notice) and notices.append(e))
    assert [n.level for n in notices] == ["info"] and "autosaving this conversation to" in notices[0].message
    assert (tmp_path / "afile" / "run.ipynb").exists()
    agent.close()


def test_where_autosave_writes_is_said_at_the_end_of_the_run_not_mid_stream(tmp_path):
    """Issue 30: the line came after the first step, between the model's words and its
    next call; now it comes after the last step, just before the run's footer. A single
    step says it at that step's end."""
    from ipyagent.context.events import RunFinished, StepFinished, StepStarted

    seen: list[str] = []

    def hear(event):
        if isinstance(event, Notice):
            seen.append("autosave" if "autosaving" in event.message else event.message)
        elif isinstance(event, (StepStarted, StepFinished, RunFinished)):
            seen.append(type(event).__name__)

    agent = Agent(client=ScriptedModel([calls(("add", {"a": 1, "b": 1})), text("2"), text("3")]),
                  tools=[add], python_tool=False, autosave=str(tmp_path / "runs") + "/")
    agent.run("go", on_event=hear)
    assert seen == ["StepStarted", "StepFinished", "StepStarted", "StepFinished", "autosave",
                    "RunFinished"], seen
    assert (tmp_path / "runs").is_dir() and len(list((tmp_path / "runs").glob("run-*.ipynb"))) == 1
    agent.close()
    seen.clear()  # a directory is announced once a session: a new agent for the step
    agent = Agent(client=ScriptedModel([text("3")]), python_tool=False,
                  autosave=str(tmp_path / "runs") + "/")
    agent.step("again", on_event=hear)
    assert seen == ["StepStarted", "autosave", "StepFinished"], seen
    agent.close()


def test_failing_autosave_with_no_display_is_a_warning_not_silence(tmp_path):
    """A plain script has no listener: the notice alone went nowhere, and the user believed
    every step was saved."""
    import warnings

    (tmp_path / "afile").write_text("x")
    agent = Agent(client=ScriptedModel([calls(("add", {"a": 1, "b": 1})), text("2")]),
                  tools=[add], python_tool=False, autosave=str(tmp_path / "afile" / "run.ipynb"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = agent.run("go")
    agent.close()
    assert result.stop_reason == "done"
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and said[0].startswith("autosave failed: cannot write"), said


def test_odd_contexts_still_make_valid_notebooks():
    agent = Agent(python_tool=False)
    ctx = agent.context
    ctx.add_user("hi")
    ctx.append(ToolCall("c1", "python", {"code": "print('never ran')"}))  # unanswered
    ctx.append(ToolResult("gone", "orphan output", name="python"))  # its call was deleted
    ctx.append(ToolCall("c2", "python", {"code": "s = '''\n```\n'''"}))
    ctx.append(ToolResult("c2", "Error: unknown tool 'python'", error=True, name="python"))
    ctx.append(ToolCall("c3", "python", {}, raw_arguments='{"code": '))
    ctx.append(ToolResult("c3", "bad json", error=True, name="python"))
    ctx.append(ToolCall("c4", "python", {"code": "```\nx = '```'"}))
    ctx.append(ToolResult("c4", "", outputs=[{"output_type": "execute_result", "data": {
        "text/plain": "1"}, "metadata": {}, "execution_count": 0, "_display_id": "d"}],
        execution_count=0, meta={"status": "ok"}))
    nb = ctx.to_notebook()
    nbformat.validate(nb)
    assert [c.cell_type for c in nb.cells] == ["markdown"] * 5 + ["code"]
    assert "not answered" in nb.cells[1].source and "orphan output" in nb.cells[2].source
    assert "did not run" in nb.cells[3].source and '{"code":' in nb.cells[4].source
    assert "````python\ns = '''\n```\n'''\n````" in nb.cells[3].source  # a fence that holds
    assert nb.cells[5].execution_count is None and "_display_id" not in nb.cells[5].outputs[0]


SIGKILL_SCRIPT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from ipyagent import Agent, tool
    from tests.helpers.scripted_model import ScriptedModel, calls

    @tool
    def slow(n: int) -> str:
        '''Sleep a little and return a lot of text.'''
        time.sleep(0.15)
        return ("line %d " % n) * 4000

    model = ScriptedModel([calls(("slow", {{"n": i}})) for i in range(200)])
    agent = Agent(client=model, tools=[slow], python_tool=False, max_steps=200,
                  autosave={target!r})
    agent.run("keep going")
""")


def test_sigkill_mid_run_leaves_a_valid_notebook(tmp_path):
    target = tmp_path / "killed.ipynb"
    script = SIGKILL_SCRIPT.format(root=str(ROOT), target=str(target))
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if target.exists() and len(read(target).items) >= 9:
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.05)
        time.sleep(0.07)  # land somewhere inside a step (or a write)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    nb = nbformat.read(target, as_version=4)
    nbformat.validate(nb)
    items = read(target).items
    assert len(items) >= 9
    # Every completed step is whole: each call answered, in order.
    calls_ = [i for i in items if isinstance(i, ToolCall)]
    results = [i for i in items if isinstance(i, ToolResult)]
    assert len(calls_) == len(results) == (len(items) - 1) // 2
    assert [r.output.split()[1] for r in results] == [str(n) for n in range(len(results))]


KILLED_IN_A_WRITE = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from ipyagent import Agent
    from tests.helpers.scripted_model import ScriptedModel, text

    # SIGKILL lands exactly inside the autosave: written, not yet renamed.
    os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
    Agent(client=ScriptedModel([text("hi")]), python_tool=False, autosave={target!r}).run("go")
""")


def aged(path: Path, seconds: float) -> Path:
    os.utime(path, (time.time() - seconds,) * 2)
    return path


def test_a_save_removes_what_a_save_killed_mid_write_left_behind(tmp_path):
    """Issue 12, finding 7: kill -9 during autosave left .tmp files for good."""
    target = tmp_path / "auto.ipynb"
    proc = subprocess.run([sys.executable, "-c", KILLED_IN_A_WRITE.format(
        root=str(ROOT), target=str(target))], cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL
    (left,) = tmp_path.glob(".auto.ipynb.*.tmp")
    aged(left, 60)  # its writer is dead, and a minute has passed
    aged(_touch(tmp_path / ".auto.ipynb.k2j4_x9q.tmp"), 2 * 3600)  # an older ipyagent's, no pid
    Agent(client=ScriptedModel([text("hello")]), python_tool=False,
          autosave=str(target)).run("go")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["auto.ipynb"]
    assert read(target).items[-1].content == "hello"


def test_a_save_leaves_temp_files_that_a_live_writer_may_still_use(tmp_path):
    target = tmp_path / "run.ipynb"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(gone.stdout)
    keep = {
        # another process (alive: this one) writing the same file right now
        aged(_touch(tmp_path / f".run.ipynb.{os.getpid()}.abcdefgh.tmp"), 120),
        # a dead pid, but fresh: it may be a live writer in another pid namespace or host
        _touch(tmp_path / f".run.ipynb.{dead}.abcdefgh.tmp"),
        # not this target's temp files, nor temp files at all
        aged(_touch(tmp_path / f".run.ipynb.bak.{dead}.abcdefgh.tmp"), 7200),
        aged(_touch(tmp_path / ".run.ipynb.my-notes.tmp"), 7200),
        aged(_touch(tmp_path / f".other.ipynb.{dead}.abcdefgh.tmp"), 7200),
    }
    stale = aged(_touch(tmp_path / f".run.ipynb.{dead}.stale___.tmp"), 60)
    with Agent(client=ScriptedModel([text("hi")]), python_tool=False) as agent:
        agent.run("go")
        agent.save(target)
    assert not stale.exists()
    assert {p for p in tmp_path.iterdir() if p != target} == keep


def _touch(path: Path) -> Path:
    path.write_text("{")
    return path


def test_a_transcript_shown_in_a_cell_keeps_what_the_file_says_inert() -> None:
    from ipyagent.context.items import Message
    from ipyagent.transcripts.transcript import Transcript
    from tests.helpers.inert import bundle_problems

    hostile = "x` <img src=x onerror=alert(1)> `"
    t = Transcript(items=[Message("user", "hi")], settings={"model": hostile},
                   version="<script>alert(1)</script>", saved="[x](javascript:alert(1))",
                   path="run`<svg onload=alert(1)>`.ipynb")
    assert bundle_problems({"text/markdown": t._repr_markdown_()}) == []
    assert "onerror" in t._repr_markdown_()  # shown, as text


def test_what_loading_says_about_the_file_shows_its_control_characters(rich, tmp_path):
    """A recorded endpoint/model name is the file's text: the load notes make ESC visible."""
    _, path, _ = rich
    hostile = _with_endpoint(path, tmp_path, "esc.ipynb", model="m\x1b[2K\rgpt-4o",
                             base_url="https://elsewhere.example/v1\x1b[8m")
    with pytest.warns(UserWarning) as caught:
        agent = Agent.from_transcript(hostile, python_tool=False)
    agent.close()
    said = " ".join(str(w.message) for w in caught)
    assert "elsewhere.example" in said
    assert "\x1b" not in said and "\r" not in said and "␛[8m" in said


def test_autosave_to_a_directory_says_so_once_and_keeps_the_newest(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    for i in range(4):  # older autosaves, and a file autosave did not name
        old = runs / f"run-2020010{i + 1}-000000.ipynb"
        old.write_text("{}")
        os.utime(old, (1_600_000_000 + i, 1_600_000_000 + i))
    (runs / "mine.ipynb").write_text("{}")
    notices = []
    agent = Agent(client=ScriptedModel([text("1"), text("2")]), python_tool=False,
                  autosave=str(runs) + "/", autosave_keep=3)
    agent.run("one", on_event=lambda e: isinstance(e, Notice) and notices.append(e))
    agent.reset()
    agent.run("two", on_event=lambda e: isinstance(e, Notice) and notices.append(e))
    agent.close()
    assert [n.message for n in notices if "autosaving" in n.message] == [
        next(n.message for n in notices)]  # said once per session, not per conversation
    names = sorted(p.name for p in runs.iterdir())
    assert "mine.ipynb" in names  # only autosave's own names are pruned
    autosaved = [n for n in names if n != "mine.ipynb"]
    assert len(autosaved) == 3 and "run-20200104-000000.ipynb" in autosaved
    assert "run-20200103-000000.ipynb" not in autosaved


# -- where the code ran: every python/shell result records it, the header sums it up ----------
@pytest.mark.parametrize("sandbox", ["none", "auto"])
def test_the_header_says_whether_the_code_ran_sandboxed(tmp_path: Path, sandbox: str) -> None:
    from ipyagent.kernel.sandbox import resolve_mode

    if sandbox == "auto" and resolve_mode("auto")[0] != "bwrap":
        pytest.skip("no bubblewrap here")  # CI installs it: this runs there
    model = ScriptedModel([calls(("python", {"code": "1 + 1"})), calls(("python", {"code": "2"})),
                           text("done")])
    with Agent(client=model, approval="auto", file_tools=False, sandbox=sandbox) as agent:
        agent.run("add")
        results = [i for i in agent.context if isinstance(i, ToolResult)]
        want = "bubblewrap" if sandbox == "auto" else "none"
        assert [r.meta["sandbox"] for r in results] == [want, want]
        header = to_notebook(agent).cells[0].source
        words = "in the bubblewrap sandbox" if want == "bubblewrap" else "NOT sandboxed (as your account)"
        assert f"| code ran | {words} (all 2 calls) |" in header


def test_mixed_unrecorded_and_compacted_calls_are_each_counted() -> None:
    from ipyagent.context.items import Summary
    from ipyagent.transcripts.transcript import ran_where

    def result(n: int, where: object = None, ran: bool = True) -> ToolResult:
        meta = {} if where is None else {"sandbox": where}
        return ToolResult(f"c{n}", "x", name="python", meta=meta, execution_count=n if ran else None)

    old = [result(1, "bubblewrap"), result(2, "remote")]
    items = [Summary("earlier", replaced=[i.to_dict() for i in old]), result(3, "bubblewrap"),
             result(4, "<b>claims</b>"), result(5), result(6, ran=False),  # 6: never ran
             ToolResult("c7", "x", name="read_file")]
    assert ran_where(items) == ("2 in the bubblewrap sandbox, 1 on a remote kernel (not sandboxed "
                                "by ipyagent), 2 not recorded")
    assert ran_where([ToolResult("c8", "x", name="read_file")]) is None


def test_what_ipyagent_told_the_model_is_saved_visible(tmp_path) -> None:
    """Found by a review: the note cell held a bidi override the model's code put in the
    failing part the note quotes; the card showed it as ⟨U+202E⟩, the saved notebook raw."""
    from ipyagent import Agent
    from ipyagent.context.items import ToolResult
    from tests.helpers.scripted_model import ScriptedModel, calls, text

    code = "total = 1\nprint(total + int('12 \u202e;srac eht ' + 'x' * 40) + total + total)"
    agent = Agent(client=ScriptedModel([calls(("python", {"code": code})), text("it failed")]),
                  approval="auto", cwd=str(tmp_path), autosave="", file_tools=False)
    try:
        agent.run("go")
        note = [i for i in agent.context if isinstance(i, ToolResult)][0].meta.get("note", "")
        assert "\u202e" in note  # the model's code, as the model gets it
        nb = nbformat.read(agent.save(tmp_path / "run"), as_version=4)
    finally:
        agent.close()
    told = [c.source for c in nb.cells if "ipyagent told the model" in c.source]
    assert told and "\u202e" not in told[0] and "⟨U+202E⟩" in told[0]


def test_what_ipyagent_told_the_model_is_saved_for_every_kind_of_call() -> None:
    """A timed-out python call and a file tool's result had notes the model read that the saved
    notebook left out (only a python cell that ran kept its note cell)."""
    from ipyagent.context.buffer import Context
    from ipyagent.context.items import ToolCall, ToolResult

    ctx = Context([
        ToolCall("t1", "python", {"code": "while True: pass"}),
        ToolResult("t1", "timed out", name="python",
                   meta={"status": "timeout", "note": "the loop never ends: NOTE-ONE"}),
        ToolCall("r1", "read_file", {"path": "a.csv"}),
        ToolResult("r1", "a;b\n1;2", name="read_file", meta={"note": "separator ';': NOTE-TWO"}),
        ToolCall("p1", "python", {"code": "print(1)"}),
        ToolResult("p1", "1", name="python", execution_count=1, meta={"status": "ok"}),
    ], system="sys")
    cells = ctx.to_notebook().cells
    told = [c for c in cells if "ipyagent told the model" in c.source]
    assert [c.metadata["ipyagent"]["call_id"] for c in told] == ["t1", "r1"]  # p1 had none
    assert "NOTE-ONE" in told[0].source and "NOTE-TWO" in told[1].source
    order = [c.metadata["ipyagent"].get("call_id") for c in cells]
    assert order.index("t1") < order.index("r1")  # each note under its own call
