"""The sibling's sandbox: bubblewrap (``bwrap``) around the kernel's command line.

What the model's code sees inside: its own PID, IPC and UTS namespaces (and, with the
network off, an empty network namespace); a mount view made of the workspace read-write,
the Python environment and the system's libraries read-only, a private ``/tmp``, an
empty home (a tmpfs), the kernel's private directory (connection file, IPC sockets) and
the paths the user binds; no capabilities, no nested user namespaces, a new session (no
terminal to inject keystrokes into), and everything dies with the sandbox's parent.

Standard library only: the frontends ask for the sandbox line without jupyter_client.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["MODES", "SandboxPlan", "check_paths", "probe", "resolve_mode", "unsandboxed_note"]

MODES = ("auto", "bwrap", "none")
MAX_PROCESSES = 512  # processes and threads inside one sandbox (a fork loop stops here)

# Files of /etc a Python kernel needs (the loader, DNS, TLS, users, time zone). Not /etc
# itself: it holds /etc/shadow, which root in the sandbox could otherwise read.
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl", "ca-certificates",
        "pki", "crypto-policies", "resolv.conf", "hosts", "host.conf", "nsswitch.conf",
        "gai.conf", "services", "protocols", "passwd", "group", "localtime", "timezone",
        "mime.types", "os-release", "fonts", "matplotlibrc", "locale.alias", "python3",
        f"python{sys.version_info[0]}.{sys.version_info[1]}")
# Hidden when they lie inside a bound directory (a workspace that is your home).
_HOME_SECRETS = (".ssh", ".gnupg", ".aws", ".azure", ".config", ".kube", ".docker", ".netrc",
                 ".pypirc", ".git-credentials", ".local/share/jupyter", ".jupyter", ".ipython",
                 ".ipyagent", ".bash_history", ".zsh_history", ".python_history", ".viminfo",
                 ".lesshst", ".mysql_history", ".psql_history", ".sqlite_history")
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt install bubblewrap; Fedora: dnf install "
                "bubblewrap) and allow unprivileged user namespaces (sysctl "
                "kernel.unprivileged_userns_clone=1 / kernel.apparmor_restrict_unprivileged_userns=0)")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"sandbox must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


def check_paths(paths: Mapping[str, str]) -> dict[str, str]:
    """``{"~/data": "ro"}`` → ``{"/home/me/data": "ro"}``; one clear ValueError for a mistake."""
    out: dict[str, str] = {}
    for raw, mode in paths.items():
        if mode not in ("ro", "rw"):
            raise ValueError(f"sandbox_paths[{raw!r}] must be 'ro' or 'rw', not {mode!r}")
        path = os.path.realpath(os.path.expanduser(str(raw)))
        if not os.path.exists(path):
            raise ValueError(f"sandbox_paths: {raw!r} does not exist ({path})")
        out[path] = mode
    return out


def _bwrap() -> str | None:
    return shutil.which("bwrap")


# The isolation flags, strongest first: a bwrap that cannot make a user namespace (setuid
# installs, some containers) still gets the PID, IPC and mount namespaces.
_NAMESPACES = (
    ("--unshare-user", "--disable-userns"),
    ("--unshare-user",),
    (),
)
_COMMON = ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
           "--die-with-parent", "--new-session", "--cap-drop", "ALL")


@functools.cache
def probe() -> tuple[tuple[str, ...] | None, str]:
    """Once per process: (the namespace flags that work, "") or (None, why bwrap cannot run)."""
    if not sys.platform.startswith("linux"):
        return None, f"bubblewrap needs Linux (this is {sys.platform})"
    bwrap = _bwrap()
    if bwrap is None:
        return None, "bubblewrap (bwrap) is not installed"
    why = ""
    for flags in _NAMESPACES:
        cmd = [bwrap, *flags, *_COMMON, "--unshare-net", "--ro-bind", "/", "/", "--proc", "/proc",
               "--dev", "/dev", "--tmpfs", "/tmp", "--", "/bin/true"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"bwrap did not run: {exc}"
        if done.returncode == 0:
            return flags, ""
        why = why or (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    return None, f"bwrap cannot make a sandbox here: {why}"


def resolve_mode(mode: str) -> tuple[str, str]:
    """("bwrap" | "none", why not sandboxed) for a setting; ``bwrap`` that cannot run raises."""
    check_mode(mode)
    if mode == "none":
        return "none", "Agent.sandbox is 'none'"
    flags, why = probe()
    if flags is not None:
        return "bwrap", ""
    if mode == "bwrap":
        raise RuntimeError(f"Agent.sandbox is 'bwrap' but {why}; {INSTALL_HINT}, "
                           "or set Agent.sandbox = 'none'")
    return "none", why


MISSING = ("no staged workspace (its writes land in your folder at once, code files too), "
           "no sealed network (it can reach your kernel's ports, Jupyter Server and local "
           "servers on 127.0.0.1), your environment minus secret-looking names (not an "
           "allow-list), your files and ~/.ssh readable")


def unsandboxed_note(mode: str) -> str | None:
    """The one line for ``%load_ext`` and ``%agent`` when the sibling is not sandboxed (it
    names the protections that are missing), or is sandboxed without a staged workspace."""
    try:
        resolved, why = resolve_mode(mode)
    except (RuntimeError, ValueError) as exc:
        return f"the sibling kernel will not start: {exc}"
    if resolved == "bwrap":
        from .staging import probe_overlay

        stage_why = probe_overlay()
        if stage_why:
            return (f"the sandbox has no staged workspace ({stage_why}): your folder is "
                    "read-only to the model's code")
        return None
    if mode == "none":
        return f"the sibling kernel is NOT sandboxed (Agent.sandbox = 'none'): {MISSING}"
    return (f"the sibling kernel is NOT sandboxed ({why}): {MISSING}; the model's code can do "
            f"what your account can; to get a sandbox, {INSTALL_HINT}")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _python_paths(argv0: str) -> list[str]:
    """The interpreter's installation(s): this one's prefixes, its sys.path, and argv[0]'s."""
    found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    for exe in {argv0, os.path.realpath(argv0), sys.executable, os.path.realpath(sys.executable)}:
        if os.path.isabs(exe):
            bindir = os.path.dirname(exe)
            found.append(os.path.dirname(bindir) if os.path.basename(bindir) == "bin" else bindir)
    found += [p for p in sys.path if p and os.path.isabs(p)]  # editable installs, PYTHONPATH
    home = os.path.expanduser("~")
    # Never a shared folder or one holding it (a script run from /tmp puts "/tmp" on
    # sys.path): their unix sockets (tmux's, X11's) answer connect() on a read-only bind.
    shared = [os.path.realpath(p) for p in _shared_dirs()]
    out = []
    for path in found:
        real = os.path.realpath(path)
        if os.path.exists(real) and real != "/" and not _inside(home, real) and real not in out \
                and not any(_inside(s, real) for s in shared):
            out.append(real)
    return out


def _shared_dirs() -> list[str]:
    """Folders other programs keep sockets and private files in (temporary, runtime)."""
    import tempfile

    found = ["/tmp", "/var/tmp", "/dev/shm", "/run", "/var/run", tempfile.gettempdir()]
    return found + [os.environ[name] for name in ("XDG_RUNTIME_DIR", "TMPDIR") if os.environ.get(name)]


@dataclass
class SandboxPlan:
    """The bubblewrap command line for one sibling kernel (rebuilt at each (re)start)."""

    writable: list[str]  # the workspace and the kernel's cwd (staged: the overlay's view)
    network: bool = False
    readonly: bool = False  # no stage could be made: the workspace is bound read-only
    paths: Mapping[str, str] = field(default_factory=dict)  # from check_paths
    private: Iterable[tuple[str, str]] = ()  # (path, "ro" | "rw"): the kernel's own files
    hidden: list[str] = field(default_factory=list)  # filled by argv: secrets masked
    masked: Iterable[str] = ()  # ipyagent's own folders (a stage's), hidden if a bind holds them

    def argv(self, cmd: list[str], env: Mapping[str, str] | None = None) -> list[str]:
        flags, why = probe()
        bwrap = _bwrap()
        if flags is None or bwrap is None:
            raise RuntimeError(why)
        home = os.path.realpath(os.path.expanduser("~"))
        binds: dict[str, str] = {}  # path -> "ro" | "rw" | "tmpfs" | "mask"
        for path in _SYSTEM:
            if os.path.islink(path):
                continue  # /lib -> usr/lib: made a symlink below
            if os.path.isdir(path):
                binds[path] = "ro"
        for name in _ETC:
            if os.path.exists(os.path.join("/etc", name)):
                binds[os.path.join("/etc", name)] = "ro"
        for path in _python_paths(cmd[0] if cmd else sys.executable):
            binds[path] = "ro"
        home_is_bound = False
        for path in self.writable:
            real = os.path.realpath(path)
            binds[real] = "ro" if self.readonly else "rw"
            home_is_bound = home_is_bound or _inside(home, real)
        for path, mode in self.paths.items():
            binds[path] = mode
            home_is_bound = home_is_bound or _inside(home, path)
        if not home_is_bound and home != "/":
            binds.setdefault(home, "tmpfs")
        self.hidden = []
        candidates = {os.path.realpath(p) for p in
                      [os.path.join(home, s) for s in _HOME_SECRETS] + _runtime_dirs(env)
                      + list(self.masked) + _ipyagent_temp_dirs()
                      # ipyagent's own state beside the notebook (memory, cache, autosaves)
                      + [os.path.join(w, ".ipyagent") for w in self.writable]
                      # ...and beside the user's kernel, whose folder (the notebook's, where
                      # memory and autosaves go) may lie inside a workspace that is its parent
                      + [os.path.join(os.getcwd(), ".ipyagent")]}
        for secret in sorted(candidates, key=len):  # a parent first: its children go with it
            if os.path.lexists(secret) and secret not in binds and any(
                    _inside(secret, p) and m in ("ro", "rw") for p, m in binds.items()) \
                    and not any(_inside(secret, h) for h in self.hidden):
                binds[secret] = "mask"
                self.hidden.append(secret)
        if not self.readonly:
            # ipyagent's own state beside the notebook, now or later (autosaves, memory,
            # cache, settings): an empty tmpfs inside, made in the staged copy if missing.
            here = os.path.realpath(os.getcwd())  # the user's kernel's: memory, autosaves
            for root in self.writable + [here]:
                state = os.path.join(os.path.realpath(root), ".ipyagent")
                if root is here and not any(_inside(here, os.path.realpath(w)) for w in self.writable):
                    continue
                if state not in binds and not os.path.islink(state):
                    binds[state] = "mask-dir"
        for path, mode in self.private:
            binds[path] = mode
        out = [bwrap, *flags, *_COMMON]
        if not self.network:
            out.append("--unshare-net")
        out += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        for path in _SYSTEM:
            if os.path.islink(path):
                out += ["--symlink", os.readlink(path), path]
        # Parents before children: a bind inside the private /tmp or the empty home lands on top.
        for path in sorted(binds, key=lambda p: (p.rstrip("/").count("/"), p)):
            mode = binds[path]
            if mode == "tmpfs":
                out += ["--perms", "0700", "--tmpfs", path]
            elif mode == "mask-dir":
                out += ["--perms", "0700", "--tmpfs", path]
            elif mode == "mask":
                out += (["--perms", "0700", "--tmpfs", path] if os.path.isdir(path)
                        else ["--ro-bind", "/dev/null", path])
            else:
                out += ["--bind" if mode == "rw" else "--ro-bind", path, path]
        if "/" not in binds:
            out += ["--remount-ro", "/"]  # bwrap's own root tmpfs: nothing new can be made there
        out += ["--setenv", "HOME", home, "--setenv", "TMPDIR", "/tmp"]
        # In the PID namespace the kernel's parent is the sandbox's init, never our pid:
        # ipykernel would take the mismatch for a dead parent. --die-with-parent does that job.
        for name in ("JPY_PARENT_PID", "XDG_RUNTIME_DIR", "JUPYTER_RUNTIME_DIR"):
            out += ["--unsetenv", name]
        cwd = os.path.realpath(self.writable[0]) if self.writable else "/tmp"
        return [*out, "--chdir", cwd, "--", *cmd]


def _ipyagent_temp_dirs() -> list[str]:
    """Stages and kernel folders of ipyagent's in the temporary folder now (this user's
    other agents): hidden when a bind holds them (``sandbox_paths = {"/tmp": "rw"}``)."""
    import glob
    import tempfile

    base = tempfile.gettempdir()
    return glob.glob(os.path.join(base, "ipyagent-stage-*")) + glob.glob(
        os.path.join(base, "ipyagent-sibling-*"))


def _runtime_dirs(env: Mapping[str, str] | None) -> list[str]:
    """Where Jupyter keeps connection files (yours and every other kernel's)."""
    out = []
    try:
        from jupyter_core.paths import jupyter_runtime_dir

        out.append(jupyter_runtime_dir())
    except Exception:  # noqa: BLE001 - jupyter_core missing or confused: the defaults below
        pass
    for source in (os.environ, env or {}):
        for name in ("JUPYTER_RUNTIME_DIR", "XDG_RUNTIME_DIR"):
            if source.get(name):
                out.append(source[name])
    return out
