"""How one ``%agent`` run is carried out in a cell: awaiting, blocking or detached.

* awaiting (a rewritten top-level cell on ipykernel >= 7.4): the kernel's loop stays free,
  so approval clicks arrive while the cell stays busy;
* blocking (terminal IPython, or a ``%agent`` inside a ``def``): the main thread pumps the
  display and the terminal prompts until the engine is done;
* detached (older ipykernel): a task on the kernel's loop, the cell returns at once.

The engine runs on its own thread (``_util.eventloop``); ``guard`` tells the cell when it has really
finished, so an interrupted run has answered its open calls before the cell ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Coroutine, Iterator

from IPython.core.error import UsageError
from traitlets import TraitError

from .._util import eventloop as _eventloop
from .._util.mainthread import Dispatcher, LoopDispatcher, PumpDispatcher, wake_on_signals
from ..errors import IpyagentError

if TYPE_CHECKING:
    from ..engine.agent import Agent

__all__ = ["CellRunner", "Command", "OVERRIDES", "error_line", "request_meter"]

# Magic option -> Agent trait, for one run.
# The persona comes first, so explicit options given with it win over its settings.
OVERRIDES = {"persona": "persona", "provider": "provider", "api": "api", "model": "model",
             "base_url": "base_url", "approve": "approval", "max_steps": "max_steps"}


def request_meter(agent: Agent) -> tuple[int, int]:
    """(tokens the next request holds, Agent.context_window) for the footer's meter: the
    context and the tool specs, as compaction counts them (on a small window the specs
    are a large share: without them the meter read a quarter full when nothing fit)."""
    from ..engine.compaction import settings_for

    return agent.context.tokens + int(settings_for(agent)["extra_tokens"]), agent.window_in_force


@dataclass
class Command:
    """One parsed ``%agent`` invocation."""

    action: str  # run | step | context | reset | save | load | replay
    task: str | None
    options: Any
    path: str | None = None
    kernel: bool = False  # reset --kernel
    rerun: bool = False  # load --rerun
    cwd: str | None = None  # replay --cwd DIR
    args: tuple[str, ...] = ()  # push NAME…, pull NAME [LOCAL], code [N], context A:B
    fix: bool = False  # %agent fix: offer the answer's code as a new cell


class CellRunner:
    """Runs the magics' agent for one cell at a time."""

    def __init__(self, magics: Any) -> None:
        self.m = magics
        self.running = False
        self.pump: PumpDispatcher | None = None  # the blocking run's, for terminal prompts

    def __repr__(self) -> str:
        return f"<CellRunner {'running' if self.running else 'idle'}>"

    def check_runnable(self, cmd: Command) -> Any:
        agent = self.m.get_agent()
        if self.running:
            raise UsageError("a run is already in progress in this session")
        if cmd.task is None and not agent.pending():
            raise UsageError("nothing to continue: the last step ended the run; "
                             "give a task (`%agent --step TASK`)")
        return agent

    @contextlib.contextmanager
    def session(self, cmd: Command) -> Iterator[Any]:
        """Apply the one-run options, mark the session busy, restore afterwards."""
        agent = self.check_runnable(cmd)
        saved: dict[str, Any] = {}
        try:
            for opt, trait in OVERRIDES.items():
                value = getattr(cmd.options, opt)
                if value is not None:
                    saved.setdefault(trait, getattr(agent, trait))
                    setattr(agent, trait, value)
        except TraitError as exc:
            for trait, value in reversed(saved.items()):  # last set, first restored
                setattr(agent, trait, value)
            raise UsageError(str(exc)) from None
        if cmd.options.new:
            agent.reset()
        self.running = True
        try:
            for name in getattr(cmd.options, "skill", None) or []:  # -s NAME: up front
                try:
                    agent.use_skill(name)
                except IpyagentError as exc:
                    raise UsageError(f"-s {error_line(name)}: {error_line(exc)}") from None
            from .aware import prepare_run

            prepare_run(self.m, agent, cmd)  # --with copies, --cells, the namespace picture
            yield agent
        finally:
            self.running = False
            if hasattr(self.m.approver, "unbind"):
                self.m.approver.unbind()  # its cell is done: never draw buttons there again
            for trait, value in reversed(saved.items()):  # last set, first restored
                setattr(agent, trait, value)

    def headless(self) -> bool:
        # Headless runners (nbclient, papermill, nbconvert --execute) send allow_stdin=False;
        # interactive frontends (JupyterLab, Notebook, VS Code) allow input.
        kernel = getattr(self.m.shell, "kernel", None)
        if kernel is None:
            from ..engine.approval import on_a_terminal

            return not on_a_terminal()
        return not getattr(kernel, "_allow_stdin", True)

    def listener(self, dispatcher: Dispatcher, cmd: Command, agent: Agent) -> Any:
        if not self.m.in_kernel:
            from .terminal import TerminalDisplay

            # IPython's own `--colors=NoColor` (or %colors nocolor) turns ours off too.
            scheme = str(getattr(self.m.shell, "colors", "") or "").lower()
            return TerminalDisplay(preview=agent.tools.preview, step_mode=cmd.action == "step",
                                   colour=False if scheme == "nocolor" else None,
                                   scheme=scheme,
                                   max_output_lines=agent.output_lines)
        from .notebook import NotebookDisplay

        display = NotebookDisplay(dispatcher, asks=lambda call: agent.asks_first(call.name),
                                  step_mode=cmd.action == "step", preview=agent.tools.preview,
                                  meter=lambda: request_meter(agent),
                                  code_action=self._code_action(agent),
                                  output_lines=agent.output_lines,
                                  step_action=_step_action(self.m, agent))
        if self.m.approver is not None and hasattr(self.m.approver, "bind"):
            self.m.approver.bind(dispatcher, headless=self.headless())
        return display

    def _code_action(self, agent: Agent) -> Any:
        """The "code → new cell" action under each python card of this cell's run."""
        from ..context.items import ToolCall
        from ..trust.cellcode import UnsafeCode, cell_text
        from .cellcode import code_button, current_cell_id, fallback_line
        from .notebook import footer_html

        cell_id = current_cell_id(self.m.shell)  # read now: the cell that runs this %agent

        def action(call: ToolCall, code: str) -> Any:
            calls = [i for i in agent.context if isinstance(i, ToolCall) and i.name == "python"]
            # The call itself; a re-run's stand-in by its recorded id; else the newest.
            number = next((n for n, i in enumerate(calls, 1) if i is call),
                          next((n for n, i in enumerate(calls, 1) if i.id == call.id), len(calls)))
            try:  # the cell gets exactly what the card shows (trust.cellcode)
                code = cell_text(code)
            except UnsafeCode as exc:
                return footer_html(f"code → new cell: not offered — {exc}")
            button = code_button(code, number, cell_id)
            return button if button is not None else footer_html(fallback_line(number))

        return action

    def start(self, agent: Agent, cmd: Command, listener: Any,
               on_done: Any) -> Any:
        run = agent.astep if cmd.action == "step" else agent.arun
        return _eventloop.submit(guard(run(cmd.task, on_event=listener), on_done))

    async def run_async(self, cmd: Command, dispatcher: LoopDispatcher) -> None:
        from .busy import busy_while_running

        loop = asyncio.get_running_loop()
        with self.session(cmd) as agent, busy_while_running(getattr(self.m.shell, "kernel", None)):
            display = self.listener(dispatcher, cmd, agent)
            done = loop.create_future()
            future = self.start(agent, cmd, display,
                                lambda: loop.call_soon_threadsafe(_resolve, done))
            try:
                with wake_on_signals(loop):
                    await asyncio.wrap_future(future)
            except asyncio.CancelledError:  # the Interrupt button: stop the run, keep the cell
                future.cancel()
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(done), 10)
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(interrupt_sibling(agent), 5)
                display.interrupted()
            except IpyagentError as exc:
                print(f"ipyagent: {error_line(exc)}", file=sys.stderr)
            finally:
                display.close()

    def waits_for_clicks(self, cmd: Command) -> bool:
        """True when this run's calls wait for buttons someone can click (a live notebook)."""
        agent = self.check_runnable(cmd)
        needs_click = getattr(self.m.approver, "needs_event_loop", False) and (
            (cmd.options.approve or agent.approval) == "ask")
        # Headless (nbclient, papermill) nobody clicks: calls are denied (or time out) as
        # they would be in an awaiting cell, so a blocking run is as good there.
        return bool(self.m.in_kernel and needs_click and not self.headless())

    def run_blocking(self, cmd: Command) -> None:
        agent = self.check_runnable(cmd)
        if self.waits_for_clicks(cmd):
            raise UsageError("this %agent cannot wait for approval clicks here (only an "
                             "unindented %agent line or %%agent cell can); move it to the "
                             "start of a line, or use --approve auto")
        self.m.settle_warmup()
        pump = PumpDispatcher()
        with self.session(cmd):
            listener = self.listener(pump, cmd, agent)
            done = threading.Event()
            self.pump = pump  # before the run starts: its first prompt may come at once
            future = self.start(agent, cmd, listener, done.set)
            try:
                pump.pump(future)
                future.result()
            except KeyboardInterrupt:
                future.cancel()
                pump.pump(done)  # the engine answers open calls, then stops
                with contextlib.suppress(Exception):
                    _eventloop.run_sync(interrupt_sibling(agent), timeout=5)
                if hasattr(listener, "interrupted"):
                    listener.interrupted()
                else:
                    print("\nipyagent: interrupted — the context is valid; "
                          "`%agent step` or a new task continues", file=sys.stderr)
            except IpyagentError as exc:
                print(f"ipyagent: {error_line(exc)}", file=sys.stderr)
            finally:
                self.pump = None
                if hasattr(listener, "close"):
                    listener.close()

    def detach(self, cmd: Command, why: str = "") -> None:
        """Run on the kernel's loop after this cell ends, so that clicks can arrive."""
        import ipykernel

        print(why or f"ipyagent: ipykernel {ipykernel.__version__} cannot take clicks while a "
              "cell waits (7.4+ can): this run continues in the background, and Run All will "
              "not wait for it", file=sys.stderr)
        self.check_runnable(cmd)
        task = asyncio.ensure_future(self.run_async(cmd, LoopDispatcher()))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())


def _step_action(magics: Any, agent: Agent) -> Any:
    """The "rewind to here" under each step of this cell's run (``rewind_button``)."""
    from .rewind_button import step_action

    return step_action(magics, agent)


async def guard(coro: Coroutine[Any, Any, Any], on_done: Any) -> Any:
    """Run ``coro`` on the engine loop; ``on_done`` fires when it has really finished."""
    try:
        return await coro
    finally:
        on_done()


async def interrupt_sibling(agent: Agent) -> None:
    """Make sure code the run started in the sibling kernel stops too (harmless when idle)."""
    # The cancelled execute asks for this as well; asking again here costs a signal and
    # keeps the next run from queueing behind a loop that is still going.
    kernel = agent.kernel_if_started  # never start one just to interrupt it
    if kernel is not None and kernel.is_alive():
        await kernel.interrupt_async()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def error_line(exc: BaseException) -> str:
    """An exception as one readable line, its control characters made visible."""
    from .._util.text import one_line, visible

    return visible(one_line(exc))
