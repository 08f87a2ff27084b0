"""What the rest of ipyagent needs of the kernel that runs the model's code, wherever it runs:
``SiblingKernel`` (a local process) and ``RemoteKernel`` (a Jupyter Server or gateway)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .outputs import Execution

__all__ = ["Kernel", "confinement", "for_the_model"]


class Kernel(Protocol):
    """The kernel interface the python tool, copies, rebuild, replay and the frontends use."""

    timeout: float | None
    max_transfer_bytes: int
    max_model_chars: int

    @property
    def cwd(self) -> str | None:
        """The kernel's working directory here; None: the remote server's (not known here)."""

    @property
    def state(self) -> str: ...
    @property
    def sandboxed(self) -> bool: ...

    def start(self, wait: bool = True) -> None: ...
    def start_background(self) -> None: ...
    async def start_async(self) -> None: ...
    def is_alive(self) -> bool: ...
    def execute(self, code: str, timeout: float | None = None) -> Execution: ...
    async def execute_async(self, code: str, timeout: float | None = None,
                            on_stream: Callable[[str, str], None] | None = None) -> Execution: ...
    def interrupt(self) -> None: ...
    async def interrupt_async(self) -> None: ...
    def restart(self) -> None: ...
    async def restart_async(self) -> None: ...
    def shutdown(self) -> None: ...
    async def shutdown_async(self) -> None: ...
    def push(self, **values: Any) -> None: ...
    async def push_async(self, **values: Any) -> None: ...
    async def push_payload_async(self, payload: str, names: list[str]) -> None: ...
    def pull(self, name: str) -> Any: ...
    async def pull_async(self, name: str) -> Any: ...
    async def pull_payload_async(self, name: str) -> bytes: ...


def confinement(kernel: Kernel) -> str:
    """Where a call's code ran, as its result records it: ``"bubblewrap"`` (the local
    sibling, sandboxed), ``"none"`` (the local sibling, not sandboxed) or ``"remote"`` (a
    kernel on a Jupyter server: not sandboxed by ipyagent; the server decides)."""
    if getattr(kernel, "remote", False):
        return "remote"
    return "bubblewrap" if kernel.sandboxed else "none"


def for_the_model(kernel: Kernel, text: str) -> str:
    """``text`` (a kernel's error) as the model may read it: a remote kernel's server URL
    and host name replaced by words (an internal host is no business of the provider's)."""
    url = getattr(kernel, "url", None) if getattr(kernel, "remote", False) else None
    if not isinstance(url, str) or not url:
        return text
    from ._rest import masked

    return masked(text, url)
