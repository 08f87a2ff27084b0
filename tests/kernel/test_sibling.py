"""SiblingKernel against real kernels: every fault is a real crash, loop or flood."""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import os
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpecManager

from ipyagent.errors import KernelError
from ipyagent.kernel.sibling import SiblingKernel
from tests.helpers.images import png_bytes

# Every kernel process id the tests start (restarts included), checked at module end.
_PID_LISTS: list[list[int]] = []
_KERNELS: list[weakref.ref[SiblingKernel]] = []


def _track(kernel: SiblingKernel) -> SiblingKernel:
    _PID_LISTS.append(kernel._handle.pids)  # the list object itself: restarts append to it
    _KERNELS.append(weakref.ref(kernel))
    return kernel


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has stopped running; it only waits to be reaped
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


@pytest.fixture(scope="module", autouse=True)
def no_orphans() -> Iterator[None]:
    """After the module, no kernel process started by these tests is alive."""
    yield
    for ref in _KERNELS:
        kernel = ref()
        if kernel is not None:
            kernel.shutdown()
    pids = [pid for pids in _PID_LISTS for pid in pids]
    assert pids, "the tests started no kernel?"
    deadline = time.monotonic() + 5
    alive = [pid for pid in pids if _running(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [pid for pid in alive if _running(pid)]
    assert not alive, f"orphaned kernel processes: {alive}"


@pytest.fixture(scope="module")
def kernel() -> Iterator[SiblingKernel]:
    """One shared kernel; fault tests restart it, so no test relies on another's state."""
    k = _track(SiblingKernel(timeout=30, interrupt_grace=2))
    k.start_background()
    yield k
    k.shutdown()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sibling-cwd")


@pytest.fixture(scope="module")
def limited(workdir: Path) -> Iterator[SiblingKernel]:
    """A kernel with a cwd, a secret in the parent env and resource limits."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MY_API_KEY", "sk-should-not-leak")
        mp.setenv("IPYAGENT_TEST_PROVIDER_CRED", "also-secret")
        mp.setenv("IPYAGENT_TEST_HARMLESS", "visible")
        k = _track(
            SiblingKernel(
                cwd=workdir,
                timeout=30,
                memory_limit="1536MB",
                cpu_limit=600,
                secret_env_vars=["IPYAGENT_TEST_PROVIDER_CRED"],
            )
        )
        k.start()  # the environment is copied at start
    yield k
    k.shutdown()


# ---- a real kernel: results ------------------------------------------------------


def test_execute_result_and_repr(kernel: SiblingKernel) -> None:
    r = kernel.execute("1+1")
    assert (r.status, r.text, r.restarted) == ("ok", "2", False)
    assert r.outputs[0]["output_type"] == "execute_result" and r.execution_count
    assert "ok" in repr(r) and "<pre" in r._repr_html_()
    assert kernel.state == "idle" and f"pid={kernel.pid}" in repr(kernel)


def test_error_is_a_value_and_next_request_not_aborted(kernel: SiblingKernel) -> None:
    r = kernel.execute("print('before'); 1/0")
    assert r.status == "error" and r.error_name == "ZeroDivisionError"
    assert r.text.startswith("before\n") and "ZeroDivisionError: division by zero" in r.text
    assert "\x1b[" not in r.text
    assert kernel.execute("2+2").status == "ok"  # stop_on_error=False: not "aborted"


def test_a_display_loop_in_the_kernel_is_capped(kernel: SiblingKernel) -> None:
    r = kernel.execute("from IPython.display import display, HTML\n"
                       "for i in range(260): display(HTML(f'<b>{i}</b>'))\n"
                       "'end'")
    assert r.status == "ok"
    kinds = [o["output_type"] for o in r.outputs]
    assert kinds.count("display_data") == 200 and "execute_result" in kinds
    assert "[60 more displayed outputs" in r.text
    assert kernel.execute("1+1").text == "2"


def test_rich_output_png_kept_whole(kernel: SiblingKernel) -> None:
    png = png_bytes(640, 480)
    code = (
        "import base64; from IPython.display import Image, display\n"
        f"display(Image(data=base64.b64decode({base64.b64encode(png).decode()!r})))"
    )
    r = kernel.execute(code)
    assert r.status == "ok"
    [out] = r.outputs
    assert out["output_type"] == "display_data"
    assert base64.b64decode(out["data"]["image/png"]) == png  # whole, for the notebook
    assert r.text.startswith("[image/png 640x480, ") and len(r.text) < 40


def test_matplotlib_plot_is_display_data(kernel: SiblingKernel) -> None:
    if kernel.execute("import matplotlib").status != "ok":
        pytest.skip("matplotlib is not installed")
    r = kernel.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3]); plt.show()")
    assert any("image/png" in o.get("data", {}) for o in r.outputs)
    assert "[image/png " in r.text


def test_clear_output_in_the_kernel(kernel: SiblingKernel) -> None:
    r = kernel.execute("from IPython.display import clear_output\nprint('a'); clear_output(); print('b')")
    assert r.text == "b"


async def test_sync_execute_inside_running_loop(kernel: SiblingKernel) -> None:
    asyncio.get_running_loop()  # this test body runs on a live loop, like a notebook cell
    assert kernel.execute("40 + 2").text == "42"
    results = await asyncio.gather(kernel.execute_async("a_ = 1"), kernel.execute_async("3 * 3"))
    assert [r.status for r in results] == ["ok", "ok"] and results[1].text == "9"


# ---- a real kernel: faults -------------------------------------------------------


def test_python_loop_timeout_interrupts_and_keeps_state(kernel: SiblingKernel) -> None:
    kernel.execute("kept = 'still here'")
    r = kernel.execute("print('started', flush=True)\nwhile True: pass", timeout=1)
    assert r.status == "timeout" and not r.restarted
    assert "started" in r.text and "Interrupted after 1 s" in r.text and "kept" in r.text
    assert "KeyboardInterrupt" not in r.text
    assert kernel.execute("kept").text == "'still here'"


@pytest.mark.slow
def test_c_loop_timeout_restarts_and_says_state_lost(kernel: SiblingKernel) -> None:
    kernel.execute("kept = 1")
    pid = kernel.pid
    r = kernel.execute("sum(range(10**13))", timeout=1)  # one C call: SIGINT waits for it
    assert r.status == "timeout" and r.restarted and "variables were lost" in r.text
    assert kernel.pid != pid
    assert kernel.execute("kept").error_name == "NameError"


@pytest.mark.parametrize(
    ("code", "cause"),
    [("import os; os._exit(1)", "exit code 1"), ("import ctypes; ctypes.string_at(0)", "SIGSEGV")],
    ids=["os_exit", "segfault"],
)
def test_death_is_detected_restarted_and_reported(kernel: SiblingKernel, code: str, cause: str) -> None:
    kernel.execute("kept = 1")
    pid = kernel.pid
    r = kernel.execute(code, timeout=30)
    assert r.status == "died" and r.restarted
    assert cause in r.text and "variables and imports were lost" in r.text
    assert r.duration < 5  # noticed by the liveness poll, not by the 30 s timeout
    assert kernel.pid != pid and kernel.execute("kept").error_name == "NameError"
    assert kernel.execute("1+1").text == "2"


def test_death_while_idle_is_reported_on_next_call(kernel: SiblingKernel) -> None:
    import signal

    assert kernel.execute("1").status == "ok"
    os.kill(kernel.pid, signal.SIGKILL)  # type: ignore[arg-type]
    time.sleep(0.2)
    assert kernel.state == "dead"
    r = kernel.execute("2+3")
    assert r.status == "ok" and r.restarted and "SIGKILL" in r.text and r.text.endswith("5")


def test_huge_output_is_bounded_and_kernel_still_usable(kernel: SiblingKernel) -> None:
    r = kernel.execute("for i in range(100_000): print(f'{i:08d}' + 'x' * 1015)\nprint('THE END')")
    assert r.status == "ok"
    kept = sum(len(o.get("text", "")) for o in r.outputs)
    assert kept <= kernel.max_output_bytes + 100  # 100 MB printed, ~2 MB kept
    assert r.outputs[0]["text"].startswith("00000000x")
    assert "characters omitted" in r.text and r.text.endswith("THE END")
    assert len(r.text) <= kernel.max_model_chars + 100
    assert kernel.execute("'alive'").text == "'alive'"


def test_interrupt_from_another_thread(kernel: SiblingKernel) -> None:
    import threading

    timer = threading.Timer(0.5, kernel.interrupt)
    timer.start()
    r = kernel.execute("import time; time.sleep(30)")
    timer.join()
    assert r.status == "error" and r.error_name == "KeyboardInterrupt" and r.duration < 10


# ---- isolation: cwd, env, limits, stderr, kernelspecs ----------------------------


def test_cwd_and_env_scrubbed(limited: SiblingKernel, workdir: Path) -> None:
    assert limited.execute("import os; os.getcwd()").text == repr(str(workdir))
    r = limited.execute("[os.environ.get(k) for k in ('MY_API_KEY', 'IPYAGENT_TEST_PROVIDER_CRED', 'IPYAGENT_TEST_HARMLESS')]")
    # Sandboxed, the environment is an allow-list (Agent.sandbox_env adds names); without
    # the sandbox, a deny-list of secret-looking names.
    assert r.text == ("[None, None, None]" if limited.sandboxed else "[None, None, 'visible']")


def test_default_cwd_is_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert SiblingKernel().cwd == str(tmp_path)


def test_memory_bomb_is_a_memory_error(limited: SiblingKernel) -> None:
    r = limited.execute("hog = []\nwhile True: hog.append(bytearray(64 * 2**20))")
    assert r.status == "error" and r.error_name == "MemoryError" and not r.restarted
    assert limited.execute("hog = None; 'fine'").text == "'fine'"


def test_limits_survive_restart(limited: SiblingKernel) -> None:
    check = "import resource; (resource.getrlimit(resource.RLIMIT_AS)[0], resource.getrlimit(resource.RLIMIT_CPU)[0])"
    expected = repr((1536 * 2**20, 600))
    assert limited.execute(check).text == expected
    pid = limited.pid
    limited.restart()
    assert limited.pid != pid
    assert limited.execute(check).text == expected
    assert limited.execute("os.getcwd()").error_name == "NameError"  # restart means fresh state


_forks_seen: list[int] = []
os.register_at_fork(before=lambda: _forks_seen.append(threading.get_ident()))


def test_limits_run_no_python_in_a_forked_child(tmp_path: Path) -> None:
    # A preexec_fn makes CPython run the at-fork handlers, which take locks that other
    # threads hold (seen: "release unlocked lock" in ThreadPoolExecutor.submit while the
    # warm-up thread started a limited kernel). The limits come from an exec wrapper now.
    with _track(SiblingKernel(cwd=tmp_path, memory_limit="1536MB", cpu_limit=600)) as k:
        before = len(_forks_seen)
        assert k.execute("1+1").text == "2"
        k.restart()
        assert k.execute("import resource; resource.getrlimit(resource.RLIMIT_CPU)[0]").text == "600"
        assert len(_forks_seen) == before


@pytest.mark.slow
def test_cpu_limit_kills_and_restarts(tmp_path: Path) -> None:
    with _track(SiblingKernel(cwd=tmp_path, cpu_limit=3, timeout=30)) as k:
        r = k.execute("while True: pass")
        assert r.status == "died" and "SIGXCPU" in r.text and r.restarted
        assert k.execute("1+1").text == "2"


def test_too_small_memory_limit_is_a_clear_kernel_error(tmp_path: Path) -> None:
    k = _track(SiblingKernel(cwd=tmp_path, memory_limit="40MB", startup_timeout=20))
    with pytest.raises(KernelError, match="memory_limit"):
        k.execute("1")
    k.shutdown()


def test_kernel_stderr_never_reaches_the_user(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    with _track(SiblingKernel(cwd=tmp_path)) as k:
        r = k.execute("import sys; sys.__stderr__.write('CHATTER-ERR\\n'); sys.__stderr__.flush(); "
                      "sys.__stdout__.write('CHATTER-OUT\\n'); sys.__stdout__.flush()")
        assert r.status == "ok"
        log = Path(k.log_path or "")
        assert "CHATTER-ERR" in log.read_text()
    out, err = capfd.readouterr()
    assert "CHATTER" not in out + err and "IPKernelApp" not in out + err
    assert not log.exists()  # the log we made is removed at shutdown


def test_other_kernelspec(tmp_path: Path) -> None:
    spec_dir = tmp_path / "kernels" / "py-sibling-test"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Sibling test", "language": "python",
        "env": {"SPEC_MARKER": "from-the-spec"},
    }))
    ksm = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    with _track(SiblingKernel(cwd=tmp_path, kernel_name="py-sibling-test", kernel_spec_manager=ksm)) as k:
        assert k.execute("import os; os.environ['SPEC_MARKER']").text == "'from-the-spec'"
        assert "py-sibling-test" in repr(k)
    with pytest.raises(KernelError, match="no-such-kernel"):
        SiblingKernel(kernel_name="no-such-kernel", kernel_spec_manager=ksm).start()


# ---- lifecycle -------------------------------------------------------------------


def test_shutdown_is_idempotent_and_final(tmp_path: Path) -> None:
    k = _track(SiblingKernel(cwd=tmp_path))
    k.start()
    pid = k.pid
    assert pid and k.is_alive()
    k.shutdown()
    k.shutdown()
    assert not _running(pid) and k.state == "shut down"
    with pytest.raises(KernelError, match="shut down"):
        k.execute("1")


async def test_async_context_manager(tmp_path: Path) -> None:
    async with SiblingKernel(cwd=tmp_path) as k:
        _track(k)
        assert (await k.execute_async("6 * 7")).text == "42"
        pid = k.pid
    assert pid and not _running(pid)


def test_garbage_collected_kernel_shuts_down(tmp_path: Path) -> None:
    k = _track(SiblingKernel(cwd=tmp_path))
    k.start()
    pid = k.pid
    assert pid and _running(pid)
    del k
    gc.collect()
    deadline = time.monotonic() + 5
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)


def test_user_profile_and_history_stay_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    startup = tmp_path / "ipdir" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-marker.py").write_text("FROM_USER_PROFILE = 1\n")
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipdir"))
    with _track(SiblingKernel(cwd=tmp_path)) as k:
        r = k.execute("ip = get_ipython(); ('FROM_USER_PROFILE' in globals(), ip.history_manager.enabled)")
        assert r.text == "(False, False)"
        assert k.execute("import os; os.environ['IPYAGENT_SIBLING']").text == "'1'"
    assert not (tmp_path / "ipdir" / "profile_default" / "history.sqlite").exists()


def _kernel_children() -> set[int]:
    psutil = pytest.importorskip("psutil")
    me = psutil.Process()
    return {p.pid for p in me.children(recursive=True) if "ipykernel" in " ".join(p.cmdline())}


def test_shutdown_during_background_start_leaves_no_process(tmp_path: Path) -> None:
    before = _kernel_children()
    k = _track(SiblingKernel(cwd=tmp_path))
    k.start_background()
    time.sleep(0.3)  # the process is launched, the kernel not yet ready
    k.shutdown()
    deadline = time.monotonic() + 5
    while _kernel_children() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _kernel_children() - before
    with pytest.raises(KernelError, match="shut down"):
        k.execute("1")


@pytest.mark.parametrize("wait", [True, False], ids=["started", "starting"])
def test_interpreter_exit_shuts_the_kernel_down(tmp_path: Path, wait: bool) -> None:
    """No shutdown() call at all: atexit (via weakref.finalize) must still stop the process."""
    import subprocess

    script = (
        "import time\n"
        "from ipyagent.kernel.sibling import SiblingKernel\n"
        f"k = SiblingKernel(cwd={str(tmp_path)!r})\n"
        f"k.start(wait={wait})\n"
        "while k.pid is None: time.sleep(0.01)\n"
        "print(k.pid, k.state, k._handle.tmpdir, flush=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    pid_text, state, tmpdir = proc.stdout.split()
    assert not Path(tmpdir).exists()  # our cleanup ran (ipykernel's parent poller would not do this)
    assert state == ("idle" if wait else "starting")
    pid = int(pid_text)
    _PID_LISTS.append([pid])
    deadline = time.monotonic() + 5
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(pid)


def test_outputs_are_valid_nbformat(kernel: SiblingKernel) -> None:
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    code = (
        "from IPython.display import display, HTML\n"
        "import sys; print('out'); print('err', file=sys.stderr)\n"
        "display(HTML('<b>x</b>'), display_id='d1')\n"
        "42"
    )
    cells = []
    for source in (code, "raise ValueError('bad')"):
        r = kernel.execute(source)
        cells.append(new_code_cell(source, outputs=r.outputs, execution_count=r.execution_count))
    nbformat.validate(new_notebook(cells=cells))
    kinds = [o["output_type"] for o in cells[0].outputs]
    assert kinds == ["stream", "stream", "display_data", "execute_result"]
    assert cells[1].outputs[0]["output_type"] == "error"


async def test_cancelled_execute_interrupts_the_kernel(kernel: SiblingKernel) -> None:
    task = asyncio.ensure_future(kernel.execute_async("import time; time.sleep(60)"))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    r = await kernel.execute_async("'next'")
    assert r.text == "'next'" and r.duration < 30  # the sleep was interrupted, not waited out


async def test_a_call_cancelled_before_its_cell_started_does_not_run_later(kernel: SiblingKernel) -> None:
    """An interrupt that reaches an idle kernel is lost: a cell given up while still queued
    then ran whole (seen when a rewind's re-run was stopped under load). The next request
    first interrupts it once it starts, and the kernel keeps its variables."""
    await kernel.execute_async("kept = 1; late = None")
    kc = kernel._handle.kc
    assert kc is not None
    kc.execute("import time; time.sleep(1.5)")  # keeps the kernel busy: the next cell queues
    task = asyncio.ensure_future(kernel.execute_async("import time; time.sleep(3); late = 1"))
    await asyncio.sleep(0.3)  # sent, still queued behind the sleep
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    r = await kernel.execute_async("print(late, kept)")
    assert r.text.strip() == "None 1" and r.status == "ok", r.text
    assert "restarted" not in r.text


async def test_stream_text_arrives_live_while_the_code_runs(kernel: SiblingKernel) -> None:
    seen: list[tuple[float, str, str]] = []
    r = await kernel.execute_async(
        "import time, sys\nprint('first', flush=True)\ntime.sleep(0.6)\n"
        "print('oops', file=sys.stderr, flush=True)\nprint('last')",
        on_stream=lambda name, text: seen.append((time.monotonic(), name, text)))
    done = time.monotonic()
    assert r.status == "ok" and "first" in r.text and "last" in r.text
    assert seen[0][1:] == ("stdout", "first\n")
    assert done - seen[0][0] > 0.4  # it came while the code was still sleeping
    assert ("stderr", "oops\n") in [(n, t) for _, n, t in seen]
    # A broken callback never loses output.
    r = await kernel.execute_async("print('x')", on_stream=lambda n, t: 1 / 0)
    assert r.text == "x"


_FORGED = '''
k = get_ipython().kernel
msg = k.session.msg("stream", {"name": "stdout", "text": "forged\\n"}, parent=k.get_parent())
parts = k.session.serialize(msg, ident=b"stream.stdout")
parts[parts.index(b"<IDS|MSG>") + 1] = b"0" * 64
k.iopub_socket.send_multipart(parts)
print("after")
'''


def test_a_message_with_a_bad_signature_is_skipped_not_raised(kernel: SiblingKernel) -> None:
    """A kernel near its memory limit sent one: execute raised 'ValueError: Invalid Signature'."""
    r = kernel.execute(_FORGED)
    assert r.status == "ok" and r.text.startswith("after")
    assert "could not be read (bad signature)" in r.text and "forged" not in r.text
    assert kernel.execute("1+1").text == "2" and kernel.state == "idle"
