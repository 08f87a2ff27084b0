"""Attacks on the staged workspace (issue 28) from inside a real sandbox and from a
hostile repository: each test is one hole that was found open, with the attack as the
model (or a file already in the folder) would make it.

The model's code runs through ``agent.tools.execute`` with a real Agent, bubblewrap and
the overlay; a few attacks on ``Stage`` itself write its upper directory directly, which
is exactly what the sandbox's writes become.
"""

from __future__ import annotations

import gc
import hashlib
import io
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipyagent import Agent
from ipyagent._util import eventloop as _eventloop
from ipyagent.engine.approval import TerminalApprover
from ipyagent.frontends.changes_panel import changes_html
from ipyagent.kernel import sandbox
from ipyagent.kernel.sandbox import MAX_PROCESSES
from ipyagent.kernel.staging import Change, code_risk, probe_overlay
from ipyagent.tools.changes import ChangeRequest, never_applied
from tests.helpers.staging import call, changes

FLAGS, WHY = sandbox.probe()
STAGE_WHY = probe_overlay() if FLAGS is not None else WHY
needs_stage = pytest.mark.skipif(FLAGS is None or bool(STAGE_WHY),
                                 reason=f"no staged sandbox here: {WHY or STAGE_WHY}")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Agent, Path]]:
    """An agent whose sandboxed sibling works in ``ws``."""
    if FLAGS is None or STAGE_WHY:
        pytest.skip(f"no staged sandbox here: {WHY or STAGE_WHY}")
    ws = tmp_path_factory.mktemp("attacks") / "ws"
    ws.mkdir()
    with Agent(file_tools=False, cwd=str(ws), tool_timeout=60, sandbox="bwrap") as agent:
        agent.kernel.start()
        yield agent, ws


@needs_stage
@pytest.mark.skipif(shutil.which("python3") is None, reason="no python3 on PATH")
def test_the_shell_tool_has_the_siblings_process_limit(world: tuple[Agent, Path]) -> None:
    # A fork loop in the shell tool once had no limit at all (the python sibling stopped
    # at MAX_PROCESSES): it could take every pid of the machine from the user's kernel.
    agent, _ = world
    n = MAX_PROCESSES + 150
    spawn = ("import subprocess\nps = []\ntry:\n"
             f"    for _ in range({n}): ps.append(subprocess.Popen(['sleep', '20']))\n"
             "except OSError:\n    pass\nprint('started', len(ps))\nfor p in ps: p.kill()\n")
    out = call(agent, f"python3 -c \"{spawn}\"", "shell").output
    started = int(out.split("started ")[1].split()[0])
    assert started <= MAX_PROCESSES, out


@needs_stage
def test_a_change_that_cannot_be_applied_loses_neither_the_call_nor_the_undo(
        world: tuple[Agent, Path]) -> None:
    # The sandbox replaced a folder of the user's with a file in the same call that
    # overwrote a data file: the apply raised half-way, the call came back as an error
    # (its output lost), the card listed nothing, and the data file it had already
    # overwritten had no before-image: undo could not bring it back.
    agent, ws = world
    (ws / "a.csv").write_text("the user's a\n")
    (ws / "d").mkdir()
    (ws / "d" / "x.txt").write_text("x\n")
    result = call(agent, "import shutil\nopen('a.csv', 'w').write('the sandbox a\\n')\n"
                         "shutil.rmtree('d')\nopen('d', 'w').write('a file now')\nprint('done')")
    assert not result.error and result.output.startswith("done"), result.output
    found = changes(result)
    assert found["a.csv"]["status"] == "applied" and (ws / "a.csv").read_text() == "the sandbox a\n"
    assert found["d"]["status"] == "pending" and "directory" in found["d"]["problem"], found["d"]
    assert "could not be applied" in result.meta["note"] and "d (" in result.meta["note"]
    assert "not applied: your folder has a directory there" in changes_html(result.meta["changes"])
    assert (ws / "d" / "x.txt").read_text() == "x\n"
    again = agent.apply("d")  # a person asks: the same clear answer, nothing raised
    assert [c.status for c in again] == ["pending"] and "directory" in again[0].problem
    assert "a.csv" in agent.undo().restored
    assert (ws / "a.csv").read_text() == "the user's a\n"
    agent.discard("d")


@needs_stage
def test_undo_brings_back_a_symlink_of_yours_and_nothing_is_replaced_that_it_could_not(
        world: tuple[Agent, Path]) -> None:
    # The sandbox replaced the user's own symlink (latest.csv -> v1.csv) and named pipe
    # with plain files: both were applied as data with no before-image ("unreadable"),
    # and undo then deleted what it had written: the user's link and pipe were gone.
    agent, ws = world
    (ws / "v1.csv").write_text("v1\n")
    (ws / "latest.csv").symlink_to("v1.csv")
    os.mkfifo(ws / "feed")
    result = call(agent, "import os\nfor name in ('latest.csv', 'feed'):\n"
                         "    os.unlink(name)\n    open(name, 'w').write('the sandbox\\n')")
    found = changes(result)
    assert found["latest.csv"]["status"] == "applied", found
    assert found["feed"]["status"] == "pending" and "pipe" in found["feed"]["problem"], found
    assert stat.S_ISFIFO(os.lstat(ws / "feed").st_mode)
    assert agent.undo().restored == ["latest.csv"]
    assert os.readlink(ws / "latest.csv") == "v1.csv"
    agent.discard("feed")


@needs_stage
def test_deleting_a_folder_of_yours_asks_and_undo_brings_it_back(world: tuple[Agent, Path]) -> None:
    # shutil.rmtree('src') in the sandbox became one whiteout, "src (deleted)": a data
    # change, applied at once (rmtree of the user's real folder, its .py files too), and
    # undo said "restored 1 file(s): src" while restoring nothing.
    agent, ws = world
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "mod.py").write_text("X = 1\n")
    (ws / "src" / "notes.txt").write_text("mine\n")
    (ws / "src" / "link").symlink_to("notes.txt")
    result = call(agent, "import shutil\nshutil.rmtree('src')")
    found = changes(result)["src"]
    assert found["kind"] == "deleted" and found["status"] == "pending", found
    assert "folder" in found["risk"]
    assert (ws / "src" / "pkg" / "mod.py").exists()
    assert [c.path for c in agent.apply("src")] == ["src"] and not (ws / "src").exists()
    assert agent.undo().restored == ["src"]
    assert (ws / "src" / "pkg" / "mod.py").read_text() == "X = 1\n"
    assert os.readlink(ws / "src" / "link") == "notes.txt"


@needs_stage
def test_the_scan_never_reads_outside_the_folder_through_a_link_of_the_repository(
        world: tuple[Agent, Path], tmp_path: Path) -> None:
    # A hostile repository ships `cfg -> /somewhere/private`; the sandbox replaces the
    # link with a folder of its own and writes cfg/secret.txt. The scan compared it with
    # the real path (following the link): the card's diff and the transcript carried the
    # user's private file ("-SECRET-CANARY"), and the file was called "modified".
    agent, ws = world
    private = tmp_path / "private"
    private.mkdir()
    (private / "secret.txt").write_text("SECRET-CANARY\n")
    (ws / "cfg").symlink_to(private)
    result = call(agent, "import os\nos.unlink('cfg')\nos.mkdir('cfg')\n"
                         "open('cfg/secret.txt', 'w').write('mine now\\n')\n"
                         "os.mkdir('cfg/sub')")
    found = changes(result)["cfg/secret.txt"]
    assert found["kind"] == "new", found
    assert "SECRET-CANARY" not in repr(result.meta) + result.output
    assert "symlink" in found["problem"]  # and it is not applied through the link
    assert (private / "secret.txt").read_text() == "SECRET-CANARY\n"
    agent.discard("cfg/secret.txt")


@needs_stage
def test_thousands_of_files_give_a_bounded_note_and_card(world: tuple[Agent, Path]) -> None:
    # 20,000 new files in one call kept the user's cell busy for 193 s (settling the
    # changes compared every change with every other: O(n^2)), then told the model every
    # path (430 KB of note, past any tool output limit) and put every row on the card.
    agent, ws = world
    result = call(agent, "import os\nos.mkdir('many')\nfor i in range(3000):\n"
                         "    open(f'many/{i}.txt', 'w').write(str(i))\nprint('made')")
    assert len(result.meta["changes"]) == 3000
    assert all(c["status"] == "applied" for c in result.meta["changes"])
    assert len(list((ws / "many").iterdir())) == 3000
    told = result.for_model()
    assert len(told) < 5000 and "and 2980 more" in told, told[-300:]
    card = changes_html(result.meta["changes"])
    assert card.count("<div><") < 300 and "2800 more" in card
    assert len(agent.undo().restored) == 3000 and not (ws / "many").exists()


@needs_stage
@pytest.mark.timeout(300)  # before the fix this hashed 1 TB of holes
def test_a_huge_or_sparse_file_is_listed_not_hashed_or_copied(world: tuple[Agent, Path]) -> None:
    # A 1 TB sparse file costs the sandbox one truncate(); the scan then hashed all of it
    # in the user's kernel (hours of a busy cell) and the apply read it whole into memory
    # (the user's kernel killed for memory) or, streamed, wrote 1 TB of zeros to the disk.
    agent, ws = world
    stage = agent.kernel.stage
    assert stage is not None
    limit, stage.max_file_bytes = stage.max_file_bytes, 1 << 20
    try:
        result = call(agent, "open('big.bin', 'wb').write(b'x' * (2 << 20))\n"
                             "open('holes.bin', 'wb').truncate(1 << 40)")
    finally:
        stage.max_file_bytes = limit
    found = changes(result)
    assert found["big.bin"]["status"] == "pending" and "larger than" in found["big.bin"]["problem"]
    assert found["holes.bin"]["status"] == "pending" and "sparse" in found["holes.bin"]["problem"]
    assert "sha256" not in found["holes.bin"] and found["holes.bin"]["size"] == 1 << 40
    assert not (ws / "big.bin").exists() and not (ws / "holes.bin").exists()
    assert [c.status for c in agent.apply("big.bin", "holes.bin")] == ["pending", "pending"]
    assert not (ws / "big.bin").exists()
    agent.discard("big.bin", "holes.bin")


@needs_stage
@pytest.mark.timeout(300)  # before the fix this one diff ran for more than ten minutes
def test_a_pathological_rewrite_does_not_hang_the_diff(world: tuple[Agent, Path]) -> None:
    # difflib's matcher is roughly cubic on lines drawn from a small alphabet: the sandbox
    # rewrote a 160 KB text file of the user's (40,000 short lines) and the card's diff
    # kept the user's cell busy for over ten minutes.
    agent, ws = world
    (ws / "counts.txt").write_text("".join(f"{i % 150}\n" for i in range(40_000)))
    result = call(agent, "open('counts.txt', 'w').write(''.join(f'{(i * 7) % 150}\\n' "
                         "for i in range(40_000)))")
    found = changes(result)["counts.txt"]
    assert found["status"] == "applied" and found["diff"].startswith("--- a/counts.txt"), found
    assert "more diff lines" in found["diff"]
    agent.undo()


@needs_stage
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_bare_repository_planted_in_the_folder_asks(world: tuple[Agent, Path]) -> None:
    # HEAD, config, objects/ and refs/ are data names, so they were applied at once, and
    # git then took the folder for a bare repository: `git log` or `git branch` there (in
    # a terminal) ran config's core.pager outside the sandbox (also core.fsmonitor,
    # aliases, hooks). Measured with git 2.39: safe.bareRepository is "all" by default.
    agent, ws = world
    sub = ws / "notebooks"
    sub.mkdir()
    result = call(agent, "import os\nos.chdir('notebooks')\n"
                         "open('HEAD', 'w').write('ref: refs/heads/main\\n')\n"
                         "open('config', 'w').write('[core]\\n\\tbare = true\\n\\tpager = touch pwned\\n')\n"
                         "for d in ('objects/info', 'refs/heads'):\n"
                         "    os.makedirs(d)\n    open(d + '/keep', 'w').write('')")
    found = changes(result)
    assert found["notebooks/HEAD"]["status"] == "pending" and "git" in found["notebooks/HEAD"]["risk"]
    probe = subprocess.run(["git", "-C", str(sub), "rev-parse", "--git-dir"], capture_output=True,
                           text=True, env={"PATH": os.environ["PATH"], "HOME": str(ws)})
    assert probe.returncode != 0, probe.stdout  # not a repository: nothing of config runs
    # A folder that is a bare repository already: its config asks too.
    (sub / "HEAD").write_text("ref: refs/heads/main\n")
    again = changes(call(agent, "import os\nos.chdir('..')\n"
                                "open('notebooks/config', 'a').write('\\tfsmonitor = touch pwned\\n')"))
    assert again["notebooks/config"]["status"] == "pending", again
    assert "git" in again["notebooks/config"]["risk"]
    agent.discard()


@needs_stage
def test_a_pytest_ini_that_deletes_outside_the_folder_asks(world: tuple[Agent, Path],
                                                          tmp_path: Path) -> None:
    # pytest.ini was a data file: applied at once. With `addopts = --basetemp=DIR` the
    # user's next `pytest` in the folder emptied DIR, anywhere (measured: a folder outside
    # the workspace lost its files); `-p MODULE` imports any installed module.
    agent, ws = world
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("mine\n")
    result = call(agent, f"open('pytest.ini', 'w').write('[pytest]\\naddopts = --basetemp={victim}\\n')")
    found = changes(result)["pytest.ini"]
    assert found["status"] == "pending" and "pytest" in found["risk"], found
    assert not (ws / "pytest.ini").exists()
    agent.discard("pytest.ini")


@pytest.mark.parametrize(("rel", "expected"), [
    ("pytest.ini", "pytest"), (".pytest.ini", "pytest"), ("sub/pytest.toml", "pytest"),
    (".pdbrc", "pdb"), (".env", "environment"), (".gitconfig", "git"),
    (".vscode/tasks.json", "editor"), (".vscode/settings.json", "editor"),
    (".idea/workspace.xml", "editor"), (".devcontainer/devcontainer.json", "container"),
    (".github/workflows/ci.yml", "GitHub"), ("package.json", "npm"),
    ("requirements.txt", "pip"), ("requirements-dev.txt", "pip"), ("dvc.yaml", "dvc"),
    ("ipython_kernel_config.json", "IPython"), ("jupyter_server_config.json", "Jupyter"),
    (".ipython/profile_default/ipython_config.json", "IPython"),
    (".jupyter/jupyter_server_config.json", "Jupyter"),
    (".local/bin/ls", ".local"), (".config/autostart/x.txt", ".config"),
    ("tool.pyz", "Python"), ("x.whl", "pip"), ("script.ipy", "IPython"),
    ("data/report.csv", None), ("notes/HEADLINES.md", None), ("src/config.yaml", None),
])
def test_code_risk_knows_more_names(rel: str, expected: str | None, tmp_path: Path) -> None:
    # Each of these runs code or changes what runs when a tool reads it (an editor opening
    # the folder, pytest, pip, git, pdb, dotenv, IPython/Jupyter in that folder or home).
    risk = code_risk(rel, str(tmp_path))
    assert (risk is None) if expected is None else (risk is not None and expected in risk), risk


@needs_stage
def test_what_the_card_shows_is_what_is_applied_while_the_sandbox_races(
        world: tuple[Agent, Path]) -> None:
    # A thread left running in the sandbox rewrites flip.py in place (SAFE / EVIL) and
    # flips tool's executable bit. The scan hashed one read and diffed another (measured:
    # 50 of 349 listings showed the SAFE diff with EVIL's sha256, which is what an apply
    # then copies); and the mode was read again at apply: `tool`, listed as data (not
    # executable), was applied 0755.
    agent, ws = world
    call(agent, "import os, threading\nstop = threading.Event()\n"
                "fd = os.open('flip.py', os.O_RDWR | os.O_CREAT)\nopen('tool', 'w').write('data\\n')\n"
                "def race():\n    n = 0\n    while not stop.is_set():\n        n += 1\n"
                "        os.pwrite(fd, b'SAFE\\n' if n % 2 else b'EVIL\\n', 0)\n"
                "        os.chmod('tool', 0o755 if n % 2 else 0o644)\n"
                "threading.Thread(target=race, daemon=True).start()")
    stage = agent.kernel.stage
    assert stage is not None
    (ws / "tool").unlink(missing_ok=True)  # applied as data by the call, maybe: listed again
    mismatched, modes, shown = [], [], 0
    try:
        for _ in range(400):
            time.sleep(0.005)  # pacing: the folder's clock ticks, so each look sees a change
            for c in stage.scan():
                if c.path == "flip.py" and c.diff:
                    shown += 1
                    added = "".join(line[1:] for line in c.diff.splitlines(keepends=True)
                                    if line.startswith("+") and not line.startswith("+++"))
                    if hashlib.sha256(added.encode()).hexdigest() != c.sha256:
                        mismatched.append(c.diff)
                if c.path == "tool" and c.status == "pending" and len(modes) < 40:
                    record = stage.apply([c], by="person")
                    if record.changes:
                        executable = bool(os.stat(ws / "tool").st_mode & 0o111)
                        modes.append((c.risk is not None, executable))
                        stage.undo()
    finally:
        call(agent, "stop.set()")
    assert shown > 20 and not mismatched, (shown, mismatched[:2])
    assert modes and all(listed == made for listed, made in modes), modes
    agent.discard()


@needs_stage
def test_a_name_with_a_newline_cannot_forge_a_row_of_the_listing(world: tuple[Agent, Path]) -> None:
    # A file named "evil.pth (new, 9 B)\n[applied] + notes.txt" showed, in `%agent changes`
    # and the terminal's question, as two rows: a harmless-looking second one the file
    # never was (names keep their newline: `visible` keeps newlines for output text).
    agent, _ = world
    name = "x.txt (new, 1 B)\n[applied] + notes\t.pth"
    result = call(agent, f"open({name!r}, 'w').write('import os')")
    assert changes(result)[name]["status"] == "pending"
    listing = repr(agent.changes())
    assert "\n" not in listing and "\t" not in listing and "␊[applied]" in listing, listing
    request = ChangeRequest([c for c in agent.changes() if c.path == name])
    assert request.question().count("\n") == 1  # the heading and one row
    assert "\n" not in result.meta["note"] and "files changed" in result.for_model().rsplit("\n", 1)[-1]
    assert "␊" in changes_html(result.meta["changes"])
    agent.discard(name)


@needs_stage
def test_the_card_shows_where_a_symlink_points(world: tuple[Agent, Path]) -> None:
    # The Apply panel and the card listed "+ pointer.csv (new) can run code: a symlink"
    # without its target: a person approved a link to ~/.ssh/id_rsa blind (the terminal's
    # line had the target, the notebook's did not).
    agent, ws = world
    result = call(agent, "import os\nos.symlink('/home/me/.ssh/id_rsa', 'pointer.csv')")
    found = changes(result)["pointer.csv"]
    assert found["status"] == "pending" and found["link"] == "/home/me/.ssh/id_rsa"
    assert "→ /home/me/.ssh/id_rsa" in changes_html(result.meta["changes"])
    assert not os.path.lexists(ws / "pointer.csv")
    agent.discard("pointer.csv")


@pytest.mark.parametrize("rel", [
    ".GIT/config", ".git./config", ".git /hooks/pre-commit", ".g\u200cit/config",
    "GIT~1/config", ".Git\ufeff/hooks/post-checkout",
])
def test_git_spelled_another_way_is_still_git(rel: str, tmp_path: Path) -> None:
    # On a case-insensitive or HFS+ folder (macOS, a USB stick, WSL's /mnt/c) these are
    # .git: trailing dots and spaces are dropped (Windows), zero-width characters ignored
    # (HFS+), GIT~1 is .git's short name (NTFS). ".g\u200cit" was a data file.
    risk = code_risk(rel, str(tmp_path))
    assert risk is not None and ".git" in risk, risk


@pytest.mark.parametrize("rel", [".ipyagent/memory.sqlite", ".IPYAGENT/memory.sqlite",
                                 ".ipyagent./cache.sqlite", ".ipy\u200bagent/settings.json"])
def test_ipyagents_state_spelled_another_way_is_never_applied(rel: str, tmp_path: Path) -> None:
    change = Change(rel, str(tmp_path), "new", size=1, sha256="0" * 64)
    assert never_applied(change)
    assert ".ipyagent" in (code_risk(rel, str(tmp_path)) or "")


@needs_stage
def test_ipyagents_state_beside_the_notebook_is_out_of_reach(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Memory and autosaves live in .ipyagent/ beside the notebook (the user's kernel's
    # directory), not in Agent.cwd; with Agent.cwd a parent folder (the whole project),
    # only proj/.ipyagent was hidden: the sandbox read nb/.ipyagent/memory.sqlite, and its
    # planted copy was applied by a person's "apply everything" (never_applied looked only
    # at the first path component).
    proj = tmp_path / "proj"
    nb = proj / "nb"
    nb.mkdir(parents=True)
    monkeypatch.chdir(nb)
    with Agent(file_tools=False, cwd=str(proj), tool_timeout=30, sandbox="bwrap") as agent:
        agent.kernel.start()
        (nb / ".ipyagent").mkdir()  # memory turned on after the sandbox started
        (nb / ".ipyagent" / "memory.sqlite").write_text("PRIVATE-NOTE")
        out = call(agent, "import os\ntry:\n    print(open('nb/.ipyagent/memory.sqlite').read())\n"
                          "except OSError as e:\n    print('hidden', e)\n"
                          "os.makedirs('nb/.ipyagent', exist_ok=True)\n"
                          "open('nb/.ipyagent/memory.sqlite', 'w').write('planted note')").output
        assert "PRIVATE-NOTE" not in out, out
        agent.apply()  # a person's "apply everything"
    assert (nb / ".ipyagent" / "memory.sqlite").read_text() == "PRIVATE-NOTE"
    nested = Change("nb/.ipyagent/memory.sqlite", str(proj), "modified", size=1, sha256="0" * 64)
    assert never_applied(nested)


@needs_stage
def test_a_shared_folder_on_sys_path_is_not_bound_into_the_sandbox(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The sandbox binds the user's sys.path entries read-only (editable installs); a script
    # run from /tmp (sys.path[0] = "/tmp") bound the host's whole /tmp: its unix sockets
    # (tmux's /tmp/tmux-UID/default: keystrokes into the user's terminal; X11's display)
    # answer connect() on a read-only bind, and other sandboxes' stages were readable.
    shared = tempfile.gettempdir()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = os.path.join(shared, f"ipyagent-attack-{os.getpid()}.sock")
    server.bind(path)
    server.listen()
    monkeypatch.setattr(sys, "path", [*sys.path, shared])
    try:
        with Agent(file_tools=False, cwd=str(tmp_path), tool_timeout=30, sandbox="bwrap") as agent:
            out = call(agent, f"import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n"
                              f"    s.connect({path!r}); print('REACHED')\n"
                              "except OSError as e:\n    print('refused', e)").output
    finally:
        server.close()
        os.unlink(path)
    assert "REACHED" not in out, out


@needs_stage
def test_the_shell_joins_only_its_own_stage(tmp_path: Path) -> None:
    # The shell joins the namespaces of the pid in the stage's pidfile, checked only to be
    # in another mount namespace than ours. A kernel that died (os._exit from the model's
    # code) leaves its pid there; once the pid is reused by a process of another sandbox
    # (another agent of the user's), the shell ran in that sandbox's workspace and network
    # and wrote into its change set. Simulated: the pidfile names the other stage's pid.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "only-in-b.txt").write_text("b\n")
    with Agent(file_tools=False, cwd=str(tmp_path / "a"), tool_timeout=30, sandbox="bwrap") as a, \
            Agent(file_tools=False, cwd=str(tmp_path / "b"), tool_timeout=30, sandbox="bwrap") as b:
        a.kernel.start()
        b.kernel.start()
        stage_a, stage_b = a.kernel.stage, b.kernel.stage
        assert stage_a is not None and stage_b is not None
        other = Path(stage_b.pidfile).read_text()
        Path(stage_a.pidfile).write_text(other)  # as a reused pid would
        result = call(a, "ls; echo planted > from-a.txt", "shell")
        assert "only-in-b.txt" not in result.output, result.output
        assert not any(c.path == "from-a.txt" for c in b.changes(everything=True))
        # ...and, in b's namespaces, a's folder is no overlay: it was bound as it is.
        assert not (tmp_path / "a" / "from-a.txt").exists(), result.output


def test_the_terminal_question_for_thousands_of_code_files_is_bounded() -> None:
    # 20,000 .py files waiting for a yes printed 20,000 rows and then 20,000 diffs of up
    # to 20 lines each before the y/N prompt: the question scrolled away, and the terminal
    # (or the notebook's stream) held megabytes.
    many = [Change(f"pkg/m{i}.py", "/nowhere", "new", size=6, sha256="0" * 64,
                   risk="Python source", diff=f"--- a/pkg/m{i}.py\n+++ b/pkg/m{i}.py\n@@ -0,0 +1 @@\n+X = 1\n")
            for i in range(20_000)]
    request = ChangeRequest(many)
    question = request.question()
    assert question.count("\n") < 250 and "and 19800 more" in question
    out = io.StringIO()
    answer = _eventloop.run_sync(TerminalApprover(lambda prompt: "n", output=out).confirm_changes(request))
    assert answer is False
    assert out.getvalue().count("\n") < 600, out.getvalue().count("\n")
    assert "more diffs" in out.getvalue()


@needs_stage
def test_a_kernel_dropped_without_close_leaves_no_stage_behind(tmp_path: Path) -> None:
    # A SiblingKernel garbage-collected (or alive at exit) without close() left its stage
    # folder in /tmp for good: the sandbox's writes and copies of the user's files (the
    # overlay's copy-ups, undo's before-images). 172 of them had piled up on this machine.
    from ipyagent.kernel.sibling import SiblingKernel

    kernel = SiblingKernel(cwd=str(tmp_path), sandbox="bwrap")
    kernel.start()
    assert kernel.stage is not None
    base = kernel.stage.base
    assert os.path.isdir(base)
    del kernel
    gc.collect()
    assert not os.path.exists(base)


@needs_stage
def test_binding_the_temporary_folder_does_not_open_the_stage(tmp_path: Path) -> None:
    # With Agent.sandbox_paths = {"/tmp": "rw"} (scratch space), the stage's own folder
    # (in /tmp) was in the sandbox: its lower0 is a read-write bind of the real folder in
    # the stage's namespace, so a write there landed in the user's folder at once, and
    # undo/ held the before-images that %agent undo copies back (the sandbox could edit them).
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "mine.txt").write_text("mine\n")
    shared = os.path.realpath(tempfile.gettempdir())
    with Agent(file_tools=False, cwd=str(ws), tool_timeout=30, sandbox="bwrap",
               sandbox_paths={shared: "rw"}) as agent:
        agent.kernel.start()
        stage = agent.kernel.stage
        assert stage is not None and stage.base.startswith(shared + "/")
        out = call(agent, f"import os\nbase = {stage.base!r}\n"
                          "for sub in ('lower0', 'undo', 'upper0'):\n"
                          "    try:\n        open(os.path.join(base, sub, 'escaped.txt'), 'w').write('x')\n"
                          "        print('wrote', sub)\n"
                          "    except OSError as e:\n        print('no', sub, e.strerror)\n"
                          "print(os.listdir(base))").output
        assert "wrote" not in out, out
        assert not (ws / "escaped.txt").exists()


@needs_stage
def test_an_applied_file_gets_your_umask_not_the_sandboxs_mode(world: tuple[Agent, Path]) -> None:
    # The sandbox chmod-ed its data file 0o666: apply set exactly that (fchmod skips the
    # umask), so a world-writable file appeared in the user's folder and any other local
    # user could rewrite what the user's kernel reads next (or a .py a person applied).
    agent, ws = world
    old = os.umask(0o022)
    try:
        result = call(agent, "import os\nopen('shared.csv', 'w').write('a,b\\n')\nos.chmod('shared.csv', 0o666)")
    finally:
        os.umask(old)
    assert changes(result)["shared.csv"]["status"] == "applied"
    assert stat.S_IMODE(os.stat(ws / "shared.csv").st_mode) == 0o644
    agent.undo()


@needs_stage
def test_a_file_with_a_long_name_is_applied(world: tuple[Agent, Path]) -> None:
    # Apply wrote through a temporary name ".NAME.ipyagent-PID.tmp": a data file whose
    # name is near the 255-byte limit could never reach the folder (File name too long).
    agent, ws = world
    name = "r" * 240 + ".csv"
    result = call(agent, f"open({name!r}, 'w').write('1\\n')")
    assert changes(result)[name]["status"] == "applied", changes(result)[name]
    assert (ws / name).read_text() == "1\n"
    agent.undo()


@needs_stage
def test_a_folder_deleted_and_made_again_lists_what_it_deleted(world: tuple[Agent, Path]) -> None:
    # rmtree('d'); mkdir('d') makes d an opaque folder in the overlay: what d held in the
    # user's folder is deleted in the sandbox's view. The card called each of those files
    # "modified: a device, pipe or socket" (the stand-in whiteout had no st_rdev), so the
    # listing said something else than what the sandbox did, and the deletions hung.
    agent, ws = world
    (ws / "d2" / "sub").mkdir(parents=True)
    (ws / "d2" / "x.txt").write_text("x\n")
    (ws / "d2" / "sub" / "y.txt").write_text("y\n")
    result = call(agent, "import os, shutil\nshutil.rmtree('d2')\nos.mkdir('d2')\n"
                         "open('d2/new.txt', 'w').write('n\\n')")
    found = changes(result)
    assert found["d2/x.txt"]["kind"] == "deleted" and found["d2/x.txt"]["status"] == "applied", found
    assert found["d2/sub"]["kind"] == "deleted" and "folder" in found["d2/sub"]["risk"]
    assert found["d2/new.txt"]["status"] == "applied"
    assert not (ws / "d2" / "x.txt").exists() and (ws / "d2" / "sub" / "y.txt").exists()
    agent.undo()
    assert (ws / "d2" / "x.txt").read_text() == "x\n" and not (ws / "d2" / "new.txt").exists()
    agent.discard("d2/sub")


@needs_stage
def test_setuid_setgid_and_sticky_bits_never_reach_the_folder(world: tuple[Agent, Path]) -> None:
    # Held when tried (kept as a guard): the sandbox's own file may carry 0o7755 in its
    # view; what a person applies is a plain executable (and no xattr crosses: apply
    # copies bytes).
    agent, ws = world
    out = call(agent, "import os\nopen('t.bin', 'wb').write(b'\\x7fELF')\nos.chmod('t.bin', 0o7755)\n"
                      "print(oct(os.stat('t.bin').st_mode & 0o7777))").output
    assert out.startswith("0o7755"), out
    assert [c.status for c in agent.apply("t.bin")] == ["applied"]
    assert stat.S_IMODE(os.stat(ws / "t.bin").st_mode) == 0o755
    assert not os.listxattr(ws / "t.bin")
    agent.undo()


@needs_stage
def test_the_overlay_probe_survives_a_temporary_folder_with_a_space(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The probe ran `sh -c "echo x > {dir}/probe"`: a TMPDIR with a space (or a quote, a
    # `$(...)`) was split or run by the shell, and the staged workspace was reported as
    # impossible here (the folder then read-only) for a wrong reason.
    spaced = tmp_path / "my temp $(touch PWNED)"
    spaced.mkdir()
    monkeypatch.setenv("TMPDIR", str(spaced))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.chdir(tmp_path)  # where a `touch PWNED` the shell ran would land
    probe_overlay.cache_clear()
    try:
        assert probe_overlay() == ""
    finally:
        probe_overlay.cache_clear()
        monkeypatch.undo()
        tempfile.tempdir = None
    assert not any(p.name == "PWNED" for p in tmp_path.rglob("*"))


@needs_stage
def test_deleting_a_very_deep_folder_of_the_repository_loses_nothing(world: tuple[Agent, Path]) -> None:
    # A hostile repository ships a folder 1,500 levels deep; the sandbox deletes it
    # (rm -rf) and a person applies: keeping its copy for undo (shutil.copytree recurses)
    # raised RecursionError out of apply, past the per-change guard, and the call failed.
    agent, ws = world
    top = ws / "deep"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1500):
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    os.close(fd)
    try:
        result = call(agent, "rm -rf deep", "shell")
        assert changes(result)["deep"]["status"] == "pending"
        done = agent.apply("deep")  # a person's yes: made, or refused with a reason; never raised
        assert [c.path for c in done] == ["deep"]
        if done[0].status == "applied":
            assert not top.exists() and agent.undo().restored == ["deep"]
        assert top.is_dir()
    finally:  # rm, not shutil.rmtree (it recurses): pytest's own clean-up would trip on it
        subprocess.run(["rm", "-rf", str(top)], check=False)


@needs_stage
def test_a_very_deep_tree_in_the_sandbox_does_not_break_close(tmp_path: Path) -> None:
    # The sandbox made folders 1,500 deep in its view (the upper directory holds them);
    # closing the agent removed the stage with shutil.rmtree, which recurses: close()
    # raised RecursionError and the stage (copies of the user's files) stayed in /tmp.
    agent = Agent(file_tools=False, cwd=str(tmp_path), tool_timeout=60, sandbox="bwrap")
    try:
        call(agent, "import os\nfd = os.open('.', os.O_RDONLY)\nfor _ in range(1500):\n"
                    "    os.mkdir('d', dir_fd=fd)\n    nxt = os.open('d', os.O_RDONLY, dir_fd=fd)\n"
                    "    os.close(fd)\n    fd = nxt\n")
        stage = agent.kernel.stage
        assert stage is not None
        base = stage.base
    finally:
        agent.close()
        subprocess.run(["rm", "-rf", str(tmp_path / "d")], check=False)
    assert not os.path.exists(base)


@needs_stage
def test_a_file_hundreds_of_folders_deep_is_not_planted_in_the_folder(world: tuple[Agent, Path]) -> None:
    # A data file 300 folders down was applied at once: apply made the 300 folders in the
    # user's folder, a tree the user's own tools then trip on (shutil.rmtree, pytest's
    # clean-up: RecursionError past ~1,000), and undo removed the file but not the folders.
    agent, ws = world
    result = call(agent, "import os\nfd = os.open('.', os.O_RDONLY)\nfor _ in range(300):\n"
                         "    try:\n        os.mkdir('n', dir_fd=fd)\n    except FileExistsError:\n        pass\n"
                         "    nxt = os.open('n', os.O_RDONLY, dir_fd=fd)\n    os.close(fd)\n    fd = nxt\n"
                         "os.close(os.open('leaf.csv', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))")
    (path,) = [p for p in changes(result) if p.endswith("leaf.csv")]
    found = changes(result)[path]
    assert found["status"] == "pending" and "deep" in found["problem"], found
    assert not (ws / "n").exists()
    agent.discard(path)


@needs_stage
def test_undo_removes_the_folders_an_apply_made(world: tuple[Agent, Path]) -> None:
    # Undo removed an applied out/run1/result.csv but left out/run1/ behind: the folder
    # was not "as it was before the last applied set".
    agent, ws = world
    (ws / "out").mkdir(exist_ok=True)
    (ws / "out" / "keep.txt").write_text("mine\n")
    result = call(agent, "import os\nos.makedirs('out/run1/deeper', exist_ok=True)\n"
                         "open('out/run1/deeper/result.csv', 'w').write('1\\n')")
    assert changes(result)["out/run1/deeper/result.csv"]["status"] == "applied"
    assert agent.undo().restored == ["out/run1/deeper/result.csv"]
    assert not (ws / "out" / "run1").exists() and (ws / "out" / "keep.txt").exists()


@needs_stage
def test_replacing_a_huge_file_of_yours_does_not_copy_it_whole(world: tuple[Agent, Path]) -> None:
    # The sandbox replaced the user's 50 GB file with a tiny one (a cheap unlink and
    # write); applying it first copied all 50 GB into the stage for undo: a long-busy cell
    # and a full /tmp, for a few bytes of the sandbox's work. Same limit as staged files.
    agent, ws = world
    stage = agent.kernel.stage
    assert stage is not None
    (ws / "huge.bin").write_bytes(b"u" * (2 << 20))
    limit, stage.max_file_bytes = stage.max_file_bytes, 1 << 20
    try:
        result = call(agent, "import os\nos.unlink('huge.bin')\nopen('huge.bin', 'w').write('tiny')")
    finally:
        stage.max_file_bytes = limit
    found = changes(result)["huge.bin"]
    assert found["status"] == "pending" and "larger than" in found["problem"], found
    assert (ws / "huge.bin").stat().st_size == 2 << 20
    agent.discard("huge.bin")
