"""The engine loop: one background thread's loop runs every coroutine, from any caller."""

from __future__ import annotations

import asyncio
import threading

import pytest

from ipyagent._util import eventloop as _eventloop


async def where() -> tuple[str, bool]:
    return threading.current_thread().name, _eventloop.on_engine_loop()


def test_run_sync_runs_on_the_engine_thread() -> None:
    assert _eventloop.run_sync(where()) == ("ipyagent-engine", True)
    assert not _eventloop.on_engine_loop()
    assert _eventloop.engine_loop() is _eventloop.engine_loop()  # one loop, started once


async def test_run_async_from_another_running_loop() -> None:
    assert await _eventloop.run_async(where()) == ("ipyagent-engine", True)
    # and from the main thread's loop a blocking run_sync still works (a notebook's plain run())
    assert _eventloop.run_sync(asyncio.sleep(0, "ok")) == "ok"


def test_run_sync_from_the_engine_loop_itself_is_refused() -> None:
    async def nested() -> str:
        inner = asyncio.sleep(0, "never")
        with pytest.raises(RuntimeError, match="await instead"):
            _eventloop.run_sync(inner)
        return "refused"

    assert _eventloop.run_sync(nested()) == "refused"


def test_errors_come_back_to_the_caller() -> None:
    async def fails() -> None:
        raise KeyError("lost")

    with pytest.raises(KeyError, match="lost"):
        _eventloop.run_sync(fails())


def test_a_timeout_cancels_the_coroutine_and_it_unwinds() -> None:
    unwound = threading.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            unwound.set()

    with pytest.raises(TimeoutError):
        _eventloop.run_sync(slow(), timeout=0.05)
    assert unwound.wait(10)


def test_submit_tracked_says_when_the_coroutine_has_really_finished() -> None:
    started, release = threading.Event(), threading.Event()

    async def unwinding() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)

    future, finished = _eventloop.submit_tracked(unwinding())
    assert started.wait(10)
    assert future.cancel() and future.done()  # done at once…
    assert not finished.is_set()  # …while the coroutine is still unwinding
    release.set()
    assert finished.wait(10)


async def test_cancelling_run_async_cancels_the_engine_side() -> None:
    started, stopped = threading.Event(), threading.Event()

    async def long() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            stopped.set()

    task = asyncio.ensure_future(_eventloop.run_async(long()))
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.get_running_loop().run_in_executor(None, stopped.wait, 10)
