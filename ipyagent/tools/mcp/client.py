"""MCP servers as tools, through the official ``mcp`` SDK (the optional ``mcp`` extra).

Servers come from ``Agent.mcp_servers`` and from ``.ipyagent/mcp.json`` or ``mcp.json``
beside the notebook (``config``). Their tools are offered to the model as
``server__tool`` and go through the same approval as any tool; what they return, and how
they fail, are values. Every session lives on the engine loop (``_util.eventloop``), one holder task
per server (``session``). Servers start lazily — at the first step, or with
``%agent mcp`` — and a server found dead is reported by the call that found it and
restarted at the next use. ``Agent.close()`` stops them all. Servers from a file beside
the notebook start only once you agreed to that file as it is (``trust``): a run asks
through the approval hook's ``confirm_mcp`` (buttons, terminal prompt), ``trust()`` agrees
outright, and where nobody can be asked they stay stopped with one line saying how to allow.
"""

from __future__ import annotations

import asyncio
import copy
import html
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from ..._util import eventloop as _eventloop
from ..._util.stamps import Stamp, settled, stamp
from ...context.events import Notice
from ...context.items import ToolCall, ToolResult
from ...errors import ConfigError
from ..base import Tool, Toolbox
from .config import CONFIG_FILES, ServerConfig, load_configs, parse_servers, tool_name
from .session import CallFailed, Connection, MCPServerError, to_tool_result
from .trust import TrustRequest, is_trusted, requests_for, trust_file_name

__all__ = ["MISSING", "MCPAgent", "MCPUnavailable", "MCPManager", "ServerConfig", "load_configs",
           "parse_servers", "sdk_available", "sdk_problem", "tool_name", "to_tool_result"]


class MCPAgent(Protocol):
    """What ``MCPManager`` uses of ``engine.agent.Agent`` (a layer above: named, not imported)."""

    @property
    def tools(self) -> Toolbox: ...
    @property
    def mcp_servers(self) -> dict[str, Any]: ...
    @property
    def mcp_files(self) -> bool: ...
    @property
    def cwd(self) -> str: ...
    @property
    def tool_timeout(self) -> float: ...
    @property
    def send_images(self) -> bool: ...

MISSING = "MCP servers need the mcp package: pip install 'ipyagent[mcp]'"
RETRY_FAILED_AFTER = 30.0  # a server that failed to start is retried at most this often


class MCPUnavailable(ConfigError):
    """The ``mcp`` package is not installed."""


def sdk_problem() -> str | None:
    """Why the ``mcp`` SDK cannot be used here, or None when it can."""
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name in ("mcp", None):
            return MISSING
        # Installed but broken, e.g. an old mcp beside a newer pydantic.
        return f"the mcp package could not be imported ({exc}); try pip install -U 'ipyagent[mcp]'"
    return None


def sdk_available() -> bool:
    """True when the ``mcp`` SDK can be imported."""
    return sdk_problem() is None


@dataclass
class _Snapshot:
    """What ``MCPManager._read`` found, and what it depended on."""

    key: tuple[str | None, list[str], list[Stamp | None]]
    configured: Any  # a copy of Agent.mcp_servers (a dict may be changed in place)
    configs: dict[str, ServerConfig]
    problems: list[str]
    requests: list[TrustRequest]  # the config files not trusted as they are


class MCPManager:
    """The MCP servers of one agent and the tools they add to ``agent.tools``."""

    def __init__(self, agent: MCPAgent) -> None:
        self.agent = agent
        self.connections: dict[str, Connection] = {}
        self.problems: list[str] = []
        self._registered: set[str] = set()
        self._noted: set[str] = set()  # notices already shown, so each shows once
        self.untrusted: list[TrustRequest] = []  # config files nobody agreed to: not started
        self._declined: set[str] = set()  # digests refused this session: not asked again
        self._snapshot: _Snapshot | None = None

    def __repr__(self) -> str:
        untrusted = [f"  ! {r.refused('not trusted yet')}" for r in self.untrusted]
        if not self.connections:
            if untrusted:
                return "\n".join(["MCP servers: none started", *untrusted,
                                  *(f"  ! {p}" for p in self.problems)])
            return "\n".join(["MCP servers: none configured — set Agent.mcp_servers or add "
                              ".ipyagent/mcp.json (or mcp.json) in this directory",
                              *(f"  ! {p}" for p in self.problems)])
        return "\n".join([f"MCP servers ({len(self.connections)}):", *(
            f"  {name} [{c.config.transport}] {c.state}: "
            + (", ".join(tool_name(name, t["name"]) for t in c.tools) or c.error or "no tools")
            for name, c in self.connections.items()), *untrusted,
            *(f"  ! {p}" for p in self.problems)])

    def _directory(self) -> Path:
        return Path(self.agent.cwd or os.getcwd())

    def _read(self) -> _Snapshot:
        """The servers configured now and the files' trust state, reused while nothing changed.

        Every step asks; reading, hashing and parsing ``mcp.json`` and the trust list each
        time cost more than the rest of a step. The answer is kept while the settings, the
        directory and the stamps of both config-file candidates (and of the trust list, when
        one of them exists) are the same (``_util.stamps``), so an edited, added or removed file
        is read at the next step.
        """
        directory = (self.agent.cwd or os.getcwd()) if self.agent.mcp_files else None
        paths = [os.path.join(directory, rel) for rel in CONFIG_FILES] if directory else []
        stamps = [stamp(p) for p in paths]
        if any(stamps):  # the trust list matters only to a config file's servers
            paths.append(trust_file_name())
            stamps.append(stamp(paths[-1]))
        key = (directory, paths, stamps)
        configured = self.agent.mcp_servers
        old = self._snapshot
        if old is not None and old.key == key and old.configured == configured:
            return old
        configs, problems = load_configs(configured, directory)
        requests = requests_for(configs)
        for request in requests:
            _, problem = is_trusted(request.path, request.sha256)
            if problem and problem not in problems:
                problems.append(problem)  # a corrupt trust list: said with the others
        snapshot = _Snapshot(key, copy.deepcopy(configured), configs, problems, requests)
        # Stamps taken before reading: a change since then shows at the next step. One too
        # recent to tell from a further change in the same clock tick is never reused.
        self._snapshot = snapshot if settled(stamps) else None
        return snapshot

    async def _configure(self, emit: Callable[[Any], None] | None = None) -> None:
        snapshot = self._read()
        configs, self.problems = dict(snapshot.configs), list(snapshot.problems)
        await self._keep_trusted(configs, snapshot.requests, emit)
        for name in list(self.connections):
            conn = self.connections[name]
            if name not in configs or not conn.config.same_server(configs[name]):
                await conn.stop()
                del self.connections[name]
        for name, config in configs.items():
            self.connections.setdefault(name, Connection(config)).config = config

    async def _keep_trusted(self, configs: dict[str, ServerConfig], requests: list[TrustRequest],
                            emit: Callable[[Any], None] | None) -> None:
        """Drop from ``configs`` the servers of ``requests`` (files nobody agreed to);
        ``emit``: ask first."""
        from .trust import trust

        self.untrusted = []
        for request in requests:
            if emit is not None and request.sha256 not in self._declined:
                answer = await self._ask(request)
                if answer is True:
                    note = trust(request)
                    self._note(emit, f"MCP: trusted {request.path} as it is now; its servers "
                                     "start" + (f" ({note})" if note else ""), "info")
                    continue
                self._declined.add(request.sha256)
                why = answer if isinstance(answer, str) and answer else "the answer was no"
                self._note(emit, request.refused(why), "warning")
            self.untrusted.append(request)
            for config in request.servers:
                configs.pop(config.name, None)

    async def _ask(self, request: TrustRequest) -> bool | str:
        """The approval hook's answer (True, or why not); with no way to ask: why not."""
        confirm = getattr(getattr(self.agent, "approval_hook", None), "confirm_mcp", None)
        if confirm is None:
            return "nothing here can ask you (no notebook buttons, no terminal prompt)"
        try:
            return await confirm(request)  # type: ignore[no-any-return]
        except Exception as exc:  # noqa: BLE001 - a broken prompt starts nothing, stops nothing
            return f"the prompt failed ({exc})"

    def trust(self) -> MCPManager:
        """Agree to the config file beside the notebook as it is now, then start its servers."""
        from .config import find_config_file
        from .trust import trust

        path = find_config_file(self._directory()) if self.agent.mcp_files else None
        if path is None:
            raise ConfigError(f"no .ipyagent/mcp.json or mcp.json in {self._directory()} to "
                              "trust" + ("" if self.agent.mcp_files else " (Agent.mcp_files is off)"))
        configs, _ = load_configs({}, self._directory())
        for request in requests_for(configs):
            trust(request)
            self._declined.discard(request.sha256)
        return self.list()

    def untrust(self) -> MCPManager:
        """Forget the agreement to the config file beside the notebook; stop its servers."""
        from .config import find_config_file
        from .trust import untrust

        path = find_config_file(self._directory())
        if path is not None:
            untrust(path)
        _eventloop.run_sync(self._configure())
        self._sync_tools()
        return self

    async def _start(self, conns: list[Connection]) -> list[tuple[Connection, str, str, bool]]:
        """Start ``conns`` together -> (connection, state before, error before, started)."""
        before = [(c, c.state, c.error) for c in conns]
        outcomes = await asyncio.gather(*(c.start() for c in conns), return_exceptions=True)
        return [(c, state, error, not isinstance(out, BaseException))
                for (c, state, error), out in zip(before, outcomes)]

    async def prepare(self, emit: Callable[[Any], None] = lambda event: None) -> None:
        """Before a model request: start what is due, offer the tools, tell the user once."""
        await self._configure(emit)
        for problem in self.problems:
            self._note(emit, problem, "warning")
        missing = sdk_problem() if self.connections else None
        if missing:
            self._note(emit, f"{missing} (configured: {', '.join(self.connections)})", "warning")
            self._sync_tools()
            return
        now = time.monotonic()
        due = [c for c in self.connections.values() if c.state in ("stopped", "dead")
               or (c.state == "failed" and now - c.failed_at > RETRY_FAILED_AFTER)]
        for conn, was, why, started in (await self._start(due) if due else []):
            name = conn.config.name
            if not started:
                self._note(emit, f"MCP server {name!r} failed to start: {conn.error}; its tools "
                                 "are not offered (%agent mcp retries it)", "warning",
                           key=f"{name}:{conn.error}")
            elif was == "dead":
                emit(Notice(f"MCP server {name!r} restarted (it had died: {why})", "warning"))
        self._sync_tools()

    def _note(self, emit: Callable[[Any], None], message: str, level: str, key: str = "") -> None:
        if (key or message) not in self._noted:
            self._noted.add(key or message)
            emit(Notice(message, level))  # type: ignore[arg-type]

    async def alist(self) -> MCPManager:
        """Start every configured server (retrying failed ones) and offer their tools."""
        await self._configure()
        problem = sdk_problem() if self.connections else None
        if problem:
            raise MCPUnavailable(f"{problem} (configured: {', '.join(self.connections)})")
        await self._start([c for c in self.connections.values() if c.state != "running"])
        self._sync_tools()
        return self

    def list(self) -> MCPManager:
        """``alist`` from synchronous code; returns self (a table in a notebook)."""
        return _eventloop.run_sync(self.alist())

    def _sync_tools(self) -> None:
        wanted: dict[str, Tool] = {}
        for name, conn in self.connections.items():
            if conn.state not in ("running", "dead"):
                continue  # a dead server keeps its tools: the next call restarts it
            for spec in conn.tools:
                wanted[tool_name(name, spec["name"])] = self._tool(conn, spec)
        for stale in self._registered - set(wanted):
            if stale in self.agent.tools:
                self.agent.tools.remove(stale)
        for t in wanted.values():
            self.agent.tools.add(t)
        self._registered = set(wanted)

    def _tool(self, conn: Connection, spec: dict[str, Any]) -> Tool:
        server, original = conn.config.name, str(spec["name"])
        schema = dict(spec.get("inputSchema") or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        description = spec.get("description") or spec.get("title") or original

        async def handle(call: ToolCall) -> ToolResult:
            return await self._call(server, original, call)

        return Tool(name=tool_name(server, original),
                    description=f"{description} (tool {original!r} of MCP server {server!r})",
                    parameters=schema, handler=handle)

    async def _call(self, server: str, tool: str, call: ToolCall) -> ToolResult:
        def error(text: str) -> ToolResult:
            return ToolResult(call.id, f"Error: {text}", error=True, name=call.name,
                              meta={"mcp": server})

        conn = self.connections.get(server)
        if conn is None:
            return error(f"MCP server {server!r} is no longer configured")
        if conn.state != "running":
            try:
                await conn.start()  # restarted on the next use after a death
            except MCPServerError as exc:
                return error(f"MCP server {server!r} could not be started: {exc}")
        timeout = self.agent.tool_timeout or None
        try:
            data = await conn.call(tool, dict(call.arguments), timeout)
        except asyncio.TimeoutError:
            return error(f"{tool!r} on MCP server {server!r} did not answer within {timeout:g} s "
                         "(Agent.tool_timeout)")
        except CallFailed as exc:
            return error(f"MCP server {server!r} refused the call to {tool!r}: {exc}")
        except MCPServerError as exc:
            return error(f"MCP server {server!r} died during this call ({exc}); it will be "
                         "restarted on the next call")
        result = to_tool_result(data, send_images=self.agent.send_images)
        result.call_id, result.name = call.id, call.name
        result.meta.update({"mcp": server, "tool": tool})
        return result

    async def aclose(self) -> None:
        """Stop every server."""
        await asyncio.gather(*(c.stop() for c in self.connections.values()),
                             return_exceptions=True)
        self._sync_tools()

    def close(self) -> None:
        """Stop every server (from synchronous code)."""
        if any(c.state != "stopped" for c in self.connections.values()):
            _eventloop.run_sync(self.aclose(), timeout=30)

    def _repr_html_(self) -> str:
        esc = html.escape
        rows = []
        for name, conn in self.connections.items():
            color = {"running": "#1a7f37", "failed": "#b00020", "dead": "#b00020"}.get(
                conn.state, "#57606a")
            status = f"<span style='color:{color}'>{esc(conn.state)}</span>"
            if conn.error and conn.state != "running":
                status += f"<br><small>{esc(conn.error)}</small>"
            tools = "".join(
                f"<li><code>{esc(tool_name(name, t['name']))}</code> — "
                f"{esc((t.get('description') or '').strip().splitlines()[0] if t.get('description') else '')}</li>"
                for t in conn.tools) or "—"
            rows.append(f"<tr><td style='text-align:left'><b>{esc(name)}</b><br><small>"
                        f"{esc(conn.config.transport)}: {esc(conn.config.describe())}</small></td>"
                        f"<td style='text-align:left'>{status}</td><td style='text-align:left'>"
                        f"<ul style='margin:0'>{tools}</ul></td></tr>")
        problems = "".join(f"<div style='color:#b00020'>⚠ {esc(p)}</div>" for p in
                           [*(r.refused("not trusted yet") for r in self.untrusted), *self.problems])
        if not rows and self.untrusted:
            return f"<div><b>MCP servers</b>: none started{problems}</div>"
        if not rows:
            return ("<div><b>MCP servers</b>: none configured — set <code>Agent.mcp_servers</code> "
                    f"or add <code>.ipyagent/mcp.json</code>{problems}</div>")
        return ("<div><b>MCP servers</b> — tools are offered to the model as "
                "<code>server__tool</code>, each call approved like any other<table><thead><tr>"
                "<th style='text-align:left'>server</th><th style='text-align:left'>state</th>"
                "<th style='text-align:left'>tools</th></tr></thead><tbody>"
                f"{''.join(rows)}</tbody></table>{problems}</div>")
