"""The cached transcript writer: the bytes nbformat writes, items rendered once."""

from __future__ import annotations

import copy
import subprocess
import sys

import nbformat
import pytest

from ipyagent import Agent, Message, ToolCall, ToolResult
from ipyagent._util.text import repair_surrogates
from ipyagent.errors import TranscriptError
from ipyagent.transcripts import notebook_text
from ipyagent.transcripts.notebook_text import NotebookText
from ipyagent.transcripts.transcript import _parts, to_notebook


def _agent() -> Agent:
    agent = Agent(model="demo", python_tool=False)
    agent.context.extend([
        Message("user", "hi\nthere \ud83d half"),
        ToolCall("c1", "python", {"code": "print(1)\nx=2"}),
        ToolResult("c1", "1\n", name="python", execution_count=3, meta={"status": "ok"},
                   outputs=[{"output_type": "stream", "name": "stdout", "text": "1\nx\n"},
                            {"output_type": "display_data", "metadata": {},
                             "data": {"text/plain": "a\nb", "image/png": "AAA\nBBB"}}]),
        ToolCall("c2", "read_file", {"path": "x"}),
        ToolResult("c2", "content\n" * 3, name="read_file"),
        ToolResult("zz", "orphan", name="x"),
        Message("assistant", "done"),
    ])
    return agent


def _text(agent: Agent, cache: NotebookText, secrets: dict[str, str] | None = None) -> str:
    header, metadata = _parts(agent)
    header["date"] = metadata["saved"] = "2026-01-01T00:00:00+00:00"
    return cache.text(agent.context, header=header, kernel_name=agent.kernel_name,
                      metadata=metadata, secrets=secrets or {})


def _reference(agent: Agent) -> str:
    nb = to_notebook(agent)
    nb.cells[0].source = nb.cells[0].source.replace(nb.metadata.ipyagent.saved,
                                                    "2026-01-01T00:00:00+00:00")
    nb.metadata.ipyagent.saved = "2026-01-01T00:00:00+00:00"
    return repair_surrogates(nbformat.writes(nb))


def test_the_text_is_what_nbformat_writes_and_valid():
    agent = _agent()
    text = _text(agent, NotebookText())
    assert text == _reference(agent)
    nbformat.validate(nbformat.reads(text, as_version=4))


def test_unchanged_items_are_not_rendered_again_and_edits_are(monkeypatch):
    agent, cache = _agent(), NotebookText()
    _text(agent, cache)
    dumped: list[object] = []
    real = notebook_text.dumps
    monkeypatch.setattr(notebook_text, "dumps", lambda v, d=0: dumped.append(v) or real(v, d))
    agent.context.append(Message("user", "more"))
    _text(agent, cache)
    # the new item (metadata + cell), the header, the audit cell and the skeleton
    assert len(dumped) == 5
    agent.context[0].content = "edited in place"
    dumped.clear()
    text = _text(agent, cache)
    assert "edited in place" in text and text == _reference(agent)
    assert len(dumped) == 5  # the edited message's entry and cell, header, audit, skeleton


def test_a_secret_in_a_cached_item_is_still_refused():
    agent, cache = _agent(), NotebookText()
    _text(agent, cache)
    with pytest.raises(TranscriptError, match=r"\$MY_TOKEN"):
        _text(agent, cache, {"MY_TOKEN": "content\ncontent"})


def test_saving_does_not_import_nbformat(tmp_path):
    code = ("import sys; from ipyagent import Agent, Message; a = Agent(model='demo'); "
            "a.context.append(Message('user', 'x')); a.save(sys.argv[1]); "
            "print('nbformat' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "t.ipynb")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- spilling: what was written is read back from the file, not kept in memory ----------------
PAYLOAD = "iVBORw0KGgo" + "A" * 40_000  # a plot's base64 PNG, as a python call's output holds it


def _plot_agent() -> Agent:
    agent = _agent()
    agent.context.extend([
        ToolCall("c3", "python", {"code": "plot()"}),
        ToolResult("c3", "<Figure>", name="python", execution_count=4, meta={"status": "ok"},
                   outputs=[{"output_type": "display_data", "metadata": {},
                             "data": {"image/png": PAYLOAD, "text/html": "<b>" + "x" * 5_000 + "</b>",
                                      "text/plain": "<Figure>"}}])])
    return agent


def _kept(cache: NotebookText) -> list[str]:
    """Every text the cache holds in memory."""
    texts = [e.data for e in cache._items.values()]
    texts += [t for group in cache._groups.values() for pair in group.pairs for t in pair]
    return [t.decode() for t in texts if isinstance(t, bytes)]


def _write(cache: NotebookText, text: str, path) -> None:
    from ipyagent._util.atomic import write_atomic

    write_atomic(path, text)
    cache.written(path)


def test_written_payloads_are_read_back_from_the_file_not_kept(tmp_path):
    agent, cache, path = _plot_agent(), NotebookText(), tmp_path / "auto.ipynb"
    text = _text(agent, cache)
    assert any(PAYLOAD in t for t in _kept(cache))  # until it is written
    _write(cache, text, path)
    assert not any(PAYLOAD in t or "x" * 5_000 in t for t in _kept(cache))
    assert max(map(len, _kept(cache))) < NotebookText.SPILL
    agent.context.append(Message("user", "more"))
    again = _text(agent, cache)
    assert again == _reference(agent) and PAYLOAD in again
    _write(cache, again, path)
    assert _text(agent, cache) == _reference(agent)  # read back from the second file too


def test_a_file_changed_by_someone_else_is_not_read_back(tmp_path):
    agent, cache, path = _plot_agent(), NotebookText(), tmp_path / "auto.ipynb"
    _write(cache, _text(agent, cache), path)
    nb = nbformat.reads(path.read_text(), as_version=4)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("my own note"))
    path.write_text(nbformat.writes(nb))  # e.g. saved from Jupyter: every offset moves
    assert _text(agent, cache) == _reference(agent)  # rendered again from the items
    path.write_text("")  # or emptied
    assert _text(agent, cache) == _reference(agent)


def test_an_autosaved_run_spills_its_payloads_and_loses_nothing(tmp_path):
    """A run with autosave, payloads spilled; then save(other), to_notebook and load."""
    from ipyagent import tool
    from ipyagent.transcripts.transcript import read
    from tests.helpers.scripted_model import ScriptedModel, calls, text

    @tool
    async def plot(n: int) -> ToolResult:
        """Draw plot n."""
        return ToolResult("", f"<Figure {n}>", outputs=[
            {"output_type": "display_data", "metadata": {},
             "data": {"image/png": f"{n}" + PAYLOAD, "text/html": f"<p>{n}</p>" + "y" * 2_000,
                      "text/plain": f"<Figure {n}>"}}])

    auto = tmp_path / "auto.ipynb"
    model = ScriptedModel([calls(("plot", {"n": n})) for n in range(3)] + [text("drawn")])
    agent = Agent(client=model, tools=[plot], python_tool=False, file_tools=False, autosave=str(auto))
    agent.run("draw")
    cache = agent._autosaver.cache
    assert not any(PAYLOAD in t for t in _kept(cache))  # the kernel keeps only the items' own
    other = agent.save(tmp_path / "other.ipynb")
    a, b = (nbformat.read(p, as_version=4) for p in (auto, other))
    for nb in (a, b):
        nb.cells[0].source = nb.cells[0].source.replace(nb.metadata.ipyagent.saved, "")
        nb.metadata.ipyagent.saved = ""
    assert a == b
    kept = [o["data"]["image/png"] for i in read(other).items if isinstance(i, ToolResult)
            for o in i.outputs]
    assert kept == [f"{n}" + PAYLOAD for n in range(3)]
    assert read(auto).items == list(agent.context)
    nb = to_notebook(agent)
    assert sum(PAYLOAD in json_text for json_text in map(str, nb.metadata.ipyagent["items"])) == 3
    agent.close()


# -- a long run's saves: unchanged runs of cells and items are copied from the file whole ----
def _long_agent(steps: int) -> Agent:
    agent = Agent(model="demo", python_tool=False)
    agent.context.append(Message("user", "go \u00e9"))  # non-ASCII: offsets are bytes
    for n in range(steps):
        agent.context.append(ToolCall(f"c{n}", "read_file", {"path": f"f{n}.txt"}))
        agent.context.append(ToolResult(f"c{n}", f"page {n} \u2713\n" + "x" * 700, name="read_file"))
    return agent


def test_every_kind_of_edit_between_saves_gives_the_text_a_fresh_render_gives(tmp_path):
    """Appends, inserts (every later cell's id moves), the first item removed (the next
    one's separator changes), in-place edits, another program's write: after each, the
    saved bytes are what a cache that never saw the run renders (itself checked against
    nbformat above), and the file is a valid notebook."""
    import random

    agent, cache, path = _long_agent(30), NotebookText(), tmp_path / "auto.ipynb"
    _write(cache, _text(agent, cache), path)
    rng = random.Random(16)
    edits = [
        lambda: agent.context.append(Message("user", f"more {rng.random()}")),
        lambda: agent.context.insert(rng.randrange(1, len(agent.context)), Message("user", "wedged")),
        lambda: agent.context.pop(0),
        lambda: agent.context.pop(rng.randrange(len(agent.context))),
        lambda: setattr(agent.context[rng.randrange(len(agent.context))], "meta", {"note": "edited"}),
        lambda: path.write_bytes(path.read_bytes().replace(b"page", b"PAGE")),  # same length
        lambda: path.write_text("{}"),
        lambda: None,
    ]
    for _ in range(60):
        rng.choice(edits)()
        text = _text(agent, cache)
        assert text == _text(agent, NotebookText())
        _write(cache, text, path)
    nbformat.validate(nbformat.reads(path.read_text(), as_version=4))


def test_an_unchanged_run_is_copied_in_a_few_pieces(tmp_path, monkeypatch):
    """200 unchanged steps then one more: the save copies the old file's unchanged cells and
    items as a few spans, not a piece per cell (what made an autosave at step 1,000 cost
    three times writing its bytes)."""
    agent, cache, path = _long_agent(200), NotebookText(), tmp_path / "auto.ipynb"
    _write(cache, _text(agent, cache), path)
    seen: list[int] = []
    real = notebook_text._Out.join
    monkeypatch.setattr(notebook_text._Out, "join",
                        lambda self, source: seen.append(len(self.parts)) or real(self, source))
    agent.context.append(ToolCall("new", "read_file", {"path": "g.txt"}))
    agent.context.append(ToolResult("new", "y" * 900, name="read_file"))
    text = _text(agent, cache)
    assert text == _reference(agent)
    assert seen and seen[-1] < 40  # 802 items and ~400 cells, unchanged: joined as spans


@pytest.mark.parametrize("meddle", ["truncate", "append"])
def test_a_file_written_by_another_program_while_it_is_read_back_is_not_used(tmp_path, monkeypatch, meddle):
    """Read with pread, checked after: a truncation mid-read is a short read (a mapped file
    would kill the kernel with SIGBUS), a write in place a new stamp; either way the text is
    rendered from the items."""
    agent, cache, path = _long_agent(50), NotebookText(), tmp_path / "auto.ipynb"
    _write(cache, _text(agent, cache), path)
    agent.context.append(Message("user", "more"))
    real, calls = notebook_text._Written.read, []

    def read(self, span):
        if not calls:
            with open(path, "r+b") as f:
                f.truncate(100) if meddle == "truncate" else (f.seek(0, 2), f.write(b" "))
        calls.append(span)
        return real(self, span)

    monkeypatch.setattr(notebook_text._Written, "read", read)
    assert _text(agent, cache) == _reference(agent)
    assert calls  # the spans were being read when the file changed


def test_text_that_looks_like_the_writers_own_marks_is_only_text():
    marks = ["\x00ipyagent-items\x00", "\x00ipyagent-cells\x00", "\x00ipyagent-cell-id\x00",
             "\x00ipyagent-tools\x00", "\x00ipyagent-settings\x00"]
    agent = _agent()
    agent.context.system = marks[0]  # what the markers were before they took a token
    agent.context.extend(Message("user", m) for m in marks)
    agent.context.append(ToolCall("c9", "python", {"code": marks[2], "id": marks[2]}))
    assert _text(agent, NotebookText()) == _reference(agent)


@pytest.mark.parametrize("before, after", [(1, True), (0, False), (1, 1.0), (-0.0, 0.0),
                                           ({1: "k"}, {True: "k"}), ([2], [2.0])])
def test_a_value_edited_in_place_to_an_equal_one_of_other_json_is_rendered_again(before, after):
    """``1 == True == 1.0`` (and ``0.0 == -0.0``) in Python, not in JSON: an item whose meta
    or outputs changed so is a changed item (it was copied from the cache: ``1``, not ``true``)."""
    agent, cache = _agent(), NotebookText()
    result = agent.context[2]
    result.meta["n"] = copy.deepcopy(before)
    result.outputs[0]["n"] = copy.deepcopy(before)
    _text(agent, cache)
    result.meta["n"] = copy.deepcopy(after)
    assert _text(agent, cache) == _text(agent, NotebookText())
    result.outputs[0]["n"] = copy.deepcopy(after)
    assert _text(agent, cache) == _text(agent, NotebookText()) == _reference(agent)


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs here")
def test_a_fifo_put_where_the_file_was_does_not_block_the_next_save(tmp_path):
    """Another program replaces the autosave file by a named pipe: opening it to read the old
    spans blocked the user's kernel until someone wrote to the pipe."""
    import os
    import threading

    agent, cache, path = _long_agent(3), NotebookText(), tmp_path / "auto.ipynb"
    _write(cache, _text(agent, cache), path)
    path.unlink()
    os.mkfifo(path)
    agent.context.append(Message("user", "more"))
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(_text(agent, cache)), daemon=True)
    worker.start()
    worker.join(10)
    blocked = worker.is_alive()
    if blocked:  # unblock it so the test process can end
        with open(path, "wb"):
            pass
        worker.join(5)
    assert not blocked and done and done[0] == _reference(agent)


def test_a_file_replaced_before_it_was_stamped_is_not_read_back(tmp_path):
    """Another program replaces the file between the save's rename and ``written``: its size
    is not the text's, so its bytes are never taken for the spans of ours."""
    from ipyagent._util.atomic import write_atomic

    agent, cache, path = _long_agent(20), NotebookText(), tmp_path / "auto.ipynb"
    ours = _text(agent, cache)
    write_atomic(path, ours)
    write_atomic(path, ours.replace("page", "PAGE") + " " * 100)  # theirs, just after ours
    cache.written(path)
    agent.context.append(Message("user", "more"))
    assert _text(agent, cache) == _reference(agent)
