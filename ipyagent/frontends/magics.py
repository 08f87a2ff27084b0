"""``%agent`` and ``%%agent``: the notebook and terminal face of ``Agent``.

Thin by design: parse the line, call the library, display. In a kernel (ipykernel >= 7.4)
top-level agent cells are rewritten to *await* (``transformer``), so the cell stays busy
until the run ends while approval clicks keep arriving; the listener and the approver hand
their work to the main thread (``_util.mainthread``). In terminal IPython the run blocks, prints
plain text and asks y/n/e/a on the main thread. User mistakes raise ``UsageError``: one
line, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import sys
import threading
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import TraitError

from .._util.mainthread import LoopDispatcher
from .._util.text import visible
from ..errors import IpyagentError
from . import branching
from .cellrun import OVERRIDES, CellRunner, Command, error_line
from .transformer import await_agent_magics, protect_question_marks

if TYPE_CHECKING:
    from ..engine.agent import Agent

__all__ = ["AgentMagics", "load_ipython_extension", "unload_ipython_extension", "current",
           "agent_async"]

_MAGICS: AgentMagics | None = None
AUTOSAVE_DIR = ".ipyagent/runs/"  # the magics' Agent.autosave unless configured
_ALONE = {"step", "context", "audit", "mcp", "personas", "skills", "changes", "apply", "discard",
          "undo"}
_WITH_PATH = {"save", "load", "replay"}
_ROWS = re.compile(r"-?\d*:-?\d*")  # %agent context 100:200 (a Python slice of the rows)
# A trailing comment on the magic's line, as PEP 8 writes one: two spaces or more, then "#"
# and a space (or the line's end); "issue #12" or "a # b" in a task stay the task's.
_COMMENT = re.compile(r"\s{2,}#(\s.*)?$")
_LOADED_HERE = ("ipyagent: this cell loaded ipyagent, so it cannot wait for the run: the run "
                "goes on below, and Run All does not wait for it (an %agent in a cell of its "
                "own does)")
_NO_TASK = ("give a task: `%agent TASK`, or `%%agent` with the task in the cell "
            "(`%agent?` for help)")


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
        self._agent: Agent | None = None
        self._warmup: threading.Thread | None = None
        # Where the code runs, as last said in a %agent output (None: not yet): the first
        # %agent says the banner's unsandboxed/remote line again, and a %config that moves
        # the code (kernel_url, workspace) is said at the next %agent, shell tool included.
        self._place_told: tuple[str, str, str] | None = None
        self._place_banner: tuple[str, str, str] | None = None  # what the banner said
        self.runner = CellRunner(self)
        self.in_kernel = _kernel_of(shell) is not None
        # The cell that runs %load_ext was read before the awaiting rewrite existed: an
        # %agent later in that same cell is a blocking call (see agent()).
        self.loaded_in = getattr(shell, "execution_count", None)
        self.awaits = can_await(shell)
        self.approver: Any = None
        self.stepping: dict[str, Any] = {}  # the one-run options of the run being stepped
        from .aware import ErrorWatch

        self.errors = ErrorWatch()  # the last cell that raised, for %agent fix

    # -- the agent -------------------------------------------------------------------
    def get_agent(self) -> Agent:
        """The agent behind the magics (created on first use with the shell's config)."""
        if self._agent is None:
            from ..engine.agent import Agent

            shell = self.shell
            assert shell is not None
            try:
                agent = Agent(parent=shell)
            except TraitError as exc:
                raise UsageError(f"ipython_config: {exc}") from None
            configured = shell.config.Agent if shell.config._has_section("Agent") else {}
            if "approval" not in configured:
                agent.approval = "ask"  # the library's default is 'auto'; people get asked
            if "autosave" not in configured:
                agent.autosave = AUTOSAVE_DIR  # the library's is off; a notebook keeps its runs
            shell.configurables.append(agent)
            from ..kernel.namespace import shareable
            from .aware import user_variables

            agent.copy_source = lambda: shareable(user_variables(shell))  # for NameError offers
            from ..tools.offers import offer_tool

            # offer_result: the model may offer a value; only the person's answer puts it here.
            agent.copy_target = shell.user_ns
            agent.tools.add(offer_tool(agent))
            self._agent = agent
            self.approver = self._make_approver(agent)
            agent.approval_hook = self.approver
        return self._agent

    def _make_approver(self, agent: Agent) -> Any:
        if self.in_kernel:
            from .widgets import WidgetApprover

            return WidgetApprover(timeout=lambda: agent.approval_timeout)
        from ..engine.approval import TerminalOrDeny
        from .widgets import unattended_reason

        # The run's TerminalDisplay already shows each call: the prompt does not repeat it.
        return TerminalOrDeny(self._terminal_input, lambda call: unattended_reason(
            call, "nobody could approve this call: stdin is not a terminal"))

    def _terminal_input(self, prompt: str, keys: tuple[str, ...] = ()) -> str:
        """The answer is read on the main thread, where Ctrl-C lands (``keys``: at one
        keypress, ``terminal_answer``)."""
        from ..engine.approval import terminal_answer

        pump = self.runner.pump
        return pump.call_and_wait(terminal_answer, prompt, None, keys) if pump is not None \
            else terminal_answer(prompt, None, keys)

    def warm_up(self) -> None:
        """Start the sibling kernel (and pre-import widgets) without blocking the caller."""
        agent = self.get_agent()

        def work() -> None:
            try:
                if agent.python_tool or "shell" in agent.tools:
                    agent.kernel  # noqa: B018 - starts it in the background
                if self.in_kernel:
                    import ipywidgets  # type: ignore[import-untyped]  # noqa: F401 - pre-import
            except Exception as exc:  # reported again by the first run that needs it
                agent.log.warning("ipyagent: sibling kernel did not start: %s", exc)

        self._warmup = threading.Thread(target=work, name="ipyagent-warmup", daemon=True)
        self._warmup.start()

    def use_agent(self, agent: Agent) -> None:
        """Go on with ``agent`` (a branch of this conversation): %agent and %config drive it."""
        shell = self.shell
        old, self._agent = self._agent, agent
        if shell is not None:
            if old is not None and old in shell.configurables:
                shell.configurables.remove(old)
            if agent not in shell.configurables:
                shell.configurables.append(agent)

    @property
    def agent_if_made(self) -> Agent | None:
        """The agent behind the magics, if one was made (never makes one)."""
        return self._agent

    def settle_warmup(self) -> None:
        """Wait for the warm-up thread (it may be creating the sibling kernel right now)."""
        thread = self._warmup  # read once: another thread may be settling it too
        if thread is not None:
            thread.join()
            self._warmup = None

    def banner(self) -> str:
        """What %load_ext says: model, endpoint and approval, then a line for each note."""
        agent = self.get_agent()
        demo = agent.model == "demo" and not agent.client_is_injected
        if demo:
            # Its own line: one long line wrapped mid-word in a notebook's 100 columns.
            where = "demo"
        else:
            try:
                endpoint = agent.endpoint
                where = f"{agent.model} at {endpoint.base_url}"
            except IpyagentError as exc:
                where = f"{agent.model} ({exc})"
        line = (f"ipyagent: model {where} · approval {agent.approval} · "
                "%agent? for help")
        self._place_banner = (agent.kernel_url, agent.workspace, agent.shell_tool)
        about = ("ipyagent: demo is the built-in offline model, not an LLM: "
                 "%config Agent.model picks yours") if demo else None
        notes = [n for n in (about, self.sandbox_line(), self.shell_line()) if n]
        return "\n".join([line, *notes])

    def tell_place(self) -> None:
        """Before a run: where the code runs, once, and again whenever that moved."""
        agent = self.get_agent()
        place = (agent.kernel_url, agent.workspace, agent.shell_tool)
        if place == self._place_told:
            return
        said = self._place_told or self._place_banner
        moved = said is not None and said != place
        self._place_told = place
        note = self.sandbox_line()
        for line in (note, self.shell_line() if moved else None):
            if line:
                print(line, file=sys.stderr)

    def shell_line(self) -> str:
        """One line: whether the ``shell`` tool is offered, and why."""
        return f"ipyagent: {self.get_agent().shell_status()[1]}"

    def sandbox_line(self) -> str | None:
        """One line when the sibling kernel is not sandboxed though it could be asked to be,
        or runs on a remote server (where: the URL, never the token)."""
        from .cliopts import where_code_runs

        note = where_code_runs(self.get_agent())
        return f"ipyagent: {note}" if note else None

    # -- parsing ---------------------------------------------------------------------
    def parse(self, line: str, cell: str | None) -> Command:
        """Options first, then the task or a subcommand; ``UsageError`` on mistakes. A bare
        ``%agent step`` goes on with the one-run options of the ``--step TASK`` that began
        its run (a new user gave ``--approve auto`` there and was asked at the next step)."""
        cmd = self._parse(line, cell)
        if cmd.action == "step" and cmd.task is None:
            for opt, value in self.stepping.items():
                if getattr(cmd.options, opt, None) is None:
                    setattr(cmd.options, opt, value)
        elif cmd.action in ("step", "run"):
            self.stepping = {opt: getattr(cmd.options, opt) for opt in OVERRIDES
                             if cmd.action == "step" and getattr(cmd.options, opt, None) is not None}
        return cmd

    def _parse(self, line: str, cell: str | None) -> Command:
        # Here, not in an input transformer: the cell that runs %load_ext was read before
        # any transformer of ours existed, and its %agent lines must read the same.
        line = _COMMENT.sub("", line)
        tokens, rest, forced = _split_options(line, self.agent.parser)
        _did_you_mean(tokens, self.agent.parser)
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
        aware = _aware_command(words, rest, opts, self) or _memory_command(words, rest, opts) \
            or branching.parse(words, opts)
        if aware is not None:
            return aware
        if words and words[0] in _ALONE and len(words) == 1:
            return Command(words[0], None, opts)
        if words[:2] == ["changes", "--all"] and len(words) == 2:
            return Command("changes", None, opts, args=("--all",))
        if words and words[0] in ("apply", "discard") and _pending_paths(self.get_agent(), words[1:]):
            return Command(words[0], None, opts, args=tuple(words[1:]))
        if len(words) == 2 and words[0] == "context" and _ROWS.fullmatch(words[1]):
            return Command("context", None, opts, args=tuple(words[1].split(":")))
        if words[:1] == ["mcp"] and len(words) == 2 and words[1] in ("trust", "untrust"):
            return Command(f"mcp-{words[1]}", None, opts)
        if words and words[0] == "reset" and set(words[1:]) <= {"--kernel"} and len(words) <= 2:
            return Command("reset", None, opts, kernel=len(words) == 2)
        if words and words[0] in _WITH_PATH:
            try:
                args = shlex.split(rest)
            except ValueError:
                args = []
            rerun = words[0] == "load" and "--rerun" in args[2:]
            if rerun:
                args.remove("--rerun")
            if words[0] == "load" and not rerun and {"--cwd", "--approve"} & set(args[2:]):
                raise UsageError("%agent load: --cwd and --approve go with --rerun (loading "
                                 "alone runs nothing)")
            cwd = _replay_options(args, opts, words[0]) if rerun or words[0] == "replay" else None
            if len(args) == 2:
                return Command(words[0], None, opts, path=args[1], rerun=rerun, cwd=cwd)
            if len(args) == 1:
                raise UsageError(f"%agent {words[0]} needs a path, e.g. %agent {words[0]} run.ipynb")
            if " ".join(args[1:]).endswith(".ipynb"):  # a path with spaces, not a task
                raise UsageError(f"%agent {words[0]} takes one path; quote a path with spaces: "
                                 f"%agent {words[0]} \"{' '.join(args[1:])}\"")
        if (len(words) > 1 and words[0] in _ALONE and words[1].split("=")[0]
                in self.agent.parser._option_string_actions):
            # "%agent step --approve auto" would run the task "step --approve auto": the
            # options go first.
            raise UsageError(f"%agent {words[0]}: options go before the subcommand, as in "
                             f"%agent {' '.join(words[1:])} {words[0]}")
        task = rest.strip()
        if not task:
            if opts.step:
                return Command("step", None, opts)
            raise UsageError(_NO_TASK)
        return Command("step" if opts.step else "run", task, opts)

    # -- the magic -------------------------------------------------------------------
    @magic_arguments()
    @argument("--model", metavar="NAME", help="Model for this run (Agent.model).")
    @argument("--provider", metavar="NAME", help="Provider preset for this run (Agent.provider): "
              "openai, anthropic, ollama, llamacpp, llama-cpp-python, vllm, lmstudio, groq, openrouter.")
    @argument("--api", choices=["chat", "responses", "anthropic"],
              help="Wire format for this run (Agent.api).")
    @argument("--base-url", metavar="URL", help="Endpoint for this run (Agent.base_url).")
    @argument("--approve", choices=["auto", "ask", "deny"],
              help="Approval for this run (Agent.approval).")
    @argument("--max-steps", type=int, metavar="N", help="Iteration cap for this run "
              "(Agent.max_steps).")
    @argument("-p", "--persona", metavar="NAME", help="Persona for this run (Agent.persona): "
              "coder, data-analyst, reviewer, or your own; `%%agent personas` lists them.")
    @argument("-s", "--skill", action="append", metavar="NAME", help="Load this skill's "
              "instructions before the task (repeatable); `%%agent skills` lists them.")
    @argument("--new", action="store_true", help="Start a new conversation first.")
    @argument("--step", action="store_true", help="Add the task and run ONE iteration; "
              "`%%agent step` runs the next.")
    @argument("--with", dest="with_", metavar="NAMES", help="Copy these variables of your "
              "kernel (comma-separated) into the agent's kernel before the run.")
    @argument("--cells", type=int, metavar="N", help="Add the last N cells (inputs and text "
              "outputs) of this notebook to the task.")
    @argument("task", nargs="*", help="What to do, or a subcommand.")
    @line_cell_magic
    def agent(self, line: str = "", cell: str | None = None) -> Any:
        """Run the ipyagent agent: the model plans, writes Python, you approve, it runs.

        The agent's Python runs in a separate sibling kernel, not in this one. The
        conversation persists across cells: the next %agent continues it.

        Usage:

            %agent TASK                  run until the model answers (or a stop reason)
            %%agent [options]            the cell body is the task
            %agent --step TASK           add the task, run one iteration, stop
            %agent step                  run the next iteration (edit agent.context first)
            %agent context               the conversation, as a table (a long one: its
                                         first and last rows)
            %agent context A:B           rows A to B-1 of it (-50: the last 50)
            %agent audit                 how each tool call was decided: who, when, edits
            %agent rewind N              back to step N: later steps dropped (kept as a
                                         branch unless --no-branch), their file changes
                                         undone, the kernel rebuilt from steps 1..N
            %agent fork [NAME]           a branch from here (its own kernel); you go on there
            %agent switch NAME           go on with another branch
            %agent branches              the branches: name, steps, last answer, tokens
            %agent reset [--kernel]      start over (--kernel also restarts the sibling kernel)
            %agent save PATH.ipynb       save the run as a notebook
            %agent load PATH.ipynb       continue a saved conversation
            %agent load PATH --rerun     ... re-run its code cells, re-create its files
                                         (each approved as in a run; in a new empty temp
                                         dir unless --cwd DIR; --approve auto: no asking)
            %agent replay PATH.ipynb     re-run a saved transcript's code cells, report
                                         differences (each call approved as in a run; in
                                         a new empty temp dir unless --cwd DIR)
            %agent -p NAME TASK          run as a persona (coder, data-analyst, reviewer, …)
            %agent personas              the personas, as a table
            %agent skills                the skills the model can load (SKILL.md folders)
            %agent -s NAME TASK          load skill NAME up front, then run the task
            %agent mcp                   start the MCP servers (Agent.mcp_servers), list tools
            %agent mcp trust             agree to start the servers of the mcp.json here, as it is
            %agent mcp untrust           forget that agreement (its servers stop)
            %agent push NAME [NAME…]     copy your variables into the agent's kernel
            %agent pull NAME [as LOCAL]  copy the agent's variable into your kernel
            %agent --with df,x TASK      copy these first, then run the task
            %agent --cells N TASK        add the last N cells (and outputs) to the task
            %agent code [N]              the agent's last (or N-th) python code, as a new
                                         cell below (you run it, or not)
            %agent fix [TASK]            send the last cell that raised and its traceback;
                                         the proposed fix comes as a new cell below
            %agent remember [--global] TEXT   keep a note for later sessions (Agent.memory
                                         = 'on'; --global: for every project)
            %agent remember --replace ID TEXT   a newer fact supersedes note ID
            %agent memory                the notes, as a table (id, text, source, age, uses)
            %agent memory search WORDS   the notes that match
            %agent forget ID             delete note ID (g3: a global note)
            %agent memory clear [--global]   delete every note of this project (or global)
            %agent memory trust [--global]   read a memory file ipyagent did not make here
                                         (one that came with the folder is not read until then)

        The model is told your variables' names, types and shapes (Agent.share_namespace),
        never their contents unless you copy them; secret-looking ones show their name and
        type only. The model may offer a value it made (its offer_result tool): it enters
        your kernel only when you click Take (a y/N prompt in a terminal), decoded as data
        (never unpickled). Each python card's
        "code → new cell" button puts that call's code in a new cell below, unrun.
        {name} in a task is replaced by the value of name ({{ for a brace).

        Every setting is a traitlet: %config Agent lists them, %config Agent.model =
        "qwen2.5:7b" sets one (or c.Agent.model in ipython_config.py); the options
        below override one for a single run. ipyagent.current() is the agent itself.
        To send a task that starts with a subcommand word, put -- before it. A trailing
        "  # note" (two spaces, then #) on an %agent line is a comment; a %%agent cell's
        body is the task word for word.
        """
        cmd = self.parse(line, _expand_cell(self.shell, cell))
        if cmd.action not in ("run", "step"):
            return self._command(cmd)
        self.tell_place()
        if self.in_kernel and not self.awaits:
            return self.runner.detach(cmd)
        if getattr(self.shell, "execution_count", None) == self.loaded_in and \
                self.runner.waits_for_clicks(cmd):
            return self.runner.detach(cmd, why=_LOADED_HERE)
        self.runner.run_blocking(cmd)
        self._after_fix(cmd)
        return None

    async def agent_async(self, line: str = "", cell: str | None = None) -> Any:
        """The awaiting form of ``%agent`` (what top-level agent cells are rewritten to)."""
        assert self.shell is not None
        line = self.shell.var_expand(line)  # `%agent {task}`, as run_line_magic would
        cmd = self.parse(line, _expand_cell(self.shell, cell))
        if cmd.action == "replay" and hasattr(self.get_agent(), "areplay"):
            # It re-runs a transcript in a fresh kernel: await it, the notebook stays live,
            # and each call it runs is shown and approved in this cell as in a live run.
            agent = self.get_agent()
            display = self.runner.listener(LoopDispatcher(), cmd, agent)
            try:
                assert cmd.path is not None  # parse() refuses replay without one
                return await agent.areplay(cmd.path, on_event=display, **_replay_kwargs(cmd))
            except (OSError, IpyagentError, ValueError) as exc:
                raise UsageError(f"%agent replay {cmd.path}: {error_line(exc)}") from None
            finally:
                if hasattr(self.approver, "unbind"):
                    self.approver.unbind()
                if hasattr(display, "close"):
                    display.close()
        if cmd.action == "load" and cmd.rerun and hasattr(self.get_agent(), "aload"):
            # It runs the transcript's code: await it, so that each step is shown and
            # approved in this cell as a live call is.
            await asyncio.to_thread(self.settle_warmup)
            agent = self.get_agent()
            display = self.runner.listener(LoopDispatcher(), cmd, agent)
            assert cmd.path is not None  # parse() refuses load without one
            try:
                transcript = await agent.aload(cmd.path, rerun=True, on_event=display,
                                               **_replay_kwargs(cmd))
            except asyncio.CancelledError:  # the Interrupt button: stop what runs, keep the cell
                from .cellrun import interrupt_sibling

                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(interrupt_sibling(agent), 5)
                print(f"ipyagent: interrupted the re-run of {cmd.path}; the conversation is "
                      "loaded, but the sibling kernel has only what ran before", file=sys.stderr)
                return None
            except (OSError, IpyagentError, ValueError) as exc:
                raise UsageError(f"%agent load {cmd.path}: {error_line(exc)}") from None
            finally:
                if hasattr(self.approver, "unbind"):
                    self.approver.unbind()
                if hasattr(display, "close"):
                    display.close()
            self._loaded(agent, cmd, transcript)
            return None
        if cmd.action == "rewind":  # re-runs code: awaited, approvals clicked, interruptible
            return await branching.rewind_awaiting(self, cmd)
        if cmd.action not in ("run", "step"):
            return self._command(cmd)
        await asyncio.to_thread(self.settle_warmup)
        self.tell_place()
        await self.runner.run_async(cmd, LoopDispatcher())
        self._after_fix(cmd)
        return None

    def _after_fix(self, cmd: Command) -> None:
        """``%agent fix``: the answer's python block (else the python the agent ran),
        offered as a new cell; never an output or text block, and said when there is none."""
        if not cmd.fix:
            return
        from .aware import fix_code, offer_cell

        code, what = fix_code(self.get_agent().context, cmd.task)
        if code is None:
            print(f"ipyagent: {what}", file=sys.stderr)
            return
        offer_cell(self, code, what)

    # -- subcommands -----------------------------------------------------------------
    def _command(self, cmd: Command) -> Any:
        agent = self.get_agent()
        if cmd.action == "context":
            if not cmd.args:
                return agent.context
            start, stop = (int(a) if a else None for a in cmd.args)
            return agent.context.table(start, stop)
        if cmd.action == "audit":
            return agent.audit()
        if cmd.action in ("changes", "apply", "discard", "undo"):
            try:  # the staged workspace: the sandbox's file changes and your decisions on them
                if cmd.action == "changes":
                    return agent.changes(everything=bool(cmd.args))
                if cmd.action == "undo":
                    return agent.undo()
                return getattr(agent, cmd.action)(*cmd.args)
            except (ValueError, OSError) as exc:
                raise UsageError(f"%agent {cmd.action}: {exc}") from None
        if cmd.action == "personas":
            from ..instructions.personas import PersonaTable

            return PersonaTable.for_agent(agent)
        if cmd.action == "skills":
            return agent.skills
        if cmd.action in ("mcp", "mcp-trust", "mcp-untrust"):
            verb = {"mcp": "list", "mcp-trust": "trust", "mcp-untrust": "untrust"}[cmd.action]
            try:
                return getattr(agent.mcp, verb)()  # the table shows what the model gets
            except IpyagentError as exc:
                raise UsageError(f"%agent {cmd.action.replace('-', ' ')}: {error_line(exc)}") from None
        if cmd.action in ("push", "pull", "code"):
            from . import aware

            if cmd.action == "push":
                return aware.push_names(self, agent, list(cmd.args))
            if cmd.action == "pull":
                return aware.pull_name(self, agent, cmd.args[0], cmd.args[1] if len(cmd.args) > 1 else None)
            n = int(cmd.args[0]) if cmd.args else None
            return aware.offer_cell(self, aware.code_of(agent, n),
                                    f"the agent's python call {n}" if n else "the agent's last python call")
        if cmd.action in _MEMORY:
            return self._memory(agent, cmd)
        if cmd.action in branching.ACTIONS:
            return branching.run_command(self, agent, cmd)
        if cmd.action == "reset":
            agent.reset(kernel=cmd.kernel)
            print("ipyagent: new conversation" + (" and a restarted sibling kernel"
                                                  if cmd.kernel else ""))
            return None
        method = getattr(agent, cmd.action, None)
        if method is None:
            raise UsageError(f"%agent {cmd.action} is not available in this version of ipyagent")
        kwargs: dict[str, Any] = {"rerun": True, **_replay_kwargs(cmd)} if cmd.rerun else {}
        if cmd.rerun and self.in_kernel and getattr(self.approver, "needs_event_loop", False) \
                and kwargs.get("approval", agent.approval) == "ask":
            raise UsageError("this %agent load --rerun cannot wait for approval clicks here "
                             "(only an unindented %agent line can); move it to the start of "
                             "a line, or add --approve auto")
        if cmd.action == "replay":
            # No live display shows the calls here: the replay's own prompt shows each one.
            kwargs = {**_replay_kwargs(cmd), "approval_hook": None}
        try:
            if cmd.rerun and not self.in_kernel:
                outcome = self._rerun_blocking(agent, cmd, kwargs)
            else:
                outcome = method(cmd.path, **kwargs)
        except (OSError, IpyagentError, ValueError) as exc:
            raise UsageError(f"%agent {cmd.action} {cmd.path}: {error_line(exc)}") from None
        if cmd.action == "save":
            print(visible(f"ipyagent: saved {len(agent.context)} items to {outcome}"))
            return None
        if cmd.action == "load":
            self._loaded(agent, cmd, outcome)
            return None
        return outcome

    def _memory(self, agent: Agent, cmd: Command) -> Any:
        """``remember``, ``memory``, ``memory search``, ``forget``, ``memory clear``."""
        from ..memory import ENABLE_HINT, MemoryRefused

        if agent.memory != "on":
            print(f"ipyagent: {ENABLE_HINT}")
            return None
        memories = agent.memories
        try:
            if cmd.action == "memory":
                return memories.table()
            if cmd.action == "memory-search":
                return memories.table(cmd.args[0])
            if cmd.action == "memory-trust":  # typed by the person: the asking
                n = memories.trust(cmd.args[0])
                print(f"ipyagent: the {cmd.args[0]} memory file is read from now on ({n} "
                      f"note{'s' * (n != 1)}: `%agent memory` lists them)")
                return None
            if cmd.action == "memory-clear":
                n = memories.clear(cmd.args[0])
                print(f"ipyagent: deleted {n} note{'s' * (n != 1)} ({cmd.args[0]})")
                return None
            if cmd.action == "forget":
                gone = memories.forget(cmd.args[0])
                if gone is None:
                    raise UsageError(visible(f"%agent forget: no note {cmd.args[0]}"))
                print(visible(f"ipyagent: forgot #{gone.label}: {_short(gone.text)}"))
                return None
            if cmd.args[0] == "replace":
                now = memories.replace(cmd.args[2], cmd.args[1])
                if now is None:
                    raise UsageError(visible(f"%agent remember --replace: no note {cmd.args[2]}"))
                print(f"ipyagent: note #{now.label} now says the newer fact")
                return None
            added = memories.remember(cmd.args[1], scope=cmd.args[0], source="user")
        except MemoryRefused as exc:
            raise UsageError(visible(f"%agent {cmd.action.replace('-', ' ')}: {exc}")) from None
        where = " (global)" if cmd.args[0] == "global" else ""
        verb = "updated note" if added.merged else "remembered as note"
        print(f"ipyagent: {verb} #{added.entry.label}{where}")
        for other in added.similar:  # a newer fact may contradict an older one: the user decides
            print(visible(f"ipyagent: similar to #{other.label}: {_short(other.text)} — if the "
                          f"new note replaces it: `%agent forget {other.label}`"))
        return None

    def _rerun_blocking(self, agent: Agent, cmd: Command, kwargs: dict[str, Any]) -> Any:
        """``load --rerun`` on a terminal: each step is shown, and asked on the main thread."""
        from .._util import eventloop as _eventloop
        from .._util.mainthread import PumpDispatcher

        self.settle_warmup()
        pump = PumpDispatcher()
        listener = self.runner.listener(pump, cmd, agent)
        self.runner.pump = pump  # the terminal prompt reads on this (the main) thread
        assert cmd.path is not None  # parse() refuses load without one
        future = _eventloop.submit(agent.aload(cmd.path, on_event=listener, **kwargs))
        try:
            pump.pump(future)
            return future.result()
        except KeyboardInterrupt:
            future.cancel()
            raise UsageError(f"%agent load {cmd.path} --rerun: interrupted; the sibling "
                             "kernel has only what ran before") from None
        finally:
            self.runner.pump = None

    def _loaded(self, agent: Agent, cmd: Command, transcript: Any) -> None:
        print(visible(f"ipyagent: loaded {len(agent.context)} items from {cmd.path}; "
                      "the next %agent continues it"))
        from ..transcripts.transcript import endpoint_note

        note = endpoint_note(agent, transcript)
        if note:
            print(visible(f"ipyagent: {note}"))  # names from the file: controls made visible
        self._after_load(agent, cmd, transcript)

    def _after_load(self, agent: Agent, cmd: Command, transcript: Any) -> None:
        """Say whether the sibling has the run's variables (``--rerun`` rebuilt them)."""
        from ..transcripts.rebuild import rerun_steps

        steps = rerun_steps(agent.context)
        calls = sum(written is None for _, written in steps)
        files = len(steps) - calls
        if not steps:
            return
        if not cmd.rerun:
            what = [f"re-runs its {calls} python call{'s' if calls != 1 else ''} (the code in "
                    "its cells) to bring the variables back"] if calls else []
            what += [f"re-creates the {files} file{'s' if files != 1 else ''} the agent wrote "
                     "where missing"] if files else []
            print(f"ipyagent: the sibling kernel starts empty; `%agent load {cmd.path} --rerun` "
                  + " and ".join(what))
            return
        report = getattr(transcript, "rebuild", None)
        if report is not None:
            print(visible(f"ipyagent: {report.line()}"))

# `%agent?` reads as plain text: magic_arguments heads its usage block with reST's "::".
if AgentMagics.agent.__doc__ and AgentMagics.agent.__doc__.startswith("::"):
    AgentMagics.agent.__doc__ = AgentMagics.agent.__doc__[2:].lstrip("\n")


def _expand_cell(shell: Any, cell: str | None) -> str | None:
    """A ``%%agent`` task with ``{name}`` expanded as a line's is (``{{`` for a brace)."""
    return cell if cell is None or shell is None else shell.var_expand(cell)


def _aware_command(words: list[str], rest: str, opts: Any, magics: AgentMagics) -> Command | None:
    """``push NAME…``, ``pull NAME [as LOCAL]``, ``code [N]``, ``fix [TASK]``; else None."""
    if not words:
        return None
    head, tail = words[0], words[1:]
    if head == "push" and tail and all(w.isidentifier() for w in tail):
        return Command("push", None, opts, args=tuple(tail))
    if head == "pull" and (len(tail) == 1 or (len(tail) == 3 and tail[1] == "as")) \
            and all(w.isidentifier() for w in tail):
        return Command("pull", None, opts, args=(tail[0], tail[-1]))
    if head == "code" and (not tail or (len(tail) == 1 and tail[0].isdigit())):
        return Command("code", None, opts, args=tuple(tail))
    if head == "fix":
        from .aware import fix_task

        failed = magics.errors.current()
        if failed is None:
            raise UsageError("%agent fix: no cell has raised in this session yet")
        task = rest.strip()[len("fix"):].strip() or None
        return Command("step" if opts.step else "run", fix_task(failed, task), opts, fix=True)
    return None


_MEMORY = {"remember", "memory", "memory-search", "memory-clear", "memory-trust", "forget"}


def _pending_paths(agent: Any, words: list[str]) -> bool:
    """``%agent apply a.py b.csv``: every word a pending change's path (else it is a task)."""
    if not words:
        return False
    pending = {c.path for c in agent.changes()}
    return all(w.strip("/") in pending for w in words)


def _short(text: str) -> str:
    from .._util.text import one_line

    return one_line(" ".join(text.split()), 80)


def _memory_command(words: list[str], rest: str, opts: Any) -> Command | None:
    """``remember [--global] TEXT``, ``memory``, ``memory search Q``, ``memory clear``,
    ``forget ID``; else None."""
    if not words:
        return None
    head, tail = words[0], words[1:]
    body = rest.strip()[len(head):].strip()
    if head == "remember" and tail:
        scope = "project"
        if tail[0] == "--replace":
            if len(tail) < 3 or not re.fullmatch(r"#?[gG]?\d+", tail[1]):
                raise UsageError("%agent remember --replace ID TEXT: the note's id, then its new text")
            text = body[len("--replace"):].strip()[len(tail[1]):].strip()
            return Command("remember", None, opts, args=("replace", text, tail[1]))
        if tail[0] == "--global":
            scope, body = "global", body[len("--global"):].strip()
        if not body:
            raise UsageError("%agent remember needs the text to keep")
        return Command("remember", None, opts, args=(scope, body))
    if head == "memory":
        if not tail:
            return Command("memory", None, opts)
        if tail[0] == "search":
            query = body[len("search"):].strip()
            if not query:
                raise UsageError("%agent memory search needs words to look for")
            return Command("memory-search", None, opts, args=(query,))
        if tail[0] == "trust" and len(tail) <= 2 and set(tail[1:]) <= {"--global"}:
            return Command("memory-trust", None, opts, args=("global" if len(tail) == 2 else "project",))
        if tail[0] == "clear" and len(tail) <= 2 and set(tail[1:]) <= {"--global", "--all"}:
            scope = {"--global": "global", "--all": "all"}.get(tail[1] if len(tail) == 2 else "", "project")
            return Command("memory-clear", None, opts, args=(scope,))
        return None
    if head == "forget" and len(tail) == 1 and re.fullmatch(r"#?[gG]?\d+", tail[0]):
        return Command("forget", None, opts, args=(tail[0],))
    return None


def _replay_options(args: list[str], opts: Any, word: str = "replay") -> str | None:
    """Take ``--cwd DIR`` and ``--approve MODE`` after ``replay PATH`` (or ``load PATH
    --rerun``) out of ``args``."""
    cwd = None
    for flag in ("--cwd", "--approve"):
        if flag in args[2:]:
            at = args.index(flag, 2)
            if at + 1 >= len(args):
                raise UsageError(f"%agent {word}: {flag} needs a value")
            value = args[at + 1]
            del args[at:at + 2]
            if flag == "--cwd":
                cwd = value
            elif value not in ("auto", "ask", "deny"):
                raise UsageError(f"%agent {word}: --approve takes auto, ask or deny, not {value!r}")
            else:
                opts.approve = value
    return cwd


def _replay_kwargs(cmd: Command) -> dict[str, Any]:
    """``areplay``/``aload`` keywords for ``%agent replay PATH`` or ``%agent load PATH --rerun``
    with ``[--cwd DIR] [--approve MODE]``."""
    out: dict[str, Any] = {}
    if cmd.cwd is not None:
        out["cwd"] = os.path.abspath(os.path.expanduser(cmd.cwd))
    if cmd.options.approve:
        out["approval"] = cmd.options.approve
    return out


def _did_you_mean(tokens: list[str], parser: Any) -> None:
    """``UsageError`` naming the nearest option for one that is not (nor abbreviates) one."""
    import difflib

    actions = parser._option_string_actions
    known = list(actions)
    value_next = False
    for token in tokens:
        if value_next:  # an option's value (``--max-steps -1``): the parser judges it
            value_next = False
            continue
        head = token.partition("=")[0]
        if not head.startswith("-"):
            continue
        matches = [k for k in known if k.startswith(head)]
        if matches:
            value_next = "=" not in token and actions[matches[0]].nargs != 0
            continue
        near = difflib.get_close_matches(head, [k for k in known if k.startswith("--")], n=1)
        hint = f"; did you mean {near[0]}?" if near else " (%agent? lists them)"
        raise UsageError(f"%agent: unrecognized arguments: {head}{hint}")


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
    ipython.events.register("post_run_cell", magics.errors)
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
    with contextlib.suppress(ValueError):  # not registered
        ipython.events.unregister("post_run_cell", magics.errors)
    magics.settle_warmup()
    agent = magics.agent_if_made
    if agent is not None:
        if agent in ipython.configurables:
            ipython.configurables.remove(agent)
        agent.close()
        if agent.tree is not None:  # the other branches' kernels too
            agent.tree.close()


def current() -> Agent:
    """The ``Agent`` behind ``%agent`` (``%load_ext ipyagent`` first)."""
    if _MAGICS is None:
        raise RuntimeError("ipyagent is not loaded: run %load_ext ipyagent first")
    # The warm-up thread may be creating the sibling kernel right now; Agent.kernel is
    # not thread-safe, so let it finish before anyone else can touch agent.kernel.
    _MAGICS.settle_warmup()
    return _MAGICS.get_agent()


async def agent_async(line: str = "", cell: str | None = None) -> Any:
    """What a rewritten top-level ``%agent`` cell awaits."""
    if _MAGICS is None:
        raise UsageError("ipyagent is not loaded: run %load_ext ipyagent first")
    return await _MAGICS.agent_async(line, cell)
