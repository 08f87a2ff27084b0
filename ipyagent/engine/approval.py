"""Approval: nothing runs until a policy, a person or a hook says so.

The seam is ``async decide(call) -> Decision``. ``ApprovalPolicy`` applies the agent's
settings (``auto`` / ``ask`` / ``deny``, the ``allow`` list, "always" answers given in
this conversation) and, under ``ask``, defers to a UI: the notebook widgets, a terminal prompt, or
any callable hook. Where nobody can be asked, the call is denied with a reason that says
how to allow it — never silently run.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import sys
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Literal, Protocol, Union

from .._util.text import visible
from ..context.decisions import BY, PERSON, Decision, utc_now
from ..context.items import CODE_ARGUMENTS, ToolCall, code_of

if TYPE_CHECKING:
    from ..tools.offers import Offer, OfferAnswer

__all__ = ["Decision", "Approver", "ApprovalPolicy", "TerminalApprover", "TerminalOrDeny",
           "CallbackApprover", "on_a_terminal", "BY", "PERSON", "utc_now"]

Mode = Literal["auto", "ask", "deny"]  # Agent.approval
MODES: tuple[Mode, ...] = ("auto", "ask", "deny")  # typed, so the trait's value is a Mode


class Approver(Protocol):
    """Anything that can decide on a tool call."""

    async def decide(self, call: ToolCall) -> Decision: ...


HookResult = Union[Decision, bool, str, None]
Hook = Callable[[ToolCall], HookResult | Awaitable[HookResult]]


class CallbackApprover:
    """Wrap a function ``call -> Decision | bool | "approve"/"deny"`` (sync or async)."""

    def __init__(self, fn: Hook) -> None:
        self.fn = fn

    async def decide(self, call: ToolCall) -> Decision:
        value = self.fn(call)
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, Decision):
            return value
        if value is True or value in ("approve", "yes", "y"):
            return Decision("approve", by="hook", detail=str(value))
        if isinstance(value, str) and value not in ("deny", "no", "n"):
            return Decision("deny", reason=value, by="hook")
        return Decision("deny", reason="denied by the approval hook", by="hook",
                        detail=str(value))


def terminal_answer(prompt: str, stop: threading.Event | None = None,
                    keys: tuple[str, ...] = ()) -> str:
    """One answer typed at the terminal; Ctrl-C interrupts it; end of input means 'no'.

    ``keys``: the answers of a question answered with one keypress (no Enter) when stdin
    is a terminal. ``stop`` set (the question was withdrawn) ends the wait without
    consuming a line.
    """
    from .._util.mainthread import interruptible_input, interruptible_key

    try:
        if keys:
            return interruptible_key(prompt, keys, stop=stop)
        return interruptible_input(prompt, stop=stop)
    except EOFError:  # Ctrl-D or a closed stdin: deny, end an edit, give no reason
        return "n" if prompt.startswith("Run it") or keys else ("." if not prompt else "")


def pumped_answer(pump: Any) -> Callable[..., str]:
    """``terminal_answer`` run on the thread ``pump`` serves (the main one, where Ctrl-C
    lands), keys and all: a ``TerminalApprover``'s ``input_fn``."""
    def answer(prompt: str, keys: tuple[str, ...] = ()) -> str:
        return pump.call_and_wait(terminal_answer, prompt, None, keys)  # type: ignore[no-any-return]

    return answer


def _takes_keys(fn: Callable[..., str]) -> bool:
    """Whether an input function can read a one-keypress answer (a ``keys`` argument)."""
    try:
        return "keys" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


# The answers of each question, by key and in full (the prompt names them).
_RUN_KEYS = ("y", "yes", "n", "no", "e", "edit", "a", "always")
_YES_NO = ("y", "yes", "n", "no")


# "always" is this tool for the rest of this conversation, said where it is chosen.
_PROMPT = "Run it? [y]es / [n]o / [e]dit / [a]lways (this tool, this conversation): "


class TerminalApprover:
    """A y/n/e/a prompt on the terminal (stdin)."""

    def __init__(self, input_fn: Callable[[str], str] = terminal_answer,
                 output: Any = None, show_call: bool = True) -> None:
        self.input_fn = input_fn
        self.output = output
        self.show_call = show_call  # False when a display already shows each call

    def _show(self, call: ToolCall) -> None:
        out = self.output or sys.stdout
        code = code_of(call.name, call.arguments)
        if code is not None:  # python code, a shell command: as it will run
            body = code[1]
        else:
            body = json.dumps(call.arguments, indent=2, ensure_ascii=False)
        # Made visible: an escape sequence in the code must not erase or rewrite what is
        # shown before "Run it?" (the code that runs is the code shown, byte for byte).
        print(visible(f"\n── tool call: {call.name} ──\n{body}\n"), file=out, flush=True)

    async def decide(self, call: ToolCall) -> Decision:
        if self.show_call:
            self._show(call)
        while True:
            answer = (await self._ask(_PROMPT, _RUN_KEYS)).strip().lower()
            if answer in ("y", "yes"):
                return Decision("approve", by="terminal", detail=answer)
            if answer in ("a", "always"):
                return Decision("approve", scope="always", by="terminal", detail=answer)
            if answer in ("n", "no"):
                reason = (await self._ask("Reason for the model (optional): ")).strip()
                return Decision("deny", reason=reason, by="terminal", detail=answer)
            if answer in ("e", "edit"):
                return replace(await self._edit(call), detail=answer)

    async def confirm_mcp(self, request: Any) -> bool | str:
        """Ask y/N whether a directory file's MCP servers start (``tools.mcp.trust.TrustRequest``)."""
        print(f"\n{request.question()}", file=self.output or sys.stdout, flush=True)
        answer = (await self._ask("Start them? [y]es / [N]o: ", _YES_NO)).strip().lower()
        return True if answer in ("y", "yes") else "you answered no"

    async def confirm_changes(self, request: Any) -> bool | str:
        """Ask y/N whether the sandbox's code-like file changes reach the user's folder
        (``tools.changes.ChangeRequest``); the diffs are shown folded, characters visible."""
        out = self.output or sys.stdout
        from ..tools.changes import QUESTION_DIFFS

        print(visible(f"\n{request.question()}"), file=out, flush=True)
        for change in request.changes[:QUESTION_DIFFS]:
            if change.diff:
                lines = change.diff.splitlines()
                shown = lines[:20] + ([f"... {len(lines) - 20} more lines"] if len(lines) > 20 else [])
                print(visible("\n".join(f"    {ln}" for ln in shown)), file=out, flush=True)
        if len(request.changes) > QUESTION_DIFFS:
            print(f"    ... {len(request.changes) - QUESTION_DIFFS} more diffs (%agent changes "
                  "lists the files)", file=out, flush=True)
        answer = (await self._ask("Apply them to your folder? [y]es / [N]o (they stay in the "
                                  "sandbox; %agent apply later): ")).strip().lower()
        return answer in ("y", "yes")

    async def confirm_preview(self, request: Any) -> bool | str:
        """Ask y/N whether previews of the files a task names go to a remote endpoint
        (``engine.previews.PreviewRequest``); the answer is kept for the agent."""
        # The question's names and summaries were made visible once, where they were made.
        print(f"\n{request.question()}", file=self.output or sys.stdout, flush=True)
        answer = (await self._ask("Send the previews? [y]es / [N]o: ", _YES_NO)).strip().lower()
        return answer in ("y", "yes")

    async def offer_result(self, offer: Offer) -> OfferAnswer:
        """Ask y/N whether the value the model offers comes into the user's kernel."""
        from ..tools.offers import OfferAnswer

        out = self.output or sys.stdout
        shown = f"\n{offer.question()}"
        if offer.preview:
            shown += "\n" + "\n".join(f"  | {line}" for line in offer.preview.splitlines())
        print(visible(shown + "\n(taking it puts this decoded copy in your kernel: data only, "
                      "nothing of the agent's runs)"), file=out, flush=True)
        answer = (await self._ask(visible(f"Take it into your kernel as {offer.name}? "
                                          "[y]es / [N]o: "), _YES_NO)).strip().lower()
        if answer not in ("y", "yes"):
            return OfferAnswer(False, "terminal", reason="the user answered no")
        try:
            arrived = offer.take()
        except TypeError as exc:
            print(visible(f"ipyagent: {exc}"), file=out, flush=True)
            return OfferAnswer(False, "terminal", reason=str(exc))
        print(visible(f"ipyagent: {offer.name} = {arrived} (a copy from the agent's kernel)"),
              file=out, flush=True)
        return OfferAnswer(True, "terminal", arrived)

    async def _ask(self, prompt: str, keys: tuple[str, ...] = ()) -> str:
        """``input_fn(prompt)`` in a daemon thread, so the engine loop stays live; with
        ``keys``, the terminal's answer is one keypress (``terminal_answer``).

        Why not ``asyncio.to_thread``: a cancelled read (Ctrl-C) keeps its thread blocked
        on stdin, and the executor's threads are joined at exit — the process would
        wait for an Enter nobody is going to type.
        """
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[str] = loop.create_future()

        def settle(value: str | None, exc: BaseException | None) -> None:
            if answer.done():
                return
            if isinstance(exc, asyncio.CancelledError):
                answer.cancel()
            elif exc is not None:
                answer.set_exception(exc)
            else:
                answer.set_result(value or "")

        stop = threading.Event()

        def read() -> None:
            try:
                if self.input_fn is terminal_answer:
                    value = terminal_answer(prompt, stop, keys)
                elif keys and _takes_keys(self.input_fn):
                    value = self.input_fn(prompt, keys=keys)  # type: ignore[call-arg]
                else:
                    value = self.input_fn(prompt)
                exc = None
            except BaseException as error:  # handed to the awaiting coroutine
                value, exc = None, error
            if not loop.is_closed():
                loop.call_soon_threadsafe(settle, value, exc)

        threading.Thread(target=read, name="ipyagent-prompt", daemon=True).start()
        try:
            return await answer
        finally:
            stop.set()  # withdrawn: the next line typed belongs to whoever reads next

    async def _edit(self, call: ToolCall) -> Decision:
        name = CODE_ARGUMENTS.get(call.name, ("code", ""))[0]
        key = name if name in call.arguments else None
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
        if editor and on_a_terminal():
            return await self._edit_in(editor, call, key)
        prompt = (f"New {'command' if key == 'command' else 'code'} (end with a line holding only '.'):\n" if key
                  else "New arguments as JSON (end with a line holding only '.'):\n")
        print(prompt, end="", file=self.output or sys.stdout, flush=True)
        lines: list[str] = []
        while True:
            line = await self._ask("")
            if line.strip() == ".":
                break
            lines.append(line)
        return _edited(call, key, "\n".join(lines))

    async def _edit_in(self, editor: str, call: ToolCall, key: str | None) -> Decision:
        """Edit in ``$VISUAL``/``$EDITOR``, opened on the call's code (or JSON arguments)."""
        original = (str(call.arguments[key]) if key
                    else json.dumps(call.arguments, indent=2, ensure_ascii=False))
        print(f"Editing in {editor} — save and quit to run your version.",
              file=self.output or sys.stdout, flush=True)
        text, problem = await asyncio.to_thread(edit_text, editor, original,
                                                {"code": ".py", "command": ".sh"}.get(key or "", ".json"))
        if problem:
            return Decision("deny", reason=f"not run: {problem}", by="terminal")
        if text.strip() == original.strip():
            return Decision("approve", by="terminal")  # saved unchanged: the call as proposed
        return _edited(call, key, text)


class TerminalOrDeny:
    """The y/n/e/a prompt when stdin is a terminal; with nobody there (a script, a pipe,
    CI), each call is denied with ``unattended(call)``: what happened and how to allow it."""

    def __init__(self, input_fn: Callable[[str], str], unattended: Callable[[ToolCall], str],
                 show_call: bool = False) -> None:
        self.prompt = TerminalApprover(input_fn=input_fn, show_call=show_call)
        self.unattended = unattended

    async def decide(self, call: ToolCall) -> Decision:
        if not on_a_terminal():
            return Decision("deny", by="headless", reason=self.unattended(call))
        return await self.prompt.decide(call)

    async def confirm_mcp(self, request: Any) -> bool | str:
        """The y/N prompt for a directory file's MCP servers; with nobody there: why not."""
        if not on_a_terminal():
            return "nobody could agree: stdin is not a terminal"
        return await self.prompt.confirm_mcp(request)

    async def confirm_changes(self, request: Any) -> bool | str:
        """The y/N prompt for the sandbox's code-like file changes; nobody there: they wait."""
        if not on_a_terminal():
            return "nobody could agree: stdin is not a terminal"
        return await self.prompt.confirm_changes(request)

    async def confirm_preview(self, request: Any) -> bool | str:
        """The y/N prompt for file previews to a remote endpoint; nobody there: not sent."""
        if not on_a_terminal():
            return "nobody could agree: stdin is not a terminal"
        return await self.prompt.confirm_preview(request)

    async def offer_result(self, offer: Offer) -> OfferAnswer:
        """The y/N prompt for a value the model offers; with nobody there: not taken."""
        if not on_a_terminal():
            from ..tools.offers import OfferAnswer

            return OfferAnswer(False, "headless", reason="nobody could answer: stdin is not a terminal")
        return await self.prompt.offer_result(offer)


def _edited(call: ToolCall, key: str | None, text: str) -> Decision:
    """The decision for edited text: the new ``key`` argument, or all arguments as JSON."""
    if key:
        return Decision("edit", arguments={**call.arguments, key: text}, by="terminal")
    try:
        return Decision("edit", arguments=json.loads(text), by="terminal")
    except json.JSONDecodeError as exc:
        return Decision("deny", reason=f"edited arguments were not JSON ({exc})", by="terminal")


def on_a_terminal() -> bool:
    """True when stdin is a terminal: someone can answer a prompt or use an editor."""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError, OSError):  # a replaced or closed stdin
        return False


def edit_text(editor: str, text: str, suffix: str) -> tuple[str, str | None]:
    """``text`` after the user edited it in ``editor``: (new text, None) or ("", problem)."""
    import shlex
    import subprocess
    import tempfile

    fd, path = tempfile.mkstemp(prefix="ipyagent-edit-", suffix=suffix)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")
        try:
            done = subprocess.run([*shlex.split(editor), path])
        except (OSError, ValueError) as exc:
            return "", f"could not start the editor {editor!r} ({exc})"
        if done.returncode != 0:
            return "", f"the editor {editor!r} exited with {done.returncode}"
        with open(path, encoding="utf-8") as f:
            return f.read(), None
    finally:
        os.unlink(path)


@dataclass
class ApprovalPolicy:
    """The agent's approval settings applied to each call; every answer says how it was made."""

    mode: Mode = "auto"
    allow: list[str] = field(default_factory=list)
    ui: Approver | None = None
    # Tools approved "always" in this conversation -> the id of the call whose answer said
    # so. ``Agent.reset`` (``%agent reset``, ``--new``, ``load``) clears it: an Always given
    # for one task never approves calls of the next one unasked.
    always: dict[str, str] = field(default_factory=dict)

    def asks(self, name: str) -> bool:
        """True when a call of tool ``name`` would be put to the person: the mode is
        'ask' and the tool is neither on the allow-list nor approved "always"."""
        return self.mode == "ask" and name not in self.allow and name not in self.always

    async def decide(self, call: ToolCall) -> Decision:
        """The decision for ``call``, stamped with when it was made (``at``)."""
        decision = await self._decide(call)
        # A copy: a hook may hand back one Decision object for every call.
        return replace(decision, by=decision.by or "hook", at=utc_now())

    async def _decide(self, call: ToolCall) -> Decision:
        if call.name in self.allow:
            return Decision("approve", by="allow-list", detail=call.name)
        if call.name in self.always:
            return Decision("approve", by="always", detail=self.always[call.name])
        if self.mode == "auto":
            return Decision("approve", by="policy", detail="auto")
        if self.mode == "deny":
            return Decision("deny", by="policy", detail="deny", reason=(
                "the approval policy is 'deny'; set Agent.approval = 'ask' or 'auto', "
                f"or add {call.name!r} to Agent.allow"))
        if self.ui is None:
            return Decision("deny", by="headless", reason=(
                "approval is 'ask' but there is no way to ask here (no notebook widgets, no "
                f"terminal); set Agent.approval = 'auto' or add {call.name!r} to Agent.allow"))
        decision = await self.ui.decide(call)
        if decision.approved and decision.scope == "always":
            self.always[call.name] = call.id
        return decision
