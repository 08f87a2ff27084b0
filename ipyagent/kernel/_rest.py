"""The Jupyter Server REST API as a remote kernel needs it: kernels, and one readable line per failure.

The token is read from the environment variable at each request and never kept: it goes
as an ``Authorization: token …`` header, only to the kernel URL's own origin (never in a
query string, never on a redirect: redirects are not followed), and no message, repr or
log line holds it. The environment's proxy settings are not used, so the token cannot
reach a proxy host either. What a server answers is bounded: ``_MAX_ANSWER`` bytes (a
kernel's model is a few hundred), read within the request's timeout as a whole (a server
that trickles a byte at a time does not hold a call for ever).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Generator
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpx

from .._util.text import one_line, visible, without_credentials
from ..errors import KernelError

__all__ = ["RestClient", "KernelGone", "TokenAuth", "SERVER", "auth_header", "check_url", "masked",
           "origin", "said"]

_RETRIES = 2  # a keep-alive connection the server (or a proxy) closed: one more try for reads
_MAX_ANSWER = 1024 * 1024  # bytes of one REST answer; more is not read


class _TooLarge(Exception):
    """The answer's body passed ``_MAX_ANSWER``."""


class KernelGone(KernelError):
    """The server has no kernel of that id any more (HTTP 404): deleted, culled or never there."""


def check_url(url: str) -> str:
    """``url`` without a trailing slash; ValueError for anything but a plain http(s) origin + path."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"kernel_url must be an http:// or https:// URL, not "
                         f"{visible(one_line(without_credentials(url), 80))!r}")
    if parts.username or parts.password or parts.query or parts.fragment:
        # A token in the URL would end up in logs and banners: it goes in kernel_token_env.
        raise ValueError("kernel_url must not carry credentials, a query or a fragment: "
                         "put the token in the variable named by Agent.kernel_token_env")
    return url.strip().rstrip("/")


def origin(url: str | httpx.URL) -> tuple[str, str, int]:
    """(scheme, host, port) of ``url``, the default port filled in."""
    u = httpx.URL(str(url))
    scheme = {"ws": "http", "wss": "https"}.get(u.scheme, u.scheme)
    return scheme, (u.host or "").lower(), u.port or (443 if scheme == "https" else 80)


class TokenAuth(httpx.Auth):
    """Adds the token header to requests for one origin only, read from the environment each time."""

    def __init__(self, url: str, token_env: str) -> None:
        self._origin = origin(url)
        self._env = token_env

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        header = auth_header(self._env)
        if header and origin(request.url) == self._origin:
            request.headers.update(header)
        yield request


def auth_header(token_env: str) -> dict[str, str]:
    """The Authorization header for the token in ``$token_env`` (empty when it is unset)."""
    token = os.environ.get(token_env, "") if token_env else ""
    return {"Authorization": f"token {token}"} if token else {}


class RestClient:
    """``/api/kernels`` of one Jupyter Server or gateway, over one ``httpx.AsyncClient``."""

    def __init__(self, url: str, token_env: str, *, timeout: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = check_url(url)
        self.token_env = token_env
        self._client = httpx.AsyncClient(
            auth=TokenAuth(self.url, token_env), timeout=timeout, follow_redirects=False,
            trust_env=False, transport=transport, headers={"Content-Type": "application/json"})

    def __repr__(self) -> str:
        return f"<RestClient {self.url} token from ${self.token_env}>"

    async def request(self, method: str, path: str, body: Any = None, *,
                      missing_ok: bool = False, timeout: float | None = None) -> Any:
        """``method`` on ``url + path``; the decoded JSON (None when empty). Raises KernelError.
        ``timeout`` replaces the client's for this request (a gateway's POST waits for its pod)."""
        target = f"{self.url}{path}"
        content = None if body is None else json.dumps(body)
        limit = self._client.timeout if timeout is None else httpx.Timeout(timeout)
        total = limit.read  # the whole answer, not each read of it
        for attempt in range(_RETRIES):
            try:
                answer = await asyncio.wait_for(self._exchange(method, target, content, limit), total)
                break
            except httpx.ConnectError as exc:
                raise KernelError(f"nothing is listening at {self.url} ({_reason(exc)})") from None
            except (httpx.TimeoutException, asyncio.TimeoutError):
                raise KernelError(f"the Jupyter server at {self.url} did not answer {method} {path} "
                                  f"within {total:g} s") from None
            except _TooLarge:
                raise KernelError(f"the Jupyter server at {self.url} answered {method} {path} with more "
                                  f"than {_MAX_ANSWER // 1024 // 1024} MiB; it was not read") from None
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                if method != "GET" or attempt == _RETRIES - 1:
                    raise KernelError(f"the connection to {self.url} dropped during {method} {path} "
                                      f"({_reason(exc)})") from None
        return self._decode(method, path, *answer, missing_ok)

    async def _exchange(self, method: str, target: str, content: str | None,
                        limit: httpx.Timeout) -> tuple[int, str, bytes]:
        """(status, reason, body) of one request, the body read up to ``_MAX_ANSWER`` bytes."""
        async with self._client.stream(method, target, content=content, timeout=limit) as response:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > _MAX_ANSWER:
                    raise _TooLarge
            return response.status_code, response.reason_phrase, bytes(body)

    def _decode(self, method: str, path: str, status: int, reason: str, body: bytes, missing_ok: bool) -> Any:
        if status in (401, 403):
            set_ = bool(os.environ.get(self.token_env)) if self.token_env else False
            why = (f"check the token in ${self.token_env}" if set_
                   else f"it needs a token: set ${self.token_env or 'JUPYTER_TOKEN'}")
            raise KernelError(f"the Jupyter server at {self.url} refused {method} {path} "
                              f"(HTTP {status}): {why}")
        if status == 404:
            if missing_ok:
                return None
            raise KernelGone(f"the Jupyter server at {self.url} has no {path} (HTTP 404)")
        if 300 <= status < 400:
            raise KernelError(f"the Jupyter server at {self.url} redirected {method} {path} "
                              f"(HTTP {status}); redirects are not followed: give the final URL")
        if status >= 400:
            raise KernelError(f"the Jupyter server at {self.url} answered {method} {path} with "
                              f"HTTP {status}: {_server_message(body, reason, self.token_env)}")
        if not body:
            return None
        try:
            return json.loads(body)
        except ValueError:
            raise KernelError(f"the Jupyter server at {self.url} answered {method} {path} with "
                              "something that is not JSON (is it a Jupyter server?)") from None

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.aclose()


def _reason(exc: BaseException) -> str:
    return visible(one_line(exc, 120)) or type(exc).__name__


SERVER = "the remote kernel's server"  # the words for it in what the model reads


def masked(text: str, url: str) -> str:
    """``text`` with the server's URL, host:port, host and base path (``/user/alice``) as
    ``SERVER``: what the model reads (and its provider receives) never names an internal
    host; the user sees the URL in the banner and reprs. Each in any case (a host name is
    case-blind: libraries and servers say it lower-cased) and as it goes on the wire (the
    host's IDNA form, the path percent-encoded)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit(":", 1)[0] if parts.netloc.rsplit(":", 1)[-1].isdigit() else parts.netloc
    path = parts.path.rstrip("/")
    names = {url.rstrip("/"), parts.netloc, host, path, quote(path, safe="/"), unquote(path)}
    try:
        wire = httpx.URL(url)  # as sent: the IDNA host, the percent-encoded path
        raw = wire.raw_host.decode("ascii")
        names |= {str(wire).rstrip("/"), raw, f"{raw}:{wire.port}" if wire.port else raw,
                  wire.raw_path.decode("ascii").rstrip("/")}
    except (httpx.InvalidURL, UnicodeError, ValueError):
        pass
    # Longest first; a name of under four characters would mangle words and is no secret.
    found = sorted({n for n in names if len(n) >= 4}, key=len, reverse=True)
    if not found:
        return text
    return re.sub("|".join(map(re.escape, found)), lambda _: SERVER, text, flags=re.IGNORECASE)


def said(text: str, token_env: str, limit: int = 200) -> str:
    """What a server said (untrusted) for one of our lines: the token's value (in any form
    the secret scanner knows) replaced by ``[redacted $NAME]`` — a server, or a proxy in
    front of it, may echo the request's headers — then one line, visible, short."""
    from ..trust.secrets import scanner, secret_values

    text, _ = scanner(secret_values(token_env)).redact(str(text))
    return visible(one_line(text, limit))


def _server_message(body: bytes, reason: str, token_env: str) -> str:
    """The server's own reason (untrusted text: the token out, one line, visible, short)."""
    try:
        answer = json.loads(body)
        text = answer.get("message") or answer.get("reason") or "" if isinstance(answer, dict) else ""
    except ValueError:
        text = body.decode("utf-8", "replace")
    return said(text or reason, token_env)
