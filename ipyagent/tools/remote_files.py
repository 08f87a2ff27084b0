"""The file tools on a remote Jupyter Server's files (``Agent.workspace = "remote"``), through
its contents API (``/api/contents``), so they act where the code of ``Agent.kernel_url`` runs.

The server confines every path to its root directory (and hides dot-files unless told
otherwise); paths are also checked here first: absolute paths and ``..`` are refused with
the same error values the local tools give. A bare Kernel Gateway has no contents API:
that is one line, not a crash. The token is sent as for the kernel (``kernel._rest``).

What the model reads names the place as ``SERVER``, never the URL: the model needs to know
that the files live on the server, not where it is (the URL may carry a host name the user
keeps private, and all the model reads goes to its provider). The user meets the URL in
the banner and in ``repr``.
"""

from __future__ import annotations

import json
import posixpath
import time
from typing import Any
from urllib.parse import quote

import httpx

from .._util.text import one_line, visible
from ..context.items import ToolCall, ToolResult
from ..kernel._rest import SERVER, TokenAuth, check_url, masked, said
from .files import edit_preview, record, replace_once, unified

__all__ = ["RemoteWorkspace", "SERVER", "Unreachable"]


READ_CHARS = 16_000  # as the local read_file
LIST_ENTRIES = 500
TEXT_LIMIT = 10 * 1024 * 1024  # as the local tools' EDIT_LIMIT: no 1 GB file pulled into this kernel
# One answer's body: a file of TEXT_LIMIT as a JSON string (\u escapes: up to 6 bytes a byte),
# whatever size the server claimed for it first; more is not read.
ANSWER_LIMIT = 6 * TEXT_LIMIT + 1024 * 1024


class RemoteWorkspaceError(ValueError):
    """A remote file call the model can act on (a missing file, a refused path, no contents API)."""


def _size(n: int) -> str:
    """As the local tools say it: '120 bytes', '1.5 KB', '2.0 MB'."""
    if n < 1024:
        return f"{n} bytes"
    return f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MB"


def _lines(text: str) -> str:
    n = len(text.splitlines())
    return f"{n} line{'s' if n != 1 else ''}"


class RemoteWorkspace:
    """read/write/list/edit on the server at ``url`` (its root directory is the workspace)."""

    def __init__(self, url: str, token_env: str, timeout: float = 30.0) -> None:
        self.url = check_url(url)
        self.timeout = timeout  # for each answer as a whole, not each read of it
        self.token_env = token_env
        self._client = httpx.Client(auth=TokenAuth(self.url, token_env), timeout=timeout,
                                    follow_redirects=False, trust_env=False)

    def __repr__(self) -> str:
        return f"<RemoteWorkspace {self.url}/api/contents>"

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()

    def _private(self, text: str) -> str:
        """``text`` (an error, or a server's words) with the server's URL and host as ``SERVER``."""
        return masked(text, self.url)

    # -- the wire ---------------------------------------------------------------------
    def _rel(self, path: str) -> str:
        raw = str(path).replace("\\", "/")
        if raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
            raise RemoteWorkspaceError(f"{path!r} is absolute: give a path relative to the server's "
                                       "root directory (the remote workspace)")
        if ".." in raw.split("/"):
            raise RemoteWorkspaceError(f"{path!r} leads outside the remote workspace ('..' is refused)")
        rel = posixpath.normpath(raw) if raw.strip() else "."
        return "" if rel == "." else rel

    def _call(self, method: str, rel: str, params: dict[str, str] | None = None,
              body: Any = None, missing_ok: bool = False) -> Any:
        target = f"{self.url}/api/contents/{quote(rel)}" if rel else f"{self.url}/api/contents"
        try:
            status, reason, content = self._exchange(method, target, params, body)
        except httpx.ConnectError as exc:
            raise RemoteWorkspaceError(f"nothing is listening at {SERVER} "
                                       f"({self._private(visible(one_line(exc, 120)))})") from None
        except httpx.HTTPError as exc:
            raise RemoteWorkspaceError(f"the request to {SERVER} failed: "
                                       f"{self._private(visible(one_line(exc, 120)))}") from None
        if status == 404 and missing_ok:
            return None
        if status in (401, 403):
            root = self._contents_status()
            if root in (401, 403):  # the API is there and refuses us: the token, not the file
                raise RemoteWorkspaceError(f"{SERVER} refused the token (HTTP {root}): check the "
                                           f"token in ${self.token_env}")
            if root != 200:
                raise RemoteWorkspaceError(
                    f"{SERVER} has no contents API (a Kernel Gateway?): Agent.workspace = "
                    "'remote' needs a Jupyter Server; the file tools cannot reach its files")
            raise RemoteWorkspaceError(f"{SERVER} refused {method} {rel or '.'!r} "
                                       f"(HTTP {status}): a hidden file, or check the token in ${self.token_env}")
        if status == 404:
            if not self._has_contents():
                raise RemoteWorkspaceError(
                    f"{SERVER} has no contents API (a Kernel Gateway?): "
                    "Agent.workspace = 'remote' needs a Jupyter Server")
            raise FileNotFoundError(rel)
        if status >= 400:
            try:
                answer = json.loads(content)
                message = (answer.get("message") if isinstance(answer, dict) else "") or ""
            except ValueError:
                message = ""
            # Untrusted: a server may echo the request's headers, the token and the host with them.
            shown = self._private(said(message or reason, self.token_env))
            raise RemoteWorkspaceError(f"{rel or '.'!r}: {shown} (HTTP {status})")
        if not content:
            return None
        try:
            answer = json.loads(content)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise RemoteWorkspaceError(f"{SERVER} answered {method} {rel or '.'!r} with something that is "
                                       "not a contents model (is it a Jupyter Server?)")
        return answer

    def _exchange(self, method: str, target: str, params: dict[str, str] | None,
                  body: Any) -> tuple[int, str, bytes]:
        """(status, reason, body) of one request: at most ANSWER_LIMIT bytes, within ``timeout``."""
        give_up = time.monotonic() + self.timeout
        with self._client.stream(method, target, params=params, json=body) as response:
            content = bytearray()
            for chunk in response.iter_bytes():
                content += chunk
                if len(content) > ANSWER_LIMIT:
                    raise RemoteWorkspaceError(f"{SERVER} answered {method} with more than "
                                               f"{_size(ANSWER_LIMIT)}; it was not read")
                if time.monotonic() > give_up:
                    raise RemoteWorkspaceError(f"{SERVER} did not finish its answer to {method} "
                                               f"within {self.timeout:g} s")
            return response.status_code, response.reason_phrase, bytes(content)

    def _contents_status(self) -> int | None:
        """The HTTP status of the contents API's root (None: no answer)."""
        try:
            return self._client.get(f"{self.url}/api/contents", params={"content": "0"}).status_code
        except httpx.HTTPError:
            return None

    def _has_contents(self) -> bool:
        return self._contents_status() == 200

    def _text(self, rel: str, path: str) -> str | None:
        """The text of file ``rel`` (None: it does not exist); binary and directories refused."""
        head = self._call("GET", rel, {"content": "0"}, missing_ok=True)
        if head is None:
            return None
        size = head.get("size")
        if head.get("type") == "file" and isinstance(size, int) and size > TEXT_LIMIT:
            raise RemoteWorkspaceError(f"{path!r} is {_size(size)}, too large for the file tools "
                                       f"(over {_size(TEXT_LIMIT)}); use the python tool")
        # No type or format asked: the server then says directory, or text vs base64 (binary).
        model = self._call("GET", rel, {"content": "1"}, missing_ok=True)
        if model is None:
            return None
        if model.get("type") == "directory":
            raise IsADirectoryError(rel)
        if model.get("format") != "text" or not isinstance(model.get("content"), str):
            raise RemoteWorkspaceError(f"{path!r} looks binary; use the python tool to inspect it")
        return str(model["content"])

    def _ensure_dirs(self, rel: str) -> None:
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            model = self._call("GET", sub, {"content": "0"}, missing_ok=True)
            if model is None:
                self._call("PUT", sub, body={"type": "directory"})
            elif model.get("type") != "directory":
                raise RemoteWorkspaceError(f"{sub!r} is a file, not a directory")

    def _put(self, rel: str, text: str) -> None:
        self._call("PUT", rel, body={"type": "file", "format": "text", "content": text})

    # -- the four tools ----------------------------------------------------------------
    def read_file(self, path: str, start_line: int = 1) -> Any:
        rel = self._rel(path)
        text = self._text(rel, path)
        if text is None:
            raise FileNotFoundError(rel)
        lines = text.splitlines(keepends=True)
        start = max(1, int(start_line))
        if start > 1 and start > len(lines):
            return _error(f"{path!r} has fewer than {start} lines")
        taken: list[str] = []
        used = 0
        last = start - 1
        for number, line in enumerate(lines[start - 1:], start):
            if used + len(line) > READ_CHARS and taken:
                break
            taken.append(line[:READ_CHARS])
            used += len(line)
            last = number
        shown = "".join(taken)
        if last < len(lines) or start > 1:
            more = last < len(lines)
            note = (f"[showing lines {start}–{last} of {rel} ({_size(len(text.encode('utf-8')))})"
                    + (f"; read_file(path, start_line={last + 1}) for more]" if more else "; end of file]"))
            return shown + ("" if shown.endswith("\n") else "\n") + note
        return shown if shown else "(empty file)"

    def write_file(self, path: str, content: str) -> Any:
        if str(path).endswith("/"):
            raise RemoteWorkspaceError(f"{path!r} names a directory; give the file's name")
        rel = self._rel(path)
        if not rel:
            raise RemoteWorkspaceError(f"{path!r} names the workspace itself; give a file's name")
        existed = self._call("GET", rel, {"content": "0"}, missing_ok=True) is not None
        self._ensure_dirs(rel)
        self._put(rel, content)
        return _written(rel, content, f"{'replaced' if existed else 'created'} {rel} on {SERVER} "
                        f"({_size(len(content.encode('utf-8')))}, {_lines(content)})")

    def list_files(self, path: str = ".") -> Any:
        rel = self._rel(path)
        model = self._call("GET", rel, {"type": "directory", "content": "1"}, missing_ok=True)
        if model is None:
            raise RemoteWorkspaceError(f"{path!r} is not a directory (it does not exist)")
        if model.get("type") != "directory":
            raise RemoteWorkspaceError(f"{path!r} is not a directory")
        listed = model.get("content")
        entries = sorted((e for e in (listed if isinstance(listed, list) else []) if isinstance(e, dict)),
                         key=lambda e: (e.get("type") != "directory", str(e.get("name", "")).lower()))
        lines = [f"{e.get('name')}/" if e.get("type") == "directory" else
                 f"{e.get('name')}  ({_size(e['size'] if isinstance(e.get('size'), int) else 0)})"
                 for e in entries[:LIST_ENTRIES]]
        if len(entries) > LIST_ENTRIES:
            lines.append(f"[… {len(entries) - LIST_ENTRIES} more entries not shown]")
        header = f"{rel or '.'}/ ({len(entries)} entries, on {SERVER})"
        return "\n".join([header, *lines]) if lines else f"{header}: empty"

    def edit_file(self, path: str, old: str, new: str) -> Any:
        rel = self._rel(path)
        if not old:
            raise RemoteWorkspaceError("`old` is empty; give the exact text to replace "
                                       "(write_file creates or overwrites whole files)")
        text = self._text(rel, path)
        if text is None:
            raise FileNotFoundError(rel)
        edited, line = replace_once(text, old, new, rel, RemoteWorkspaceError)
        self._put(rel, edited)
        return _written(rel, edited, f"edited {rel} on {SERVER}: replaced {old.count(chr(10)) + 1} "
                        f"line(s) at line {line} with {new.count(chr(10)) + 1} line(s)")

    def call(self, name: str, kwargs: dict[str, Any]) -> Any:
        """Run the file tool ``name``; the model's mistakes come back as error values."""
        try:
            return getattr(self, name)(**kwargs)
        except RemoteWorkspaceError as exc:
            return _error(str(exc))
        except IsADirectoryError:
            return _error(f"{kwargs.get('path')!r} is a directory; use list_files")
        except FileNotFoundError:
            return _error(f"{kwargs.get('path')!r} does not exist in the remote workspace; "
                          "list_files shows what does")

    def preview(self, call: ToolCall) -> str | None:
        """The diff a write_file/edit_file call would make on the server, or None."""
        if call.name not in ("write_file", "edit_file"):
            return None
        args = call.arguments
        try:
            rel = self._rel(str(args.get("path", "")))
            before = self._text(rel, rel) or ""
        except (RemoteWorkspaceError, OSError) as exc:
            return f"(no preview: {exc})"
        if call.name == "write_file":
            after: str | None = str(args.get("content", ""))
        else:
            after = edit_preview(before, str(args.get("old", "")), str(args.get("new", "")))
        if after is None:
            return "(no preview: `old` does not occur exactly once)"
        return unified(before, after, rel)


class Unreachable:
    """The remote workspace when it cannot be used: each file call is this one error value."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return f"<Unreachable remote workspace: {self.why}>"

    def call(self, name: str, kwargs: dict[str, Any]) -> Any:
        return _error(self.why)

    def preview(self, call: ToolCall) -> str | None:
        return f"(no preview: {self.why})"

    def close(self) -> None:
        """Nothing to close."""


def _error(message: str) -> ToolResult:
    # As the local tools' errors (Toolbox fills in call_id and name).
    return ToolResult(call_id="", output=f"Error: {message}", error=True)


def _written(rel: str, text: str, said: str) -> ToolResult:
    """What the model reads, and the file as left (for transcripts), as the local tools do."""
    return ToolResult(call_id="", output=said, meta={"file": record(rel, text)})
