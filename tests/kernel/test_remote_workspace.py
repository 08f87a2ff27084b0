"""Agent.workspace = "remote": the file tools on a real Jupyter Server's files through its
contents API, and a clear line on a real Kernel Gateway (which has none)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ipyagent import Agent
from ipyagent._util import eventloop as _eventloop
from ipyagent.context.items import ToolCall, ToolResult
from ipyagent.tools.remote_files import RemoteWorkspace
from tests.helpers.kernel_servers import KernelServer, free_port

TOKEN_ENV = "IPYAGENT_TEST_JUPYTER_TOKEN"


def run(agent: Agent, name: str, **args: object) -> ToolResult:
    return _eventloop.run_sync(agent.tools.execute(ToolCall("c1", name, dict(args))))


@pytest.fixture
def agent(jupyter_server: KernelServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Agent]:
    monkeypatch.setenv(TOKEN_ENV, jupyter_server.token)
    with Agent(python_tool=False, kernel_url=jupyter_server.url, kernel_token_env=TOKEN_ENV,
               workspace="remote", cwd=str(tmp_path)) as a:
        yield a


def test_the_file_tools_act_on_the_servers_files(agent: Agent, jupyter_server: KernelServer, tmp_path: Path):
    made = run(agent, "write_file", path="runs/out/report.md", content="# Report\nline two\n")
    assert not made.error, made.output
    on_server = jupyter_server.root / "runs" / "out" / "report.md"
    assert on_server.read_text() == "# Report\nline two\n"
    assert not (tmp_path / "runs").exists()  # nothing written on this machine
    assert made.meta["file"] == {"path": "runs/out/report.md", "text": "# Report\nline two\n"}
    assert run(agent, "read_file", path="runs/out/report.md").output == "# Report\nline two\n"
    listing = run(agent, "list_files", path="runs").output
    assert listing.splitlines()[1:] == ["out/"]
    assert "report.md  (" in run(agent, "list_files", path="runs/out").output
    edited = run(agent, "edit_file", path="runs/out/report.md", old="line two", new="line 2")
    assert not edited.error and on_server.read_text() == "# Report\nline 2\n"
    again = run(agent, "write_file", path="runs/out/report.md", content="x\n")
    assert again.output.startswith("replaced runs/out/report.md")


def test_the_preview_is_a_diff_against_the_remote_file(agent: Agent, jupyter_server: KernelServer):
    (jupyter_server.root / "notes.txt").write_text("alpha\nbeta\n")
    diff = agent.tools.preview(ToolCall("c1", "edit_file", {"path": "notes.txt", "old": "beta",
                                                              "new": "gamma"}))
    assert diff is not None and "-beta\n" in diff and "+gamma\n" in diff


def test_paths_that_leave_the_remote_workspace_are_refused(agent: Agent, jupyter_server: KernelServer):
    outside = jupyter_server.home / "outside.txt"
    outside.write_text("TOP SECRET\n")
    for path in ("../outside.txt", "/etc/passwd", "a/../../outside.txt", str(outside)):
        result = run(agent, "read_file", path=path)
        assert result.error and "TOP SECRET" not in result.output and "root:" not in result.output, path
    (jupyter_server.root / "blob.bin").write_bytes(b"\x00\xff\xfe")
    assert "looks binary" in run(agent, "read_file", path="blob.bin").output
    assert "is a directory; use list_files" in run(agent, "read_file", path=".").output
    missing = run(agent, "read_file", path="nope.txt")
    assert missing.error and "does not exist in the remote workspace" in missing.output
    assert jupyter_server.token not in missing.output


def test_a_kernel_gateway_has_no_contents_api_in_one_line(kernel_gateway: KernelServer,
                                                          monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv(TOKEN_ENV, kernel_gateway.token)
    with Agent(python_tool=False, kernel_url=kernel_gateway.url, kernel_token_env=TOKEN_ENV,
               workspace="remote", cwd=str(tmp_path)) as a:
        result = run(a, "write_file", path="x.txt", content="x")
    assert result.error and "\n" not in result.output
    assert "has no contents API (a Kernel Gateway?)" in result.output
    assert not (tmp_path / "x.txt").exists()


def test_remote_without_a_kernel_url_is_an_error_value(tmp_path: Path):
    with Agent(python_tool=False, workspace="remote", cwd=str(tmp_path)) as a:
        result = run(a, "list_files")
        assert a.workspace_path == tmp_path.resolve()  # local uses keep the local directory
    assert result.error and "needs Agent.kernel_url" in result.output


def test_a_huge_remote_file_is_not_pulled_in(agent: Agent, jupyter_server: KernelServer):
    with open(jupyter_server.root / "huge.log", "wb") as f:
        f.truncate(11 * 1024 * 1024)
    result = run(agent, "read_file", path="huge.log")
    assert result.error and "too large for the file tools" in result.output


def test_the_model_is_told_where_code_and_files_are(tmp_path: Path):
    with Agent(model="demo", file_tools=True, cwd=str(tmp_path)) as a:
        local = a.tools["python"].spec()["description"]
        a.kernel_url = "http://127.0.0.1:9"
        remote = a.tools["python"].spec()["description"]
        a.workspace = "remote"
        both = a.tools["python"].spec()["description"]
    assert "remote" not in local
    assert "remote Jupyter server" in remote and "act on the user's machine" in remote
    assert "act on that machine's files too" in both and "127.0.0.1" not in remote + both


def test_a_windows_file_edited_remotely_keeps_its_crlf_as_a_local_edit_does(agent: Agent,
                                                                           jupyter_server: KernelServer):
    crlf = jupyter_server.root / "win.py"
    crlf.write_bytes(b"def f():\r\n    return 1\r\n\r\ndef g():\r\n    return 2\r\n")
    preview = agent.tools.preview(ToolCall("c1", "edit_file", {"path": "win.py", "old": "return 2\n",
                                                               "new": "return 20\n"}))
    assert preview is not None and "+    return 20\r\n" in preview, preview
    edit = run(agent, "edit_file", path="win.py", old="def f():\n    return 1\n",
               new="def f():\n    return 10\n")
    assert not edit.error, edit.output
    assert crlf.read_bytes() == b"def f():\r\n    return 10\r\n\r\ndef g():\r\n    return 2\r\n"
    assert edit.meta["file"]["text"] == crlf.read_bytes().decode()  # the record is the file as left


def test_what_the_model_reads_names_the_server_not_its_url(agent: Agent, jupyter_server: KernelServer):
    (jupyter_server.root / ".hidden").write_text("x")
    (jupyter_server.root / "blob.bin").write_bytes(b"\x00\xff\xfe")
    said = [run(agent, "write_file", path="where/a.txt", content="one\n"),
            run(agent, "edit_file", path="where/a.txt", old="one", new="two"),
            run(agent, "list_files", path="where"),
            run(agent, "read_file", path="where/missing.txt"),
            run(agent, "read_file", path=".hidden"),
            run(agent, "read_file", path="blob.bin"),
            run(agent, "edit_file", path="where/a.txt", old="absent", new="x")]
    for result in said:
        assert jupyter_server.url not in result.output and "127.0.0.1" not in result.output, result.output
    assert [r.error for r in said] == [False, False, False, True, True, True, True]
    assert said[0].output.startswith("created where/a.txt on the remote kernel's server (")
    assert said[1].output.startswith("edited where/a.txt on the remote kernel's server: replaced 1 line(s)")
    assert said[2].output.splitlines()[0] == "where/ (1 entries, on the remote kernel's server)"
    wrong = RemoteWorkspace(jupyter_server.url, "IPYAGENT_TEST_NO_TOKEN")
    try:
        refused = wrong.call("read_file", {"path": "where/a.txt"})
    finally:
        wrong.close()
    assert refused.error and refused.output.startswith("Error: the remote kernel's server "), refused.output
    assert "127.0.0.1" not in refused.output


def test_a_server_with_nothing_listening_is_named_not_located():
    ws = RemoteWorkspace(f"http://127.0.0.1:{free_port()}/user/alice-private", "IPYAGENT_TEST_NO_TOKEN")
    try:
        result = ws.call("list_files", {"path": "."})
    finally:
        ws.close()
    assert result.error and "nothing is listening at the remote kernel's server" in result.output
    assert "127.0.0.1" not in result.output and "alice-private" not in result.output, result.output
    assert "127.0.0.1" in repr(ws) and "alice-private" in repr(ws)  # the user's own view keeps it


def test_a_wrong_token_is_said_to_be_the_token(jupyter_server: KernelServer,
                                               monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A Jupyter Server refusing the token is not taken for a server without a contents API."""
    monkeypatch.setenv(TOKEN_ENV, "not-the-token")
    with Agent(python_tool=False, kernel_url=jupyter_server.url, kernel_token_env=TOKEN_ENV,
               workspace="remote", cwd=str(tmp_path)) as a:
        result = run(a, "read_file", path="x.txt")
    assert result.error and "\n" not in result.output
    assert f"refused the token (HTTP 403): check the token in ${TOKEN_ENV}" in result.output
    assert "contents API" not in result.output and "not-the-token" not in result.output
