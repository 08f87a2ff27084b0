"""``%agent`` and ``%%agent``: the notebook and terminal face of ``Agent``.

Thin by design: parse the line, call the library, display. In a kernel (ipykernel >= 7.4)
top-level agent cells are rewritten to *await* (``_transformer``), so the cell stays busy
until the run ends while approval clicks keep arriving; the listener and the approver hand
their work to the main thread (``_mainthread``). In terminal IPython the run blocks, prints
plain text and asks y/n/e/a on the main thread. User mistakes raise ``UsageError``: one
line, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import shlex
import sys
import threading
from dataclasses import dataclass
from typing import Any, Coroutine, Iterator

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import TraitError

from . import _loop
from ._mainthread import Dispatcher, LoopDispatcher, PumpDispatcher, wake_on_signals
from ._transformer import await_agent_magics, protect_question_marks
from .errors import IpyagentError

__all__ = ["AgentMagics", "load_ipython_extension", "unload_ipython_extension", "current",
           "agent_async"]

_MAGICS: AgentMagics | None = None
_OVERRIDES = {"model": "model", "base_url": "base_url", "approve": "approval",
              "max_steps": "max_steps"}
_ALONE = {"step", "context"}
_WITH_PATH = {"save", "load", "replay"}
_NO_TASK = ("give a task: `%agent TASK`, or `%%agent` with the task in the cell "
            "(`%agent?` for help)")


@dataclass
class Command:
    """One parsed ``%agent`` invocation."""

    action: str  # run | step | context | reset | save | load | replay
    task: str | None
    options: Any
    path: str | None = None
    kernel: bool = False  # reset --kernel


def _kernel_of(shell: Any) -> Any:
    return getattr(shell, "kernel", None)


def can_await(shell: Any) -> bool:
    """True in a kernel that reads comm messages while a cell awaits (ipykernel >= 7.4)."""
    if _kernel_of(shell) is None:
        return False
    import ipykernel

    parts = [int(p) for p in ipykernel.__version__.split(".")[:2] if p.isdigit()]
    return tuple(parts) >= (7, 4)


@magics_class
class AgentMagics(Magics):
    """The ``%agent`` magics and the agent behind them."""

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self._agent: Any = None
        self._warmup: threading.Thread | None = None
        self._pump: PumpDispatcher | None = None  # the blocking run's, for terminal prompts
        self.running = False
        self.in_kernel = _kernel_of(shell) is not None
        self.awaits = can_await(shell)
        self.approver: Any = None

    # -- the agent -------------------------------------------------------------------
    def get_agent(self) -> Any:
        """The agent behind the magics (created on first use with the shell's config)."""
        if self._agent is None:
            from .agent import Agent

            try:
                agent = Agent(parent=self.shell)
            except TraitError as exc:
                raise UsageError(f"ipython_config: {exc}") from None
            configured = self.shell.config._has_section("Agent") and (
                "approval" in self.shell.config.Agent)
            if not configured:
                agent.approval = "ask"  # the library's default is 'auto'; people get asked
            self.shell.configurables.append(agent)
            self._agent = agent
            self.approver = self._make_approver(agent)
            agent.approval_hook = self.approver
        return self._agent

    def _make_approver(self, agent: Any) -> Any:
        if self.in_kernel:
            from .approval_widgets import WidgetApprover

            return WidgetApprover(timeout=lambda: agent.approval_timeout)
        from .approval import TerminalApprover

        return TerminalApprover(input_fn=self._terminal_input)

    def _terminal_input(self, prompt: str) -> str:
        """``input`` on the main thread (where Ctrl-C lands); end of input means 'no'."""
        def ask() -> str:
            try:
                return input(prompt)
            except EOFError:
                return "n" if prompt.startswith("Run it") else ("." if not prompt else "")

        pump = self._pump
        return pump.call_and_wait(ask) if pump is not None else ask()

    def warm_up(self) -> None:
        """Start the sibling kernel (and pre-import widgets) without blocking the caller."""
        agent = self.get_agent()

        def work() -> None:
            try:
                if agent.python_tool:
                    agent.kernel  # noqa: B018 - starts it in the background
                if self.in_kernel:
                    import ipywidgets  # noqa: F401 - the first approval panel shows at once
            except Exception as exc:  # reported again by the first run that needs it
                agent.log.warning("ipyagent: sibling kernel did not start: %s", exc)

        self._warmup = threading.Thread(target=work, name="ipyagent-warmup", daemon=True)
        self._warmup.start()

    def _settle_warmup(self) -> None:
        if self._warmup is not None:
            self._warmup.join()
            self._warmup = None

    def banner(self) -> str:
        """One line: model, endpoint, approval."""
        agent = self.get_agent()
        if agent.model == "demo" and not getattr(agent, "_client_injected", False):
            where = "demo: the built-in offline model, not an LLM — set %config Agent.model"
        else:
            try:
                endpoint = agent.endpoint
                where = f"{agent.model} at {endpoint.base_url}"
            except IpyagentError as exc:
                where = f"{agent.model} ({exc})"
        return (f"ipyagent: model {where} · approval {agent.approval} · "
                "%agent? for help")

    # -- parsing ---------------------------------------------------------------------
    def parse(self, line: str, cell: str | None) -> Command:
        """Options first, then the task or a subcommand; ``UsageError`` on mistakes."""
        tokens, rest, forced = _split_options(line, self.agent.parser)
        # The parser itself, not parse_argstring: values were already unquoted above.
        opts = self.agent.parser.parse_args(tokens)
        if cell is not None:
            if rest.strip():
                raise UsageError(f"%%agent takes options on its line and the task in the cell; "
                                 f"got {rest.strip()!r} on the line")
            task = cell.strip()
            if not task:
                raise UsageError(_NO_TASK)
            return Command("step" if opts.step else "run", task, opts)
        words = [] if forced else rest.split()
        if words and words[0] in _ALONE and len(words) == 1:
            return Command(words[0], None, opts)
        if words and words[0] == "reset" and set(words[1:]) <= {"--kernel"} and len(words) <= 2:
            return Command("reset", None, opts, kernel=len(words) == 2)
        if words and words[0] in _WITH_PATH:
            try:
                args = shlex.split(rest)
            except ValueError:
                args = []
            if len(args) == 2:
                return Command(words[0], None, opts, path=args[1])
            if len(args) == 1:
                raise UsageError(f"%agent {words[0]} needs a path, e.g. %agent {words[0]} run.ipynb")
        task = rest.strip()
        if not task:
            if opts.step:
                return Command("step", None, opts)
            raise UsageError(_NO_TASK)
        return Command("step" if opts.step else "run", task, opts)

    # -- the magic -------------------------------------------------------------------
    @magic_arguments()
    @argument("--model", metavar="NAME", help="Model for this run (Agent.model).")
    @argument("--base-url", metavar="URL", help="Endpoint for this run (Agent.base_url).")
    @argument("--approve", choices=["auto", "ask", "deny"],
              help="Approval for this run (Agent.approval).")
    @argument("--max-steps", type=int, metavar="N", help="Iteration cap for this run "
              "(Agent.max_steps).")
    @argument("--new", action="store_true", help="Start a new conversation first.")
    @argument("--step", action="store_true", help="Add the task and run ONE iteration; "
              "`%%agent step` runs the next.")
    @argument("task", nargs="*", help="What to do, or a subcommand.")
    @line_cell_magic
    def agent(self, line: str = "", cell: str | None = None) -> Any:
        """Run the ipyagent agent: the model plans, writes Python, you approve, it runs.

        The agent's Python runs in a separate sibling kernel, not in this one. The
        conversation persists across cells: the next ``%agent`` continues it.

        Usage::

            %agent TASK                  run until the model answers (or a stop reason)
            %%agent [options]            the cell body is the task
            %agent --step TASK           add the task, run one iteration, stop
            %agent step                  run the next iteration (edit agent.context first)
            %agent context               the conversation, as a table
            %agent reset [--kernel]      start over (--kernel also restarts the sibling kernel)
            %agent save PATH.ipynb       save the run as a notebook
            %agent load PATH.ipynb       continue a saved conversation
            %agent replay PATH.ipynb     re-run a saved transcript, report differences

        Every setting is a traitlet: ``%config Agent`` lists them, ``%config Agent.model =
        "qwen2.5:7b"`` sets one (or ``c.Agent.model`` in ipython_config.py); the options
        below override one for a single run. ``ipyagent.current()`` is the agent itself.
        To send a task that starts with a subcommand word, put ``--`` before it.
        """
        cmd = self.parse(line, cell)
        if cmd.action not in ("run", "step"):
            return self._command(cmd)
        if self.in_kernel and not self.awaits:
            return self._detach(cmd)
        return self._run_blocking(cmd)

    async def agent_async(self, line: str = "", cell: str | None = None) -> Any:
        """The awaiting form of ``%agent`` (what top-level agent cells are rewritten to)."""
        line = self.shell.var_expand(line)  # `%agent {task}`, as run_line_magic would
        cmd = self.parse(line, cell)
        if cmd.action == "replay" and hasattr(self.get_agent(), "areplay"):
            # It re-runs a transcript in a fresh kernel: await it, the notebook stays live.
            try:
                return await self.get_agent().areplay(cmd.path)
            except (OSError, IpyagentError, ValueError) as exc:
                raise UsageError(f"%agent replay {cmd.path}: {_one_line(exc)}") from None
        if cmd.action not in ("run", "step"):
            return self._command(cmd)
        await asyncio.to_thread(self._settle_warmup)
        await self._run_async(cmd, LoopDispatcher())
        return None

    # -- subcommands -----------------------------------------------------------------
    def _command(self, cmd: Command) -> Any:
        agent = self.get_agent()
        if cmd.action == "context":
            return agent.context
        if cmd.action == "reset":
            agent.reset(kernel=cmd.kernel)
            print("ipyagent: new conversation" + (" and a restarted sibling kernel"
                                                  if cmd.kernel else ""))
            return None
        method = getattr(agent, cmd.action, None)
        if method is None:
            raise UsageError(f"%agent {cmd.action} is not available in this version of ipyagent")
        try:
            outcome = method(cmd.path)
        except (OSError, IpyagentError, ValueError) as exc:
            raise UsageError(f"%agent {cmd.action} {cmd.path}: {_one_line(exc)}") from None
        if cmd.action == "save":
            print(f"ipyagent: saved {len(agent.context)} items to {outcome}")
            return None
        if cmd.action == "load":
            print(f"ipyagent: loaded {len(agent.context)} items from {cmd.path}; "
                  "the next %agent continues it")
            return None
        return outcome

    # -- running ---------------------------------------------------------------------
    def _check_runnable(self, cmd: Command) -> Any:
        agent = self.get_agent()
        if self.running:
            raise UsageError("a run is already in progress in this session")
        if cmd.task is None and not agent.pending():
            raise UsageError("nothing to continue: the last step ended the run; "
                             "give a task (`%agent --step TASK`)")
        return agent

    @contextlib.contextmanager
    def _session(self, cmd: Command) -> Iterator[Any]:
        """Apply the one-run options, mark the session busy, restore afterwards."""
        agent = self._check_runnable(cmd)
        saved: dict[str, Any] = {}
        try:
            for opt, trait in _OVERRIDES.items():
                value = getattr(cmd.options, opt)
                if value is not None:
                    saved.setdefault(trait, getattr(agent, trait))
                    setattr(agent, trait, value)
        except TraitError as exc:
            for trait, value in saved.items():
                setattr(agent, trait, value)
            raise UsageError(str(exc)) from None
        if cmd.options.new:
            agent.reset()
        self.running = True
        try:
            yield agent
        finally:
            self.running = False
            for trait, value in saved.items():
                setattr(agent, trait, value)

    def _headless(self) -> bool:
        # Headless runners (nbclient, papermill, nbconvert --execute) send allow_stdin=False;
        # interactive frontends (JupyterLab, Notebook, VS Code) allow input.
        kernel = _kernel_of(self.shell)
        if kernel is None:
            return not sys.stdin.isatty()
        return not getattr(kernel, "_allow_stdin", True)

    def _listener(self, dispatcher: Dispatcher, cmd: Command, agent: Any) -> Any:
        if not self.in_kernel:
            from .display_terminal import TerminalDisplay

            return TerminalDisplay()
        from .display_notebook import NotebookDisplay

        asks = (lambda call: agent.approval == "ask" and call.name not in agent.allow
                and call.name not in agent._policy.always)
        display = NotebookDisplay(dispatcher, asks=asks, step_mode=cmd.action == "step")
        if self.approver is not None and hasattr(self.approver, "bind"):
            self.approver.bind(dispatcher, headless=self._headless())
        return display

    def _start(self, agent: Any, cmd: Command, listener: Any,
               on_done: Any) -> Any:
        run = agent.astep if cmd.action == "step" else agent.arun
        return _loop.submit(_guard(run(cmd.task, on_event=listener), on_done))

    async def _run_async(self, cmd: Command, dispatcher: LoopDispatcher) -> None:
        loop = asyncio.get_running_loop()
        with self._session(cmd) as agent:
            display = self._listener(dispatcher, cmd, agent)
            done = loop.create_future()
            future = self._start(agent, cmd, display, lambda: loop.call_soon_threadsafe(
                lambda: done.done() or done.set_result(None)))
            try:
                with wake_on_signals(loop):
                    await asyncio.wrap_future(future)
            except asyncio.CancelledError:  # the Interrupt button: stop the run, keep the cell
                future.cancel()
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(done), 10)
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(_interrupt_sibling(agent), 5)
                display.interrupted()
            except IpyagentError as exc:
                print(f"ipyagent: {_one_line(exc)}", file=sys.stderr)
            finally:
                display.close()

    def _run_blocking(self, cmd: Command) -> None:
        agent = self._check_runnable(cmd)
        needs_click = getattr(self.approver, "needs_event_loop", False) and (
            (cmd.options.approve or agent.approval) == "ask")
        if self.in_kernel and needs_click:
            raise UsageError("this %agent cannot wait for approval clicks here (only an "
                             "unindented %agent line or %%agent cell can); move it to the "
                             "start of a line, or use --approve auto")
        self._settle_warmup()
        pump = PumpDispatcher()
        with self._session(cmd):
            listener = self._listener(pump, cmd, agent)
            done = threading.Event()
            future = self._start(agent, cmd, listener, done.set)
            self._pump = pump
            try:
                pump.pump(future)
                future.result()
            except KeyboardInterrupt:
                future.cancel()
                pump.pump(done)  # the engine answers open calls, then stops
                with contextlib.suppress(Exception):
                    _loop.run_sync(_interrupt_sibling(agent), timeout=5)
                if hasattr(listener, "interrupted"):
                    listener.interrupted()
                else:
                    print("\nipyagent: interrupted — the context is valid; "
                          "`%agent step` or a new task continues", file=sys.stderr)
            except IpyagentError as exc:
                print(f"ipyagent: {_one_line(exc)}", file=sys.stderr)
            finally:
                self._pump = None
                if hasattr(listener, "close"):
                    listener.close()

    def _detach(self, cmd: Command) -> None:
        import ipykernel

        print(f"ipyagent: ipykernel {ipykernel.__version__} cannot take clicks while a cell "
              "waits (7.4+ can): this run continues in the background, and Run All will not "
              "wait for it", file=sys.stderr)
        self._check_runnable(cmd)
        task = asyncio.ensure_future(self._run_async(cmd, LoopDispatcher()))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())


async def _guard(coro: Coroutine[Any, Any, Any], on_done: Any) -> Any:
    """Run ``coro`` on the engine loop; ``on_done`` fires when it has really finished."""
    try:
        return await coro
    finally:
        on_done()


async def _interrupt_sibling(agent: Any) -> None:
    """Make sure code the run started in the sibling kernel stops too (harmless when idle)."""
    # The cancelled execute asks for this as well; asking again here costs a signal and
    # keeps the next run from queueing behind a loop that is still going.
    kernel = getattr(agent, "_kernel", None)  # never start one just to interrupt it
    if kernel is not None and kernel.is_alive():
        await kernel.interrupt_async()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text


def _split_options(line: str, parser: Any) -> tuple[list[str], str, bool]:
    """Leading ``--options`` (with their values), the raw rest, and whether ``--`` ended them."""
    takes_value = {s: a.nargs != 0 for s, a in parser._option_string_actions.items()}
    tokens: list[str] = []
    rest = line.lstrip()
    while rest.startswith("-"):
        head, _, tail = rest.partition(" ")
        if head == "--":
            return tokens, tail, True
        tokens.append(head)
        rest = tail.lstrip()
        if takes_value.get(head) and "=" not in head and rest:
            quote = rest[0] if rest[0] in "'\"" else None
            if quote and quote in rest[1:]:
                end = rest.index(quote, 1)
                tokens.append(rest[1:end])
                rest = rest[end + 1:].lstrip()
            else:
                value, _, rest = rest.partition(" ")
                tokens.append(value)
                rest = rest.lstrip()
    return tokens, rest, False


# -- extension entry points ------------------------------------------------------------
def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext ipyagent``: register the magics, start the sibling kernel, say hello."""
    global _MAGICS
    if _MAGICS is not None and _MAGICS.shell is ipython:
        print(_MAGICS.banner())
        return
    magics = AgentMagics(ipython)
    ipython.register_magics(magics)
    ipython.input_transformers_cleanup.append(protect_question_marks)
    if magics.awaits:
        ipython.input_transformers_post.append(await_agent_magics)
    _MAGICS = magics
    try:
        magics.get_agent()
    except UsageError as exc:
        print(f"ipyagent: {exc}", file=sys.stderr)
        return
    magics.warm_up()
    print(magics.banner())


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext ipyagent``: remove the magics and transformers, stop the sibling kernel."""
    global _MAGICS
    magics, _MAGICS = _MAGICS, None
    for stage, fn in ((ipython.input_transformers_cleanup, protect_question_marks),
                      (ipython.input_transformers_post, await_agent_magics)):
        while fn in stage:
            stage.remove(fn)
    for kind in ("line", "cell"):
        ipython.magics_manager.magics[kind].pop("agent", None)
    if magics is None:
        return
    magics._settle_warmup()
    agent = magics._agent
    if agent is not None:
        if agent in ipython.configurables:
            ipython.configurables.remove(agent)
        agent.close()


def current() -> Any:
    """The ``Agent`` behind ``%agent`` (``%load_ext ipyagent`` first)."""
    if _MAGICS is None:
        raise RuntimeError("ipyagent is not loaded: run %load_ext ipyagent first")
    return _MAGICS.get_agent()


async def agent_async(line: str = "", cell: str | None = None) -> Any:
    """What a rewritten top-level ``%agent`` cell awaits."""
    if _MAGICS is None:
        raise UsageError("ipyagent is not loaded: run %load_ext ipyagent first")
    return await _MAGICS.agent_async(line, cell)
