"""The kernel says "busy" for as long as an ``%agent`` cell runs.

JupyterLab's status bar (and its kernel indicator) shows the last ``status`` message the
kernel sent, whatever it answered. While an agent cell awaits, a control-channel request
ends with its own ``idle``: JupyterLab's widget manager asks for a subshell
(``create_subshell_request``) when the run's first widget appears, so the status bar said
Idle for the rest of the run while the cell was still ``[*]`` (issue 30). Each such
``idle`` is followed by a ``busy`` for the running cell's request, which is true.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

__all__ = ["busy_while_running"]


@contextlib.contextmanager
def busy_while_running(kernel: Any) -> Iterator[None]:
    """Within the block, an ``idle`` the kernel says for another channel's request is
    followed at once by ``busy`` for the cell that runs now (the shell's parent)."""
    publish = getattr(kernel, "_publish_status", None)
    get_parent = getattr(kernel, "get_parent", None)
    if publish is None or get_parent is None or "_publish_status" in vars(kernel):
        yield  # not an ipykernel we know, or someone else's wrapper is in place: leave it
        return
    cell = get_parent("shell")
    running = _msg_id(cell)

    def status(state: str, channel: str, parent: Any = None) -> None:
        publish(state, channel, parent)
        # Another request's idle (a control request; a subshell's on the shell channel):
        # this cell still runs.
        if state == "idle" and running and _msg_id(parent or get_parent(channel)) != running:
            publish("busy", "shell", cell)

    kernel._publish_status = status
    try:
        yield
    finally:
        with contextlib.suppress(AttributeError):
            del kernel._publish_status  # the class's own method again


def _msg_id(message: Any) -> Any:
    header = message.get("header") if isinstance(message, dict) else None
    return header.get("msg_id") if isinstance(header, dict) else None
