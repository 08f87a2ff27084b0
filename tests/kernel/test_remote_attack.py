"""A hostile (or merely careless) server in place of a Jupyter server: what it sends back
never carries the token into an error line (real HTTP servers on 127.0.0.1)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

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


def test_a_websocket_closed_with_the_token_as_its_reason_does_not_put_it_in_ours(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import tornado.web
    import tornado.websocket

    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    model = {"id": "k1", "name": "python3", "execution_state": "dead"}

    class Kernels(tornado.web.RequestHandler):
        def post(self) -> None:
            self.write(model)

        def get(self, *_: str) -> None:
            self.write(model)

        def delete(self, *_: str) -> None:
            self.set_status(204)

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


class WhereAmI(http.server.BaseHTTPRequestHandler):
    """Answers every request with an error that says the server's own address and base path."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = json.dumps({"message": f"cannot serve http://{self.headers['Host']}{self.path} "
                                      f"(host {self.headers['Host'].split(':')[0]})"}).encode()
        self.send_response(500, f"Broken at {self.headers['Host']}")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_the_remote_file_tools_name_the_server_where_it_echoes_its_address() -> None:
    from ipyagent.tools.remote_files import RemoteWorkspace

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), WhereAmI)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    ws = RemoteWorkspace(f"http://127.0.0.1:{srv.server_port}/user/alice-private", TOKEN_ENV)
    try:
        result = ws.call("read_file", {"path": "notes.txt"})
    finally:
        ws.close()
        srv.shutdown()
        srv.server_close()
    text = getattr(result, "output", str(result))
    assert "HTTP 500" in text and "cannot serve the remote kernel's server" in text, text
    assert "127.0.0.1" not in text and "alice-private" not in text and str(srv.server_port) not in text, text


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
