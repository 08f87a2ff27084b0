"""A minimal Jupyter frontend over jupyter_client: runs cells, renders outputs, clicks widgets.

It speaks to a real ipykernel exactly as JupyterLab does: ``execute_request`` on shell;
outputs collected from iopub by their parent ``msg_id`` (so an output sent with the wrong
parent header is *not* shown, as in a real frontend); display-id updates applied in place;
widget models built from ``comm_open``/``comm_msg`` and clicked with the ``custom``
``{"event": "click"}`` message the ipywidgets frontend sends, values set with ``update``;
the Edit box answers ``submit`` with its text, as ``editor.js`` does.
"""

from __future__ import annotations

import os
import queue
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from jupyter_client import KernelManager

__all__ = ["Frontend", "Cell"]


@dataclass
class Cell:
    """One executed cell, as a frontend would show it."""

    msg_id: str
    outputs: list[dict[str, Any]] = field(default_factory=list)
    reply: dict[str, Any] | None = None
    idle: bool = False
    updates: int = 0  # update_display_data messages received

    @property
    def done(self) -> bool:
        return self.idle and self.reply is not None

    def text(self) -> str:
        """Every output's text (stream text, text/plain, text/markdown), joined."""
        parts = []
        for out in self.outputs:
            if out["output_type"] == "stream":
                parts.append(out["text"])
            elif out["output_type"] == "error":
                parts.append("\n".join(out["traceback"]))
            else:
                data = out.get("data", {})
                parts.append(data.get("text/markdown") or data.get("text/plain", ""))
        return "\n".join(parts)

    def mimetypes(self) -> set[str]:
        return {m for out in self.outputs for m in out.get("data", {})}


class Frontend:
    """A kernel plus the state a frontend keeps about it."""

    def __init__(self, cwd: str, env: dict[str, str] | None = None) -> None:
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=cwd, env={**os.environ, **(env or {})})
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.cells: dict[str, Cell] = {}
        self.widgets: dict[str, dict[str, Any]] = {}  # comm_id -> state
        self.stray: list[dict[str, Any]] = []  # outputs whose parent is no cell of ours
        self.sent: set[str] = set()  # msg_ids of comm messages we sent
        self.statuses: list[tuple[str, str | None]] = []  # (state, parent msg_id), as said

    # -- cells ---------------------------------------------------------------------
    def execute(self, code: str, allow_stdin: bool = True) -> Cell:
        """Send a cell; returns at once (``wait`` or ``pump_until`` to follow it)."""
        msg_id = self.kc.execute(code, allow_stdin=allow_stdin, stop_on_error=False)
        cell = Cell(msg_id)
        self.cells[msg_id] = cell
        return cell

    def run(self, code: str, timeout: float = 60, allow_stdin: bool = True) -> Cell:
        cell = self.execute(code, allow_stdin=allow_stdin)
        self.pump_until(lambda: cell.done, timeout)
        return cell

    def pump_until(self, cond: Callable[[], bool], timeout: float = 60) -> None:
        """Process kernel messages until ``cond()`` holds; fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise TimeoutError(f"frontend: condition not met within {timeout}s")
            self._poll(min(0.1, max(0.01, deadline - time.monotonic())))

    def pump_for(self, seconds: float) -> None:
        """Process messages for a while (to show that something does *not* happen)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self._poll(0.05)

    def _poll(self, timeout: float) -> None:
        try:
            msg = self.kc.get_iopub_msg(timeout=timeout)
        except queue.Empty:
            msg = None
        if msg is not None:
            self._iopub(msg)
        while True:
            try:
                reply = self.kc.get_shell_msg(timeout=0)
            except queue.Empty:
                break
            cell = self.cells.get(reply["parent_header"].get("msg_id"))
            if cell is not None and reply["msg_type"] == "execute_reply":
                cell.reply = reply["content"]

    def _iopub(self, msg: dict[str, Any]) -> None:
        kind, content = msg["msg_type"], msg["content"]
        parent = msg["parent_header"].get("msg_id")
        cell = self.cells.get(parent)
        if kind == "comm_open" and content.get("target_name") == "jupyter.widget":
            self.widgets[content["comm_id"]] = dict(content["data"]["state"])
            return
        if kind == "comm_msg" and content["comm_id"] in self.widgets:
            data = content["data"]
            if data.get("method") in ("update", "echo_update"):
                self.widgets[content["comm_id"]].update(data.get("state", {}))
            elif data.get("method") == "custom" and (data.get("content") or {}).get("event") == "submit":
                # The Edit box in the page (frontends/static/editor.js) answers "submit" with
                # a run message that carries its text.
                value = self.widgets[content["comm_id"]].get("value", "")
                self._comm(content["comm_id"], {"method": "custom",
                                                "content": {"event": "run", "value": value}})
            return
        if kind == "status":  # what a frontend's kernel indicator shows: the last one
            self.statuses.append((content["execution_state"], parent))
        if kind == "status" and cell is not None and content["execution_state"] == "idle":
            cell.idle = True
            return
        if kind not in ("stream", "display_data", "execute_result", "error",
                        "update_display_data", "clear_output"):
            return
        if kind == "update_display_data":
            # A real frontend updates every output with this display_id, in any cell.
            display_id = content.get("transient", {}).get("display_id")
            for other in self.cells.values():
                for out in other.outputs:
                    if out.get("display_id") == display_id:
                        out["data"], out["metadata"] = content["data"], content["metadata"]
            if cell is not None:
                cell.updates += 1
            return
        if cell is None:
            self.stray.append(msg)
            return
        if kind == "clear_output":
            cell.outputs.clear()
            return
        out = {"output_type": kind, **content}
        if kind == "stream" and cell.outputs and cell.outputs[-1]["output_type"] == "stream" \
                and cell.outputs[-1]["name"] == content["name"]:
            cell.outputs[-1]["text"] += content["text"]
            return
        out["display_id"] = content.get("transient", {}).get("display_id")
        cell.outputs.append(out)

    # -- widgets -------------------------------------------------------------------
    def buttons(self, description: str, enabled: bool = True) -> list[str]:
        """Comm ids of the button widgets with this label, oldest first."""
        return [cid for cid, s in self.widgets.items()
                if s.get("_model_name") == "ButtonModel" and s.get("description") == description
                and (not enabled or not s.get("disabled"))]

    def wait_for_button(self, description: str, timeout: float = 60) -> str:
        self.pump_until(lambda: bool(self.buttons(description)), timeout)
        return self.buttons(description)[-1]

    def panels(self) -> list[dict[str, Any]]:
        """The approval panels (their box is opened after all of their controls)."""
        return [s for s in self.widgets.values() if s.get("_model_name") == "VBoxModel"]

    def wait_for_panel(self, timeout: float = 60) -> dict[str, Any]:
        """Wait for a panel with an enabled Approve button; its controls are all open then."""
        def ready() -> bool:
            live = set(self.buttons("Approve"))
            return any(live & set(self._descendants(p)) for p in self.panels())

        self.pump_until(ready, timeout)
        return self.panels()[-1]

    def _descendants(self, state: dict[str, Any]) -> list[str]:
        out = []
        for ref in state.get("children", []):
            cid = ref.removeprefix("IPY_MODEL_")
            out.append(cid)
            out.extend(self._descendants(self.widgets.get(cid, {})))
        return out

    def widget_of(self, model: str, after: str | None = None) -> str:
        """The newest widget of a model type (``TextModel``, ``TextareaModel``…)."""
        ids = [cid for cid, s in self.widgets.items() if s.get("_model_name") == model]
        return ids[-1]

    def _comm(self, comm_id: str, data: dict[str, Any]) -> None:
        msg = self.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
        self.sent.add(msg["header"]["msg_id"])
        self.kc.shell_channel.send(msg)

    def click(self, comm_id: str) -> None:
        """What the ipywidgets frontend sends when a Button is clicked."""
        self._comm(comm_id, {"method": "custom", "content": {"event": "click"}})

    def set_value(self, comm_id: str, value: Any) -> None:
        """What the frontend sends when the user types into a Text/Textarea."""
        self._comm(comm_id, {"method": "update", "state": {"value": value}, "buffer_paths": []})
        self.widgets[comm_id]["value"] = value

    # -- lifecycle -----------------------------------------------------------------
    def interrupt(self) -> None:
        self.km.interrupt_kernel()

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)
