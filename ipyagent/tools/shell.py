"""The built-in ``shell`` tool: ``bash -c COMMAND``, with COMMAND byte for byte the string
shown on the approval card.

With a local sibling the command is a fresh process per call (``kernel/command.py``): in
its own bubblewrap sandbox inside the sibling's staged workspace, network and limits, with
the sandbox's environment; never started by the python sibling's interpreter (whose
``subprocess`` the model's earlier code may have patched). Its exit code comes from the
process itself. With a remote kernel the kernel starts it: the command reaches it as
base64 of JSON inside a fixed piece of Python, so no text of the model's can change that
Python.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any, Protocol

from ..context.events import ToolOutput, live_emitter
from ..context.items import ToolCall, ToolResult
from ..errors import KernelError
from ..kernel.base import confinement, for_the_model
from ..kernel.command import CommandRun
from .base import Tool
from .changes import settle_changes

if TYPE_CHECKING:
    from ..kernel.base import Kernel

__all__ = ["shell_tool", "shell_description", "ShellHost", "shell_status", "RECORD_MIME"]

# The helper's record of how the command ended (its exit code): a display bundle of ours,
# taken out of the outputs. The command cannot forge it: its bytes only reach the streams.
RECORD_MIME = "application/vnd.ipyagent.shell+json"

DESCRIPTION = ("Run a shell command (bash -c) in the working directory, inside the same "
               "sandbox as the python tool, and return its output (stdout and stderr) and "
               "exit code. Nothing is read from stdin; each call is a fresh shell.")
REMOTE_DESCRIPTION = ("Run a shell command (bash -c) on the remote Jupyter server the python "
                      "tool's kernel runs on: started by that kernel, in its working directory, "
                      "as the server's account (not sandboxed by ipyagent). Returns its output "
                      "(stdout and stderr) and exit code. Nothing is read from stdin; each call "
                      "is a fresh shell.")

# Runs in the sibling kernel (standard library only: the sibling may not have ipyagent).
_HELPER = r'''
import base64, codecs, json, os, selectors, shutil, signal, subprocess, sys, time

def _kill(proc):
    """The command's whole process group: SIGTERM, a second's grace, then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass

def _main(request):
    shell = shutil.which("bash") or "/bin/sh"
    record = {"exit_code": None, "shell": shell, "killed": None}
    proc = None
    try:
        proc = subprocess.Popen([shell, "-c", request["command"]], cwd=request["cwd"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        outs = {proc.stdout.fileno(): (sys.stdout, codecs.getincrementaldecoder("utf-8")("replace")),
                proc.stderr.fileno(): (sys.stderr, codecs.getincrementaldecoder("utf-8")("replace"))}
        sel = selectors.DefaultSelector()
        for fd in outs:
            sel.register(fd, selectors.EVENT_READ)
        drain_until = None
        while sel.get_map():
            for key, _ in sel.select(timeout=0.1):
                chunk = os.read(key.fd, 65536)
                out, decoder = outs[key.fd]
                text = decoder.decode(chunk, final=not chunk)
                if text:
                    out.write(text)
                if not chunk:
                    sel.unregister(key.fd)
            if drain_until is None and proc.poll() is not None:
                # The shell ended: what it left running in the background goes with it.
                _kill(proc)
                drain_until = time.monotonic() + 1.0
            if drain_until is not None and time.monotonic() > drain_until:
                break  # a writer that left the group (setsid) keeps the pipe: stop reading
        record["exit_code"] = proc.wait()
    except BaseException as exc:  # KeyboardInterrupt: the timeout or a stop; kill, then report
        if proc is not None:
            _kill(proc)
            record["exit_code"] = proc.returncode
            record["killed"] = type(exc).__name__
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        from IPython.display import publish_display_data
        publish_display_data({MIME: record})

_main(json.loads(base64.b64decode(REQUEST)))
'''


def helper_code(command: str, cwd: str | None) -> str:
    """The one line of Python the sibling runs for ``command``: user text only as base64."""
    request = base64.b64encode(json.dumps({"command": command, "cwd": cwd}).encode()).decode()
    helper = base64.b64encode(_HELPER.encode()).decode()
    return (f"exec(__import__('base64').b64decode('{helper}').decode(), "
            f"{{'__name__': '__ipyagent_shell__', 'MIME': '{RECORD_MIME}', 'REQUEST': '{request}'}})")


UNSANDBOXED_DESCRIPTION = ("Run a shell command (bash -c) in the working directory, started by "
                           "the python tool's kernel (not sandboxed: as the user's account), "
                           "and return its output (stdout and stderr) and exit code. Nothing is "
                           "read from stdin; each call is a fresh shell.")


def shell_description(remote: bool, sandboxed: bool = True) -> str:
    """The tool's description: where the command runs (the sibling's sandbox, the sibling
    without one, or the server): a model is never told of a sandbox that is not there."""
    if remote:
        return REMOTE_DESCRIPTION
    return DESCRIPTION if sandboxed else UNSANDBOXED_DESCRIPTION


class ShellHost(Protocol):
    """What the shell tool needs of its agent: the kernel and its settings, read per call."""

    @property
    def kernel(self) -> Kernel: ...
    tool_timeout: float
    shell_tool: str


def shell_status(setting: str, sandboxed: bool, why: str = "", remote: bool = False) -> tuple[bool, str]:
    """(offered, one line saying so and why) for ``Agent.shell_tool`` and the sandbox."""
    if setting == "off":
        return False, "shell tool: off (Agent.shell_tool = 'off')"
    if remote and setting == "on":
        return True, ("shell tool: on, run by the remote kernel (Agent.shell_tool = 'on'): "
                      "commands run on the server, as its account, not sandboxed by ipyagent")
    if remote:
        return False, f"shell tool: off ({why}); Agent.shell_tool = 'on' runs them on the server"
    if sandboxed:
        return True, (f"shell tool: on (Agent.shell_tool = {setting!r}; commands run in the "
                      "sibling's bubblewrap sandbox)")
    if setting == "on":
        return True, ("shell tool: on but NOT sandboxed (Agent.shell_tool = 'on'): commands "
                      "run as your account, in the sibling kernel's directory")
    if why.startswith("no sibling kernel"):
        return False, f"shell tool: off ({why}; Agent.shell_tool = 'on' offers it anyway)"
    return False, (f"shell tool: off (the sibling is not sandboxed{': ' + why if why else ''}); "
                   "set Agent.shell_tool = 'on' to offer it anyway")


def shell_tool(agent: ShellHost) -> Tool:
    """The ``shell`` tool bound to ``agent`` (its sibling kernel, its ``tool_timeout``)."""

    async def run_shell(call: ToolCall) -> ToolResult:
        command = str(call.arguments["command"])
        kernel = agent.kernel
        if agent.shell_tool == "auto" and not kernel.sandboxed:  # the sandbox went since
            return ToolResult(call.id, "Error: the shell tool is offered only where the sibling "
                              "is sandboxed (Agent.shell_tool = 'auto'), and it is not now",
                              error=True, name=call.name, meta={"status": "not run"})
        emit = live_emitter.get()
        on_stream = (lambda name, text: emit(ToolOutput(call, name, text))) if emit else None
        limit = kernel.timeout = agent.tool_timeout or None  # read per call; 0: no limit
        run_command = getattr(kernel, "run_command_async", None)
        if run_command is not None:
            # A local sibling: a fresh process per command, in its own sandbox inside the
            # staged workspace; never through the python sibling's interpreter (an earlier
            # python call could have patched subprocess there).
            run = await run_command(command, timeout=limit, on_stream=on_stream)
            result = command_result(call, run, limit, kernel.max_model_chars)
        else:
            try:
                execution = await kernel.execute_async(helper_code(command, kernel.cwd),
                                                       on_stream=on_stream)
            except KernelError as exc:  # e.g. a remote server that went away: no URL for the model
                raise KernelError(for_the_model(kernel, str(exc))) from None
            result = shell_result(call, execution, limit, kernel.max_model_chars)
        result.meta["sandbox"] = confinement(kernel)  # where it ran, for the transcript
        await settle_changes(agent, result)  # the staged workspace: what reaches your folder
        return result

    return Tool(
        name="shell", description=DESCRIPTION,
        parameters={"type": "object", "properties": {"command": {
            "type": "string", "description": "The command line, run with bash -c."}},
            "required": ["command"], "additionalProperties": False},
        handler=run_shell)


def command_result(call: ToolCall, run: CommandRun, limit: float | None,
                   max_chars: int) -> ToolResult:
    """The tool result for a fresh process's ``run``: output, then one line on how it ended."""
    from ..kernel.outputs import model_text

    by_name: dict[str, dict[str, Any]] = {}
    for name, text in run.chunks:  # one output per stream, as the kernel's collector keeps them
        if name in by_name:
            by_name[name]["text"] += text
        else:
            by_name[name] = {"output_type": "stream", "name": name, "text": text}
    outputs = list(by_name.values())
    text = model_text(outputs, max_chars)
    code = run.exit_code
    if run.problem:
        end = f"[the command could not be run: {run.problem}]"
    elif run.status == "timeout":
        end = (f"[timed out after {limit:g} s (Agent.tool_timeout): the command and the "
               "processes it started were killed]")
    elif code == 0:
        end = "" if text else "(no output; exit code 0)"
    elif isinstance(code, int) and code > 128 and code - 128 < 65:
        end = f"[killed by signal {_signal_name(code - 128)}]"  # bwrap's 128+N
    elif isinstance(code, int) and code < 0:
        end = f"[killed by signal {_signal_name(-code)}]"
    else:
        end = f"[exit code {code}]"
    if run.dropped:
        end = f"[{run.dropped} bytes of output past the limit were dropped]\n" + end
    output = "\n".join(p for p in (text, end) if p) or "(no output)"
    error = bool(run.problem) or run.status != "ok" or code != 0
    status = "ok" if not error else "timeout" if run.status == "timeout" else "error"
    return ToolResult(call_id=call.id, name=call.name, output=output, error=error,
                      outputs=outputs, meta={"status": status, "exit_code": code})


def shell_result(call: ToolCall, execution: Any, limit: float | None,
                 max_chars: int) -> ToolResult:
    """The tool result for the helper's ``execution``: output, then one line on how it ended."""
    from ..kernel.outputs import model_text

    record: dict[str, Any] = {}
    outputs, failure = [], None
    for out in execution.outputs:
        data = out.get("data") or {}
        if out.get("output_type") == "display_data" and RECORD_MIME in data:
            record = data[RECORD_MIME] if isinstance(data[RECORD_MIME], dict) else {}
        elif out.get("output_type") == "error":
            failure = out  # the helper's own traceback (an interrupt, a missing cwd)
        else:
            outputs.append(out)
    text = model_text(outputs, max_chars)
    code = record.get("exit_code")
    status = execution.status
    if status == "timeout":
        end = (f"[timed out after {limit:g} s (Agent.tool_timeout): the command and the "
               "processes it started were killed]")
    elif status == "died":
        end = next((ln for ln in reversed(execution.text.splitlines()) if ln.startswith("[")),
                   "[the sibling kernel died while running the command]")
    elif record.get("killed"):
        end = "[interrupted: the command and the processes it started were killed]"
    elif failure is not None or not record:
        what = (f"{failure.get('ename')}: {failure.get('evalue')}" if failure is not None
                else execution.text.strip().splitlines()[-1:] or ["no record of how it ended"])
        end = f"[the command could not be run: {what if isinstance(what, str) else what[0]}]"
    elif code == 0:
        end = "" if text else "(no output; exit code 0)"
    elif isinstance(code, int) and code < 0:
        end = f"[killed by signal {_signal_name(-code)}]"
    else:
        end = f"[exit code {code}]"
    output = "\n".join(p for p in (text, end) if p) or "(no output)"
    error = status != "ok" or failure is not None or code != 0
    meta: dict[str, Any] = {"status": "ok" if not error else
                            status if status in ("timeout", "died") else "error",
                            "exit_code": code}
    return ToolResult(call_id=call.id, name=call.name, output=output, error=error,
                      outputs=outputs, execution_count=execution.execution_count, meta=meta)


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
