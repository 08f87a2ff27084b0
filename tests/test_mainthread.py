"""Display and prompt work sent back to the main thread: the loop and the pump dispatchers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import signal
import threading

import pytest

from ipyagent._util.mainthread import LoopDispatcher, PumpDispatcher, run_pumped, wake_on_signals

CELL: contextvars.ContextVar[str] = contextvars.ContextVar("cell", default="none")


def test_the_loop_dispatcher_runs_calls_in_order_on_the_loop_in_the_cells_context() -> None:
    async def cell() -> list[tuple[str, str, int]]:
        CELL.set("cell 7")
        dispatcher = LoopDispatcher()  # captures the running loop and this context
        CELL.set("changed later")  # the copy was taken: later changes do not leak in
        seen: list[tuple[str, str, int]] = []
        done = asyncio.Event()

        def record(n: int) -> None:
            seen.append((threading.current_thread().name, CELL.get(), n))
            if n == 2:
                done.set()

        worker = threading.Thread(target=lambda: [dispatcher.call(record, n) for n in range(3)],
                                  name="engine")
        worker.start()
        worker.join()
        await asyncio.wait_for(done.wait(), 10)
        assert dispatcher.can_wait_for_clicks
        return seen

    main = threading.current_thread().name
    assert asyncio.run(cell()) == [(main, "cell 7", 0), (main, "cell 7", 1), (main, "cell 7", 2)]


def test_loop_dispatcher_runs_in_the_captured_context() -> None:
    import contextvars
    import threading

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="engine")
    seen: list[tuple[str, bool]] = []

    async def main() -> None:
        var.set("cell")
        dispatcher = LoopDispatcher()
        worker = threading.Thread(target=lambda: dispatcher.call(
            lambda: seen.append((var.get(), threading.current_thread() is threading.main_thread()))))
        worker.start()
        worker.join()
        await asyncio.sleep(0.05)

    asyncio.run(main())
    assert seen == [("cell", True)]


def test_the_pump_runs_queued_jobs_on_the_blocked_main_thread_and_returns_results() -> None:
    pump = PumpDispatcher()
    ran: list[str] = []
    pump.call(lambda: ran.append("inline"))  # from the main thread itself: at once
    assert ran == ["inline"] and not pump.can_wait_for_clicks
    done = threading.Event()
    answers: list[object] = []

    def engine() -> None:
        answers.append(pump.call_and_wait(lambda: threading.current_thread().name))
        try:
            pump.call_and_wait(lambda: 1 / 0)
        except ZeroDivisionError as exc:
            answers.append(type(exc).__name__)
        pump.call(ran.append, "queued last")
        done.set()

    threading.Thread(target=engine).start()
    pump.pump(done)  # returns once done is set, after draining what is queued
    assert answers == [threading.current_thread().name, "ZeroDivisionError"]
    assert ran == ["inline", "queued last"]


def test_ctrl_c_in_a_main_thread_prompt_is_a_cancellation_for_the_engine() -> None:
    pump = PumpDispatcher()
    outcome: concurrent.futures.Future[str] = concurrent.futures.Future()

    def engine() -> None:
        def prompt() -> None:
            raise KeyboardInterrupt  # what Ctrl-C in input() does on the main thread

        try:
            pump.call_and_wait(prompt)
        except asyncio.CancelledError:
            outcome.set_result("cancelled")
        except BaseException as exc:  # pragma: no cover - the failure being tested for
            outcome.set_result(type(exc).__name__)

    threading.Thread(target=engine).start()
    with pytest.raises(KeyboardInterrupt):
        pump.pump(outcome)
    assert outcome.result(10) == "cancelled"


def test_run_pumped_serves_the_engine_until_its_coroutine_ends() -> None:
    pump = PumpDispatcher()
    main = threading.current_thread()

    async def run() -> tuple[bool, bool]:
        on_main = pump.call_and_wait(lambda: threading.current_thread() is main)
        return threading.current_thread() is main, on_main

    assert run_pumped(pump, run()) == (False, True)  # the coroutine ran elsewhere, the job here


def test_wake_on_signals_installs_a_wakeup_fd_and_removes_it() -> None:
    loop = asyncio.new_event_loop()
    previous = signal.set_wakeup_fd(-1)  # none installed before (whatever the suite left)
    try:
        with wake_on_signals(loop):
            installed = signal.set_wakeup_fd(-1)
            signal.set_wakeup_fd(installed)
            assert installed != -1
        assert signal.set_wakeup_fd(-1) == -1
        results: list[int] = []

        def from_a_thread() -> None:
            with wake_on_signals(loop):  # only the main thread may: a no-op elsewhere
                results.append(1)

        thread = threading.Thread(target=from_a_thread)
        thread.start()
        thread.join()
        assert results == [1]
    finally:
        signal.set_wakeup_fd(previous)
        loop.close()
