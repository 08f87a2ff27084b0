"""DuckDuckGo's keyless HTML endpoint (``https://html.duckduckgo.com/html/``), parsed with
the stdlib ``html.parser``.

Each hit is a block with class ``result`` holding an ``a.result__a`` (title and link), an
``.result__url`` (the shown address) and an ``.result__snippet``; links go through
DuckDuckGo's redirect ``//duckduckgo.com/l/?uddg=<url>&rut=…``, unwrapped here. Ads
(``result--ad``) are skipped. DuckDuckGo rate-limits scripts: it answers 202, or a page
with an "anomaly" challenge (a captcha), and that is said as "DuckDuckGo refused (rate
limited)". The live endpoint has not been tried from the machine this was built on; the
parser is tested against a page written to its markup.
"""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx

from .html_text import feed_leniently
from .search import MAX_RESULTS, SearchResult, SearchUnavailable, http_client, transport_problem
from .unpack import Undecodable, read_capped

__all__ = ["DuckDuckGo", "parse_results", "unwrap"]

ENDPOINT = "https://html.duckduckgo.com/html/"
_REFUSED = "DuckDuckGo refused (rate limited)"
_CHALLENGE = ("anomaly-modal", "anomaly.js", "bots use duckduckgo", "challenge-form")


class DuckDuckGo:
    """DuckDuckGo's HTML results page. ``endpoint`` and ``transport`` are seams for tests
    (a local page), not settings: searches go to DuckDuckGo."""

    name = "DuckDuckGo"

    def __init__(self, *, timeout: float = 15.0, endpoint: str = ENDPOINT,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.timeout = timeout
        self.endpoint = endpoint
        self._transport = transport

    def __repr__(self) -> str:
        return "DuckDuckGo()" if self.endpoint == ENDPOINT else f"DuckDuckGo(endpoint={self.endpoint!r})"

    async def search(self, query: str, n: int) -> list[SearchResult]:
        """Up to ``n`` results; ``SearchUnavailable`` with one line when it cannot."""
        try:
            async with http_client(self.timeout, self._transport) as client:
                async with client.stream("POST", self.endpoint, data={"q": query, "b": ""},
                                         headers={"Accept": "text/html",
                                                  "Referer": "https://html.duckduckgo.com/"},
                                         ) as response:
                    body = await read_capped(response, 3_000_000)  # unpacked only that far
                try:
                    page = body.decode(response.encoding or "utf-8", errors="replace")
                except LookupError:  # a codec that is not a text encoding (zlib, base64)
                    page = body.decode("utf-8", errors="replace")
        except (httpx.HTTPError, OSError) as exc:
            raise SearchUnavailable(f"DuckDuckGo: {transport_problem(exc, self.timeout)}") from None
        except Undecodable as exc:
            raise SearchUnavailable(f"DuckDuckGo: its answer is not read: {exc}") from None
        refused = SearchUnavailable(f"{_REFUSED}; try again later, or set Agent.search_url "
                                    "to a SearXNG instance")
        if response.status_code in (202, 403, 429):
            raise refused
        if response.status_code >= 400:
            raise SearchUnavailable(f"DuckDuckGo answered HTTP {response.status_code} "
                                    f"{response.reason_phrase}".rstrip())
        results = parse_results(page)
        if not results and _challenged(page):  # a snippet may say "anomaly"; a challenge has no results
            raise refused
        if not results and "result" not in page and "no-results" not in page:
            raise SearchUnavailable("DuckDuckGo answered a page without search results "
                                    "(its page may have changed)")
        return results[: min(n, MAX_RESULTS)]


def _challenged(page: str) -> bool:
    low = page[:200_000].lower()
    return any(marker in low for marker in _CHALLENGE)


def unwrap(href: str) -> str:
    """The target of a DuckDuckGo redirect link (``//duckduckgo.com/l/?uddg=…``), else
    ``href`` made absolute; "" for what is not an http(s) address (an ad's ``y.js``)."""
    url = urljoin(ENDPOINT, href.strip())
    parts = urlsplit(url)
    if parts.hostname and parts.hostname.endswith("duckduckgo.com") and parts.path == "/l/":
        target = parse_qs(parts.query).get("uddg", [""])[0]
        url = target
        parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ""
    if parts.hostname.endswith("duckduckgo.com") and parts.path.startswith("/y.js"):
        return ""  # an ad's click tracker
    return url


def _classes(attrs: list[tuple[str, str | None]]) -> set[str]:
    for name, value in attrs:
        if name == "class" and value:
            return set(value.split())
    return set()


class _Results(HTMLParser):
    """Collects ``result`` blocks: title and link, shown URL, snippet."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[dict[str, str]] = []
        self.field: str | None = None  # what the text being read belongs to
        self.field_tag = ""
        self.depth = 0  # nesting of field_tag inside the field's element
        self.ad = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.field is not None:
            if tag == self.field_tag:
                self.depth += 1
            return
        classes = _classes(attrs)
        if "result" in classes:
            self.ad = "result--ad" in classes
            if not self.ad:
                self.found.append({"title": "", "href": "", "url": "", "snippet": ""})
            return
        if self.ad or not self.found:
            return
        for field in ("result__a", "result__snippet", "result__url"):
            if field in classes:
                self.field, self.field_tag, self.depth = field, tag, 1
                key = {"result__a": "title", "result__snippet": "snippet", "result__url": "url"}[field]
                self.found[-1][key] = ""  # a repeated field: the last one counts
                if field == "result__a":
                    self.found[-1]["href"] = dict(attrs).get("href") or ""
                return

    def handle_endtag(self, tag: str) -> None:
        if self.field is not None and tag == self.field_tag:
            self.depth -= 1
            if self.depth == 0:
                self.field = None

    def handle_data(self, data: str) -> None:
        if self.field is None or not self.found:
            return
        key = {"result__a": "title", "result__snippet": "snippet", "result__url": "url"}[self.field]
        self.found[-1][key] += data


def parse_results(page: str) -> list[SearchResult]:
    """The organic results of a DuckDuckGo HTML results page, in order."""
    parser = _Results()
    feed_leniently(parser, page)
    results = []
    for hit in parser.found:
        url = unwrap(hit["href"]) if hit["href"] else ""
        if not url:
            shown = " ".join(hit["url"].split())
            url = unwrap("https://" + shown) if shown and " " not in shown else ""
        if not url:
            continue
        results.append(SearchResult(title=" ".join(hit["title"].split()), url=url,
                                    snippet=" ".join(hit["snippet"].split())))
    return results
