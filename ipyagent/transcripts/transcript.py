"""Transcripts: a run saved as a notebook that proves what the agent did, and loaded back.

``save`` writes an nbformat v4 notebook (see ``export`` for the cells) with the
lossless item list, the usage and the behaviour-shaping settings in
``metadata["ipyagent"]``. Writes are atomic (a temp file in the same directory, fsync,
rename): a crash or SIGKILL leaves the previous complete file, never half of one. No
secret is ever written: the text is scanned for the API key's value (and other key-like
environment values) first, and a hit refuses the write with one readable line.

``load``/``read`` use the metadata only; edits to the cells are not read back.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import os
import pickle
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traitlets import TraitError

from .._util.atomic import write_atomic
from .._util.text import repair_surrogates, visible
from .._version import __version__
from ..context.buffer import Context
from ..context.events import Notice
from ..context.items import Item, Message, Reasoning, Summary, ToolCall, ToolResult, item_from_dict, unfold
from ..context.spill import outputs_of, raw_replaced
from ..engine.settings import LIMITS
from ..errors import IpyagentError, TranscriptError
from ..trust.secrets import find_secret, key_envs, secret_values
from ..trust.untrusted import inline_code, markdown_literal
from .export import FORMAT, context_to_notebook
from .node import NotebookNode
from .notebook_file import read_notebook
from .notebook_text import NotebookText

if TYPE_CHECKING:
    from ..engine.agent import Agent
    from .rebuild import Rebuild

__all__ = ["Transcript", "to_notebook", "save", "read", "load_into", "from_transcript",
           "Autosave", "write_notebook", "SETTINGS", "RESTORED",
           "restored_endpoint", "endpoint_note", "LIMITS", "tightened"]

# Recorded in the header and metadata: what shapes behaviour. Never a key.
SETTINGS = ("model", "provider", "api", "base_url", "approval", "allow", "max_steps",
            "max_tokens", "circuit_breaker", "temperature", "request_max_tokens", "tool_choice",
            "on_length", "context_window", "compact_threshold", "compact_keep_recent",
            "compact_target", "prompt_cache", "python_tool", "tool_output_limit", "kernel_name",
            "tool_timeout", "memory_limit", "api_key_env", "tool_mode", "shell_tool", "kernel_url",
            "model_profile", "constrain_calls")
# Restored by ``from_transcript``. Trust decisions (approval, allow) and where requests,
# the key and the code go (base_url, api_key_env, kernel_url) stay with the person loading the file; a preset
# (provider) fixes its own host and key, and a loopback base_url stays on this machine,
# so those two come back (``restored_endpoint``).
RESTORED = ("model", "provider", "api", "max_steps", "max_tokens", "circuit_breaker", "temperature",
            "request_max_tokens", "tool_choice", "on_length", "context_window",
            "compact_threshold", "compact_keep_recent", "compact_target", "prompt_cache",
            "python_tool", "tool_output_limit", "kernel_name", "tool_timeout", "memory_limit",
            "tool_mode", "shell_tool", "model_profile", "constrain_calls")


@dataclass
class Transcript:
    """What a transcript notebook holds: items, system prompt, settings, usage."""

    items: list[Item]
    system: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    version: str = ""
    saved: str = ""
    path: str | None = None
    # The code cells a person sees, per call id (None: not read from a notebook).
    cells: dict[str, list[str]] | None = None
    rebuild: Rebuild | None = None  # what ``load(..., rerun=True)`` re-ran
    # The branch it is (``branches.branch_record``): name, parent, the step it left at.
    branch: Any = None

    def verify_cells(self) -> None:
        """Raise ``TranscriptError`` unless every python call that would run again is the
        code its cell shows, and every file that would be re-created is the cell's text.

        Why: ``load`` and ``replay`` read the metadata, which nobody sees. Replay and
        ``--rerun`` run code; it must be the code a reader of the notebook can review —
        an edited cell (or metadata edited behind the cells) is refused, not run.
        """
        if self.cells is None:
            return
        from .file_record import cell_source
        from .rebuild import rerun_steps

        seen: dict[str, int] = {}
        where = f"{self.path or 'the transcript'}"
        for call, written in rerun_steps(self.items):
            n = seen[call.id] = seen.get(call.id, -1) + 1
            shown = self.cells.get(call.id, [])
            if written is not None:
                path, text = written
                if n >= len(shown) or shown[n] != cell_source(call, path, text):
                    raise TranscriptError(f"{where}: the cell that re-creates {path} ({call.id}) "
                                          "is missing or differs from the recorded file (edited "
                                          "after saving); save the notebook again from "
                                          "ipyagent, or restore the cell")
            elif n >= len(shown):
                raise TranscriptError(f"{where}: python call {call.id} has no code cell; the "
                                      "metadata was changed after saving — not running it")
            elif shown[n] != str(call.arguments.get("code", "")):
                raise TranscriptError(f"{where}: the cell of python call {call.id} differs from "
                                      "the recorded code (edited after saving); save the "
                                      "notebook again from ipyagent, or restore the cell")

    @property
    def context(self) -> Context:
        """A fresh Context holding copies of the items."""
        try:
            # A deep copy at C speed (to_dict/from_dict walk every nested value in Python, a
            # tenth of a second for a 1,000-step run). Only bytes pickled here, from these
            # items, are unpickled: never a file's.
            copies = pickle.loads(pickle.dumps(self.items, pickle.HIGHEST_PROTOCOL))
        except Exception:  # noqa: BLE001 - items built in memory may hold what pickle refuses
            return Context.from_dicts([i.to_dict() for i in self.items], system=self.system)
        return Context(copies, system=self.system)

    def __repr__(self) -> str:
        where = f" {self.path!r}" if self.path else ""
        return (f"<Transcript{where}: {len(self.items)} items, "
                f"model={self.model!r}, saved {self.saved or '?'}>")

    @property
    def model(self) -> str:
        """The model that answered: an injected client's name, else the model setting."""
        return str(self.settings.get("client") or self.settings.get("model") or "?")

    def _repr_markdown_(self) -> str:
        calls = sum(i.type == "tool_call" for i in self.items)
        tasks = sum(i.type == "message" and getattr(i, "role", "") == "user" for i in self.items)
        # The path, model, date and version come from the file: shown, never live.
        return (f"**Transcript** {inline_code(self.path or '')} — {len(self.items)} items "
                f"({tasks} from the user, {calls} tool calls), model {inline_code(self.model)}, "
                f"saved {markdown_literal(str(self.saved or '?'))} with ipyagent "
                f"{markdown_literal(str(self.version or '?'))}")


# -- writing ----------------------------------------------------------------------
def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


def _endpoint(agent: Agent) -> str:
    from ..models.retry import safe_url

    if agent.client_is_injected:
        return "injected client"
    if agent.model == "demo":
        return "offline (built-in demo model)"
    try:
        return safe_url(agent.endpoint.base_url)  # provider presets and explicit settings
    except Exception:  # noqa: BLE001 - an unresolvable setting: show what was set
        return safe_url(agent.base_url or "https://api.openai.com/v1")


def recorded_settings(agent: Agent) -> dict[str, Any]:
    """The behaviour-shaping settings, JSON-safe, with the endpoint stripped of credentials."""
    from ..models.retry import safe_url

    out: dict[str, Any] = {}
    for name in SETTINGS:
        if not agent.has_trait(name):  # a setting this version does not have
            continue
        value = getattr(agent, name)
        out[name] = list(value) if isinstance(value, (list, tuple)) else value
    out["base_url"] = safe_url(agent.base_url) if agent.base_url else ""
    if "kernel_url" in out:
        out["kernel_url"] = safe_url(out["kernel_url"]) if out["kernel_url"] else ""
    client = agent.resources.client_if_made
    if agent.client_is_injected and client is not None:
        out["client"] = str(getattr(client, "name", type(client).__name__))
    return out


def _header(agent: Agent, settings: dict[str, Any], saved: str) -> dict[str, Any]:
    from urllib.parse import urlsplit

    endpoint = _endpoint(agent)
    host = urlsplit(endpoint).netloc or endpoint
    model = settings.get("client") or settings["model"]
    note = ("Markdown cells are the conversation; each code cell is a `python` call the agent "
            "ran in its sibling kernel, with the outputs it got. Run All re-does the "
            "computation; `%agent replay` on this file checks it reproduces.")
    if settings["model"] == "demo" and "client" not in settings:
        note += " **Made with the built-in demo model, not an LLM.**"
    usage = agent.usage
    return {"title": "ipyagent transcript", "model": model, "endpoint": host, "date": saved,
            "ipyagent": __version__, "approval": settings["approval"],
            "allow": settings["allow"], "max_steps": settings["max_steps"],
            "max_tokens": settings["max_tokens"] or None,
            "temperature": settings["temperature"],
            "request_max_tokens": settings["request_max_tokens"],
            "tool_choice": settings["tool_choice"],
            "context_window": settings.get("context_window") or None,
            "tools": ", ".join(agent.tools.names) or "none",
            "code ran": ran_where(agent.context),
            "usage": f"{usage} tokens, {usage.requests} requests", "note": note}


_WHERE = {"bubblewrap": "in the bubblewrap sandbox", "none": "NOT sandboxed (as your account)",
          "remote": "on a remote kernel (not sandboxed by ipyagent)", "": "not recorded"}


def ran_where(items: Iterable[Item]) -> str | None:
    """Where the run's python and shell calls ran, as their results recorded it ("in the
    bubblewrap sandbox (all 12 calls)", "3 in the bubblewrap sandbox, 1 NOT sandboxed (as
    your account)"); None when no code ran."""
    counts: dict[str, int] = {}
    for item in unfold(items, keep_summaries=False):
        if isinstance(item, ToolResult) and (item.name in ("python", "shell")
                                             or "sandbox" in item.meta):
            if item.execution_count is None and "sandbox" not in item.meta:
                continue  # never ran (denied, skipped, not offered)
            where = item.meta.get("sandbox")
            key = where if isinstance(where, str) and where in _WHERE else ""
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return None
    if len(counts) == 1:
        (key, n), = counts.items()
        return f"{_WHERE[key]} ({'all ' if n > 1 else ''}{n} call{'s' if n > 1 else ''})"
    return ", ".join(f"{counts[key]} {_WHERE[key]}" for key in _WHERE if key in counts)


def _parts(agent: Agent) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header (label → value) and the metadata besides the items."""
    from .tree import branch_line, branch_record

    saved = _now()
    settings = recorded_settings(agent)
    usage = agent.usage.to_dict()
    header, metadata = _header(agent, settings, saved), {
        "saved": saved, "settings": settings, "usage": usage, "tools": agent.tools.specs()}
    record = branch_record(agent)
    if record is not None:  # a branch says which one it is, and where it left its parent
        metadata["branch"] = record
        header["branch"] = branch_line(record)
    return header, metadata


def to_notebook(agent: Agent) -> NotebookNode:
    """The agent's conversation as a transcript notebook (not written anywhere)."""
    header, metadata = _parts(agent)
    return context_to_notebook(agent.context, header=header, kernel_name=agent.kernel_name,
                               metadata=metadata, audit=True)


def _write_agent(agent: Agent, target: Path, cache: NotebookText) -> Path:
    """Write the agent's transcript to ``target``: scanned for secrets, atomically, the
    cells and items ``cache`` holds reused (the text ``write_notebook(to_notebook(agent))``
    writes, without building or validating a NotebookNode)."""
    header, metadata = _parts(agent)
    text = cache.encoded(agent.context, header=header, kernel_name=agent.kernel_name,
                         metadata=metadata, secrets=secret_values(key_envs(agent)), target=target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, text)
    except OSError as exc:
        raise TranscriptError(f"cannot write {target}: {exc.strerror or exc}") from None
    cache.written(target)  # its long texts are read back from there, not kept in memory
    return target


def write_notebook(nb: Mapping[str, Any], path: str | os.PathLike[str], *,
                   key_env: str | list[str] | None = None) -> Path:
    """Validate, scan for secrets, then write atomically (temp file + rename)."""
    import nbformat

    target = Path(path).expanduser()
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        raise TranscriptError(f"not writing {target}: invalid notebook ({exc.message})") from None
    text = nbformat.writes(nb)
    leaked = find_secret(nb, secret_values(key_env))  # its strings: JSON escapes split lines
    if leaked:
        raise TranscriptError(
            f"refusing to write {target}: it would contain the value of ${leaked}; remove it "
            "from the context (agent.context is editable) and save again")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, repair_surrogates(text))  # a lone surrogate must not lose the save
    except OSError as exc:
        raise TranscriptError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target


def save(agent: Agent, path: str | os.PathLike[str]) -> Path:
    """Write the agent's transcript to ``path`` (``.ipynb`` added when missing); a
    directory (existing, or ending in ``/``) gets a new ``run-<date>.ipynb`` inside."""
    text = os.fspath(path)
    if not text.strip():
        raise TranscriptError("give a file name, e.g. run.ipynb")
    target = Path(text).expanduser()
    if text.endswith(("/", os.sep)) or target.is_dir():
        target = _new_run_file(target)
    elif target.suffix != ".ipynb":
        target = target.with_name(target.name + ".ipynb")
    return _write_agent(agent, target, NotebookText())


_RUN_FILE = re.compile(r"run-\d{8}-\d{6}(-\d+)?\.ipynb")


def _prune_runs(directory: Path, keep: int | None) -> None:
    """Delete all but the newest ``keep`` autosaved ``run-….ipynb`` in ``directory`` (only
    files named as autosave names them; ``None``: keep all)."""
    if keep is None or not directory.is_dir():
        return
    runs = sorted((p for p in directory.iterdir() if _RUN_FILE.fullmatch(p.name) and p.is_file()),
                  key=lambda p: (p.stat().st_mtime, p.name), reverse=True)
    for old in runs[keep:]:
        try:
            old.unlink()
        except OSError:
            pass  # another process took it, or it is read-only: pruning is best effort


def _new_run_file(directory: Path) -> Path:
    """``directory/run-YYYYmmdd-HHMMSS.ipynb``, numbered when that name is taken."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name, n = directory / f"run-{stamp}.ipynb", 1
    while name.exists():
        n += 1
        name = directory / f"run-{stamp}-{n}.ipynb"
    return name


# -- autosave ---------------------------------------------------------------------
class Autosave:
    """``Agent.autosave`` after every step (the agent calls ``save`` from its ``StepFinished``
    listener). It owns what autosaving remembers: each conversation's file, the file it
    last announced, the failure it last said (each said once, a failure until it works)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.target: tuple[Context, str, Path] | None = None  # (conversation, setting, its file)
        self.said: Path | None = None  # the file last announced
        self.said_setting: str | None = None  # a directory setting, announced once
        self.failure: str | None = None  # the last failure said
        self.cache = NotebookText()  # cells and items already rendered, reused per save

    def path(self) -> Path | None:
        """Where the current conversation autosaves (None when ``Agent.autosave`` is empty).

        ``autosave`` is a file path, or a directory (ending in ``/`` or existing) in which each
        conversation gets its own ``run-YYYYmmdd-HHMMSS.ipynb``.
        """
        agent = self.agent
        setting = agent.autosave
        if not setting:
            return None
        path = Path(setting).expanduser()
        if not (setting.endswith(("/", os.sep)) or path.is_dir()):
            return path if path.suffix == ".ipynb" else path.with_name(path.name + ".ipynb")
        # One file per conversation: a new Context (reset, load) starts a new file.
        target = self.target
        if target is None or target[0] is not agent.context or target[1] != setting:
            _prune_runs(path, max(0, agent.autosave_keep - 1) if agent.autosave_keep else None)
            target = self.target = (agent.context, setting, _new_run_file(path))
        return target[2]

    def write(self) -> Path | None:
        """Rewrite the autosave transcript (atomically) if ``Agent.autosave`` is set."""
        path = self.path()
        if path is None:
            return None
        return _write_agent(self.agent, path, self.cache)

    def save(self) -> Notice | None:
        """Write, and what to say about it: where, the first time; a failure, once."""
        try:
            path = self.write()
        except Exception as exc:  # a full disk must not kill the run: say it in one line
            message = f"autosave failed: {exc}"
            if message == self.failure:
                return None
            self.failure = message
            return Notice(message, "warning")
        self.failure = None
        if path is None or path == self.said:
            return None
        self.said = path
        if self.target is not None and self.target[2] == path:  # a directory: said once
            if self.said_setting == self.target[1]:
                return None
            self.said_setting = self.target[1]
        return Notice(f"autosaving this conversation to {path} (Agent.autosave)", "info")


# -- reading ----------------------------------------------------------------------
def read(path: str | os.PathLike[str]) -> Transcript:
    """Read a transcript notebook written by ``save`` (the metadata is the source of truth)."""
    source = Path(path).expanduser()
    try:
        nb = read_notebook(source)  # plain dicts; nbformat only for a file of another shape
    except FileNotFoundError:
        raise TranscriptError(f"no such transcript: {source}") from None
    except (OSError, ValueError) as exc:  # unreadable, or not JSON / not a notebook
        raise TranscriptError(f"cannot read {source}: {_first_line(exc)}") from None
    except Exception as exc:  # JSON that is no notebook ([], v3 without worksheets, ...)
        raise TranscriptError(f"cannot read {source}: not a notebook ({_first_line(exc)})") from None
    metadata = nb.get("metadata")
    data = metadata.get("ipyagent") if isinstance(metadata, dict) else None
    if isinstance(metadata, dict) and "ipyagent_branches" in metadata and data is None:
        raise TranscriptError(f"{source} is the index of a conversation's branches, not one "
                              "transcript: `%agent load` (agent.load) on it brings them all "
                              "back; replay or Run All take each branch's own file beside it")
    if not isinstance(data, dict) or not isinstance(data.get("items"), list):
        raise TranscriptError(f"{source} is not an ipyagent transcript (no metadata.ipyagent.items)")
    try:
        newer = int(data.get("format", 1)) > FORMAT
    except (TypeError, ValueError):
        raise TranscriptError(f"{source}: metadata.ipyagent.format is not a number "
                              f"({data.get('format')!r})") from None
    if newer:
        raise TranscriptError(f"{source} was written by a newer ipyagent ({data.get('version')}); "
                              "upgrade ipyagent to read it")
    for key in ("settings", "usage"):
        if not isinstance(data.get(key, {}), dict):
            raise TranscriptError(f"{source}: metadata.ipyagent.{key} is damaged (not a mapping)")
    try:
        items = [_checked(item_from_dict(d)) for d in data["items"]]
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise TranscriptError(f"{source}: a damaged item in metadata.ipyagent.items ({exc})") from None
    branch = data.get("branch")
    return Transcript(items=items, system=str(data.get("system", "")),
                      settings=data.get("settings", {}), usage=data.get("usage", {}),
                      version=str(data.get("version", "")), saved=str(data.get("saved", "")),
                      path=str(source), cells=_code_cells(nb),
                      branch=branch)  # checked where it is used (tree.restore_branch)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


# Fields every item of a type must hold with these types (the engine relies on them).
_FIELD_TYPES: dict[type, tuple[tuple[str, type | tuple[type, ...]], ...]] = {
    Message: (("content", str),),
    ToolCall: (("id", str), ("name", str)),
    ToolResult: (("call_id", str), ("output", str), ("error", bool), ("name", str),
                 ("execution_count", (int, type(None)))),
    Reasoning: (("content", str),),
    Summary: (("content", str), ("replaced", list)),
}


def _checked(item: Item) -> Item:
    """The item, if its fields, and those of every item a summary in it replaced, have the
    types the engine relies on (compaction and replay unfold those)."""
    _check(item)
    if isinstance(item, Summary):
        for inner in unfold((item_from_dict(d) for d in raw_replaced(item)), keep_summaries=True):
            _check(inner)
    return item


def _check(item: Item) -> None:
    for name, kind in _FIELD_TYPES.get(type(item), ()):
        value = getattr(item, name)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise TypeError(f"{item.type} {name} is {type(value).__name__} {value!r:.40}")
    if isinstance(item, Message) and item.role not in ("user", "assistant", "system"):
        raise TypeError(f"message role {item.role!r:.40} is not user, assistant or system")
    if not isinstance(getattr(item, "meta", {}), dict):
        raise TypeError(f"{item.type} meta is not a mapping")
    if isinstance(item, ToolCall) and not isinstance(item.arguments, dict):
        raise TypeError(f"tool call {item.id}: arguments are not a mapping")
    if isinstance(item, ToolResult):
        outputs = outputs_of(item)
        if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
            raise TypeError(f"tool result {item.call_id}: outputs are not a list of outputs")
        if not isinstance(item.meta, dict):
            raise TypeError(f"tool result {item.call_id}: meta is not a mapping")


def _code_cells(nb: Any) -> dict[str, list[str]]:
    """Visible code per call id, in notebook order (ids may repeat across tasks)."""
    cells: dict[str, list[str]] = {}
    for cell in nb.get("cells") or ():
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata")
        tag = meta.get("ipyagent") if isinstance(meta, dict) else None
        if isinstance(tag, dict) and isinstance(tag.get("call_id"), str):
            source = cell.get("source", "")
            cells.setdefault(tag["call_id"], []).append(
                "".join(source) if isinstance(source, list) else str(source))
    return cells


def load_into(agent: Agent, source: str | os.PathLike[str] | Transcript) -> Transcript:
    """Replace the agent's conversation (items, system prompt, usage) with a transcript's."""
    from ..context.events import Usage

    transcript = source if isinstance(source, Transcript) else read(source)
    agent.context = transcript.context
    # Another conversation: an Always given in the one it replaces does not carry over
    # (the buttons and the prompt say "this conversation"), nor does one come from a file.
    agent.policy.always.clear()
    u = transcript.usage
    agent.usage = Usage.from_dict(u if isinstance(u, dict) else {})
    from .tree import restore_branch

    restore_branch(agent, transcript)  # a branch's name, parent and step, when it says so
    return transcript


def from_transcript(cls: type[Agent], path: str | os.PathLike[str] | Transcript,
                    **settings: Any) -> Agent:
    """A new agent continuing a saved conversation; ``settings`` override the recorded ones."""
    transcript = path if isinstance(path, Transcript) else read(path)
    traits = cls.class_traits()
    kwargs = {k: transcript.settings[k] for k in RESTORED
              if k in transcript.settings and traits.get(k) is not None and k not in LIMITS}
    limits = [k for k in LIMITS if k in transcript.settings and traits.get(k) is not None
              and k not in settings]  # what the caller passes is theirs, as recorded or not
    tighter, ignored = tightened(transcript, limits, {k: _configured(cls, k, settings) for k in limits})
    kwargs.update(tighter)
    kwargs.update(restored_endpoint(transcript))
    kwargs["system_prompt"] = transcript.system
    recorded = [k for k in kwargs if k not in settings and k != "system_prompt"]
    kwargs.update(settings)
    agent = build_agent(cls, transcript, kwargs, recorded)
    load_into(agent, transcript)
    for note in (ignored, endpoint_note(agent, transcript)):
        if note:
            warnings.warn(visible(note), stacklevel=3)  # values from the file: controls shown
    return agent


def _configured(cls: type[Agent], name: str, settings: dict[str, Any]) -> Any:
    """What ``cls(**settings)`` would set ``name`` to without the file: the config, else
    the default (the baseline a recorded limit may only tighten)."""
    value = cls.class_traits()[name].default()
    parent = settings.get("parent")
    config = settings.get("config") or getattr(parent, "config", None)
    for section in cls.section_names():  # most derived last: it wins
        if config is not None and section in config and name in config[section]:
            value = config[section][name]
    return value


_SHELL_ORDER = ("off", "auto", "on")


def _limit(name: str, value: Any) -> float:
    """How loose a value of limit ``name`` is (larger: looser; inf: no limit)."""
    if name == "shell_tool":  # off < auto (only where sandboxed) < on
        if value not in _SHELL_ORDER:
            raise ValueError(f"not one of {', '.join(_SHELL_ORDER)}: {value!r:.40}")
        return float(_SHELL_ORDER.index(value))
    if name == "python_tool":
        if not isinstance(value, bool):
            raise ValueError(f"not True or False: {value!r:.40}")
        return float(value)
    if name == "memory_limit":
        from ..kernel.process import parse_memory

        if not isinstance(value, str):
            raise ValueError(f"not a size: {value!r:.40}")
        return float(parse_memory(value) or 0) if value.strip() else float("inf")
    if value is None and name == "request_max_tokens":
        return float("inf")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"not a number >= 0: {value!r:.40}")
    if name == "max_steps":
        return float(value)
    return float(value) or float("inf")  # 0: no limit


def tightened(transcript: Transcript, names: Sequence[str],
              current: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The recorded values of the limits ``names`` that are tighter than ``current`` (the
    user's), and one line naming each looser one, which is ignored (None: none was)."""
    where = transcript.path or "the transcript"
    apply: dict[str, Any] = {}
    ignored: list[str] = []
    for name in names:
        value = transcript.settings[name]
        try:
            loose = _limit(name, value)
        except ValueError as exc:
            raise TranscriptError(f"{where}: metadata.ipyagent.settings.{name} is damaged "
                                  f"({exc}); pass {name}=... to override it") from None
        try:
            mine = _limit(name, current[name])
        except ValueError:  # the user's own value is theirs to keep, whatever it is
            mine = float("-inf")
        if loose < mine:
            apply[name] = value
        elif loose > mine:
            why = "no limit" if loose == float("inf") else f"looser than your {current[name]!r}"
            ignored.append(f"{name}={value!r} ({why})")
    line = (f"ignored from {where}: {', '.join(ignored)} — a transcript can tighten a limit, "
            "never loosen it; pass the setting to choose it") if ignored else None
    return apply, line


def build_agent(cls: type[Agent], transcript: Transcript, kwargs: dict[str, Any],
                recorded: list[str]) -> Agent:
    """``cls(**kwargs)``; a bad value of a ``recorded`` setting (taken from the file, maybe
    hand-edited) is one line naming the file and the setting, not a traitlets traceback."""
    try:
        return cls(**kwargs)
    except (TraitError, IpyagentError) as exc:
        bad = next((k for k in recorded if re.search(rf"\b{k}\b", str(exc))), None)
        if bad is None:
            raise
        raise TranscriptError(f"{transcript.path or 'transcript'}: metadata.ipyagent.settings."
                              f"{bad} is damaged ({_first_line(exc)}); pass {bad}=... to "
                              "override it") from None


def _loopback(url: str) -> bool:
    from urllib.parse import urlsplit

    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def restored_endpoint(transcript: Transcript) -> dict[str, Any]:
    """``{"base_url": ...}`` when the recorded endpoint is on this machine, else ``{}``."""
    url = str(transcript.settings.get("base_url") or "")
    return {"base_url": url} if url and _loopback(url) else {}


def _where(model: str, provider: Any, url: str) -> str:
    if model == "demo":  # it calls no endpoint, whatever base_url says
        return "the demo model (built in, offline)"
    return model + (f" ({provider})" if provider else "") + (f" at {url}" if url else "")


def endpoint_note(agent: Agent, transcript: Transcript) -> str | None:
    """One line when ``agent`` goes on with another model or endpoint than the run used."""
    recorded = transcript.settings
    model = str(recorded.get("model") or "")
    if not model or "client" in recorded:  # an unknown or injected client: nothing to compare
        return None
    url = str(recorded.get("base_url") or "")
    was = _where(model, recorded.get("provider"), url)
    now = _where(agent.model, agent.provider, agent.base_url or "")
    if was == now:
        return None
    how = ""
    remote = bool(url) and url != (agent.base_url or "") and not _loopback(url)
    if agent.model == "demo" and model != "demo":  # a base_url alone would change nothing
        how = (f"; pass model={model!r}" + (f", base_url={url!r}" if remote else "")
               + " to go on with it" + (" (an endpoint off this machine is never taken "
                                        "from a file)" if remote else ""))
    elif remote:
        how = (f"; pass base_url={url!r} to go on there (an endpoint off this machine is "
               "never taken from a file)")
    return f"this conversation ran with {was}; it goes on with {now}{how}"
