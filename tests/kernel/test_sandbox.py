"""The bubblewrap sandbox, attacked from inside a real sandboxed sibling.

Each attack from issue 14 runs as the model's code would, and must fail while the kernel
(and the agent around it) keeps working. Skips, saying why, where no sandbox can be made.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipyagent import Agent
from ipyagent.context.items import ToolResult
from ipyagent.errors import KernelError
from ipyagent.kernel import sandbox
from ipyagent.kernel.sibling import SiblingKernel
from tests.helpers.scripted_model import ScriptedModel, calls, text

FLAGS, WHY = sandbox.probe()
needs_bwrap = pytest.mark.skipif(FLAGS is None, reason=f"no sandbox can be made here: {WHY}")
CANARY = "canary-9f2c51d7e3"


def _marked(marker: str) -> list[int]:
    """Host pids whose command line holds ``marker`` (seen from outside the sandbox)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if marker in Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace"):
                    stat = Path(f"/proc/{name}/stat").read_text()
                    if stat.split(")")[-1].split()[0] != "Z":
                        found.append(int(name))
            except OSError:
                continue
    return found


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """A fake home with secrets, a workspace, a file outside it, a Jupyter runtime dir."""
    root = tmp_path_factory.mktemp("sandbox")
    home, ws, outside = root / "home", root / "ws", root / "outside"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(f"-----BEGIN OPENSSH PRIVATE KEY----- {CANARY}\n")
    runtime = home / ".local/share/jupyter/runtime"
    runtime.mkdir(parents=True)
    (runtime / "kernel-users.json").write_text(json.dumps({"key": CANARY, "shell_port": 1}))
    ws.mkdir()
    outside.mkdir()
    (outside / "keep.txt").write_text("untouched")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        mp.setenv("CANARY_API_KEY", CANARY)  # the user's kernel's secret (a scrubbed name)
        mp.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
        yield {"home": home, "ws": ws, "outside": outside, "runtime": runtime}


@pytest.fixture(scope="module")
def boxed(world: dict[str, Path]) -> Iterator[SiblingKernel]:
    """One sandboxed sibling with the network off (so its channels are IPC sockets)."""
    if FLAGS is None:
        pytest.skip(f"no sandbox can be made here: {WHY}")
    with SiblingKernel(cwd=world["ws"], timeout=30, sandbox="bwrap", sandbox_network=False) as k:
        yield k


def run(k: SiblingKernel, code: str) -> str:
    r = k.execute(code)
    assert CANARY not in r.text, r.text
    return r.text


def still_works(k: SiblingKernel) -> None:
    r = k.execute("21 * 2")
    assert (r.status, r.text) == ("ok", "42"), r.text


@needs_bwrap
def test_the_sibling_sees_only_its_own_processes(boxed: SiblingKernel) -> None:
    assert boxed.sandboxed and boxed._handle.sandboxed
    out = run(boxed, "import os; pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit()); "
                     "print(os.getppid(), len(pids) < 10, sorted({os.path.basename("
                     "open(f'/proc/{p}/cmdline','rb').read().split(b'\\0')[0]).decode() for p in pids}))")
    # Its parent is the sandbox's init; the only processes are bwrap's init and the kernel.
    assert out == f"1 True ['bwrap', '{os.path.basename(sys.executable)}']", out
    still_works(boxed)


@needs_bwrap
def test_parent_environ_and_memory_are_out_of_reach(boxed: SiblingKernel) -> None:
    ppid = os.getpid()  # the process that owns the sibling: "your kernel"
    out = run(boxed, f"""
import os
for path in ('/proc/{ppid}/environ', '/proc/{ppid}/mem', '/proc/{ppid}/cmdline'):
    try:
        open(path, 'rb').read(100)
        print('READ', path)
    except OSError as e:
        print('refused', type(e).__name__)
leaked = []
for p in os.listdir('/proc'):
    if p.isdigit():
        try:
            leaked.append(b'{CANARY}' in open(f'/proc/{{p}}/environ', 'rb').read())
        except OSError:
            pass
print('environ leak:', any(leaked), 'own env:', '{CANARY}' in str(os.environ))
""")
    assert "READ" not in out
    assert out.count("refused FileNotFoundError") == 3, out
    assert "environ leak: False own env: False" in out
    still_works(boxed)


@needs_bwrap
def test_connection_files_and_home_secrets_are_not_there(boxed: SiblingKernel, world: dict[str, Path]) -> None:
    out = run(boxed, f"""
import glob, os
print(sorted(os.listdir(os.path.expanduser('~'))))
for path in ({str(world['home'] / '.ssh/id_rsa')!r}, os.path.expanduser('~/.ssh/id_rsa'),
             {str(world['runtime'] / 'kernel-users.json')!r}):
    try:
        print(open(path).read())
    except OSError as e:
        print('refused', type(e).__name__)
from jupyter_core.paths import jupyter_runtime_dir
print('runtime files:', glob.glob(os.path.join(jupyter_runtime_dir(), '*.json')))
""")
    assert out.count("refused FileNotFoundError") == 3, out
    assert "runtime files: []" in out
    assert ".ssh" not in out.splitlines()[0]
    still_works(boxed)


@needs_bwrap
def test_killing_the_parent_does_nothing(boxed: SiblingKernel) -> None:
    before = boxed.pid
    out = run(boxed, f"""
import os, signal
for pid in (os.getppid(), {os.getpid()}):
    try:
        os.kill(pid, signal.SIGKILL)
        print('sent', pid)
    except OSError as e:
        print('refused', type(e).__name__)
""")
    time.sleep(0.3)
    # The sandbox's init ignores it (pid 1 of a namespace); the real parent is not visible.
    assert "refused ProcessLookupError" in out, out
    still_works(boxed)
    assert boxed.pid == before  # not even restarted


@needs_bwrap
def test_writes_outside_the_workspace_do_not_land(boxed: SiblingKernel, world: dict[str, Path]) -> None:
    target = world["outside"] / "keep.txt"
    out = run(boxed, f"""
import os, sys
open('inside.txt', 'w').write('ok')
for path in ({str(target)!r}, '/etc/passwd', os.path.join(sys.prefix, 'evil.txt'),
             '/usr/evil.txt', '/evil.txt', {str(Path(__file__).resolve().parent / 'evil.txt')!r}):
    try:
        with open(path, 'w') as f:
            f.write('pwned')
        print('wrote', path)
    except OSError as e:
        print('refused', type(e).__name__)
""")
    # The workspace is staged: the write is a change for the user, not yet in the folder.
    assert not (world["ws"] / "inside.txt").exists()
    assert boxed.stage is not None and "inside.txt" in {c.path for c in boxed.stage.pending()}
    assert target.read_text() == "untouched"
    # Under /tmp (its private /tmp) the write lands in the sandbox's own memory, never here.
    assert out.count("refused") >= 5, out
    assert not (Path(sys.prefix) / "evil.txt").exists()
    still_works(boxed)


@needs_bwrap
def test_no_network_means_no_loopback(boxed: SiblingKernel) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    server.settimeout(3)
    try:
        out = run(boxed, f"""
import socket
try:
    socket.create_connection(('127.0.0.1', {port}), timeout=2)
    print('connected')
except OSError as e:
    print('refused', type(e).__name__)
""")
        assert "refused" in out and "connected" not in out, out
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()
    still_works(boxed)


@needs_bwrap
def test_a_fork_loop_stops_at_the_process_limit(boxed: SiblingKernel) -> None:
    out = run(boxed, """
import os
r, w = os.pipe()
children, error = [], None
try:
    for _ in range(5000):
        pid = os.fork()
        if pid == 0:
            os.close(w)
            os.read(r, 1)  # wait until the parent closes the pipe
            os._exit(0)
        children.append(pid)
except OSError as e:
    error = type(e).__name__
os.close(w)
for pid in children:
    os.waitpid(pid, 0)
print(error, len(children) < 5000)
""")
    assert out == "BlockingIOError True", out
    still_works(boxed)


@needs_bwrap
def test_no_inherited_file_descriptors(world: dict[str, Path]) -> None:
    leak = world["outside"] / "inherited.txt"
    fd = os.open(leak, os.O_CREAT | os.O_RDWR)
    os.set_inheritable(fd, True)
    try:
        with SiblingKernel(cwd=world["ws"], sandbox="bwrap") as k:
            out = run(k, "import os; print([os.readlink(f'/proc/self/fd/{n}') for n in os.listdir('/proc/self/fd')])")
    finally:
        os.close(fd)
    assert "inherited.txt" not in out
    assert "/dev/pts" not in out and "/dev/tty" not in out


@needs_bwrap
def test_network_on_is_a_network_of_its_own(world: dict[str, Path]) -> None:
    if shutil.which("slirp4netns") is None:
        pytest.skip("slirp4netns is not installed")
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    with SiblingKernel(cwd=world["ws"], sandbox="bwrap", sandbox_network=True) as k:
        out = run(k, f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), "
                     "timeout=2); print('connected')\nexcept OSError as e: print(type(e).__name__)\n"
                     "print(sorted(n for _, n in socket.if_nameindex()))")
        assert "connected" not in out and "tap0" in out, out  # slirp4netns's interface, no host loopback
        assert k._handle.km is not None and k._handle.km.transport == "ipc"
    server.close()


def test_network_on_without_a_stack_refuses(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name, *a, **k: None if name == "slirp4netns" else "/usr/bin/" + name)
    with pytest.raises(KernelError, match="slirp4netns is not installed"):
        with SiblingKernel(cwd=world["ws"], sandbox="bwrap", sandbox_network=True) as k:
            k.execute("1")


@needs_bwrap
def test_nothing_it_starts_outlives_close(world: dict[str, Path]) -> None:
    marker = "ipyagent-orphan-7c1e"
    k = SiblingKernel(cwd=world["ws"], sandbox="bwrap")
    k.start()
    out = run(k, f"""
import os, subprocess, sys, time
subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '{marker}-session'],
                 start_new_session=True)
if os.fork() == 0:  # a double-forked daemon
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(300)', '{marker}-daemon'])
    os._exit(0)
time.sleep(0.5)
print('started')
""")
    assert out == "started"
    assert len(_marked(marker)) == 2  # both seen from outside
    k.shutdown()
    deadline = time.monotonic() + 5
    while _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _marked(marker) == []


@needs_bwrap
@pytest.mark.parametrize("crash, cause", [
    ("import os; os._exit(3)", "exit code 3"),
    ("import ctypes; ctypes.string_at(0)", "SIGSEGV"),
])
def test_crashes_restart_and_say_why(boxed: SiblingKernel, crash: str, cause: str) -> None:
    r = boxed.execute(crash)
    assert r.status == "died" and cause in r.text, r.text
    still_works(boxed)


@needs_bwrap
def test_restart_after_fork_succeeds(boxed: SiblingKernel) -> None:
    r = boxed.execute("import os, time\nif os.fork() == 0:\n    time.sleep(120)\n    os._exit(0)\nx = 5")
    assert r.status == "ok", r.text
    boxed.restart()
    still_works(boxed)
    assert "NameError" in boxed.execute("x").text


@needs_bwrap
def test_plots_transfer_interrupt_and_timeout_inside(boxed: SiblingKernel) -> None:
    r = boxed.execute("import matplotlib.pyplot as plt; plt.plot([1, 2]); plt.show()")
    assert any("image/png" in o.get("data", {}) for o in r.outputs), r.outputs
    boxed.push(pushed=[1, 2, 3])
    assert boxed.pull("pushed") == [1, 2, 3]
    threading.Timer(1.0, boxed.interrupt).start()
    r = boxed.execute("import time\nfor _ in range(100): time.sleep(0.1)")
    assert "KeyboardInterrupt" in r.text
    r = boxed.execute("kept = 1\nimport time\nwhile True: time.sleep(0.05)", timeout=1)
    assert r.status == "timeout"
    assert boxed.execute("kept").text == "1"


@needs_bwrap
def test_sandbox_paths_ro_and_rw(world: dict[str, Path], tmp_path: Path) -> None:
    ro, rw = tmp_path / "data", tmp_path / "scratch"
    ro.mkdir()
    rw.mkdir()
    (ro / "d.txt").write_text("data")
    with SiblingKernel(cwd=world["ws"], sandbox="bwrap", sandbox_paths={str(ro): "ro", str(rw): "rw"}) as k:
        out = run(k, f"""
print(open({str(ro / 'd.txt')!r}).read())
try:
    open({str(ro / 'x')!r}, 'w')
except OSError as e:
    print('refused', type(e).__name__)
open({str(rw / 'y')!r}, 'w').write('written')
""")
    assert out.splitlines()[:2] == ["data", "refused OSError"], out
    assert (rw / "y").read_text() == "written"


@needs_bwrap
def test_a_workspace_that_is_the_home_hides_its_secrets(world: dict[str, Path]) -> None:
    with SiblingKernel(cwd=world["home"], sandbox="bwrap") as k:
        out = run(k, "import os; print(os.listdir('.ssh'), os.listdir('.local/share/jupyter'))")
    assert out == "[] []"


def test_a_mistyped_path_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sandbox_paths: '/no/such/dir' does not exist"):
        SiblingKernel(cwd=tmp_path, sandbox_paths={"/no/such/dir": "ro"})
    with pytest.raises(ValueError, match="must be 'ro' or 'rw'"):
        SiblingKernel(cwd=tmp_path, sandbox_paths={str(tmp_path): "rwx"})
    with pytest.raises(Exception, match="does not exist"):
        Agent(sandbox_paths={"~/no-such-dir-here": "ro"})
    with pytest.raises(ValueError, match="sandbox must be one of"):
        SiblingKernel(cwd=tmp_path, sandbox="docker")


@pytest.fixture()
def no_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A PATH without bwrap: what a machine without bubblewrap looks like."""
    monkeypatch.setenv("PATH", str(tmp_path))
    sandbox.probe.cache_clear()
    yield
    sandbox.probe.cache_clear()


def test_without_bubblewrap_auto_runs_unsandboxed_and_says_so(no_bwrap: None, tmp_path: Path) -> None:
    assert sandbox.resolve_mode("auto") == ("none", "bubblewrap (bwrap) is not installed")
    note = sandbox.unsandboxed_note("auto")
    assert note is not None and "NOT sandboxed" in note and "apt install bubblewrap" in note
    none = sandbox.unsandboxed_note("none")  # asked for, but the missing protections are said
    assert none is not None and "no staged workspace" in none and "no sealed network" in none
    with SiblingKernel(cwd=tmp_path, sandbox="auto") as k:
        assert not k._handle.sandboxed
        still_works(k)


def test_without_bubblewrap_bwrap_is_an_error(no_bwrap: None, tmp_path: Path) -> None:
    k = SiblingKernel(cwd=tmp_path, sandbox="bwrap")
    with pytest.raises(KernelError) as info:
        k.start()
    message = str(info.value)
    assert "Agent.sandbox is 'bwrap' but bubblewrap (bwrap) is not installed" in message
    assert "\n" not in message
    k.shutdown()


@needs_bwrap
def test_the_agent_is_told_and_goes_on(world: dict[str, Path]) -> None:
    attack = f"print(open('/proc/{os.getpid()}/environ').read())"
    steal = "print(open(__import__('os').path.expanduser('~/.ssh/id_rsa')).read())"
    model = ScriptedModel([calls(("python", {"code": attack})), calls(("python", {"code": steal})),
                           calls(("python", {"code": "6 * 7"})), text("done")])
    agent = Agent(client=model, cwd=str(world["ws"]), file_tools=False, sandbox="bwrap")
    try:
        result = agent.run("try it")
        assert result.stop_reason == "done"
        outputs = [i.output for i in agent.context if isinstance(i, ToolResult)]
        assert "FileNotFoundError" in outputs[0] and "FileNotFoundError" in outputs[1]
        assert outputs[2] == "42"
        assert not any(CANARY in o for o in outputs)
        assert agent.kernel.sandboxed
        agent.kernel.execute("gone = 1")
        agent.reset(kernel=True)  # %agent reset --kernel
        assert "NameError" in agent.kernel.execute("gone").text
        assert agent.kernel._handle.sandboxed
    finally:
        agent.close()
