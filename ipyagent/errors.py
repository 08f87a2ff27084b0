"""The exception tree: infrastructure failures only.

Errors the model can act on (a failing tool, an unknown tool, bad arguments, a denied
call) are *values* (``ToolResult(error=True)``), never exceptions. What raises is what
the loop cannot recover from by itself, mapped at the boundary to one of these::

    IpyagentError
    ├── ConfigError            a setting that cannot work (bad value, missing key)
    ├── ModelError             the model endpoint failed (after retries)
    │   ├── ModelConnectionError   could not connect / connection dropped
    │   ├── ModelTimeoutError      a time limit passed (Agent.first_token/idle/request_timeout)
    │   ├── ModelHTTPError         non-2xx status (.status_code)
    │   │   ├── RateLimitError         429
    │   │   ├── ServerError            5xx
    │   │   └── RequestRejected        other 4xx: bad request, auth, model not found
    │   ├── ModelStreamError       an error reported inside a 200 stream
    │   └── ModelResponseError     a reply that cannot be parsed
    ├── KernelError            the sibling kernel cannot be started or reached
    ├── ApprovalError          approval cannot be asked (e.g. a click needed from a blocking call)
    └── TranscriptError        a transcript cannot be read or written

Every message is one readable line; a key or Authorization header never appears in one.
"""

from __future__ import annotations

__all__ = [
    "IpyagentError",
    "ConfigError",
    "ModelError",
    "ModelConnectionError",
    "ModelTimeoutError",
    "ModelHTTPError",
    "RateLimitError",
    "ServerError",
    "RequestRejected",
    "ModelStreamError",
    "ModelResponseError",
    "KernelError",
    "ApprovalError",
    "TranscriptError",
]


class IpyagentError(Exception):
    """Base of every error ipyagent raises."""


class ConfigError(IpyagentError, ValueError):
    """A setting that cannot work."""


class ModelError(IpyagentError):
    """The model endpoint failed; ``url`` says which one (never the key)."""

    def __init__(self, message: str, *, url: str | None = None) -> None:
        self.url = url
        super().__init__(message if not url else f"{message} ({url})")


class ModelConnectionError(ModelError):
    """Could not connect to the endpoint, or the connection dropped mid-stream."""


class ModelTimeoutError(ModelError):
    """The endpoint did not answer in time."""


class ModelHTTPError(ModelError):
    """The endpoint answered with a non-2xx status."""

    def __init__(
        self, message: str, *, status_code: int, url: str | None = None, body: object = None
    ) -> None:
        self.status_code = status_code
        self.body = body
        super().__init__(f"HTTP {status_code}: {message}", url=url)


class RateLimitError(ModelHTTPError):
    """HTTP 429: too many requests."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: object) -> None:
        self.retry_after = retry_after
        super().__init__(message, **kw)  # type: ignore[arg-type]


class ServerError(ModelHTTPError):
    """HTTP 5xx."""


class RequestRejected(ModelHTTPError):
    """Any other 4xx: the request itself is wrong (bad parameter, auth, unknown model)."""


class ModelStreamError(ModelError):
    """An error reported inside an HTTP 200 stream."""


class ModelResponseError(ModelError):
    """A reply that cannot be parsed."""


class KernelError(IpyagentError):
    """The sibling kernel cannot be started or reached."""


class ApprovalError(IpyagentError):
    """Approval cannot be asked in this situation."""


class TranscriptError(IpyagentError):
    """A transcript cannot be read or written."""
