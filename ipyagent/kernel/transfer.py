"""Moving values between the user's kernel and the sibling: pickle over ``user_expressions``.

Why ``user_expressions`` and not a code cell: they are evaluated with a plain ``eval`` in
the sibling's namespace, so a 100 MB base64 payload skips IPython's input transformers,
the history and the execution counter, and the reply carries the result back with no
output message at all. cloudpickle is used when installed (functions, lambdas and
``__main__`` classes then travel by value); otherwise the standard pickle.
"""

from __future__ import annotations

import ast
import base64
import pickle
from typing import TYPE_CHECKING, Any, Callable

from .. import _eventloop
from ..errors import KernelError

if TYPE_CHECKING:
    from .outputs import Execution

__all__ = ["TransferMixin", "serialize"]

# Protocol 4 reads on every Python since 3.4, so a kernelspec on another Python still works.
PROTOCOL = 4

# Runs inside the sibling (in a throwaway namespace) to pickle one variable.
_PULL_SOURCE = '''
def _pull(g, name, limit):
    import base64, pickle
    try:
        import cloudpickle as p
    except ImportError:
        p = pickle
    if name not in g:
        return ("NameError", "name %r is not defined in the sibling kernel" % name)
    try:
        data = p.dumps(g[name], protocol=4)
    except Exception as e:
        return ("TypeError", "cannot pull %r: %s object is not picklable (%s: %s)"
                % (name, type(g[name]).__name__, type(e).__name__, e))
    if len(data) > limit:
        return ("ValueError", "cannot pull %r: %d bytes pickled, over max_transfer_bytes=%d"
                % (name, len(data), limit))
    return ("ok", base64.b64encode(data).decode("ascii"))
'''

_ERRORS: dict[str, type[Exception]] = {"NameError": NameError, "TypeError": TypeError, "ValueError": ValueError}


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


class TransferMixin:
    """``push``/``pull`` for SiblingKernel (which provides ``_run`` and ``max_transfer_bytes``)."""

    max_transfer_bytes: int
    timeout: float | None

    if TYPE_CHECKING:

        async def _run(
            self,
            code: str,
            timeout: float | None,
            *,
            silent: bool = False,
            user_expressions: dict[str, str] | None = None,
            on_stream: Callable[[str, str], None] | None = None,
        ) -> tuple[Execution, dict[str, Any]]: ...

    async def _expression(self, expr: str, what: str) -> dict[str, Any]:
        execution, reply = await self._run("", self.timeout, silent=True, user_expressions={"x": expr})
        result = (reply.get("user_expressions") or {}).get("x")
        if execution.status != "ok" or not isinstance(result, dict):
            raise KernelError(f"{what} failed in the sibling kernel: {execution.text or execution.status}")
        return result

    def push(self, **values: Any) -> None:
        """Copy values into the sibling's namespace by name: ``k.push(df=df)``."""
        _eventloop.run_sync(self.push_async(**values))

    async def push_async(self, **values: Any) -> None:
        """Async form of ``push``."""
        if not values:
            return
        await self.push_payload_async(serialize(values, self.max_transfer_bytes), list(values))

    async def push_payload_async(self, payload: str, names: list[str]) -> None:
        """Unpickle ``payload`` (``serialize``'s base64 of a ``{name: value}`` dict) in the sibling."""
        expr = (
            "globals().update(__import__('pickle').loads("
            f"__import__('base64').b64decode({payload!r})))"
        )
        result = await _eventloop.run_async(self._expression(expr, "push"))
        if result.get("status") != "ok":
            shown = ", ".join(map(repr, names))
            raise TypeError(
                f"the sibling kernel could not unpickle {shown}: "
                f"{result.get('ename')}: {result.get('evalue')}"
            )

    def pull(self, name: str) -> Any:
        """A copy of the sibling's variable ``name``."""
        return _eventloop.run_sync(self.pull_async(name))

    async def pull_async(self, name: str) -> Any:
        """Async form of ``pull``."""
        if not name.isidentifier():
            raise ValueError(f"cannot pull {name!r}: not a valid Python name")
        expr = (
            f"(lambda ns: (exec({_PULL_SOURCE!r}, ns), "
            f"ns['_pull'](globals(), {name!r}, {self.max_transfer_bytes}))[1])({{}})"
        )
        result = await _eventloop.run_async(self._expression(expr, f"pull({name!r})"))
        if result.get("status") != "ok":
            raise KernelError(f"pull({name!r}) failed: {result.get('ename')}: {result.get('evalue')}")
        kind, body = ast.literal_eval(result["data"]["text/plain"])
        if kind != "ok":
            raise _ERRORS.get(kind, KernelError)(body)
        try:
            return pickle.loads(base64.b64decode(body))
        except Exception as exc:
            raise TypeError(
                f"cannot pull {name!r}: it was pickled in the sibling but cannot be unpickled here "
                f"({type(exc).__name__}: {exc})"
            ) from exc
