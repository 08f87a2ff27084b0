"""What ``ipyagent run`` and ``ipyagent repl`` share: the agent's options, its configuration
files and the Agent they make.

Precedence, later wins: IPython's own configuration (``ipython_config.py`` and
``ipython_config.json`` in the profile directory, ``c.Agent.*``), then ``--config FILE``,
then the command-line options. A configuration file is Python that runs: it is the user's
own file, trusted as IPython trusts it. One that fails stops the command with one line
naming it (never a run on half a configuration).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traitlets.config import Config

    from ..engine.agent import Agent

__all__ = ["CONFIG_HELP", "ConfigFileError", "add_agent_options", "colour_scheme", "load_config",
           "make_agent", "start_lines", "where_code_runs"]

CONFIG_HELP = (
    "Settings come from IPython's configuration (c.Agent.* in ipython_config.py or "
    "ipython_config.json of the IPython profile, $IPYTHONDIR or ~/.ipython), then --config "
    "FILE, then the options given here: later wins. Configuration files are Python that "
    "runs, as in IPython: use only your own.")

# Command-line option -> Agent trait, set in this order after the configuration (and after
# the persona, so an option given with -p wins over the persona's setting).
_OPTIONS = {"model": "model", "provider": "provider", "api": "api", "base_url": "base_url",
            "api_key_env": "api_key_env", "approve": "approval", "max_steps": "max_steps"}


class ConfigFileError(Exception):
    """A configuration file that is missing or failed: one line naming it."""


def add_agent_options(p: argparse.ArgumentParser) -> None:
    """The options that configure the agent, for every command that makes one."""
    p.add_argument("-p", "--persona", metavar="NAME", default=None,
                   help="run as this persona (coder, data-analyst, reviewer, … or your own)")
    p.add_argument("--model", default=None, help="model name (default 'demo': offline, no key)")
    p.add_argument("--provider", default=None,
                   help="preset: openai, anthropic, ollama, llamacpp, llama-cpp-python, vllm, lmstudio, groq, openrouter")
    p.add_argument("--api", choices=["chat", "responses", "anthropic"], default=None,
                   help="wire format (default: from the provider, else chat)")
    p.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint URL")
    p.add_argument("--api-key-env", default=None,
                   help="environment variable holding the API key (default: from the provider)")
    p.add_argument("--approve", choices=["auto", "ask", "deny"], default=None,
                   help="tool-call approval (default: ask; with no terminal to ask in, calls are denied)")
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many iterations (default 20)")
    p.add_argument("-s", "--skill", action="append", default=[], metavar="NAME",
                   help="load this skill's instructions before the (first) task (repeatable)")
    p.add_argument("--config", metavar="FILE", default=None,
                   help="a configuration file (.py or .json, as ipython_config), over IPython's")
    p.add_argument("--profile", metavar="NAME", default="default",
                   help="the IPython profile whose ipython_config is read (default: default)")


def _read(path: Path) -> Config:
    """One configuration file (``.json``: JSON, else Python that runs)."""
    from IPython.core.application import ProfileAwareConfigLoader
    from traitlets.config.loader import JSONFileConfigLoader

    # IPython's own loader: its files may call load_subconfig(..., profile=NAME).
    cls = JSONFileConfigLoader if path.suffix == ".json" else ProfileAwareConfigLoader
    loader = cls(path.name, path=str(path.parent))
    try:
        return loader.load_config()
    except (Exception, SystemExit) as exc:  # the user's code: whatever it raises, one line
        from .._util.text import one_line, visible

        raise ConfigFileError(visible(f"{path}: {type(exc).__name__}: {one_line(exc)}")) from None


def load_config(args: argparse.Namespace) -> Config:
    """The profile's ipython_config (.py, then .json), then ``--config FILE``, merged."""
    from traitlets.config import Config

    merged = Config()
    from IPython.paths import get_ipython_dir

    profile = Path(get_ipython_dir()) / f"profile_{args.profile}"
    if args.profile != "default" and not profile.is_dir():
        raise ConfigFileError(f"no IPython profile {args.profile!r} (no {profile})")
    for name in ("ipython_config.py", "ipython_config.json"):
        if (profile / name).is_file():
            merged.merge(_read(profile / name))
    if args.config:
        path = Path(os.path.expanduser(args.config))
        if not path.is_file():
            raise ConfigFileError(f"{path}: no such configuration file")
        merged.merge(_read(path))
    return merged


def colour_scheme(config: Config) -> str:
    """IPython's colour scheme as the configuration sets it (``TerminalInteractiveShell``
    over ``InteractiveShell``), lower-case; "" when it does not."""
    for section in ("TerminalInteractiveShell", "InteractiveShell"):
        if config._has_section(section) and "colors" in config[section]:
            return str(config[section]["colors"] or "").lower()
    return ""


def make_agent(args: argparse.Namespace, config: Config, **extra: Any) -> Agent:
    """An Agent configured from ``config`` and then the options in ``args``.

    Raises ``TraitError`` or ``IpyagentError`` (a bad value, an unknown persona): one line.
    The command line's approval default is ``ask`` (the library's is ``auto``): someone
    at a terminal is asked unless a configuration or ``--approve`` says otherwise.
    """
    from ..engine.agent import Agent

    kwargs: dict[str, Any] = dict(extra)
    if args.persona:
        kwargs["persona"] = args.persona
    configured = config.Agent if config._has_section("Agent") else {}
    if "approval" not in configured and args.approve is None:
        kwargs["approval"] = "ask"
    agent = Agent(config=config, **kwargs)
    try:
        for option, trait in _OPTIONS.items():
            value = getattr(args, option)
            if value is not None and value != "":
                setattr(agent, trait, value)
    except BaseException:
        agent.close()  # its sibling kernel was already starting
        raise
    return agent


def where_code_runs(agent: Agent) -> str | None:
    """One line when the model's code runs on a remote server (the URL, never the token) or
    in a sibling that is not sandboxed though it could be asked to be; None otherwise."""
    if not agent.python_tool:
        return None
    if agent.kernel_url:
        files = ("file tools act on its files" if agent.workspace == "remote"
                 else "file tools act on this machine")
        return (f"code runs on {agent.kernel_url} (remote kernel {agent.kernel_name}, "
                f"not sandboxed by ipyagent); {files}")
    from ..kernel.sandbox import unsandboxed_note

    return unsandboxed_note(agent.sandbox)


def start_lines(agent: Agent) -> list[str]:
    """What ``run`` and ``repl`` say before anything runs: where the code runs (when that is
    not this machine's sandbox) and whether the shell tool is on, and why."""
    from .._util.text import visible

    lines = [where_code_runs(agent), agent.shell_status()[1]]
    return [f"ipyagent: {visible(line)}" for line in lines if line]
