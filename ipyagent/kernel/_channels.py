"""One long-lived websocket to a remote kernel's channels (``/api/kernels/{id}/channels``).

Two message forms. ``v1.kernel.websocket.jupyter.org``, offered first and used when the
server picks it (Jupyter Server 2, Kernel Gateway 3): binary frames of the message's parts,
which the server passes to the kernel and back without decoding them (a round trip is
markedly cheaper). Otherwise the legacy JSON form every server speaks (Enterprise Gateway,
older ones): one JSON text frame per message naming its channel; binary frames there (ones
with buffers: widgets) are decoded from their JSON part. tornado's websocket client is
used: tornado comes with ipykernel and jupyter_client, so this adds no dependency.

What the server sends is untrusted: a frame over ``max_message_bytes`` is refused before
it is read (the websocket closes, with a reason that says so); a frame that does not
decode, or a message whose parts are not the objects the protocol gives them, is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import socket
import struct
import uuid
from typing import Any

from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketClientConnection, WebSocketClosedError, websocket_connect

from ..errors import KernelError
from ._rest import auth_header, said

__all__ = ["Channels", "ChannelsClosed"]

PROTOCOL_VERSION = "5.3"
V1 = "v1.kernel.websocket.jupyter.org"
_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)  # Linux only


class ChannelsClosed(Exception):
    """The websocket closed (the server went away, the kernel was deleted, the network dropped)."""


class Channels:
    """A websocket to one kernel: ``send`` a request, ``recv`` every message of every channel."""

    def __init__(self, conn: WebSocketClientConnection, session: str, token_env: str = "",
                 max_message_bytes: int = 0) -> None:
        self._conn = conn
        self.session = session
        self.token_env = token_env  # its value is taken out of what the server says
        self.max_message_bytes = max_message_bytes  # as given to tornado (0: not known here)
        self._own_close: int | None = None  # the code tornado closed with itself (1009: too big)
        protocol = conn.protocol
        if protocol is not None:
            # tornado refuses an oversize frame by closing with 1009 and aborting: no close
            # code comes back, so the one sign is its own close call, noted on the way.
            close = protocol.close

            def noting(code: int | None = None, reason: str | None = None) -> None:
                self._own_close = self._own_close or code
                close(code, reason)

            protocol.close = noting  # type: ignore[method-assign]
        self.protocol = conn.selected_subprotocol or "json"  # V1, or the legacy JSON form
        # (frame size, message); None: closed. What waits here is bounded: a server that
        # sends more than this while nobody reads (an idle kernel flooded) is cut off.
        self._inbox: asyncio.Queue[tuple[int, dict[str, Any]] | None] = asyncio.Queue()
        self._queued = 0  # bytes of the frames waiting in the inbox
        self.max_queued_bytes = 2 * max_message_bytes
        self._flooded = False
        self.closed = False
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, url: str, kernel_id: str, token_env: str, session: str,
                   timeout: float, protocols: tuple[str, ...] = (V1,),
                   max_message_bytes: int = 64 * 1024 * 1024) -> Channels:
        """Connect to ``kernel_id``'s channels under ``url`` (http(s); ws(s) is derived);
        a message over ``max_message_bytes`` closes the websocket unread."""
        ws = "ws" + url[len("http"):] if url.startswith("http") else url
        # The session id in the query string (not a secret) lets the server replay what it
        # buffered while we were away; the token goes in the header, never in the URL.
        request = HTTPRequest(f"{ws}/api/kernels/{kernel_id}/channels?session_id={session}",
                              headers=auth_header(token_env), connect_timeout=timeout,
                              request_timeout=timeout, follow_redirects=False)
        try:
            conn = await websocket_connect(request, ping_interval=20, ping_timeout=20,
                                           max_message_size=max_message_bytes,
                                           subprotocols=list(protocols) or None)
        except HTTPClientError as exc:
            if exc.code in (401, 403):
                raise KernelError(f"the Jupyter server at {url} refused the kernel's websocket "
                                  f"(HTTP {exc.code}): check the token in ${token_env}") from None
            if exc.code == 404:
                raise ChannelsClosed(f"no kernel {kernel_id} (HTTP 404)") from None
            raise ChannelsClosed(f"HTTP {exc.code}") from None
        except (OSError, asyncio.TimeoutError) as exc:
            raise ChannelsClosed(str(exc) or type(exc).__name__) from None
        return cls(conn, session, token_env, max_message_bytes)

    def _socket(self) -> socket.socket | None:
        stream = getattr(self._conn.protocol, "stream", None)
        return getattr(stream, "socket", None)

    async def _read(self) -> None:
        sock = self._socket()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                if _QUICKACK is not None and sock is not None:
                    # The server writes a call's messages as separate small frames without
                    # TCP_NODELAY (tornado's default): with our ACK delayed, Nagle holds its
                    # second frame ~40 ms. Acking at once (Linux's quick-ack mode, which the
                    # kernel drops again by itself, hence each read) takes that wait away.
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
                raw = await self._conn.read_message()
                if raw is None:
                    break
                msg = _decode_v1(raw) if self.protocol == V1 else _decode(raw)
                if msg is None:
                    continue
                if self.max_queued_bytes and self._queued + len(raw) > self.max_queued_bytes:
                    self._flooded = True
                    break
                self._queued += len(raw)
                self._inbox.put_nowait((len(raw), msg))
        finally:
            self.closed = True
            self._inbox.put_nowait(None)
            if self._flooded:
                self._conn.close(1008, "too many unread messages")

    def send(self, channel: str, msg_type: str, content: dict[str, Any]) -> str:
        """Send one request; its msg_id (replies and outputs carry it as their parent)."""
        if self.closed:
            raise ChannelsClosed("the websocket is closed")
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "msg_type": msg_type, "username": "ipyagent",
                  "session": self.session, "version": PROTOCOL_VERSION,
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat()}
        frame: str | bytes
        if self.protocol == V1:
            frame = _encode_v1(channel, [header, {}, {}, content])
        else:
            frame = json.dumps({"header": header, "parent_header": {}, "metadata": {}, "content": content,
                                "buffers": [], "channel": channel})
        try:
            self._conn.write_message(frame, binary=isinstance(frame, bytes))
        except WebSocketClosedError:
            self.closed = True
            raise ChannelsClosed("the websocket is closed") from None
        return msg_id

    async def recv(self, timeout: float | None) -> dict[str, Any] | None:
        """The next message (None after ``timeout`` seconds); ChannelsClosed once it closed."""
        if not self._inbox.empty():  # the common case during a call: no timer, no task
            item = self._inbox.get_nowait()
        else:
            try:
                item = await asyncio.wait_for(self._inbox.get(), timeout)
            except asyncio.TimeoutError:
                return None
        if item is None:
            self._inbox.put_nowait(None)  # every later recv sees the close too
            raise ChannelsClosed(self.close_reason())
        self._queued -= item[0]
        return item[1]

    def drain(self) -> list[dict[str, Any]]:
        """Take the messages already received (stale ones of an earlier request, news of a death)."""
        taken: list[dict[str, Any]] = []
        while not self._inbox.empty():
            item = self._inbox.get_nowait()
            if item is None:
                self._inbox.put_nowait(None)
                break
            self._queued -= item[0]
            taken.append(item[1])
        return taken

    def close_reason(self) -> str:
        """Why the websocket closed, as the server said (or 'connection closed')."""
        code, reason = self._conn.close_code, self._conn.close_reason
        if self._flooded:
            return (f"the server sent over {self.max_queued_bytes:,} bytes of messages that were not "
                    "read yet (a flood); the websocket was closed")
        if code is None and self._own_close == 1009:
            return (f"the server sent a message over {self.max_message_bytes:,} bytes, "
                    "the websocket's limit; it was not read and the websocket closed")
        reason = said(reason, self.token_env) if reason else ""  # untrusted: may echo the token
        return f"closed with code {code}" + (f": {reason}" if reason else "") if code else "connection closed"

    def close(self) -> None:
        """Close the websocket (idempotent)."""
        self.closed = True
        self._conn.close()
        self._reader.cancel()


def _encode_v1(channel: str, parts: list[dict[str, Any]]) -> bytes:
    """A v1 frame: the number of offsets, the offsets (8-byte little-endian), channel, parts."""
    chunks = [channel.encode("utf-8")] + [json.dumps(p).encode("utf-8") for p in parts]
    offsets = [8 * (len(chunks) + 2)]
    for chunk in chunks:
        offsets.append(offsets[-1] + len(chunk))
    head = [len(offsets).to_bytes(8, "little")] + [o.to_bytes(8, "little") for o in offsets]
    return b"".join(head + chunks)


def _decode_v1(raw: str | bytes) -> dict[str, Any] | None:
    """A v1 frame as a message dict (header, parent_header, metadata, content, channel)."""
    if not isinstance(raw, bytes):
        return _decode(raw)
    try:
        count = int.from_bytes(raw[:8], "little")
        if not 6 <= count <= len(raw) // 8:  # channel + 4 parts (+ buffers): a huge count would loop
            return None
        offsets = [int.from_bytes(raw[8 * (i + 1): 8 * (i + 2)], "little") for i in range(count)]
        channel = raw[offsets[0]: offsets[1]].decode("utf-8")
        parts = [raw[offsets[i]: offsets[i + 1]] for i in range(1, count - 1)]
        header, parent, metadata, content = (json.loads(p) for p in parts[:4])
    except (ValueError, IndexError, RecursionError):  # RecursionError: JSON nested ~1,000 deep
        return None
    kind = header.get("msg_type") if isinstance(header, dict) else None
    return _shaped({"header": header, "msg_type": kind, "parent_header": parent, "metadata": metadata,
                    "content": content, "channel": channel})


def _decode(raw: str | bytes) -> dict[str, Any] | None:
    """A JSON text frame, or the JSON part of a binary one (``nbufs``, offsets, parts)."""
    try:
        if isinstance(raw, bytes):
            (nbufs,) = struct.unpack("!I", raw[:4])
            if not 1 <= nbufs <= len(raw) // 4:
                return None
            offsets = struct.unpack(f"!{nbufs}I", raw[4 : 4 + 4 * nbufs])
            end = offsets[1] if nbufs > 1 else len(raw)
            raw = raw[offsets[0] : end].decode("utf-8")
        msg = json.loads(raw)
    except (ValueError, struct.error, IndexError, RecursionError):  # nested ~1,000 deep
        return None
    return _shaped(msg)


def _shaped(msg: Any) -> dict[str, Any] | None:
    """``msg`` when its parts are what the protocol makes them (objects; a string channel),
    missing ones as empty objects; None when not: such a message is dropped, not a crash."""
    if not isinstance(msg, dict) or not isinstance(msg.get("channel"), str):
        return None
    for part in ("header", "parent_header", "metadata", "content"):
        if msg.get(part) is None:
            msg[part] = {}
        elif not isinstance(msg[part], dict):
            return None
    return msg
