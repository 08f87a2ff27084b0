"""A real Jupyter server (JupyterLab or Notebook 7) for browser tests, isolated in a tmp dir.

``JupyterServer`` starts ``python -m jupyterlab|notebook`` with this interpreter (so its
``python3`` kernel imports ipyagent and its packages, e.g. anywidget) on 127.0.0.1, a free port and a random token, with
its own config, data, runtime and IPython dirs — no user setting leaks in — and with the
news/announcement pop-ups and notebook windowing turned off, so a test sees a quiet,
fully rendered page. ``close()`` shuts every kernel down through the REST API, then the
server, and waits for the processes to end (kernels are the server's children).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["JupyterServer"]

# User settings that keep the page quiet and every cell in the DOM.
_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false",
                                                     "checkForUpdates": False},
}
_DISABLED = ["@jupyterlab/apputils-extension:announcements"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class JupyterServer:
    """``with JupyterServer(root, app="lab") as server: page.goto(server.url_for(path))``."""

    def __init__(self, root: Path, home: Path, app: str = "lab",
                 startup_timeout: float = 90.0) -> None:
        self.root = Path(root)
        self.home = Path(home)
        self.app = app
        self.startup_timeout = startup_timeout
        self.token = secrets.token_hex(16)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.home / f"jupyter-{app}.log"

    # -- layout ----------------------------------------------------------------------
    def _prepare(self) -> dict[str, str]:
        config, data, runtime = (self.home / d for d in ("config", "data", "runtime"))
        for d in (config, data, runtime, self.home / "ipython"):
            d.mkdir(parents=True, exist_ok=True)
        labconfig = config / "labconfig"
        labconfig.mkdir(exist_ok=True)
        (labconfig / "page_config.json").write_text(json.dumps(
            {"disabledExtensions": {name: True for name in _DISABLED}}))
        for plugin, values in _SETTINGS.items():
            package, name = plugin.rsplit("/", 1)
            folder = config / "lab" / "user-settings" / package
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "IPYTHON"))}
        env.update(JUPYTER_CONFIG_DIR=str(config), JUPYTER_DATA_DIR=str(data),
                   JUPYTER_RUNTIME_DIR=str(runtime), IPYTHONDIR=str(self.home / "ipython"),
                   JUPYTER_PLATFORM_DIRS="1", PYTHONUNBUFFERED="1")
        return env

    # -- life ------------------------------------------------------------------------
    def start(self) -> JupyterServer:
        env = self._prepare()
        self.port = _free_port()
        # ``-m jupyterlab``, not ``-m jupyter lab``: that runs the ``jupyter-lab`` script on
        # PATH, whose interpreter (its shebang) may be another environment's.
        module = "jupyterlab" if self.app == "lab" else self.app
        cmd = [sys.executable, "-m", module, "--no-browser",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={self.root}", "--ServerApp.open_browser=False",
               "--ServerApp.allow_root=True"]  # CI runs as root
        if self.app == "lab":  # no news fetch, no update check (the plugin is disabled too)
            never = "jupyterlab.handlers.announcements.NeverCheckForUpdate"
            cmd += ["--LabApp.news_url=None", f"--LabApp.check_for_updates_class={never}",
                    "--LabApp.extension_manager=readonly"]
        log = open(self.log_path, "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter {self.app} exited ({self.proc.returncode}):\n"
                                   + self.log())
            try:
                self.api("GET", "/api/status")
                return self
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.3)
        self.close()
        raise RuntimeError(f"jupyter {self.app} did not answer in {self.startup_timeout:g} s:\n"
                           + self.log())

    def __enter__(self) -> JupyterServer:  # noqa: PYI034 - Python 3.10 has no Self
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url_for(self, notebook: str) -> str:
        """The page that opens ``notebook`` (a path under the root) in this app."""
        prefix = "/lab/tree/" if self.app == "lab" else "/notebooks/"
        return f"{self.base}{prefix}{notebook}?token={self.token}"

    def api(self, method: str, path: str, timeout: float = 10.0) -> Any:
        request = urllib.request.Request(
            self.base + path, method=method,
            headers={"Authorization": f"token {self.token}"},
            data=b"" if method in ("POST", "PUT") else None)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    def kernel_pids(self) -> list[int]:
        """Processes of kernels this server started (its descendants running ipykernel)."""
        import psutil

        if self.proc is None or self.proc.poll() is not None:
            return []
        found = []
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if "ipykernel" in " ".join(child.cmdline()):
                    found.append(child.pid)
            except psutil.Error:
                continue
        return found

    def close(self) -> None:
        """Shut kernels down (REST), then the server; wait; kill what is left."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                for kernel in self.api("GET", "/api/kernels"):
                    self.api("DELETE", f"/api/kernels/{kernel['id']}", timeout=30)
            except (urllib.error.URLError, OSError, ValueError):
                pass
            try:
                self.api("POST", "/api/shutdown", timeout=30)
            except (urllib.error.URLError, OSError):
                pass
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
