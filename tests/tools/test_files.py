"""Workspace file tools: what they do, what they refuse (path escapes), and their approval."""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import ipyagent
from ipyagent import Agent
from ipyagent._util import eventloop as _eventloop
from ipyagent.context.items import ToolCall, ToolResult
from ipyagent.tools.files import READ_CHARS, diff_preview
from tests.helpers.scripted_model import ScriptedModel, calls, text


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace with a file, a subdirectory, and a secret file beside (outside) it."""
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (root / "notes.txt").write_text("hello\n")
    (tmp_path / "secret.txt").write_text("TOP SECRET\n")
    return root


@pytest.fixture
def agent(ws: Path):
    with Agent(python_tool=False, workspace=str(ws)) as a:
        yield a


def run(agent: Agent, name: str, **args) -> ToolResult:
    return _eventloop.run_sync(agent.tools.execute(ToolCall("c1", name, args)))


def test_the_four_tools_are_there_by_default_and_can_be_turned_off(ws: Path) -> None:
    with Agent(workspace=str(ws), shell_tool="off") as a:
        assert a.tools.names == ["python", "read_file", "write_file", "list_files", "edit_file",
                                 "load_skill"]
    with Agent(file_tools=False, python_tool=False, skills_enabled=False) as a:
        assert a.tools.names == []


def test_read_write_list_edit(agent: Agent, ws: Path) -> None:
    assert run(agent, "read_file", path="pkg/mod.py").output == "def f():\n    return 1\n"
    made = run(agent, "write_file", path="new/dir/a.txt", content="one\ntwo\n")
    assert not made.error and made.output.startswith("created new/dir/a.txt")
    assert made.output.endswith("2 lines)")  # a final newline ends a line, it adds none
    assert (ws / "new" / "dir" / "a.txt").read_text() == "one\ntwo\n"
    bye = run(agent, "write_file", path="notes.txt", content="bye").output
    assert bye.startswith("replaced") and bye.endswith("1 line)")
    edited = run(agent, "edit_file", path="pkg/mod.py", old="return 1", new="return 2")
    assert not edited.error and "at line 2" in edited.output
    assert (ws / "pkg" / "mod.py").read_text() == "def f():\n    return 2\n"
    listing = run(agent, "list_files").output.splitlines()
    assert listing[0] == "./ (3 entries)"
    assert listing[1:] == ["new/", "pkg/", "notes.txt  (3 bytes)"]  # directories first
    assert run(agent, "list_files", path="pkg").output == "pkg/ (1 entries)\nmod.py  (22 bytes)"
    absolute = run(agent, "read_file", path=str(ws / "notes.txt"))  # absolute, but inside
    assert absolute.output == "bye"


@pytest.mark.parametrize("name,args", [
    ("read_file", {}), ("write_file", {"content": "x"}), ("list_files", {}),
    ("edit_file", {"old": "TOP", "new": "NOT"}),
])
@pytest.mark.parametrize("path", ["../secret.txt", "pkg/../../secret.txt", "{outside}"])
def test_paths_outside_the_workspace_are_refused(agent: Agent, ws: Path, name: str,
                                                 args: dict, path: str) -> None:
    path = path.format(outside=ws.parent / "secret.txt")
    result = run(agent, name, path=path, **args)
    assert result.error and "outside the workspace" in result.output
    assert result.output.startswith("Error: ") and "raised" not in result.output
    assert (ws.parent / "secret.txt").read_text() == "TOP SECRET\n"  # untouched


@pytest.mark.parametrize("name,args", [
    ("read_file", {}), ("write_file", {"content": "x"}), ("edit_file", {"old": "TOP", "new": "X"}),
])
def test_symlinks_that_escape_are_refused(agent: Agent, ws: Path, name: str, args: dict) -> None:
    (ws / "link.txt").symlink_to(ws.parent / "secret.txt")
    (ws / "linkdir").symlink_to(ws.parent)
    (ws / "dangling").symlink_to(ws.parent / "not-yet.txt")
    for path in ("link.txt", "linkdir/secret.txt", "dangling"):
        result = run(agent, name, path=path, **args)
        assert result.error and "symlink" in result.output and "leads outside" in result.output
    assert (ws.parent / "secret.txt").read_text() == "TOP SECRET\n"
    assert not (ws.parent / "not-yet.txt").exists()
    assert run(agent, "list_files", path="linkdir").error


def test_symlinks_inside_the_workspace_work(agent: Agent, ws: Path) -> None:
    (ws / "alias.py").symlink_to(ws / "pkg" / "mod.py")
    assert run(agent, "read_file", path="alias.py").output.startswith("def f()")
    run(agent, "edit_file", path="alias.py", old="return 1", new="return 3")
    assert (ws / "alias.py").is_symlink()  # the link is kept; its target was written
    assert "return 3" in (ws / "pkg" / "mod.py").read_text()
    assert "alias.py -> (symlink)" in run(agent, "list_files").output


def test_mistakes_are_clear_error_values(agent: Agent, ws: Path) -> None:
    (ws / "twice.txt").write_text("a\na\n")
    (ws / "blob.bin").write_bytes(b"\x89PNG\x00\x00data")
    cases = {
        ("read_file", "missing.txt"): "does not exist",
        ("read_file", "pkg"): "is a directory",
        ("read_file", "blob.bin"): "looks binary",
        ("list_files", "notes.txt"): "not a directory",
        ("read_file", ""): "the path is empty",
    }
    for (name, path), expected in cases.items():
        result = run(agent, name, path=path)
        assert result.error and expected in result.output, (name, path, result.output)
    assert "occurs 2 times" in run(agent, "edit_file", path="twice.txt", old="a", new="b").output
    assert "was not found" in run(agent, "edit_file", path="notes.txt", old="zzz", new="b").output
    assert "`old` is empty" in run(agent, "edit_file", path="notes.txt", old="", new="b").output
    assert (ws / "twice.txt").read_text() == "a\na\n"
    named_dir = run(agent, "write_file", path="out/", content="x")
    assert named_dir.error and "names a directory" in named_dir.output
    assert not (ws / "out").exists()  # no file called 'out' either


def test_reads_are_capped_and_can_be_paged(agent: Agent, ws: Path) -> None:
    lines = [f"line {i:05d} " + "x" * 60 + "\n" for i in range(1, 2001)]
    (ws / "big.txt").write_text("".join(lines))
    first = run(agent, "read_file", path="big.txt").output
    assert len(first) < READ_CHARS + 200
    body, note = first.rsplit("\n[", 1)
    shown = body.count("\n") + 1
    assert body.startswith("line 00001") and f"showing lines 1–{shown} of big.txt" in note
    assert f"start_line={shown + 1}) for more" in note
    nxt = run(agent, "read_file", path="big.txt", start_line=shown + 1).output
    assert nxt.startswith(f"line {shown + 1:05d}")
    last = run(agent, "read_file", path="big.txt", start_line=1999).output
    assert last.endswith("; end of file]") and last.startswith("line 01999")
    assert run(agent, "read_file", path="big.txt", start_line=5000).error


def test_writes_are_atomic_and_keep_the_mode(agent: Agent, ws: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    script = ws / "run.sh"
    script.write_text("echo 1\n")
    script.chmod(0o750)
    run(agent, "edit_file", path="run.sh", old="1", new="2")
    assert stat.S_IMODE(script.stat().st_mode) == 0o750 and script.read_text() == "echo 2\n"
    umask = os.umask(0o022)
    os.umask(umask)
    run(agent, "write_file", path="fresh.txt", content="x")
    assert stat.S_IMODE((ws / "fresh.txt").stat().st_mode) == 0o666 & ~umask

    def broken_replace(src: str, dst: str, **dir_fds: int) -> None:  # the disk fails last
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    failed = run(agent, "write_file", path="run.sh", content="rm -rf /\n")
    assert failed.error and "No space left on device" in failed.output
    assert script.read_text() == "echo 2\n"  # the old content, whole
    assert sorted(p.name for p in ws.iterdir()) == ["fresh.txt", "notes.txt", "pkg", "run.sh"]


def test_each_call_is_approved_and_read_only_tools_can_be_allowed(ws: Path) -> None:
    asked: list[str] = []

    def hook(call: ToolCall) -> bool | str:
        asked.append(call.name)
        return call.name != "write_file" or "no writes"

    model = ScriptedModel([calls(("list_files", {}), ("read_file", {"path": "notes.txt"}),
                                 ("write_file", {"path": "out.txt", "content": "x"})),
                           text("done")])
    with Agent(client=model, python_tool=False, workspace=str(ws), approval="ask",
               approval_hook=hook, allow=["read_file", "list_files"], skills_enabled=False) as agent:
        agent.run("look around")
    assert asked == ["write_file"]  # the read-only ones were on the allow list
    out = [i for i in agent.context if isinstance(i, ToolResult)]
    assert out[1].output == "hello\n" and out[2].meta["denied"]
    assert not (ws / "out.txt").exists()
    assert {t["name"] for t in model.requests[0].tools} == {
        "read_file", "write_file", "list_files", "edit_file"}


def test_workspace_defaults_to_cwd_then_the_current_directory(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here.txt").write_text("here")
    with Agent(python_tool=False) as a:
        assert a.workspace_path == tmp_path.resolve()
        assert run(a, "read_file", path="here.txt").output == "here"
        a.cwd = str(tmp_path / "sub")
        assert a.workspace_path == (tmp_path / "sub").resolve()
        a.workspace = str(tmp_path)
        assert a.workspace_path == tmp_path.resolve()


def test_diff_preview_of_writes_and_edits(ws: Path) -> None:
    edit = ToolCall("c", "edit_file", {"path": "pkg/mod.py", "old": "return 1", "new": "return 2"})
    preview = diff_preview(edit, ws)
    assert preview is not None
    assert "--- a/pkg/mod.py" in preview and "-    return 1\n+    return 2\n" in preview
    new = diff_preview(ToolCall("c", "write_file", {"path": "n.txt", "content": "a\n"}), ws)
    assert new is not None and "--- /dev/null" in new and "+a\n" in new
    assert "outside the workspace" in (diff_preview(
        ToolCall("c", "write_file", {"path": "../x", "content": ""}), ws) or "")
    assert diff_preview(ToolCall("c", "read_file", {"path": "n.txt"}), ws) is None


def test_write_and_edit_calls_show_a_diff_where_they_are_approved(tmp_path):
    import io

    from ipyagent import Agent, ToolCall
    from ipyagent.context.events import ToolCallRequested
    from ipyagent.frontends.notebook import card_html
    from ipyagent.frontends.terminal import TerminalDisplay

    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    agent = Agent(python_tool=False, workspace=str(tmp_path))
    edit = ToolCall("c1", "edit_file", {"path": "notes.txt", "old": "beta", "new": "gamma"})
    diff = agent.tools.preview(edit)
    assert "-beta" in diff and "+gamma" in diff and "a/notes.txt" in diff
    assert agent.tools.preview(ToolCall("c2", "read_file", {"path": "notes.txt"})) is None
    html = card_html(edit, "waiting", preview=diff)
    assert "+gamma" in html and "&quot;old&quot;" not in html  # the diff replaces the JSON
    out = io.StringIO()
    TerminalDisplay(out, preview=agent.tools.preview)(ToolCallRequested(edit))
    assert "│ +gamma" in out.getvalue()
    assert (tmp_path / "notes.txt").read_text() == "alpha\nbeta\n"  # a preview changes nothing
    agent.close()


def test_a_file_that_is_not_utf8_is_never_rewritten_with_replacement_characters(
        agent: Agent, ws: Path) -> None:
    latin = ws / "latin1.txt"
    latin.write_bytes("café déjà vu\n".encode("latin-1"))
    edit = run(agent, "edit_file", path="latin1.txt", old="vu", new="VU")
    assert edit.error and "not UTF-8" in edit.output and "python tool" in edit.output
    assert latin.read_bytes() == "café déjà vu\n".encode("latin-1")  # untouched
    preview = diff_preview(ToolCall("c", "edit_file", {"path": "latin1.txt", "old": "vu",
                                                       "new": "VU"}), ws)
    assert preview is not None and "not UTF-8" in preview
    assert "caf" in run(agent, "read_file", path="latin1.txt").output  # reading still works


def test_a_symlink_loop_is_one_clear_error_and_does_not_break_the_listing(
        agent: Agent, ws: Path) -> None:
    os.symlink(ws / "loop2", ws / "loop1")
    os.symlink(ws / "loop1", ws / "loop2")
    listing = run(agent, "list_files", path=".")
    assert not listing.error and "notes.txt" in listing.output
    assert "loop1 -> (symlink, a loop)" in listing.output
    for name, args in [("read_file", {}), ("write_file", {"content": "x"}),
                       ("edit_file", {"old": "a", "new": "b"})]:
        result = run(agent, name, path="loop1", **args)
        assert result.error and "symlink loop" in result.output and "raised" not in result.output


def test_a_line_longer_than_the_cap_is_said_to_be_cut(agent: Agent, ws: Path) -> None:
    (ws / "one_line.json").write_text("[" + "1," * 3_000_000 + "1]")  # 6 MB, no newline
    result = run(agent, "read_file", path="one_line.json")
    assert not result.error and len(result.output) < READ_CHARS + 400
    assert result.output.startswith("[1,1,")
    assert "line 1 is longer than" in result.output and "end of file]" in result.output
    (ws / "mixed.txt").write_text("short\n" + "y" * (READ_CHARS + 5) + "\nafter\n")
    first = run(agent, "read_file", path="mixed.txt").output
    assert first.startswith("short\n") and "start_line=2) for more" in first
    second = run(agent, "read_file", path="mixed.txt", start_line=2).output
    assert "line 2 is longer than" in second and "start_line=3) for more" in second
    assert run(agent, "read_file", path="mixed.txt", start_line=3).output.startswith("after\n")
    (ws / "exact.txt").write_text("z" * READ_CHARS + "\nnext\n")  # exactly the cap: not cut
    exact = run(agent, "read_file", path="exact.txt").output
    assert "longer than" not in exact and exact.startswith("z" * READ_CHARS + "\n[showing")


def test_edit_file_matches_a_windows_file_written_with_plain_newlines(agent: Agent, ws: Path) -> None:
    crlf = ws / "win.py"
    crlf.write_bytes(b"def f():\r\n    return 1\r\n\r\ndef g():\r\n    return 2\r\n")
    edit = run(agent, "edit_file", path="win.py", old="def f():\n    return 1\n",
               new="def f():\n    return 10\n")
    assert not edit.error, edit.output
    assert crlf.read_bytes() == b"def f():\r\n    return 10\r\n\r\ndef g():\r\n    return 2\r\n"
    preview = diff_preview(ToolCall("c", "edit_file", {"path": "win.py", "old": "return 2\n",
                                                       "new": "return 20\n"}), ws)
    assert preview is not None and "+    return 20" in preview


@pytest.fixture
def unblocker(ws: Path):
    """Frees a call stuck opening a FIFO (as today's main did, forever): after a while a
    writer opens the FIFO and writes, so such a call returns that text instead of hanging."""
    stop = threading.Event()
    pipes: list[Path] = []

    def free() -> None:
        while not stop.wait(15):
            for pipe in pipes:
                with contextlib.suppress(OSError):  # ENXIO: nobody is reading it, good
                    fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
                    os.write(fd, b"FIFO CONTENT\n")
                    os.close(fd)

    thread = threading.Thread(target=free, daemon=True)
    thread.start()
    yield pipes
    stop.set()
    thread.join()


def test_fifos_sockets_and_devices_are_refused_without_blocking(agent: Agent, ws: Path,
                                                                unblocker: list[Path]) -> None:
    os.mkfifo(ws / "pipe")
    unblocker.append(ws / "pipe")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(ws / "sock"))
    (ws / "zero").symlink_to("/dev/zero")
    odd = {"pipe": "named pipe", "sock": "socket"}
    try:  # a device node inside the workspace (root only)
        os.mknod(ws / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        odd["null"] = "character device"
    except PermissionError:
        pass
    every = [("read_file", {}), ("write_file", {"content": "x"}),
             ("edit_file", {"old": "a", "new": "b"})]
    for name, kind in odd.items():
        for tool_name, args in every:
            result = run(agent, tool_name, path=name, **args)
            assert result.error, (name, tool_name, result.output)
            assert f"is a {kind}, not a regular file" in result.output, result.output
            assert "\n" not in result.output
        preview = diff_preview(ToolCall("c", "write_file", {"path": name, "content": "x"}), ws)
        assert preview is not None and kind in preview
    assert stat.S_ISFIFO((ws / "pipe").lstat().st_mode)  # not replaced by a regular file
    assert stat.S_ISSOCK((ws / "sock").lstat().st_mode)
    for tool_name, args in every:
        zero = run(agent, tool_name, path="zero", **args)
        assert zero.error and "leads outside" in zero.output
    listing = run(agent, "list_files").output
    assert "pipe  (named pipe)" in listing and "sock  (socket)" in listing
    server.close()


def test_a_read_that_blocks_times_out_and_never_keeps_python_from_exiting(ws: Path) -> None:
    # As if the FIFO refusal did not exist, opening the FIFO blocks in the kernel: the call
    # must come back as an error value after Agent.tool_timeout, and a call still blocked
    # (tool_timeout 0: no limit) must not keep the interpreter from exiting.
    os.mkfifo(ws / "pipe")
    script = textwrap.dedent(f"""
        import time
        from ipyagent import Agent, ToolCall
        from ipyagent._util import eventloop as _eventloop
        from ipyagent.tools import files
        files._NONBLOCK = 0
        agent = Agent(python_tool=False, workspace={str(ws)!r}, tool_timeout=1)
        call = ToolCall("c1", "read_file", {{"path": "pipe"}})
        print(_eventloop.run_sync(agent.tools.execute(call)).output, flush=True)
        agent.tool_timeout = 0
        _eventloop.submit(agent.tools.execute(call))
        time.sleep(0.5)
        print("exiting", flush=True)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(ipyagent.__file__).parents[1])}  # this copy
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=False, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    first, last = done.stdout.splitlines()
    assert first.startswith("Error: read_file did not finish within 1 s (Agent.tool_timeout)")
    assert last == "exiting"


def _exchange(a: Path, b: Path) -> None:
    """Atomically swap two names (renameat2 RENAME_EXCHANGE): ``a`` is never missing."""
    if _libc.renameat2(-100, bytes(a), -100, bytes(b), 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
        raise OSError(ctypes.get_errno(), "renameat2")


_libc = ctypes.CDLL(None, use_errno=True)


def test_a_directory_swapped_for_a_symlink_never_redirects_a_call(agent: Agent, ws: Path) -> None:
    if not hasattr(_libc, "renameat2"):
        pytest.skip("no renameat2 in this libc: the swap cannot be made atomic")
    outside = ws.parent / "outside"
    outside.mkdir()
    (outside / "data.txt").write_text("OUTSIDE SECRET\n")
    (outside / "edit.txt").write_text("counter\n")
    (outside / "only-outside.txt").write_text("")
    sub = ws / "sub"
    sub.mkdir()
    (sub / "data.txt").write_text("inside\n")
    (sub / "edit.txt").write_text("counter\n")
    (ws / ".swap").symlink_to(outside)
    inode = (outside / "edit.txt").stat().st_ino
    stop = threading.Event()
    flips = 0

    def attack() -> None:  # ws/sub is a real directory, then a symlink to outside, again …
        nonlocal flips
        while not stop.is_set():
            _exchange(sub, ws / ".swap")
            flips += 1

    attacker = threading.Thread(target=attack, daemon=True)
    attacker.start()
    leaked_reads = 0
    try:
        for i in range(150):
            run(agent, "write_file", path=f"sub/w{i}.txt", content="written\n")
            leaked_reads += "OUTSIDE" in run(agent, "read_file", path="sub/data.txt").output
            if i % 3 == 0:
                run(agent, "edit_file", path="sub/edit.txt", old="counter", new="counter")
                leaked_reads += "only-outside" in run(agent, "list_files", path="sub").output
    finally:
        stop.set()
        attacker.join()
    assert flips > 300  # the swap really ran throughout
    assert sorted(p.name for p in outside.iterdir()) == ["data.txt", "edit.txt",
                                                          "only-outside.txt"]
    assert (outside / "edit.txt").stat().st_ino == inode  # never replaced
    assert leaked_reads == 0


def test_relative_links_and_dotdot_stay_correct(agent: Agent, ws: Path) -> None:
    (ws / "pkg" / "up.txt").symlink_to("../notes.txt")  # relative, climbing inside
    (ws / "pkg" / "esc.txt").symlink_to("../../secret.txt")  # relative, climbing out
    (ws / "here").symlink_to(".")
    (ws / "broken").symlink_to("nowhere.txt")
    assert run(agent, "read_file", path="pkg/up.txt").output == "hello\n"
    assert run(agent, "read_file", path="pkg/../notes.txt").output == "hello\n"
    assert run(agent, "read_file", path="here/here/pkg/mod.py").output.startswith("def f()")
    escaped = run(agent, "read_file", path="pkg/esc.txt")
    assert escaped.error and "leads outside" in escaped.output
    written = run(agent, "write_file", path="here/pkg/up.txt", content="via links\n")
    assert written.output.startswith("replaced notes.txt")  # where it really went
    assert (ws / "notes.txt").read_text() == "via links\n" and (ws / "pkg/up.txt").is_symlink()
    assert run(agent, "write_file", path="broken", content="made\n").output.startswith(
        "created nowhere.txt")
    (ws / "pkg" / "gone").symlink_to("missing/x")
    listing = run(agent, "list_files", path="pkg").output
    assert "gone -> (symlink, broken)" in listing
    assert "up.txt -> (symlink)" in listing and "esc.txt -> (symlink, leads outside)" in listing
    assert run(agent, "list_files", path="here").output.startswith("./ (")
