"""``ipyagent repl``, run as a person runs it: in a pseudo-terminal (pexpect), or piped."""

from __future__ import annotations

import io
import json
import os
import re
import stat
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from tests.helpers.scripted_server import reply_text, reply_tool_calls

SCRIPT = Path(sysconfig.get_path("scripts")) / "ipyagent"
PROMPT = r"ipyagent \[(\d+)\]> "


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A new user: an empty home and IPython dir, plain text (NO_COLOR), no CPR wait."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("IPYTHONDIR", "VISUAL", "EDITOR")}
    return {**env, "HOME": str(home), "IPYTHONDIR": str(home / ".ipython"), "NO_COLOR": "1",
            "PROMPT_TOOLKIT_NO_CPR": "1", "TERM": "xterm", **extra}


def _cmd(*args: str) -> list[str]:
    return [str(SCRIPT), *args] if SCRIPT.exists() else [sys.executable, "-m",
                                                          "ipyagent.frontends.cli", *args]


def spawn(tmp_path: Path, *args: str, **env: str):
    pexpect = pytest.importorskip("pexpect")
    cmd = _cmd("repl", *args)
    child = pexpect.spawn(cmd[0], cmd[1:], cwd=str(tmp_path), encoding="utf-8", timeout=60,
                          env=_env(tmp_path, **env), dimensions=(40, 200))
    child.logfile_read = io.StringIO()  # everything the terminal was sent
    return child


def piped(tmp_path: Path, lines: list[str], *args: str, command: str = "repl",
          **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_cmd(command, *args), input="".join(f"{ln}\n" for ln in lines),
                          capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env=_env(tmp_path, **env))


def task(child, text: str, number: int, *shown: str) -> None:
    """Type ``text`` at prompt ``number``; wait for what it ``shown`` and its run's footer."""
    child.expect(PROMPT)
    assert child.match.group(1) == str(number)
    child.sendline(text)
    for pattern in shown:
        child.expect(pattern)
    child.expect("── ")


def leave(child) -> str:
    """Ctrl-D at the prompt: the session ends with exit code 0; all it printed."""
    pexpect = pytest.importorskip("pexpect")
    child.expect(PROMPT)
    child.sendcontrol("d")
    child.expect(pexpect.EOF, timeout=30)
    child.close()
    assert child.exitstatus == 0, child.logfile_read.getvalue()[-2000:]
    return child.logfile_read.getvalue()


def test_a_three_task_conversation_in_one_session(tmp_path):
    """The issue's "done when": three tasks, one conversation, one sibling kernel."""
    from ipyagent import Agent
    from ipyagent.context.items import Message

    child = spawn(tmp_path, "--approve", "auto")
    task(child, "compute 2**10", 1, "value = 1024")
    task(child, "compute 3**4", 2, "value = 81")
    task(child, "compute 5**2", 3, "value = 25")
    child.expect(PROMPT)
    child.sendline("/context")
    child.expect(r"Context — 24 items · next request ~")
    child.expect(PROMPT)
    shown = child.before
    for n, text in enumerate(["compute 2**10", "compute 3**4", "compute 5**2"]):
        assert f"{8 * n:>5}  user" in shown and text in shown, shown
    # The kernel is the same one: its cell counter went on (In[5] is task 3's first call).
    assert "Cell In[5]" in child.logfile_read.getvalue()
    child.sendline("/save conv.ipynb")
    child.expect("saved 24 items to conv.ipynb")
    child.sendline("/reset")
    child.expect("new conversation")
    child.expect(PROMPT)
    assert child.match.group(1) == "1"  # the prompt counts this conversation's tasks
    child.sendline("/context")
    child.expect("Context — 0 items · next request ~")
    child.sendline("/load conv.ipynb")
    child.expect("loaded 24 items from conv.ipynb")
    child.expect(PROMPT)
    assert child.match.group(1) == "4"  # its three tasks, and the next one's number
    child.sendline("/context")
    child.expect("Context — 24 items · next request ~")
    leave(child)
    with Agent.from_transcript(tmp_path / "conv.ipynb", python_tool=False) as loaded:
        tasks = [i.content for i in loaded.context if isinstance(i, Message) and i.role == "user"]
    assert tasks == ["compute 2**10", "compute 3**4", "compute 5**2"]


def test_the_second_task_uses_the_first_ones_result(tmp_path, scripted_server):
    """Piped lines: one task each; the model and the sibling kernel keep the first's result."""
    scripted_server.script([
        reply_tool_calls([("python", {"code": "value = 6 * 7\nprint(value)"})]),
        reply_text("The value is 42."),
        reply_tool_calls([("python", {"code": "print(value + 1)"})]),
        reply_text("One more is 43."),
    ])
    proc = piped(tmp_path, ["make a value", "add one to that value"], "--model", "m",
                 "--base-url", scripted_server.base_url, "--approve", "auto")
    assert proc.returncode == 0, proc.stderr
    assert "  ┆ 43\n" in proc.stdout and "One more is 43." in proc.stdout, proc.stdout
    third = scripted_server.requests[2].body["messages"]  # task 2's first request
    said = [m.get("content") for m in third]
    assert "make a value" in said and "The value is 42." in said and said[-1] == "add one to that value"
    assert proc.stdout.count("── done") == 2


def test_ctrl_c_stops_the_run_and_keeps_the_conversation(tmp_path, scripted_server):
    scripted_server.script([
        reply_tool_calls([("python", {"code": "import time\nprint('sleeping', flush=True)\n"
                                               "time.sleep(120)"})]),
        reply_text("Second task answered."),
    ])
    child = spawn(tmp_path, "--model", "m", "--base-url", scripted_server.base_url,
                  "--approve", "auto")
    child.expect(PROMPT)
    child.sendline("sleep a while")
    child.expect("┆ sleeping")  # the call really runs in the sibling
    child.sendintr()
    child.expect(r"interrupted; the conversation is kept")
    child.expect(PROMPT, timeout=30)
    assert child.match.group(1) == "2"
    child.sendline("what happened?")
    child.expect("Second task answered.")
    child.expect("── done")
    child.sendline("/context")
    child.expect(r"tool error\s+\d+\s+error: Interrupted by the user")
    leave(child)
    second = scripted_server.requests[1].body["messages"]  # a valid context: call answered
    (answer,) = [m for m in second if m["role"] == "tool"]
    assert "nterrupted" in answer["content"] and second[-1]["content"] == "what happened?"


def test_ctrl_c_at_the_prompt_clears_the_line_and_up_recalls_history(tmp_path):
    history = tmp_path / "home" / ".ipyagent" / "repl_history"
    history.parent.mkdir(parents=True)
    history.write_text("")
    history.chmod(0o644)  # made readable by others before: ours, so made private again
    child = spawn(tmp_path, "--approve", "auto")
    task(child, "compute 2**3", 1)
    child.expect(PROMPT)
    child.send("half a thought")
    child.sendintr()  # clears the line; the session stays
    child.expect(PROMPT)
    assert child.match.group(1) == "2"
    child.send("\x1b[A")  # the up arrow: the last line given
    child.expect("compute 2\\*\\*3")
    child.send("\r")
    child.expect("── done")
    out = leave(child)
    assert out.count("── done") == 2 and "half a thought" not in out.split("Cell In")[-1]
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert "+compute 2**3" in history.read_text()


def test_a_line_holding_a_keys_value_is_not_written_to_history(tmp_path):
    key = "sk-test-Zq8vN3pL5xR7tY2wK9mB4cD6"
    child = spawn(tmp_path, "--approve", "auto", MY_SERVICE_API_KEY=key)
    task(child, f"what is {key} for", 1)
    task(child, "compute 2**3", 2)
    leave(child)
    history = (tmp_path / "home" / ".ipyagent" / "repl_history").read_text()
    assert "+compute 2**3" in history and key not in history


def test_step_runs_one_iteration_and_unknown_commands_say_what_was_meant(tmp_path):
    proc = piped(tmp_path, ["/step compute 2**10", "/step", "/stpe", "/help", "/exit",
                            "compute 3**3"], "--approve", "auto")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("paused: /step runs the next one") == 2
    assert "value = 1024" in proc.stdout
    assert "ipyagent: no command /stpe (did you mean /step" in proc.stderr
    assert "/save PATH" in proc.stdout  # the help
    assert "value = 27" not in proc.stdout  # /exit ended the session


def test_skills_lists_them_and_the_banner_says_what_ipyagent_run_says(tmp_path):
    proc = piped(tmp_path, ["/skills"])
    assert proc.returncode == 0, proc.stderr
    assert "ipyagent repl -s NAME loads one up front" in proc.stdout and "%agent" not in proc.stdout
    assert re.search(r"^  plotting +Clear matplotlib", proc.stdout, re.M)
    child = spawn(tmp_path, "-s", "plotting")
    child.expect(r"ipyagent repl · demo")
    child.expect(r"ipyagent: shell tool: ")  # before the first prompt, as `ipyagent run` starts
    assert "ipyagent [1]>" not in child.logfile_read.getvalue()
    leave(child)


def test_persona_option_and_config_files_take_effect(tmp_path):
    profile = tmp_path / "home" / ".ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_config.py").write_text(
        "c = get_config()\nc.InteractiveShellApp.extensions = ['ipyagent']\n"
        "c.Agent.max_steps = 1\nc.Agent.approval = 'auto'\n")
    one = piped(tmp_path, ["compute 2**10"])  # max_steps=1, then the answer at the limit
    assert "reached max_steps=1;" in one.stdout, one.stdout + one.stderr
    (tmp_path / "mine.py").write_text("c.Agent.max_steps = 2\n")  # --config FILE: over IPython's
    two = piped(tmp_path, ["compute 2**10"], "--config", "mine.py")
    assert "reached max_steps=2;" in two.stdout, two.stdout + two.stderr
    three = piped(tmp_path, ["compute 2**10"], "--config", "mine.py", "--max-steps", "5")
    assert "── done · 3 steps" in three.stdout  # the option: over both files
    # A persona: the reviewer is offered no python, so the demo model calls none.
    reviewer = piped(tmp_path, ["compute 2**10", "/context"], "-p", "reviewer")
    assert "┌ python" not in reviewer.stdout and "value = 1024" not in reviewer.stdout
    assert "Context — 2 items · " in reviewer.stdout and "tool call" not in reviewer.stdout
    (tmp_path / "persona.json").write_text(json.dumps({"Agent": {"persona": "reviewer"}}))
    by_file = piped(tmp_path, ["compute 2**10"], "--config", "persona.json")
    assert "┌ python" not in by_file.stdout and "[demo model]" in by_file.stdout
    # ipyagent run reads the same files.
    run = subprocess.run(_cmd("run", "compute 2**10"), capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env=_env(tmp_path), stdin=subprocess.DEVNULL)
    assert "── max_steps · 2 steps" in run.stdout and run.returncode == 1


@pytest.mark.parametrize("command", ["repl", "run"])
def test_a_broken_config_file_is_one_line_and_exit_code_2(tmp_path, command):
    profile = tmp_path / "home" / ".ipython" / "profile_default"
    profile.mkdir(parents=True)
    config = profile / "ipython_config.py"
    config.write_text("c.Agent.max_steps = 3\nraise RuntimeError('boom in my config')\n")
    args = ["x"] if command == "run" else []
    proc = piped(tmp_path, ["compute 2**10"], *args, command=command)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert str(config) in proc.stderr and "RuntimeError: boom in my config" in proc.stderr
    assert proc.stdout == ""  # nothing ran on half a configuration
    config.write_text("c.Agent.max_steps = 'many'\n")  # a bad value: one line too
    bad = piped(tmp_path, [], *args, command=command)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "max_steps" in bad.stderr
    config.unlink()
    missing = piped(tmp_path, [], *args, "--config", "nope.py", command=command)
    assert missing.returncode == 2 and "nope.py: no such configuration file" in missing.stderr


def test_a_reply_cannot_fake_or_rewrite_the_prompt(tmp_path, scripted_server):
    """A reply ending in a carriage return and a fake prompt, or escapes that move the cursor
    up and erase a line, or retitle the terminal: all shown as visible characters."""
    attack = ("All done.\r> ipyagent [2]> \x1b[1A\x1b[2K\x1b]0;pwned\x07\x1b[8mhidden")
    scripted_server.script([reply_text(attack)])
    child = spawn(tmp_path, "--model", "m", "--base-url", scripted_server.base_url)
    child.expect(PROMPT)
    child.sendline("hello")
    child.expect("── done")
    out = leave(child)
    assert "All done.␍> ipyagent [2]> ␛[1A␛[2K␛]0;pwned␇␛[8mhidden" in out
    for raw in ("\r> ", "\x1b]0;pwned", "\x1b[8m", "\x07"):
        assert raw not in out
    # Our prompt after the reply starts a fresh line of its own.
    ours = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out).replace("\r\n", "\n")  # the prompt's
    assert re.search(r"\n── done[^\n]*\nipyagent \[2\]> ", ours), ours[-500:]


def test_ctrl_c_at_the_approval_prompt_and_a_stuck_kernel_restarted(tmp_path):
    """Ctrl-C at "Run it?" keeps the session; code that ignores the interrupt (a C loop)
    keeps the sibling busy until `/reset --kernel` restarts it."""
    child = spawn(tmp_path)  # approval: ask
    child.expect(PROMPT)
    child.sendline("compute 2**10")
    child.expect(r"Run it\? \[y\]es")
    child.sendintr()
    child.expect(r"interrupted; the conversation is kept")
    child.expect(PROMPT)
    assert child.match.group(1) == "2"
    child.sendline("compute sum(range(10**12))")
    child.expect(r"Run it\? \[y\]es")
    child.sendline("a")
    child.expect(r"conversation\): a")
    time.sleep(1)  # it runs (for hours: a sum over a range never checks for signals)
    child.sendintr()
    child.expect(r"interrupted; the conversation is kept", timeout=60)
    child.expect(PROMPT)
    child.sendline("/reset --kernel")
    child.expect("new conversation and a restarted sibling kernel", timeout=90)
    child.expect(PROMPT)
    assert child.match.group(1) == "1"
    child.sendline("compute 3**3")  # the restarted kernel answers; Always was forgotten
    child.expect(r"Run it\? \[y\]es")
    child.sendline("a")
    child.expect("value = 27")
    child.expect("── done")
    leave(child)


def test_ipythons_colour_scheme_from_its_config_reaches_the_display(tmp_path):
    """`c.InteractiveShell.colors = "NoColor"` in ipython_config: plain code cards, as in IPython."""
    pexpect = pytest.importorskip("pexpect")

    def card(*args: str) -> str:
        env = {k: v for k, v in _env(tmp_path).items() if k != "NO_COLOR"}
        cmd = _cmd("run", "compute 2**10", "--approve", "auto", *args)
        child = pexpect.spawn(cmd[0], cmd[1:], cwd=str(tmp_path), encoding="utf-8",
                              timeout=60, env=env)
        child.expect(pexpect.EOF)
        child.close()
        return str(child.before)

    assert "│ value = 2**10" not in card()  # a terminal: highlighted
    (tmp_path / "plain.py").write_text("c.InteractiveShell.colors = 'NoColor'\n")
    assert "│ value = 2**10" in card("--config", "plain.py")


def test_quiet_prints_only_the_answers_and_save_rewrites_the_transcript_after_each_task(tmp_path):
    """`--quiet --save FILE`, as `ipyagent run` has them: stdout is the answers (no cards,
    no echoed prompts), FILE is the transcript `/save` writes, rewritten after every task."""
    from ipyagent import Agent
    from ipyagent.context.items import Message

    proc = piped(tmp_path, ["compute 2**10", "compute 3**4"], "--approve", "auto", "--quiet",
                 "--save", "conv.ipynb")
    assert proc.returncode == 0, proc.stderr
    assert "value = 1024" in proc.stdout and "value = 81" in proc.stdout
    for noise in ("┌ python", "── done", "ipyagent [", "ipyagent:"):
        assert noise not in proc.stdout, proc.stdout
    assert proc.stdout.count("[demo model] I evaluated") == 2  # only the final answers
    said = "ipyagent: saving this conversation to conv.ipynb after each task (--save)\n"
    assert proc.stderr.count(said) == 1, proc.stderr  # said the first time only
    with Agent.from_transcript(tmp_path / "conv.ipynb", python_tool=False) as loaded:
        tasks = [i.content for i in loaded.context if isinstance(i, Message) and i.role == "user"]
    assert tasks == ["compute 2**10", "compute 3**4"]


def test_quiet_at_a_terminal_shows_each_call_before_asking_and_saves_after_each_task(tmp_path):
    child = spawn(tmp_path, "--quiet", "--save", "runs/conv.ipynb")  # approval: ask
    child.expect(PROMPT)
    child.sendline("compute 2**10")
    child.expect("── tool call: python ──")  # no card above it: the prompt shows the code
    child.expect(r"value = 2\*\*10")
    child.expect(r"Run it\? \[y\]es")
    child.sendline("a")
    child.expect("value = 1024")
    child.expect(r"saving this conversation to runs/conv\.ipynb after each task")
    child.expect(PROMPT)
    first = (tmp_path / "runs" / "conv.ipynb").read_text()  # written before the next task
    assert "compute 2**10" in first and "compute 3**3" not in first
    child.sendline("compute 3**3")
    child.expect("value = 27")
    out = leave(child)
    assert "┌ python" not in out and "── done" not in out
    assert out.count("saving this conversation") == 1
    assert "compute 3**3" in (tmp_path / "runs" / "conv.ipynb").read_text()


def test_audit_lists_the_calls_with_untrusted_names_made_visible(tmp_path, scripted_server):
    """The tool name comes from the model and is in the reason of the denial: both shown
    with their controls made visible (no retitled terminal, no cleared screen)."""
    evil = "evil\x1b]0;pwned\x07\x1b[2Jtool"
    scripted_server.script([
        reply_tool_calls([("python", {"code": "print(6 * 7)"})]),
        reply_text("Ran it."),
        reply_tool_calls([(evil, {"x": 1})]),
        reply_text("Done."),
    ])
    base = ["--model", "m", "--base-url", scripted_server.base_url]
    (tmp_path / "allow.py").write_text("c.Agent.allow = ['python']\n")  # python runs unasked
    proc = piped(tmp_path, ["/audit", "go", "again", "/audit"], *base, "--config", "allow.py")
    assert proc.returncode == 0, proc.stderr
    empty, full = proc.stdout.split("ipyagent [3]> /audit")
    assert "<Audit: 0 calls" in empty
    assert "<Audit: 2 calls, 1 ran, 1 denied>" in full, full
    assert re.search(r"^  1 +call_\w+ +python +approve +allow-list", full, re.M), full
    shown = "evil␛]0;pwned␇␛[2Jtool"
    assert re.search(rf"^  \d+ +call_\w+ +{re.escape(shown)} +deny: nobody could approve .*"
                     rf"\({re.escape(shown)} was not run\) +headless", full, re.M), full
    for raw in ("\x1b]0;", "\x07", "\x1b[2J"):
        assert raw not in proc.stdout


def test_memory_lists_and_searches_the_notes_read_only(tmp_path, monkeypatch):
    from ipyagent import Agent
    from ipyagent.memory.made import KEY_ENV

    # One user here and in the repl's process (whose HOME is another): one stamp key.
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "memory-key"))

    off = piped(tmp_path, ["/memory"])
    assert "ipyagent: memory is off: c.Agent.memory = 'on'" in off.stdout, off.stdout
    paths = {"memory_path": str(tmp_path / "project.sqlite"),
             "memory_global_path": str(tmp_path / "global.sqlite")}
    (tmp_path / "mem.py").write_text("c.Agent.memory = 'on'\n" + "".join(
        f"c.Agent.{k} = {v!r}\n" for k, v in paths.items()))
    empty = piped(tmp_path, ["/memory"], "--config", "mem.py")
    assert "memory: no notes yet: runs keep them" in empty.stdout, empty.stdout + empty.stderr
    with Agent(memory="on", python_tool=False, **paths) as agent:
        agent.memories.remember("the data lives in sales.csv")
        agent.memories.remember("fake prompt\r\x1b[2Kipyagent [9]> rm -rf ~", scope="global")
    proc = piped(tmp_path, ["/memory", "/memory search sales", "/memory forget 1",
                            "/memory search"], "--config", "mem.py")
    assert proc.returncode == 0, proc.stderr
    listing, search = proc.stdout.split("/memory search sales")[:2]
    assert "memory: 2 notes" in listing and "the data lives in sales.csv" in listing
    assert "fake prompt ␛[2Kipyagent [9]> rm -rf ~" in listing and "you (global)" in listing
    assert "\r\x1b[2K" not in proc.stdout
    assert "memory search 'sales': 1 note" in search and "fake prompt" not in search
    assert proc.stderr.count("/memory takes nothing or search WORDS") == 2, proc.stderr
    with Agent(memory="on", python_tool=False, **paths) as agent:
        assert len(agent.memories.table()) == 2  # read-only: nothing was forgotten


def test_personas_lists_them_with_the_active_one_and_a_files_text_made_visible(tmp_path):
    agents = tmp_path / ".ipyagent" / "agents"  # came with the project: untrusted text
    agents.mkdir(parents=True)
    (agents / "odd.md").write_text("---\nname: odd\ndescription: looks\x1b[2J\x1b]0;x\x07 fine\n"
                                   "tools: [read_file]\n---\nYou are odd.\n")
    proc = piped(tmp_path, ["/personas"], "-p", "coder")
    assert proc.returncode == 0, proc.stderr
    assert "personas (ipyagent repl -p NAME):" in proc.stdout and "%agent" not in proc.stdout
    assert re.search(r"^  ● coder +tools: python, shell, ", proc.stdout, re.M), proc.stdout
    assert re.search(r"^  reviewer +tools: read_file, list_files", proc.stdout, re.M)
    assert "looks␛[2J␛]0;x␇ fine" in proc.stdout and "\x1b" not in proc.stdout


def test_quiet_with_stdout_to_a_file_keeps_the_prompts_out_of_it(tmp_path):
    """A person types, stdout goes to a file: the prompts go to the terminal (stderr), the
    file gets the answers alone."""
    import shlex

    pexpect = pytest.importorskip("pexpect")
    line = " ".join(shlex.quote(a) for a in _cmd("repl", "--quiet", "--approve", "auto"))
    child = pexpect.spawn("bash", ["-c", f"{line} > answers.txt"], cwd=str(tmp_path),
                          encoding="utf-8", timeout=60, env=_env(tmp_path))
    try:
        child.expect(r"ipyagent \[1\]> ")  # on the terminal
        child.sendline("compute 2**10")
        child.expect(r"ipyagent \[2\]> ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)  # a failed expect must not leave the session (and its kernel)
    answers = (tmp_path / "answers.txt").read_text()
    assert "value = 1024" in answers and "ipyagent [" not in answers, answers


def test_rewind_fork_switch_and_branches_in_the_repl(tmp_path, scripted_server):
    """Issue 31: /rewind N goes back with the kernel and the files; /fork, /switch, /branches."""
    scripted_server.script([
        reply_tool_calls([("python", {"code": "first = 1\nopen('r1.txt', 'w').write('1')"})]),
        reply_tool_calls([("python", {"code": "second = 2\nopen('r2.txt', 'w').write('2')"})]),
        reply_text("Two files."),
        reply_tool_calls([("python", {"code": "print('second' in globals(), first)"})]),
        reply_text("Checked."),
    ])
    proc = piped(tmp_path, ["make two files", "/rewind 1", "/branches", "/fork alt",
                            "/switch main", "/rewind x", "/switch nowhere", "check the kernel"],
                 "--model", "m", "--base-url", scripted_server.base_url, "--approve", "auto")
    assert proc.returncode == 0, proc.stderr
    assert "rewound to step 1: dropped 2 steps, kept as branch 'main-1'" in proc.stdout
    assert "put back in your folder: r2.txt" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".txt") == ["r1.txt"]
    assert re.search(r"● main\s+1\s", proc.stdout) and re.search(r"main-1\s+main@1\s+3\s", proc.stdout)
    assert "forked branch alt from main at step 1; a new task continues alt" in proc.stdout
    assert "on branch main (1 step)" in proc.stdout
    assert "ipyagent: usage: /rewind N [--no-branch]" in proc.stderr
    assert "ipyagent: /switch: no branch 'nowhere'; the branches are main, main-1, alt" in proc.stderr
    assert "  ┆ False 1\n" in proc.stdout  # the kernel has step 1's variable, not step 2's
    said = [m.get("content") for m in scripted_server.requests[-2].body["messages"]]
    assert "Two files." not in said and said[-1] == "check the kernel"
