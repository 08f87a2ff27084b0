"""The cached transcript writer: the bytes nbformat writes, items rendered once."""

from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest

from ipyagent import Agent, Message, ToolCall, ToolResult
from ipyagent._text import repair_surrogates
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
