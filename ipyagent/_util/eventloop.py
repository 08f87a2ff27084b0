"""The engine loop: one background event loop that owns every async resource.

Why: the httpx client and the sibling kernel's zmq sockets belong to the loop that made
them. A Jupyter kernel already runs a loop in the main thread, and a plain ``run()``
called there must not block that loop's own coroutines nor re-enter it. So every
coroutine of the engine runs on this one daemon thread's loop:

* ``run_sync(coro)`` blocks the calling thread until the coroutine finishes — safe from
  a plain script *and* from inside a running loop (a notebook cell);
* ``await run_async(coro)`` lets a running loop (the notebook's) wait without blocking,
  so comm messages (widget clicks) keep flowing while the engine works.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any, Coroutine, TypeVar

__all__ = ["engine_loop", "run_sync", "run_async", "on_engine_loop", "submit", "submit_tracked"]

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def engine_loop() -> asyncio.AbstractEventLoop:
    """The engine's event loop, started on first use."""
    global _loop, _thread
    with _lock:
        if _loop is None or _loop.is_closed() or _thread is None or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def _run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                while True:
                    try:
                        loop.run_forever()
                        return
                    except (KeyboardInterrupt, SystemExit):
                        # asyncio lets these escape a task's step and stop the loop; the
                        # engine outlives one interrupted coroutine.
                        continue

            _thread = threading.Thread(target=_run, name="ipyagent-engine", daemon=True)
            _thread.start()
            ready.wait()
            _loop = loop
        return _loop


def on_engine_loop() -> bool:
    """True when called from code already running on the engine loop."""
    try:
        return asyncio.get_running_loop() is _loop
    except RuntimeError:
        return False


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Schedule ``coro`` on the engine loop; returns a thread-safe future."""
    return asyncio.run_coroutine_threadsafe(coro, engine_loop())


def submit_tracked(coro: Coroutine[Any, Any, T]
                   ) -> tuple[concurrent.futures.Future[T], threading.Event]:
    """``submit``, plus an event set once the coroutine has really finished.

    Why: cancelling the returned future marks it done at once, while the coroutine is
    still unwinding (an interrupted agent answers its open tool calls there); whoever
    reads the context next must wait for the event.
    """
    finished = threading.Event()

    async def tracked() -> T:
        try:
            return await coro
        finally:
            finished.set()

    return submit(tracked()), finished


def run_sync(coro: Coroutine[Any, Any, T], timeout: float | None = None,
             grace: float = 10.0) -> T:
    """Run ``coro`` on the engine loop and block until it is done.

    Ctrl-C (KeyboardInterrupt) while waiting cancels the coroutine, waits up to
    ``grace`` seconds for it to unwind, and re-raises.
    """
    if on_engine_loop():
        coro.close()
        raise RuntimeError("run_sync() called from the engine loop itself; await instead")
    future, finished = submit_tracked(coro)
    try:
        if threading.current_thread() is threading.main_thread():
            _wait_interruptibly(future, timeout)
        return future.result(timeout)
    except BaseException:
        if future.cancel():
            finished.wait(grace)
        raise


def _wait_interruptibly(future: concurrent.futures.Future[Any], timeout: float | None) -> None:
    """Wait in short slices: the OS may give SIGINT to another thread, and an untimed
    wait would then sleep through Ctrl-C (the handler runs only between bytecodes)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not future.done():
        left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
        if left <= 0:
            return
        concurrent.futures.wait([future], timeout=left)


async def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` on the engine loop from any running loop (cancellation propagates)."""
    if on_engine_loop():
        return await coro
    future = submit(coro)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        future.cancel()
        raise
