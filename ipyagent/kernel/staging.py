"""The staged workspace: the model's code sees your folder copy-on-write; what it writes
collects in an overlay's upper directory, outside the sandbox's view, as a change set.

Nothing the sandbox writes reaches your folder except by ``Stage.apply`` (called by the
engine under ``Agent.apply_changes``, or by you with ``%agent apply``). ``scan`` lists what
changed since it last looked by walking the upper directories only (O(changes), not
O(files in the folder)); ``apply`` copies a change into the real folder (never through a
symlink, never outside it) and keeps the before-image; ``undo`` puts it back unless you
edited the file since. Measured on overlayfs: a file in the upper directory must never be
deleted or rewritten while it is mounted (the sandbox's next write to it vanishes), so
applying copies and leaves the upper copy in place.

Standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import difflib
import errno
import functools
import hashlib
import importlib.util
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .._util.diffs import HUNK, ONE_HUNK, folded, lines_of

__all__ = ["Change", "ChangeSet", "Stage", "canonical", "code_risk", "probe_overlay", "STAGE_EXEC",
           "APPLY_MODES", "UndoReport", "read_head"]

STAGE_EXEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_stage_exec.py")
APPLY_MODES = ("ask", "data", "never")

Kind = Literal["new", "modified", "deleted"]
Status = Literal["pending", "applied", "discarded", "undone"]

_DIFF_BYTES = 200_000  # larger files get no diff (their size and sha256 say enough)
_DIFF_LINES = 60


@dataclass(frozen=True)
class Change:
    """One file the sandbox created, changed or deleted (relative to its folder)."""

    path: str  # relative, '/'-separated
    root: str  # the real folder it belongs to
    kind: Kind
    size: int | None = None  # bytes of the staged file (None: deleted)
    sha256: str | None = None  # of the staged bytes (a symlink: of its target text)
    risk: str | None = None  # why it can run code later; None: a data file
    diff: str | None = None  # a unified diff for text files, folded
    link: str | None = None  # a symlink's target
    status: Status = "pending"
    mode: int | None = None  # permission bits as listed (the apply writes these, not later ones)
    problem: str | None = None  # why the last apply could not make it (it stays pending)
    lines: int | None = None  # of a staged text file read whole (the model's note says it)

    @property
    def full(self) -> str:
        return os.path.join(self.root, *self.path.split("/"))

    def line(self) -> str:
        """``+ data.csv (new, 1.2 KB)`` / ``! utils.py (modified, 300 B): shadows ...``."""
        mark = {"new": "+", "modified": "~", "deleted": "-"}[self.kind]
        size = "" if self.size is None else f", {_human(self.size)}"
        link = f" -> {self.link}" if self.link is not None else ""
        risk = f"  [runs code: {self.risk}]" if self.risk else ""
        problem = f"  [not applied: {self.problem}]" if self.problem else ""
        return f"{mark} {self.path}{link} ({self.kind}{size}){risk}{problem}"

    def as_dict(self) -> dict[str, Any]:
        """For a result's meta and the transcript (plain JSON)."""
        out: dict[str, Any] = {"path": self.path, "kind": self.kind, "status": self.status}
        for key in ("size", "sha256", "risk", "diff", "link", "problem", "lines"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


Before = tuple[str, "str | None", "int | None"]


@dataclass
class ChangeSet:
    """Changes applied together, with what was there before (for ``undo``)."""

    changes: list[Change]
    # path -> what was there: ("absent", None, None), ("file", its copy, mode),
    # ("link", its target, None) or ("tree", its copy, None); copies live in the stage's undo/
    before: dict[str, Before]
    after: dict[str, str | None]  # path -> sha256 of what was written (None: deleted)
    by: str = "policy"
    at: float = field(default_factory=time.time)
    call_id: str = ""  # the tool call whose code made them ('': applied by hand)
    failed: list[Change] = field(default_factory=list)  # asked for, not made: each says why
    made: dict[str, list[str]] = field(default_factory=dict)  # path -> folders its apply made

    def __repr__(self) -> str:
        return f"<ChangeSet {len(self.changes)} file(s) by {self.by}>"


@dataclass
class UndoReport:
    """What an undo restored and what it left because you edited it since."""

    restored: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # edited since it was applied: not overwritten

    def __str__(self) -> str:
        parts = [f"restored {len(self.restored)} file(s)" + (f": {', '.join(self.restored)}"
                                                               if self.restored else "")]
        if self.kept:
            parts.append(f"left {len(self.kept)} you changed since: {', '.join(self.kept)}")
        return "; ".join(parts)

    def _repr_markdown_(self) -> str:
        return str(self)


# ---- what can run code later ---------------------------------------------------------

_NAMED = {
    "ipykernel_launcher.py": "the next Jupyter kernel started here runs it",
    "sitecustomize.py": "Python runs it at every start",
    "usercustomize.py": "Python runs it at every start",
    "conftest.py": "pytest runs it",
    "setup.py": "pip and setuptools run it",
    "setup.cfg": "build configuration",
    "pyproject.toml": "build configuration (pip runs its build backend)",
    "noxfile.py": "nox runs it",
    "tox.ini": "tox runs its commands",
    "makefile": "make runs it",
    "gnumakefile": "make runs it",
    "agents.md": "instructions ipyagent gives the model",
    "mcp.json": "MCP servers ipyagent starts",
    ".mcp.json": "MCP servers ipyagent starts",
    "skill.md": "a skill ipyagent loads",
    ".envrc": "direnv runs it",
    ".pre-commit-config.yaml": "git hooks run it",
    "justfile": "just runs it",
    "dockerfile": "docker build runs it",
    "pytest.ini": "pytest reads its options (plugins it imports, folders it deletes: --basetemp)",
    ".pytest.ini": "pytest reads its options (plugins it imports, folders it deletes: --basetemp)",
    "pytest.toml": "pytest reads its options (plugins it imports, folders it deletes: --basetemp)",
    ".pytest.toml": "pytest reads its options (plugins it imports, folders it deletes: --basetemp)",
    ".pdbrc": "pdb runs its lines as commands when you debug in this folder",
    ".env": "dotenv and editors load its environment variables (PYTHONSTARTUP, LD_PRELOAD)",
    ".gitconfig": "git runs what its config says (core.pager, core.fsmonitor, aliases)",
    "package.json": "npm runs its scripts (npm install runs preinstall)",
    "pipfile": "pipenv installs and runs what it names",
    "dvc.yaml": "dvc repro runs its commands",
    "snakefile": "snakemake runs it",
    "cmakelists.txt": "cmake runs it", "meson.build": "meson runs it",
    "vagrantfile": "vagrant runs it", "rakefile": "rake runs it", "gemfile": "bundler runs it",
    "procfile": "its commands are run", "docker-compose.yml": "docker compose runs what it names",
    "compose.yaml": "docker compose runs what it names",
}
# Folders whose files tools act on: an editor opening the folder (tasks that run on open,
# a terminal profile), a container's start commands, CI with your repository's secrets,
# and a home folder's own places (what runs at login, on PATH, at Python's start).
_DIRS = {
    ".vscode": "editor settings and tasks (VS Code runs tasks on opening the folder)",
    ".idea": "editor settings and run configurations",
    ".devcontainer": "a dev container's build and start commands",
    ".github": "GitHub workflows and actions run them, with your repository's secrets",
    ".gitlab": "CI configuration", ".circleci": "CI configuration",
    ".ipython": "IPython's profile: its config and startup files run",
    ".jupyter": "Jupyter's config: it runs what its config says",
    ".local": "inside ~/.local: programs on PATH and Python packages",
    ".config": "inside ~/.config: programs' settings (autostart, git, shells)",
    ".ssh": "ssh settings and keys", ".gnupg": "gpg settings",
}
_RC = {".bashrc", ".bash_profile", ".profile", ".zshrc", ".zprofile", ".zshenv", ".bash_login",
       ".bash_logout", ".inputrc", ".pythonrc", ".pythonstartup", ".ipython"}
_SUFFIX = {
    ".pyc": "compiled Python: imported instead of the source beside it",
    ".pyo": "compiled Python: imported instead of the source beside it",
    ".pth": "a .pth file runs code at every Python start",
    ".so": "a native module: importing it runs machine code",
    ".pyd": "a native module: importing it runs machine code",
    ".dylib": "a native library",
    ".sh": "a shell script", ".bash": "a shell script", ".zsh": "a shell script",
    ".ps1": "a PowerShell script", ".bat": "a batch script", ".cmd": "a batch script",
    ".ipynb": "a notebook: its code runs when you run it",
    ".desktop": "a desktop launcher", ".service": "a service unit",
    ".pyz": "a zipped Python application", ".pyw": "Python source",
    ".ipy": "IPython source (%run runs it)", ".whl": "a package pip installs (it can run code)",
    ".egg": "a Python package", ".egg-link": "a Python path entry", ".jar": "a Java program",
    ".exe": "a program", ".command": "a shell script", ".fish": "a shell script",
}
_CONFIG = re.compile(r"^(ipython(_kernel)?|jupyter(_\w+)?)_config\.(json|py)$")


@functools.lru_cache(maxsize=4096)
def _installed(module: str) -> str | None:
    """Where ``module`` would be imported from today (never imports it), or None."""
    if not module.isidentifier():
        return None
    if module in sys.builtin_module_names:
        return "built-in"
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None:
        return None
    return spec.origin or "a namespace package"


# Characters HFS+ ignores in names, and zero-width/format ones: ".g\u200cit" is .git there.
_IGNORED = re.compile("[\u00ad\u034f\u180b-\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f"
                      "\ufe00-\ufe0f\ufeff]")


def canonical(part: str) -> str:
    """A name as a case-insensitive, HFS+ or Windows folder sees it: case folded, ignored
    characters dropped, trailing dots and spaces cut, NTFS's short name GIT~1 read as .git."""
    name = _IGNORED.sub("", part).casefold().rstrip(". ")
    return {"git~1": ".git", "ipyage~1": ".ipyagent"}.get(name, name)


def code_risk(rel: str, root: str, *, executable: bool = False, symlink: bool = False,
              existed: bool = False) -> str | None:
    """Why a file at ``rel`` (under ``root``) can run code later, or None for a data file."""
    parts = rel.split("/")
    lower = [canonical(p) for p in parts]
    name = lower[-1]
    if ".git" in lower[:-1] or name == ".git":
        return "inside .git/: git runs its hooks and config (core.fsmonitor, aliases)"
    if ".ipyagent" in lower[:-1] or name == ".ipyagent":
        return "inside .ipyagent/: ipyagent's own settings, memory and skills"
    # A folder holding HEAD (with objects/ and refs/) is a bare repository to git, whatever
    # its name: git run there reads its config (core.pager, core.fsmonitor, aliases, hooks).
    if name == "head":
        return "HEAD makes its folder a git repository: git then runs what its config says"
    for i in range(len(parts) - 1, -1, -1):
        if os.path.isfile(os.path.join(root, *parts[:i], "HEAD")):
            repo = "/".join(parts[:i]) or "."
            return f"inside a git repository's folder ({repo}/ holds HEAD): git runs its config and hooks"
    if symlink:
        return "a symlink: it can lead anywhere"
    if "__pycache__" in lower[:-1]:
        return "compiled Python: imported instead of the source beside it"
    if name in _NAMED:
        return _NAMED[name]
    if name in _RC or name.startswith(".bash") or name.startswith(".zsh"):
        return "a shell or Python start-up file"
    if "skills" in lower[:-1]:
        return "part of a skill ipyagent loads"
    for part in lower[:-1]:
        if part in _DIRS:
            return f"inside {part}/: {_DIRS[part]}"
    if _CONFIG.match(name):
        return ("IPython/Jupyter config: IPython and Jupyter run what it says (older ones read "
                "it from the folder they start in)")
    if name.startswith("requirements") and name.endswith((".txt", ".in")):
        return "pip installs what it names (and runs their build code)"
    stem, suffix = os.path.splitext(name)
    if suffix == ".py":
        module = parts[0] if len(parts) > 1 else os.path.splitext(parts[0])[0]
        where = _installed(module) if len(parts) > 1 or stem != "__init__" else None
        if existed:
            return "changes your Python file: it runs when imported"
        if where is not None and not _inside(where, root):
            return f"Python source that shadows the installed module {module!r} ({where})"
        return "Python source: it runs when imported or run (python -m, import)"
    if suffix in _SUFFIX:
        return _SUFFIX[suffix]
    if executable:
        return "an executable file"
    return None


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


# ---- can we stage at all -------------------------------------------------------------


@functools.cache
def probe_overlay() -> str:
    """'' where an overlay can be mounted in a user namespace here, else why not (once)."""
    if not sys.platform.startswith("linux"):
        return f"overlayfs needs Linux (this is {sys.platform})"
    base = tempfile.mkdtemp(prefix="ipyagent-probe-")
    try:
        dirs = {name: os.path.join(base, name) for name in ("real", "lower", "upper", "work")}
        for path in dirs.values():
            os.mkdir(path)
        argv = [sys.executable, "-I", "-S", STAGE_EXEC, "--pidfile", os.path.join(base, "pid"),
                "--overlay", dirs["real"], dirs["lower"], dirs["upper"], dirs["work"], "--",
                "/bin/sh", "-c", 'echo x > "$1/probe"', "sh", dirs["real"]]  # a path, never code
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the staging helper did not run: {exc}"
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
            return f"an overlay cannot be mounted in a user namespace here ({why})"
        if not os.path.exists(os.path.join(dirs["upper"], "probe")) or \
                os.path.exists(os.path.join(dirs["real"], "probe")):
            return "the overlay did not keep the sandbox's write apart"
        return ""
    finally:
        shutil.rmtree(base, ignore_errors=True)


def helper_argv(pidfile: str, network: str | None = None, layers: Iterable[Any] = ()) -> list[str]:
    """The staging helper's command line (its own namespaces; an overlay per layer; slirp4netns
    at ``network`` when given), to put in front of bubblewrap's."""
    cmd = [sys.executable, "-I", "-S", STAGE_EXEC, "--pidfile", pidfile]
    if network:
        cmd += ["--net", "slirp4netns", network]
    for layer in layers:
        cmd += ["--overlay", layer.root, layer.lower, layer.upper, layer.work]
    return [*cmd, "--"]


# ---- the stage -------------------------------------------------------------------------


def _sig(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def _sparse(st: os.stat_result) -> bool:
    """Mostly holes (more than 16 MB of them): cheap to make, costly to hash and copy."""
    return st.st_size - st.st_blocks * 512 > max(16 << 20, st.st_size // 2)


@contextlib.contextmanager
def _regular(path: str | os.PathLike[str]) -> Iterator[tuple[int, os.stat_result] | None]:
    """An open descriptor of a regular file and its fstat (never through a symlink, never a
    fifo that would block), or None; closed on leaving."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        yield None
        return
    try:
        st = os.fstat(fd)
        yield (fd, st) if stat.S_ISREG(st.st_mode) else None
    finally:
        os.close(fd)


def _sha(path: str) -> str | None:
    h = hashlib.sha256()
    with _regular(path) as opened:
        if opened is None:
            return None
        while chunk := os.read(opened[0], 1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _look(path: str, keep: int) -> tuple[str, bytes | None, os.stat_result] | None:
    """(sha256, the bytes when at most ``keep``, fstat) of a regular file, all from one
    open file; None if it is not one."""
    with _regular(path) as opened:
        if opened is None:
            return None
        fd, st = opened
        h, kept, size = hashlib.sha256(), [], 0
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
            size += len(chunk)
            if size <= keep:
                kept.append(chunk)
        return h.hexdigest(), b"".join(kept) if size <= keep else None, st


def _read(path: str, limit: int | None = None) -> bytes | None:
    with _regular(path) as opened:
        if opened is None or (limit is not None and opened[1].st_size > limit):
            return None
        chunks = []
        while chunk := os.read(opened[0], 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)


def read_head(path: str | os.PathLike[str], limit: int) -> bytes | None:
    """The first ``limit`` bytes of a regular file (never through a symlink), or None."""
    with _regular(path) as opened:
        if opened is None:
            return None
        try:
            return os.read(opened[0], limit)
        except OSError:
            return None


_DIFF_MATCH = 1000  # changed lines difflib matches; past that, one hunk (its matcher is ~cubic)
_DIFF_SECONDS = 2.0  # of diffing per scan; later changes of that scan are listed without one


def _diff(before: bytes | None, after: bytes | None, rel: str) -> str | None:
    if after is None and before is None:
        return None
    try:
        old = lines_of((before or b"").decode("utf-8"))
        new = lines_of((after or b"").decode("utf-8"))
    except UnicodeDecodeError:
        return None  # binary: its size and sha256 say enough
    # Only the changed middle goes to difflib (linear trims first): a rewrite of 40,000
    # short lines from a small alphabet once kept the user's cell in difflib for minutes.
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    start = max(0, head - 2)
    a, b = old[start:len(old) - max(0, tail - 2)], new[start:len(new) - max(0, tail - 2)]
    # A name with a line break must not make diff lines of its own (what shows the diff
    # makes the rest of it visible).
    name = rel.replace("\r", "\\r").replace("\n", "\\n")
    if len(a) + len(b) - 8 <= _DIFF_MATCH:
        body = list(difflib.unified_diff(a, b, f"a/{name}", f"b/{name}", n=2))
    else:  # one hunk: the middle removed and added, its context around it
        keep_a, keep_b = old[start:head], old[len(old) - tail:len(old) - tail + 2]
        body = [f"--- a/{name}\n", f"+++ b/{name}\n", f"@@ -1,{len(a)} +1,{len(b)} @@ {ONE_HUNK}\n"]
        body += [" " + line for line in keep_a] + ["-" + line for line in old[head:len(old) - tail]]
        body += ["+" + line for line in new[head:len(new) - tail]] + [" " + line for line in keep_b]
    lines = [HUNK.sub(lambda m: (f"@@ -{int(m[1]) + start}{m[2] or ''} "
                                  f"+{int(m[3]) + start}{m[4] or ''} @@"), line)
             if line.startswith("@@") else line for line in body]
    if len(lines) > _DIFF_LINES:
        half = _DIFF_LINES // 2
        lines = lines[:half] + [folded(len(lines) - _DIFF_LINES)] + lines[-half:]
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines) or None


def _line_count(data: bytes | None) -> int | None:
    """Lines of a text file as ``open(…).readlines()`` counts them ("a\\nb\\n" and "a\\nb":
    2); None for a file not read whole or not UTF-8 text. Counted on the bytes: a scan may
    meet thousands of files, and this runs outside the diff's time budget."""
    if data is None:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    breaks = data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")
    return breaks + (1 if data and not data.endswith((b"\n", b"\r")) else 0)


class _Layer:
    """One staged folder: its real path and the overlay's directories."""

    def __init__(self, root: str, base: str, index: int) -> None:
        self.root = root
        self.lower = os.path.join(base, f"lower{index}")  # the bind of the real folder, for the options
        self.upper = os.path.join(base, f"upper{index}")
        self.work = os.path.join(base, f"work{index}")
        for path in (self.lower, self.upper, self.work):
            os.mkdir(path, 0o700)


class Stage:
    """The staged copies of the sandbox's writable folders, and what moved between them."""

    # Larger staged files are listed, never hashed or copied into your folder (the user's
    # kernel does that work: it must stay in proportion to what the sandbox did).
    max_file_bytes: int = 1 << 30

    def __init__(self, roots: Iterable[str]) -> None:
        real = sorted({os.path.realpath(r) for r in roots}, key=len)
        # A folder inside another staged one is staged with it.
        kept: list[str] = []
        for root in real:
            if not any(_inside(root, k) for k in kept):
                kept.append(root)
        self.base = tempfile.mkdtemp(prefix="ipyagent-stage-")
        for part in self.base.split("/"):
            if any(c in part for c in ",:\\"):
                raise ValueError(f"the temporary directory {self.base!r} has a ',', ':' or '\\' "
                                 "that overlayfs options cannot carry; set TMPDIR elsewhere")
        self.layers = [_Layer(root, self.base, i) for i, root in enumerate(kept)]
        self.pidfile = os.path.join(self.base, "stage.pid")
        self.undo_dir = os.path.join(self.base, "undo")
        os.mkdir(self.undo_dir, 0o700)
        self._seen: dict[tuple[str, str], tuple[int, ...]] = {}  # (root, rel) -> upper signature
        self._state: dict[tuple[str, str], Change] = {}  # the latest change per file
        self.applied: list[ChangeSet] = []
        self._copies = 0  # before-images kept in undo_dir
        self._diff_until = 0.0  # this scan's time for diffs (monotonic)
        self._stage_mnt: int | None = None

    @property
    def roots(self) -> list[str]:
        return [layer.root for layer in self.layers]

    def __repr__(self) -> str:
        pending = len(self.pending())
        return f"<Stage {', '.join(self.roots)}: {pending} change(s) pending>"

    # -- the launcher ----------------------------------------------------------------
    def argv(self, network: str | None = None) -> list[str]:
        """The staging helper's command line, to put in front of bubblewrap's."""
        return helper_argv(self.pidfile, network, self.layers)

    def join_argv(self, cwd: str) -> list[str] | None:
        """A command line prefix that runs a fresh process in the stage (None: not running)."""
        try:
            with open(self.pidfile, encoding="ascii") as f:
                pid = int(f.read().strip())
            mnt = os.stat(f"/proc/{pid}/ns/mnt").st_ino
        except (OSError, ValueError):
            return None
        if mnt == os.stat("/proc/self/ns/mnt").st_ino:
            return None  # not a stage of ours (a pid reused by an ordinary process)
        expect = [arg for layer in self.layers for arg in ("--expect-overlay", layer.root, layer.upper)]
        return [sys.executable, "-I", "-S", STAGE_EXEC, "--join", str(pid), "--expect-mnt",
                str(mnt), *expect, "--cwd", cwd, "--"]

    def close(self) -> None:
        _rmtree(self.base)

    # -- what changed ----------------------------------------------------------------
    def scan(self) -> list[Change]:
        """Files the sandbox changed since the last scan (each differing from your folder)."""
        found: list[Change] = []
        self._diff_until = time.monotonic() + _DIFF_SECONDS
        for layer in self.layers:
            for rel, st in self._walk(layer):
                key = (layer.root, rel)
                sig = _sig(st)
                if self._seen.get(key) == sig:
                    continue
                self._seen[key] = sig
                change = self._describe(layer, rel, st)
                if change is None:
                    self._state.pop(key, None)
                    continue
                self._state[key] = change
                found.append(change)
        return found

    def _walk(self, layer: _Layer) -> Iterable[tuple[str, os.stat_result]]:
        stack = [""]
        while stack:
            rel_dir = stack.pop()
            path = os.path.join(layer.upper, rel_dir) if rel_dir else layer.upper
            try:
                entries = list(os.scandir(path))
            except OSError:
                continue
            opaque = rel_dir and _opaque(path)
            if opaque:
                yield from self._hidden_by_opaque(layer, rel_dir, {e.name for e in entries})
            for entry in entries:
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    stack.append(rel)
                else:
                    yield rel, st

    def _hidden_by_opaque(self, layer: _Layer, rel_dir: str,
                          present: set[str]) -> Iterable[tuple[str, os.stat_result]]:
        """A directory deleted and made again: what it held in your folder is deleted."""
        try:  # your folder's, walked without following a link out of it
            fd, _ = _open_parent(layer.root, f"{rel_dir}/-", create=False)
        except OSError:
            return
        try:
            names = os.listdir(fd)
        except OSError:
            return
        finally:
            os.close(fd)
        for name in names:
            if name not in present:
                # A whiteout's stand-in: a 0/0 character device (st_rdev too, or it reads
                # as a device the sandbox made, not a deletion).
                whiteout = os.stat_result((stat.S_IFCHR, 0, 0, 0, 0, 0, 0, 0, 0, 0), {"st_rdev": 0})
                yield f"{rel_dir}/{name}", whiteout

    def _describe(self, layer: _Layer, rel: str, st: os.stat_result) -> Change | None:
        staged = os.path.join(layer.upper, rel)
        # Your side, walked without following a link: a path that leads out of the folder
        # (a repository's `cfg -> ~/private`) is nothing of the folder's, never read.
        mine = _lstat_in(layer.root, rel)
        existed = mine is not None
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
            if mine is None:
                return None  # made and deleted inside: nothing to bring back
            risk = code_risk(rel, layer.root, existed=True)
            if stat.S_ISDIR(mine.st_mode):
                # One whiteout can stand for a whole tree of yours: a person says yes.
                risk = "deletes your folder and everything in it" + (f" ({risk})" if risk else "")
            return Change(rel, layer.root, "deleted", risk=risk)
        kind: Kind = "modified" if existed else "new"
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(staged)
            link_sha = hashlib.sha256(target.encode(errors="surrogateescape")).hexdigest()
            if mine is not None and stat.S_ISLNK(mine.st_mode) and _now(layer.root, rel) == link_sha:
                return None
            return Change(rel, layer.root, kind, size=len(target), sha256=link_sha,
                          risk=code_risk(rel, layer.root, symlink=True), link=target)
        if not stat.S_ISREG(st.st_mode):
            return Change(rel, layer.root, kind, size=0,
                          risk="a device, pipe or socket: not a file of yours")
        if st.st_size > self.max_file_bytes or _sparse(st):
            # Never hashed, read or copied: a 1 TB file of holes costs the sandbox one
            # truncate() and would cost the user's kernel hours (and the disk 1 TB).
            why = (f"a sparse file ({_human(st.st_size)}, mostly holes)" if _sparse(st) else
                   f"larger than {_human(self.max_file_bytes)} (Stage.max_file_bytes)")
            return Change(rel, layer.root, kind, size=st.st_size,
                          risk=code_risk(rel, layer.root, executable=bool(st.st_mode & 0o111),
                                         existed=existed),
                          problem=f"{why}: not checked or copied; it stays in the sandbox")
        # One read gives the sha256, the bytes diffed, the size and the mode: the sandbox may
        # be rewriting or chmod-ing the file while we look (a thread it left running).
        seen = _look(staged, _DIFF_BYTES)
        if seen is None:
            return None  # gone, or no longer a file: the next scan lists what is there
        digest, after, fst = seen
        if mine is not None and stat.S_ISREG(mine.st_mode) and mine.st_size == fst.st_size \
                and _now(layer.root, rel) == digest:  # sizes first: never hash 50 GB of yours
            return None  # the same bytes as yours (copied back, or written unchanged)
        before = _read_in(layer.root, rel, _DIFF_BYTES) if existed else None
        # Yours could not be read (too large, not a plain file): no diff rather than one that
        # shows every line as added.
        diffable = after is not None and (before is not None or not existed)
        return Change(rel, layer.root, kind, size=fst.st_size, sha256=digest,
                      mode=fst.st_mode & 0o777,
                      risk=code_risk(rel, layer.root, executable=bool(fst.st_mode & 0o111),
                                     existed=existed),
                      diff=_diff(before, after, rel) if diffable and
                      time.monotonic() < self._diff_until else None, lines=_line_count(after))

    def pending(self) -> list[Change]:
        """Every change not applied, discarded or undone yet."""
        self.scan()
        return [c for c in self._state.values() if c.status == "pending"]

    def changes(self) -> list[Change]:
        """Every change the sandbox made, with its status."""
        self.scan()
        return list(self._state.values())

    def view_sha(self, path: str) -> str | None:
        """sha256 of ``path`` (relative to the first folder) as the sandbox sees it; None: absent.
        For replay: a recorded change is verified by what the sandbox's view holds."""
        layer = self.layers[0]
        staged = os.path.join(layer.upper, path)
        try:
            st = os.lstat(staged)
        except OSError:
            st = None
        if st is not None:
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                return None
            if stat.S_ISLNK(st.st_mode):
                return hashlib.sha256(os.readlink(staged).encode(errors="surrogateescape")).hexdigest()
            return _sha(staged)
        now = _now(layer.root, path)
        return None if now == "other" else now

    def _layer(self, root: str) -> _Layer:
        return next(layer for layer in self.layers if layer.root == root)

    # -- moving changes ----------------------------------------------------------------
    def apply(self, changes: Sequence[Change], by: str = "policy", call_id: str = "") -> ChangeSet:
        """Copy ``changes`` into your folder; returns what was done, with the before-images
        (``call_id``: the call whose code made them, so a rewind knows which to undo).

        A change that cannot be made (a directory in the way, a file where a folder
        should be) is left pending with its ``problem`` said, in ``failed``; the others
        are made and recorded, so one bad change never loses the undo of the rest."""
        done: list[Change] = []
        failed: list[Change] = []
        before: dict[str, Before] = {}
        after: dict[str, str | None] = {}
        made: dict[str, list[str]] = {}
        for change in changes:
            key = (change.root, change.path)
            current = self._state.get(key)
            if current is None or current.status != "pending" or current.sha256 != change.sha256:
                continue  # applied already, or changed again since it was shown: not this one
            if current.sha256 is None and current.kind != "deleted":
                # Never checked (too large, sparse, not a file): nothing to compare a copy with.
                failed.append(replace(current, problem=current.problem or "not a file ipyagent "
                                      "can check and copy"))
                self._state[key] = failed[-1]
                continue
            layer = self._layer(change.root)
            image: Before | None = None
            try:
                # What is there first, kept outside the sandbox: nothing is replaced that
                # undo could not bring back (a link of yours, a pipe, a file you cannot read).
                if change.path.count("/") >= _TREE_DEPTH:
                    # Not a tree of folders planted in yours that your own tools trip on.
                    raise OSError(errno.EPERM, f"nested more than {_TREE_DEPTH} folders deep")
                image = self._keep(change)
                parts = change.path.split("/")[:-1]
                folders = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
                missing = [f for f in folders if _lstat_in(change.root, f) is None]
                after[change.path] = _put(layer, change)
            except OSError as exc:
                self._drop(image)
                self._state[key] = replace(current, problem=exc.strerror or str(exc))
                failed.append(self._state[key])
                after.pop(change.path, None)
                continue
            before[change.path] = image
            if missing:
                made[change.path] = missing
            applied = replace(current, status="applied", problem=None)
            self._state[key] = applied
            done.append(applied)
        record = ChangeSet(done, before, after, by=by, call_id=call_id, failed=failed, made=made)
        if done:
            self.applied.append(record)
            for root in {c.root for c in done}:
                _syncfs(root)
        return record

    def discard(self, changes: Sequence[Change]) -> list[Change]:
        """Mark ``changes`` as not wanted: they stay in the sandbox's view only."""
        out = []
        for change in changes:
            key = (change.root, change.path)
            current = self._state.get(key)
            if current is not None and current.status == "pending":
                self._state[key] = replace(current, status="discarded")
                out.append(self._state[key])
        return out

    def undo(self, record: ChangeSet | None = None) -> UndoReport:
        """Put back what ``record`` (default: the last applied set) changed in your folder."""
        report = UndoReport()
        if record is None:
            if not self.applied:
                return report
            record = self.applied[-1]
        for change in reversed(record.changes):
            if _now(change.root, change.path) != record.after.get(change.path):
                report.kept.append(change.path)
                continue
            _restore(change.root, change.path, record.before.get(change.path, ("absent", None, None)))
            for folder in reversed(record.made.get(change.path, [])):
                _rmdir_in(change.root, folder)  # the folders its apply made, if empty now
            report.restored.append(change.path)
            key = (change.root, change.path)
            if key in self._state:
                self._state[key] = replace(self._state[key], status="undone")
        if record in self.applied and not report.kept:
            self.applied.remove(record)
            for image in record.before.values():
                self._drop(image)
        return report

    def _keep(self, change: Change) -> Before:
        """A before-image of what ``change`` replaces in your folder (walked without
        following a symlink); OSError for what no copy can be kept of."""
        try:
            fd, name = _open_parent(change.root, change.path, create=False)
        except FileNotFoundError:
            return ("absent", None, None)
        try:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return ("absent", None, None)
            if stat.S_ISLNK(st.st_mode):
                return ("link", os.readlink(name, dir_fd=fd), None)
            self._copies += 1
            copy = os.path.join(self.undo_dir, str(self._copies))
            if stat.S_ISREG(st.st_mode):
                if st.st_size > self.max_file_bytes or _sparse(st):
                    # A few bytes of the sandbox's must not cost a copy of 50 GB of yours.
                    raise OSError(errno.EFBIG, f"your file there is larger than "
                                               f"{_human(self.max_file_bytes)} (ipyagent keeps no "
                                               "copy of it to undo, so it leaves it)")
                src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
                try:
                    if not stat.S_ISREG(os.fstat(src).st_mode):
                        raise OSError(errno.EAGAIN, "it changed while it was read; look again")
                    out = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    try:
                        _pump(src, out)
                    finally:
                        os.close(out)
                finally:
                    os.close(src)
                return ("file", copy, st.st_mode & 0o777)
            if stat.S_ISDIR(st.st_mode) and change.kind == "deleted":
                tree = f"/proc/self/fd/{fd}/{name}"
                if not _shallow(tree, _TREE_DEPTH):
                    # shutil's tree copy and removal recurse: a folder nested a thousand
                    # deep (a repository can ship one) would raise out of them half-way.
                    raise OSError(errno.EPERM, f"your folder there is nested more than "
                                               f"{_TREE_DEPTH} deep (ipyagent keeps no copy of "
                                               "it to undo, so it leaves it)")
                shutil.copytree(tree, copy, symlinks=True)
                return ("tree", copy, None)
            what = ("a directory" if stat.S_ISDIR(st.st_mode) else "a named pipe"
                    if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                    else "a device")
            raise OSError(errno.EPERM, f"your folder has {what} there (ipyagent keeps no copy of "
                                       "it to undo, so it leaves it)")
        finally:
            os.close(fd)

    @staticmethod
    def _drop(image: Before | None) -> None:
        if image is not None and image[0] in ("file", "tree") and image[1]:
            if image[0] == "tree":
                shutil.rmtree(image[1], ignore_errors=True)
            else:
                try:
                    os.unlink(image[1])
                except OSError:
                    pass


def _opaque(path: str) -> bool:
    try:
        return os.getxattr(path, "user.overlay.opaque", follow_symlinks=False) == b"y"
    except OSError:
        return False


# ---- writing into the real folder, never through a symlink ----------------------------


def _open_parent(root: str, rel: str, create: bool) -> tuple[int, str]:
    """A directory fd for ``rel``'s parent inside ``root`` (no component a symlink)."""
    parts = rel.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            if part in ("", ".", ".."):
                raise OSError(22, "bad path")
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except (NotADirectoryError, OSError) as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                what = "a symlink (never followed)" if os.path.islink(
                    f"/proc/self/fd/{fd}/{part}") else "a file, not a directory"
                raise OSError(exc.errno, f"{part!r} in your folder is {what}") from None
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def _pump(src: int, out: int, sha: hashlib._Hash | None = None) -> None:
    """Copy ``src`` to ``out`` in chunks (never a whole file in memory), hashing on the way."""
    while chunk := os.read(src, 1 << 20):
        if sha is not None:
            sha.update(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(out, view):]


def _write_in(root: str, rel: str, src: int, mode: int, expect: str | None = None,
              mask: bool = True) -> str:
    """Write what fd ``src`` holds to ``rel`` atomically; its sha256 (``expect``: or refuse)."""
    fd, name = _open_parent(root, rel, create=True)
    tmp = f".ipyagent-{os.getpid()}-{os.urandom(4).hex()}.tmp"  # short: any name fits beside it
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode & 0o777,
                      dir_fd=fd)
        sha = hashlib.sha256()
        try:
            _pump(src, out, sha)
            # No setuid/setgid from the sandbox, and your umask: a 0o666 it chose must not
            # make a file of yours writable by every other user of the machine.
            os.fchmod(out, mode & 0o777 & (~_umask() if mask else 0o777))
            # No fsync per file (3,000 files cost 8 s of the user's cell in fsync alone, for
            # a few ms of the sandbox's time): Stage.apply syncs the folder's filesystem once.
        finally:
            os.close(out)
        if expect is not None and sha.hexdigest() != expect:
            raise OSError(errno.EAGAIN, "it changed again since it was listed; look again")
        if os.path.isdir(os.path.join(f"/proc/self/fd/{fd}", name)) and not os.path.islink(
                os.path.join(f"/proc/self/fd/{fd}", name)):
            raise IsADirectoryError(21, "your folder has a directory there")
        os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=fd)
        except OSError:
            pass
        raise
    finally:
        os.close(fd)
    return sha.hexdigest()


def _remove(root: str, rel: str) -> None:
    try:
        fd, name = _open_parent(root, rel, create=False)
    except FileNotFoundError:
        return
    try:
        try:
            os.unlink(name, dir_fd=fd)
        except IsADirectoryError:
            shutil.rmtree(os.path.join(f"/proc/self/fd/{fd}", name))
        except FileNotFoundError:
            pass
    finally:
        os.close(fd)


def _rmdir_in(root: str, rel: str) -> None:
    """Remove the folder ``rel`` if it is empty (walked without links); else leave it."""
    try:
        fd, name = _open_parent(root, rel, create=False)
    except OSError:
        return
    try:
        os.rmdir(name, dir_fd=fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _link_in(root: str, rel: str, target: str) -> None:
    fd, name = _open_parent(root, rel, create=True)
    try:
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        os.symlink(target, name, dir_fd=fd)
    finally:
        os.close(fd)


def _now(root: str, rel: str) -> str | None:
    """What ``rel`` holds in your folder now, as an apply records it: a file's sha256, a
    link's target's, None when absent; "other" for anything else (walked without links)."""
    try:
        fd, name = _open_parent(root, rel, create=False)
    except FileNotFoundError:
        return None
    except OSError:
        return "other"
    try:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return hashlib.sha256(os.readlink(name, dir_fd=fd).encode(errors="surrogateescape")).hexdigest()
        if not stat.S_ISREG(st.st_mode):
            return "other"
        return _sha(f"/proc/self/fd/{fd}/{name}")
    finally:
        os.close(fd)


def _umask() -> int:
    """This process's umask, read without changing it (os.umask would, for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


_TREE_DEPTH = 100  # folders deeper than this are not deleted from the sandbox (no copy kept)


def _shallow(top: str, limit: int) -> bool:
    """True when no folder under ``top`` lies more than ``limit`` levels down (walked level
    by level, without recursion or links; anything unreadable counts as too deep)."""
    level = [top]
    for _ in range(limit + 1):
        below = []
        for path in level:
            try:
                with os.scandir(path) as entries:
                    below += [e.path for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError:
                return False
        if not below:
            return True
        level = below
    return False


def _rmtree(path: str) -> None:
    """Remove ``path`` whatever its depth: shutil.rmtree recurses, and the sandbox can make
    folders thousands deep in the upper directory (RecursionError out of close())."""
    try:
        shutil.rmtree(path, ignore_errors=True)
        return
    except RecursionError:
        pass
    rm = shutil.which("rm")
    if rm is not None:
        subprocess.run([rm, "-rf", "--", path], check=False, capture_output=True)


def _syncfs(root: str) -> None:
    """Flush the filesystem ``root`` is on, once per apply (best effort, Linux)."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        ctypes.CDLL(None, use_errno=True).syncfs(fd)
    except (OSError, AttributeError):
        pass
    finally:
        os.close(fd)


def _lstat_in(root: str, rel: str) -> os.stat_result | None:
    """``lstat`` of ``rel`` inside ``root``; None when absent or not inside (a link on the way)."""
    try:
        fd, name = _open_parent(root, rel, create=False)
    except OSError:
        return None
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_in(root: str, rel: str, limit: int | None = None) -> bytes | None:
    """A regular file's bytes at ``rel`` inside ``root`` (walked without links), or None."""
    try:
        fd, name = _open_parent(root, rel, create=False)
    except OSError:
        return None
    try:
        return _read(f"/proc/self/fd/{fd}/{name}", limit)
    finally:
        os.close(fd)


def _restore(root: str, rel: str, image: Before) -> None:
    """Put a before-image back at ``rel``."""
    kind, data, mode = image
    if kind == "absent" or data is None:
        _remove(root, rel)
    elif kind == "link":
        _link_in(root, rel, data)
    elif kind == "tree":
        _remove(root, rel)
        fd, name = _open_parent(root, rel, create=True)
        try:
            shutil.copytree(data, f"/proc/self/fd/{fd}/{name}", symlinks=True)
        finally:
            os.close(fd)
    else:
        src = os.open(data, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            _write_in(root, rel, src, mode if mode is not None else 0o644, mask=False)  # as it was
        finally:
            os.close(src)


def _put(layer: _Layer, change: Change) -> str | None:
    """Make the real file what the stage holds; returns the sha256 written (None: deleted)."""
    if change.kind == "deleted":
        _remove(layer.root, change.path)
        return None
    if change.link is not None:
        _link_in(layer.root, change.path, change.link)
        return change.sha256
    staged = os.path.join(layer.upper, change.path)
    try:
        src = os.open(staged, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        raise OSError(errno.ENOENT, "the staged file is gone or not a regular file") from None
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.ENOENT, "the staged file is gone or not a regular file")
        # The mode listed (whether it was shown as executable), not the one there now.
        mode = change.mode if change.mode is not None else st.st_mode & 0o666
        return _write_in(layer.root, change.path, src, mode, expect=change.sha256)
    finally:
        os.close(src)
