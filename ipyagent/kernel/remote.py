"""A kernel on a Jupyter Server, Kernel Gateway or Enterprise Gateway, used like the local sibling.

The loop, approvals, display and transcript stay in the user's kernel; only the model's
code runs there. No protocol of our own: the kernel is started with ``POST /api/kernels``,
talked to over ONE long-lived websocket (``/api/kernels/{id}/channels``: a websocket per
call costs a handshake each time), interrupted with ``POST …/interrupt`` and shut down
with ``DELETE`` — the REST + websocket API all three servers speak.

It behaves as ``SiblingKernel`` does: outputs as nbformat outputs (``outputs.py``), a
timeout interrupts, a kernel that died (culled, deleted, OOM-killed and restarted by the
server) is reported to the model as a local death is and replaced, ``push``/``pull`` go
over the same ``user_expressions`` path (``transfer.py``). What is new: a websocket that
drops is reconnected (a bounded number of tries, each logged), and a call in flight when
it dropped comes back as ``status="unknown"``: it is never sent again.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import KernelError
from . import notes
from ._channels import V1, Channels, ChannelsClosed
from ._rest import KernelGone, RestClient, auth_header, check_url, masked
from ._sync import SyncForms
from .outputs import Execution, OutputCollector, Status, finish

__all__ = ["RemoteKernel"]

log = logging.getLogger("ipyagent.kernel.remote")

_POLL = 0.25  # seconds between checks of the websocket while a call runs
_CHECK = 2.0  # seconds of silence during a call before the server is asked whether the kernel lives
_IDLE_CHECK = 1.0  # seconds without a call after which one GET checks the kernel before the next
_SETTLE = 5.0  # seconds a cancelled request's cell may take to start, beyond interrupt_grace
_RECONNECTS = 3  # tries to reconnect a dropped websocket (0.2 s, 0.6 s, 1.8 s apart)
# The largest websocket message read: room for a pull of max_transfer_bytes (base64 in a
# reply), never under this floor; a larger one closes the websocket unread (_channels).
_MIN_MESSAGE_BYTES = 64 * 1024 * 1024
_MESSAGE_HEADROOM = 1024 * 1024


def max_message_bytes(max_transfer_bytes: int) -> int:
    """The websocket's message limit for a kernel that may pull ``max_transfer_bytes``."""
    return max(_MIN_MESSAGE_BYTES, -(-max_transfer_bytes // 3) * 4 + _MESSAGE_HEADROOM)


class RemoteKernel(SyncForms):
    """The model's kernel on a Jupyter Server or gateway at ``url``, with faults returned as values."""

    _kernel_word = 'the remote kernel'

    sandboxed = False  # ipyagent does not sandbox a remote kernel: the server decides what it may do
    remote = True  # its code runs on the server, not on this machine
    cwd: str | None = None  # the server's working directory for the kernel, not a path here
    # Websocket subprotocols offered, best first; none left: the legacy JSON form only.
    _ws_protocols: tuple[str, ...] = (V1,)

    def __init__(
        self,
        url: str,
        timeout: float | None = 60,
        kernel_name: str = "python3",
        *,
        token_env: str = "JUPYTER_TOKEN",
        env: Mapping[str, str] | None = None,
        max_output_bytes: int = 2_000_000,
        max_model_chars: int = 10_000,
        max_transfer_bytes: int = 100 * 1024 * 1024,
        startup_timeout: float = 60,
        interrupt_grace: float = 3.0,
        request_timeout: float = 30,
    ) -> None:
        self.url = check_url(url)
        self.token_env = token_env
        self.timeout = timeout
        self.kernel_name = kernel_name
        # Only these reach the remote kernel's environment (a gateway passes KERNEL_* ones):
        # nothing of the local environment is sent, the token included.
        self.env = dict(env or {})
        self.max_output_bytes = max_output_bytes
        self.max_model_chars = max_model_chars
        self.max_transfer_bytes = max_transfer_bytes
        self.startup_timeout = startup_timeout
        self.interrupt_grace = interrupt_grace
        self.request_timeout = request_timeout
        self.kernel_id: str | None = None
        self.session = uuid.uuid4().hex
        self.reconnects = 0  # websocket reconnections so far (each one logged)
        self._rest: RestClient | None = None  # made on the engine loop
        self._channels: Channels | None = None
        self._state = "not started"
        self._last_seen = 0.0  # when the last call ended (monotonic)
        self._died: str | None = None  # why the kernel died while no call ran (told at the next call)
        # A call given up (cancelled) before its cell ended: (msg_id, whether it had begun).
        self._abandoned: tuple[str, bool] | None = None
        self._started = self._ended = ""  # msg_ids of the last cell seen busy, seen idle
        self._settle_note = ""  # what settling a cancelled request did, for the next result
        self._start_task: asyncio.Future[None] | None = None
        self._lock: asyncio.Lock | None = None
        self._closed = False
        self._ids: list[str] = []  # kernels this object started, for the exit-time DELETE
        self._finalizer = weakref.finalize(self, _delete_at_exit, self.url, token_env, self._ids)

    # ---- lifecycle -------------------------------------------------------------

    async def _ensure_ready(self) -> None:
        if self._closed:
            raise KernelError("the remote kernel was shut down; create a new RemoteKernel")
        if self._lock is None:
            self._lock = asyncio.Lock()
        if self._rest is None:
            self._rest = RestClient(self.url, self.token_env, timeout=self.request_timeout)
        if self._start_task is None:
            if self.kernel_id is not None:
                return
            task = self._start_task = asyncio.ensure_future(self._start())
            task.add_done_callback(lambda _: setattr(self, "_start_task", None))
        await asyncio.shield(self._start_task)

    async def _start(self) -> None:
        """``POST /api/kernels``, then the websocket, then a kernel_info round trip."""
        assert self._rest is not None
        self._state = "starting"
        try:
            body: dict[str, Any] = {"name": self.kernel_name}
            if self.env:
                body["env"] = dict(self.env)
            # Enterprise Gateway answers once the kernel's pod runs: as long as a start may take.
            model = await self._rest.request("POST", "/api/kernels", body,
                                             timeout=max(self.startup_timeout, self.request_timeout))
            if not isinstance(model, dict) or not isinstance(model.get("id"), str):
                raise KernelError(f"the Jupyter server at {self.url} started no kernel (no id in its answer)")
            self.kernel_id = model["id"]
            self._ids.append(model["id"])
            await self._connect()
            await self._wait_ready()
        except BaseException:
            self._state = "dead"
            await self._forget_kernel()
            raise
        self._state = "idle"

    async def _connect(self) -> None:
        if self._channels is not None:
            self._channels.close()
        assert self.kernel_id is not None
        try:
            self._channels = await Channels.open(self.url, self.kernel_id, self.token_env, self.session,
                                                 self.request_timeout, self._ws_protocols,
                                                 max_message_bytes(self.max_transfer_bytes))
        except ChannelsClosed as exc:
            raise KernelError(f"could not open the websocket of the remote kernel at {self.url}: {exc}") from None

    async def _wait_ready(self) -> None:
        """kernel_info until the kernel answers (it may still be starting), within startup_timeout."""
        give_up = time.monotonic() + self.startup_timeout
        while True:
            channels = self._channels
            assert channels is not None
            try:
                msg_id = channels.send("shell", "kernel_info_request", {})
                # Ready means both answered: the reply (shell) and a status of ours (iopub).
                # After a restart the server's iopub subscription can lag the shell socket;
                # a call made then loses its output and its "idle" (seen: a call after a
                # death on a Kernel Gateway timed out about one time in four).
                replied = heard = False
                while time.monotonic() < give_up:
                    msg = await channels.recv(1.0)
                    if msg is None:
                        break  # ask again: a request sent while the kernel started can be lost
                    if (msg.get("parent_header") or {}).get("msg_id") != msg_id:
                        continue
                    replied = replied or msg.get("msg_type") == "kernel_info_reply"
                    heard = heard or msg.get("channel") == "iopub"
                    if replied and heard:
                        return
            except ChannelsClosed as exc:
                await self._check_alive(f"its websocket closed while it started ({exc})")
                await self._connect()
            if time.monotonic() >= give_up:
                raise KernelError(f"the remote kernel {self.kernel_name!r} at {self.url} did not answer "
                                  f"within {self.startup_timeout:g} s")

    async def _check_alive(self, what: str) -> dict[str, Any]:
        """The kernel's model from the server; KernelGone when it is gone or dead."""
        assert self._rest is not None and self.kernel_id is not None
        model = await self._rest.request("GET", f"/api/kernels/{self.kernel_id}", missing_ok=True)
        if model is None:
            raise KernelGone(f"the server no longer has it: deleted or culled; {what}")
        if isinstance(model, dict) and model.get("execution_state") == "dead":
            raise KernelGone(f"the server reports it dead; {what}")
        return model if isinstance(model, dict) else {}

    async def _forget_kernel(self) -> None:
        """Drop the websocket and DELETE the kernel (if the server still has it)."""
        if self._channels is not None:
            self._channels.close()
            self._channels = None
        kernel_id, self.kernel_id = self.kernel_id, None
        if kernel_id is not None and self._rest is not None:
            try:
                await self._rest.request("DELETE", f"/api/kernels/{kernel_id}", missing_ok=True)
            except KernelError as exc:
                log.debug("could not delete remote kernel %s: %s", kernel_id, exc)
            if kernel_id in self._ids:
                self._ids.remove(kernel_id)

    async def _replace(self) -> None:
        """A fresh kernel in place of one that died (the old one deleted if the server kept it)."""
        await self._forget_kernel()
        await self._start()

    async def _close(self) -> None:
        self._closed = True
        await self._forget_kernel()
        if self._rest is not None:
            await self._rest.aclose()
        self._finalizer.detach()

    async def _interrupt_busy(self) -> None:
        if self.kernel_id is not None:
            await self._interrupt()

    async def _interrupt(self) -> None:
        assert self._rest is not None
        try:
            await self._rest.request("POST", f"/api/kernels/{self.kernel_id}/interrupt")
        except KernelError as exc:
            log.warning("ipyagent: could not interrupt the remote kernel: %s", exc)

    async def _restart(self) -> None:
        assert self._rest is not None
        self._state = "starting"
        try:
            await self._rest.request("POST", f"/api/kernels/{self.kernel_id}/restart",
                                     timeout=max(self.startup_timeout, self.request_timeout))
            self._channels_drain()
            await self._wait_ready()
        except KernelGone:
            await self._replace()
        except BaseException:
            self._state = "dead"
            raise
        self._died = None
        self._state = "idle"

    def _channels_drain(self) -> None:
        if self._channels is not None:
            self._channels.drain()

    def is_alive(self) -> bool:
        """True while the kernel is started and its websocket open (as last seen: no request made)."""
        channels = self._channels
        return self.kernel_id is not None and channels is not None and not channels.closed \
            and self._died is None

    @property
    def protocol(self) -> str | None:
        """The websocket's message form: 'v1.kernel.websocket.jupyter.org' or 'json' (None: not open)."""
        return self._channels.protocol if self._channels is not None else None

    @property
    def where(self) -> str:
        """Where the code runs, for a banner line (the URL: never the token)."""
        return f"{self.url} (remote kernel {self.kernel_name}, not sandboxed by ipyagent)"

    def __repr__(self) -> str:
        return f"<RemoteKernel {self.kernel_name} {self.state} at {self.url} id={self.kernel_id}>"

    # ---- execution -------------------------------------------------------------

    async def _run(self, code: str, timeout: float | None, *, silent: bool = False,
                   user_expressions: dict[str, str] | None = None,
                   on_stream: Callable[[str, str], None] | None = None) -> tuple[Execution, dict[str, Any]]:
        await self._ensure_ready()
        assert self._lock is not None
        async with self._lock:  # one request at a time on the one websocket
            return await self._run_locked(code, timeout, silent, user_expressions, on_stream)

    async def _before_call(self) -> str:
        """Make sure a kernel answers before a call; the note when it had died since the last one."""
        channels = self._channels
        if self._died is None and channels is not None:
            self._died = next((why for why in map(_death, channels.drain()) if why), None)
        cause = self._died
        if cause is None:
            try:
                if channels is None or channels.closed:
                    await self._check_alive("its websocket had closed")
                    await self._reconnect("its websocket had closed since the last call")
                elif time.monotonic() - self._last_seen > _IDLE_CHECK:
                    # A server does not always close the websocket of a kernel it deleted or
                    # culled: after a quiet spell, ask (one GET), so the death is told as one.
                    await self._check_alive("found before this call")
                return ""
            except KernelGone as exc:
                cause = str(exc)
        await self._replace()
        self._died = None
        return notes.died_idle(cause)

    async def _reconnect(self, why: str) -> None:
        """Reopen the websocket to the same kernel: a bounded number of tries, each logged."""
        delay = 0.2
        for attempt in range(1, _RECONNECTS + 1):
            log.warning("ipyagent: reconnecting to the remote kernel at %s (%s), try %d of %d",
                        self.url, why, attempt, _RECONNECTS)
            try:
                await self._connect()
                self.reconnects += 1
                return
            except KernelError as exc:
                if attempt == _RECONNECTS:
                    raise KernelError(f"lost the websocket of the remote kernel at {self.url} and could "
                                      f"not reconnect after {_RECONNECTS} tries: {exc}") from None
                await asyncio.sleep(delay)
                delay *= 3

    async def _run_locked(self, code: str, timeout: float | None, silent: bool,
                          user_expressions: dict[str, str] | None,
                          on_stream: Callable[[str, str], None] | None) -> tuple[Execution, dict[str, Any]]:
        if self._abandoned is not None:  # its own settling has not had the lock yet
            self._settle_note = await self._settle_abandoned() or self._settle_note
        pre_note = await self._before_call()
        if self._settle_note:  # a death found since says more than the restart did
            pre_note, self._settle_note = pre_note or self._settle_note, ""
        channels = self._channels
        assert channels is not None
        started = time.monotonic()
        collector = OutputCollector(self.max_output_bytes)
        reply: dict[str, Any] = {}
        note = ""
        restarted = bool(pre_note)
        try:
            msg_id = channels.send("shell", "execute_request", {
                "code": code, "silent": silent, "store_history": not silent,
                "user_expressions": user_expressions or {}, "allow_stdin": False,
                "stop_on_error": False})
        except ChannelsClosed as exc:
            # Nothing reached the kernel: reconnect and send once more is safe only before
            # the write; a failed write is reported, not repeated.
            return self._unknown(collector, started, pre_note, str(exc)), reply
        self._state = "busy"
        try:
            deadline = None if timeout is None else started + timeout
            need_reply = silent or bool(user_expressions)
            outcome, why = await self._collect(msg_id, collector, reply, deadline, on_stream, need_reply)
            status: Status = "died"
            if outcome == "timeout":
                assert timeout is not None
                await self._interrupt()
                outcome, why = await self._collect(msg_id, collector, reply,
                                                   time.monotonic() + self.interrupt_grace, on_stream, need_reply)
                if outcome == "idle":
                    status, note = "timeout", notes.interrupted(timeout)
                elif outcome == "timeout":
                    status, restarted, note = "timeout", True, notes.stuck_restarted(timeout)
                    await self._restart()
            elif outcome == "idle":
                failed = reply.get("status") in ("error", "aborted") if reply else collector.has_error
                status = "error" if failed else "ok"
            if outcome == "died":
                status, restarted, note = "died", True, notes.died_running(why)
                try:
                    await self._after_death()
                except KernelError as exc:
                    note += notes.restart_failed(exc)
            elif outcome == "dropped":
                self._state = "idle"
                return self._unknown(collector, started, pre_note, why), {}
        except asyncio.CancelledError:
            # The caller gave up (Ctrl-C, a stopped run): do not leave the code running. An
            # interrupt that lands before the cell starts is lost (the cell then runs whole),
            # so the cell is settled before the next request (``_settle_abandoned``).
            began = self._started == msg_id
            if self.kernel_id is not None and began:
                asyncio.ensure_future(self._interrupt())
            if self._ended != msg_id:  # given up while its reply was read: nothing runs
                self._abandoned = (msg_id, began)
                asyncio.ensure_future(self._settle_soon())
            self._state = "idle"
            raise
        if self._state == "busy":
            self._state = "idle"
        self._last_seen = time.monotonic()
        return finish(collector, status, reply, note=self._told(note), pre_note=self._told(pre_note),
                      started=started, restarted=restarted, max_model_chars=self.max_model_chars), reply

    def _unknown(self, collector: OutputCollector, started: float, pre_note: str, why: str) -> Execution:
        return finish(collector, "unknown", {}, note=self._told(notes.unknown_outcome(why)),
                      pre_note=self._told(pre_note), started=started, restarted=bool(pre_note),
                      max_model_chars=self.max_model_chars)

    def _told(self, note: str) -> str:
        """A call's note (the model reads it with the outputs) without the server's URL or
        host: the errors it quotes name them (``kernel.base.for_the_model`` masks raised ones)."""
        return masked(note, self.url) if note else note

    async def _after_death(self) -> None:
        """After a death seen during a call: the server's own restart, or a fresh kernel."""
        try:
            await self._check_alive("after its death")
            if self._channels is None or self._channels.closed:
                await self._connect()
            self._state = "starting"
            await self._wait_ready()
            self._state = "idle"
        except KernelGone:
            await self._replace()
        self._died = None

    async def _collect(self, msg_id: str, collector: OutputCollector, reply: dict[str, Any],
                       deadline: float | None, on_stream: Callable[[str, str], None] | None,
                       need_reply: bool) -> tuple[str, str]:
        """Feed messages of ``msg_id`` to ``collector`` and ``reply`` until the kernel is idle.

        -> ('idle' | 'timeout' | 'died' | 'dropped', why). 'idle' waits for the shell reply too.
        """
        channels = self._channels
        assert channels is not None
        idle_at: float | None = None
        quiet_since = time.monotonic()
        while True:
            now = time.monotonic()
            # The server forwards the shell reply and IOPub's idle on separate sockets, so the
            # reply may trail by milliseconds: a plain call does not wait for it (the outputs
            # carry the error and the execution count); a silent evaluation needs its content.
            if idle_at is not None and (reply or not need_reply or now - idle_at > 5.0):
                return "idle", ""
            wait = _POLL if deadline is None else max(0.0, min(_POLL, deadline - now))
            try:
                msg = await channels.recv(wait)
            except ChannelsClosed as exc:
                return await self._closed_during_call(str(exc))
            now = time.monotonic()
            if msg is None:
                if deadline is not None and now >= deadline and idle_at is None:
                    return "timeout", ""
                if now - quiet_since > _CHECK:
                    quiet_since = now
                    try:
                        await self._check_alive("seen while it ran this code")
                    except KernelGone as exc:
                        return "died", f"{exc}"
                continue
            quiet_since = now
            kind = msg.get("msg_type") or (msg.get("header") or {}).get("msg_type")
            channel = msg.get("channel")
            death = _death(msg)
            if death:
                return "died", death
            parent = (msg.get("parent_header") or {}).get("msg_id")
            if parent != msg_id:
                continue
            if channel == "shell":
                if kind == "execute_reply":
                    reply.update(msg.get("content") or {})
                continue
            if channel != "iopub":
                continue
            if kind == "status":
                state = (msg.get("content") or {}).get("execution_state")
                if state == "busy":
                    self._started = msg_id
                elif state == "idle":
                    idle_at, self._ended = now, msg_id
                continue
            try:
                collector.add(msg)
            except (KeyError, TypeError, AttributeError, ValueError) as exc:
                # Fields of the wrong type (a hostile or broken server): skipped and counted.
                collector.unreadable += 1
                log.debug("skipped a malformed IOPub message: %r", exc)
                continue
            if on_stream is not None and kind == "stream":
                content = msg.get("content") or {}
                try:
                    on_stream(content.get("name", "stdout"), content.get("text", ""))
                except Exception:  # a display problem must not lose the output
                    log.debug("on_stream callback failed", exc_info=True)

    async def _settle_abandoned(self) -> str:
        """End the request given up earlier: a cell that had not started is interrupted once
        it does; one that had got its interrupt when it was given up. Wait for it to end;
        restart the kernel if it will not (the note says so, "" otherwise). A closed
        websocket or a death is left to the next request's own checks (``_before_call``)."""
        assert self._abandoned is not None
        msg_id, began = self._abandoned
        self._abandoned = None
        channels = self._channels
        if channels is None or channels.closed or self.kernel_id is None:
            return ""
        give_up = time.monotonic() + self.interrupt_grace + _SETTLE
        while time.monotonic() < give_up:
            try:
                msg = await channels.recv(_POLL)
            except ChannelsClosed:
                return ""
            if msg is None:
                continue
            death = _death(msg)
            if death:
                self._died = death
                return ""
            parent = (msg.get("parent_header") or {}).get("msg_id")
            kind = msg.get("msg_type") or (msg.get("header") or {}).get("msg_type")
            if parent != msg_id or msg.get("channel") != "iopub" or kind != "status":
                continue
            state = (msg.get("content") or {}).get("execution_state")
            if state == "busy" and not began:
                began = True
                await self._interrupt()
            elif state == "idle":
                self._last_seen = time.monotonic()
                return ""
        await self._restart()
        return notes.stopped_call_restarted()

    async def _closed_during_call(self, why: str) -> tuple[str, str]:
        """The websocket closed mid-call: the kernel died ('died'), or the connection dropped."""
        try:
            await self._check_alive("its websocket closed while it ran this code")
        except KernelGone as exc:
            return "died", str(exc)
        except KernelError as exc:
            return "dropped", f"{why}; {exc}"
        try:
            await self._reconnect(f"its websocket dropped: {why}")
        except KernelError as exc:
            return "dropped", f"{why}; {exc}"
        return "dropped", f"{why}; reconnected"


def _death(msg: dict[str, Any]) -> str | None:
    """Why, when ``msg`` is the server's news that the kernel process died (else None)."""
    if msg.get("channel") != "iopub" or (msg.get("header") or {}).get("msg_type") != "status":
        return None
    state = (msg.get("content") or {}).get("execution_state")
    # The server saw the kernel process end and restarts it ('restarting') or could not ('dead').
    if state == "restarting":
        return "its process ended on the server, which restarted it"
    if state == "dead":
        return "the server reports it dead"
    return None


def _delete_at_exit(url: str, token_env: str, ids: list[str]) -> None:
    """At exit or collection: DELETE the kernels still running (a blocking request, 2 s each)."""
    import httpx

    for kernel_id in list(ids):
        try:
            httpx.delete(f"{url}/api/kernels/{kernel_id}", headers=auth_header(token_env), timeout=2.0,
                         follow_redirects=False, trust_env=False)
        except httpx.HTTPError:
            pass
    ids.clear()
