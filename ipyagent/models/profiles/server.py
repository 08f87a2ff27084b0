"""What a server says about its model, and whether it takes a grammar: asked once per server.

``gather`` asks ``/v1/models`` and, for a server on this machine or network, llama.cpp's
``/props`` (llama-server has it; llama-cpp-python's server answers 404) and reads the GGUF
header of a model file the server names, if that file is here; when neither names the
model (llama-cpp-python serving it under an alias), it asks that server's tokenizer which
family marker tokens it holds (``/extras/tokenize``, a few short requests). ``takes_grammar`` sends one
tiny request with a one-word grammar: a server that constrains decoding answers exactly that
word. Both answers are cached per base URL (and model) for the life of the process; a
failure of either is an answer too (no facts, no grammar), never an error of the run.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from .detect import VOCAB_MARKERS, ServerFacts, family_of_name
from .gguf import read_gguf

__all__ = ["gather", "takes_grammar", "PROBE_GRAMMAR", "PROBE_WORD", "forget"]

PROBE_WORD = "zq7"  # a word no model answers unasked
PROBE_GRAMMAR = f'root ::= "{PROBE_WORD}"'
_TIMEOUT = httpx.Timeout(10.0, read=900.0)  # a CPU server reads a long prompt for minutes
_MAX_IDS = 20
_MAX_TEMPLATE = 64_000

_facts: dict[tuple[str, str], ServerFacts] = {}
_grammar: dict[tuple[str, str], bool] = {}


def forget() -> None:
    """Drop every cached answer (tests; a server restarted with another model)."""
    _facts.clear()
    _grammar.clear()


def _root(base_url: str) -> str:
    """``http://host:port`` of ``http://host:port/v1``: where llama.cpp serves /props."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def _get_json(http: httpx.AsyncClient, url: str, auth: httpx.Auth | None) -> Any:
    try:
        response = await http.get(url, auth=auth, timeout=_TIMEOUT) if auth else \
            await http.get(url, timeout=_TIMEOUT)
        if response.status_code != 200 or len(response.content) > 4_000_000:
            return None
        return response.json()
    except (httpx.HTTPError, ValueError):
        return None


async def _post(http: httpx.AsyncClient, url: str, body: Any, auth: httpx.Auth | None) -> httpx.Response:
    """POST ``body``; ``auth`` only when given (an injected client keeps its own otherwise)."""
    if auth:
        return await http.post(url, json=body, auth=auth, timeout=_TIMEOUT)
    return await http.post(url, json=body, timeout=_TIMEOUT)


def _text(value: Any, limit: int = 500) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _local_gguf(*candidates: str) -> tuple[str, Any]:
    """The first candidate that names a GGUF file on this machine, read."""
    for path in candidates:
        if path.endswith(".gguf") and os.path.isabs(path) and os.path.isfile(path):
            info = read_gguf(path)
            if info is not None:
                return path, info
    return "", None


async def gather(http: httpx.AsyncClient, base_url: str, model: str, *,
                 auth: httpx.Auth | None = None, local: bool) -> ServerFacts:
    """The facts for ``model`` at ``base_url`` (cached). ``local``: the server is on this
    machine or network, so /props and the model file are worth a look."""
    key = (base_url, model)
    if key in _facts:
        return _facts[key]
    listing = await _get_json(http, f"{base_url.rstrip('/')}/models", auth)
    ids: tuple[str, ...] = ()
    owners: tuple[str, ...] = ()
    if isinstance(listing, dict) and isinstance(listing.get("data"), list):
        entries = [m for m in listing["data"][:_MAX_IDS] if isinstance(m, dict) and _text(m.get("id"))]
        ids = tuple(_text(m.get("id")) for m in entries)
        owners = tuple(dict.fromkeys(o for o in (_text(m.get("owned_by"), 40) for m in entries) if o))
    facts = ServerFacts(model_ids=ids, owners=owners)
    if local:
        props = await _get_json(http, f"{_root(base_url)}/props", auth)
        props_model, template, path_from_props = "", "", ""
        if isinstance(props, dict):
            path_from_props = _text(props.get("model_path"), 4096)
            props_model = _text(props.get("model_alias")) or path_from_props
            template = _text(props.get("chat_template"), _MAX_TEMPLATE)
        path, info = _local_gguf(path_from_props, model, *ids)
        tokens: tuple[str, ...] = ()
        named = any(family_of_name(text) for text in (model, *ids))
        if info is None and not isinstance(props, dict) and "me" in owners and not named:
            tokens = await _one_token_markers(http, base_url, model, auth)
        facts = ServerFacts(model_ids=ids, owners=owners, props=isinstance(props, dict), props_model=props_model,
                            chat_template=template, template_from="the server's /props" if template else "",
                            gguf=info, gguf_path=path, special_tokens=tokens)
    _facts[key] = facts
    return facts


async def _one_token_markers(http: httpx.AsyncClient, base_url: str, model: str,
                             auth: httpx.Auth | None) -> tuple[str, ...]:
    """Of ``VOCAB_MARKERS``, those llama-cpp-python's tokenizer reads as one token (its
    ``/extras/tokenize`` reads special tokens); () when the server has no such endpoint.
    The empty text is asked first: what the tokenizer adds to any text (a BOS) is not the
    marker's."""
    url = f"{_root(base_url)}/extras/tokenize"
    counts: list[int] = []
    for text in ("", *VOCAB_MARKERS):
        body = {"input": text, "model": model}
        try:
            response = await _post(http, url, body, auth)
            tokens = response.json().get("tokens") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            tokens = None
        if not isinstance(tokens, list):
            return ()
        counts.append(len(tokens))
    added = counts[0]
    return tuple(m for m, n in zip(VOCAB_MARKERS, counts[1:]) if n == added + 1)


async def takes_grammar(http: httpx.AsyncClient, base_url: str, model: str, *,
                        auth: httpx.Auth | None = None,
                        messages: list[dict[str, Any]] | None = None) -> bool:
    """Whether the server constrains decoding to a ``grammar`` field (one request of a few
    output tokens, cached).

    ``messages``: the conversation about to be sent. Why: llama.cpp's servers keep the last
    prompt's evaluation, and a probe with a prompt of its own would throw that away (the
    next request then reads its whole prompt again); with the same messages the probe reads
    the prompt the request is about to reuse.
    """
    key = (base_url, model)
    if key in _grammar:
        return _grammar[key]
    body = {"model": model, "messages": messages or [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8, "temperature": 0, "stream": False, "grammar": PROBE_GRAMMAR}
    answer = False
    try:
        url = f"{base_url.rstrip('/')}/chat/completions"
        response = await _post(http, url, body, auth)
        if response.status_code == 200:
            content = response.json()["choices"][0]["message"]["content"]
            answer = isinstance(content, str) and content.strip() == PROBE_WORD
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        answer = False
    _grammar[key] = answer
    return answer
