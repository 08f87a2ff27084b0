"""The ``ipyagent`` command: run one task from a terminal and stream it."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Sequence

from traitlets import TraitError

from .._version import __version__

if TYPE_CHECKING:
    from ..agent import Agent
    from ..items import ToolCall

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ipyagent", description="Run an ipyagent task from the terminal.")
    p.add_argument("--version", action="version", version=f"ipyagent {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one task and print the answer")
    run.add_argument("task", help="what to do, e.g. 'Use Python to compute 2**100'")
    run.add_argument("--model", default="demo", help="model name ('demo': offline, no key)")
    run.add_argument("--provider", default=None,
                     help="preset: openai, anthropic, ollama, llamacpp, llama-cpp-python, vllm, lmstudio, groq, openrouter")
    run.add_argument("--api", choices=["chat", "responses", "anthropic"], default=None,
                     help="wire format (default: from the provider, else chat)")
    run.add_argument("--base-url", default="", help="OpenAI-compatible endpoint URL")
    run.add_argument("--api-key-env", default=None,
                     help="environment variable holding the API key (default: from the provider)")
    run.add_argument("--approve", choices=["auto", "ask", "deny"], default=None,
                     help="tool-call approval (default: ask; with no terminal to ask in, calls are denied)")
    run.add_argument("--max-steps", type=int, default=20)
    run.add_argument("-s", "--skill", action="append", default=[], metavar="NAME",
                     help="load this skill's instructions before the task (repeatable)")
    run.add_argument("--save", metavar="PATH", help="save the transcript notebook here")
    run.add_argument("--quiet", action="store_true", help="print only the final answer")
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


def _unattended(call: ToolCall) -> str:
    """Why a call was denied with nobody at a terminal, and how to let calls run."""
    return ("nobody could approve this call: stdin is not a terminal (a script, a pipe, CI). "
            f"Pass --approve auto to let tool calls run unattended ({call.name} was not run)")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; the exit code is 0 only when the run ended ``done``."""
    args = _parser().parse_args(argv)
    if args.command == "mcp":
        return _mcp(args.action, args.path)
    from .._mainthread import PumpDispatcher, run_pumped
    from .._text import visible
    from ..agent import Agent
    from ..approval import TerminalOrDeny, terminal_answer
    from ..errors import IpyagentError
    from .terminal import TerminalDisplay

    # Nobody at a terminal (a script, a pipe, CI): calls are denied unless --approve says
    # otherwise, as in a notebook run without a frontend. Never run unasked by default.
    approve = args.approve or "ask"
    try:
        settings = {k: v for k, v in (("provider", args.provider), ("api", args.api),
                                       ("base_url", args.base_url)) if v}
        if args.api_key_env:
            settings["api_key_env"] = args.api_key_env
        agent = Agent(model=args.model, approval=approve, max_steps=args.max_steps, **settings)
    except TraitError as exc:
        print(f"ipyagent: {exc}", file=sys.stderr)
        return 2
    try:
        for name in args.skill:  # -s NAME: its instructions before the task
            agent.use_skill(name)
    except IpyagentError as exc:
        agent.close()
        print(f"ipyagent: -s: {visible(str(exc))}", file=sys.stderr)
        return 2
    # The prompt runs on this (main) thread, where Ctrl-C lands; in a worker thread a
    # cancelled input() kept reading and the process could not exit.
    pump = PumpDispatcher()
    if approve == "ask":
        agent.approval_hook = TerminalOrDeny(
            lambda prompt: pump.call_and_wait(terminal_answer, prompt), _unattended,
            show_call=args.quiet)
    with agent:
        try:
            display = None if args.quiet else TerminalDisplay(preview=agent.tools.preview,
                                                             max_output_lines=agent.output_lines)
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
    from .._text import visible
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
