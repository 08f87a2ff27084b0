"""One long-lived websocket to a remote kernel's channels (``/api/kernels/{id}/channels``).

Jupyter's JSON message form (every message a JSON text frame naming its channel), which
Jupyter Server, Kernel Gateway and Enterprise Gateway all speak; messages the server sends
as binary frames (ones with buffers: widgets) are decoded from their JSON part. tornado's
websocket client is used: tornado comes with ipykernel and jupyter_client, so this adds
no dependency.
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
from ._rest import auth_header

__all__ = ["Channels", "ChannelsClosed"]

PROTOCOL_VERSION = "5.3"
_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)  # Linux only


class ChannelsClosed(Exception):
    """The websocket closed (the server went away, the kernel was deleted, the network dropped)."""


class Channels:
    """A websocket to one kernel: ``send`` a request, ``recv`` every message of every channel."""

    def __init__(self, conn: WebSocketClientConnection, session: str) -> None:
        self._conn = conn
        self.session = session
        self._inbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.closed = False
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, url: str, kernel_id: str, token_env: str, session: str,
                   timeout: float) -> Channels:
        """Connect to ``kernel_id``'s channels under ``url`` (http(s); ws(s) is derived)."""
        ws = "ws" + url[len("http"):] if url.startswith("http") else url
        # The session id in the query string (not a secret) lets the server replay what it
        # buffered while we were away; the token goes in the header, never in the URL.
        request = HTTPRequest(f"{ws}/api/kernels/{kernel_id}/channels?session_id={session}",
                              headers=auth_header(token_env), connect_timeout=timeout,
                              request_timeout=timeout, follow_redirects=False)
        try:
            conn = await websocket_connect(request, ping_interval=20, ping_timeout=20,
                                           max_message_size=1024 * 1024 * 1024)
        except HTTPClientError as exc:
            if exc.code in (401, 403):
                raise KernelError(f"the Jupyter server at {url} refused the kernel's websocket "
                                  f"(HTTP {exc.code}): check the token in ${token_env}") from None
            if exc.code == 404:
                raise ChannelsClosed(f"no kernel {kernel_id} (HTTP 404)") from None
            raise ChannelsClosed(f"HTTP {exc.code}") from None
        except (OSError, asyncio.TimeoutError) as exc:
            raise ChannelsClosed(str(exc) or type(exc).__name__) from None
        return cls(conn, session)

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
                msg = _decode(raw)
                if msg is not None:
                    self._inbox.put_nowait(msg)
        finally:
            self.closed = True
            self._inbox.put_nowait(None)

    def send(self, channel: str, msg_type: str, content: dict[str, Any]) -> str:
        """Send one request; its msg_id (replies and outputs carry it as their parent)."""
        if self.closed:
            raise ChannelsClosed("the websocket is closed")
        msg_id = uuid.uuid4().hex
        msg = {
            "header": {"msg_id": msg_id, "msg_type": msg_type, "username": "ipyagent",
                       "session": self.session, "version": PROTOCOL_VERSION,
                       "date": datetime.datetime.now(datetime.timezone.utc).isoformat()},
            "parent_header": {}, "metadata": {}, "content": content, "buffers": [],
            "channel": channel,
        }
        try:
            self._conn.write_message(json.dumps(msg))
        except WebSocketClosedError:
            self.closed = True
            raise ChannelsClosed("the websocket is closed") from None
        return msg_id

    async def recv(self, timeout: float | None) -> dict[str, Any] | None:
        """The next message (None after ``timeout`` seconds); ChannelsClosed once it closed."""
        try:
            msg = await asyncio.wait_for(self._inbox.get(), timeout)
        except asyncio.TimeoutError:
            return None
        if msg is None:
            self._inbox.put_nowait(None)  # every later recv sees the close too
            raise ChannelsClosed(self.close_reason())
        return msg

    def drain(self) -> list[dict[str, Any]]:
        """Take the messages already received (stale ones of an earlier request, news of a death)."""
        taken: list[dict[str, Any]] = []
        while not self._inbox.empty():
            msg = self._inbox.get_nowait()
            if msg is None:
                self._inbox.put_nowait(None)
                break
            taken.append(msg)
        return taken

    def close_reason(self) -> str:
        """Why the websocket closed, as the server said (or 'connection closed')."""
        code, reason = self._conn.close_code, self._conn.close_reason
        return f"closed with code {code}" + (f": {reason}" if reason else "") if code else "connection closed"

    def close(self) -> None:
        """Close the websocket (idempotent)."""
        self.closed = True
        self._conn.close()
        self._reader.cancel()


def _decode(raw: str | bytes) -> dict[str, Any] | None:
    """A JSON text frame, or the JSON part of a binary one (``nbufs``, offsets, parts)."""
    try:
        if isinstance(raw, bytes):
            (nbufs,) = struct.unpack("!I", raw[:4])
            offsets = struct.unpack(f"!{nbufs}I", raw[4 : 4 + 4 * nbufs])
            end = offsets[1] if nbufs > 1 else len(raw)
            raw = raw[offsets[0] : end].decode("utf-8")
        msg = json.loads(raw)
    except (ValueError, struct.error, IndexError):
        return None
    return msg if isinstance(msg, dict) else None
