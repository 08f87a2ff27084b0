"""The Jupyter Server REST API as a remote kernel needs it: kernels, and one readable line per failure.

The token is read from the environment variable at each request and never kept: it goes
as an ``Authorization: token …`` header, only to the kernel URL's own origin (never in a
query string, never on a redirect: redirects are not followed), and no message, repr or
log line holds it. The environment's proxy settings are not used, so the token cannot
reach a proxy host either.
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator
from typing import Any
from urllib.parse import urlsplit

import httpx

from .._text import one_line, visible, without_credentials
from ..errors import KernelError

__all__ = ["RestClient", "KernelGone", "TokenAuth", "auth_header", "check_url", "origin", "said"]

_RETRIES = 2  # a keep-alive connection the server (or a proxy) closed: one more try for reads


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
        for attempt in range(_RETRIES):
            try:
                response = await self._client.request(method, target, content=content, timeout=limit)
                break
            except httpx.ConnectError as exc:
                raise KernelError(f"nothing is listening at {self.url} ({_reason(exc)})") from None
            except httpx.TimeoutException:
                raise KernelError(f"the Jupyter server at {self.url} did not answer {method} {path} "
                                  f"within {limit.read:g} s") from None
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                if method != "GET" or attempt == _RETRIES - 1:
                    raise KernelError(f"the connection to {self.url} dropped during {method} {path} "
                                      f"({_reason(exc)})") from None
        return self._decode(method, path, response, missing_ok)

    def _decode(self, method: str, path: str, response: httpx.Response, missing_ok: bool) -> Any:
        status = response.status_code
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
                              f"HTTP {status}: {_server_message(response, self.token_env)}")
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise KernelError(f"the Jupyter server at {self.url} answered {method} {path} with "
                              "something that is not JSON (is it a Jupyter server?)") from None

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.aclose()


def _reason(exc: BaseException) -> str:
    return visible(one_line(exc, 120)) or type(exc).__name__


def said(text: str, token_env: str, limit: int = 200) -> str:
    """What a server said (untrusted) for one of our lines: the token's value (in any form
    the secret scanner knows) replaced by ``[redacted $NAME]`` — a server, or a proxy in
    front of it, may echo the request's headers — then one line, visible, short."""
    from .._secrets import scanner, secret_values

    text, _ = scanner(secret_values(token_env)).redact(str(text))
    return visible(one_line(text, limit))


def _server_message(response: httpx.Response, token_env: str) -> str:
    """The server's own reason (untrusted text: the token out, one line, visible, short)."""
    try:
        body = response.json()
        text = body.get("message") or body.get("reason") or "" if isinstance(body, dict) else ""
    except ValueError:
        text = response.text
    return said(text or response.reason_phrase, token_env)
