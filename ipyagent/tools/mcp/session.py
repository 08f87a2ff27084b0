"""One MCP server's session: started, held open, called, and stopped on the engine loop.

The SDK's transports and ``ClientSession`` are anyio context managers whose cancel scopes
must be entered and exited by the same task. So each server is held open by one
long-lived task that owns an ``AsyncExitStack`` and waits for a stop event; calls made
from other tasks only use the session. A call that fails is followed by a ping: a server
that still answers refused the call (an error value), one that does not is dead. A stdio
server whose output ends (it exited) is marked dead at once, so its next use restarts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
import time
from typing import IO, Any, Literal

from ..._util.text import one_line
from ...context.items import ToolResult
from .config import ServerConfig

__all__ = ["Connection", "MCPServerError", "CallFailed", "describe_error", "to_tool_result"]

START_TIMEOUT = 60.0  # npx-launched servers may download themselves on first start

State = Literal["stopped", "starting", "running", "dead", "failed"]


class MCPServerError(Exception):
    """A server could not be started, or died (becomes a notice or an error value)."""


class Connection:
    """One MCP server: its holder task, session, tools and state (engine loop only)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.state: State = "stopped"
        self.tools: list[dict[str, Any]] = []  # wire form: name, description, inputSchema
        self.error = ""
        self.failed_at = 0.0
        self.starts = 0
        self.server_info: dict[str, Any] = {}
        self._session: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._stopping = False
        self._lock: asyncio.Lock | None = None
        self._stderr: IO[str] | None = None  # a temporary file: the last lines explain a death

    def __repr__(self) -> str:
        return f"<MCP server {self.config.name!r} {self.state}, {len(self.tools)} tools>"

    async def start(self) -> None:
        """Start (or restart) the server and list its tools; ``MCPServerError`` on failure."""
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            if self.state == "running":
                return
            await self._teardown()
            self.state, self.starts = "starting", self.starts + 1
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[list[dict[str, Any]]] = loop.create_future()
            ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # no "never retrieved"
            self._stop, self._stopping = asyncio.Event(), False
            self._task = loop.create_task(self._hold(ready), name=f"ipyagent-mcp-{self.config.name}")
            try:
                tools = await asyncio.wait_for(asyncio.shield(ready), START_TIMEOUT)
            except asyncio.TimeoutError:
                await self._teardown()
                raise self._failed(f"no answer within {START_TIMEOUT:g} s") from None
            except Exception as exc:
                await self._teardown()
                raise self._failed(describe_error(exc)) from None
            self.tools, self.state, self.error = tools, "running", ""

    def _failed(self, why: str) -> MCPServerError:
        self.state, self.failed_at = "failed", time.monotonic()
        self.error = why + self._stderr_tail()
        return MCPServerError(self.error)

    async def _hold(self, ready: asyncio.Future[list[dict[str, Any]]]) -> None:
        """Open the transport and session, publish the tools, wait; all in this one task."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                session = await self._open(stack)
                init = await session.initialize()
                info = getattr(init, "server_info", None) or getattr(init, "serverInfo", None)
                self.server_info = info.model_dump(mode="json", exclude_none=True) if info else {}
                tools = await _list_tools(session)
                self._session = session
                ready.set_result(tools)
                assert self._stop is not None
                await self._stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            elif not self._stopping:  # the session broke while idle: report, restart at next use
                self.state, self.error = "dead", describe_error(exc) + self._stderr_tail()
        finally:
            self._session = None
            if not ready.done():
                ready.set_exception(MCPServerError("stopped before it was ready"))

    async def _open(self, stack: contextlib.AsyncExitStack) -> Any:
        from mcp import ClientSession

        if self.config.url:
            streams = await _open_http(stack, self.config)
        else:
            from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client

            if self._stderr is not None:
                self._stderr.close()
            self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
            # The SDK's default environment (PATH, HOME, …) plus the configured variables:
            # the user's API keys are not handed to every server.
            params = StdioServerParameters(
                command=self.config.command, args=self.config.args, cwd=self.config.cwd,
                env={**get_default_environment(), **self.config.env})
            streams = await stack.enter_async_context(stdio_client(params, errlog=self._stderr))
            streams = (await self._watch_exit(stack, streams[0]), streams[1])
        return await stack.enter_async_context(ClientSession(streams[0], streams[1]))

    async def _watch_exit(self, stack: contextlib.AsyncExitStack, read: Any) -> Any:
        """``read`` relayed, marking the server dead the moment its output ends.

        A stdio server that exits while idle is otherwise noticed only by the next call,
        which then fails; marked dead, that call restarts it first instead.
        """
        import anyio

        send, receive = anyio.create_memory_object_stream[Any](0)

        async def relay() -> None:
            async with send:
                async for message in read:
                    await send.send(message)
            if not self._stopping and self.state == "running":
                self.state, self.error = "dead", "it exited" + self._stderr_tail()

        group = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(group.cancel_scope.cancel)  # unwound before the group's exit waits
        group.start_soon(relay)
        return receive

    def _stderr_tail(self, limit: int = 600) -> str:
        if self._stderr is None:
            return ""
        try:
            fd = self._stderr.fileno()
            size = os.fstat(fd).st_size
            start = max(0, size - limit)
            # pread leaves the shared file offset alone (the server process writes through it).
            tail = os.pread(fd, size - start, start).decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""
        return f"; its stderr ended with: {tail[-limit:]}" if tail else ""

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        """The wire-form ``CallToolResult``; ``MCPServerError`` when the server died."""
        session = self._session
        if self.state != "running" or session is None:
            raise MCPServerError(f"it is {self.state}")
        try:
            result = await asyncio.wait_for(session.call_tool(tool, arguments), timeout)
        except Exception as exc:
            # Some transports (mcp 1.x over HTTP) leave a call to a vanished server hanging
            # until the timeout; either way a ping tells a slow or refusing server from a dead one.
            if await self._alive():
                if isinstance(exc, asyncio.TimeoutError):
                    raise
                raise CallFailed(describe_error(exc)) from None  # a protocol-level error answer
            await self._teardown()
            self.state = "dead"
            why = "no answer" if isinstance(exc, asyncio.TimeoutError) else describe_error(exc)
            self.error = why + self._stderr_tail()
            raise MCPServerError(self.error) from None
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)  # type: ignore[no-any-return]

    async def _alive(self) -> bool:
        session = self._session
        if session is None:
            return False
        try:
            await asyncio.wait_for(session.send_ping(), 3)
        except Exception:
            return False
        return True

    async def stop(self) -> None:
        """Stop the server (its process, or its HTTP session)."""
        await self._teardown()
        self.state, self.tools = "stopped", []
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    async def _teardown(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        if self._stop is not None:
            self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), 10)
        except asyncio.TimeoutError:  # a transport that will not close: cancel its task
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        except Exception:
            pass  # _hold reports its own failures


class CallFailed(Exception):
    """The server answered the call with a protocol error (it is still alive)."""


async def _open_http(stack: contextlib.AsyncExitStack, config: ServerConfig) -> Any:
    from mcp.client import streamable_http as sh

    if hasattr(sh, "streamable_http_client"):  # mcp >= 1.2x and 2.x
        client = None
        if config.headers:
            client = sh.create_mcp_http_client(headers=config.headers)
            await stack.enter_async_context(client)
        return await stack.enter_async_context(sh.streamable_http_client(config.url, http_client=client))
    return await stack.enter_async_context(  # older 1.x
        sh.streamablehttp_client(config.url, headers=config.headers or None))  # type: ignore[attr-defined]


async def _list_tools(session: Any) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    cursor = None
    for _ in range(100):  # a server that pages forever must not hang the start
        if cursor is None:
            result = await session.list_tools()
        else:
            from mcp import types

            try:
                result = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
            except TypeError:  # older 1.x
                result = await session.list_tools(cursor=cursor)
        data = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        tools += data.get("tools", [])
        cursor = data.get("nextCursor")
        if not cursor:
            break
    return tools


def describe_error(exc: BaseException) -> str:
    """One line for an exception, looking inside (anyio) exception groups."""
    while getattr(exc, "exceptions", None):  # an (anyio) exception group: its first leaf
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    text = one_line(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- results -----------------------------------------------------------------------------
def to_tool_result(data: dict[str, Any], *, send_images: bool = False) -> ToolResult:
    """A ``CallToolResult`` (wire form) as a ToolResult: text joined, images as placeholders."""
    texts: list[str] = []
    outputs: list[dict[str, Any]] = []
    images: list[dict[str, str]] = []
    pending: list[str] = []  # text since the last image, as one stream output

    def flush() -> None:
        if pending:
            outputs.append({"output_type": "stream", "name": "stdout",
                            "text": "\n".join(pending) + "\n"})
            pending.clear()

    for block in data.get("content", []):
        kind = block.get("type")
        if kind == "text":
            piece = str(block.get("text", ""))
        elif kind in ("image", "audio"):
            mime = str(block.get("mimeType") or f"{kind}/*")
            size = len(block.get("data", "")) * 3 // 4
            piece = f"[{mime} {kind}, {size} bytes]"
            if kind == "image":
                flush()
                outputs.append({"output_type": "display_data", "metadata": {},
                                "data": {mime: block.get("data", ""), "text/plain": piece}})
                if send_images and mime in ("image/png", "image/jpeg"):
                    images.append({"mime": mime, "data": str(block.get("data", ""))})
                texts.append(piece)
                continue
        elif kind == "resource":
            res = block.get("resource", {})
            piece = str(res["text"]) if "text" in res else (
                f"[resource {res.get('uri', '')} ({res.get('mimeType', 'binary')}), not shown]")
        elif kind == "resource_link":
            piece = f"[resource link: {block.get('name', '')} {block.get('uri', '')}]".replace("  ", " ")
        else:
            piece = f"[{kind} content]"
        texts.append(piece)
        pending.append(piece)
    structured = data.get("structuredContent")
    if not texts and structured is not None:
        texts.append(json.dumps(structured, ensure_ascii=False))
    error = bool(data.get("isError"))
    text = "\n".join(texts) or ("the tool reported an error without a message" if error
                                else "(no output)")
    if any(o["output_type"] == "display_data" for o in outputs):
        flush()
    else:
        outputs = []  # text only: the display shows `output` itself
    meta: dict[str, Any] = {"images": images} if images else {}
    return ToolResult(call_id="", output=("Error: " if error else "") + text, error=error,
                      outputs=outputs, meta=meta)
