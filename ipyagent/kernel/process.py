"""The sibling kernel's process: environment, resource limits, private files, shutdown.

``_Handle`` owns the live ``AsyncKernelManager`` (the process) and ``AsyncKernelClient``
(the sockets). It is kept apart from ``SiblingKernel`` so that ``weakref.finalize`` can
shut the process down when the SiblingKernel is collected or the interpreter exits,
without keeping the SiblingKernel itself alive.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from jupyter_client import AsyncKernelClient, AsyncKernelManager

from .._util import eventloop as _eventloop
from ..trust.secrets import SECRET_MARKERS  # one rule for the sibling's scrub and the save guard
from .sandbox import SandboxPlan

__all__ = ["parse_memory", "scrub_env", "sandbox_env", "SANDBOX_ENV", "SECRET_MARKERS"]

_SIGNAL_HINTS = {
    "SIGXCPU": ": its CPU-time limit (cpu_limit) was used up",
    "SIGKILL": ": killed from outside, e.g. by the system's out-of-memory killer",
    "SIGSEGV": ": a crash in native code",
}
_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2,
          "MIB": 1024**2, "G": 1024**3, "GB": 1024**3, "GIB": 1024**3, "T": 1024**4,
          "TB": 1024**4, "TIB": 1024**4}  # fmt: skip


def parse_memory(value: str | int | None) -> int | None:
    """Bytes for ``"2GB"``, ``"512MB"``, ``"1.5 GiB"`` or an int (binary units); None stays None."""
    if value is None or isinstance(value, int):
        return value
    text = str(value).strip().upper().replace(" ", "")
    number = text.rstrip("KMGTIB")
    unit = text[len(number) :]
    try:
        return int(float(number) * _UNITS[unit])
    except (KeyError, ValueError):
        raise ValueError(f"memory_limit {value!r} is not a size like '2GB' or '512MB'") from None


def scrub_env(
    base: Mapping[str, str] | None = None,
    extra_secrets: Iterable[str] = (),
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A copy of the environment without secrets (names containing KEY, TOKEN, SECRET, PASSWORD)."""
    extra = {name.upper() for name in extra_secrets}
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if k.upper() not in extra and not any(m in k.upper() for m in SECRET_MARKERS)
    }
    # Plots become display_data even when the user's own session uses another backend.
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    env.update(overrides or {})
    return env


# What of the user's environment enters the sandbox: an allow-list, never a deny-list
# (MYSQL_PWD, DATABASE_URL, SLACK_WEBHOOK_URL... have no pattern in common). Proxies and
# index URLs are left out too: they carry credentials as often as not.
SANDBOX_ENV = ("PATH", "LANG", "LANGUAGE", "TERM", "TZ", "COLUMNS", "LINES", "NO_COLOR",
               "FORCE_COLOR", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8",
               "PYTHONWARNINGS", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
               "LD_LIBRARY_PATH", "SSL_CERT_FILE", "SSL_CERT_DIR", "OMP_NUM_THREADS",
               "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_MAX_THREADS")


def sandbox_env(base: Mapping[str, str] | None = None, names: Iterable[str] = (),
                overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The sandbox's environment: ``SANDBOX_ENV`` and ``LC_*``, plus the ``names`` the user
    lists (``Agent.sandbox_env``), from ``base``; nothing else of the user's enters."""
    source = os.environ if base is None else base
    wanted = set(SANDBOX_ENV) | set(names)
    env = {k: v for k, v in source.items() if k in wanted or k.startswith("LC_")}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    # No bytecode written beside your modules: a .pyc is code that would need your click.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(overrides or {})
    return env


# Why a private IPYTHONDIR: the model's code stays out of the user's history database
# (and history off saves ~2 ms per call), and the user's profile (startup files,
# extensions, ipyagent itself) does not run in the sibling. Non-IPython kernels ignore it.
_KERNEL_CONFIG = "c.HistoryManager.enabled = False\n"


def _private_ipython_dir(tmpdir: str) -> str:
    path = os.path.join(tmpdir, "ipython")
    profile = os.path.join(path, "profile_default")
    os.makedirs(profile, exist_ok=True)
    for name in ("ipython_config.py", "ipython_kernel_config.py"):
        with open(os.path.join(profile, name), "w", encoding="utf-8") as f:
            f.write(_KERNEL_CONFIG)
    return path


class _Limits:
    """Resource limits for the kernel, applied by a tiny exec wrapper (``_limit_exec.py``).

    Not a ``preexec_fn``: that runs Python in the forked child and makes CPython run the
    at-fork handlers in the parent, which take locks other threads hold (the warm-up
    thread starts kernels while the main thread submits work: "release unlocked lock").
    The wrapper sets the limits and execs the kernel command, so the pid stays the kernel's.
    """

    def __init__(self, address_space: int | None, cpu_seconds: int | None,
                 processes: int | None = None, cgroup: str | None = None) -> None:
        self.address_space = address_space
        self.cpu_seconds = cpu_seconds
        self.processes = processes
        self.cgroup = cgroup

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.address_space, self.cpu_seconds, self.processes, self.cgroup))

    def __repr__(self) -> str:
        return (f"_Limits(address_space={self.address_space}, cpu_seconds={self.cpu_seconds}, "
                f"processes={self.processes}, cgroup={self.cgroup!r})")

    def argv(self) -> list[str]:
        """The wrapper's command line, to put in front of the kernel's."""
        # -I -S: no site, no user paths, no ipyagent import: a ~10 ms start.
        cmd = [sys.executable, "-I", "-S", _LIMIT_EXEC]
        for flag, value in (("--as", self.address_space), ("--cpu", self.cpu_seconds),
                            ("--nproc", self.processes), ("--cgroup", self.cgroup)):
            if value is not None:
                cmd += [flag, str(value)]
        return [*cmd, "--"]


_LIMIT_EXEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_limit_exec.py")


class LimitedKernelManager(AsyncKernelManager):
    """An AsyncKernelManager whose kernel command starts under resource limits."""

    limits: _Limits | None = None

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        cmd = super().format_kernel_cmd(extra_arguments)
        return self.limits.argv() + cmd if self.limits else cmd


def _user_tasks() -> int:
    """Processes and threads of this user now: RLIMIT_NPROC counts all of them, not the sandbox's."""
    uid, count = os.getuid(), 0
    try:
        names = os.listdir("/proc")
    except OSError:
        return 0
    for name in names:
        if name.isdigit():
            try:
                st = os.stat(f"/proc/{name}")
                if st.st_uid == uid:
                    count += st.st_nlink - 2 if os.path.isdir(f"/proc/{name}/task") else 1
            except OSError:
                continue
    return count


def process_limit(limit: int) -> tuple[int | None, str | None]:
    """(RLIMIT_NPROC, pids cgroup directory) that let the sandbox run ``limit`` more tasks.

    RLIMIT_NPROC counts every process of the user, so the limit is the user's count now
    plus ``limit``; root ignores it, so root gets a pids cgroup (cgroup v1) when one can
    be made. The cgroup is removed by ``_Handle.cleanup_files``.
    """
    if os.geteuid() != 0:
        return _user_tasks() + limit, None
    base = "/sys/fs/cgroup/pids"
    if not os.path.isfile(os.path.join(base, "cgroup.procs")):
        return None, None
    try:
        mine = [line.split(":", 2)[2].strip() for line in open("/proc/self/cgroup", encoding="ascii")
                if line.split(":")[1] == "pids"]
        parent = os.path.join(base, mine[0].lstrip("/")) if mine else base
        path = tempfile.mkdtemp(prefix="ipyagent-sibling-", dir=parent)
        with open(os.path.join(path, "pids.max"), "w", encoding="ascii") as f:
            f.write(str(limit))
    except (OSError, IndexError):
        return None, None
    return None, path


class SandboxedKernelManager(LimitedKernelManager):
    """An AsyncKernelManager whose kernel command runs inside bubblewrap.

    The channels use ZeroMQ IPC sockets in the kernel's private directory (bound into the
    sandbox; TCP loopback is gone when the network is off), and interrupts are messages:
    a SIGINT to the process group would stop bwrap itself, and --new-session keeps the
    kernel out of that group anyway.
    """

    plan: SandboxPlan | None = None
    stage_argv: list[str] = []  # the staging helper in front of bwrap: overlay, network

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        cmd = AsyncKernelManager.format_kernel_cmd(self, extra_arguments)
        assert self.plan is not None
        env = self._launch_args.get("env") if isinstance(self._launch_args, dict) else None
        # The limits wrap everything (inherited inside; the cgroup file is outside); the
        # staging helper makes the namespaces bwrap runs in.
        cmd = self.stage_argv + self.plan.argv(cmd, env if isinstance(env, dict) else None)
        return self.limits.argv() + cmd if self.limits else cmd

    async def _async_pre_start_kernel(self, **kw: Any) -> tuple[list[str], dict[str, Any]]:
        if self.kernel_spec is not None:
            self.kernel_spec.interrupt_mode = "message"
        return await super()._async_pre_start_kernel(**kw)


@dataclass
class _Handle:
    """The live process and sockets; kept apart from SiblingKernel so a finalizer can reach it."""

    km: AsyncKernelManager | None = None
    kc: AsyncKernelClient | None = None
    log: IO[str] | None = None
    log_path: str | None = None
    tmpdir: str | None = None  # private files: the log (unless given) and IPYTHONDIR
    sandboxed: bool = False  # in bwrap: its exit code 128+N means the kernel died of signal N
    cgroup: str | None = None  # the sandbox's pids cgroup (root only), removed with the files
    nproc: int | None = None  # the sandbox's RLIMIT_NPROC (not root)
    pids: list[int] = field(default_factory=list)
    start_task: asyncio.Future[None] | None = None  # a (background) start, owned by the engine loop

    @property
    def pid(self) -> int | None:
        proc = getattr(self.km.provisioner, "process", None) if self.km else None
        return proc.pid if proc is not None else None

    def exit_cause(self) -> str:
        """'killed by signal SIGSEGV' / 'exit code 1' / 'unknown cause'."""
        proc = getattr(self.km.provisioner, "process", None) if self.km else None
        code = proc.poll() if proc is not None else None
        if code is None:
            return "unknown cause"
        if self.sandboxed and 128 < code < 128 + 65:
            code = 128 - code  # bwrap exits 128+N for a kernel killed by signal N
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                return f"killed by signal {-code}"
            return f"killed by signal {name}{_SIGNAL_HINTS.get(name, '')}"
        return f"exit code {code}"

    def log_tail(self, n: int = 1500) -> str:
        """The end of the kernel's stderr log, for start-up errors."""
        if not self.log_path:
            return ""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-n:].strip()
        except OSError:
            return ""

    async def close_all(self) -> None:
        """Cancel a start in progress, shut down, remove files; runs on the engine loop."""
        task = self.start_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()  # a start in progress must not leave a kernel behind
            await asyncio.gather(task, return_exceptions=True)
        await self.aclose()
        self.cleanup_files()

    async def aclose(self, now: bool = False) -> None:
        """Shut down (graceful: a short wait, then kill; ``now``: kill); runs on the engine loop."""
        km, kc = self.km, self.kc
        self.km = self.kc = None
        if kc is not None:
            kc.stop_channels()
        if km is not None and km.has_kernel:
            try:
                await km.shutdown_kernel(now=now)
            except Exception:  # noqa: BLE001 - still make sure the process is gone
                self.km = km
                self.kill()
        self.cleanup_files()

    def kill(self) -> None:
        """Hard kill from any thread (finalizers, a stopped engine loop)."""
        km, self.km, self.kc = self.km, None, None
        proc = getattr(km.provisioner, "process", None) if km else None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # launched with start_new_session
            except OSError:
                proc.kill()
            try:
                proc.wait(timeout=2)
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
        if km is not None:
            try:
                km.cleanup_connection_file()
            except OSError:
                pass
        self.cleanup_files()

    def cleanup_files(self) -> None:
        """Close the log and remove the private directory."""
        if self.log is not None:
            self.log.close()
            self.log = None
        if self.tmpdir is not None:
            if self.log_path and self.log_path.startswith(self.tmpdir):
                self.log_path = None
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None
        cgroup = self.cgroup
        if cgroup is not None:
            for _ in range(50):  # the sandbox's processes die just after bwrap: wait for them
                try:
                    os.rmdir(cgroup)
                    self.cgroup = None
                    break
                except FileNotFoundError:
                    self.cgroup = None
                    break
                except OSError:
                    time.sleep(0.01)


def _finalize(handle: _Handle) -> None:
    """Shut the kernel down when its SiblingKernel is collected or the interpreter exits."""
    if handle.km is None and handle.start_task is None:
        handle.cleanup_files()
        return
    if not _eventloop.on_engine_loop():
        try:
            _eventloop.run_sync(handle.close_all(), timeout=5)
            return
        except Exception:  # noqa: BLE001 - fall back to a hard kill below
            pass
    handle.kill()
