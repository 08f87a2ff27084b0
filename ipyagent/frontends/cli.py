"""The ``ipyagent`` command: run one task from a terminal and stream it."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Sequence

from traitlets import TraitError

from .._version import __version__
from .cliopts import CONFIG_HELP, add_agent_options, start_lines

if TYPE_CHECKING:
    from ..context.items import ToolCall
    from ..engine.agent import Agent

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ipyagent", description="Run an ipyagent task from the terminal.")
    p.add_argument("--version", action="version", version=f"ipyagent {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one task and print the answer", epilog=CONFIG_HELP)
    run.add_argument("task", help="what to do, e.g. 'Use Python to compute 2**100'")
    add_agent_options(run)
    run.add_argument("--save", metavar="PATH", help="save the transcript notebook here")
    run.add_argument("--quiet", action="store_true", help="print only the final answer")
    repl = sub.add_parser("repl", help="an interactive session: each line is a task of one "
                          "conversation", epilog=CONFIG_HELP, description=(
                              "An interactive session: each line is a task of the same "
                              "conversation, run and streamed as by 'ipyagent run'. Commands: "
                              "/step, /context, /save PATH, /load PATH, /reset, /skills, "
                              "/personas, /audit, /memory, /help, /exit (or Ctrl-D). Ctrl-C stops a run "
                              "and keeps the conversation. Piped stdin: one task per line."))
    add_agent_options(repl)
    repl.add_argument("--save", metavar="PATH",
                      help="rewrite the transcript notebook here after each task")
    repl.add_argument("--quiet", action="store_true", help="print only each task's answer")
    mcp = sub.add_parser("mcp", help="agree (or stop agreeing) to start an mcp.json's servers")
    mcp.add_argument("action", choices=["trust", "untrust"])
    mcp.add_argument("path", nargs="?", default=None,
                     help="the mcp.json (default: .ipyagent/mcp.json or mcp.json here)")
    return p


def _mcp(action: str, path: str | None) -> int:
    """``ipyagent mcp trust|untrust [PATH]``: what was agreed to is printed, line by line."""
    from pathlib import Path

    from ..tools.mcp.config import find_config_file, load_configs
    from ..tools.mcp.trust import requests_for, trust, untrust, visible

    file = Path(path) if path else find_config_file(Path.cwd())
    if file is None or not file.is_file():
        print(f"ipyagent: no MCP config file {'at ' + visible(path) if path else 'here'} "
              "(.ipyagent/mcp.json or mcp.json)", file=sys.stderr)
        return 2
    if action == "untrust":
        print(f"ipyagent: {'no longer trusted' if untrust(file) else 'was not trusted'}: "
              f"{visible(str(file))}")
        return 0
    directory = file.parent.parent if file.parent.name == ".ipyagent" else file.parent
    read = find_config_file(directory)
    if read is None or read.resolve() != file.resolve():
        print(f"ipyagent: {visible(str(file))} is not the file ipyagent reads there "
              f"({visible(str(read)) if read else 'none'}: the first of .ipyagent/mcp.json, "
              "mcp.json)", file=sys.stderr)
        return 2
    configs, problems = load_configs({}, directory)
    for problem in problems:
        print(f"ipyagent: {problem}", file=sys.stderr)
    pending = requests_for(configs)
    for request in pending:
        note = trust(request)
        print(f"ipyagent: trusted {visible(str(file))} as it is now (sha256 "
              f"{request.sha256[:16]}…); its servers start when an agent needs them:")
        print("\n".join(f"  {line}" for line in request.lines()))
        if note:
            print(f"ipyagent: {note}", file=sys.stderr)
    if not pending:
        print(f"ipyagent: nothing to trust in {visible(str(file))}"
              + (" (already trusted as it is)" if configs else " (no servers)"))
    return 0


def configured_agent(args: argparse.Namespace) -> tuple[Agent, str] | None:
    """The agent ``args`` and the configuration files ask for, and IPython's colour scheme
    they set; None (said in one line) if bad."""
    from .._util.text import one_line, visible
    from ..errors import IpyagentError
    from .cliopts import ConfigFileError, colour_scheme, load_config, make_agent

    try:
        config = load_config(args)
        return make_agent(args, config), colour_scheme(config)
    except ConfigFileError as exc:
        print(f"ipyagent: configuration file {exc}", file=sys.stderr)
    except (TraitError, IpyagentError) as exc:
        print(f"ipyagent: {visible(one_line(exc))}", file=sys.stderr)
    return None


def _unattended(call: ToolCall) -> str:
    """Why a call was denied with nobody at a terminal, and how to let calls run."""
    return ("nobody could approve this call: stdin is not a terminal (a script, a pipe, CI). "
            f"Pass --approve auto to let tool calls run unattended ({call.name} was not run)")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; ``run``'s exit code is 0 only when the run ended ``done``."""
    args = _parser().parse_args(argv)
    if args.command == "mcp":
        return _mcp(args.action, args.path)
    from .._util.mainthread import PumpDispatcher, run_pumped
    from .._util.text import visible
    from ..engine.approval import TerminalOrDeny, pumped_answer
    from ..errors import IpyagentError
    from .terminal import TerminalDisplay

    made = configured_agent(args)
    if made is None:
        return 2
    agent, scheme = made
    try:
        for name in args.skill:  # -s NAME: its instructions before the (first) task
            agent.use_skill(name)
    except IpyagentError as exc:
        agent.close()
        print(f"ipyagent: -s: {visible(str(exc))}", file=sys.stderr)
        return 2
    # IPython's `c.InteractiveShell.colors = "NoColor"` turns ours off too, as in IPython.
    colours: dict[str, Any] = {"scheme": scheme, "colour": False if scheme == "nocolor" else None}
    if args.command == "repl":
        from .repl import Repl

        with agent:
            return Repl(agent, colours=colours, quiet=args.quiet, save=args.save).loop()
    approve = agent.approval
    # The prompt runs on this (main) thread, where Ctrl-C lands; in a worker thread a
    # cancelled input() kept reading and the process could not exit.
    pump = PumpDispatcher()
    if approve == "ask":
        agent.approval_hook = TerminalOrDeny(
            pumped_answer(pump), _unattended,
            show_call=args.quiet)
    if not args.quiet:  # where code runs and what can reach the system, before anything runs
        for line in start_lines(agent):
            print(line, file=sys.stderr)
    with agent:
        try:
            display = None if args.quiet else TerminalDisplay(
                preview=agent.tools.preview, max_output_lines=agent.output_lines, **colours)
            result = run_pumped(pump, agent.arun(args.task, on_event=display))
        except KeyboardInterrupt:
            print("\nipyagent: interrupted", file=sys.stderr)
            if args.save and len(agent.context):
                _save(agent, args.save)  # what was done so far is still asked for
            return 130
        except IpyagentError as exc:
            print(f"ipyagent: {visible(str(exc))}", file=sys.stderr)
            return 2
        if args.quiet:
            # The answer is data when piped (kept as written); on a terminal, it is shown.
            print(visible(result.text) if sys.stdout.isatty() else result.text)
            if result.stop_reason != "done":  # stdout is the answer; why it is not one, here
                print(f"ipyagent: {visible(result.footer())}", file=sys.stderr)
        if args.save and not _save(agent, args.save):
            return 2  # asked for a transcript and got none: not a success
    return 0 if result.stop_reason == "done" else 1


def _save(agent: Agent, path: str) -> bool:
    from .._util.text import visible
    from ..errors import IpyagentError

    try:
        saved = agent.save(path)
    except (OSError, IpyagentError) as exc:
        print(f"ipyagent: could not save the transcript: {visible(str(exc))}", file=sys.stderr)
        return False
    print(f"ipyagent: saved the transcript to {saved}", file=sys.stderr)
    return True


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
