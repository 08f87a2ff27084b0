"""What an agent reaches outside itself: the model client, the sibling kernel, the
workspace, MCP servers and AGENTS.md — each built on first use from the settings."""

from __future__ import annotations

import functools
import os
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _eventloop
from .models.base import Model
from .providers import Endpoint, check_key, resolve
from .settings import AgentSettings

if TYPE_CHECKING:
    from .tools.base import Toolbox
    from .tools.mcp.client import MCPManager

__all__ = ["AgentResources"]


class AgentResources(AgentSettings):
    """The settings plus the resources they describe (the loop lives in ``Agent``)."""

    tools: Toolbox  # set by Agent.__init__; MCP adds its servers' tools to it
    _agents_md_cache: tuple[str, Path | None] | None = None  # (directory, its AGENTS.md)

    def _init_resources(self, client: Model | None, http_client: Any) -> None:
        self._client = client
        self._client_injected = client is not None
        self._http_client = http_client
        self._kernel: Any = None
        self._kernel_lock = threading.Lock()
        self._mcp: Any = None  # mcp.MCPManager, made on first use
        self._closed = False
        self.observe(self._settings_changed, names=["model", "base_url", "api_key_env", "provider",
                                                     "api", "timeout", "max_retries", "extra_body"])

    @property
    def agents_md_path(self) -> Path | None:
        """The AGENTS.md added to the system prompt (None: none found, or ``agents_md`` off)."""
        if not self.agents_md:
            return None
        from .agents_md import find_agents_md

        # Looked up once per directory (not on every step: it walks up to the repo root).
        where = self.cwd or os.getcwd()
        cached = self._agents_md_cache
        if cached is None or cached[0] != where:
            cached = self._agents_md_cache = (where, find_agents_md(where))
        return cached[1]

    @property
    def workspace_path(self) -> Path:
        """The directory the file tools are confined to."""
        from pathlib import Path

        return Path(self.workspace or self.cwd or os.getcwd()).resolve()

    @property
    def mcp(self) -> MCPManager:
        """The MCP servers and their tools; ``agent.mcp.list()`` starts them (a table)."""
        if self._mcp is None:
            from .tools.mcp.client import MCPManager

            self._mcp = MCPManager(self)
        return self._mcp

    def _settings_changed(self, change: Any) -> None:
        if not self._client_injected and self._client is not None:
            old, self._client = self._client, None
            _eventloop.submit(old.aclose())

    @property
    def client(self) -> Model:
        """The model client for the current settings (built on first use)."""
        if self._client is None:
            self._client = self._make_client()
        if self.cache != "off":
            from .models.cache import cached_client

            return cached_client(self, self._client)
        return self._client

    def _make_client(self) -> Model:
        if self.model == "demo":
            from .models.demo import DemoModel

            return DemoModel()
        from .models.http import EnvKey

        endpoint = self.endpoint
        # The client reads the key from the environment at each request and keeps no copy;
        # a cloud endpoint without its key is one line now, and at a request after it is unset.
        check_key(endpoint, os.environ.get(endpoint.key_env) if endpoint.key_env else None)
        key = EnvKey(endpoint.key_env, functools.partial(check_key, endpoint)) if endpoint.key_env else None
        if endpoint.api == "responses":
            from .models.openai_responses import OpenAIResponsesModel as Client
        elif endpoint.api == "anthropic":
            from .models.anthropic import AnthropicModel as Client  # type: ignore[assignment]
        else:
            from .models.openai_chat import OpenAIChatModel as Client  # type: ignore[assignment]
        return Client(  # type: ignore[no-any-return]
            self.model, base_url=endpoint.base_url, api_key=key,
            client=self._http_client, timeout=self.timeout, max_retries=self.max_retries,
            extra_body=dict(self.extra_body))

    @property
    def endpoint(self) -> Endpoint:
        """Where requests go: ``provider`` preset + explicit settings (explicit ones win)."""
        # A setting counts as explicit when it differs from its default.
        key_env = self.api_key_env
        default_key_env = type(self).class_traits()["api_key_env"].default_value
        return resolve(self.provider, api=self.api, base_url=self.base_url,
                       key_env=None if key_env == default_key_env else key_env)

    @property
    def kernel(self) -> Any:
        """The sibling kernel that runs the ``python`` tool (started in the background)."""
        with self._kernel_lock:  # one kernel, even when two threads ask at once
            if self._kernel is None:
                self._kernel = self._make_kernel()
            return self._kernel

    def _start_kernel_soon(self) -> None:
        """Create and start the sibling in a background thread: the first call finds it warm,
        and creating an agent (or ``%load_ext``) does not wait for jupyter_client's import."""
        ref = weakref.ref(self)

        def start() -> None:
            agent = ref()
            if agent is None:
                return
            try:
                with agent._kernel_lock:  # close() takes the lock too: no kernel after close
                    if not agent._closed and agent._kernel is None:
                        agent._kernel = agent._make_kernel()
            except Exception as exc:  # the first python call reports it again, as a value
                if agent is not None:
                    agent.log.warning("ipyagent: the sibling kernel did not start: %s", exc)

        threading.Thread(target=start, name="ipyagent-kernel-start", daemon=True).start()

    def _make_kernel(self) -> Any:
        from .kernel.sibling import SiblingKernel

        kernel = SiblingKernel(
            cwd=self.cwd or os.getcwd(), timeout=self.tool_timeout or None,  # 0: no limit
            memory_limit=self.memory_limit or None, kernel_name=self.kernel_name,
            secret_env_vars=[v for v in {self.api_key_env, self.endpoint.key_env} if v],
            sandbox=self.sandbox, sandbox_network=self.sandbox_network,
            sandbox_paths=self.sandbox_paths, workspace=self.workspace_path)
        kernel.start_background()
        return kernel
