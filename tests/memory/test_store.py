"""The SQLite memory store: found again, merged, evicted, shared, survives damage."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ipyagent.memory.store import (
    SCHEMA_VERSION,
    MemoryFileError,
    MemoryStore,
    fts5_available,
    similarity,
    terms,
)

pytestmark = pytest.mark.skipif(not fts5_available(), reason="this SQLite has no FTS5")


def store(tmp_path: Path, **kw) -> MemoryStore:
    return MemoryStore(tmp_path / "memory.sqlite", **kw)


def test_terms_are_words_without_stop_words_and_endings() -> None:
    assert terms("The sales files use ';' as delimiters") == ["sale", "file", "delimiter"]
    assert similarity(["a", "b"], ["a", "b"]) == 1.0


def test_a_fact_is_found_for_a_related_query_and_not_an_unrelated_one(tmp_path: Path) -> None:
    st = store(tmp_path)
    fact = st.add("the sales data is in s3://acme/sales/2026/ and uses ; as delimiter").entry
    st.add("the user prefers seaborn over matplotlib for plots")
    hits = st.search("load the sales data and total it", floor=0.1)
    assert [h.id for h in hits] == [fact.id]
    assert 0 < hits[0].relevance <= 1
    assert st.search("compute 2**100", floor=0.1) == []


def test_wal_and_schema_version(tmp_path: Path) -> None:
    st = store(tmp_path)
    st.add("a note")
    conn = sqlite3.connect(st.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_newer_schema_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(MemoryFileError, match="newer ipyagent"):
        MemoryStore(path).add("x y")
    assert path.exists()


def test_a_restated_fact_updates_the_old_note(tmp_path: Path) -> None:
    st = store(tmp_path)
    first = st.add("The sales data uses ; as delimiter").entry
    st.mark_used([first.id])
    again = st.add("the sales data uses ';' as the delimiter.")
    assert again.merged and again.entry.id == first.id
    assert len(st) == 1
    kept = st.get(first.id)
    assert kept is not None and kept.text == "the sales data uses ';' as the delimiter."
    assert kept.uses == 1  # the history of the old note stays with it


def test_a_related_but_different_fact_is_kept_and_pointed_out(tmp_path: Path) -> None:
    st = store(tmp_path)
    old = st.add("the sales data lives in s3 bucket acme").entry
    new = st.add("the sales data lives in gcs bucket acme-eu")
    assert not new.merged and len(st) == 2
    assert [e.id for e in new.similar] == [old.id]


def test_eviction_keeps_the_useful_and_recent(tmp_path: Path) -> None:
    st = store(tmp_path, max_entries=3)
    now = time.time()
    useful = st.add("useful alpha fact", source="run", now=now - 10 * 86400).entry
    st.mark_used([useful.id], now=now - 9 * 86400)
    st.add("stale beta fact", source="run", now=now - 8 * 86400)
    st.add("fresh gamma fact", source="run", now=now - 100)
    added = st.add("newest delta fact", source="run", now=now)
    assert added.evicted == 1
    assert sorted(e.text for e in st.all()) == ["fresh gamma fact", "newest delta fact",
                                                "useful alpha fact"]
    assert st.search("beta") == []  # the index forgot it too


def test_forget_and_clear(tmp_path: Path) -> None:
    st = store(tmp_path)
    a = st.add("one fact here").entry
    st.add("another fact there")
    assert st.forget(a.id) and not st.forget(a.id)
    assert st.search("one") == []
    assert st.clear() == 1 and len(st) == 0


def test_reading_creates_nothing(tmp_path: Path) -> None:
    st = store(tmp_path)
    assert st.search("anything") == [] and st.all() == [] and len(st) == 0
    assert not st.path.exists()


def test_recency_and_use_weigh_in(tmp_path: Path) -> None:
    st = store(tmp_path)
    now = time.time()
    old = st.add("deploy script lives in ops folder", now=now - 200 * 86400).entry
    new = st.add("deploy notes lives in docs folder", now=now).entry
    hits = st.search("deploy folder", now=now)
    assert [h.id for h in hits] == [new.id, old.id]  # same relevance: the recent one first
    for _ in range(20):
        st.mark_used([old.id], now=now - 200 * 86400)
    hits = st.search("deploy folder", now=now)
    assert hits[0].id == old.id  # used often: worth more than its age takes away


def test_a_corrupt_file_is_moved_aside_with_one_warning(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite"
    path.write_bytes(b"this is not a database, just garbage bytes" * 100)
    said: list[str] = []
    st = MemoryStore(path, warn=said.append)
    assert st.search("garbage") == []
    assert len(said) == 1 and "moved it to" in said[0]
    aside = list(tmp_path.glob("memory.sqlite.corrupt-*"))
    assert len(aside) == 1 and b"garbage" in aside[0].read_bytes()
    st.add("life goes on")
    assert [e.text for e in st.all()] == ["life goes on"]
    assert len(said) == 1


WRITER = textwrap.dedent("""
    import sys
    from ipyagent.memory.store import MemoryStore
    st = MemoryStore(sys.argv[1])
    who = sys.argv[2]
    for i in range(40):
        st.add(f"writer {who} fact number {i} word{who}x{i}", source="run")
    print("ok")
""")


def test_two_processes_writing_at_once(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), who],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for who in ("a", "b")]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    st = MemoryStore(path)
    assert len(st) == 80
    assert len(st.search("worda", k=100)) == 0  # stems of distinct words, no cross-talk
    assert [e.text for e in st.search("wordbx7")] == ["writer b fact number 7 wordbx7"]


def test_the_counts_behind_the_score_stay_exact(tmp_path: Path) -> None:
    st = store(tmp_path, max_entries=4)
    for text in ["alpha beta gamma", "alpha beta gamma!", "beta delta", "gamma gamma epsilon",
                 "zeta eta", "theta alpha", "iota kappa"]:
        st.add(text)
    st.forget(st.all()[-1].id)
    conn = sqlite3.connect(st.path)
    expected: dict[str, int] = {}
    for (joined,) in conn.execute("SELECT terms FROM entries"):
        for t in set(joined.split()):
            expected[t] = expected.get(t, 0) + 1
    assert dict(conn.execute("SELECT term, df FROM terms_df")) == expected
    assert conn.execute("SELECT value FROM stats").fetchone()[0] == len(st) == 3
    st.clear()
    assert conn.execute("SELECT COUNT(*) FROM terms_df").fetchone()[0] == 0 and len(st) == 0


SAME = textwrap.dedent("""
    import sys
    from ipyagent.memory.store import MemoryStore
    st = MemoryStore(sys.argv[1])
    for i in range(30):
        st.add(f"shared fact {i} about the word{i} column and its topic{i}", source="run")
""")


def test_two_processes_restating_the_same_facts_keep_one_of_each(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite"
    procs = [subprocess.Popen([sys.executable, "-c", SAME, str(path)], stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert len(MemoryStore(path)) == 30  # the check and the write are one transaction
