"""fetch_url against a hostile page on a real 127.0.0.1 server: a compressed body that
unpacks to far more than ``max_bytes`` is read only as far as ``max_bytes``."""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc
import zlib

import pytest

from ipyagent.tools.web.fetch import FetchFailed, fetch
from tests.helpers.web_servers import LocalWeb, Page

UNPACKED = 256 * 1024 * 1024  # 256 MB of spaces once unpacked
MAX = 100_000


def _gzip(data_size: int) -> bytes:
    out = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b" " * (1 << 20)
    parts = [out.compress(block) for _ in range(data_size // len(block))]
    return b"".join(parts) + out.flush()


@pytest.fixture(scope="module")
def bomb() -> bytes:
    once = _gzip(UNPACKED)  # ~250 KB: the ratio of deflate, about 1000:1
    return gzip.compress(once, 9)  # twice: a few KB


def _peak(url: str) -> tuple[int, object]:
    tracemalloc.start()
    try:
        result: object = asyncio.run(fetch(url, timeout=10, max_bytes=MAX, allow_private=True))
    except FetchFailed as exc:
        result = exc
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, result


@pytest.mark.parametrize("encoding", ["gzip", "gzip, gzip"])
def test_a_compressed_page_is_unpacked_only_as_far_as_max_bytes(bomb: bytes, encoding: str) -> None:
    body = gzip.decompress(bomb) if encoding == "gzip" else bomb
    with LocalWeb() as web:
        web.route("/bomb.html", Page(body, headers={"Content-Type": "text/plain",
                                                    "Content-Encoding": encoding}))
        peak, result = _peak(f"{web.url}/bomb.html")
    assert peak < 40 * MAX + 8_000_000, f"{peak:,} bytes held at once for a {MAX:,}-byte read"
    if isinstance(result, FetchFailed):
        assert "\n" not in str(result)  # refusing stacked encodings is one line
    else:
        assert result.cut and result.bytes_read == MAX  # type: ignore[attr-defined]


def test_a_page_compressed_as_it_says_still_reads_whole() -> None:
    text = "hello, compressed world\n" * 1000
    with LocalWeb() as web:
        web.route("/g.txt", Page(gzip.compress(text.encode()),
                                 headers={"Content-Type": "text/plain", "Content-Encoding": "gzip"}))
        web.route("/d.txt", Page(zlib.compress(text.encode()),
                                 headers={"Content-Type": "text/plain", "Content-Encoding": "deflate"}))
        for path in ("/g.txt", "/d.txt"):
            page = asyncio.run(fetch(web.url + path, timeout=10, max_bytes=1_000_000, allow_private=True))
            assert page.text == text and not page.cut


@pytest.mark.parametrize("setting", ["search_url", "base_url"])
@pytest.mark.parametrize("bad", ["ftp://u:SECRETPASS@127.0.0.1:8888/", "u:SECRETPASS@127.0.0.1:8888",
                                 "ftp://127.0.0.1:8888/?key=SECRETPASS", "http://u:SECRETPASS@/x"])
def test_a_url_setting_refused_does_not_repeat_its_credentials(setting: str, bad: str) -> None:
    from traitlets import TraitError

    from ipyagent import Agent

    with pytest.raises(TraitError) as info:
        Agent(python_tool=False, **{setting: bad})
    assert "SECRETPASS" not in str(info.value), str(info.value)


def test_an_endpoint_with_a_password_in_its_url_does_not_show_it() -> None:
    from ipyagent import Agent

    with Agent(python_tool=False, model="x", base_url="http://u:SECRETPASS@127.0.0.1:1/v1?key=SECRETPASS") as agent:
        assert "SECRETPASS" not in repr(agent.endpoint) and "SECRETPASS" not in repr(agent)
        assert "127.0.0.1:1/v1" in repr(agent.endpoint)


@pytest.mark.parametrize("backend", ["searxng", "duckduckgo"])
def test_a_search_answer_that_unpacks_huge_is_not_unpacked_whole(bomb: bytes, backend: str) -> None:
    from ipyagent.tools.web.duckduckgo import DuckDuckGo
    from ipyagent.tools.web.search import SearchUnavailable
    from ipyagent.tools.web.searxng import SearXNG

    with LocalWeb() as web:
        for path in ("/search", "/html/"):
            web.route(path, Page(gzip.decompress(bomb), headers={
                "Content-Type": "application/json" if backend == "searxng" else "text/html",
                "Content-Encoding": "gzip"}))
        engine = SearXNG(web.url, timeout=10) if backend == "searxng" else DuckDuckGo(
            timeout=10, endpoint=f"{web.url}/html/")
        tracemalloc.start()
        try:
            asyncio.run(engine.search("q", 3))
        except SearchUnavailable as exc:
            assert "\n" not in str(exc)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 64_000_000, f"{peak:,} bytes held at once"


@pytest.mark.parametrize("charset", ["zlib", "base64", "rot13", "hex", "bz2"])
def test_a_page_naming_a_codec_that_is_not_a_text_encoding_reads_as_utf8(charset: str) -> None:
    with LocalWeb() as web:
        web.route("/a.html", Page(b"<html><body><p>caf\xc3\xa9</p></body></html>",
                                  headers={"Content-Type": f"text/html; charset={charset}"}))
        web.route("/b.html", Page(f"<html><head><meta charset='{charset}'></head><body><p>caf\xc3\xa9"
                                  "</p></body></html>".encode("latin-1"),
                                  headers={"Content-Type": "text/html"}))
        for path in ("/a.html", "/b.html"):
            page = asyncio.run(fetch(web.url + path, timeout=10, max_bytes=100_000, allow_private=True))
            assert "café" in page.text, (path, page.text)
