"""Run display and prompt work on the user's main thread, in the running cell's context.

Why: listeners and approvers are called on the engine thread, but ipykernel routes an
output to a cell by the parent header held in a ``ContextVar`` of the cell's task; from
another thread it falls back to the last message the kernel saw, which is the comm
message of a button click as soon as the user clicks. So every display call is sent back
to the main thread and run in a copy of the cell's context:

* ``LoopDispatcher``: the cell awaits (top-level await), so the kernel's loop is free:
  ``call_soon_threadsafe`` with the captured context;
* ``PumpDispatcher``: the cell blocks (terminal IPython, a ``%agent`` inside a block):
  the main thread pumps a queue of jobs until the engine's future is done, so terminal
  prompts (``input()``) run on the main thread, where Ctrl-C reaches them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import os
import queue
import select
import signal
import socket
import sys
import threading
from typing import Any, Callable, Coroutine, Iterable, Iterator, TypeVar

__all__ = ["Dispatcher", "LoopDispatcher", "PumpDispatcher", "wake_on_signals",
           "interruptible_input", "interruptible_key", "run_pumped"]

T = TypeVar("T")


class Dispatcher:
    """Runs callables on the main thread; ``call`` never blocks the caller."""

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        raise NotImplementedError

    def call_and_wait(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` on the main thread and wait for its result (from a worker thread)."""
        if threading.current_thread() is threading.main_thread():
            return fn(*args)
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def job() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args))
            except Exception as exc:
                future.set_exception(exc)
            except BaseException:
                # Ctrl-C in input(): the main thread raises it (and cancels the run); the
                # waiter — a worker of the engine — must see a *cancellation*. A
                # KeyboardInterrupt inside an asyncio task escapes the loop and kills it.
                future.set_exception(asyncio.CancelledError())
                raise

        self.call(job)
        return future.result()

    @property
    def can_wait_for_clicks(self) -> bool:
        """True when the main loop stays free to receive widget clicks."""
        return False


class LoopDispatcher(Dispatcher):
    """Schedules onto a running loop (the kernel's) in a captured ``contextvars`` context."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None,
                 context: contextvars.Context | None = None) -> None:
        self.loop = loop or asyncio.get_running_loop()
        self.context = context or contextvars.copy_context()

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        if not self.loop.is_closed():
            # Also from the loop's own thread: queued, so events keep their order.
            self.loop.call_soon_threadsafe(fn, *args, context=self.context)

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> Any:
        """A timer on the main loop (throttled display flushes)."""
        return self.loop.call_later(delay, fn, *args, context=self.context)

    @property
    def can_wait_for_clicks(self) -> bool:
        return True


class PumpDispatcher(Dispatcher):
    """Queues jobs that the (blocked) main thread runs in ``pump``."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
        self._thread = threading.current_thread()

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        if threading.current_thread() is self._thread:
            fn(*args)
        else:
            self._jobs.put((fn, args))

    def pump(self, done: threading.Event | concurrent.futures.Future[Any],
             poll: float = 0.05) -> None:
        """Run queued jobs until ``done`` is set, then drain what is left."""
        is_done = done.is_set if isinstance(done, threading.Event) else done.done
        while not is_done():
            try:
                fn, args = self._jobs.get(timeout=poll)
            except queue.Empty:
                continue
            fn(*args)
        self.drain()

    def drain(self) -> None:
        """Run every job already queued."""
        while True:
            try:
                fn, args = self._jobs.get_nowait()
            except queue.Empty:
                return
            fn(*args)


@contextlib.contextmanager
def wake_on_signals(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Let a signal that another thread catches wake ``loop`` (the main one) at once.

    Why: Python runs signal handlers only on the main thread, and only when it runs
    bytecode. While a cell awaits, the main thread sleeps in ``select``; if the kernel's
    SIGINT (the Interrupt button) is delivered to another thread — measured here while
    the engine waits on the sibling kernel — the handler waits until something else wakes
    the loop: a 10-minute tool call made Interrupt take 10 minutes. A wakeup fd (what
    asyncio's own ``add_signal_handler`` uses) wakes the loop, and the handler runs.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    try:
        previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    except (ValueError, OSError):
        previous = None
    if previous is None or previous != -1:  # unavailable, or someone else's: keep theirs
        if previous not in (None, -1):
            signal.set_wakeup_fd(previous)
        reader.close()
        writer.close()
        yield
        return
    loop.add_reader(reader.fileno(), _drain, reader)
    try:
        yield
    finally:
        signal.set_wakeup_fd(-1)
        loop.remove_reader(reader.fileno())
        reader.close()
        writer.close()


def _drain(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.recv(4096)


def interruptible_input(prompt: str, poll: float = 0.1,
                        stop: threading.Event | None = None) -> str:
    """``input(prompt)`` that Ctrl-C always interrupts within ``poll`` seconds.

    Why: Python runs a signal's handler on the main thread, but the OS may hand SIGINT
    to any thread; then a main thread blocked in ``read()`` is never woken and Ctrl-C
    waits for the next Enter (measured: about one run in three at a terminal prompt).
    Waiting in short ``select`` slices runs bytecode in between, so the handler runs.
    On a canonical-mode terminal the fd is readable only once a whole line is typed.
    ``stop`` set ends the wait with ``EOFError`` and leaves the typed line unread.
    """
    stdin = sys.stdin
    try:
        fd = stdin.fileno()
        interactive = stdin.isatty() and hasattr(select, "select")
    except (AttributeError, OSError, ValueError):
        interactive = False
    if not interactive:
        return input(prompt)
    sys.stdout.write(prompt)
    sys.stdout.flush()
    while True:
        if stop is not None and stop.is_set():
            raise EOFError
        if select.select([fd], [], [], poll)[0]:
            break
    line = stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\n").rstrip("\r")


def interruptible_key(prompt: str, answers: Iterable[str], poll: float = 0.1,
                      stop: threading.Event | None = None) -> str:
    """One answer from ``answers`` at a single keypress (no Enter), echoed after ``prompt``.

    For a terminal stdin only: it is put in non-canonical, no-echo mode while waiting and
    restored after (Ctrl-C still interrupts: signals stay on). Keys typed before the
    question was shown are dropped (they answered something else), and so is what follows
    the answer's key in the same burst (the rest of a habitual "yes⏎"), so nothing left
    over answers the next question. A whole word typed at once ("yes⏎") counts too. Not a
    terminal (or no termios): ``interruptible_input``, one line.
    """
    accepted = {a.lower() for a in answers}
    try:
        import termios

        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd) if sys.stdin.isatty() else None
    except (ImportError, AttributeError, OSError, ValueError):
        saved = None
    if saved is None:
        return interruptible_input(prompt, poll, stop)
    raw = list(saved)
    raw[3] &= ~(termios.ICANON | termios.ECHO)  # lflags: byte by byte, nothing echoed
    raw[6] = list(saved[6])
    raw[6][termios.VMIN], raw[6][termios.VTIME] = 1, 0
    termios.tcflush(fd, termios.TCIFLUSH)
    termios.tcsetattr(fd, termios.TCSANOW, raw)
    try:
        sys.stdout.write(prompt)
        sys.stdout.flush()
        while True:
            if stop is not None and stop.is_set():
                raise EOFError
            if not select.select([fd], [], [], poll)[0]:
                continue
            chunk = os.read(fd, 64)
            if not chunk or chunk[:1] == b"\x04":  # end of input (Ctrl-D)
                raise EOFError
            text = chunk.decode("utf-8", "replace").strip().lower()
            if text in accepted:
                termios.tcflush(fd, termios.TCIFLUSH)
                sys.stdout.write(text + "\n")
                sys.stdout.flush()
                return text
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


def run_pumped(pump: PumpDispatcher, coro: Coroutine[Any, Any, T], grace: float = 10.0) -> T:
    """Run ``coro`` on the engine loop while this (main) thread serves ``pump``'s jobs.

    Ctrl-C cancels the run, waits up to ``grace`` seconds for it to answer its open
    calls (so the context stays valid), then re-raises ``KeyboardInterrupt``.
    """
    from . import eventloop as _eventloop

    future, finished = _eventloop.submit_tracked(coro)
    try:
        pump.pump(future)
    except KeyboardInterrupt:
        if future.cancel():
            finished.wait(grace)
        raise
    return future.result()
