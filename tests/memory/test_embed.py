"""The embedding retriever against a real 127.0.0.1 /embeddings endpoint: found by meaning
where words differ, vectors kept per note, and a failing endpoint falls back in one line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from ipyagent import Agent
from ipyagent.context.events import MemoryRecalled, Notice
from ipyagent.memory import MemoryStore, fts5_available
from tests.helpers.memory import sent_text, settings
from tests.helpers.scripted_server import ScriptedServer, http_error, json_reply, reply_text

pytestmark = pytest.mark.skipif(not fts5_available(), reason="this SQLite has no FTS5")

# A toy embedding: each word votes for a concept, so "chart" and "plots" are close.
CONCEPTS = {"visual": {"plot", "plots", "chart", "charts", "seaborn", "matplotlib", "graph"},
            "money": {"revenue", "euros", "dollars", "price", "prices", "budget"},
            "place": {"map", "locations", "coordinates", "geo"}}
NOTE = "the user prefers seaborn over matplotlib for plots"


def vector(text: str) -> list[float]:
    words = re.findall(r"\w+", text.lower())
    return [float(sum(w in members for w in words)) + 0.01 for members in CONCEPTS.values()]


def server_reply(body: Any, fail_embeddings: bool = False) -> Any:
    if "input" in body:  # POST /v1/embeddings
        if fail_embeddings:
            return http_error(500, {"error": {"message": "no embedding model loaded"}})
        return json_reply({"data": [{"index": i, "embedding": vector(t)}
                                    for i, t in enumerate(body["input"])]})
    return reply_text("ok")


def test_a_note_is_found_by_meaning(tmp_path: Path) -> None:
    with ScriptedServer(fallback=server_reply) as srv:
        kw = settings(tmp_path, memory_retriever="embedding", memory_embedding_model="toy-embed")
        with Agent(model="scripted", base_url=srv.base_url, **kw) as agent:
            agent.remember(NOTE)
            agent.remember("revenue is in thousands of euros")
            events: list[Any] = []
            agent.run("make a chart of market share", on_event=events.append)
            assert any(isinstance(e, MemoryRecalled) for e in events)
        embeds = [b for b in srv.bodies if "input" in b]
        chats = [b for b in srv.bodies if "messages" in b]
        assert embeds[0] == {"model": "toy-embed", "input": [NOTE, "revenue is in thousands of euros"]}
        assert embeds[1]["input"] == ["make a chart of market share"]
        assert NOTE in sent_text(chats[0]) and "euros" not in sent_text(chats[0])
        # The lexical retriever shares no word with the task: it finds nothing.
        with Agent(model="scripted", base_url=srv.base_url, **settings(tmp_path)) as lexical:
            assert lexical.memories.search("make a chart of market share") == []


def test_vectors_are_kept_and_dropped_with_their_notes(tmp_path: Path) -> None:
    st = MemoryStore(tmp_path / "m.sqlite")
    a = st.add("alpha plots").entry
    b = st.add("beta revenue").entry
    assert [i for i, _ in st.unembedded("toy")] == [a.id, b.id]
    st.put_vectors("toy", [(a.id, vector("alpha plots")), (b.id, vector("beta revenue"))])
    assert st.unembedded("toy") == [] and st.unembedded("other") != []
    assert [e.id for e in st.vector_search("toy", vector("a chart"), k=1)] == [a.id]
    st.add("alpha plots!")  # restated: the note's text changed, so must its vector
    assert [i for i, _ in st.unembedded("toy")] == [a.id]
    st.forget(b.id)
    assert [e.id for e in st.vector_search("toy", vector("revenue"), k=5, floor=0.9)] == []


def test_a_failing_endpoint_falls_back_to_lexical_in_one_line(tmp_path: Path) -> None:
    with ScriptedServer(fallback=lambda body: server_reply(body, fail_embeddings=True)) as srv:
        kw = settings(tmp_path, memory_retriever="embedding", memory_embedding_model="toy-embed",
                      max_retries=0)
        with Agent(model="scripted", base_url=srv.base_url, **kw) as agent:
            agent.remember("the sales data uses ; as delimiter")
            events: list[Any] = []
            agent.run("load the sales data", on_event=events.append)
            agent.run("and the sales data again", on_event=events.append)
    warned = [e.message for e in events if isinstance(e, Notice) and e.level == "warning"]
    assert len(warned) == 1 and "embedding retriever failed" in warned[0]
    assert "lexical" in warned[0]
    assert any(isinstance(e, MemoryRecalled) for e in events)  # found lexically instead


def test_no_model_named_is_one_line_too(tmp_path: Path) -> None:
    with Agent(model="demo", **settings(tmp_path, memory_retriever="embedding")) as agent:
        agent.remember("the sales data uses ; as delimiter")
        events: list[Any] = []
        agent.run("load the sales data", on_event=events.append)
    warned = [e.message for e in events if isinstance(e, Notice) and e.level == "warning"]
    assert len(warned) == 1 and "memory_embedding_model" in warned[0]
