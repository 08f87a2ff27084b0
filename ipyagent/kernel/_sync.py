"""The forms both kernels offer over their engine-loop work: blocking ones, async ones that
hop to the engine loop, and the context managers. ``SiblingKernel`` and ``RemoteKernel``
differ in what ``_ensure_ready``, ``_restart``, ``_close``, ``_run`` and ``_interrupt_busy``
do, never in how they are reached (``transfer.Transfers`` does the same for push/pull)."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from .._util import eventloop as _eventloop
from .outputs import Execution
from .transfer import Transfers

__all__ = ["SyncForms"]

log = logging.getLogger("ipyagent.kernel")

K = TypeVar("K", bound="SyncForms")


class SyncForms(Transfers):
    """start/shutdown/interrupt/restart/execute (and push/pull, ``Transfers``), each blocking and
    async, and ``with``/``async with``."""

    _state: str
    _closed: bool
    _lock: asyncio.Lock | None
    _finalizer: weakref.finalize[Any, Any]

    _abandoned: tuple[str, bool] | None  # a call given up before its cell ended: (msg_id, begun)
    _settle_note: str  # what settling it did, for the next result

    # ---- what each kernel does on the engine loop ------------------------------
    async def _ensure_ready(self) -> None:
        raise NotImplementedError

    async def _settle_abandoned(self) -> str:
        raise NotImplementedError

    async def _settle_soon(self) -> None:
        """Settle a cancelled request right away (under the lock, so no request reads the
        kernel's messages meanwhile); the next request waits for it."""
        assert self._lock is not None
        async with self._lock:
            if self._abandoned is None:
                return
            try:
                self._settle_note = await self._settle_abandoned()
            except Exception:  # a kernel gone meanwhile: the next request finds and says it
                log.debug("settling a cancelled request failed", exc_info=True)

    async def _restart(self) -> None:
        raise NotImplementedError

    async def _close(self) -> None:
        raise NotImplementedError

    async def _interrupt_busy(self) -> None:
        """Interrupt the code that runs (called only while the state is 'busy')."""
        raise NotImplementedError

    def is_alive(self) -> bool:
        raise NotImplementedError

    # ---- lifecycle -------------------------------------------------------------
    def start(self, wait: bool = True) -> None:
        """Start the kernel; with ``wait=False`` return at once (``execute`` waits for it)."""
        if wait:
            _eventloop.run_sync(self.start_async())
        else:
            self.start_background()

    def start_background(self) -> None:
        """Begin starting the kernel on the engine loop and return immediately."""
        future = _eventloop.submit(self.start_async())
        # A failed background start is reported by the next call that needs the kernel.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def start_async(self) -> None:
        """Start the kernel (if needed) and wait until it answers."""
        await _eventloop.run_async(self._ensure_ready())

    def shutdown(self) -> None:
        """Stop the kernel and let go of it (idempotent)."""
        if _eventloop.on_engine_loop():
            self._closed = True
            # Cannot wait for the loop from on it: the finalizer's blocking cleanup instead
            # (the sibling's hard kill, the remote kernel's plain DELETE).
            self._finalizer()
        elif self._finalizer.alive:
            _eventloop.run_sync(self._close())
        self._state = "shut down"

    async def shutdown_async(self) -> None:
        """Async form of ``shutdown``."""
        if self._finalizer.alive:
            await _eventloop.run_async(self._close())
        self._state = "shut down"

    def __enter__(self: K) -> K:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    async def __aenter__(self: K) -> K:
        await self.start_async()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown_async()

    def interrupt(self) -> None:
        """Interrupt the running code; a running execute returns with the error."""
        _eventloop.run_sync(self.interrupt_async())

    async def interrupt_async(self) -> None:
        """Async form of ``interrupt``."""
        async def go() -> None:
            # Only a kernel that runs code needs it: a SIGINT that lands while a local kernel
            # still starts (before ipykernel installs its handler) kills it.
            if self._state == "busy":
                await self._interrupt_busy()

        await _eventloop.run_async(go())

    def restart(self) -> None:
        """Restart the kernel: every variable is lost. Waits for a running execute first."""
        _eventloop.run_sync(self.restart_async())

    async def restart_async(self) -> None:
        """Async form of ``restart``."""
        async def go() -> None:
            await self._ensure_ready()
            assert self._lock is not None
            async with self._lock:
                await self._restart()

        await _eventloop.run_async(go())

    @property
    def state(self) -> str:
        """'not started', 'starting', 'idle', 'busy', 'dead' or 'shut down'."""
        if self._state in ("idle", "busy") and not self.is_alive():
            return "dead"
        return self._state

    # ---- execution -------------------------------------------------------------
    def execute(self, code: str, timeout: float | None = None) -> Execution:
        """Run ``code``; blocks (safe inside a running loop). ``timeout`` overrides the default."""
        return _eventloop.run_sync(self._execute(code, timeout))

    async def execute_async(self, code: str, timeout: float | None = None,
                            on_stream: Callable[[str, str], None] | None = None) -> Execution:
        """Run ``code`` without blocking the caller's loop.

        ``on_stream(name, text)`` is called with stdout/stderr text as it arrives (live
        progress); the returned ``Execution`` still holds all of it.
        """
        return await _eventloop.run_async(self._execute(code, timeout, on_stream))

    async def _execute(self, code: str, timeout: float | None,
                       on_stream: Callable[[str, str], None] | None = None) -> Execution:
        execution, _ = await self._run(code, self.timeout if timeout is None else timeout,
                                       on_stream=on_stream)
        return execution
