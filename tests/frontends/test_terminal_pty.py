"""Terminal IPython through a real pty: the y/n/e/a prompt appears, `y` runs, `n` denies."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

pexpect = pytest.importorskip("pexpect")

pytestmark = pytest.mark.slow

IPYTHON = str(Path(sys.executable).with_name("ipython"))
PROMPT = r"Run it\? \[y\]es / \[n\]o / \[e\]dit / \[a\]lways \(this tool, this conversation\): "


@pytest.fixture
def term(tmp_path: Path) -> Iterator[pexpect.spawn]:
    env = {**os.environ, "IPYTHONDIR": str(tmp_path / "ipython"), "TERM": "xterm",
           "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = pexpect.spawn(IPYTHON, ["--no-banner", "--colors=NoColor", "--no-confirm-exit"],
                          env=env, cwd=str(tmp_path), encoding="utf-8", timeout=60,
                          dimensions=(50, 160))
    child.expect(r"In \[1\]:")
    yield child
    child.send("exit\r")
    child.expect(pexpect.EOF)


def enter(child: pexpect.spawn, line: str) -> None:
    child.send(line + "\r")  # Enter, as a keyboard sends it to prompt_toolkit


def test_y_runs_and_n_denies(term: pexpect.spawn, tmp_path: Path) -> None:
    enter(term, "%load_ext ipyagent")
    term.expect("approval ask")
    term.expect(r"In \[2\]:")
    enter(term, "%agent Use Python to compute 2**100")
    term.expect(r"value = 2\*\*100")  # the code is shown before the question
    term.expect(PROMPT)
    enter(term, "y")
    term.expect("value = 1267650600228229401496703205376")  # it ran
    term.expect(PROMPT)  # the demo model's fix needs approval too
    enter(term, "y")
    term.expect("digits: 31")
    term.expect("done · 3 steps")
    term.expect(r"In \[3\]:")
    enter(term, "%agent Use Python to compute 3**3")
    term.expect(PROMPT)
    enter(term, "n")
    term.expect("Reason for the model")
    enter(term, "")
    term.expect("denied")
    term.expect(r"In \[4\]:")
    enter(term, "print('items=%d' % len(__import__('ipyagent').current().context))")
    term.expect(r"items=(\d+)")
    # 8 items from the first run; then the task, the model's text, its call and the
    # denial as the call's result: a bare "no" ends the run there.
    assert int(term.match.group(1)) == 12


def test_one_keypress_answers_without_enter(term: pexpect.spawn) -> None:
    """Issue 30: the y/n needed Enter. A single key answers now, is echoed, and a key
    typed after it (the rest of a habitual "yes") answers nothing else."""
    enter(term, "%load_ext ipyagent")
    term.expect(r"In \[2\]:")
    enter(term, "%agent Use Python to compute 2**100")
    term.expect(PROMPT)
    term.send("y")  # no Enter
    term.expect("y\r\n")  # the answer, echoed after the question
    term.expect("value = 1267650600228229401496703205376")
    term.expect(PROMPT)
    term.send("n")
    term.expect("Reason for the model")
    enter(term, "not now")  # a reason is a line: Enter ends it
    term.expect("not approved \\(not now\\)")
    term.expect(r"In \[3\]:")
    enter(term, "%agent Use Python to compute 3**3")
    term.expect(PROMPT)
    term.send("a")
    term.expect("value = 27")
    term.expect(r"In \[4\]:")


def test_ctrl_c_at_the_prompt_stops_the_run_cleanly(term: pexpect.spawn) -> None:
    enter(term, "%load_ext ipyagent")
    term.expect(r"In \[2\]:")
    enter(term, "%agent Use Python to compute 2**100")
    term.expect(PROMPT)
    term.sendintr()
    term.expect("interrupted")
    term.expect(r"In \[3\]:")
    enter(term, "[i.label for i in __import__('ipyagent').current().context]")
    term.expect(r"'tool error'\]")  # the open call got an "Interrupted" result
    enter(term, "%agent --approve auto Use Python to compute 2**10")
    term.expect("done")



def test_step_through_says_each_step_paused_and_how_to_go_on(term: pexpect.spawn) -> None:
    enter(term, "%load_ext ipyagent")
    term.expect(r"In \[2\]:")
    enter(term, "%agent --approve auto --step Use Python to compute 2**100")
    term.expect("TypeError")  # the demo model's first try fails on purpose
    term.expect(r"── step 1 · 1 tool call · .* · paused: %agent step runs the next one")
    term.expect(r"In \[3\]:")
    enter(term, "%agent --approve auto step")
    term.expect("digits: 31")
    term.expect(r"── step 2 · 1 tool call .* · paused")
    term.expect(r"In \[4\]:")
    enter(term, "%agent step")
    term.expect("The sibling kernel printed")
    term.expect(r"── step 3 · 0 tool calls .* · stopped: done")
    term.expect(r"In \[5\]:")

SIGNAL_TO_ANOTHER_THREAD = r"""
import signal, sys, threading, time
from ipyagent._util.mainthread import interruptible_input

def hit():
    time.sleep(0.5)
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # SIGINT lands on *this* thread

threading.Thread(target=hit).start()
start = time.monotonic()
try:
    {reader}("Run it? ")
except KeyboardInterrupt:
    print("interrupted after %.1f s" % (time.monotonic() - start))
"""


@pytest.mark.parametrize("reader,interrupted", [("interruptible_input", True), ("input", False)])
def test_ctrl_c_delivered_to_another_thread_still_interrupts_the_prompt(
        tmp_path: Path, reader: str, interrupted: bool) -> None:
    """The OS may give SIGINT to any thread; plain input() then waits for Enter."""
    script = tmp_path / "prompt.py"
    script.write_text(SIGNAL_TO_ANOTHER_THREAD.replace("{reader}", reader))
    child = pexpect.spawn(sys.executable, [str(script)], encoding="utf-8", timeout=5)
    child.expect("Run it")
    index = child.expect([r"interrupted after (\d\.\d) s", pexpect.TIMEOUT], timeout=3)
    assert (index == 0) is interrupted  # the control case shows the test can fail
    if interrupted:
        assert float(child.match.group(1)) < 1.5
    child.sendline("")
    child.expect(pexpect.EOF)


LIBRARY_RUN = r"""
from ipyagent import Agent
from ipyagent.engine.approval import TerminalApprover
agent = Agent(model="demo", approval="ask")
agent.approval_hook = TerminalApprover()  # input in a thread; run() blocks the main one
try:
    agent.run("Use Python to compute 2**100")
except KeyboardInterrupt:
    print("caught; last item: " + agent.context[-1].label)
agent.close()
"""


def test_ctrl_c_during_a_library_run_answers_the_open_call_and_exits(tmp_path: Path) -> None:
    """run() returns only once the engine answered the open call; nothing keeps stdin."""
    script = tmp_path / "run.py"
    script.write_text(LIBRARY_RUN)
    child = pexpect.spawn(sys.executable, [str(script)], cwd=str(tmp_path), encoding="utf-8",
                          timeout=60)
    child.expect(PROMPT)
    child.sendintr()
    child.expect("caught; last item: tool error", timeout=10)
    child.expect(pexpect.EOF, timeout=15)


def test_the_code_at_the_prompt_is_the_code_that_runs(term: pexpect.spawn, tmp_path: Path,
                                                      scripted_server) -> None:
    """Issue 12, finding 3: an escape sequence in a comment erased the real line."""
    import io

    from tests.helpers.scripted_server import reply_tool_calls

    hidden = "open('pwned.txt', 'w').write('owned')"
    code = f"{hidden}  # \x1b[2K\x1b[Gprint('Hello, world!') \u202e"
    scripted_server.script([reply_tool_calls([("python", {"code": code})])])
    seen = term.logfile_read = io.StringIO()
    enter(term, "%load_ext ipyagent")
    term.expect(r"In \[2\]:")
    enter(term, f"%config Agent.base_url = {scripted_server.base_url!r}")
    term.expect(r"In \[3\]:")
    enter(term, "%agent --model m say hello")
    term.expect(PROMPT)
    enter(term, "n")
    term.expect("Reason for the model")
    enter(term, "")
    term.expect("denied")
    term.expect(r"In \[4\]:")
    shown = seen.getvalue()
    assert f"{hidden}  # ␛[2K␛[Gprint('Hello, world!') ⟨U+202E⟩" in shown
    assert "\x1b[2K\x1b[Gprint" not in shown and "\u202e" not in shown
    assert not (tmp_path / "pwned.txt").exists()


def test_an_offered_result_comes_in_on_y_only(term: pexpect.spawn) -> None:
    from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls

    offer = ("offer_result", {"name": "fit", "description": "the trend \x1b[2K\x1b[1A"})
    with ScriptedServer([reply_tool_calls([("python", {"code": "fit = [2.5, 12]"}), offer]),
                         reply_text("Yours."),
                         reply_tool_calls([("python", {"code": "fit = 'other'"}), offer]),
                         reply_text("Kept.")]) as srv:
        enter(term, "%load_ext ipyagent")
        term.expect(r"In \[2\]:")
        enter(term, "%config Agent.model = 'scripted'")
        enter(term, f"%config Agent.base_url = '{srv.base_url}'")
        enter(term, "%config Agent.approval = 'auto'")
        enter(term, "fit = 'mine'")
        enter(term, "%agent fit it")
        term.expect(r"the agent offers `fit`: list of 2 \(decoded here from ")
        term.expect("the trend ␛\\[2K␛\\[1A")  # the escapes shown, not obeyed
        term.expect("REPLACES your `fit` \\(str 'mine'\\)")
        term.expect(r"Take it into your kernel as fit\? \[y\]es / \[N\]o: ")
        enter(term, "y")
        term.expect(r"fit = list of 2 \(a copy from the agent's kernel\)")
        term.expect("done")
        enter(term, "%agent again")
        term.expect(r"Take it into your kernel as fit\? ")
        enter(term, "n")
        term.expect("done")
        enter(term, "print('fit is', fit)")
        term.expect(r"fit is \[2\.5, 12\]")  # the second offer was declined: nothing changed
