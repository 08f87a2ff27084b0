"""``%agent rewind N``, ``fork [NAME]``, ``switch NAME``, ``branches``: the magics' face of
rewind and branches (the repl's ``/rewind``, ``/fork``, ``/switch``, ``/branches`` share it).

A rewind re-runs the kept python calls in a fresh sibling: it shows a progress bar (a line
in a terminal) and, for a call that did not run in this session, its card and approval as a
live call has; Interrupt stops it (the conversation and the files are already back; the
kernel then has only what re-ran, and says so).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import TYPE_CHECKING, Any, Callable

from IPython.core.error import UsageError

from .._util.text import visible
from ..errors import IpyagentError
from .cellrun import Command, error_line

if TYPE_CHECKING:
    from ..engine.agent import Agent
    from ..engine.plugs import RewindPlan

__all__ = ["ACTIONS", "parse", "run_command", "rewind_awaiting", "RewindListener",
           "interrupted_line", "fork_line", "switch_line", "repl_command"]

ACTIONS = ("rewind", "fork", "switch", "branches")
_USAGE = {"rewind": "%agent rewind N [--no-branch]: the step to go back to (the context "
                    "table shows the steps; --no-branch: do not keep the dropped ones)",
          "switch": "%agent switch NAME: the branch to go on with (%agent branches lists them)"}


def parse(words: list[str], opts: Any) -> Command | None:
    """The branch subcommands, or None (then the words are a task: "rewind the tape")."""
    if not words or words[0] not in ACTIONS:
        return None
    head, tail = words[0], words[1:]
    if head == "rewind":
        if not tail:
            raise UsageError(_USAGE["rewind"])
        if tail[0].isdigit() and len(tail) <= 2 and set(tail[1:]) <= {"--no-branch"}:
            return Command("rewind", None, opts, args=tuple(tail))
        return None
    if head == "branches":
        return Command("branches", None, opts) if not tail else None
    if head == "switch" and not tail:
        raise UsageError(_USAGE["switch"])
    if len(tail) > 1 or (head == "switch" and not tail):
        return None
    return Command(head, None, opts, args=tuple(tail))


def _rewind_args(cmd: Command) -> tuple[int, bool]:
    return int(cmd.args[0]), "--no-branch" not in cmd.args[1:]


def fork_line(name: str, parent: str, step: int, switch: str = "%agent switch",
              next_: str = "the next %agent") -> str:
    return visible(f"ipyagent: forked branch {name} from {parent} at step {step}; {next_} "
                   f"continues {name} (`{switch} {parent}` goes back)")


def switch_line(name: str, steps: int, next_: str = "the next %agent") -> str:
    return visible(f"ipyagent: on branch {name} ({steps} step{'s' * (steps != 1)}); {next_} "
                   "continues it")


def interrupted_line(n: int, done: int, total: int,
                     how: str = "`ipyagent.current().rebuild_kernel(restart=True)`") -> str:
    """What an interrupted rewind leaves."""
    return (f"ipyagent: interrupted the re-run after {done} of {total} call"
            f"{'s' * (total != 1)}: the conversation is at step {n} and its files are put "
            f"back, but the sibling kernel has only what re-ran; {how} re-runs them all")


# -- the repl's /rewind, /fork, /switch, /branches -------------------------------------------
def repl_command(repl: Any, word: str, rest: str) -> None:
    """One of the branch commands in ``ipyagent repl`` (``repl.agent`` may change)."""
    from .._util import eventloop as _eventloop
    from ..context.steps import count_steps
    from .terminal import TerminalDisplay

    agent = repl.agent
    words = rest.split()
    try:
        if word == "branches":
            print(agent.branches.text())
        elif word == "fork" and len(words) <= 1:
            tree = agent.branches
            parent = tree.name_of(agent)
            made = agent.fork(words[0] if words else None)
            name = tree.name_of(made)
            repl.agent = tree.switch(name)
            print(fork_line(name, parent, count_steps(made.context), "/switch", "a new task"))
        elif word == "switch" and len(words) == 1:
            repl.agent = agent.branches.switch(words[0])
            print(switch_line(words[0], count_steps(repl.agent.context), "a new task"))
        elif word == "rewind" and words and words[0].isdigit() and len(words) <= 2 \
                and set(words[1:]) <= {"--no-branch"}:
            n, keep = int(words[0]), "--no-branch" not in words
            plan = agent.rewind_plan(n)
            display = TerminalDisplay(preview=agent.tools.preview,
                                      max_output_lines=agent.output_lines, **repl.colours)
            listener = RewindListener(display, agent, plan.reruns, terminal=True)
            future, finished = _eventloop.submit_tracked(agent.arewind(n, keep=keep,
                                                                       on_event=listener))
            try:
                repl.pump.pump(future)
                print(str(future.result()))
            except KeyboardInterrupt:
                future.cancel()
                finished.wait(10)
                print(interrupted_line(n, listener.done, plan.reruns, "/reset --kernel then "
                                       "/rewind N"), file=sys.stderr)
        else:
            usage = {"rewind": "/rewind N [--no-branch]", "fork": "/fork [NAME]",
                     "switch": "/switch NAME"}[word]
            print(f"ipyagent: usage: {usage}", file=sys.stderr)
    except IpyagentError as exc:
        print(f"ipyagent: /{word}: {error_line(exc)}", file=sys.stderr)


def run_command(magics: Any, agent: Agent, cmd: Command) -> Any:
    """``fork``, ``switch``, ``branches``, and a blocking ``rewind`` (a terminal, a cell that
    cannot await)."""
    from ..context.steps import count_steps

    if cmd.action == "branches":
        return agent.branches
    if magics.runner.running:
        raise UsageError(f"%agent {cmd.action}: a run is in progress in this session")
    try:
        if cmd.action == "fork":
            tree = agent.branches
            parent = tree.name_of(agent)
            made = agent.fork(cmd.args[0] if cmd.args else None)
            name = tree.name_of(made)
            tree.switch(name)
            magics.use_agent(made)
            print(fork_line(name, parent, count_steps(made.context)))
            return None
        if cmd.action == "switch":
            target = agent.branches.switch(cmd.args[0])
            magics.use_agent(target)
            print(switch_line(cmd.args[0], count_steps(target.context)))
            return None
    except IpyagentError as exc:
        raise UsageError(f"%agent {cmd.action}: {error_line(exc)}") from None
    return _rewind_blocking(magics, agent, cmd)


def _plan(agent: Agent, n: int) -> RewindPlan:
    try:
        return agent.rewind_plan(n)
    except IpyagentError as exc:
        raise UsageError(f"%agent {error_line(exc)}") from None


def _rewind_blocking(magics: Any, agent: Agent, cmd: Command) -> Any:
    from .._util import eventloop as _eventloop
    from .._util.mainthread import PumpDispatcher

    n, keep = _rewind_args(cmd)
    plan = _plan(agent, n)
    if plan.ask and magics.in_kernel and getattr(magics.approver, "needs_event_loop", False) \
            and agent.approval == "ask":
        raise UsageError("this %agent rewind re-runs code that did not run in this session and "
                         "cannot wait for approval clicks here (only an unindented %agent line "
                         "can); move it to the start of a line")
    magics.settle_warmup()
    pump = PumpDispatcher()
    listener = RewindListener(magics.runner.listener(pump, cmd, agent), agent, plan.reruns,
                              terminal=not magics.in_kernel)
    magics.runner.pump = pump  # the terminal prompt reads on this (the main) thread
    future = _eventloop.submit(agent.arewind(n, keep=keep, on_event=listener))
    try:
        pump.pump(future)
        report = future.result()
    except KeyboardInterrupt:
        future.cancel()
        raise UsageError(interrupted_line(n, listener.done, plan.reruns)[len("ipyagent: "):]) from None
    except IpyagentError as exc:
        raise UsageError(f"%agent {error_line(exc)}") from None
    finally:
        magics.runner.pump = None
        listener.close()
    return _said(magics, report)


async def rewind_awaiting(magics: Any, cmd: Command) -> Any:
    """``%agent rewind N`` in an awaiting cell: approvals are clicks, Interrupt stops it."""
    from .._util.mainthread import LoopDispatcher
    from .cellrun import interrupt_sibling

    await asyncio.to_thread(magics.settle_warmup)
    agent = magics.get_agent()
    if magics.runner.running:
        raise UsageError("%agent rewind: a run is in progress in this session")
    n, keep = _rewind_args(cmd)
    plan = _plan(agent, n)
    listener = RewindListener(magics.runner.listener(LoopDispatcher(), cmd, agent), agent,
                              plan.reruns, terminal=not magics.in_kernel)
    try:
        report = await agent.arewind(n, keep=keep, on_event=listener)
    except asyncio.CancelledError:  # the Interrupt button: stop what runs, keep the cell
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(interrupt_sibling(agent), 5)
        print(interrupted_line(n, listener.done, plan.reruns), file=sys.stderr)
        return None
    except IpyagentError as exc:
        raise UsageError(f"%agent {error_line(exc)}") from None
    finally:
        if hasattr(magics.approver, "unbind"):
            magics.approver.unbind()
        listener.close()
    return _said(magics, report)


def _said(magics: Any, report: Any) -> Any:
    """The report: its rich repr in a notebook, its lines in a terminal."""
    if magics.in_kernel:
        return report
    print(str(report))
    return None


class RewindListener:
    """What a rewind shows: progress over its re-run, and the cards of the calls that are
    asked about (those that did not run in this session), as a live run shows them."""

    def __init__(self, display: Any, agent: Agent, total: int, *, terminal: bool) -> None:
        self.display = display
        self.agent = agent
        self.total = total
        self.done = 0
        self.shown: set[str] = set()  # ids of the calls whose events go to the display
        self.bar: Any = None
        self.terminal = terminal
        self.dispatcher = getattr(display, "dispatcher", None)

    def __call__(self, event: Any) -> None:
        from ..context.events import ToolCallFinished, ToolCallRequested

        if isinstance(event, ToolCallRequested):
            if not self._known(event.call):
                self.shown.add(event.call.id)
            self._progress()
        if event_call_id(event) in self.shown or not hasattr(event, "call"):
            self.display(event)
        if isinstance(event, ToolCallFinished):
            self.done += 1
            self._progress()

    def _known(self, call: Any) -> bool:
        args = call.arguments
        if call.name == "python":
            return self.agent.ran_here.has_code("python", str(args.get("code", "")))
        return self.agent.ran_here.has_code(f"file:{args.get('path')}", str(args.get("content", "")))

    def _progress(self) -> None:
        if not self.total:
            return
        if self.terminal:
            if self.done == self.total or self.done % max(1, self.total // 10) == 0:
                print(f"ipyagent: re-running the kept calls in a fresh sibling: "
                      f"{self.done}/{self.total}", file=sys.stderr)
            return
        call: Callable[..., None] = self.dispatcher.call if self.dispatcher is not None \
            else (lambda fn, *a: fn(*a))
        call(self._draw, self.done)

    def _draw(self, done: int) -> None:
        """The progress bar (main thread)."""
        try:
            import ipywidgets as w  # type: ignore[import-untyped]
        except ImportError:
            return
        if self.bar is None:
            from IPython.display import display

            self.bar = w.IntProgress(value=0, min=0, max=self.total,
                                     description="re-running", bar_style="info")
            self.bar.add_class("ipyagent-rewind-progress")
            display(self.bar)
        self.bar.value = done
        self.bar.description = f"{done}/{self.total}"
        if done >= self.total:
            self.bar.bar_style = "success"

    def close(self) -> None:
        if hasattr(self.display, "close"):
            self.display.close()


def event_call_id(event: Any) -> str | None:
    call = getattr(event, "call", None)
    return getattr(call, "id", None)
