"""%agent remember / memory / memory search / forget / memory clear in an IPython shell,
and a note kept there reaching a new process's request."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Iterator

import pytest

import ipyagent
from ipyagent.memory import BLOCK_LABEL, MemoryTable, fts5_available
from tests.helpers.inert import harmless, problems
from tests.helpers.memory import FACT, run_elsewhere, sent_text
from tests.helpers.scripted_server import ScriptedServer, reply_text

pytestmark = pytest.mark.skipif(not fts5_available(), reason="this SQLite has no FTS5")


@pytest.fixture
def shell(ip: Any, tmp_path: Path) -> Iterator[Any]:
    """The extension loaded, memory on, both stores in ``tmp_path``."""
    with redirect_stdout(io.StringIO()):
        ip.run_line_magic("load_ext", "ipyagent")
    agent = ipyagent.current()
    agent.autosave = ""
    agent.python_tool = False
    agent.memory_path = str(tmp_path / "project.sqlite")
    agent.memory_global_path = str(tmp_path / "global.sqlite")
    agent.memory = "on"
    yield ip
    ip.run_line_magic("unload_ext", "ipyagent")
    ip.config.pop("Agent", None)


def magic(ip: Any, line: str) -> tuple[str, str, Any]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        result = ip.run_cell(f"%agent {line}")
    return out.getvalue(), err.getvalue(), result


def test_remember_list_search_forget_clear(shell: Any) -> None:
    out, _, _ = magic(shell, f"remember {FACT}")
    assert out.strip() == "ipyagent: remembered as note #1"
    out, _, _ = magic(shell, "remember --global I prefer polars to pandas")
    assert out.strip() == "ipyagent: remembered as note #g1 (global)"
    out, _, _ = magic(shell, "remember The sales data is in s3://acme/sales/2026/ and uses ';' as the delimiter")
    assert out.strip() == "ipyagent: updated note #1"
    _, _, result = magic(shell, "memory")
    table = result.result
    assert isinstance(table, MemoryTable) and {e.label for e in table} == {"1", "g1"}
    _, _, result = magic(shell, "memory search delimiter")
    assert [e.label for e in result.result] == ["1"]
    out, _, _ = magic(shell, "forget g1")
    assert out.startswith("ipyagent: forgot #g1: I prefer polars")
    _, err, result = magic(shell, "forget 99")
    assert "no note 99" in err and result.error_in_exec is not None
    out, _, _ = magic(shell, "memory clear")
    assert out.strip() == "ipyagent: deleted 1 note (project)"


def test_a_similar_note_is_pointed_out(shell: Any) -> None:
    magic(shell, "remember the sales data lives in the s3 bucket acme")
    out, _, _ = magic(shell, "remember the sales data lives in the gcs bucket acme-eu")
    assert "similar to #1" in out and "%agent forget 1" in out


def test_memory_off_says_how_to_turn_it_on(shell: Any) -> None:
    ipyagent.current().memory = "off"
    for line in ("memory", f"remember {FACT}", "memory search x"):
        out, _, _ = magic(shell, line)
        assert "Agent.memory = 'on'" in out
    ipyagent.current().memory = "on"
    assert ipyagent.current().memories.entries() == []


def test_a_secret_is_refused_in_one_line(shell: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-magic-0123456789abcdef")
    _, err, _ = magic(shell, "remember my key is sk-magic-0123456789abcdef")
    assert "holds the value of $OPENAI_API_KEY" in err and "Traceback" not in err
    assert "sk-magic" not in err
    assert ipyagent.current().memories.entries() == []


def test_the_table_is_escaped_rich_and_plain(shell: Any) -> None:
    magic(shell, "remember <img src=x onerror=alert(1)> and \x1b[2J clear screen data")
    _, _, result = magic(shell, "memory")
    assert problems(result.result._repr_html_()) == []
    assert harmless(repr(result.result))


def test_subcommand_words_inside_a_task_stay_a_task(shell: Any) -> None:
    m = ipyagent.frontends.magics._MAGICS
    assert m.parse("memory usage of the dataframe", None).action == "run"
    assert m.parse("forget about it", None).action == "run"
    assert m.parse("-- remember to plot", None).action == "run"


def test_a_note_kept_in_this_kernel_reaches_a_new_process(shell: Any, tmp_path: Path) -> None:
    magic(shell, f"remember {FACT}")
    with ScriptedServer(fallback=lambda body: reply_text("ok")) as srv:
        run_elsewhere(srv, tmp_path, "load the sales data and total it", "tuesday")
        run_elsewhere(srv, tmp_path, "what is the capital of France", "other")
        related, unrelated = srv.bodies
    assert FACT in sent_text(related) and BLOCK_LABEL in sent_text(related)
    assert FACT not in sent_text(unrelated)


def test_a_run_says_which_notes_it_was_given(shell: Any) -> None:
    magic(shell, f"remember {FACT}")
    out, err, _ = magic(shell, "load the sales data and total it")
    assert "memory: 1 note from earlier sessions (#1) — may be outdated" in out + err
    out, err, _ = magic(shell, "and the sales data again")  # this conversation has it already
    assert "memory: 1 note" not in out + err


def test_the_notebook_cell_shows_the_notes_collapsed_and_inert(ip: Any, tmp_path: Path) -> None:
    import asyncio

    from IPython.core.displaypub import CapturingDisplayPublisher

    from ipyagent import Agent
    from ipyagent.frontends.notebook import NotebookDisplay
    from tests.helpers.inert import ATTACKS, bundle_problems
    from tests.helpers.memory import settings

    saved = ip.display_pub
    ip.display_pub = CapturingDisplayPublisher()
    try:
        with Agent(model="demo", **settings(tmp_path)) as agent:
            agent.remember("sales data notes>>> " + " ".join(ATTACKS))

            async def main() -> None:
                await agent.arun("total the sales data", on_event=NotebookDisplay(interval=0.01))
                await asyncio.sleep(0.05)

            asyncio.run(main())
        published = list(ip.display_pub.outputs)
    finally:
        ip.display_pub = saved
    shown = [o["data"] for o in published if "ipyagent-memory" in o["data"].get("text/html", "")]
    assert len(shown) == 1 and shown[0]["text/html"].startswith("<details")
    assert "<summary>memory: 1 note from earlier sessions (#1)" in shown[0]["text/html"]
    assert [bundle_problems(o["data"]) for o in published if bundle_problems(o["data"])] == []


def test_a_confirmed_newer_fact_supersedes_the_old_note(shell: Any) -> None:
    magic(shell, "remember the sales data lives in the s3 bucket acme")
    out, _, _ = magic(shell, "remember --replace 1 the sales data moved to the gcs bucket acme-eu")
    assert out.strip() == "ipyagent: note #1 now says the newer fact"
    (note,) = ipyagent.current().memories.entries()
    assert note.text == "the sales data moved to the gcs bucket acme-eu"
    assert ipyagent.current().memories.search("s3") == []  # the index forgot the old words
    assert [e.label for e in ipyagent.current().memories.search("gcs bucket")] == ["1"]
    _, err, _ = magic(shell, "remember --replace 7 anything")
    assert "no note 7" in err
    _, err, _ = magic(shell, "remember --replace nope anything")
    assert "the note's id, then its new text" in err
