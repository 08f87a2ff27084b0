"""The ``shell`` tool: a command run by the real sibling kernel (in bubblewrap where it can
be made), every outcome a value; the setting, approval, cards and transcripts around it."""

from __future__ import annotations

import http.server
import io
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
from ipyagent._util import eventloop as _eventloop
from ipyagent.context.events import ToolCallFinished, ToolCallRequested, ToolOutput, live_emitter
from ipyagent.context.items import ToolCall, ToolResult
from ipyagent.engine.approval import ApprovalPolicy
from ipyagent.kernel import sandbox
from ipyagent.tools.shell import helper_code, shell_status
from tests.helpers.scripted_model import ScriptedModel, calls, text

FLAGS, WHY = sandbox.probe()
needs_bwrap = pytest.mark.skipif(FLAGS is None, reason=f"no sandbox can be made here: {WHY}")
CANARY = "canary-shell-5e1b"
# Everything that could break out of a string built into Python source, or be taken for
# IPython syntax: quotes, triple quotes, backslashes, newlines, !, %, a trailing ?.
NASTY = ("a'b\"c\\d\\\\e \"\"\" ''' \\n $HOME `x` $(y)\n"
         "!touch PWNED-bang\n%time 1\n\"\"\"); __import__('os').system('touch PWNED-py'); (\"\"\"\n"
         "tab\there ? ?")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Agent, Path]]:
    """An agent whose sibling works in ``root/ws``, with an API key in this process's env."""
    root = tmp_path_factory.mktemp("shell")
    ws, outside = root / "ws", root / "outside"
    ws.mkdir()
    outside.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", CANARY)
        with Agent(file_tools=False, cwd=str(ws), tool_timeout=30) as agent:
            agent.kernel.start()  # started while the key is set: it must not inherit it
            yield agent, outside


def run(agent: Agent, command: str) -> ToolResult:
    return _eventloop.run_sync(agent.tools.execute(ToolCall("c1", "shell", {"command": command})))


def test_the_schema_asks_for_a_command_only(world: tuple[Agent, Path]) -> None:
    tool = world[0].tools["shell"]
    assert tool.parameters["required"] == ["command"]
    assert tool.parameters["additionalProperties"] is False


def test_output_exit_code_and_the_cwd(world: tuple[Agent, Path]) -> None:
    agent, _ = world
    result = run(agent, "echo out; echo err >&2; pwd")
    where = "bubblewrap" if agent.kernel.sandboxed else "none"  # recorded for the transcript
    assert not result.error and result.meta == {"status": "ok", "exit_code": 0, "sandbox": where}
    assert result.output == f"out\n{agent.kernel.cwd}\nerr"
    assert [o["name"] for o in result.outputs] == ["stdout", "stderr"]  # no record, no traceback
    assert run(agent, "true").output == "(no output; exit code 0)"
    failed = run(agent, "echo half; exit 3")
    assert failed.error and failed.meta["exit_code"] == 3
    assert failed.output == "half\n[exit code 3]"
    killed = run(agent, "kill -9 $$")
    assert killed.error and killed.output == "[killed by signal SIGKILL]"


def test_the_command_runs_byte_for_byte_and_never_as_python(world: tuple[Agent, Path]) -> None:
    agent, _ = world
    code = helper_code(NASTY, "/tmp")
    assert "touch" not in code and "'''" not in code and "\n" not in code  # only base64 of it
    # A quoted heredoc prints its body untouched: the output is the text as sent.
    result = run(agent, f"cat <<'END-OF-TEXT'\n{NASTY}\nEND-OF-TEXT")
    assert result.output == NASTY and not result.error
    assert not list(Path(agent.kernel.cwd).glob("PWNED*"))
    # And as a command line: the shell sees it, nothing else does.
    run(agent, NASTY)
    assert not (Path(agent.kernel.cwd) / "PWNED-py").exists()


def test_the_sibling_environment_has_no_api_key(world: tuple[Agent, Path]) -> None:
    agent, _ = world
    assert os.environ["OPENAI_API_KEY"] == CANARY
    result = run(agent, "env; echo \"[$OPENAI_API_KEY]\"")
    assert CANARY not in result.output and "[]" in result.output


def _alive(agent: Agent, pid: int) -> bool:
    """Is ``pid`` (a pid as the sibling sees it) still running? Asked in the sibling."""
    code = (f"import os\ntry:\n    s = open('/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0]\n"
            "except OSError:\n    s = 'gone'\nprint(s)")
    return agent.kernel.execute(code).text.strip() not in ("gone", "Z")


def _host_pids(marker: str) -> list[int]:
    """Live host processes whose command line holds ``marker`` (seen from outside)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if marker in Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace"):
                    if Path(f"/proc/{name}/stat").read_text().split(")")[-1].split()[0] != "Z":
                        found.append(int(name))
            except OSError:
                continue
    return found


def _gone(marker: str) -> bool:
    deadline = time.monotonic() + 10
    while _host_pids(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _host_pids(marker)


def test_the_timeout_kills_the_command_and_its_children(world: tuple[Agent, Path]) -> None:
    agent, _ = world
    agent.tool_timeout = 1.5
    try:
        result = run(agent, "sleep 100.5 & (sleep 101.5; echo late) & echo started; sleep 102.5")
    finally:
        agent.tool_timeout = 30
    assert result.error and result.meta["status"] == "timeout"
    assert result.output.startswith("started\n[timed out after 1.5 s (Agent.tool_timeout)")
    assert "KeyboardInterrupt" not in result.output and not any(
        o["output_type"] == "error" for o in result.outputs)
    assert all(_gone(f"sleep {n}") for n in ("100.5", "101.5", "102.5"))
    assert run(agent, "echo still here").output == "still here"  # the shell works on


def test_background_processes_end_with_the_command(world: tuple[Agent, Path]) -> None:
    agent, _ = world
    result = run(agent, "sleep 103.5 & echo quick")
    assert result.output == "quick" and not result.error
    assert _gone("sleep 103.5")


def test_output_is_bounded_like_pythons(world: tuple[Agent, Path]) -> None:
    agent, _ = world
    result = run(agent, "seq 1 300000")
    assert len(result.output) <= agent.kernel.max_model_chars + 200
    assert result.output.startswith("1\n2\n3\n") and "300000\n" not in result.output
    assert result.output.rstrip().endswith("300000")


def test_output_streams_live(world: tuple[Agent, Path]) -> None:
    agent, _ = world
    seen: list[str] = []

    async def go() -> ToolResult:
        token = live_emitter.set(lambda e: seen.append(e.text) if isinstance(e, ToolOutput) else None)
        try:
            return await agent.tools.execute(ToolCall("c1", "shell", {"command": "echo one; echo two"}))
        finally:
            live_emitter.reset(token)

    result = _eventloop.run_sync(go())
    assert "".join(seen) == "one\ntwo\n" and result.output == "one\ntwo"


def test_a_shell_that_kills_its_own_sandbox_is_one_line_and_the_next_call_works(
        world: tuple[Agent, Path]) -> None:
    agent, _ = world
    result = run(agent, "kill -9 $$")  # a fresh process per call: only itself goes
    assert result.error and result.output.splitlines()[-1] == "[killed by signal SIGKILL]"
    assert run(agent, "echo back").output == "back"
    assert agent.kernel.execute("1+1").text == "2"  # the python sibling never noticed


def test_a_missing_cwd_is_one_line(tmp_path: Path) -> None:
    ws = tmp_path / "gone"
    ws.mkdir()
    # Unsandboxed: inside bwrap the bound directory lives on while the sandbox does.
    with Agent(file_tools=False, cwd=str(ws), shell_tool="on", sandbox="none") as agent:
        agent.kernel.start()
        ws.rmdir()
        result = run(agent, "echo no")
    assert result.error and result.output.startswith("[the command could not be run: ")
    assert "FileNotFoundError" in result.output and len(result.output.splitlines()) == 1


# -- a local server: reached where the sandbox has the network, a clear line where not -----

@pytest.fixture
def server(tmp_path: Path) -> Iterator[int]:
    (tmp_path / "hello.txt").write_text("hello from 127.0.0.1")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a: object, **kw: object) -> None:
            super().__init__(*a, directory=str(tmp_path), **kw)  # type: ignore[misc, arg-type]

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


def _fetch(port: int) -> str:
    return (f"{sys.executable} -c \"import urllib.request as u; "
            f"print(u.urlopen('http://127.0.0.1:{port}/hello.txt', timeout=5).read().decode())\"")


def test_a_local_server_answers_only_unsandboxed(tmp_path: Path, server: int) -> None:
    with Agent(file_tools=False, cwd=str(tmp_path), shell_tool="on", sandbox="none") as agent:
        result = run(agent, _fetch(server))
    assert result.output == "hello from 127.0.0.1" and not result.error


def test_nothing_listening_is_a_clear_failure(world: tuple[Agent, Path]) -> None:
    agent, _ = world  # sandboxed or not: nothing answers there
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free, and nobody listens once closed
    result = run(agent, _fetch(port))
    assert result.error and result.meta["exit_code"] == 1
    assert "Connection refused" in result.output and result.output.endswith("[exit code 1]")


@needs_bwrap
@pytest.mark.parametrize("network", [False, True])
def test_in_the_sandbox_the_hosts_server_is_unreachable(tmp_path: Path, server: int,
                                                       network: bool) -> None:
    if network and shutil.which("slirp4netns") is None:
        pytest.skip("slirp4netns is not installed")
    with Agent(file_tools=False, cwd=str(tmp_path), sandbox_network=network) as agent:
        result = run(agent, _fetch(server))
    assert result.error and "hello from" not in result.output and "[exit code 1]" in result.output


# -- the sandbox -------------------------------------------------------------------------

@needs_bwrap
def test_under_bwrap_nothing_outside_the_workspace_can_be_written(world: tuple[Agent, Path]) -> None:
    agent, outside = world
    assert agent.kernel.sandboxed
    result = run(agent, f"echo x > {outside}/escaped.txt; echo x > $HOME/escaped.txt; "
                        "touch inside.txt")
    # Only the workspace is the host's: the home in there is an empty tmpfs of its own.
    assert result.output.count("No such file or directory") == 1, result.output
    assert not (outside / "escaped.txt").exists()
    assert not (Path.home() / "escaped.txt").exists()
    # The workspace's own write is a data file: applied to the folder under the default.
    assert result.meta["changes"] == [{"path": "inside.txt", "kind": "new", "status": "applied",
                                       "size": 0, "sha256": result.meta["changes"][0]["sha256"],
                                       "lines": 0}]
    assert (Path(agent.kernel.cwd) / "inside.txt").exists()


# -- the setting -------------------------------------------------------------------------

def test_off_never_offers_it() -> None:
    agent = Agent(file_tools=False, python_tool=False, shell_tool="off")
    assert "shell" not in agent.tools
    assert agent.shell_status() == (False, "shell tool: off (Agent.shell_tool = 'off')")


def test_auto_is_off_where_the_sibling_is_not_sandboxed() -> None:
    agent = Agent(file_tools=False, python_tool=False, sandbox="none")
    assert "shell" not in agent.tools
    offered, line = agent.shell_status()
    assert not offered and "not sandboxed" in line and "Agent.shell_tool = 'on'" in line
    agent.shell_tool = "on"  # applies at once, and says how it runs
    assert "shell" in agent.tools
    assert agent.shell_status() == (True, "shell tool: on but NOT sandboxed (Agent.shell_tool "
                                          "= 'on'): commands run as your account, in the "
                                          "sibling kernel's directory")
    agent.shell_tool = "off"
    assert "shell" not in agent.tools
    agent.close()


@needs_bwrap
def test_auto_is_on_where_the_sibling_is_sandboxed() -> None:
    with Agent(file_tools=False) as agent:
        assert "shell" in agent.tools and "shell" in [t.name for t in agent.offered_tools()]
        assert agent.shell_status()[1].startswith("shell tool: on (Agent.shell_tool = 'auto'")
        agent.sandbox = "none"
        assert "shell" not in agent.tools


def test_a_users_own_shell_tool_is_left_alone() -> None:
    from ipyagent.tools.base import tool

    @tool
    def shell(command: str) -> str:
        """Mine."""
        return command

    agent = Agent(file_tools=False, python_tool=False, shell_tool="off", tools=[shell])
    assert agent.tools["shell"] is shell
    agent.shell_tool = "on"
    agent.shell_tool = "off"
    assert agent.tools["shell"] is shell


def test_the_status_line_for_each_case() -> None:
    assert shell_status("auto", True)[0] and shell_status("on", False)[0]
    assert not shell_status("auto", False, "bwrap is not installed")[0]
    assert "bwrap is not installed" in shell_status("auto", False, "bwrap is not installed")[1]


# -- approval ----------------------------------------------------------------------------

@pytest.mark.parametrize(("allowed", "asked"), [(["python"], "shell"), (["shell"], "python")])
def test_allowing_one_tool_never_allows_the_other(allowed: list[str], asked: str) -> None:
    policy = ApprovalPolicy(mode="ask", allow=allowed)
    decision = _eventloop.run_sync(policy.decide(ToolCall("c", asked, {})))
    assert not decision.approved and decision.by == "headless"
    other = allowed[0]
    assert _eventloop.run_sync(policy.decide(ToolCall("c", other, {}))).approved
    assert policy.asks(asked) and not policy.asks(other)


def test_a_denied_call_runs_nothing(tmp_path: Path) -> None:
    model = ScriptedModel([calls(("shell", {"command": "touch ran.txt"})), text("ok")])
    asked: list[ToolCall] = []

    def deny(call: ToolCall) -> str:
        asked.append(call)
        return "no shell today"

    with Agent(client=model, file_tools=False, cwd=str(tmp_path), shell_tool="on",
               approval="ask", allow=["python"], approval_hook=deny) as agent:
        agent.run("touch a file")
        results = [i for i in agent.context if isinstance(i, ToolResult)]
    assert [c.name for c in asked] == ["shell"]
    assert results[0].meta.get("denied") and not (tmp_path / "ran.txt").exists()


def test_an_allowed_call_runs_unasked(tmp_path: Path) -> None:
    model = ScriptedModel([calls(("shell", {"command": "echo via-allow > ran.txt"})), text("ok")])
    with Agent(client=model, file_tools=False, cwd=str(tmp_path), shell_tool="on",
               approval="ask", allow=["shell"]) as agent:
        agent.run("write a file")
    assert (tmp_path / "ran.txt").read_text() == "via-allow\n"


# -- display: the command as bash, escaped, control characters visible -------------------

ATTACK = "echo '</script><script>alert(1)</script>' \x1b[2J\x1b]0;title\x07 <b>x</b>"


def test_the_notebook_card_highlights_bash_and_escapes() -> None:
    from ipyagent.frontends.notebook import card_html, card_markdown

    call = ToolCall("c1", "shell", {"command": ATTACK})
    html = card_html(call, "waiting")
    assert "<script>" not in html and "</script>" not in html and "<b>x" not in html
    assert "&lt;/script&gt;" in html
    # pygments' bash lexer: `echo` is a builtin, coloured; a JSON card would quote the key.
    assert "mirror-editor-builtin-color" in html and "&quot;command&quot;" not in html
    md = card_markdown(call, "waiting")
    assert "```bash" in md or "~~~bash" in md


def test_the_terminal_card_shows_the_command_with_controls_visible() -> None:
    from ipyagent.frontends.terminal import TerminalDisplay

    out = io.StringIO()
    display = TerminalDisplay(stream=out, colour=False)
    call = ToolCall("c1", "shell", {"command": ATTACK + "\nls -l"})
    display(ToolCallRequested(call))
    display(ToolCallFinished(call, ToolResult("c1", "\x1b[31mred\x1b[0m\x07 done", name="shell")))
    shown = out.getvalue()
    assert "\x1b" not in shown and "\x07" not in shown
    assert "┌ shell (c1)" in shown and "│ ls -l" in shown
    assert "'</script><script>alert(1)</script>'" in shown  # the terminal shows it as is


def test_the_terminal_card_highlights_as_bash() -> None:
    from ipyagent.frontends import terminal

    tokens = terminal._code_tokens("for f in *; do echo $f; done", "bash")
    assert any("Keyword" in str(kind) and t == "for" for kind, t in tokens)


def test_a_shell_variable_is_readable_on_a_dark_terminal() -> None:
    from ipyagent.frontends import terminal

    painted = terminal._highlight(['echo "hi $HOME"  |  wc -c'], "neutral", "bash")[0]
    assert "\x1b[38;5;18m" not in painted  # pygments' dark blue: unreadable on black
    assert "\x1b[34m$HOME" in painted  # the terminal's own blue, as IPython's variables
    assert "\x1b[38;5;250m" not in painted  # spaces are not painted grey


def test_the_terminal_prompt_shows_the_command() -> None:
    from ipyagent.engine.approval import TerminalApprover

    out = io.StringIO()
    TerminalApprover(input_fn=lambda p: "y", output=out)._show(
        ToolCall("c1", "shell", {"command": "ls\x1b[2J -l"}))
    assert "ls\\x1b[2J -l" in out.getvalue() or "ls␛[2J -l" in out.getvalue()
    assert '"command"' not in out.getvalue() and "\x1b" not in out.getvalue()


# -- transcripts: shown as text, never a code cell; replay answers from the recording ----

def test_a_transcript_shows_the_command_and_replay_does_not_run_it(tmp_path: Path) -> None:
    from ipyagent.transcripts.replay import replay

    ws = tmp_path / "ws"
    ws.mkdir()
    model = ScriptedModel([calls(("shell", {"command": "echo made > made.txt; echo done"})),
                           text("ok")])
    with Agent(client=model, file_tools=False, python_tool=False, cwd=str(ws), shell_tool="on",
               approval="auto") as agent:
        agent.run("make a file")
        path = agent.save(tmp_path / "run.ipynb")
    nb = __import__("nbformat").read(path, as_version=4)
    shown = [c for c in nb.cells if "echo made" in c.source]
    assert [c.cell_type for c in shown] == ["markdown"]
    assert "```bash\necho made > made.txt; echo done\n```" in shown[0].source
    (ws / "made.txt").unlink()
    again = tmp_path / "again"
    again.mkdir()
    report = replay(path, cwd=str(again), approval="auto")
    assert report.reused == 1 and report.reproduced
    assert not (again / "made.txt").exists() and not (ws / "made.txt").exists()


# -- the demo model ----------------------------------------------------------------------

def test_the_demo_runs_a_command_the_task_asks_for(tmp_path: Path) -> None:
    (tmp_path / "listed.txt").write_text("")
    with Agent(file_tools=False, cwd=str(tmp_path), shell_tool="on", approval="auto") as agent:
        result = agent.run("run `ls`")
        ran = [i for i in agent.context if isinstance(i, ToolCall)]
        assert [(c.name, c.arguments) for c in ran] == [("shell", {"command": "ls"})]
        assert "listed.txt" in result.text and result.text.startswith("[demo model]")
        # Where it ran, truly: bash, started by the sibling kernel (not "the sibling printed").
        assert "I ran `ls` with bash, started by the sibling kernel. Bash printed:" in result.text
        agent.reset()
        agent.run("Use Python to compute 2**100")  # unchanged: python
        assert {i.name for i in agent.context if isinstance(i, ToolCall)} == {"python"}


def test_the_shell_tool_tells_the_model_where_commands_run() -> None:
    """A remote kernel runs the commands on its server, not in ipyagent's sandbox: the
    description follows Agent.kernel_url both ways (set once, then cleared)."""
    with Agent(file_tools=False, shell_tool="on") as agent:
        local = agent.tools["shell"].description
        assert "sandbox" in local and "remote" not in local
        agent.kernel_url = "http://127.0.0.1:9/"  # nothing listens: no call is made here
        remote = agent.tools["shell"].description
        assert "on the remote Jupyter server" in remote and "not sandboxed by ipyagent" in remote
        agent.kernel_url = ""
        assert agent.tools["shell"].description == local


def test_an_unsandboxed_shell_is_never_described_as_sandboxed() -> None:
    """shell_tool='on' without the sandbox: the model is told the commands run as the
    user's account, and the description follows Agent.sandbox when it changes."""
    with Agent(file_tools=False, python_tool=False, shell_tool="on", sandbox="none") as agent:
        bare = agent.tools["shell"].description
        assert "not sandboxed" in bare and "inside the same sandbox" not in bare
        from ipyagent.kernel.sandbox import resolve_mode

        if resolve_mode("auto")[0] != "bwrap":
            return  # no bubblewrap here: the sandboxed half cannot be shown
        agent.sandbox = "auto"
        assert "inside the same sandbox" in agent.tools["shell"].description


def test_the_edit_box_edits_the_command_itself() -> None:
    from ipyagent.frontends.widgets import ApprovalPanel

    proposed: list = []
    panel = ApprovalPanel(ToolCall("c1", "shell", {"command": "ls -l"}), proposed.append)
    assert panel.editor.value == "ls -l"  # the command, not its JSON
    panel.edit.click()
    # Ctrl-Enter in the box: its text comes with the run message (frontends/static/editor.js).
    panel.editor._message(panel.editor, {"event": "run", "value": "ls -la\necho 'two lines'"}, [])
    assert [d.arguments for d in proposed] == [{"command": "ls -la\necho 'two lines'"}]
