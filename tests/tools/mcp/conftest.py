"""Fixtures of the MCP tests: a trust list of each test's own, an IPython shell with an mcp.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.mcp import STDIO


@pytest.fixture(autouse=True)
def trust_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A trust list of the test's own, so your real ~/.ipyagent/trusted-mcp.json is never read."""
    path = tmp_path / "config" / "trusted-mcp.json"
    monkeypatch.setenv("IPYAGENT_MCP_TRUST_FILE", str(path))  # mcp_trust.TRUST_ENV
    return path


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``%load_ext ipyagent`` in an in-process shell, in a directory holding an mcp.json."""
    import io
    from contextlib import redirect_stdout

    from IPython.testing.globalipapp import get_ipython

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": STDIO}))
    ip = get_ipython()
    with redirect_stdout(io.StringIO()):
        ip.run_line_magic("load_ext", "ipyagent")
    yield ip
    ip.run_line_magic("unload_ext", "ipyagent")
    ip.config.pop("Agent", None)
