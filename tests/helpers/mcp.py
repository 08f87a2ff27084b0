"""The demo MCP server the MCP tests start, and the mark for tests that need the SDK."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ipyagent.tools.mcp.client import sdk_available

SERVER = str(Path(__file__).parent / "mcp_servers" / "demo_server.py")
STDIO = {"demo": {"command": sys.executable, "args": [SERVER]}}
needs_sdk = pytest.mark.skipif(not sdk_available(), reason="the mcp extra is not installed")
