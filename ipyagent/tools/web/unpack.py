"""A response body undone from its ``Content-Encoding`` a step at a time, so reading can
stop at a limit before a small compressed body becomes a huge one.

httpx unpacks each chunk it reads whole, and stacks as many layers as the header names:
``gzip, gzip`` turned a few KB into hundreds of MB in the user's process before any limit
was looked at. Here the raw stream is read and one layer of gzip or deflate is undone at
most ``STEP`` bytes at a time; more layers, or another encoding, is one line.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator

import httpx

__all__ = ["STEP", "Undecodable", "Unpacker", "pieces", "read_capped"]

STEP = 256 * 1024  # bytes unpacked at a time


class Undecodable(Exception):
    """A body that is not read: stacked or unknown encodings, or damaged data (one line)."""


class Unpacker:
    """One ``Content-Encoding`` (gzip or deflate, one layer; none) undone ``STEP`` at a time."""

    def __init__(self, header: str) -> None:
        layers = [e.strip().lower() for e in header.split(",")
                  if e.strip().lower() not in ("", "identity")]
        if len(layers) > 1:
            raise Undecodable(f"it is encoded {len(layers)} times over ({header[:60]}); only "
                              "one layer of gzip or deflate is read")
        self.kind = layers[0] if layers else ""
        self._z: zlib._Decompress | None = None
        if self.kind in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif self.kind and self.kind != "deflate":
            raise Undecodable(f"it is encoded as {header[:60]!r}, which is not read")

    def feed(self, data: bytes) -> Iterator[bytes]:
        """What ``data`` unpacks to, in pieces of at most ``STEP`` bytes."""
        if not self.kind:
            if data:
                yield data
            return
        if self._z is None:  # deflate: zlib-wrapped or raw, told by the first byte (as httpx)
            self._z = zlib.decompressobj(zlib.MAX_WBITS if data[:1] and data[0] & 0x0F == 8
                                         else -zlib.MAX_WBITS)
        z = self._z
        try:
            while data and not z.eof:
                out = z.decompress(data, STEP)
                data = z.unconsumed_tail
                if out:
                    yield out
        except zlib.error as exc:
            raise Undecodable(f"its {self.kind} data is damaged ({exc})") from None


async def pieces(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body of a streamed ``response``, unpacked, at most ``STEP`` bytes a piece."""
    if response.is_stream_consumed:  # made whole already (an injected transport's), decoded
        if response.content:
            yield response.content
        return
    unpack = Unpacker(response.headers.get("content-encoding", ""))
    async for raw in response.aiter_raw():
        for piece in unpack.feed(raw):
            yield piece


async def read_capped(response: httpx.Response, limit: int) -> bytes:
    """At most ``limit`` bytes of the unpacked body (the rest is not read)."""
    got: list[bytes] = []
    size = 0
    async for piece in pieces(response):
        got.append(piece[: limit - size])
        size += len(got[-1])
        if size >= limit:
            break
    return b"".join(got)
