"""RemoteKernel against a real ``jupyter server`` (and a real ``jupyter kernelgateway``) on
127.0.0.1 with a token: every fault is a real one — a kernel killed on the server, a kernel
deleted by another client, a TCP connection cut by a proxy between us and the server."""

from __future__ import annotations

import json
import time
import urllib.error
from collections.abc import Iterator

import psutil
import pytest

from ipyagent import Agent
from ipyagent.context.items import ToolResult
from ipyagent.errors import KernelError
from ipyagent.kernel import notes, remote
from ipyagent.kernel._channels import V1
from ipyagent.kernel.remote import RemoteKernel
from tests.helpers.kernel_servers import KernelServer, TcpProxy, free_port

TOKEN_ENV = "IPYAGENT_TEST_JUPYTER_TOKEN"


@pytest.fixture(params=["server", "gateway"])
def server(request: pytest.FixtureRequest) -> KernelServer:
    """Each test that takes it runs against a real Jupyter Server and a real Kernel Gateway."""
    return request.getfixturevalue("jupyter_server" if request.param == "server" else "kernel_gateway")


@pytest.fixture
def token(server: KernelServer, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(TOKEN_ENV, server.token)
    return server.token


@pytest.fixture
def proxy(server: KernelServer) -> Iterator[TcpProxy]:
    p = TcpProxy(server.port)
    yield p
    p.close()


def _kernel(url: str, **kw: object) -> RemoteKernel:
    kw.setdefault("timeout", 20)
    return RemoteKernel(url, token_env=TOKEN_ENV, **kw)  # type: ignore[arg-type]


@pytest.fixture
def kernel(server: KernelServer, token: str) -> Iterator[RemoteKernel]:
    k = _kernel(server.url)
    k.start()
    yield k
    k.shutdown()


def _gone(server: KernelServer, kernel_id: str) -> bool:
    try:
        server.api("GET", f"/api/kernels/{kernel_id}")
    except urllib.error.HTTPError as exc:
        return exc.code == 404
    return False


# ---- slice 1: run there, with outputs; one websocket; DELETE at close --------------------------

def test_code_runs_on_the_server_with_nbformat_outputs(kernel: RemoteKernel, server: KernelServer):
    where = kernel.execute("import os; os.getcwd()")
    assert where.ok and json.loads(where.text.replace("'", '"')) == str(server.root)
    assert kernel.kernel_id in {k["id"] for k in server.api("GET", "/api/kernels")}
    mixed = kernel.execute("print('out', flush=True); display(3); 5")
    assert mixed.ok
    assert [o["output_type"] for o in mixed.outputs] == ["stream", "display_data", "execute_result"]
    assert mixed.outputs[0] == {"output_type": "stream", "name": "stdout", "text": "out\n"}
    assert mixed.outputs[2]["data"]["text/plain"] == "5"
    err = kernel.execute("import sys; print('err', file=sys.stderr)")
    assert err.outputs == [{"output_type": "stream", "name": "stderr", "text": "err\n"}]
    assert mixed.execution_count == where.execution_count + 1
    err = kernel.execute("1/0")
    assert err.status == "error" and err.error_name == "ZeroDivisionError"
    assert "ZeroDivisionError" in err.text and "\x1b[" not in err.text  # model text: no ANSI
    assert kernel.protocol == V1  # both servers offer the binary form; it is taken


def test_the_legacy_json_message_form_works_too(server: KernelServer, token: str):
    k = _kernel(server.url)
    k._ws_protocols = ()  # what a server that offers no subprotocol (Enterprise Gateway) gets
    with k:
        assert k.protocol == "json"
        out = k.execute("print('a', flush=True); display({'x': 1}); 1/0")
        k.push(v=[1, 2])
        assert k.pull("v") == [1, 2]
    assert [o["output_type"] for o in out.outputs] == ["stream", "display_data", "error"]
    assert out.status == "error" and out.error_name == "ZeroDivisionError"


def test_displays_are_bounded_as_local_ones(server: KernelServer, token: str):
    with _kernel(server.url, max_output_bytes=1000) as k:
        flood = k.execute("for i in range(300): display(i)\nprint('x' * 50_000)")
    kinds = [o["output_type"] for o in flood.outputs]
    assert kinds.count("display_data") == 200  # OutputCollector's cap, the same as local
    assert "more displayed outputs" in flood.outputs[-1]["text"]
    assert sum(len(o["text"]) for o in flood.outputs if o["output_type"] == "stream") < 1200


def test_one_websocket_for_many_calls(server: KernelServer, token: str, proxy: TcpProxy):
    with _kernel(proxy.url) as k:
        k.execute("1+1")
        before = proxy.connections
        for i in range(20):
            assert k.execute(f"{i}+1").text == str(i + 1)
        assert proxy.connections == before  # neither a websocket nor an HTTP connection per call


def test_shutdown_deletes_the_kernel(server: KernelServer, token: str):
    k = _kernel(server.url)
    k.start()
    kernel_id = k.kernel_id
    assert kernel_id is not None and not _gone(server, kernel_id)
    k.shutdown()
    assert _gone(server, kernel_id)
    assert k.state == "shut down"
    k.shutdown()  # idempotent
    with pytest.raises(KernelError, match="shut down"):
        k.execute("1")


def test_an_agent_with_kernel_url_runs_its_python_there(jupyter_server: KernelServer,
                                                        monkeypatch: pytest.MonkeyPatch, tmp_path):
    token = jupyter_server.token
    monkeypatch.setenv(TOKEN_ENV, token)
    before = {k["id"] for k in jupyter_server.api("GET", "/api/kernels")}
    agent = Agent(model="demo", approval="auto", kernel_url=jupyter_server.url + "/",
                  kernel_token_env=TOKEN_ENV, file_tools=False, cwd=str(tmp_path))
    try:
        result = agent.run("Use Python to compute `2**100`")
        kernel = agent.kernel
        assert isinstance(kernel, RemoteKernel) and kernel.url == jupyter_server.url
        assert kernel.kernel_id not in before
        assert "digits: 31" in json.dumps([i.output for i in agent.context if isinstance(i, ToolResult)])
        said = " ".join(str(getattr(i, "content", "")) for i in agent.context)  # the demo's words
        assert "in the kernel on the remote Jupyter server" in said and "The remote kernel printed" in said
        assert "sibling" not in said
        # Recorded as run on the server, not sandboxed by ipyagent; the header says so.
        assert {i.meta.get("sandbox") for i in agent.context if isinstance(i, ToolResult)} == {"remote"}
        path = agent.save(tmp_path / "run.ipynb")
        assert "| code ran | on a remote kernel (not sandboxed by ipyagent) (" in path.read_text()
        assert result.stop_reason == "done"
    finally:
        agent.close()
    saved = path.read_text()
    assert "digits: 31" in saved and token not in saved
    assert _gone(jupyter_server, kernel.kernel_id or "") or kernel.kernel_id is None


def test_setting_kernel_url_moves_the_kernel(jupyter_server: KernelServer, monkeypatch: pytest.MonkeyPatch,
                                             tmp_path):
    monkeypatch.setenv(TOKEN_ENV, jupyter_server.token)
    agent = Agent(model="demo", approval="auto", file_tools=False, cwd=str(tmp_path))
    try:
        local = agent.kernel
        assert not isinstance(local, RemoteKernel)
        agent.kernel_token_env = TOKEN_ENV
        agent.kernel_url = jupyter_server.url  # what %config Agent.kernel_url = ... does
        remote = agent.kernel
        assert isinstance(remote, RemoteKernel)
        assert remote.execute("import os; os.getcwd()").text.strip("'") == str(jupyter_server.root)
    finally:
        agent.close()


# ---- slice 2: timeouts, deaths, drops, wrong tokens, nothing listening ---------------------

def test_timeout_interrupts_and_keeps_the_variables(kernel: RemoteKernel):
    kernel.execute("kept = 41")
    slow = kernel.execute("import time\nfor _ in range(600): time.sleep(0.1)", timeout=1)
    assert slow.status == "timeout" and slow.text == notes.interrupted(1)
    assert "KeyboardInterrupt" in json.dumps(slow.outputs)  # the notebook still shows it
    assert kernel.execute("kept + 1").text == "42"


def test_a_kernel_killed_on_the_server_is_a_death_and_the_run_goes_on(kernel: RemoteKernel,
                                                                      server: KernelServer):
    kernel.execute("lost = 1")
    pid = server.kernel_pid(kernel.kernel_id or "")
    running = kernel.execute_async("import os, signal, time\nprint('before', flush=True)\n"
                                   f"time.sleep(0.3); os.kill({pid}, signal.SIGKILL)")
    from ipyagent._util import eventloop as _eventloop

    died = _eventloop.run_sync(running)
    assert died.status == "died" and died.restarted
    assert died.text.startswith("before\n")
    cause = died.text.split("[The kernel died (", 1)[1].split(") while running", 1)[0]
    assert died.text.endswith(notes.died_running(cause))
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    after = kernel.execute("'lost' in globals(), 2 + 2")
    assert after.ok and after.text == "(False, 4)"  # a fresh kernel: the variable is gone


def test_a_kernel_deleted_while_idle_is_reported_at_the_next_call(kernel: RemoteKernel,
                                                                  server: KernelServer):
    kernel.execute("lost = 1")
    old = kernel.kernel_id
    server.api("DELETE", f"/api/kernels/{old}")  # another client (or a culler) removes it
    time.sleep(remote._IDLE_CHECK + 0.2)  # the server does not close our websocket: the check finds it
    after = kernel.execute("'lost' in globals()")
    assert after.ok and after.restarted and kernel.kernel_id != old
    first, rest = after.text.split("\n", 1)
    cause = first.split("[The kernel had died (", 1)[1].split(") since the last call", 1)[0]
    assert first == notes.died_idle(cause) and "deleted or culled" in cause
    assert rest == "False"


def test_a_dropped_websocket_reconnects_without_losing_state(server: KernelServer, token: str,
                                                             proxy: TcpProxy, caplog):
    with _kernel(proxy.url) as k:
        k.execute("kept = 1")
        assert proxy.cut() >= 1
        time.sleep(0.3)
        with caplog.at_level("WARNING", logger="ipyagent.kernel.remote"):
            again = k.execute("kept += 1; kept")
        assert again.ok and again.text == "2" and not again.restarted
        assert k.reconnects == 1 and "reconnecting to the remote kernel" in caplog.text
        assert token not in caplog.text


def test_a_call_in_flight_when_the_connection_drops_is_unknown_and_not_sent_again(
        server: KernelServer, token: str, proxy: TcpProxy):
    from ipyagent._util import eventloop as _eventloop

    with _kernel(proxy.url) as k:
        k.execute("ran = []")
        future = _eventloop.submit(k.execute_async("ran.append(1)\nimport time; time.sleep(1.5)\n'done'"))
        time.sleep(0.6)
        proxy.cut()
        lost = future.result(30)
        assert lost.status == "unknown" and not lost.restarted
        assert "Whether it finished is unknown: it was not run again" in lost.text
        time.sleep(1.5)
        assert k.execute("len(ran)").text == "1"  # ran once, never re-sent


def test_a_wrong_token_is_one_clear_line_without_the_token(server: KernelServer,
                                                           monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(TOKEN_ENV, "not-the-token-0123456789")
    k = _kernel(server.url)
    with pytest.raises(KernelError) as info:
        k.start()
    message = str(info.value)
    assert "\n" not in message and "not-the-token" not in message and server.token not in message
    assert "refused" in message and f"${TOKEN_ENV}" in message
    assert "(HTTP 403)" in message or "(HTTP 401)" in message  # a server: 403, a gateway: 401
    assert "not-the-token" not in repr(k)
    monkeypatch.delenv(TOKEN_ENV)
    with pytest.raises(KernelError, match=f"needs a token: set \\${TOKEN_ENV}"):
        _kernel(server.url).start()


def test_a_restart_is_not_taken_for_a_death(kernel: RemoteKernel):
    kernel.execute("gone = 1")
    kernel.restart()
    after = kernel.execute("'gone' in globals()")
    assert after.ok and after.text == "False" and not after.restarted  # asked for: no death note


def test_a_cancelled_call_interrupts_the_remote_code(kernel: RemoteKernel):
    from ipyagent._util import eventloop as _eventloop

    future = _eventloop.submit(kernel.execute_async("import time\nfor _ in range(600): time.sleep(0.1)"))
    time.sleep(1.0)
    future.cancel()  # Ctrl-C on a %agent cell, a stopped run
    time.sleep(1.0)
    quick = kernel.execute("'free'", timeout=10)
    assert quick.ok and quick.text == "'free'"  # the loop was interrupted, not waited out


def test_a_call_cancelled_before_its_cell_started_does_not_run_later(kernel: RemoteKernel):
    """An interrupt that reaches an idle kernel is lost: a cell given up while still queued
    behind another would then run whole. The next request first interrupts it once it
    starts, and the kernel keeps its variables."""
    from ipyagent._util import eventloop as _eventloop

    kernel.execute("kept = 1; late = None")
    channels = kernel._channels
    assert channels is not None
    # Another client's cell keeps the kernel busy, so the next one queues behind it.
    _eventloop.run_sync(_send(channels, "import time; time.sleep(2)"))
    future = _eventloop.submit(kernel.execute_async("import time; time.sleep(3); late = 1"))
    time.sleep(0.5)  # sent, still queued behind the sleep
    future.cancel()
    after = kernel.execute("print(late, kept)", timeout=30)
    assert after.ok and after.text.strip() == "None 1", after.text
    assert "restarted" not in after.text


async def _send(channels: object, code: str) -> None:
    channels.send("shell", "execute_request", {  # type: ignore[attr-defined]
        "code": code, "silent": False, "store_history": True, "user_expressions": {},
        "allow_stdin": False, "stop_on_error": False})


def test_a_redirect_is_not_followed_and_the_token_not_sent_on(token: str, monkeypatch: pytest.MonkeyPatch):
    """A server (or something in front of it) answering 302 to another host: no request follows."""
    import http.server
    import threading

    seen: list[str] = []

    class Catch(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            seen.append(self.headers.get("Authorization", ""))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Catch)

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.send_response(307)
            self.send_header("Location", f"http://localhost:{other.server_port}/api/kernels")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    redirecting = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    for srv in (other, redirecting):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(KernelError, match="redirects are not followed") as info:
            _kernel(f"http://127.0.0.1:{redirecting.server_port}").start()
    finally:
        for srv in (other, redirecting):
            srv.shutdown()
            srv.server_close()
    assert seen == [] and token not in str(info.value)


def test_a_url_with_nothing_listening_is_one_line():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(KernelError) as info:
        _kernel(url).start()
    assert str(info.value).startswith(f"nothing is listening at {url} (") and "\n" not in str(info.value)


def test_the_python_tool_reports_an_unreachable_server_as_a_value(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    agent = Agent(model="demo", approval="auto", kernel_url=url, kernel_token_env=TOKEN_ENV,
                  file_tools=False, cwd=str(tmp_path))
    try:
        agent.run("Use Python to compute `2**100`")
        outputs = [i.output for i in agent.context if isinstance(i, ToolResult)]
    finally:
        agent.close()
    # As a value, and without the URL (the model's provider needs no internal host name)
    assert any("nothing is listening at the remote kernel's server" in o for o in outputs), outputs
    assert not any(url.split("//")[1] in o for o in outputs), outputs


def test_the_token_goes_only_in_the_header_and_local_secrets_stay_here(
        server: KernelServer, token: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LOCAL_ONLY_API_KEY", "local-secret-value-42")
    with _kernel(proxy.url, env={"KERNEL_PLAIN": "named"}) as k:
        k.execute("1")
        shown = repr(k) + k.where
    sent = bytes(proxy.sent).decode("latin-1")
    assert "local-secret-value-42" not in sent
    assert sent.count(token) == sent.count(f"Authorization: token {token}") > 0
    assert f"token={token}" not in sent  # never in a URL's query
    assert token not in shown


def test_kernel_url_refuses_credentials_and_queries():
    from traitlets import TraitError

    for bad in ("ftp://127.0.0.1:8888", "http://u:p@127.0.0.1:8888", "http://127.0.0.1:8888/?token=abc",
                "127.0.0.1:8888"):
        with pytest.raises(TraitError, match="kernel_url"):
            Agent(model="demo", python_tool=False, file_tools=False, kernel_url=bad)


def test_the_banner_says_where_code_runs_and_never_the_token(jupyter_server: KernelServer,
                                                             monkeypatch: pytest.MonkeyPatch):
    token = jupyter_server.token
    monkeypatch.setenv(TOKEN_ENV, token)
    from ipyagent.frontends.magics import AgentMagics

    agent = Agent(model="demo", python_tool=True, file_tools=False, kernel_url=jupyter_server.url,
                  kernel_token_env=TOKEN_ENV)
    try:
        line = AgentMagics.sandbox_line(_Holder(agent))  # type: ignore[arg-type]
    finally:
        agent.close()
    assert line is not None and f"code runs on {jupyter_server.url}" in line
    assert "not sandboxed by ipyagent" in line and token not in line


class _Holder:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def get_agent(self) -> Agent:
        return self.agent


def test_no_kernel_outlives_its_object(server: KernelServer, token: str):
    import gc

    k = _kernel(server.url)
    k.start()
    kernel_id = k.kernel_id or ""
    del k
    gc.collect()
    assert _gone(server, kernel_id)


# ---- slice 3: values over the wire, and what a gateway passes on ---------------------------

def test_push_and_pull_over_the_wire(kernel: RemoteKernel):
    big = bytes(range(256)) * 4096  # 1 MB: one websocket message each way
    kernel.push(df={"a": [1, 2, 3]}, blob=big)
    assert kernel.execute("len(blob), df['a'][-1]").text == "(1048576, 3)"
    kernel.execute("made = {'n': sum(df['a']), 'tail': blob[-3:]}")
    assert kernel.pull("made") == {"n": 6, "tail": big[-3:]}
    with pytest.raises(NameError, match="not defined in the sibling"):
        kernel.pull("nothing_here")


def test_kernel_env_reaches_a_gateway_kernel_and_nothing_else_does(kernel_gateway: KernelServer,
                                                                   monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(TOKEN_ENV, kernel_gateway.token)
    monkeypatch.setenv("KERNEL_LOCAL_ONLY", "not-named")
    with _kernel(kernel_gateway.url, env={"KERNEL_USERNAME": "ana", "KERNEL_NAMESPACE": "gpu"}) as k:
        seen = k.execute("import os, json; json.dumps({k: v for k, v in os.environ.items() "
                         "if k.startswith('KERNEL_') or 'TOKEN' in k})")
    env = json.loads(seen.text.strip("'"))
    assert env.get("KERNEL_USERNAME") == "ana" and env.get("KERNEL_NAMESPACE") == "gpu"
    assert "KERNEL_LOCAL_ONLY" not in env and TOKEN_ENV not in env


def test_a_transcript_records_where_code_ran_and_never_sends_code_there(jupyter_server: KernelServer,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path):
    """A notebook someone sent cannot point your agent's code at their server."""
    import nbformat

    monkeypatch.setenv(TOKEN_ENV, jupyter_server.token)
    agent = Agent(model="demo", approval="auto", kernel_url=jupyter_server.url, kernel_token_env=TOKEN_ENV,
                  file_tools=False, cwd=str(tmp_path))
    try:
        agent.run("Use Python to compute `2**100`")
        path = agent.save(tmp_path / "run.ipynb")
    finally:
        agent.close()
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata["ipyagent"]["settings"]["kernel_url"] == jupyter_server.url
    nb.metadata["ipyagent"]["settings"]["kernel_url"] = "http://attacker.example:8888"
    nbformat.write(nb, path)
    loaded = Agent.from_transcript(path, python_tool=False, file_tools=False)
    try:
        assert loaded.kernel_url == ""
    finally:
        loaded.close()


def test_config_kernel_url_in_ipython_moves_agent_code_to_the_server(ip, jupyter_server: KernelServer,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path):
    """The issue's "done": %load_ext, %config Agent.kernel_url (+ the token variable), %agent."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    import ipyagent

    monkeypatch.setenv(TOKEN_ENV, jupyter_server.token)
    monkeypatch.chdir(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            ip.run_line_magic("load_ext", "ipyagent")  # warms a local sibling
            ip.run_line_magic("config", "Agent.approval = 'auto'")
            ipyagent.current().autosave = ""
            ip.run_line_magic("config", f"Agent.kernel_token_env = '{TOKEN_ENV}'")
            ip.run_line_magic("config", f"Agent.kernel_url = '{jupyter_server.url}'")
            result = ip.run_cell("%agent Use Python to compute `2**100`")
        agent = ipyagent.current()
        kernel = agent.kernel
        assert result.success and isinstance(kernel, RemoteKernel)
        assert kernel.kernel_id in {k["id"] for k in jupyter_server.api("GET", "/api/kernels")}
        assert "digits: 31" in json.dumps([i.output for i in agent.context if isinstance(i, ToolResult)])
        from ipyagent.frontends import magics

        assert magics._MAGICS is not None
        banner = magics._MAGICS.banner()
        assert f"code runs on {jupyter_server.url}" in banner and jupyter_server.token not in banner
        # The %agent after the %config says where its code went, and that the shell tool
        # the %load_ext banner offered is not offered there.
        said = err.getvalue()
        assert f"ipyagent: code runs on {jupyter_server.url} (remote kernel" in said, said
        assert "ipyagent: shell tool: off (the kernel is remote" in said, said
        assert jupyter_server.token not in out.getvalue() + err.getvalue()
    finally:
        ip.run_line_magic("unload_ext", "ipyagent")
        ip.config.pop("Agent", None)


def test_the_shell_tool_follows_the_kernel_to_the_server(jupyter_server: KernelServer,
                                                         monkeypatch: pytest.MonkeyPatch, tmp_path):
    monkeypatch.setenv(TOKEN_ENV, jupyter_server.token)
    # 'auto' offers the shell only inside ipyagent's sandbox, which a remote kernel is not in.
    auto = Agent(model="demo", kernel_url=jupyter_server.url, kernel_token_env=TOKEN_ENV,
                 file_tools=False, skills_enabled=False, shell_tool="auto")
    try:
        assert "shell" not in auto.tools.names and "remote" in auto.shell_status()[1]
    finally:
        auto.close()
    agent = Agent(model="demo", approval="auto", kernel_url=jupyter_server.url, kernel_token_env=TOKEN_ENV,
                  file_tools=False, skills_enabled=False, shell_tool="on", cwd=str(tmp_path))
    try:
        assert "shell" in agent.tools.names and "on the server" in agent.shell_status()[1]
        result = agent.run("run `pwd; echo made-here > marker.txt`")
        outputs = [i for i in agent.context if isinstance(i, ToolResult) and i.name == "shell"]
        assert result.stop_reason == "done" and outputs and not outputs[0].error
        assert outputs[0].meta["sandbox"] == "remote"
        assert "remote Jupyter server" in agent.tools["shell"].description  # the model is told
        assert "with bash on the remote Jupyter server" in result.text and "sibling" not in result.text
        # It ran in the server's directory for the kernel, not in this machine's tmp_path.
        assert not (tmp_path / "marker.txt").exists()
        assert (jupyter_server.root / "marker.txt").read_text().strip() == "made-here"
    finally:
        agent.close()


def test_a_dead_server_is_told_to_the_model_without_its_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """The python tool's error when the server is gone names "the remote kernel's server",
    not its URL: a private host name is no business of the model's provider."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    monkeypatch.setenv(TOKEN_ENV, "tok")
    url = f"http://127.0.0.1:{port}/user/alice"
    with Agent(model="demo", approval="auto", kernel_url=url, kernel_token_env=TOKEN_ENV,
               file_tools=False, skills_enabled=False) as agent:
        agent.run("Use Python to compute `2**100`")
        results = [i for i in agent.context if isinstance(i, ToolResult)]
        assert results and results[0].error
        told = results[0].output
        assert "the remote kernel's server" in told, told
        assert "127.0.0.1" not in told and str(port) not in told and "alice" not in told


def test_a_server_gone_mid_call_is_told_without_its_address(jupyter_server: KernelServer,
                                                            monkeypatch: pytest.MonkeyPatch):
    """The server goes away while code runs: the call's note (the text the python tool hands
    the model) says why without the server's URL (it said 'nothing is listening at http://…')."""
    from ipyagent._util import eventloop as _eventloop

    monkeypatch.setenv(TOKEN_ENV, jupyter_server.token)
    proxy = TcpProxy(jupyter_server.port)
    k = _kernel(proxy.url)
    try:
        k.execute("x = 1")
        future = _eventloop.submit(k.execute_async("import time; time.sleep(1.5)\n'done'"))
        time.sleep(0.6)
        proxy.close()  # nothing listens there any more: the check after the drop fails too
        lost = future.result(30)
        assert lost.status == "unknown", lost.text
        assert "the remote kernel's server" in lost.text, lost.text
        assert "127.0.0.1" not in lost.text and str(proxy.port) not in lost.text, lost.text
    finally:
        proxy.close()
        kernel_id = k.kernel_id
        k.shutdown()  # its DELETE finds nothing listening: delete it directly
        if kernel_id and not _gone(jupyter_server, kernel_id):
            jupyter_server.api("DELETE", f"/api/kernels/{kernel_id}")
