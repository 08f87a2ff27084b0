"""The staged workspace (issue 28), attacked from inside a real sandboxed sibling.

The model's code sees the folder copy-on-write; each attack that once reached outside
the sandbox through the folder, the host's loopback, an abstract socket or the
environment must now stop at the boundary, while a data file still reaches the folder,
the user's side reads it, and undo removes it.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipyagent import Agent
from ipyagent.kernel import sandbox
from ipyagent.kernel.staging import Stage, code_risk, probe_overlay
from tests.helpers.staging import call, changes

FLAGS, WHY = sandbox.probe()
STAGE_WHY = probe_overlay() if FLAGS is not None else WHY
needs_stage = pytest.mark.skipif(FLAGS is None or bool(STAGE_WHY),
                                 reason=f"no staged sandbox here: {WHY or STAGE_WHY}")
SECRETS = {"MYSQL_PWD": "mysql-canary-1", "DATABASE_URL": "postgres://u:db-canary-2@h/x",
           "SLACK_WEBHOOK_URL": "https://hooks.example/slack-canary-3"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Agent, Path]]:
    """An agent whose sandboxed sibling works in ``ws`` (with a module of the user's)."""
    if FLAGS is None or STAGE_WHY:
        pytest.skip(f"no staged sandbox here: {WHY or STAGE_WHY}")
    ws = tmp_path_factory.mktemp("staged") / "ws"
    ws.mkdir()
    (ws / "utils.py").write_text("VALUE = 'the user'\n")
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n\tbare = false\n")
    with pytest.MonkeyPatch.context() as mp:
        for name, value in SECRETS.items():
            mp.setenv(name, value)
        mp.setenv("IPYAGENT_TEST_PASSED", "passed-through")
        with Agent(file_tools=False, cwd=str(ws), tool_timeout=30, sandbox="bwrap",
                   sandbox_env=["IPYAGENT_TEST_PASSED"]) as agent:
            agent.kernel.start()
            yield agent, ws


@needs_stage
@pytest.mark.parametrize(("name", "content", "why"), [
    ("ipykernel_launcher.py", "import os; os.system('touch /tmp/pwned')", "Jupyter kernel"),
    ("json.py", "raise SystemExit('shadowed')", "shadows the installed module 'json'"),
    ("__pycache__/utils.cpython-311.pyc", "forged", "compiled Python"),
    ("demo_server.py", "print('ran unsandboxed')", "python -m"),
    (".git/config", "[core]\n\tfsmonitor = touch /tmp/pwned\n", ".git/"),
    ("sitecustomize.py", "print('hi')", "every start"),
    ("evil.pth", "import os", ".pth"),
])
def test_code_like_files_never_reach_the_folder_unasked(world: tuple[Agent, Path], name: str,
                                                       content: str, why: str) -> None:
    agent, ws = world
    before = (ws / name).read_bytes() if (ws / name).exists() else None
    result = call(agent, f"import os\nos.makedirs(os.path.dirname({name!r}) or '.', exist_ok=True)\n"
                         f"open({name!r}, 'w').write({content!r})")
    assert not result.error, result.output
    found = changes(result)[name]
    assert found["status"] == "pending" and why in found["risk"], found
    assert ((ws / name).read_bytes() if (ws / name).exists() else None) == before
    assert "NOT applied, waiting for the user" in result.for_model() and name in result.meta["note"]
    # ...but the sandbox's own view has it.
    assert call(agent, f"print(open({name!r}).read() == {content!r})").output.startswith("True")


@needs_stage
def test_a_data_file_reaches_the_folder_and_undo_removes_it(world: tuple[Agent, Path]) -> None:
    agent, ws = world
    result = call(agent, "import csv\nwith open('sales.csv', 'w', newline='') as f:\n"
                         "    csv.writer(f).writerows([['month', 'revenue'], ['jan', 3]])")
    assert changes(result)["sales.csv"]["status"] == "applied", result.meta
    assert "applied to the user's folder: sales.csv (new, 2 lines)" in result.meta["note"]
    assert (ws / "sales.csv").read_text().splitlines() == ["month,revenue", "jan,3"]  # the user's side
    report = agent.undo()
    assert report.restored == ["sales.csv"] and not (ws / "sales.csv").exists()


@needs_stage
def test_the_model_is_told_which_lines_its_code_changed(world: tuple[Agent, Path]) -> None:
    # Issue 33, at 1.5B: told only "settings.ini (modified)", the model answered for an edit
    # that had overwritten the wrong line, and counted 4 lines in a file of 3.
    agent, ws = world
    (ws / "settings.ini").write_text("[model]\nthreshold = 0.5\n\n[data]\npath = d.csv\n")
    result = call(agent, "lines = open('settings.ini').readlines()\nlines[3] = 'threshold = 0.75\\n'\n"
                         "open('settings.ini', 'w').writelines(lines)")
    assert ("settings.ini (modified, now 5 lines: line 4 was '[data]', now 'threshold = 0.75')"
            in result.for_model()), result.for_model()
    result = call(agent, "open('settings.ini', 'a').write('seed = 1\\n')")
    assert "(modified, now 6 lines: line 6 added: 'seed = 1')" in result.for_model()


@needs_stage
def test_undo_keeps_a_file_the_user_edited_since(world: tuple[Agent, Path]) -> None:
    agent, ws = world
    (ws / "notes.txt").write_text("mine\n")
    result = call(agent, "open('notes.txt', 'a').write('theirs\\n')")
    assert changes(result)["notes.txt"]["kind"] == "modified"
    assert (ws / "notes.txt").read_text() == "mine\ntheirs\n"
    assert "+theirs" in changes(result)["notes.txt"]["diff"]
    (ws / "notes.txt").write_text("mine, edited after\n")
    report = agent.undo()
    assert report.kept == ["notes.txt"] and (ws / "notes.txt").read_text() == "mine, edited after\n"


@needs_stage
def test_a_pending_change_applies_when_the_person_says_so(world: tuple[Agent, Path]) -> None:
    agent, ws = world
    call(agent, "open('helper.py', 'w').write('def f():\\n    return 1\\n')")
    assert not (ws / "helper.py").exists()
    assert "helper.py" in {c.path for c in agent.changes()}
    applied = agent.apply("helper.py")
    assert [c.path for c in applied] == ["helper.py"] and (ws / "helper.py").exists()
    assert agent.undo().restored == ["helper.py"] and not (ws / "helper.py").exists()
    # Both decisions are rows of the audit, with a sha256 of what moved; the model is told.
    rows = [r for item in agent.context for r in item.meta.get("decided", [])]
    assert [(r["action"], r["subject"]) for r in rows[-2:]] == [
        ("apply", "1 file change: helper.py"), ("undo", "1 file change: helper.py")]
    assert all(len(r["sha256"]) == 64 for r in rows[-2:])
    assert "the user undid these changes in their folder: helper.py" in agent.context[-1].content


@needs_stage
def test_ipyagents_own_state_is_out_of_reach(world: tuple[Agent, Path]) -> None:
    agent, ws = world
    (ws / ".ipyagent").mkdir(exist_ok=True)
    (ws / ".ipyagent" / "settings.json").write_text("{}")
    # The existing folder is hidden (an empty tmpfs, gone with the sandbox)...
    out = call(agent, "import os\nprint(os.listdir('.ipyagent'))\n"
                      "open('.ipyagent/memory.sqlite', 'w').write('planted note')").output
    assert out.startswith("[]")
    assert not (ws / ".ipyagent" / "memory.sqlite").exists()
    # ...and a change under it (were one made past the mask) is never applied, whoever asks.
    upper = Path(agent.kernel.stage.layers[0].upper)
    (upper / ".ipyagent").mkdir(exist_ok=True)
    (upper / ".ipyagent" / "memory.sqlite").write_text("planted note")
    assert ".ipyagent/memory.sqlite" in {c.path for c in agent.changes()}
    assert list(agent.apply(".ipyagent/memory.sqlite")) == []
    assert not (ws / ".ipyagent" / "memory.sqlite").exists()
    agent.discard(".ipyagent/memory.sqlite")


@needs_stage
def test_a_delayed_write_from_a_thread_lands_in_the_stage(world: tuple[Agent, Path]) -> None:
    agent, ws = world
    result = call(agent, "import threading, time\n"
                         "def later():\n    time.sleep(1.0)\n    open('late.txt', 'w').write('late')\n"
                         "threading.Thread(target=later, daemon=True).start()")
    assert "late.txt" not in changes(result)
    time.sleep(2.0)
    assert not (ws / "late.txt").exists()  # it wrote after the call: into the stage
    assert "late.txt" in {c.path for c in agent.changes(everything=True)} or \
        "late.txt" in changes(call(agent, "1"))
    agent.undo()


@needs_stage
def test_the_environment_is_an_allow_list(world: tuple[Agent, Path]) -> None:
    agent, _ = world
    for tool, code in (("python", "import os; print(dict(os.environ))"), ("shell", "env")):
        out = call(agent, code, tool).output
        for value in SECRETS.values():
            assert value not in out, (tool, out)
        assert "passed-through" in out  # Agent.sandbox_env names one


@needs_stage
@pytest.mark.parametrize("network", [False, True])
def test_no_route_to_the_hosts_loopback_or_abstract_sockets(tmp_path: Path, network: bool) -> None:
    if network and shutil.which("slirp4netns") is None:
        pytest.skip("slirp4netns is not installed")
    server = socket.create_server(("127.0.0.1", 0))  # like the user kernel's iopub port
    port = server.getsockname()[1]
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind(b"\0ipyagent-test-abstract")
    abstract.listen()
    code = f"""
import socket
def reach(family, address):
    s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(2)
    try:
        s.connect(address); return "REACHED"
    except OSError as e:
        return type(e).__name__
print("tcp", reach(socket.AF_INET, ("127.0.0.1", {port})), reach(socket.AF_INET, ("10.0.2.2", {port})))
print("unix", reach(socket.AF_UNIX, b"\\0ipyagent-test-abstract"))
print("ports", {hex(port)[2:].upper()!r} in open("/proc/net/tcp").read().upper())
"""
    try:
        with Agent(file_tools=False, cwd=str(tmp_path), sandbox="bwrap",
                   sandbox_network=network) as agent:
            out = call(agent, code).output
            shell = call(agent, f"python3 -c '{code.replace(chr(39), chr(34))}'", "shell").output \
                if shutil.which("python3") else out
    finally:
        server.close()
        abstract.close()
    for text in (out, shell):
        assert "REACHED" not in text, text
        assert "ports False" in text, text


@needs_stage
def test_the_shell_runs_what_its_card_shows_not_the_siblings_patches(world: tuple[Agent, Path]) -> None:
    agent, _ = world
    call(agent, "import subprocess\n"
                "class P:\n    def __init__(self, *a, **k): raise SystemExit('patched')\n"
                "subprocess.Popen = P\nimport os; os.system = lambda c: 0")
    result = call(agent, "echo the card said this; exit 4", "shell")
    assert result.output.splitlines() == ["the card said this", "[exit code 4]"]
    assert result.meta["exit_code"] == 4


def test_changes_apply_never_through_a_symlink(tmp_path: Path) -> None:
    real, outside = tmp_path / "real", tmp_path / "outside"
    real.mkdir()
    outside.mkdir()
    (real / "sub").symlink_to(outside)  # the user's own link out of the folder
    stage = Stage([str(real)])
    try:
        layer = stage.layers[0]
        os.makedirs(os.path.join(layer.upper, "sub"))  # as if the sandbox wrote sub/x.txt
        Path(layer.upper, "sub", "x.txt").write_text("planted")
        found = stage.scan()
        assert [c.path for c in found] == ["sub/x.txt"]
        record = stage.apply(found)  # refused, said, left pending: never raised half-way
        assert not record.changes and "symlink" in (record.failed[0].problem or "")
        assert not (outside / "x.txt").exists()
    finally:
        stage.close()


def test_the_scan_walks_only_the_changes(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    stage = Stage([str(real)])
    try:
        for i in range(5):
            (real / f"f{i}.txt").write_text("x")
        Path(stage.layers[0].upper, "new.csv").write_text("a,b\n")
        assert [c.path for c in stage.scan()] == ["new.csv"]
        assert stage.scan() == []  # nothing new since
    finally:
        stage.close()


@pytest.mark.parametrize(("rel", "expected"), [
    ("data/sales.csv", None), ("plot.png", None), ("report.md", None),
    ("requests.py", "shadows"), ("pkg/__init__.py", "Python"), ("Makefile", "make"),
    ("conftest.py", "pytest"), ("setup.py", "pip"), ("pyproject.toml", "build"),
    ("lib.so", "native"), ("AGENTS.md", "instructions"), ("mcp.json", "MCP"),
    (".bashrc", "start-up"), (".ipyagent/x", ".ipyagent"), ("a/.git/hooks/pre-commit", ".git"),
    ("skills/x/SKILL.md", "skill"),
])
def test_code_risk(rel: str, expected: str | None, tmp_path: Path) -> None:
    risk = code_risk(rel, str(tmp_path))
    assert (risk is None) if expected is None else (risk is not None and expected in risk), risk


@needs_stage
@pytest.mark.parametrize(("answer", "status"), [("y", "applied"), ("n", "discarded")])
def test_the_terminal_asks_for_code_like_changes(tmp_path: Path, answer: str, status: str) -> None:
    import io

    from ipyagent.engine.approval import TerminalApprover

    shown = io.StringIO()
    asked: list[str] = []
    with Agent(file_tools=False, cwd=str(tmp_path), sandbox="bwrap") as agent:
        agent.policy.ui = TerminalApprover(input_fn=lambda p: asked.append(p) or answer, output=shown)
        result = call(agent, "open('tool\u202e.py', 'w').write('X = 1\\n')")
    assert changes(result)["tool\u202e.py"]["status"] == status
    [row] = result.meta["decided"]
    assert row["action"] == ("apply" if answer == "y" else "discard") and row["by"] == "terminal"
    assert (tmp_path / "tool\u202e.py").exists() == (status == "applied")
    assert asked and "Apply them to your folder?" in asked[0]
    text = shown.getvalue()
    assert "tool⟨U+202E⟩.py" in text and "\u202e" not in text and "+X = 1" in text
