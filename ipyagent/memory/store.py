"""``MemoryStore``: one SQLite file of short notes, found again by what they say.

One table of entries and an FTS5 index over *our own* normalised terms (lower-case words,
plural/-ing/-ed endings cut, stop-words out), so that Python and SQLite agree on what a
term is and the relevance score can be computed without SQLite's BM25 clamping: FTS5's
``bm25()`` gives every term of a one-entry store an IDF of ~0, which would make a
relevance floor meaningless for the first notes a user keeps. So FTS5 finds and orders
the candidates (``bm25``, the 50 best), and the score is computed here:

    relevance = ½·(share of the query's IDF mass the note covers)
              + ½·(share of the note's IDF mass the query covers)          (0..1)
    score     = relevance × recency (1 → 0.75 with a 30-day half-life)
                          × use (1 + 0.05 per retrieval, up to ×2)

IDF is Lucene's ``ln(1 + (N − n + ½)/(n + ½))``, never negative, read from the
``fts5vocab`` table. Notes below ``floor`` relevance are not returned.

Hygiene: a note whose terms are ≥ 80 % the same as an existing one's (Jaccard) *updates*
that one (the newer wording wins, its use count is kept) instead of adding a second;
past ``max_entries`` the least valuable go (oldest last use first; each use counts as a
week younger, a note the user gave as a month younger).

Provenance: a file this user's ipyagent did not make (it came with the folder) is not read
or written until the person agrees (``made``: a stamp only this user's key verifies;
``MemoryStore.trust`` stamps it). A SQLite file that holds tables but no schema version is
someone else's and is left alone.

Robustness: WAL journal (readers never wait for a writer), ``BEGIN IMMEDIATE`` around
each write with a 30 s busy timeout (two kernels writing at once queue, neither fails),
``PRAGMA user_version`` as the schema version, and a damaged file is moved aside
(``memory.sqlite.corrupt-<time>``) with one warning and a fresh one started.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from .._util.sqlite import inode, is_corrupt, set_aside_if_unchanged
from .made import NOT_MADE_HERE, made_here, stamp

__all__ = ["Entry", "MemoryStore", "MemoryFileError", "NotMadeHere", "SCHEMA_VERSION", "terms", "similarity"]

SCHEMA_VERSION = 1
CANDIDATES = 50  # FTS5 rows re-scored per query
POSTINGS = 1000  # documents' worth of the rarest query terms that bring candidates
MERGE_AT = 0.8  # Jaccard of terms at which a new note updates an old one
SIMILAR_AT = 0.5  # ... and at which it is only pointed out ("similar to #12")
HALF_LIFE_DAYS = 30.0
DAY = 86400.0

_STOP = frozenset("""
a about above after again all also am an and any are as at be been before being below
between both but by can could did do does doing done down during each few for from
further had has have having he her here hers him his how i if in into is it its itself
just me more most my no nor not now of off on once only or other our ours out over own
please same she should so some such than that the their theirs them then there these
they this those through to too under until up us very was we were what when where which
while who whom why will with would you your yours use using used let lets make sure
""".split())
_WORD = re.compile(r"[^\W_]+", re.UNICODE)

T = TypeVar("T")


class MemoryFileError(Exception):
    """The memory file cannot be used (a newer schema, an unwritable place)."""


class NotMadeHere(MemoryFileError):
    """The memory file was not made by ipyagent for this user: not read until trusted."""


def _stem(word: str) -> str:
    """A light, deterministic suffix cut: enough for plurals and verb forms."""
    if len(word) > 5 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 5 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 4 and word.endswith("ed") and not word.endswith("eed"):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def terms(text: str) -> list[str]:
    """The index terms of ``text``: lower-case words, stemmed; no stop-words, no 1-letter
    words, no numbers under 4 digits (a year, a port or an id stays)."""
    out = []
    for word in _WORD.findall(text.lower()):
        if len(word) < 2 or word in _STOP or (word.isdigit() and len(word) < 4):
            continue  # short numbers (2**100, "3 rows") match too much to mean anything
        out.append(_stem(word))
    return out


def similarity(a: Iterable[str], b: Iterable[str]) -> float:
    """Jaccard similarity of two term sets (1.0: the same terms)."""
    sa, sb = set(a), set(b)
    if not sa or not sb:
        return 1.0 if sa == sb else 0.0
    return len(sa & sb) / len(sa | sb)


@dataclass
class Entry:
    """One remembered note."""

    id: int
    text: str
    source: str = "user"  # user | run | model (the remember tool)
    kind: str = "fact"  # fact | outcome
    created: float = 0.0
    updated: float = 0.0
    uses: int = 0
    last_used: float | None = None
    scope: str = "project"  # project | global (which store it came from)
    score: float = 0.0  # set by search
    relevance: float = 0.0  # set by search

    @property
    def label(self) -> str:
        """``12`` in the project store, ``g12`` in the global one (what ``forget`` takes)."""
        return f"g{self.id}" if self.scope == "global" else str(self.id)

    def age(self, now: float | None = None) -> str:
        """``3 min``, ``2 h``, ``5 d`` since it was last stated."""
        seconds = max(0.0, (now or time.time()) - self.updated)
        if seconds < 3600:
            return f"{int(seconds // 60)} min"
        if seconds < DAY:
            return f"{int(seconds // 3600)} h"
        return f"{int(seconds // DAY)} d"


@dataclass
class Added:
    """What ``MemoryStore.add`` did: the entry, whether it merged, what it resembles."""

    entry: Entry
    merged: bool = False
    similar: list[Entry] = field(default_factory=list)
    evicted: int = 0


# ``terms`` is space-separated words of letters and digits only (``terms()``): as a JSON
# array it is '["' || replace(terms, ' ', '","') || '"]', which lets triggers keep the
# per-term document counts (``terms_df``, the IDF) exact under every insert and delete.
_AS_JSON = "'[\"' || replace({}.terms, ' ', '\",\"') || '\"]'"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    text TEXT NOT NULL,
    terms TEXT NOT NULL,
    source TEXT NOT NULL,
    kind TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    uses INTEGER NOT NULL DEFAULT 0,
    last_used REAL
);;
CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5(
    terms, content='entries', content_rowid='id', tokenize='unicode61 remove_diacritics 0');;
CREATE TABLE IF NOT EXISTS terms_df (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID;;
CREATE TABLE IF NOT EXISTS stats (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;;
INSERT OR IGNORE INTO stats VALUES ('entries', 0);;
CREATE TABLE IF NOT EXISTS vectors (id INTEGER NOT NULL, model TEXT NOT NULL, vec BLOB NOT NULL,
    PRIMARY KEY (id, model)) WITHOUT ROWID;;
CREATE TRIGGER IF NOT EXISTS entries_ai AFTER INSERT ON entries BEGIN
    INSERT INTO entries_fts(rowid, terms) VALUES (new.id, new.terms);
    INSERT INTO terms_df(term, df) SELECT DISTINCT value, 1 FROM json_each({new})
        WHERE value != '' ON CONFLICT(term) DO UPDATE SET df = df + 1;
    UPDATE stats SET value = value + 1 WHERE key = 'entries';
END;;
CREATE TRIGGER IF NOT EXISTS entries_ad AFTER DELETE ON entries BEGIN
    INSERT INTO entries_fts(entries_fts, rowid, terms) VALUES ('delete', old.id, old.terms);
    UPDATE terms_df SET df = df - 1 WHERE term IN (SELECT value FROM json_each({old}));
    DELETE FROM terms_df WHERE df <= 0 AND term IN (SELECT value FROM json_each({old}));
    UPDATE stats SET value = value - 1 WHERE key = 'entries';
    DELETE FROM vectors WHERE id = old.id;
END;;
CREATE TRIGGER IF NOT EXISTS entries_au AFTER UPDATE OF terms ON entries BEGIN
    INSERT INTO entries_fts(entries_fts, rowid, terms) VALUES ('delete', old.id, old.terms);
    INSERT INTO entries_fts(rowid, terms) VALUES (new.id, new.terms);
    DELETE FROM vectors WHERE id = old.id;
    UPDATE terms_df SET df = df - 1 WHERE term IN (SELECT value FROM json_each({old}));
    DELETE FROM terms_df WHERE df <= 0 AND term IN (SELECT value FROM json_each({old}));
    INSERT INTO terms_df(term, df) SELECT DISTINCT value, 1 FROM json_each({new})
        WHERE value != '' ON CONFLICT(term) DO UPDATE SET df = df + 1;
END
""".format(new=_AS_JSON.format("new"), old=_AS_JSON.format("old"))
_COLUMNS = "id, text, source, kind, created, updated, uses, last_used"


def _df(conn: sqlite3.Connection, words: list[str]) -> dict[str, int]:
    """Document frequency of each of ``words`` that occurs (``terms_df``)."""
    out: dict[str, int] = {}
    for i in range(0, len(words), 500):  # SQLite's host-parameter limit
        chunk = words[i:i + 500]
        out.update(conn.execute(f"SELECT term, df FROM terms_df WHERE term IN "
                                f"({','.join('?' * len(chunk))})", chunk).fetchall())
    return out


def _rows(conn: sqlite3.Connection, words: list[str], limit: int) -> list[tuple]:  # type: ignore[type-arg]
    """Entries holding any of ``words``, best BM25 first, with their terms."""
    return conn.execute(
        f"SELECT {', '.join('e.' + c.strip() for c in _COLUMNS.split(','))}, e.terms "
        "FROM entries_fts JOIN entries e ON e.id = entries_fts.rowid "
        "WHERE entries_fts MATCH ? ORDER BY bm25(entries_fts) LIMIT ?",
        (" OR ".join(f'"{w}"' for w in words), limit)).fetchall()


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else str(value)


def _real(value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def _int(value: object) -> int:
    return int(_real(value))


def fts5_available() -> bool:
    """True when this Python's SQLite has FTS5 compiled in."""
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        return True
    except sqlite3.OperationalError:
        return False


class MemoryStore:
    """One SQLite memory file (``path``), safe across threads and processes."""

    def __init__(self, path: str | os.PathLike[str], *, max_entries: int = 1000,
                 scope: str = "project", warn: Callable[[str], None] | None = None) -> None:
        self.path = Path(path).expanduser().absolute()
        self.max_entries = max_entries
        self.scope = scope
        self.notices: list[str] = []  # one line each, for the user (a file moved aside)
        self._warn = warn
        self._lock = threading.Lock()
        self._ready = False

    def __repr__(self) -> str:
        return f"<MemoryStore {self.scope} {self.path}>"

    # -- connections -----------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        # Short-lived connections, one per operation: nothing stays open while idle, and
        # SQLite's own locking arbitrates between threads and processes.
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            if not self._ready:
                with self._lock:
                    self._prepare(conn)
                    self._ready = True
            if not made_here(conn):  # asked every time: the file may have been replaced
                raise self._not_made_here()
        except BaseException:
            conn.close()
            raise
        return conn

    def _not_made_here(self) -> NotMadeHere:
        flag = " --global" if self.scope == "global" else ""
        return NotMadeHere(NOT_MADE_HERE.format(path=self.path, flag=flag))

    def _prepare(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            conn.close()
            raise MemoryFileError(
                f"{self.path} was written by a newer ipyagent (memory schema {version}, this "
                f"one reads {SCHEMA_VERSION}); it is left untouched and not used")
        if version == SCHEMA_VERSION:
            return
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raise self._not_made_here()  # someone's database without our version: not ours
        # WAL: readers never wait for a writer. Where it cannot be had (a filesystem
        # without shared memory) SQLite keeps its default journal, which still works.
        # Switching the journal is refused at once ("database is locked", no busy wait)
        # while another process is making the schema: wait for it, as its timeout would.
        deadline = time.monotonic() + 30
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] == 0:  # not made meanwhile
                for statement in _SCHEMA.split(";;"):  # executescript would commit
                    conn.execute(statement)
                stamp(conn)  # made here: in the same transaction, so no reader sees it unstamped
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _do(self, op: Callable[[sqlite3.Connection], T], write: bool = False) -> T:
        """``op`` on a fresh connection (in one ``BEGIN IMMEDIATE`` transaction when
        ``write``); a corrupt file is set aside and ``op`` runs again on a new one."""
        if write:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        for attempt in (1, 2):
            seen = inode(self.path)
            try:
                conn = self._connect()
                try:
                    if not write:
                        return op(conn)
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        out = op(conn)
                    except BaseException:
                        conn.execute("ROLLBACK")
                        raise
                    conn.execute("COMMIT")
                    return out
                finally:
                    conn.close()
            except sqlite3.DatabaseError as exc:
                if attempt == 2 or not is_corrupt(exc):
                    raise
                self._set_aside(seen, exc)
        raise AssertionError("unreachable")  # pragma: no cover

    def _set_aside(self, seen: int | None, exc: sqlite3.DatabaseError) -> None:
        """Move the damaged file (and its WAL) to ``<name>.corrupt-<time>``, once."""
        with self._lock:
            self._ready = False
            moved = set_aside_if_unchanged(self.path, seen)
            if moved is None:
                return
        said = (f"the memory file {self.path} was unreadable ({exc}): moved it to "
                f"{moved} and started a new one")
        self.notices.append(said)
        if self._warn is not None:
            self._warn(said)
        else:
            warnings.warn(said, RuntimeWarning, stacklevel=4)

    def exists(self) -> bool:
        """True when the file is there (nothing is created by reading)."""
        return self.path.exists()

    def trust(self) -> int:
        """Stamp this file as made here, once the person agreed to read its notes; how many
        notes it holds (0 when there is no file)."""
        if not self.exists():
            return 0
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version != SCHEMA_VERSION:
                raise MemoryFileError(f"{self.path} is not an ipyagent memory file (schema {version})")
            conn.execute("BEGIN IMMEDIATE")
            stamp(conn)
            conn.execute("COMMIT")
            count = int(conn.execute("SELECT count(*) FROM entries").fetchone()[0])
        finally:
            conn.close()
        self._ready = False
        return count

    # -- writing ---------------------------------------------------------------------
    def add(self, text: str, *, source: str = "user", kind: str = "fact",
            now: float | None = None) -> Added:
        """Store ``text``; a near-duplicate of an existing note updates that note instead."""
        text = text.strip()
        if not text:
            raise ValueError("nothing to remember: the text is empty")
        own = terms(text)
        joined = " ".join(own)
        stamp = time.time() if now is None else now

        def op(conn: sqlite3.Connection) -> Added:
            similar = self._neighbours(conn, own)
            best = max(similar, key=lambda pair: pair[1], default=None)
            if best is not None and best[1] >= MERGE_AT:
                old = best[0]
                conn.execute("UPDATE entries SET text = ?, terms = ?, updated = ?, source = ?, "
                             "kind = ? WHERE id = ?", (text, joined, stamp, source, kind, old.id))
                entry = Entry(old.id, text, source, kind, old.created, stamp, old.uses,
                              old.last_used, self.scope)
                return Added(entry, merged=True)
            cur = conn.execute("INSERT INTO entries (text, terms, source, kind, created, updated) "
                               "VALUES (?, ?, ?, ?, ?, ?)", (text, joined, source, kind, stamp, stamp))
            entry = Entry(int(cur.lastrowid or 0), text, source, kind, stamp, stamp, 0, None,
                          self.scope)
            evicted = self._evict(conn)
            near = [e for e, s in sorted(similar, key=lambda p: -p[1]) if s >= SIMILAR_AT]
            return Added(entry, similar=near[:3], evicted=evicted)

        return self._do(op, write=True)

    def replace(self, entry_id: int, text: str, *, source: str = "user",
                now: float | None = None) -> Entry | None:
        """Give note ``entry_id`` new text (a newer fact the user confirmed supersedes it);
        None when there is no such note."""
        text = text.strip()
        if not text:
            raise ValueError("nothing to remember: the text is empty")
        stamp = time.time() if now is None else now
        joined = " ".join(terms(text))

        def op(conn: sqlite3.Connection) -> Entry | None:
            row = conn.execute(f"SELECT {_COLUMNS} FROM entries WHERE id = ?", (entry_id,)).fetchone()
            if row is None:
                return None
            conn.execute("UPDATE entries SET text = ?, terms = ?, updated = ?, source = ?, "
                         "kind = 'fact' WHERE id = ?", (text, joined, stamp, source, entry_id))
            old = self._entry(row)
            return Entry(old.id, text, source, "fact", old.created, stamp, old.uses,
                         old.last_used, self.scope)

        return self._do(op, write=True)

    def _neighbours(self, conn: sqlite3.Connection, own: list[str]) -> list[tuple[Entry, float]]:
        """Existing entries that may be near-duplicates of ``own``, with their Jaccard
        similarity. A note with Jaccard >= 1/2 holds at least half of ``own``'s terms, so it
        holds one of the rarest ``len - ceil(len/2) + 1``: those alone find every such note."""
        unique = list(dict.fromkeys(own))
        if not unique:
            return []
        df = _df(conn, unique)
        present = sorted((t for t in unique if df.get(t)), key=lambda t: df[t])
        if not present:
            return []
        need = len(unique) - math.ceil(len(unique) * SIMILAR_AT) + 1
        rows = _rows(conn, present[:need], 20)
        return [(self._entry(r[:8]), similarity(own, r[8].split())) for r in rows]

    def _evict(self, conn: sqlite3.Connection) -> int:
        """Delete the least valuable entries past ``max_entries``; how many went."""
        if not self.max_entries:
            return 0
        (count,) = conn.execute("SELECT value FROM stats WHERE key = 'entries'").fetchone()
        extra = count - self.max_entries
        if extra <= 0:
            return 0
        # Value = when it was last useful, a use counting a week younger, a user's note a month.
        conn.execute(
            "DELETE FROM entries WHERE id IN (SELECT id FROM entries ORDER BY "
            "COALESCE(last_used, updated) + uses * 604800.0 "
            "+ CASE source WHEN 'user' THEN 2592000.0 ELSE 0 END ASC, id ASC LIMIT ?)", (extra,))
        return extra

    def forget(self, entry_id: int) -> bool:
        """Delete one entry; False when there was none with that id."""
        if not self.exists():
            return False
        return bool(self._do(lambda conn: conn.execute(
            "DELETE FROM entries WHERE id = ?", (entry_id,)).rowcount, write=True))

    def clear(self) -> int:
        """Delete every entry; how many there were."""
        if not self.exists():
            return 0
        return int(self._do(lambda conn: conn.execute("DELETE FROM entries").rowcount, write=True))

    def mark_used(self, ids: Iterable[int], now: float | None = None) -> None:
        """Count one retrieval for each of ``ids`` (use weighting, eviction)."""
        ids = list(ids)
        if not ids:
            return
        stamp = time.time() if now is None else now
        self._do(lambda conn: conn.executemany(
            "UPDATE entries SET uses = uses + 1, last_used = ? WHERE id = ?",
            [(stamp, i) for i in ids]), write=True)

    # -- reading ---------------------------------------------------------------------
    def _entry(self, row: tuple) -> Entry:  # type: ignore[type-arg]
        # SQLite keeps any type in any column: each field is made what it must be, so a
        # damaged row is text and numbers, never a crash or an object in the notes block.
        return Entry(_int(row[0]), _text(row[1]), _text(row[2]), _text(row[3]), _real(row[4]),
                     _real(row[5]), _int(row[6]), None if row[7] is None else _real(row[7]),
                     self.scope)

    def all(self) -> list[Entry]:
        """Every entry, newest first."""
        if not self.exists():
            return []
        rows = self._do(lambda conn: conn.execute(
            f"SELECT {_COLUMNS} FROM entries ORDER BY updated DESC, id DESC").fetchall())
        return [self._entry(r) for r in rows]

    def get(self, entry_id: int) -> Entry | None:
        """The entry with this id, or None."""
        if not self.exists():
            return None
        row = self._do(lambda conn: conn.execute(
            f"SELECT {_COLUMNS} FROM entries WHERE id = ?", (entry_id,)).fetchone())
        return self._entry(row) if row else None

    def __len__(self) -> int:
        if not self.exists():
            return 0
        return int(self._do(lambda conn: conn.execute(
            "SELECT value FROM stats WHERE key = 'entries'").fetchone()[0]))

    def search(self, query: str, k: int = 5, floor: float = 0.0,
               now: float | None = None) -> list[Entry]:
        """The ``k`` best entries for ``query`` with relevance >= ``floor``, best first."""
        wanted = list(dict.fromkeys(terms(query)))
        if not wanted or k <= 0 or not self.exists():
            return []
        stamp = time.time() if now is None else now

        def op(conn: sqlite3.Connection) -> tuple[int, dict[str, int], list[tuple]]:  # type: ignore[type-arg]
            df = _df(conn, wanted)
            present = sorted((t for t in wanted if df.get(t)), key=lambda t: df[t])
            if not present:
                return 0, {}, []
            # Candidates come from the rarest terms, up to POSTINGS documents' worth: a
            # common word alone would make FTS5 score half the store. Common words still
            # count in every candidate's score (below); they just bring no candidates.
            pick, postings = [present[0]], df[present[0]]
            for t in present[1:]:
                if postings + df[t] > POSTINGS:
                    break
                pick.append(t)
                postings += df[t]
            rows = _rows(conn, pick, CANDIDATES)
            (n,) = conn.execute("SELECT value FROM stats WHERE key = 'entries'").fetchone()
            extra = list({t for r in rows for t in r[8].split()} - set(df))
            if extra:
                df.update(_df(conn, extra))
            return int(n), df, rows

        n, docs, rows = self._do(op)

        def idf(term: str) -> float:
            d = docs.get(term, 0)
            return math.log(1 + (n - d + 0.5) / (d + 0.5))

        query_mass = sum(idf(t) for t in wanted) or 1.0
        found = []
        for row in rows:
            entry = self._entry(row[:8])
            own = set(row[8].split())
            hit_mass = sum(idf(t) for t in own.intersection(wanted))
            own_mass = sum(idf(t) for t in own) or 1.0
            relevance = 0.5 * hit_mass / query_mass + 0.5 * hit_mass / own_mass
            if relevance < floor:
                continue
            age_days = max(0.0, stamp - (entry.last_used or entry.updated)) / DAY
            recency = 0.75 + 0.25 * 0.5 ** (age_days / HALF_LIFE_DAYS)
            use = 1 + 0.05 * min(entry.uses, 20)
            entry.relevance = relevance
            entry.score = relevance * recency * use
            found.append(entry)
        found.sort(key=lambda e: (-e.score, -e.updated))
        return found[:k]

    # -- vectors (the embedding retriever) -----------------------------------------------
    def unembedded(self, model: str, limit: int = 10_000) -> list[tuple[int, str]]:
        """(id, text) of the notes with no vector from ``model`` yet."""
        if not self.exists():
            return []
        return self._do(lambda conn: conn.execute(
            "SELECT e.id, e.text FROM entries e LEFT JOIN vectors v ON v.id = e.id AND v.model = ? "
            "WHERE v.id IS NULL ORDER BY e.id LIMIT ?", (model, limit)).fetchall())

    def put_vectors(self, model: str, pairs: Iterable[tuple[int, list[float]]]) -> None:
        """Keep one vector per note for ``model`` (float32)."""
        import array

        rows = [(i, model, array.array("f", v).tobytes()) for i, v in pairs]
        if rows:
            self._do(lambda conn: conn.executemany(
                "INSERT OR REPLACE INTO vectors (id, model, vec) SELECT ?, ?, ? "
                "WHERE EXISTS (SELECT 1 FROM entries WHERE id = ?1)", rows), write=True)

    def vector_search(self, model: str, query: list[float], k: int = 5, floor: float = 0.0,
                      now: float | None = None) -> list[Entry]:
        """The ``k`` notes most similar to ``query`` (cosine >= ``floor``), weighted by
        recency and use as ``search`` does."""
        import array

        from .embed import cosine

        if not self.exists() or k <= 0:
            return []
        stamp = time.time() if now is None else now
        rows = self._do(lambda conn: conn.execute(
            f"SELECT {', '.join('e.' + c.strip() for c in _COLUMNS.split(','))}, v.vec FROM "
            "vectors v JOIN entries e ON e.id = v.id WHERE v.model = ?", (model,)).fetchall())
        found = []
        for row in rows:
            similar = cosine(query, array.array("f", row[8]).tolist())
            if similar < floor:
                continue
            entry = self._entry(row[:8])
            age_days = max(0.0, stamp - (entry.last_used or entry.updated)) / DAY
            entry.relevance = similar
            entry.score = similar * (0.75 + 0.25 * 0.5 ** (age_days / HALF_LIFE_DAYS)) * (
                1 + 0.05 * min(entry.uses, 20))
            found.append(entry)
        found.sort(key=lambda e: (-e.score, -e.updated))
        return found[:k]
