"""Long-term memory: retrieval and store latency beside their floors, and retrieval quality.

1. Retrieval at 100 / 10,000 / 100,000 notes (synthetic: 8–20 words each from a Zipf-like
   vocabulary of 6,000 words, so common words are common): the median ``MemoryStore.search``
   (k=5, the default floor: FTS5 candidates, IDF from ``fts5vocab``, our re-scoring) beside
   * the floor: one connection, the rarest terms' document counts and one FTS5 lookup of
     their 50 best rows — the index work ``search`` cannot avoid, without its re-scoring;
   * plain FTS5: every query term ranked by SQLite's ``bm25`` (no rare-term pruning), and
   * a naive scan: ``text LIKE '%word%' OR …`` over every row (what no index costs).
2. Store latency at 10,000 notes: the median ``MemoryStore.add`` (near-duplicate check,
   eviction check, one WAL commit) beside a bare one-row ``INSERT`` + commit in a WAL file.
3. Quality: a fixed set of 24 notes and 16 queries with the notes each should find;
   precision and recall of the top 3 above a few relevance floors, lexical; and with the
   embedding retriever where one is available (fastembed installed, or
   ``IPYAGENT_BENCH_EMBED=<model>@<base_url>`` naming an /embeddings endpoint).

Run: ``python bench/memory.py`` (about a minute; the 100k store is built once, in a temp dir).
"""

from __future__ import annotations

import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ipyagent.engine.settings import AgentSettings  # noqa: E402
from ipyagent.memory.store import POSTINGS, MemoryStore, terms  # noqa: E402

DEFAULT_FLOOR = AgentSettings.class_traits()["memory_min_relevance"].default_value

QUERIES = 60


def vocabulary(rng: random.Random, n: int = 6000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choices(letters, k=rng.randint(4, 9))))
    return sorted(words)


def build(path: Path, n: int, rng: random.Random, vocab: list[str],
          weights: list[float]) -> MemoryStore:
    """A store of ``n`` synthetic notes (bulk-inserted: the bench measures reading)."""
    st = MemoryStore(path, max_entries=0)
    st.add("seed note for the schema")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    now = time.time()
    rows = []
    for i in range(n - 1):
        text = " ".join(rng.choices(vocab, weights, k=rng.randint(8, 20)))
        rows.append((text, " ".join(terms(text)), "run", "outcome", now - i, now - i))
    conn.executemany("INSERT INTO entries (text, terms, source, kind, created, updated) "
                     "VALUES (?, ?, ?, ?, ?, ?)", rows)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return st


def median_ms(fn, args_list) -> float:  # type: ignore[no-untyped-def]
    times = []
    for args in args_list:
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def index_floor(path: Path, query: str) -> None:
    """The least any indexed search must do: one connection, the rarest terms' counts,
    one FTS5 lookup of their best 50 rows (what ``search`` does before re-scoring)."""
    conn = sqlite3.connect(path)
    wanted = list(dict.fromkeys(terms(query)))
    df = dict(conn.execute(f"SELECT term, df FROM terms_df WHERE term IN ({','.join('?' * len(wanted))})",
                           wanted).fetchall())
    present = sorted((t for t in wanted if df.get(t)), key=lambda t: df[t])
    if present:
        pick, postings = [present[0]], df[present[0]]
        for t in present[1:]:
            if postings + df[t] > POSTINGS:
                break
            pick.append(t)
            postings += df[t]
        conn.execute("SELECT rowid FROM entries_fts WHERE entries_fts MATCH ? ORDER BY "
                     "bm25(entries_fts) LIMIT 50", (" OR ".join(f'"{t}"' for t in pick),)).fetchall()
    conn.close()


def fts_all_terms(path: Path, query: str) -> None:
    """Plain FTS5: every query term, ranked by SQLite's bm25 (no pruning)."""
    conn = sqlite3.connect(path)
    match = " OR ".join(f'"{t}"' for t in dict.fromkeys(terms(query)))
    conn.execute("SELECT rowid FROM entries_fts WHERE entries_fts MATCH ? ORDER BY "
                 "bm25(entries_fts) LIMIT 5", (match,)).fetchall()
    conn.close()


def like_scan(path: Path, query: str) -> None:
    """No index: every row holding any query word (all of them, to be ranked)."""
    conn = sqlite3.connect(path)
    words = list(dict.fromkeys(terms(query)))
    where = " OR ".join("text LIKE ?" for _ in words)
    conn.execute(f"SELECT id, text FROM entries WHERE {where}", [f"%{w}%" for w in words]).fetchall()
    conn.close()


def retrieval(tmp: Path) -> None:
    rng = random.Random(0)
    vocab = vocabulary(rng)
    weights = [1 / (i + 1) ** 0.9 for i in range(len(vocab))]
    print("retrieval (median of 60 queries of 3–8 words; k=5):")
    print(f"  {'notes':>8}  {'search':>9}  {'floor':>9}  {'×floor':>6}  {'FTS5 bm25':>9}  "
          f"{'LIKE scan':>9}  {'×scan':>6}")
    for n in (100, 10_000, 100_000):
        path = tmp / f"m{n}.sqlite"
        st = build(path, n, rng, vocab, weights)
        queries = [(" ".join(rng.choices(vocab, weights, k=rng.randint(3, 8))),)
                   for _ in range(QUERIES)]
        for q in queries[:5]:  # warm the page cache: every row pays the same
            st.search(q[0])
        t_search = median_ms(lambda q, st=st: st.search(q, 5, DEFAULT_FLOOR), queries)
        t_floor = median_ms(lambda q, p=path: index_floor(p, q), queries)
        t_fts = median_ms(lambda q, p=path: fts_all_terms(p, q), queries)
        t_like = median_ms(lambda q, p=path: like_scan(p, q), queries)
        print(f"  {n:>8,}  {t_search:6.2f} ms  {t_floor:6.2f} ms  {t_search / t_floor:5.1f}×  "
              f"{t_fts:6.2f} ms  {t_like:6.2f} ms  {t_search / t_like:5.2f}×")
    store_latency(tmp, rng, vocab, weights)


def store_latency(tmp: Path, rng: random.Random, vocab: list[str], weights: list[float]) -> None:
    path = tmp / "m10000.sqlite"
    st = MemoryStore(path, max_entries=20_000)
    texts = [(" ".join(rng.choices(vocab, weights, k=rng.randint(8, 20))),) for _ in range(50)]
    t_add = median_ms(lambda t: st.add(t), texts)
    floor = tmp / "floor.sqlite"
    conn = sqlite3.connect(floor, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, text TEXT)")
    conn.close()

    def bare(text: str) -> None:
        c = sqlite3.connect(floor, isolation_level=None)
        c.execute("BEGIN IMMEDIATE")
        c.execute("INSERT INTO t (text) VALUES (?)", (text,))
        c.execute("COMMIT")
        c.close()

    t_bare = median_ms(bare, texts)
    print(f"store at 10,000 notes (median of 50): add {t_add:.2f} ms vs a bare WAL insert+commit "
          f"{t_bare:.2f} ms ({t_add / t_bare:.1f}×)")


# -- quality ----------------------------------------------------------------------------
NOTES = [
    "the sales data is in s3://acme/sales/2026/ and uses ; as delimiter",                 # 0
    "the user prefers seaborn over matplotlib for plots",                                 # 1
    "revenue figures are in thousands of euros, not dollars",                             # 2
    "the customers table joins orders on customer_id, not on email",                      # 3
    "loading orders.parquet with pandas needs pyarrow installed",                         # 4
    "the staging database is postgres on db.internal port 5433",                          # 5
    "plots for the weekly report must be saved as PNG at 150 dpi",                        # 6
    "the model training run failed: CUDA out of memory with batch size 64",               # 7
    "use batch size 16 for training on the laptop GPU",                                   # 8
    "dates in the sales files are day/month/year",                                        # 9
    "the inventory spreadsheet is inventory_2026.xlsx in the shared drive",               # 10
    "the user writes reports in British English",                                         # 11
    "timezone for all timestamps is Europe/Berlin",                                       # 12
    "the API rate limit is 100 requests per minute; back off on 429",                     # 13
    "Task: clean the survey responses. Answer: removed 312 duplicate rows.",              # 14
    "the survey data has free-text answers in the column comments",                       # 15
    "run the test suite with pytest -q before committing",                                # 16
    "the config file lives at ~/.config/acme/settings.toml",                              # 17
    "forecasts use Prophet with yearly seasonality on",                                   # 18
    "the marketing budget spreadsheet has one tab per quarter",                           # 19
    "the user dislikes pie charts; use bar charts instead",                               # 20
    "exchange rates come from the ECB daily feed",                                        # 21
    "large CSV exports should be written with gzip compression",                          # 22
    "the geo data uses EPSG:4326 coordinates",                                            # 23
]
CASES = [
    ("load the sales data and total revenue by month", {0, 2, 9}),
    ("plot revenue for the weekly report", {1, 6, 2}),
    ("join customers with their orders", {3}),
    ("read orders.parquet", {4}),
    ("connect to the staging database", {5}),
    ("train the model again", {7, 8}),
    ("what batch size should I use for training", {8, 7}),
    ("open the inventory spreadsheet", {10}),
    ("convert the timestamps to local time", {12}),
    ("call the API for every customer", {13}),
    ("look at the survey comments", {15, 14}),
    ("make a chart of market share", {20, 1}),
    ("convert prices to dollars with today's exchange rate", {21, 2}),
    ("export the cleaned table to CSV", {22}),
    ("map the store locations", {23}),
    ("compute 2**100", set()),
]


def quality(tmp: Path) -> None:
    st = MemoryStore(tmp / "quality.sqlite")
    ids = [st.add(text).entry.id for text in NOTES]
    print(f"quality ({len(NOTES)} notes, {len(CASES)} queries with the notes each should find; "
          "top 3 above the floor; lexical):")
    for floor in (0.1, 0.15, 0.2, 0.25):
        hit = returned = wanted = 0
        for query, expected in CASES:
            found = {ids.index(e.id) for e in st.search(query, k=3, floor=floor)}
            hit += len(found & expected)
            returned += len(found)
            wanted += len(expected)
        mark = "  (Agent.memory_min_relevance default)" if floor == DEFAULT_FLOOR else ""
        print(f"  floor {floor:.2f}: precision {hit / max(returned, 1):.2f}, recall "
              f"{hit / max(wanted, 1):.2f} ({hit} right of {returned} returned, {wanted} wanted){mark}")


def quality_embedding(tmp: Path) -> None:
    """The same set with the embedding retriever, where one is available: fastembed
    installed (``IPYAGENT_BENCH_EMBED=fastembed:<model>``), or an endpoint
    (``IPYAGENT_BENCH_EMBED=<model>@<base_url>``)."""
    import os

    from ipyagent.memory.embed import EmbeddingError, embed

    spec = os.environ.get("IPYAGENT_BENCH_EMBED", "")
    if not spec:
        try:
            import fastembed  # type: ignore[import-not-found]  # noqa: F401

            spec = "fastembed:BAAI/bge-small-en-v1.5"
        except ImportError:
            print("  embedding: not measured (no fastembed here; set IPYAGENT_BENCH_EMBED="
                  "fastembed:<model> or <model>@<base_url> to compare)")
            return
    model, _, url = spec.partition("@")
    settings = AgentSettings(memory_embedding_model=model, base_url=url)
    st = MemoryStore(tmp / "quality-embed.sqlite")
    ids = [st.add(text).entry.id for text in NOTES]
    try:
        st.put_vectors(model, zip(ids, embed(settings, NOTES)))
        queries = embed(settings, [q for q, _ in CASES])
    except EmbeddingError as exc:
        print(f"  embedding: not measured ({exc})")
        return
    for floor in (0.3, 0.5, 0.7):
        hit = returned = wanted = 0
        for (_query, expected), vec in zip(CASES, queries):
            found = {ids.index(e.id) for e in st.vector_search(model, vec, k=3, floor=floor)}
            hit += len(found & expected)
            returned += len(found)
            wanted += len(expected)
        print(f"  embedding {model}, cosine floor {floor:.1f}: precision "
              f"{hit / max(returned, 1):.2f}, recall {hit / max(wanted, 1):.2f}")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ipyagent-bench-memory-") as tmp:
        retrieval(Path(tmp))
        quality(Path(tmp))
        quality_embedding(Path(tmp))


if __name__ == "__main__":
    main()
