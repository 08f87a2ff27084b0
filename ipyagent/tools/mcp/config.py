"""MCP server settings: ``Agent.mcp_servers`` and ``mcp.json`` beside the notebook.

A file's servers carry its SHA-256 (``digest``): they start only once you agreed to that
content (``trust``).

The format is the common ``mcpServers`` value: server name → ``{command, args, env, cwd}``
(stdio) or ``{url, headers}`` (streamable HTTP). A dict holding ``mcpServers`` itself (or
VS Code's ``servers``) is accepted, ``"disabled": true`` skips an entry, and mistakes become
one-line problems rather than exceptions, so one bad entry never hides the good ones.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CONFIG_FILES", "SEP", "ServerConfig", "unwrap", "parse_servers", "find_config_file",
           "load_configs", "tool_name"]

CONFIG_FILES = (".ipyagent/mcp.json", "mcp.json")
SEP = "__"


@dataclass
class ServerConfig:
    """How to reach one MCP server."""

    name: str
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    source: str = "Agent.mcp_servers"
    digest: str = ""  # SHA-256 of the config file it came from ("": Agent.mcp_servers)

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    def describe(self) -> str:
        """The command line or URL (env and header values never shown)."""
        return self.url or " ".join([self.command, *self.args])

    def same_server(self, other: ServerConfig) -> bool:
        """True when both start the same server (``source`` aside)."""
        keys = ("command", "args", "env", "cwd", "url", "headers")
        return all(getattr(self, k) == getattr(other, k) for k in keys)


def unwrap(value: Any) -> Any:
    """The servers dict of a config that holds ``mcpServers`` (or VS Code's ``servers``)."""
    if isinstance(value, dict) and isinstance(value.get("mcpServers"), dict):
        return value["mcpServers"]
    servers = value.get("servers") if isinstance(value, dict) else None
    if isinstance(servers, dict) and not ({"command", "url"} & set(servers)):
        return servers  # VS Code's mcp.json: {"servers": {...}, "inputs": [...]}
    return value


def parse_servers(raw: Any, source: str) -> tuple[dict[str, ServerConfig], list[str]]:
    """Server configs from an ``mcpServers`` value, and one line per entry that is wrong."""
    raw = unwrap(raw)
    if not isinstance(raw, dict):
        return {}, [f"{source}: expected a dict of server name -> settings, "
                    f"got {type(raw).__name__}"]
    configs: dict[str, ServerConfig] = {}
    problems: list[str] = []
    for name, spec in raw.items():
        where = f"{source}: MCP server {name!r}"
        if not isinstance(spec, dict):
            problems.append(f"{where}: expected a dict like {{\"command\": ..., \"args\": [...]}} "
                            "or {\"url\": ...}")
            continue
        if spec.get("disabled"):
            continue
        kind = str(spec.get("type") or spec.get("transport") or "")
        if kind == "sse":
            problems.append(f"{where}: the old SSE transport is not supported; use the "
                            "server's streamable HTTP endpoint (usually /mcp)")
            continue
        command, url = spec.get("command"), spec.get("url")
        args, env, headers = spec.get("args", []), spec.get("env", {}), spec.get("headers", {})
        if bool(command) == bool(url):
            problems.append(f"{where}: give either `command` (stdio) or `url` (streamable HTTP)")
        elif not (isinstance(args, list) and isinstance(env, dict) and isinstance(headers, dict)):
            problems.append(f"{where}: `args` must be a list, `env` and `headers` dicts")
        else:
            configs[str(name)] = ServerConfig(
                name=str(name), command=str(command or ""), args=[str(a) for a in args],
                env={str(k): str(v) for k, v in env.items()},
                cwd=str(spec["cwd"]) if spec.get("cwd") else None, url=str(url or ""),
                headers={str(k): str(v) for k, v in headers.items()}, source=source)
    return configs, problems


def find_config_file(directory: str | Path) -> Path | None:
    """``.ipyagent/mcp.json`` or ``mcp.json`` in ``directory`` (the first that exists)."""
    for rel in CONFIG_FILES:
        path = Path(directory) / rel
        if path.is_file():
            return path
    return None


def load_configs(configured: Any, directory: str | Path | None
                 ) -> tuple[dict[str, ServerConfig], list[str]]:
    """Servers from the config file beside the notebook (none when ``directory`` is None),
    then ``Agent.mcp_servers`` (wins)."""
    configs: dict[str, ServerConfig] = {}
    problems: list[str] = []
    path = None
    if directory is not None:
        path = find_config_file(directory)
        # Only the first file is read: say so when another one is there too.
        problems += [f"{other} is not read: {path} is (the first found wins; merge them)"
                     for other in (Path(directory) / rel for rel in CONFIG_FILES)
                     if other.is_file() and other != path]
    if path is not None:
        try:
            raw = path.read_bytes()  # read once: the bytes hashed are the bytes parsed
            data = json.loads(raw.decode("utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: not readable as JSON ({exc})")
        else:
            found, bad = parse_servers(data, str(path))
            digest = hashlib.sha256(raw).hexdigest()
            for config in found.values():
                config.digest = digest  # trust: started only once you agreed to it
            configs.update(found)
            problems += bad
    if configured:
        found, bad = parse_servers(dict(configured), "Agent.mcp_servers")
        configs.update(found)
        problems += bad
    return configs, problems


def tool_name(server: str, tool: str) -> str:
    """The name the model sees: ``server__tool``, in the characters every API accepts."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}{SEP}{tool}")[:64]
