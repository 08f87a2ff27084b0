"""Real kernel servers for the remote-kernel tests: a Jupyter Server, a Kernel Gateway, and a
TCP proxy a test can cut to drop the websocket.

``KernelServer("server"|"gateway", home)`` starts ``python -m jupyter_server`` or
``python -m kernel_gateway`` with this interpreter on 127.0.0.1, a free port and a random
token, with its own Jupyter/IPython dirs (no user setting leaks in); ``close()`` deletes
its kernels through the REST API, stops it and waits for its processes to end.
``TcpProxy(port)`` forwards a local port to it; ``cut()`` closes every open connection
(the listener stays, so reconnecting works), which is what a dropped network does.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["KernelServer", "TcpProxy", "free_port"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class KernelServer:
    """A real Jupyter Server (``kind="server"``) or Kernel Gateway (``"gateway"``) on 127.0.0.1."""

    def __init__(self, kind: str, home: Path, startup_timeout: float = 60.0) -> None:
        self.kind = kind
        self.home = Path(home)
        self.root = self.home / "root"
        self.token = secrets.token_hex(16)
        self.port = 0
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.home / f"{kind}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        for d in ("config", "data", "runtime", "ipython", "root"):
            (self.home / d).mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "IPYTHON", "KG_"))}
        env.update(JUPYTER_CONFIG_DIR=str(self.home / "config"), JUPYTER_DATA_DIR=str(self.home / "data"),
                   JUPYTER_RUNTIME_DIR=str(self.home / "runtime"), IPYTHONDIR=str(self.home / "ipython"),
                   JUPYTER_PLATFORM_DIRS="1", PYTHONUNBUFFERED="1")
        return env

    def _command(self) -> list[str]:
        if self.kind == "server":
            return [sys.executable, "-m", "jupyter_server", "--ServerApp.ip=127.0.0.1",
                    f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
                    f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
                    "--ServerApp.open_browser=False", "--ServerApp.allow_root=True"]
        return [sys.executable, "-m", "kernel_gateway", "--KernelGatewayApp.ip=127.0.0.1",
                f"--KernelGatewayApp.port={self.port}", "--KernelGatewayApp.port_retries=0",
                f"--KernelGatewayApp.auth_token={self.token}",
                "--JupyterWebsocketPersonality.list_kernels=True"]

    def start(self) -> KernelServer:
        env = self._env()
        self.port = free_port()
        log = open(self.log_path, "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(self._command(), cwd=self.root, env=env, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited ({self.proc.returncode}):\n{self.log()}")
            try:
                self.api("GET", "/api")
                return self
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.2)
        self.close()
        raise RuntimeError(f"{self.kind} did not answer in {self.startup_timeout:g} s:\n{self.log()}")

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """One REST call with the token (the tests' second client)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers={"Authorization": f"token {self.token}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def kernel_pid(self, kernel_id: str) -> int:
        """The pid of the kernel process the server runs for ``kernel_id`` (from its cmdline)."""
        import psutil

        assert self.proc is not None
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if any(kernel_id in part for part in child.cmdline()):
                    return int(child.pid)
            except psutil.Error:
                continue
        raise LookupError(f"no process for kernel {kernel_id}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def close(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                for kernel in self.api("GET", "/api/kernels") or []:
                    self.api("DELETE", f"/api/kernels/{kernel['id']}")
            except (urllib.error.URLError, OSError, ValueError):
                pass
            import psutil

            children = psutil.Process(proc.pid).children(recursive=True)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
            for child in children:
                try:
                    child.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(children, timeout=5)
        self.proc = None


class TcpProxy:
    """127.0.0.1:``port`` → ``target_port``, byte for byte; ``cut()`` drops every open connection."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.sent = bytearray()  # every byte the client sent upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self.connections = 0  # accepted so far
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self.connections += 1
                self._open += [client, upstream]
            for a, b, record in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pipe, args=(a, b, record), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if record:
                    with self._lock:
                        self.sent += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> int:
        """Close every open connection (both sides), as a dropped network would; how many."""
        with self._lock:
            conns, self._open = self._open, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        return len(conns) // 2

    def close(self) -> None:
        self._listener.close()
        self.cut()
