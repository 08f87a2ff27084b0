"""``fetch``: one web page as readable text, bounded, with every hop checked.

Only ``http``/``https``. Each hop — the first request and every redirect, at most
``MAX_REDIRECTS`` — is resolved and checked by ``guard`` and sent to the checked address
(the URL's host stays in ``Host`` and in TLS). The body is streamed and reading stops at
``max_bytes`` (the answer says it was cut). HTML becomes text (``html_text``); plain
text, JSON and XML come as they are; any other type is one line naming it. Nothing of
the user's goes along: no cookies, no credentials, a fixed User-Agent (``search``).
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from urllib.parse import urljoin

import httpx

from .guard import Refused, Unresolved, resolve_checked
from .html_text import html_to_text
from .search import http_client, transport_problem
from .unpack import Undecodable, pieces

__all__ = ["FetchFailed", "Fetched", "Refused", "fetch", "MAX_REDIRECTS", "kind_of"]

MAX_REDIRECTS = 5
MAX_ADDRESSES = 3  # of one name, tried in turn when one cannot be connected to
_REDIRECTS = {301, 302, 303, 307, 308}
_TEXT_TYPES = {"application/json", "application/xml", "application/javascript",
               "application/x-ndjson", "application/ld+json", "application/yaml",
               "application/x-yaml", "application/toml", "application/rss+xml",
               "application/atom+xml", "application/x-javascript", "application/ecmascript"}
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


class FetchFailed(Exception):
    """The page could not be had; the message is one line saying why."""


@dataclass
class Fetched:
    """What came back: the final URL, status, content type, text, and what was cut."""

    url: str
    status: int
    content_type: str
    kind: str  # "html", "text"
    text: str
    title: str = ""
    bytes_read: int = 0
    cut: bool = False
    redirects: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"<Fetched {self.url} {self.status} {self.content_type} {len(self.text)} chars>"


def kind_of(content_type: str, head: bytes) -> str | None:
    """'html', 'text', or None for a type that is not text (sniffed when none is given)."""
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime in ("text/html", "application/xhtml+xml"):
        return "html"
    if mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml")):
        return "text"
    if not mime:
        probe = head[:1024].lstrip().lower()
        if probe.startswith((b"<!doctype html", b"<html")):
            return "html"
        if b"\x00" not in head[:1024]:
            return "text"
    return None


def _encoding(response: httpx.Response, body: bytes, kind: str) -> str:
    name = response.charset_encoding
    if not name and kind == "html":
        m = _META_CHARSET.search(body[:4096])
        name = m.group(1).decode("ascii", "replace") if m else None
    try:
        info = codecs.lookup(name or "utf-8")
        # The page names it: zlib, base64, rot13 are codecs too, but not text encodings.
        found = info.name if getattr(info, "_is_text_encoding", True) else "utf-8"
    except LookupError:
        found = "utf-8"
    return "utf-8-sig" if found == "utf-8" else found  # a byte-order mark is not text


def _size(n: int) -> str:
    for unit, scale in (("MB", 1_000_000), ("KB", 1_000)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


async def fetch(url: str, *, timeout: float, max_bytes: int, allow_private: bool = False,
                transport: httpx.AsyncBaseTransport | None = None) -> Fetched:
    """``url`` as text; ``Refused`` for an address it may not reach, ``FetchFailed`` for
    anything else that goes wrong (each one line)."""
    redirects: list[str] = []
    current = url.strip()
    async with http_client(timeout, transport) as client:
        for _hop in range(MAX_REDIRECTS + 1):
            target = _checked_url(current)
            host = target.raw_host.decode("ascii")
            port = target.port or (443 if target.scheme == "https" else 80)
            try:
                addresses = await resolve_checked(host, port, allow_private=allow_private,
                                                  timeout=timeout)
            except Unresolved as exc:
                raise FetchFailed(str(exc)) from None
            extensions = {"sni_hostname": host} if target.scheme == "https" else {}
            headers = {"Host": target.netloc.decode("ascii"),
                       "Accept": "text/html, text/plain;q=0.9, application/json;q=0.9, */*;q=0.5"}
            # Every address was checked; the next is tried only when one cannot be
            # connected to (an IPv6 address on a machine without IPv6), a few at most.
            tries = addresses[:MAX_ADDRESSES]
            for i, ip in enumerate(tries):
                pinned = target.copy_with(host=ip, fragment=None)
                try:
                    async with client.stream("GET", pinned, headers=headers,
                                             extensions=extensions) as response:
                        location = response.headers.get("location")
                        if response.status_code in _REDIRECTS and location:
                            redirects.append(str(target))
                            current = urljoin(str(target), location.strip())
                            break
                        return await _read(response, str(target), redirects, max_bytes)
                except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                    if i + 1 < len(tries):
                        continue
                    raise FetchFailed(f"{_shown(target)}: {transport_problem(exc, timeout)}") from None
                except (httpx.HTTPError, OSError) as exc:
                    raise FetchFailed(f"{_shown(target)}: {transport_problem(exc, timeout)}") from None
        raise FetchFailed(f"more than {MAX_REDIRECTS} redirects, the last to {_shown(httpx.URL(current))}")


def _shown(url: httpx.URL) -> str:
    return str(url.copy_with(fragment=None))


def _checked_url(text: str) -> httpx.URL:
    """``text`` as an http(s) URL with a host; ``FetchFailed`` otherwise."""
    try:
        parsed = httpx.URL(text)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise FetchFailed(f"not a valid URL: {text[:200]!r} ({exc})") from None
    if parsed.scheme not in ("http", "https"):
        raise Refused(f"only http:// and https:// URLs are fetched, not {text[:200]!r}")
    if not parsed.raw_host:
        raise FetchFailed(f"the URL has no host: {text[:200]!r}")
    if parsed.userinfo:
        raise Refused("a URL with a user name or password in it is not fetched")
    return parsed


async def _read(response: httpx.Response, url: str, redirects: list[str],
                max_bytes: int) -> Fetched:
    status = response.status_code
    if status >= 400:
        raise FetchFailed(f"{url} answered HTTP {status} {response.reason_phrase}".rstrip())
    content_type = response.headers.get("content-type", "")
    chunks: list[bytes] = []
    read = 0
    cut = False
    kind: str | None = "pending"
    try:
        async for chunk in pieces(response):  # unpacked a step at a time: bounded
            if kind == "pending":
                kind = kind_of(content_type, chunk)
                if kind is None:
                    break
            take = chunk[: max(0, max_bytes - read)] if max_bytes > 0 else chunk
            chunks.append(take)
            read += len(take)
            if len(take) < len(chunk):
                cut = True
                break
    except Undecodable as exc:
        raise FetchFailed(f"{url} is not read: {exc}") from None
    if kind == "pending":
        kind = kind_of(content_type, b"")
    if kind is None:
        mime = content_type.split(";", 1)[0].strip() or "binary data"
        size = response.headers.get("content-length")
        said = f", {_size(int(size))}" if size and size.isdigit() else ""
        raise FetchFailed(f"{url} is {mime}{said}, not text; fetch_url reads HTML, text "
                          "and JSON (the python tool can download other files)")
    body = b"".join(chunks)
    text = body.decode(_encoding(response, body, kind), errors="replace")
    title = ""
    if kind == "html":
        page = html_to_text(text)
        text, title = page.text, page.title
    return Fetched(url=url, status=status, content_type=content_type or "(none given)",
                   kind=kind, text=text, title=title, bytes_read=read, cut=cut,
                   redirects=redirects)
