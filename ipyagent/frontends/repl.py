"""``ipyagent repl``: an interactive terminal session, each line a task of one conversation.

A run streams as ``ipyagent run``'s does (``TerminalDisplay``: everything from outside made
visible, so no reply can draw a fake prompt or rewrite ours) and asks for approval in the
terminal. Ctrl-C stops the run and keeps the conversation; at the prompt it clears the
line; Ctrl-D leaves. With a terminal, prompt_toolkit reads the lines (arrow-key history,
kept in ``~/.ipyagent/repl_history``, mode 0600, never a line holding a key's value);
piped, each line of stdin is a task.
"""

from __future__ import annotations

import difflib
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .._util import eventloop as _eventloop
from .._util.mainthread import PumpDispatcher
from .._util.text import one_line, visible
from ..errors import IpyagentError

if TYPE_CHECKING:
    from ..engine.agent import Agent

__all__ = ["HISTORY_PATH", "Repl"]

HISTORY_PATH = os.path.join("~", ".ipyagent", "repl_history")

# /word -> (arguments, what it does), in the order /help lists them.
COMMANDS = {
    "step": ("[TASK]", "run one iteration (of TASK, or of the conversation so far)"),
    "context": ("[A:B]", "the conversation as a table (rows A to B-1)"),
    "save": ("PATH", "save the conversation as a transcript notebook"),
    "load": ("PATH", "continue a saved transcript (its conversation replaces this one)"),
    "reset": ("[--kernel]", "start a new conversation (--kernel: restart the sibling too)"),
    "skills": ("", "the skills the model can load (ipyagent repl -s NAME: one up front)"),
    "personas": ("", "the personas (● the active one; ipyagent repl -p NAME: run as one)"),
    "audit": ("", "how each tool call was decided: who, when, edits"),
    "rewind": ("N [--no-branch]", "back to step N (the /context table shows them): later "
               "steps dropped (kept as a branch), their files undone, the kernel rebuilt"),
    "fork": ("[NAME]", "a branch of the conversation from here; you go on there"),
    "switch": ("NAME", "go on with another branch"),
    "branches": ("", "the branches: name, steps, last answer, tokens"),
    "memory": ("[search WORDS]", "the notes kept for later sessions (read-only here)"),
    "help": ("", "this list"),
    "exit": ("", "leave (as Ctrl-D does); /quit too"),
}
_INTERRUPTED = "ipyagent: interrupted; the conversation is kept (/step or a new task continues)"
_GRACE = 10.0  # seconds an interrupted run gets to answer its open calls


class Repl:
    """One interactive session around ``agent`` (the caller closes the agent)."""

    def __init__(self, agent: Agent, history: str | os.PathLike[str] | None = None,
                 colours: Mapping[str, Any] | None = None, quiet: bool = False,
                 save: str | os.PathLike[str] | None = None) -> None:
        """``colours``: TerminalDisplay's ``scheme``/``colour`` (IPython's configuration);
        ``quiet``: print only each task's answer; ``save``: the transcript rewritten after
        each task."""
        from ..engine.approval import TerminalOrDeny, pumped_answer

        self.agent = agent
        self.quiet = quiet
        self.save_path = os.fspath(save) if save else None
        self._save_said: str | None = None  # the last thing said about --save (said once)
        self.pump = PumpDispatcher()  # prompts and display run here, on the main thread
        self.tasks = 0  # tasks given in this conversation (the prompt shows the next one's number)
        self.history_path = Path(os.path.expanduser(os.fspath(history or HISTORY_PATH)))
        self._session: Any = None
        self.colours = dict(colours or {})
        # Quiet: no display shows the call, so the prompt shows it before "Run it?".
        agent.approval_hook = TerminalOrDeny(
            pumped_answer(self.pump), _unattended,
            show_call=quiet)

    def __repr__(self) -> str:
        return f"<Repl: {self.tasks} task{'' if self.tasks == 1 else 's'}, {self.agent.model}>"

    @property
    def interactive(self) -> bool:
        """True at a terminal (stdin and stdout ttys): prompt_toolkit reads the lines."""
        return _isatty(sys.stdin) and _isatty(sys.stdout)

    # -- the loop ----------------------------------------------------------------------
    def loop(self) -> int:
        """Read and handle lines until /exit or end of input; the exit code."""
        given = self.agent
        try:
            return self._loop()
        finally:
            tree = given.tree  # the branches made here are closed here (the caller closes its own)
            for branch in list(tree) if tree is not None else []:
                if branch.agent is not given:
                    branch.agent.close()

    def _loop(self) -> int:
        interactive = self.interactive
        if interactive:
            persona = f" · persona {self.agent.persona}" if self.agent.persona else ""
            print(visible(f"ipyagent repl · {self.agent.model}{persona} · approval "
                          f"{self.agent.approval} · each line is a task of one conversation; "
                          "/help lists the commands, Ctrl-D leaves"))
            from .cliopts import start_lines

            for note in [] if self.quiet else start_lines(self.agent):  # as `ipyagent run`
                print(note, file=sys.stderr)
        while True:
            try:
                line = self.read() if interactive else self.read_piped()
            except KeyboardInterrupt:
                if interactive:
                    continue  # as in IPython: the line is cleared, the session stays
                return 130
            except EOFError:
                if interactive:
                    print()  # Ctrl-D: the shell's prompt comes back on a line of its own
                return 0
            try:
                if not self.handle(line):
                    return 0
            except KeyboardInterrupt:  # in a command (/load, /save): it stopped, we stay
                print(f"\n{_INTERRUPTED}", file=sys.stderr)

    def prompt(self) -> str:
        return f"ipyagent [{self.tasks + 1}]> "

    def read(self) -> str:
        """One line from the terminal (prompt_toolkit: editing, arrow-key history)."""
        if self._session is None:
            from prompt_toolkit import PromptSession

            self._session = PromptSession(history=_history(self.history_path, self._secrets))
        from prompt_toolkit.formatted_text import FormattedText

        # A style of our own: nothing a reply printed looks like it, and the reply's
        # controls were made visible, so none can move the cursor onto this line.
        return str(self._session.prompt(FormattedText([("bold ansigreen", self.prompt())])))

    def read_piped(self) -> str:
        """One line of piped stdin (scripts, tests); EOFError at its end."""
        typed = _isatty(sys.stdin)  # a person types, but stdout goes elsewhere (| tee)
        if typed:  # quiet: stdout is the answers alone (> answers.txt), so not there
            print(self.prompt(), end="", flush=True, file=sys.stderr if self.quiet else sys.stdout)
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        line = line.rstrip("\n").rstrip("\r")
        if line.strip() and not typed and not self.quiet:
            print(visible(self.prompt() + line))  # the log reads as the session would
        return line

    def _secrets(self) -> Mapping[str, str]:
        from ..trust.secrets import key_envs, secret_values

        return secret_values(key_envs(self.agent))

    # -- one line --------------------------------------------------------------------
    def handle(self, line: str) -> bool:
        """Do what ``line`` says; False when the session should end."""
        text = line.strip()
        if not text:
            return True
        if text.startswith("//"):  # a task that begins with a slash
            self.run(text[1:])
            return True
        if not text.startswith("/"):
            self.run(text)
            return True
        word, _, rest = text[1:].partition(" ")
        rest = rest.strip()
        if word in ("exit", "quit"):
            return False
        handler: Callable[[str], None] | None = getattr(self, f"_cmd_{word}", None) \
            if word in COMMANDS else None
        if handler is None:
            close = difflib.get_close_matches(word, [*COMMANDS, "quit"], n=2, cutoff=0.5)
            hint = f" (did you mean {' or '.join('/' + c for c in close)}?)" if close else ""
            _say(f"no command /{word}{hint}; /help lists them, //{word} sends it as a task")
            return True
        handler(rest)
        return True

    def run(self, task: str | None, step: bool = False) -> None:
        """Run ``task`` (None: continue) to a stop reason, or one iteration with ``step``."""
        from .terminal import TerminalDisplay

        agent = self.agent
        if task is not None:
            self.tasks += 1
        display = None if self.quiet else TerminalDisplay(
            preview=agent.tools.preview, max_output_lines=agent.output_lines, step_mode=step,
            step_hint="/step runs the next one", **self.colours)
        coro = agent.astep(task, on_event=display) if step else agent.arun(task, on_event=display)
        future, finished = _eventloop.submit_tracked(coro)
        try:
            self.pump.pump(future)
            outcome = future.result()
        except KeyboardInterrupt:
            future.cancel()
            self._unwind(finished)
            if display is not None:
                display.end_line()
            # A line of its own: the terminal echoed ^C where the cursor was (a prompt).
            print(f"\n{_INTERRUPTED}", file=sys.stderr)
        except IpyagentError as exc:
            if display is not None:
                display.end_line()
            _say(one_line(exc))
        else:
            if self.quiet:
                _answer(outcome)
        finally:
            if display is not None:
                display.end_line()  # the next prompt starts at column 0, whatever was printed
        self._save_after_task()

    def _save_after_task(self) -> None:
        """``--save FILE``: rewrite the transcript; where, the first time; a failure, once."""
        if self.save_path is None or not len(self.agent.context):
            return
        try:
            saved = self.agent.save(self.save_path)
        except (OSError, IpyagentError, ValueError) as exc:
            said = f"could not save the transcript: {one_line(exc)}"
            if said != self._save_said:
                self._save_said = said
                _say(said)
            return
        said = f"saving this conversation to {saved} after each task (--save)"
        if said != self._save_said:
            self._save_said = said
            _say(said)

    def _unwind(self, finished: Any) -> None:
        """After Ctrl-C: let the run answer its open calls (the context stays valid), showing
        what it says meanwhile, then make sure the sibling's code stops too."""
        deadline = time.monotonic() + _GRACE
        try:
            while not finished.wait(0.05) and time.monotonic() < deadline:
                self.pump.drain()
            self.pump.drain()
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: stop waiting
        kernel = self.agent.kernel_if_started  # never start one just to interrupt it
        if kernel is not None and kernel.is_alive():
            try:
                _eventloop.run_sync(kernel.interrupt_async(), timeout=5)
            except (Exception, KeyboardInterrupt):
                pass  # it is stopping anyway; the next call waits for it

    # -- commands (/word) --------------------------------------------------------------
    def _cmd_step(self, rest: str) -> None:
        self.run(rest or None, step=True)

    def _cmd_context(self, rest: str) -> None:
        import re

        bounds = re.fullmatch(r"(-?\d*):(-?\d*)", rest)
        if rest and bounds is None:
            _say(f"/context takes rows as A:B (e.g. 0:10, -5:), not {rest!r}")
            return
        start, stop = (int(b) if b else None for b in bounds.groups()) if bounds else (None, None)
        print(self.agent.context.table(start, stop).text())

    def _cmd_save(self, rest: str) -> None:
        if not rest:
            _say("/save needs a path, e.g. /save run.ipynb")
            return
        try:
            saved = self.agent.save(rest)
        except (OSError, IpyagentError, ValueError) as exc:
            _say(f"could not save the transcript: {one_line(exc)}")
            return
        _say(f"saved {len(self.agent.context)} items to {saved}", sys.stdout)

    def _cmd_load(self, rest: str) -> None:
        if not rest:
            _say("/load needs a path, e.g. /load run.ipynb")
            return
        try:
            self.agent.load(rest)
        except (OSError, IpyagentError, ValueError) as exc:
            _say(f"could not load {rest}: {one_line(exc)}")
            return
        from ..context.items import Message

        self.tasks = sum(isinstance(i, Message) and i.role == "user" for i in self.agent.context)
        _say(f"loaded {len(self.agent.context)} items from {rest}; a new task continues it",
             sys.stdout)

    def _cmd_reset(self, rest: str) -> None:
        if rest not in ("", "--kernel"):
            _say(f"/reset takes only --kernel, not {rest!r}")
            return
        self.agent.reset(kernel=bool(rest))
        self.tasks = 0
        _say("new conversation" + (" and a restarted sibling kernel" if rest else ""), sys.stdout)

    def _cmd_skills(self, rest: str) -> None:
        print(self.agent.skills.text("ipyagent repl -s NAME"))

    def _cmd_personas(self, rest: str) -> None:
        from ..instructions.personas import PersonaTable

        print(PersonaTable.for_agent(self.agent).text("ipyagent repl -p NAME"))

    def _cmd_audit(self, rest: str) -> None:
        from IPython.lib.pretty import pretty

        print(pretty(self.agent.audit()))  # Audit._repr_pretty_: the table, made visible

    def _cmd_memory(self, rest: str) -> None:
        import dataclasses

        verb, _, query = rest.partition(" ")
        if verb not in ("", "search") or (verb == "search" and not query.strip()):
            _say(f"/memory takes nothing or search WORDS, not {rest!r} (read-only here: "
                 "%agent remember / forget in IPython change the notes)")
            return
        agent = self.agent
        if agent.memory != "on":
            _say("memory is off: c.Agent.memory = 'on' in a --config FILE (or ipython_config.py)"
                 " turns it on", sys.stdout)
            return
        table = agent.memories.table(query.strip() or None)
        if not query:
            table = dataclasses.replace(table, empty="no notes yet: runs keep them "
                                        "(%agent remember TEXT in IPython adds one)")
        print(repr(table))  # MemoryTable's text: note texts made visible

    def _cmd_rewind(self, rest: str) -> None:
        from .branching import repl_command

        repl_command(self, "rewind", rest)

    def _cmd_fork(self, rest: str) -> None:
        from .branching import repl_command

        repl_command(self, "fork", rest)

    def _cmd_switch(self, rest: str) -> None:
        from .branching import repl_command

        repl_command(self, "switch", rest)

    def _cmd_branches(self, rest: str) -> None:
        from .branching import repl_command

        repl_command(self, "branches", rest)

    def _cmd_help(self, rest: str) -> None:
        width = max(len(f"  /{w} {a}") for w, (a, _) in COMMANDS.items()) + 2
        lines = [f"  /{w} {a}".ljust(width) + h for w, (a, h) in COMMANDS.items()]
        print("\n".join(["Each line is a task of the same conversation. Commands:", *lines,
                         "  //TEXT".ljust(width) + "send /TEXT as a task",
                         "Ctrl-C stops a run (the conversation is kept); Ctrl-D leaves."]))


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _answer(outcome: Any) -> None:
    """``--quiet``: the answer on stdout (kept as written when piped: it is data); how the
    run ended on stderr when that was not ``done`` (a step: always, it may go on)."""
    from ..context.events import Step

    text = outcome.text
    if text:
        print(visible(text) if _isatty(sys.stdout) else text)
    if isinstance(outcome, Step):
        _say(outcome.footer("paused: /step runs the next one"))
    elif outcome.stop_reason != "done":
        _say(outcome.footer())


def _say(text: str, stream: Any = None) -> None:
    """One ``ipyagent:`` line, its controls made visible (stderr unless ``stream``)."""
    print(f"ipyagent: {visible(text)}", file=stream or sys.stderr)


def _unattended(call: Any) -> str:
    return ("nobody could approve this call: stdin is not a terminal (a script, a pipe). "
            f"Pass --approve auto to let tool calls run unattended ({call.name} was not run)")


def _history(path: Path, secrets: Callable[[], Mapping[str, str]]) -> Any:
    """A FileHistory at ``path`` (made 0600, its folder 0700) that never writes a line holding
    a key's value (the session never asks for keys; a pasted one stays out of the file)."""
    from prompt_toolkit.history import FileHistory

    from ..trust.secrets import find_secret

    class _History(FileHistory):
        def store_string(self, string: str) -> None:
            if find_secret(string, secrets()) is None:
                super().store_string(string)

    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        os.chmod(path, 0o600)  # ours: even if it was made wider before
    except OSError as exc:
        _say(f"no history file ({one_line(exc)}); this session's history is not kept")
        from prompt_toolkit.history import InMemoryHistory

        return InMemoryHistory()
    return _History(str(path))
