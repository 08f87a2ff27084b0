"""Which ``mcp.json`` files beside a notebook you agreed to run, remembered by content.

A config file in the working directory came with the directory, not from you, and each of
its servers is a program it would start. So they start only once you agreed to that file
as it is: its path and SHA-256 go into a trust list in your config directory
(``~/.ipyagent/trusted-mcp.json``; ``$IPYAGENT_MCP_TRUST_FILE`` names another file). A
changed file asks again; a corrupt list trusts nothing. The agreement covers the file's
text — the command lines you were shown — not the programs those commands run. Servers
in ``Agent.mcp_servers`` are your own configuration and start without asking.
"""

from __future__ import annotations

import asyncio
import datetime
import html
import json
import os
import shlex
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..._util.atomic import write_atomic
from ..._util.text import one_line
from .config import ServerConfig

if TYPE_CHECKING:
    from ..._util.mainthread import Dispatcher

__all__ = ["TRUST_ENV", "TrustPanel", "TrustRequest", "ask_in_notebook", "is_trusted",
           "requests_for", "trust", "trust_file", "trust_file_name", "untrust", "visible"]

TRUST_ENV = "IPYAGENT_MCP_TRUST_FILE"
_SECRETISH = ("KEY", "TOKEN", "SECRET", "PASSWORD", "AUTH")
HOW = "%agent mcp trust (or: ipyagent mcp trust {path})"


def trust_file() -> Path:
    """Where the trust list lives."""
    return Path(trust_file_name())


def trust_file_name() -> str:
    """``trust_file()`` as a string (asked every step: pathlib would cost more than the stat)."""
    return os.environ.get(TRUST_ENV) or os.path.join(os.path.expanduser("~"), ".ipyagent",
                                                     "trusted-mcp.json")


def visible(text: str) -> str:
    """``text`` with every control, format and bidi character shown as an escape."""
    return "".join(ch if ch == " " or unicodedata.category(ch)[0] not in "CZ"
                   else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _server_line(config: ServerConfig) -> str:
    if config.url:
        line = f"{config.name}: {config.url}"
        if config.headers:
            line += f" (headers: {', '.join(sorted(config.headers))})"
        return visible(line)
    line = f"{config.name}: {shlex.join([config.command, *config.args])}"
    if config.cwd:
        line += f" (in {config.cwd})"
    if config.env:  # LD_PRELOAD=… can matter as much as the command; secret values stay hidden
        env = [f"{k}=…" if any(m in k.upper() for m in _SECRETISH) else f"{k}={shlex.quote(v)}"
               for k, v in sorted(config.env.items())]
        line += f" (env: {' '.join(env)})"
    return visible(line)


@dataclass
class TrustRequest:
    """The servers of one config file nobody has agreed to yet."""

    path: Path
    sha256: str
    servers: list[ServerConfig] = field(default_factory=list)
    changed: bool = False  # another version of this file was trusted before

    def lines(self) -> list[str]:
        """One line per server: its exact command line (or URL), control characters visible."""
        return [_server_line(c) for c in self.servers]

    def question(self) -> str:
        """What the prompt says before asking."""
        what = "changed since you trusted it; it now wants" if self.changed else "wants"
        return (f"{visible(str(self.path))} ({what}) to start these MCP servers — programs "
                "that run as you:\n" + "\n".join(f"  {line}" for line in self.lines())
                + f"\n(sha256 {self.sha256[:16]}…; agreeing is remembered in {trust_file()})")

    def refused(self, why: str) -> str:
        """The one line saying the servers did not start, why, and how to allow them."""
        changed = " (changed since you trusted it)" if self.changed else ""
        return (f"MCP servers of {visible(str(self.path))}{changed} not started — {why}: "
                f"{'; '.join(self.lines())}. To allow this file as it is: "
                + HOW.format(path=shlex.quote(str(self.path))))


def requests_for(configs: dict[str, ServerConfig]) -> list[TrustRequest]:
    """The config files among ``configs`` that are not trusted as they are now."""
    files: dict[tuple[str, str], TrustRequest] = {}
    for config in configs.values():
        if not config.digest:  # Agent.mcp_servers: yours
            continue
        key = (config.source, config.digest)
        if key not in files:
            files[key] = TrustRequest(Path(config.source), config.digest)
        files[key].servers.append(config)
    pending = []
    for request in files.values():
        state, _ = _state(request.path, request.sha256)
        if state != "trusted":
            request.changed = state == "changed"
            pending.append(request)
    return pending


def _load() -> tuple[dict[str, Any], str | None]:
    path = trust_file()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, None
    except (OSError, ValueError) as exc:
        return {}, (f"{path} cannot be read ({one_line(exc)}): no MCP config file "
                    "counts as trusted until it is fixed or removed")
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return {}, f"{path} is not an ipyagent trust list: no MCP config file counts as trusted"
    return files, None


def _key(path: Path) -> str:
    return str(Path(path).resolve())


def _state(path: Path, sha256: str) -> tuple[str, str | None]:
    files, problem = _load()
    entry = files.get(_key(path))
    if not isinstance(entry, dict):
        return "unknown", problem
    return ("trusted" if entry.get("sha256") == sha256 else "changed"), problem


def is_trusted(path: Path, sha256: str) -> tuple[bool, str | None]:
    """Whether that exact content of ``path`` is trusted, and a problem with the list."""
    state, problem = _state(path, sha256)
    return state == "trusted", problem


def trust(request: TrustRequest) -> str | None:
    """Remember the agreement (atomically); a note when a corrupt list was moved aside."""
    files, problem = _load()
    note = None
    target = trust_file()
    if problem and target.exists():
        aside = target.with_name(target.name + ".corrupt")
        os.replace(target, aside)
        note = f"the unreadable trust list was moved to {aside}"
    files[_key(request.path)] = {
        "sha256": request.sha256, "servers": request.lines(),
        "trusted": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    _write(target, {"version": 1, "files": files})
    return note


def untrust(path: Path) -> bool:
    """Forget any agreement for ``path``; True when there was one."""
    files, problem = _load()
    if problem or _key(path) not in files:
        return False
    del files[_key(path)]
    _write(trust_file(), {"version": 1, "files": files})
    return True


def _write(target: Path, data: dict[str, Any]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(target, json.dumps(data, indent=2))  # a reader sees the old list or the new


# -- asking in the notebook ------------------------------------------------------------------
class TrustPanel:
    """Trust / Don't start buttons for one config file; main thread only."""

    def __init__(self, request: TrustRequest, resolve: Callable[[bool | str], None],
                 note: str = "") -> None:
        import ipywidgets as w  # type: ignore[import-untyped]

        self.request = request
        self._resolve = resolve
        self.answer: bool | str | None = None
        self.trust = w.Button(description="Trust and start", button_style="warning",
                              icon="check", layout=w.Layout(width="auto"),
                              tooltip="Remember this file as it is and start its servers")
        self.refuse = w.Button(description="Don't start", icon="times",
                               layout=w.Layout(width="auto"))
        lines = "".join(f"<li><code>{html.escape(line)}</code></li>" for line in request.lines())
        what = "changed since you trusted it; it now wants" if request.changed else "wants"
        self.text = w.HTML(
            f"<div><b>{html.escape(visible(str(request.path)))}</b> ({what}) to start these MCP "
            f"servers — programs that run as you:<ul style='margin:0'>{lines}</ul>"
            f"<small>sha256 {html.escape(request.sha256[:16])}…; your answer is remembered in "
            f"{html.escape(str(trust_file()))}{html.escape(note)}</small></div>")
        self.status = w.HTML("")
        self.trust.on_click(lambda _: self._answer(True))
        self.refuse.on_click(lambda _: self._answer("you chose not to start them"))
        self.widget = w.VBox([self.text, w.HBox([self.trust, self.refuse]), self.status])
        self.widget.add_class("ipyagent-mcp-trust")

    def _answer(self, answer: bool | str) -> None:
        if self.answer is not None:
            return  # a double click, or a click racing the timeout
        self.settle(answer)
        self._resolve(answer)

    def settle(self, answer: bool | str) -> None:
        """Disable the buttons and say what was decided."""
        self.answer = answer
        self.trust.disabled = self.refuse.disabled = True
        self.status.value = ("✓ trusted: starting them" if answer is True
                             else f"✗ not started: {html.escape(str(answer))}")


async def ask_in_notebook(dispatcher: Dispatcher | None, headless: bool, timeout: float,
                          request: TrustRequest, show: Callable[[Any], Any] | None = None,
                          ) -> bool | str:
    """Show a ``TrustPanel`` in the running cell; True, or why the servers do not start."""
    if dispatcher is None:
        return "no notebook cell to ask in"
    if headless:
        return "the notebook runs without a frontend to ask in (nbclient, papermill or CI)"
    loop = asyncio.get_running_loop()
    future: asyncio.Future[bool | str] = loop.create_future()

    def resolve(answer: bool | str) -> None:  # main thread → engine loop
        loop.call_soon_threadsafe(_settle, future, answer)

    holder: list[TrustPanel] = []

    def open_panel() -> None:
        panel = TrustPanel(request, resolve, f" (not started after {timeout:g} s without an "
                                             "answer)" if timeout else "")
        holder.append(panel)
        if show is not None:
            show(panel.widget)
        else:
            from IPython.display import display

            display(panel.widget)

    dispatcher.call(open_panel)
    try:
        return await (asyncio.wait_for(asyncio.shield(future), timeout) if timeout else future)
    except asyncio.TimeoutError:
        why = f"nobody answered within {timeout:g} s (Agent.approval_timeout)"
        if future.done() and not future.cancelled():
            return future.result()  # a click won the race
        dispatcher.call(_settle_open, holder, why)
        return why
    except asyncio.CancelledError:
        dispatcher.call(_settle_open, holder, "interrupted")
        raise


def _settle(future: asyncio.Future[bool | str], answer: bool | str) -> None:
    if not future.done():
        future.set_result(answer)


def _settle_open(panels: list[TrustPanel], why: str) -> None:
    for panel in panels:
        if panel.answer is None:
            panel.settle(why)
