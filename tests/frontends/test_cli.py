"""The ``ipyagent`` console script, run as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

SCRIPT = Path(sysconfig.get_path("scripts")) / "ipyagent"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "ipyagent.frontends.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, stdin=subprocess.DEVNULL)


def test_run_demo_prints_answer_and_exits_zero(tmp_path):
    proc = run("run", "Use Python to compute 2**100", "--model", "demo", "--approve", "auto",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert str(2**100) in proc.stdout
    assert "done · 3 steps" in proc.stdout


def test_exit_code_nonzero_when_not_done(tmp_path):
    proc = run("run", "compute 2**100", "--max-steps", "1", "--approve", "auto", cwd=tmp_path)
    assert proc.returncode == 1
    assert "max_steps" in proc.stdout


def test_with_no_terminal_to_ask_in_calls_are_denied_saying_how_to_allow(tmp_path):
    proc = run("run", "Use Python to compute 2**100", "--model", "demo", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    assert "nobody could approve this call: stdin is not a terminal" in proc.stdout
    assert proc.stdout.count("nobody could approve") == 1, proc.stdout  # said once
    assert "  ✗ denied (headless)\n" in proc.stdout
    assert "--approve auto" in proc.stdout
    assert str(2**100) not in proc.stdout  # nothing ran
    assert "denied" in proc.stdout.splitlines()[-1]


def test_bad_setting_is_one_line(tmp_path):
    proc = run("run", "x", "--max-steps", "0", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "max_steps" in proc.stderr


def test_unreachable_endpoint_is_one_line(tmp_path):
    proc = run("run", "hi", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", cwd=tmp_path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "127.0.0.1:9" in proc.stdout


def test_a_base_url_without_a_scheme_is_one_line_at_once(tmp_path):
    proc = run("run", "hi", "--model", "m", "--base-url", "localhost:11434/v1", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "did you mean 'http://localhost:11434/v1'" in proc.stderr


def test_provider_preset_sets_the_endpoint(tmp_path):
    proc = run("run", "hi", "--provider", "lmstudio", "--model", "m", cwd=tmp_path)
    assert proc.returncode == 1
    assert "http://127.0.0.1:1234/v1/chat/completions" in proc.stdout
    bad = run("run", "hi", "--provider", "nope", cwd=tmp_path)
    assert bad.returncode == 2 and "provider" in bad.stderr and "Traceback" not in bad.stderr


def spawn(tmp_path, *args: str, env=None):
    """The console script in a pseudo-terminal, as a person at a terminal runs it."""
    pexpect = __import__("pytest").importorskip("pexpect")
    cmd = str(SCRIPT) if SCRIPT.exists() else sys.executable
    argv = list(args) if SCRIPT.exists() else ["-m", "ipyagent.frontends.cli", *args]
    # The texts matched here are plain: NO_COLOR (a terminal gets colour, tested apart).
    env = {**(env if env is not None else os.environ), "NO_COLOR": "1"}
    return pexpect.spawn(cmd, argv, cwd=str(tmp_path), encoding="utf-8", timeout=60, env=env)


def ctrl_c_at_the_prompt(tmp_path, said: str, *options: str) -> None:
    """Run a task, press Ctrl-C at its first prompt: ``said`` is printed, the exit code 130."""
    pexpect = __import__("pytest").importorskip("pexpect")
    child = spawn(tmp_path, "run", "compute 3**4", *options)
    child.expect(r"Run it\? \[y\]es")
    child.sendintr()
    child.expect(said)
    child.expect(pexpect.EOF, timeout=10)
    child.close()
    assert child.exitstatus == 130


def test_terminal_prompt_in_a_pty(tmp_path):
    pexpect = __import__("pytest").importorskip("pexpect")
    child = spawn(tmp_path, "run", "compute 3**4")
    child.expect(r"Run it\? \[y\]es")
    assert child.before.count("print(f'digits: {len(value)}')") == 1  # the call, shown once
    child.sendline("y")
    child.expect("TypeError")  # it really ran
    child.expect(r"Run it\?")
    child.sendline("n")
    child.expect("Reason for the model")
    child.sendline("")
    child.expect(pexpect.EOF)
    child.close()
    assert "denied" in child.before and child.exitstatus == 1


def test_ctrl_c_at_the_prompt_exits_at_once(tmp_path):
    """Before: the prompt read stdin in a worker thread that kept the process alive."""
    ctrl_c_at_the_prompt(tmp_path, "ipyagent: interrupted")


def test_save_says_where_and_a_failed_save_is_not_success(tmp_path):
    ok = run("run", "compute 2**10", "--model", "demo", "--save", "runs/", "--approve", "auto",
             cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    (saved,) = (tmp_path / "runs").glob("run-*.ipynb")  # a directory gets a new run file
    assert f"saved the transcript to runs/{saved.name}" in ok.stderr
    (tmp_path / "blocker").write_text("a file where a directory should be")
    bad = run("run", "compute 2**10", "--model", "demo", "--save", "blocker/run.ipynb", cwd=tmp_path)
    assert bad.returncode == 2
    assert "could not save the transcript" in bad.stderr and "Traceback" not in bad.stderr


def test_quiet_run_that_is_not_done_says_why_on_stderr(tmp_path):
    proc = run("run", "compute 2**100", "--max-steps", "1", "--approve", "auto", "--quiet",
               cwd=tmp_path)
    assert proc.returncode == 1
    assert "max_steps" not in proc.stdout  # stdout stays the answer only
    # The step after the limit asks for the answer (Agent.answer_at_limit): the demo's says so.
    assert "I reached the step limit before I could finish" in proc.stdout
    assert proc.stderr.startswith("ipyagent: max_steps · 2 steps") and proc.stderr.count("\n") == 1
    denied = run("run", "compute 2**100", "--quiet", cwd=tmp_path)  # nobody to ask: denied
    assert denied.returncode == 1 and "ipyagent: denied" in denied.stderr


def test_ctrl_c_with_save_keeps_what_was_done(tmp_path):
    import nbformat

    ctrl_c_at_the_prompt(tmp_path, "saved the transcript to out.ipynb", "--save", "out.ipynb")
    nb = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    nbformat.validate(nb)
    assert "compute 3**4" in "".join(c.source for c in nb.cells)


def test_edit_opens_the_editor_on_the_code_and_runs_what_was_saved(tmp_path):
    pexpect = __import__("pytest").importorskip("pexpect")
    # An "editor" that fixes the demo model's bug in the file it is given, as a person would.
    editor = tmp_path / "fix.py"
    editor.write_text("import sys\np = sys.argv[1]\nt = open(p).read()\n"
                      "open(p, 'w').write(t.replace('len(value)', 'len(str(value))'))\n")
    env = {**__import__("os").environ, "EDITOR": f"{sys.executable} {editor}"}
    env.pop("VISUAL", None)
    child = spawn(tmp_path, "run", "compute 3**4", env=env)
    child.expect(r"Run it\? \[y\]es")
    child.sendline("e")
    child.expect("Editing in ")
    child.expect(r"digits: 2")  # the edited code ran: no TypeError this time
    child.expect(pexpect.EOF)
    child.close()
    assert "TypeError" not in child.before and child.exitstatus == 0


HIDDEN = "open('pwned.txt', 'w').write('owned')"
HELLO = "print('Hello, world!')"


# Each payload makes a terminal that obeys it show only the harmless line.
@pytest.mark.parametrize("code, shown", [
    # ESC[2K erases the line, ESC[G returns to column 1: the hidden write is wiped
    (f"{HIDDEN}  # \x1b[2K\x1b[G{HELLO}", f"{HIDDEN}  # ␛[2K␛[G{HELLO}"),
    # on the next line, erased and the cursor moved back up
    (f"{HELLO}\n{HIDDEN}  # \x1b[2K\x1b[1A", f"{HIDDEN}  # ␛[2K␛[1A"),
    # a carriage return: the harmless text overprints the hidden write
    (f"{HIDDEN}  #\r{HELLO}          ", f"{HIDDEN}  #␍{HELLO}"),
    # a right-to-left override: the rest of the line reads backwards (Trojan Source)
    (f"{HIDDEN}  #\u202e)'!dlrow ,olleH'(tnirp", f"{HIDDEN}  #⟨U+202E⟩)'!dlrow ,olleH'(tnirp"),
], ids=["erase-line", "erase-next-line", "carriage-return", "bidi-override"])
@pytest.mark.parametrize("quiet", [False, True], ids=["display", "quiet"])
def test_the_prompt_shows_the_code_that_runs_controls_made_visible(
        tmp_path, scripted_server, code, shown, quiet) -> None:
    """Issue 12, finding 3: the user approved what looked like print('Hello, world!')."""
    import io

    pexpect = pytest.importorskip("pexpect")
    from tests.helpers.scripted_server import reply_tool_calls

    scripted_server.script([reply_tool_calls([("python", {"code": code})])])
    child = spawn(tmp_path, "run", "say hello", "--model", "m", "--base-url",
                  scripted_server.base_url, *(["--quiet"] if quiet else []))
    seen = child.logfile_read = io.StringIO()
    child.expect(r"Run it\? \[y\]es")
    child.sendline("n")
    child.expect("Reason for the model")
    child.sendline("")
    child.expect(pexpect.EOF)
    child.close()
    terminal = seen.getvalue()
    assert shown in terminal  # what the terminal shows holds the hidden code, visibly
    assert "\x1b" not in terminal and "\u202e" not in terminal  # our CLI sends no controls
    assert "\r" not in terminal.replace("\r\n", "\n")  # the tty's own CR-LF aside
    assert not (tmp_path / "pwned.txt").exists() and child.exitstatus == 1


def test_nothing_listening_at_a_local_base_url_says_to_start_the_server(tmp_path):
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = run("run", "hi", "--model", "m", "--base-url", f"http://127.0.0.1:{port}/v1",
               cwd=tmp_path)
    assert proc.returncode == 1
    assert "could not connect" in proc.stdout
    assert "is the model server running at that address?" in proc.stdout, proc.stdout


def test_the_start_says_whether_the_shell_tool_is_on_and_why(tmp_path):
    from ipyagent.kernel import sandbox

    proc = run("run", "run `echo cli-shell-ok`", "--approve", "auto", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("ipyagent: shell tool: "))
    if sandbox.probe()[0] is not None:
        assert line.startswith("ipyagent: shell tool: on (") and "sandbox" in line
        assert "┌ shell" in proc.stdout and "cli-shell-ok" in proc.stdout
    else:
        assert "not sandboxed" in line and "┌ shell" not in proc.stdout
