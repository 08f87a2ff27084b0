"""The embedding retriever's one function: texts -> vectors (``Agent.memory_retriever``).

``Agent.memory_embedding_model`` says where vectors come from: ``fastembed:<model>`` runs
fastembed in this process (``pip install fastembed``; it downloads the model once), any
other name is sent to the agent's OpenAI-compatible endpoint as ``POST {base_url}/embeddings``
(Ollama, llama.cpp, vLLM and OpenAI all serve it), with the key read from the
environment at the request, as for the model. Vectors are kept beside the notes (one per
note and model) and compared by cosine similarity; a failure is one line, and that search
falls back to the lexical retriever.
"""

from __future__ import annotations

import math
import os
from typing import Any, Sequence

from .view import MemorySettings

__all__ = ["EmbeddingError", "embed", "cosine"]

BATCH = 64


class EmbeddingError(RuntimeError):
    """Vectors could not be had (no model configured, no fastembed, the endpoint failed)."""


def embed(settings: MemorySettings, texts: Sequence[str]) -> list[list[float]]:
    """One vector per text, from ``settings.memory_embedding_model``."""
    name = settings.memory_embedding_model.strip()
    if not name:
        raise EmbeddingError("Agent.memory_retriever = 'embedding' needs Agent.memory_embedding_model "
                             "(an /embeddings model of the endpoint, or fastembed:<model>)")
    if not texts:
        return []
    if name.startswith("fastembed:"):
        return _fastembed(name.split(":", 1)[1], texts)
    return _endpoint(settings, name, texts)


_FASTEMBED: dict[str, Any] = {}


def _fastembed(model: str, texts: Sequence[str]) -> list[list[float]]:
    try:
        from fastembed import TextEmbedding  # type: ignore[import-not-found]
    except ImportError:
        raise EmbeddingError("fastembed is not installed (pip install fastembed)") from None
    if model not in _FASTEMBED:
        try:
            _FASTEMBED[model] = TextEmbedding(model_name=model)
        except Exception as exc:  # a download or a model name fastembed does not know
            raise EmbeddingError(f"fastembed could not load {model!r}: {exc}") from None
    return [[float(x) for x in v] for v in _FASTEMBED[model].embed(list(texts))]


def _endpoint(settings: MemorySettings, model: str, texts: Sequence[str]) -> list[list[float]]:
    import httpx

    from ..models.retry import safe_url

    endpoint = settings.endpoint
    url = endpoint.base_url.rstrip("/") + "/embeddings"
    headers = {}
    key = os.environ.get(endpoint.key_env) if endpoint.key_env else None
    if key:
        headers["Authorization"] = f"Bearer {key}"
    out: list[list[float]] = []
    with httpx.Client(timeout=settings.timeout) as client:
        for i in range(0, len(texts), BATCH):
            batch = list(texts[i:i + BATCH])
            try:
                response = client.post(url, json={"model": model, "input": batch}, headers=headers)
                response.raise_for_status()
                data = sorted(response.json()["data"], key=lambda d: d.get("index", 0))
                vectors = [[float(x) for x in d["embedding"]] for d in data]
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                raise EmbeddingError(f"{safe_url(url)}: {type(exc).__name__}: "
                                     f"{str(exc)[:200]}") from None
            if len(vectors) != len(batch):
                raise EmbeddingError(f"{safe_url(url)} returned {len(vectors)} vectors for "
                                     f"{len(batch)} texts")
            out += vectors
    return out


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity (0.0 when either is all zeros or their lengths differ)."""
    if len(a) != len(b):
        return 0.0
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0
