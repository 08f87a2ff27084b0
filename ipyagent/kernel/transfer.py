"""Moving values between the user's kernel and the sibling over ``user_expressions``.

Into the sibling (``push``): the user's own values, pickled (cloudpickle when installed, so
functions, lambdas and ``__main__`` classes travel by value); they are unpickled there, on
the model's side of the boundary, where a pickle can do nothing the model's code could not.

Back (``pull``): never a pickle. The sibling encodes the value as data
(``trust.encode``: builtins, dates, ``.npy`` arrays, Arrow or column frames, PNG) and this
side decodes it with ``trust.values``, whose code cannot run code; what cannot be said as
data is refused there with a sentence saying what to ask for instead.

Why ``user_expressions`` and not a code cell: they are evaluated with a plain ``eval`` in
the sibling's namespace, so a 100 MB base64 payload skips IPython's input transformers,
the history and the execution counter, and the reply carries the result back with no
output message at all.
"""

from __future__ import annotations

import ast
import base64
import binascii
import pickle
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from .._util import eventloop as _eventloop
from ..errors import KernelError
from ..trust.encode import _source as encode_source
from ..trust.values import Undecodable, accepted, decode

if TYPE_CHECKING:
    from .outputs import Execution

__all__ = ["Evaluate", "serialize", "push", "push_payload", "pull", "pull_payload", "Transfers"]

# Protocol 4 reads on every Python since 3.4, so a kernelspec on another Python still works.
PROTOCOL = 4

# Runs inside the sibling (in a throwaway namespace) to encode one variable as data.
_PULL_SOURCE = encode_source()

_ERRORS: dict[str, type[Exception]] = {"NameError": NameError, "TypeError": TypeError, "ValueError": ValueError}

# Evaluated in the kernel after a failed cell: the span of the deepest frame of that cell's
# own code in ``sys.last_traceback`` (IPython sets it), the cell being the frame that
# IPython's ``run_code`` executed.
_ERROR_SPAN = (
    "(lambda fs: (lambda cell: [(s.lineno, s.end_lineno, s.colno, s.end_colno) for s in fs"
    " if cell is not None and s.filename == cell][-1:])"
    "(next((fs[i + 1].filename for i, s in enumerate(fs[:-1]) if s.name == 'run_code'), None)))"
    "(__import__('traceback').extract_tb(__import__('sys').last_traceback))")


def _dumps() -> Callable[..., bytes]:
    try:
        import cloudpickle  # type: ignore[import-not-found]

        return cloudpickle.dumps  # type: ignore[no-any-return]
    except ImportError:
        return pickle.dumps


def serialize(values: dict[str, Any], limit: int) -> str:
    """Base64 pickle of ``values``; TypeError names an unpicklable one, ValueError an oversize."""
    for name in values:
        if not name.isidentifier():
            raise ValueError(f"cannot push {name!r}: not a valid Python name")
    dumps = _dumps()
    try:
        data = dumps(values, protocol=PROTOCOL)
    except Exception:
        for name, value in values.items():  # find which one, for a message that names it
            try:
                dumps(value, protocol=PROTOCOL)
            except Exception as exc:
                raise TypeError(
                    f"cannot push {name!r}: {type(value).__name__} object is not picklable "
                    f"({type(exc).__name__}: {exc})"
                ) from exc
        raise
    if len(data) > limit:
        raise ValueError(
            f"cannot push {', '.join(map(repr, values))}: {len(data)} bytes pickled, "
            f"over max_transfer_bytes={limit}"
        )
    return base64.b64encode(data).decode("ascii")


Evaluate = Callable[[str, str], Awaitable[dict[str, Any]]]
"""``(expression, what) -> user_expressions result`` in the sibling (``what`` names it in errors)."""


async def push(evaluate: Evaluate, values: dict[str, Any], limit: int) -> None:
    """Copy ``values`` into the sibling's namespace by name."""
    if not values:
        return
    await push_payload(evaluate, serialize(values, limit), list(values))


async def push_payload(evaluate: Evaluate, payload: str, names: list[str]) -> None:
    """Unpickle ``payload`` (``serialize``'s base64 of a ``{name: value}`` dict) in the sibling."""
    expr = ("globals().update(__import__('pickle').loads("
            f"__import__('base64').b64decode({payload!r})))")
    result = await evaluate(expr, "push")
    if result.get("status") != "ok":
        shown = ", ".join(map(repr, names))
        raise TypeError(
            f"the sibling kernel could not unpickle {shown}: "
            f"{result.get('ename')}: {result.get('evalue')}"
        )


async def pull(evaluate: Evaluate, name: str, limit: int) -> Any:
    """A copy of the sibling's variable ``name``, decoded as data (never unpickled)."""
    data = await pull_payload(evaluate, name, limit)
    try:
        return decode(data)
    except Undecodable as exc:
        raise TypeError(f"cannot copy {name!r}: what the agent's kernel sent is not a value "
                        f"this side reads ({exc})") from None


async def pull_payload(evaluate: Evaluate, name: str, limit: int) -> bytes:
    """The sibling's variable ``name`` encoded as data there (``trust.encode``), not yet
    decoded here: what an offer holds until the person answers. Untrusted bytes."""
    if not name.isidentifier():
        raise ValueError(f"cannot pull {name!r}: not a valid Python name")
    expr = (
        f"(lambda ns: (exec({_PULL_SOURCE!r}, ns), "
        f"ns['pull_answer'](globals(), {name!r}, {limit}, {accepted()!r}))[1])({{}})"
    )
    result = await evaluate(expr, f"pull({name!r})")
    if result.get("status") != "ok":
        raise KernelError(f"pull({name!r}) failed: {result.get('ename')}: {result.get('evalue')}")
    # The answer is the kernel's (a remote server's, or code that replaced pull_answer):
    # read it as untrusted, so a malformed one is one KernelError, not whatever unpacking raised.
    try:
        status, body = ast.literal_eval(result["data"]["text/plain"])
        if not isinstance(status, str) or not isinstance(body, str):
            raise TypeError(type(body).__name__)
        data = base64.b64decode(body, validate=True) if status == "ok" else b""
    except (KeyError, TypeError, ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        why = "not base64" if isinstance(exc, binascii.Error) else type(exc).__name__
        raise KernelError(f"pull({name!r}) failed: the kernel's answer could not be read ({why})") from None
    if status != "ok":
        raise _ERRORS.get(status, KernelError)(body)
    if len(data) > limit:
        raise ValueError(f"cannot copy {name!r}: {len(data)} bytes, over max_transfer_bytes={limit}")
    return data


_PLAIN_MODULES = ('builtins', 'datetime', 'decimal', 'fractions')


class Transfers:
    """``push``/``pull`` (and their async and payload forms) for a kernel class: one
    implementation for the local sibling and the remote kernel, over their ``_run``."""

    timeout: float | None
    max_transfer_bytes: int
    _kernel_word = "the kernel"  # for errors: "push failed in the sibling kernel: …"

    async def _run(self, code: str, timeout: float | None, *, silent: bool = False,
                   user_expressions: dict[str, str] | None = None,
                   on_stream: Callable[[str, str], None] | None = None) -> tuple[Execution, dict[str, Any]]:
        raise NotImplementedError

    def push(self, **values: Any) -> None:
        """Copy values into the kernel's namespace by name: ``k.push(df=df)``."""
        _eventloop.run_sync(self.push_async(**values))

    async def push_async(self, **values: Any) -> None:
        """Async form of ``push``."""
        await _eventloop.run_async(push(self._evaluate, values, self.max_transfer_bytes))

    async def push_payload_async(self, payload: str, names: list[str]) -> None:
        """Unpickle ``payload`` (``serialize``'s base64 of ``{name: value}``) there."""
        await _eventloop.run_async(push_payload(self._evaluate, payload, names))

    def pull(self, name: str) -> Any:
        """A copy of the kernel's variable ``name``, decoded as data (never unpickled)."""
        return _eventloop.run_sync(self.pull_async(name))

    async def pull_async(self, name: str) -> Any:
        """Async form of ``pull``."""
        return await _eventloop.run_async(pull(self._evaluate, name, self.max_transfer_bytes))

    async def pull_payload_async(self, name: str) -> bytes:
        """The kernel's ``name`` encoded as data there, not yet decoded here (untrusted bytes)."""
        return await _eventloop.run_async(pull_payload(self._evaluate, name, self.max_transfer_bytes))

    async def short_repr_async(self, name: str, limit: int = 200, plain: bool = False,
                               timeout: float | None = None) -> str | None:
        """``reprlib.repr`` of the kernel's variable ``name``, made there (bounded however
        large the value); None when there is no such name or it cannot be shown. Untrusted
        text: the object's own ``__repr__`` wrote it.

        ``plain``: only a value of Python's own types (and ``datetime``, ``decimal``,
        ``fractions``, a numpy scalar): a table's or an array's repr, cut short, is no value.
        ``timeout``: seconds for this evaluation (default: the kernel's ``timeout``)."""
        if not name.isidentifier():
            return None
        shown = f"__import__('reprlib').repr({name})"
        if plain:
            shown = (f"(lambda v: __import__('reprlib').repr(v) if type(v).__module__ in "
                     f"{_PLAIN_MODULES!r} or (type(v).__module__ == 'numpy' and "
                     f"getattr(v, 'ndim', 1) == 0) else None)({name})")
        try:
            text = _plain_text(await self._evaluate(shown, "a short repr", timeout))
            value = ast.literal_eval(text) if isinstance(text, str) and len(text) <= 4 * limit else None
        except Exception:  # the sandboxed code shapes the kernel's answer: any of it may be off
            return None
        return value if isinstance(value, str) and len(value) <= limit else None

    async def error_span_async(self, timeout: float | None = None) -> tuple[int, int, int, int] | None:
        """Where the last cell's error was raised: ``(line, end_line, col, end_col)`` of the
        failing expression in that cell (lines from 1, columns UTF-8 byte offsets, as
        Python's own traceback carets use them), from the deepest frame of the cell's own
        code; None when it cannot be told. Numbers only cross: the caller quotes its own
        copy of the code, so nothing the sandboxed code set reaches the model as text."""
        try:
            text = _plain_text(await self._evaluate(_ERROR_SPAN, "the error's place", timeout))
            spans = ast.literal_eval(text) if isinstance(text, str) and len(text) <= 200 else None
        except Exception:  # the sandboxed code shapes the kernel's answer: any of it may be off
            return None
        if not (isinstance(spans, list) and len(spans) == 1 and isinstance(spans[0], tuple)
                and len(spans[0]) == 4 and all(type(n) is int and 0 <= n < 1_000_000 for n in spans[0])):
            return None
        line, end_line, col, end_col = spans[0]
        return line, end_line, col, end_col

    async def _evaluate(self, expr: str, what: str, timeout: float | None = None) -> dict[str, Any]:
        """One silent ``user_expressions`` evaluation (``Evaluate``); ``timeout`` seconds, or
        the kernel's ``timeout``."""
        execution, reply = await self._run("", self.timeout if timeout is None else timeout,
                                           silent=True, user_expressions={"x": expr})
        expressions = reply.get("user_expressions")
        result = expressions.get("x") if isinstance(expressions, dict) else None
        if execution.status != "ok" or not isinstance(result, dict):
            why = execution.text or ("its answer held no result" if execution.status == "ok" else execution.status)
            raise KernelError(f"{what} failed in {self._kernel_word}: {why}")
        return result


def _plain_text(result: Any) -> str | None:
    """The ``text/plain`` of an evaluation's result, if it has one of the right types."""
    data = result.get("data") if isinstance(result, dict) else None
    text = data.get("text/plain") if isinstance(data, dict) else None
    return text if isinstance(text, str) else None
