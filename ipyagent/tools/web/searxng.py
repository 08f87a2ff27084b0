"""SearXNG's JSON API: ``GET {search_url}/search?q=…&format=json`` (self-hosted, no key).

The reply's ``results`` list has ``title``, ``url`` and ``content`` (the snippet). A
SearXNG whose ``settings.yml`` does not list ``json`` under ``search.formats`` answers
403, and one whose limiter takes the request for a bot's answers 429; each is said in words,
with the fix.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from ..._util.text import one_line
from .search import MAX_RESULTS, SearchResult, SearchUnavailable, http_client, transport_problem
from .unpack import Undecodable, read_capped

__all__ = ["SearXNG"]


class SearXNG:
    """A SearXNG instance at ``base_url`` (``transport``: a seam for tests)."""

    name = "SearXNG"

    def __init__(self, base_url: str, *, timeout: float = 15.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        # A search_url given as the search page itself (…/search) is the same instance.
        if self.base_url.endswith("/search"):
            self.base_url = self.base_url[: -len("/search")]
        self.timeout = timeout
        self._transport = transport

    def __repr__(self) -> str:
        return f"SearXNG({self.base_url!r})"

    async def search(self, query: str, n: int) -> list[SearchResult]:
        """Up to ``n`` results; ``SearchUnavailable`` with one line when it cannot."""
        where = f"SearXNG at {self.base_url}"
        try:
            async with http_client(self.timeout, self._transport) as client:
                async with client.stream("GET", f"{self.base_url}/search",
                                         params={"q": query, "format": "json"},
                                         # text/html too: SearXNG's bot detection
                                         # (limiter) refuses an Accept without it.
                                         headers={"Accept": "application/json, text/html;q=0.5"},
                                         ) as response:
                    body = await read_capped(response, 5_000_000)  # unpacked only that far
        except (httpx.HTTPError, OSError) as exc:
            raise SearchUnavailable(f"{where}: {transport_problem(exc, self.timeout)}") from None
        except Undecodable as exc:
            raise SearchUnavailable(f"{where}: its answer is not read: {exc}") from None
        if response.status_code == 403:
            raise SearchUnavailable(
                f"{where} refused format=json (HTTP 403): add json to search.formats in its "
                "settings.yml")
        if response.status_code == 429:
            raise SearchUnavailable(f"{where} refused (HTTP 429: rate limited or its bot "
                                    "detection; for your own instance set server.limiter: false)")
        if response.status_code >= 400:
            raise SearchUnavailable(f"{where} answered HTTP {response.status_code} "
                                    f"{response.reason_phrase}".rstrip())
        try:
            data: Any = json.loads(body)
        except ValueError:
            kind = response.headers.get("content-type", "no content type")
            raise SearchUnavailable(f"{where} did not answer JSON ({one_line(kind, 60)}); is "
                                    "Agent.search_url a SearXNG instance?") from None
        raw = data.get("results") if isinstance(data, dict) else None
        if not isinstance(raw, list):
            raise SearchUnavailable(f"{where} answered JSON without a results list")
        results = []
        for item in raw:
            if not isinstance(item, dict):
                continue
            url = item.get("url")
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                continue
            results.append(SearchResult(title=_text(item.get("title")), url=url,
                                        snippet=_text(item.get("content"))))
            if len(results) >= min(n, MAX_RESULTS):
                break
        return results


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
