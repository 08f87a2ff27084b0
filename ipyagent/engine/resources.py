"""What an agent reaches outside itself: the model client, the sibling kernel, MCP servers
and AGENTS.md — each built on first use from the agent's settings, owned by ``Resources``.

An ``Agent`` *has* its ``Resources`` (``agent.resources``); ``agent.client``,
``agent.kernel`` and ``agent.mcp`` read through to it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._util import eventloop as _eventloop
from ..models.base import Model
from ..models.providers import check_key

if TYPE_CHECKING:
    from ..kernel.base import Kernel
    from ..tools.mcp.client import MCPManager
    from ..tools.remote_files import RemoteWorkspace, Unreachable
    from .view import AgentView

__all__ = ["Resources"]


class Resources:
    """The model client, sibling kernel, MCP servers and AGENTS.md of one agent."""

    def __init__(self, agent: AgentView, client: Model | None, http_client: Any) -> None:
        """``client`` injects a model client (kept as is); ``http_client`` is handed to the
        clients built from the settings."""
        self._agent: AgentView = weakref.proxy(agent)  # the agent owns these, not the other way round
        self._client = client
        self.client_is_injected = client is not None
        self._http_client = http_client
        self._cached: Model | None = None  # the response-cache wrapper around _client
        self._kernel: Kernel | None = None
        self._kernel_lock = threading.Lock()
        self._closing: set[Any] = set()  # old siblings shutting down in the background
        self._mcp: MCPManager | None = None
        self._remote_files: tuple[tuple[str, str], RemoteWorkspace | Unreachable] | None = None
        self._agents_md: tuple[str, Path | None] | None = None  # (directory, its AGENTS.md)
        self.closed = False

    # -- the model client ------------------------------------------------------------------
    @property
    def client(self) -> Model:
        """The model client for the current settings (built on first use)."""
        if self._client is None:
            self._client = self._make_client()
        if self._agent.cache != "off":
            from ..models.cache import cached_client

            self._cached = cached_client(self._agent, self._client, self._cached)
            return self._cached
        return self._client

    @property
    def client_if_made(self) -> Model | None:
        """The model client, if one was injected or built (never builds one)."""
        return self._client

    @property
    def http_client(self) -> Any:
        """The ``httpx.AsyncClient`` given for the built clients (None: each makes its own)."""
        return self._http_client

    def inject(self, client: Model) -> None:
        """Use ``client`` from now on, as if the agent had been made with ``client=``."""
        self._client, self.client_is_injected = client, True

    def settings_changed(self) -> None:
        """A setting the client was built from changed: the next request builds a new one."""
        if not self.client_is_injected and self._client is not None:
            old, self._client = self._client, None
            _eventloop.submit(old.aclose())

    def _make_client(self) -> Model:
        agent = self._agent
        if agent.model == "demo":
            from ..models.demo import DemoModel

            return DemoModel()
        from ..models.http import EnvKey

        endpoint = agent.endpoint
        # The client reads the key from the environment at each request and keeps no copy;
        # a cloud endpoint without its key is one line now, and at a request after it is unset.
        check_key(endpoint, os.environ.get(endpoint.key_env) if endpoint.key_env else None)
        key = EnvKey(endpoint.key_env, functools.partial(check_key, endpoint)) if endpoint.key_env else None
        if endpoint.api == "responses":
            from ..models.openai_responses import OpenAIResponsesModel as Client
        elif endpoint.api == "anthropic":
            from ..models.anthropic import AnthropicModel as Client  # type: ignore[assignment]
        else:
            from ..models.openai_chat import OpenAIChatModel as Client  # type: ignore[assignment]
        return Client(  # type: ignore[no-any-return]
            agent.model, base_url=endpoint.base_url, api_key=key,
            client=self._http_client, timeouts=agent.model_timeouts, max_retries=agent.max_retries,
            extra_body=dict(agent.extra_body))

    # -- the sibling kernel ----------------------------------------------------------------
    @property
    def kernel(self) -> Kernel:
        """The sibling kernel that runs the ``python`` tool (started in the background)."""
        with self._kernel_lock:  # one kernel, even when two threads ask at once
            if self._kernel is None:
                self._kernel = self._make_kernel()
            return self._kernel

    @property
    def kernel_if_started(self) -> Kernel | None:
        """The sibling kernel, if one was made (never starts one)."""
        return self._kernel

    def start_kernel_soon(self) -> None:
        """Create and start the sibling in a background thread: the first call finds it warm,
        and creating an agent (or ``%load_ext``) does not wait for jupyter_client's import."""
        ref = weakref.ref(self)

        def start() -> None:
            resources = ref()
            if resources is None:
                return
            try:
                with resources._kernel_lock:  # close() takes the lock too: no kernel after close
                    if not resources.closed and resources._kernel is None:
                        resources._kernel = resources._make_kernel()
            except ReferenceError:
                return  # the agent was dropped while its kernel was being made: none is wanted
            except Exception as exc:  # the first python call reports it again, as a value
                with contextlib.suppress(ReferenceError):
                    resources._agent.log.warning("ipyagent: the sibling kernel did not start: %s", exc)

        threading.Thread(target=start, name="ipyagent-kernel-start", daemon=True).start()

    async def move_kernel(self, cwd: str) -> None:
        """A fresh sibling in ``cwd`` (the old one, and its variables, are shut down)."""
        with self._kernel_lock:  # the background start takes it too: no kernel is lost
            old, self._kernel = self._kernel, None
            self._agent.cwd = cwd
        if old is not None:
            await old.shutdown_async()

    async def renew_kernel(self) -> Kernel | None:
        """Shut the sibling down (its variables and its staged workspace go with it) in the
        background; the next use starts a fresh one where it was at once (a graceful shutdown
        takes a second or two). Returns the old one (None: none was made)."""
        import asyncio

        with self._kernel_lock:  # the background start takes it too: no kernel is lost
            old, self._kernel = self._kernel, None
        if old is not None:
            task = asyncio.ensure_future(old.shutdown_async())
            self._closing.add(task)  # held until done: a task nobody holds may be collected
            task.add_done_callback(self._closing.discard)
        return old

    def _make_kernel(self) -> Kernel:
        agent = self._agent
        kernel: Kernel
        if agent.kernel_url:
            from ..kernel.remote import RemoteKernel

            # Only Agent.kernel_env goes to the remote kernel: none of this environment.
            kernel = RemoteKernel(agent.kernel_url, timeout=agent.tool_timeout or None,
                                  kernel_name=agent.kernel_name, token_env=agent.kernel_token_env,
                                  env=agent.kernel_env)
        else:
            from ..kernel.sibling import SiblingKernel

            kernel = SiblingKernel(
                cwd=agent.cwd or os.getcwd(), timeout=agent.tool_timeout or None,  # 0: no limit
                memory_limit=agent.memory_limit or None, kernel_name=agent.kernel_name,
                secret_env_vars=[v for v in {agent.api_key_env, agent.endpoint.key_env} if v],
                sandbox=agent.sandbox, sandbox_network=agent.sandbox_network,
                sandbox_paths=agent.sandbox_paths, workspace=agent.workspace_path,
                sandbox_env=list(agent.sandbox_env))
        kernel.start_background()
        return kernel

    def kernel_place_changed(self) -> None:
        """Agent.kernel_url (or its token variable, env or kernelspec) changed: the kernel made
        for the old place is shut down in the background, the next call starts one at the new one."""
        agent = self._agent
        with self._kernel_lock:
            old = self._kernel
            if old is None or _same_place(old, agent.kernel_url, agent.kernel_token_env, agent.kernel_env):
                return
            self._kernel = None
        if old is not None:
            self._agent.log.warning("ipyagent: the kernel moves to %s; the old kernel's variables are lost",
                                    self._agent.kernel_url or "a local sibling")
            _eventloop.submit(old.shutdown_async())

    def remote_files(self) -> RemoteWorkspace | Unreachable | None:
        """The remote server's files when ``Agent.workspace == "remote"`` (read at each file call)."""
        agent = self._agent
        if agent.workspace != "remote":
            return None
        from ..tools.remote_files import RemoteWorkspace, Unreachable

        key = (agent.kernel_url, agent.kernel_token_env)
        if self._remote_files is None or self._remote_files[0] != key:
            if self._remote_files is not None:
                self._remote_files[1].close()
            made: RemoteWorkspace | Unreachable = (
                RemoteWorkspace(agent.kernel_url, agent.kernel_token_env) if agent.kernel_url
                else Unreachable("Agent.workspace = 'remote' needs Agent.kernel_url (a Jupyter Server)"))
            self._remote_files = (key, made)
        return self._remote_files[1]

    # -- MCP servers and AGENTS.md ---------------------------------------------------------
    @property
    def mcp(self) -> MCPManager:
        """The MCP servers and their tools (made on first use)."""
        if self._mcp is None:
            from ..tools.mcp.client import MCPManager

            self._mcp = MCPManager(self._agent)
        return self._mcp

    def agents_md_path(self) -> Path | None:
        """The AGENTS.md for the agent's directory (None: none found, or ``agents_md`` off)."""
        agent = self._agent
        if not agent.agents_md:
            return None
        from ..instructions.agents_md import find_agents_md

        # Looked up once per directory (not on every step: it walks up to the repo root).
        where = agent.cwd or os.getcwd()
        cached = self._agents_md
        if cached is None or cached[0] != where:
            cached = self._agents_md = (where, find_agents_md(where))
        return cached[1]

    def forget_agents_md(self) -> None:
        """Look for AGENTS.md again next time (a new conversation)."""
        self._agents_md = None

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Shut down the sibling kernel, the MCP servers and the model client's connections."""
        if self.closed:
            return
        self.closed = True
        if self._client is not None and not self.client_is_injected:
            try:
                _eventloop.run_sync(self._client.aclose(), timeout=5)
            except Exception:
                pass
        if self._mcp is not None:
            try:
                self._mcp.close()
            except Exception as exc:  # a stuck server must not stop the rest of the shutdown
                self._agent.log.warning("ipyagent: MCP servers did not stop cleanly: %s", exc)
        if self._remote_files is not None:
            self._remote_files[1].close()
        with self._kernel_lock:  # waits for a kernel being created right now
            kernel = self._kernel
        if kernel is not None:
            kernel.shutdown()


def _same_place(kernel: Kernel, url: str, token_env: str, env: dict[str, str]) -> bool:
    """True when ``kernel`` already runs where these settings say (nothing to move)."""
    from ..kernel.remote import RemoteKernel

    if not isinstance(kernel, RemoteKernel):
        return not url
    return (kernel.url, kernel.token_env, kernel.env) == (url, token_env, dict(env))
