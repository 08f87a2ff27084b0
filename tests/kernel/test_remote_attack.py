"""A hostile (or merely careless) server in place of a Jupyter server: what it sends back
never carries the token into an error line (real HTTP servers on 127.0.0.1)."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator

import pytest

from ipyagent.context.items import ToolResult
from ipyagent.errors import KernelError
from ipyagent.kernel.remote import RemoteKernel

TOKEN_ENV = "IPYAGENT_TEST_ATTACK_TOKEN"
TOKEN = "tok-3f9a1c7e5b2d4a6c8e0f1a3b5c7d9e1f"


class Echo(http.server.BaseHTTPRequestHandler):
    """Answers every request with an error whose message quotes the request's headers."""

    mode = "json"

    def _answer(self) -> None:
        headers = "; ".join(f"{k}: {v}" for k, v in sorted(  # the token first: inside any cut
            self.headers.items(), key=lambda kv: kv[0] != "Authorization"))
        if self.mode == "json":
            body = json.dumps({"message": f"bad request, you sent {headers}"}).encode()
        else:
            body = f"<html>bad request, you sent {headers}</html>".encode()
        self.send_response(500, f"Broken {self.headers.get('Authorization', '')}")
        self.send_header("Content-Type", "application/json" if self.mode == "json" else "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _answer  # noqa: N815 - http.server's names

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(params=["json", "text"])
def echo(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    handler = type("Handler", (Echo,), {"mode": request.param})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_server_that_echoes_the_token_in_its_error_does_not_put_it_in_ours(echo: str) -> None:
    with pytest.raises(KernelError) as info:
        RemoteKernel(echo, token_env=TOKEN_ENV).start()
    message = str(info.value)
    assert "HTTP 500" in message and "bad request" in message  # the server's reason is kept
    assert TOKEN not in message, message
    assert f"${TOKEN_ENV}" in message  # the value's place is named instead


def _tornado_server(handlers: list) -> tuple[str, object, threading.Thread]:  # type: ignore[type-arg]
    """A tornado app on 127.0.0.1 in a thread of its own: (url, its loop, the thread)."""
    import asyncio

    import tornado.web

    ready = threading.Event()
    box: dict[str, object] = {}

    def serve() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        app = tornado.web.Application(handlers)
        server = app.listen(0, address="127.0.0.1")
        box["port"] = next(iter(server._sockets.values())).getsockname()[1]
        box["loop"], box["server"] = loop, server
        ready.set()
        loop.run_forever()
        server.stop()
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ready.wait(10)
    return f"http://127.0.0.1:{box['port']}", box["loop"], thread


def _kernels(model: dict[str, str]) -> type:
    """/api/kernels[/{id}[/interrupt|/restart]] answering with the kernel ``model``; DELETE: 204."""
    import tornado.web

    class Kernels(tornado.web.RequestHandler):
        def post(self, *_: str) -> None:
            self.write(model)

        def get(self, *_: str) -> None:
            self.write(model)

        def delete(self, *_: str) -> None:
            self.set_status(204)

    return Kernels


def test_a_websocket_closed_with_the_token_as_its_reason_does_not_put_it_in_ours(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import tornado.websocket

    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    Kernels = _kernels({"id": "k1", "name": "python3", "execution_state": "dead"})  # noqa: N806

    class Ws(tornado.websocket.WebSocketHandler):
        def open(self, *_: str) -> None:  # type: ignore[override]
            self.close(4000, f"you sent {self.request.headers.get('Authorization')}")

    url, loop, thread = _tornado_server([(r"/api/kernels", Kernels),
                                         (r"/api/kernels/([^/]+)/channels", Ws),
                                         (r"/api/kernels/([^/]+)", Kernels)])
    try:
        with pytest.raises(KernelError) as info:
            RemoteKernel(url, token_env=TOKEN_ENV, startup_timeout=10).start()
    finally:
        loop.call_soon_threadsafe(loop.stop)  # type: ignore[attr-defined]
        thread.join(10)
    message = str(info.value)
    assert "you sent" in message, message  # the server's reason is kept, its token is not
    assert TOKEN not in message, message


def test_the_remote_file_tools_keep_a_token_the_server_echoes_out_of_their_errors(echo: str) -> None:
    from ipyagent.tools.remote_files import RemoteWorkspace

    ws = RemoteWorkspace(echo, TOKEN_ENV)
    try:
        result = ws.call("read_file", {"path": "notes.txt"})
    finally:
        ws.close()
    text = getattr(result, "output", str(result))
    assert "HTTP 500" in text and "[redacted $IPYAGENT_TEST_ATTACK_TOKEN]" in text, text
    assert TOKEN not in text, text


class Quiet(http.server.BaseHTTPRequestHandler):
    """A handler that logs nothing and answers with one JSON body."""

    def answer(self, status: int, body: bytes, reason: str | None = None) -> None:
        self.send_response(status, reason)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def trickle(self, size: int, pace: float, stop: threading.Event) -> None:
        """A 200 of ``size`` bytes, one each ``pace`` seconds, until ``stop`` is set."""
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        for _ in range(size):
            if stop.wait(pace):
                return
            try:
                self.wfile.write(b" ")
                self.wfile.flush()
            except OSError:
                return

    def log_message(self, *args: object) -> None:
        pass


class WhereAmI(Quiet):
    """Answers every request with an error that says the server's own address and base path."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = json.dumps({"message": f"cannot serve http://{self.headers['Host']}{self.path} "
                                      f"(host {self.headers['Host'].split(':')[0]})"}).encode()
        self.answer(500, body, f"Broken at {self.headers['Host']}")


def _read_through_where_am_i(url: str) -> tuple[str, int]:
    """What the model reads of a remote read_file from a server at ``url`` (``{port}`` filled
    in) that echoes its address in its error, and that server's port."""
    from ipyagent.tools.remote_files import RemoteWorkspace

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), WhereAmI)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    ws = RemoteWorkspace(url.format(port=srv.server_port), TOKEN_ENV)
    try:
        result = ws.call("read_file", {"path": "notes.txt"})
    finally:
        ws.close()
        srv.shutdown()
        srv.server_close()
    return getattr(result, "output", str(result)), srv.server_port


def test_the_remote_file_tools_name_the_server_where_it_echoes_its_address() -> None:
    text, port = _read_through_where_am_i("http://127.0.0.1:{port}/user/alice-private")
    assert "HTTP 500" in text and "cannot serve the remote kernel's server" in text, text
    assert "127.0.0.1" not in text and "alice-private" not in text and str(port) not in text, text


@pytest.mark.parametrize("spelling", ["http://LOCALHOST:{port}/user/alice-private",
                                      "http://127.0.0.1:{port}/user/Alice Private"])
def test_the_server_is_named_where_it_says_its_address_as_the_wire_has_it(spelling: str) -> None:
    """A host name is case-blind and a path goes percent-encoded: a server that echoes its
    Host header (lower-cased by the client) or its path (``%20``) is masked too."""
    text, port = _read_through_where_am_i(spelling)
    if "HTTP 500" not in text:  # LOCALHOST found no IPv4 listener here: nothing to check
        pytest.skip(text)
    assert "cannot serve the remote kernel's server/api/" in text, text
    assert str(port) not in text and "localhost" not in text.lower(), text
    assert "alice" not in text.lower(), text


@pytest.mark.parametrize("text, url", [
    ("certificate is not valid for 'jupyter.corp'.", "https://Jupyter.Corp:8443"),  # ssl's words
    ("cannot connect to xn--bcher-kva.corp:8443", "https://bücher.corp:8443/"),
    ("no /user/al%C3%AFce here", "https://h.corp/user/alïce")])
def test_masked_knows_the_forms_a_library_says_the_server_in(text: str, url: str) -> None:
    from ipyagent.kernel._rest import SERVER, masked

    assert SERVER in masked(text, url)
    for word in ("jupyter.corp", "xn--bcher", "al%c3%afce"):
        assert word not in masked(text, url).lower()


@pytest.mark.parametrize("bad", ["ftp://u:SECRETPASS@127.0.0.1:8888", "http://u:SECRETPASS@/x",
                                 "SECRETPASS@127.0.0.1:8888", "127.0.0.1:8888/?token=SECRETPASS",
                                 "ws://127.0.0.1:8888/#SECRETPASS"])
def test_a_kernel_url_refused_for_its_scheme_does_not_repeat_its_credentials(bad: str) -> None:
    from traitlets import TraitError

    from ipyagent import Agent

    with pytest.raises((TraitError, ValueError)) as info:
        Agent(kernel_url=bad, python_tool=False)
    message = str(info.value)
    assert "http:// or https://" in message and "SECRETPASS" not in message, message


# ---- a hostile kernel server: huge messages, malformed frames ---------------------------------

def _fake_kernel_server(protocol: str, junk: list[str | bytes],  # type: ignore[no-untyped-def]
                        expressions: object = None):
    """A tornado server speaking the kernel REST + websocket API: each request is answered as
    a kernel would, after the ``junk`` frames (an execute_request); ``big:N`` prints N bytes;
    a request with user_expressions gets ``expressions`` as their results."""
    import tornado.web
    import tornado.websocket

    from ipyagent.kernel._channels import V1, _decode, _decode_v1, _encode_v1

    Kernels = _kernels({"id": "k1", "name": "python3", "execution_state": "idle"})  # noqa: N806

    class Ws(tornado.websocket.WebSocketHandler):
        def select_subprotocol(self, subprotocols: list[str]) -> str | None:
            return V1 if protocol == V1 and V1 in subprotocols else None

        def emit(self, channel: str, kind: str, parent: dict, content: dict) -> None:  # type: ignore[type-arg]
            header = {"msg_id": f"s{id(content)}", "msg_type": kind, "session": "srv", "version": "5.3"}
            if protocol == V1:
                self.write_message(_encode_v1(channel, [header, parent, {}, content]), binary=True)
            else:
                self.write_message(json.dumps({"header": header, "msg_type": kind, "parent_header": parent,
                                               "metadata": {}, "content": content, "channel": channel}))

        def on_message(self, message: str | bytes) -> None:
            msg = _decode_v1(message) if protocol == V1 else _decode(message)
            assert msg is not None
            parent, kind = msg["header"], msg["header"]["msg_type"]
            if kind == "kernel_info_request":
                self.emit("shell", "kernel_info_reply", parent, {"status": "ok"})
                self.emit("iopub", "status", parent, {"execution_state": "idle"})
                return
            code = msg["content"]["code"]
            for frame in junk:
                text = frame.replace("PARENT", parent["msg_id"]) if isinstance(frame, str) else frame
                self.write_message(text, binary=isinstance(text, bytes))
            self.emit("iopub", "status", parent, {"execution_state": "busy"})
            if msg["content"].get("user_expressions"):
                self.emit("iopub", "status", parent, {"execution_state": "idle"})
                self.emit("shell", "execute_reply", parent, {"status": "ok", "user_expressions": expressions})
                return
            text = "x" * int(code[4:]) if code.startswith("big:") else f"ran {code}\n"
            self.emit("iopub", "stream", parent, {"name": "stdout", "text": text})
            self.emit("iopub", "status", parent, {"execution_state": "idle"})
            self.emit("shell", "execute_reply", parent, {"status": "ok", "execution_count": 1})
            if code.startswith("flood:"):  # then, the call over, messages nobody asked for
                for _ in range(int(code[6:])):
                    self.emit("iopub", "stream", {"msg_id": "someone-else"}, {"name": "stdout",
                                                                             "text": "y" * 20_000})

    return _tornado_server([(r"/api/kernels", Kernels), (r"/api/kernels/([^/]+)/channels", Ws),
                            (r"/api/kernels/([^/]+)(?:/interrupt|/restart)?", Kernels)])


def _stop(loop: object, thread: threading.Thread) -> None:
    loop.call_soon_threadsafe(loop.stop)  # type: ignore[attr-defined]
    thread.join(10)


@pytest.mark.parametrize("protocol", ["v1.kernel.websocket.jupyter.org", "json"])
def test_a_message_over_the_websocket_limit_is_refused_in_one_line(protocol: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from ipyagent.kernel import remote

    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    monkeypatch.setattr(remote, "_MIN_MESSAGE_BYTES", 256 * 1024)  # the floor, small enough to test
    monkeypatch.setattr(remote, "_MESSAGE_HEADROOM", 0)
    url, loop, thread = _fake_kernel_server(protocol, [])
    k = RemoteKernel(url, token_env=TOKEN_ENV, timeout=20, max_transfer_bytes=1000)
    try:
        k.start()
        fits = k.execute("big:200000")
        assert fits.ok and len(fits.outputs[0]["text"]) == 200_000
        huge = k.execute("big:2000000")
        after = k.execute("1")
    finally:
        k.shutdown()
        _stop(loop, thread)
    assert huge.status == "unknown", huge.text[:200]
    assert "the server sent a message over 262,144 bytes, the websocket's limit" in huge.text
    assert "xxxx" not in huge.text
    assert after.ok and after.outputs[0]["text"] == "ran 1\n" and k.reconnects == 1


def test_the_message_limit_leaves_room_for_a_pull_of_max_transfer_bytes() -> None:
    from ipyagent.kernel.remote import max_message_bytes

    assert max_message_bytes(100 * 1024 * 1024) > 100 * 1024 * 1024 * 4 // 3  # base64 of the pickle
    assert max_message_bytes(100 * 1024 * 1024) < 1024 * 1024 * 1024  # and no longer 1 GB
    assert max_message_bytes(0) == 64 * 1024 * 1024



def test_a_server_flooding_an_idle_kernel_is_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from ipyagent.kernel import remote

    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    monkeypatch.setattr(remote, "_MIN_MESSAGE_BYTES", 256 * 1024)  # so 512 KiB may wait unread
    monkeypatch.setattr(remote, "_MESSAGE_HEADROOM", 0)
    url, loop, thread = _fake_kernel_server("json", [])
    k = RemoteKernel(url, token_env=TOKEN_ENV, timeout=20, max_transfer_bytes=1000)
    try:
        assert k.execute("flood:200").ok  # 4 MB of someone else's output follows it
        flooded = k._channels
        assert flooded is not None
        give_up = time.monotonic() + 10
        while not flooded.closed and time.monotonic() < give_up:
            time.sleep(0.05)
        assert flooded.closed and flooded._queued <= 512 * 1024
        assert "bytes of messages that were not read yet (a flood)" in flooded.close_reason()
        after = k.execute("1")
    finally:
        k.shutdown()
        _stop(loop, thread)
    assert after.ok and after.outputs[0]["text"] == "ran 1\n" and k.reconnects == 1, after.text


def _v1_frame(count: int) -> bytes:
    return count.to_bytes(8, "little") + b"\x00" * 8


JUNK_V1: list[str | bytes] = [
    _v1_frame(2 ** 62),  # a count of offsets that would loop for ever
    _v1_frame(7),  # offsets past the frame's end
    b"\x01",
    "not json at all",
    # Parts of the wrong type, addressed to the running request:
    '{"header": 5, "parent_header": {"msg_id": "PARENT"}, "content": {}, "channel": "iopub"}',
]
JUNK_JSON: list[str | bytes] = [
    b"\xff\xff\xff\xff\x00\x00\x00\x00",  # nbufs 2**32-1
    b"\x00\x00\x00\x00",
    "not json at all",
    "[1, 2, 3]",
    '{"header": {"msg_type": "stream"}, "parent_header": ["PARENT"], "content": {}, "channel": "iopub"}',
    '{"header": {"msg_type": "stream"}, "parent_header": {"msg_id": "PARENT"}, "content": "x", "channel": "iopub"}',
    '{"header": {"msg_type": "stream"}, "parent_header": {"msg_id": "PARENT"}, "channel": 7}',
    # The right shape, fields of the wrong type: skipped by the collector and counted.
    '{"header": {"msg_type": "stream"}, "parent_header": {"msg_id": "PARENT"}, '
    '"content": {"name": "stdout", "text": 5}, "channel": "iopub"}',
    '{"header": {"msg_type": "display_data"}, "parent_header": {"msg_id": "PARENT"}, '
    '"content": {"data": [1], "metadata": 3}, "channel": "iopub"}',
]


@pytest.mark.parametrize("protocol, junk", [("v1.kernel.websocket.jupyter.org", JUNK_V1 + JUNK_JSON[2:]),
                                            ("json", JUNK_JSON)])
def test_malformed_frames_are_dropped_and_the_call_goes_on(protocol: str, junk: list[str | bytes],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    url, loop, thread = _fake_kernel_server(protocol, junk)
    k = RemoteKernel(url, token_env=TOKEN_ENV, timeout=20)
    try:
        first = k.execute("a = 1")
        second = k.execute("b = 2")
    finally:
        k.shutdown()
        _stop(loop, thread)
    for ex, code in ((first, "a = 1"), (second, "b = 2")):
        assert ex.ok, ex.text
        assert [o.get("text") for o in ex.outputs if o["output_type"] == "stream"] == [f"ran {code}\n"]
    assert k.reconnects == 0



def _pulled(text: object) -> dict[str, object]:
    return {"x": {"status": "ok", "data": {"text/plain": text}}}


@pytest.mark.parametrize("expressions", [
    [1, 2],  # user_expressions not an object
    {"x": {"status": "ok", "data": []}},
    _pulled(5),
    _pulled("[[[["),  # not a literal
    _pulled("('ok', 5)"),
    _pulled("('ok',)"),
    _pulled("(['ok'], 'eA==')"),  # an unhashable status
    _pulled("('ok', '!!not base64!!')"),
], ids=["expressions-a-list", "data-a-list", "text-an-int", "not-a-literal", "body-an-int", "no-body",
        "status-a-list", "not-base64"])
def test_a_pull_answer_of_the_wrong_shape_is_one_kernel_error(expressions: object,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    url, loop, thread = _fake_kernel_server("json", [], expressions)
    k = RemoteKernel(url, token_env=TOKEN_ENV, timeout=20)
    try:
        with pytest.raises(KernelError) as info:
            k.pull("v")
    finally:
        k.shutdown()
        _stop(loop, thread)
    message = str(info.value)
    assert message.startswith("pull('v') failed") and "\n" not in message, message
    assert "the kernel's answer could not be read (" in message or "its answer held no result" in message, message


def test_the_fake_kernel_server_answers_a_well_formed_pull(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control for the test above: the same server with a right answer is a pull; and
    a server that answers with a pickle (which would run code if loaded) is refused."""
    import base64
    import pickle

    from ipyagent.trust.encode import encode

    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    for data, works in ((encode({"a": [1, 2]}), True), (pickle.dumps({"a": [1, 2]}), False)):
        payload = base64.b64encode(data).decode()
        url, loop, thread = _fake_kernel_server("json", [], _pulled(repr(("ok", payload))))
        k = RemoteKernel(url, token_env=TOKEN_ENV, timeout=20)
        try:
            if works:
                assert k.pull("v") == {"a": [1, 2]}
            else:
                with pytest.raises(TypeError, match="not a value this side reads"):
                    k.pull("v")
        finally:
            k.shutdown()
            _stop(loop, thread)


# ---- a hostile REST API: a huge answer, an answer that never ends ------------------------------

class Flood(Quiet):
    """POST /api/kernels answers with a body of ``size`` bytes, sent at ``pace`` s a byte
    (0: at once); ``stop`` ends a slow answer when the test is over."""

    size = 0
    pace = 0.0
    stop = threading.Event()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self.pace:
            self.trickle(self.size, self.pace, self.stop)
        else:
            self.answer(201, b'{"id": "k1", "pad": "' + b"x" * (self.size - 23) + b'"}')


@pytest.fixture
def flood(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Flood]]:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    handler = type("Handler", (Flood,), {"stop": threading.Event()})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    handler.url = f"http://127.0.0.1:{srv.server_port}"  # type: ignore[attr-defined]
    try:
        yield handler
    finally:
        handler.stop.set()
        srv.shutdown()
        srv.server_close()


def test_a_huge_rest_answer_is_refused_unread(flood: type[Flood]) -> None:
    flood.size = 8 * 1024 * 1024
    with pytest.raises(KernelError) as info:
        RemoteKernel(flood.url, token_env=TOKEN_ENV, startup_timeout=10).start()  # type: ignore[attr-defined]
    message = str(info.value)
    assert "answered POST /api/kernels with more than 1 MiB" in message and "\n" not in message, message


def test_a_rest_answer_that_trickles_for_ever_times_out(flood: type[Flood]) -> None:
    flood.size, flood.pace = 10_000, 0.2  # a byte every 0.2 s: no single read waits 2 s
    k = RemoteKernel(flood.url, token_env=TOKEN_ENV, startup_timeout=2, request_timeout=2)  # type: ignore[attr-defined]
    with pytest.raises(KernelError) as info:
        k.start()
    assert "did not answer POST /api/kernels within 2 s" in str(info.value), info.value


class Contents(Quiet):
    """A contents API that misbehaves by file name: huge, not JSON, a list, a trickle, junk entries."""

    stop = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        name = self.path.split("?")[0].rsplit("/", 1)[-1]
        small = "content=0" in self.path
        if name == "contents":  # the root: a listing with junk among its entries
            body = json.dumps({"type": "directory", "content": [1, "x", None, {"name": "a.txt", "type": "file",
                               "size": "big"}, {"name": "d", "type": "directory"}]}).encode()
        elif small:  # every file claims to be small
            body = json.dumps({"type": "file", "size": 10}).encode()
        elif name == "huge.txt":
            body = json.dumps({"type": "file", "format": "text", "content": "x" * 3_000_000}).encode()
        elif name == "list.txt":
            body = b"[1, 2]"
        elif name == "slow.txt":
            self.trickle(100_000, 0.1, self.stop)
            return
        else:
            body = b"hello, not json"
        self.answer(200, body)


def test_the_remote_file_tools_survive_a_hostile_contents_api(monkeypatch: pytest.MonkeyPatch) -> None:
    from ipyagent.tools import remote_files
    from ipyagent.tools.remote_files import RemoteWorkspace

    monkeypatch.setattr(remote_files, "ANSWER_LIMIT", 1024 * 1024)  # small enough to test
    handler = type("Handler", (Contents,), {"stop": threading.Event()})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    ws = RemoteWorkspace(f"http://127.0.0.1:{srv.server_port}", TOKEN_ENV, timeout=1.0)
    try:
        said = {name: ws.call("read_file", {"path": name}) for name in ("huge.txt", "list.txt", "text.txt",
                                                                        "slow.txt")}
        listing = ws.call("list_files", {"path": "."})
    finally:
        ws.close()
        handler.stop.set()
        srv.shutdown()
        srv.server_close()
    for name, result in said.items():
        assert isinstance(result, ToolResult) and result.error and "\n" not in result.output, (name, result)
    assert "answered GET with more than 1.0 MB; it was not read" in said["huge.txt"].output
    assert "not a contents model" in said["list.txt"].output and "not a contents model" in said["text.txt"].output
    assert "did not finish its answer to GET within 1 s" in said["slow.txt"].output
    assert listing.splitlines()[1:] == ["d/", "a.txt  (0 bytes)"], listing
