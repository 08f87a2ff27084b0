"""Tools: ``@tool`` turns a function into a JSON-schema'd tool; ``Toolbox`` runs them.

Everything that can go wrong with a call the *model* made — an unknown tool, arguments
that are not JSON or do not fit the schema, a tool that raises — becomes a
``ToolResult(error=True)`` that is fed back, so the model can correct itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import re
import threading
import traceback
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterator, Union

from .._util.text import one_line
from ..context.items import NO_OUTPUT, ToolCall, ToolResult
from ..trust.untrusted import fence, inline_code, markdown_text

__all__ = ["Tool", "tool", "Toolbox", "Executor", "in_daemon_thread"]

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}


@dataclass
class Tool:
    """A named function the model may call."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any] | None = None
    # Raw handlers get the ToolCall itself and return a ToolResult (the python tool).
    handler: Callable[[ToolCall], Awaitable[ToolResult]] | None = field(default=None, repr=False)
    # What the call would do, shown where it is approved (a diff for file edits), or None.
    preview: Callable[[ToolCall], str | None] | None = field(default=None, repr=False)
    # Seconds a call of ``fn`` may take (read at each call; 0 or None: no limit). A raw
    # handler keeps its own limit (the python tool interrupts its kernel).
    timeout: Callable[[], float | None] | None = field(default=None, repr=False)
    # Offered to the model only while this says True (None: always): a tool that needs a
    # frontend (``offer_result``) is not offered where nobody could answer it.
    available: Callable[[], bool] | None = field(default=None, repr=False)
    # Its run is a question to the person (``offer_result``): that question is the approval,
    # so the policy does not ask first ("deny" still refuses it).
    asks_user: bool = False

    def offered(self) -> bool:
        """True unless ``available`` says this tool cannot work here now."""
        if self.available is None:
            return True
        try:
            return bool(self.available())
        except Exception:  # a broken check must not break the request: not offered
            return False

    def spec(self) -> dict[str, Any]:
        """The function spec sent to the model."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.fn is None:
            raise TypeError(f"tool {self.name!r} is not a plain function")
        return self.fn(*args, **kwargs)

    def _repr_markdown_(self) -> str:
        params = json.dumps(self.parameters.get("properties", {}), indent=1)
        # An MCP server's tool names and descriptions are untrusted text.
        return (f"**tool** {inline_code(self.name)} — {markdown_text(self.description)}\n\n"
                f"{fence(params, 'json')}")


@typing.overload
def tool(fn: Callable[..., Any], *, name: str | None = None,
         description: str | None = None) -> Tool: ...
@typing.overload
def tool(fn: None = None, *, name: str | None = None,
         description: str | None = None) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None,
         description: str | None = None) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator: build a ``Tool`` from a function's signature and docstring."""

    def wrap(f: Callable[..., Any]) -> Tool:
        doc = inspect.getdoc(f) or ""
        summary, arg_docs = _parse_docstring(doc)
        return Tool(
            name=name or f.__name__,
            description=description or summary or f.__name__,
            parameters=_schema_from_signature(f, arg_docs),
            fn=f,
        )

    return wrap(fn) if fn is not None else wrap


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary text plus per-argument descriptions (Google, NumPy or ``:param:`` style)."""
    args: dict[str, str] = {}
    summary_lines: list[str] = []
    section = None
    for line in doc.splitlines():
        stripped = line.strip()
        if re.fullmatch(r"(Args|Arguments|Parameters|Params):?", stripped):
            section = "args"
            continue
        if re.fullmatch(r"(Returns?|Raises|Yields|Examples?|Notes?):?", stripped):
            section = "other"
            continue
        if set(stripped) <= {"-"} and stripped:
            continue  # NumPy underline
        m = re.match(r":param\s+(\w+):\s*(.*)", stripped)
        if m:
            args[m.group(1)] = m.group(2)
            continue
        if section == "args":
            m = re.match(r"(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)", stripped)
            if m:
                args[m.group(1)] = m.group(2)
        elif section is None:
            summary_lines.append(stripped)
    return " ".join(s for s in summary_lines if s).strip(), args


def _json_type(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _json_type(options[0]) if len(options) == 1 else {}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(annotation))}
    if origin in (list, tuple, set):
        item_args = typing.get_args(annotation)
        schema: dict[str, Any] = {"type": "array"}
        if item_args and origin is list:
            schema["items"] = _json_type(item_args[0])
        return schema
    if origin is dict:
        return {"type": "object"}
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    return {}


def _schema_from_signature(f: Callable[..., Any], arg_docs: dict[str, str]) -> dict[str, Any]:
    try:
        hints = typing.get_type_hints(f)
    except Exception:  # unresolvable forward references: fall back to raw annotations
        hints = {}
    props: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in inspect.signature(f).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema = _json_type(hints.get(pname, param.annotation))
        if pname in arg_docs:
            schema["description"] = arg_docs[pname]
        if param.default is inspect.Parameter.empty:
            required.append(pname)
        elif isinstance(param.default, (str, int, float, bool)) or param.default is None:
            schema["default"] = param.default
        props[pname] = schema
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}


def validate_arguments(arguments: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """A short reason the arguments do not fit ``schema`` (a useful subset), or None."""
    props: dict[str, Any] = schema.get("properties", {})
    missing = [r for r in schema.get("required", []) if r not in arguments]
    if missing:
        return f"missing required argument(s): {', '.join(missing)}"
    if schema.get("additionalProperties") is False:
        unknown = [k for k in arguments if k not in props]
        if unknown:
            return f"unknown argument(s): {', '.join(unknown)}; expected: {', '.join(props)}"
    for key, value in arguments.items():
        expected = props.get(key, {}).get("type")
        if expected and not _fits(value, expected):
            return f"argument {key!r} should be {expected}, got {type(value).__name__}"
        enum = props.get(key, {}).get("enum")
        if enum and value not in enum:
            return f"argument {key!r} must be one of {enum}"
    return None


def _fits(value: Any, expected: str) -> bool:
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    pytype = {"string": str, "boolean": bool, "array": list, "object": dict}.get(expected)
    return pytype is None or isinstance(value, pytype)


@typing.runtime_checkable
class Executor(typing.Protocol):
    """The loop only knows this: run one call, get its result (a failure is a result too).

    ``ipyagent.engine.step`` calls it once per approved call; approval before it, and the secret
    redaction and the audit record around it, are the step's, so every executor gets them.
    """

    async def execute(self, call: ToolCall) -> ToolResult:
        """Run ``call``; never raises for a failure of the call itself."""
        ...


class Toolbox(Executor):
    """The tools on offer, by name; the ``Executor`` the loop calls (the python tool, the
    file tools, MCP servers' tools and user tools are all behind it)."""

    def __init__(self, tools: typing.Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add(t)

    def add(self, t: Tool | Callable[..., Any]) -> Tool:
        """Add a ``Tool`` (or a plain function, wrapped with ``@tool``); replaces by name."""
        if not isinstance(t, Tool):
            t = tool(t)
        self._tools[t.name] = t
        return t

    def remove(self, name: str) -> Tool:
        """Remove and return the tool called ``name``."""
        if name not in self._tools:
            raise KeyError(f"no tool called {name!r}; the tools are {', '.join(self._tools) or 'none'}")
        return self._tools.pop(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def preview(self, call: ToolCall) -> str | None:
        """The tool's preview of ``call`` (e.g. a diff), or None; never raises."""
        t = self._tools.get(call.name)
        if t is None or t.preview is None:
            return None
        try:
            return t.preview(call)
        except Exception as exc:  # a preview is a courtesy: it must not break approval
            return f"(no preview: {exc})"

    def specs(self) -> list[dict[str, Any]]:
        return [t.spec() for t in self._tools.values()]

    def __repr__(self) -> str:
        return f"<Toolbox: {', '.join(self._tools) or 'empty'}>"

    def _repr_markdown_(self) -> str:
        return "\n".join(f"- {inline_code(t.name)} — {markdown_text(one_line(t.description))}"
                         for t in self._tools.values())

    async def execute(self, call: ToolCall) -> ToolResult:
        """Run ``call``; every failure is a ``ToolResult(error=True)``."""
        t = self._tools.get(call.name)
        if t is None:
            return _error(call, f"unknown tool {call.name!r}; available tools: "
                                f"{', '.join(self._tools) or 'none'}")
        if call.raw_arguments is not None:
            return _error(call, f"the arguments were not valid JSON: {call.raw_arguments[:500]!r}. "
                                "Send a JSON object.")
        problem = validate_arguments(call.arguments, t.parameters)
        if problem:
            return _error(call, f"bad arguments for {call.name}: {problem}")
        limit = (t.timeout() if t.timeout is not None else None) or None
        try:
            if t.handler is not None:
                return await t.handler(call)
            assert t.fn is not None
            if inspect.iscoroutinefunction(t.fn):
                value = await _within(asyncio.ensure_future(t.fn(**call.arguments)), limit)
            else:
                # Plain functions run in a worker thread so a slow tool never stalls the loop.
                value = await _within(in_daemon_thread(t.fn, call.arguments), limit)
        except _TimedOut:
            return _error(call, f"{call.name} did not finish within {limit:g} s "
                                "(Agent.tool_timeout) and was abandoned; if it was a write, "
                                "it may still happen")
        except Exception as exc:  # the model's call failed: tell it, do not crash
            tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
            return _error(call, f"{call.name} raised {tb}")
        if isinstance(value, ToolResult):
            value.call_id, value.name = call.id, call.name
            return value
        return ToolResult(call_id=call.id, output=_to_text(value), name=call.name)


class _TimedOut(Exception):
    """A tool call ran past its time limit."""


async def _within(work: asyncio.Future[Any], limit: float | None) -> Any:
    """``work``'s result, or ``_TimedOut`` after ``limit`` seconds (``work`` is cancelled,
    which a thread ignores: it is left to finish on its own)."""
    try:
        done, _ = await asyncio.wait({work}, timeout=limit)
    except asyncio.CancelledError:  # the run was interrupted: so is the tool (if it can be)
        work.cancel()
        raise
    if not done:
        work.cancel()
        raise _TimedOut
    return work.result()


def in_daemon_thread(fn: Callable[..., Any], kwargs: dict[str, Any]) -> asyncio.Future[Any]:
    """``fn(**kwargs)`` in a new daemon thread, as a future of the running loop.

    Not ``asyncio.to_thread``: the default executor's threads are joined at interpreter
    exit, so one call blocked in a read (a FIFO, a dead network share) kept Python from
    exiting. A daemon thread is abandoned at exit instead.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(value: Any, exc: BaseException | None) -> None:
        if future.done():  # timed out or cancelled meanwhile
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(value)

    def work() -> None:
        value, exc = None, None
        try:
            value = context.run(fn, **kwargs)
        except Exception as e:  # noqa: BLE001 - handed to the awaiting task
            exc = e
        except BaseException as e:  # noqa: BLE001 - else the awaiting task would wait forever
            exc = RuntimeError(f"{type(e).__name__} in the tool's thread")
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
            loop.call_soon_threadsafe(settle, value, exc)

    threading.Thread(target=work, name=f"ipyagent-tool-{getattr(fn, '__name__', 'fn')}",
                     daemon=True).start()
    return future


def _error(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(call_id=call.id, output=f"Error: {message}", error=True, name=call.name)


def _to_text(value: Any) -> str:
    if value is None:
        return NO_OUTPUT
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)
