"""What a reply that says "no API here" means, as the one fix to try.

A 404, 405 or 501 on the chat path, or an HTML page where JSON should be, is a setting
that is wrong, not a passing fault: another attempt gets the same answer. The usual
causes, most likely first: ``base_url`` without ``/v1`` (Ollama, vLLM, LM Studio all
serve ``…/v1/chat/completions``), ``base_url`` that names the endpoint itself, an API the
server does not speak (``Agent.api``/``Agent.provider`` for another kind of server), and a
server that is no OpenAI-compatible API at all (a file server, a notebook server, a web UI).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

__all__ = ["NO_API_STATUSES", "says_no_api_here", "endpoint_hint"]

# What a server that has no such route, or takes no POST there, answers.
NO_API_STATUSES = frozenset({404, 405, 501})

# The setting that picks each protocol, by the path its client posts to.
_API_OF_PATH = {"chat/completions": "chat", "responses": "responses", "messages": "anthropic"}
# A path segment that names an API version: /v1, /v1beta/openai (Gemini), /api/v1 (OpenRouter).
_VERSION = re.compile(r"^v\d+[a-z0-9]*$", re.I)
# The endpoints a base_url may wrongly end with (the client appends its own).
_ENDPOINTS = ("/chat/completions", "/completions", "/responses", "/messages")
# LM Studio answers a wrong path 200 with this error (``{"error": "Unexpected endpoint …"}``).
_UNEXPECTED = re.compile(r"unexpected endpoint", re.I)


def says_no_api_here(status: int, message: str, *, html: bool) -> bool:
    """True when a reply means there is no such API at this URL (not a passing fault).

    A 404 that names a model is the provider's "no such model" (OpenAI, Anthropic,
    Ollama answer those 404 too): the URL is right, so it is not one of these.
    """
    if status == 404 and re.search(r"\bmodel\b", message, re.I) and not html:
        return False
    if status in NO_API_STATUSES or (html and status >= 400 and status < 500):
        return True
    return bool(_UNEXPECTED.search(message))


def endpoint_hint(base_url: str, path: str, *, status: int, html: bool) -> str:
    """The one fix most likely to help, naming the setting and the value to try.

    ``base_url`` must already be free of credentials (``retry.safe_url``).
    """
    base = base_url.rstrip("/")
    parts = urlsplit(base)
    segments = [s for s in parts.path.split("/") if s]
    for endpoint in _ENDPOINTS:
        if parts.path.endswith(endpoint):
            fixed = base[: -len(endpoint)]
            return (f"base_url names the endpoint itself; it should stop before it: "
                    f"try Agent.base_url = {fixed!r}")
    if not any(_VERSION.match(s) for s in segments):
        return (f"base_url has no API version in it, most servers want /v1: "
                f"try Agent.base_url = {base + '/v1'!r}")
    api = _API_OF_PATH.get(path)
    if api is not None and api != "chat":
        return (f"the server may not speak the {api!r} API (POST {path}): if it is an "
                "OpenAI-compatible server, set Agent.api = 'chat' (or the Agent.provider "
                "preset that matches it)")
    what = "a web page" if html else (f"HTTP {status}" if status >= 400 else "no such route")
    return (f"the server at {parts.netloc or base} answered {what} where an OpenAI-compatible "
            f"API serves POST {base}/{path}: check Agent.base_url and Agent.provider "
            "(is it a model server, and the right address for it?)")
