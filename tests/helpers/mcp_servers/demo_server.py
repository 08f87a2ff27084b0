"""A small real MCP server for the tests, written with the SDK's own server API.

``python demo_server.py`` serves over stdio; ``python demo_server.py http PORT`` serves
streamable HTTP on 127.0.0.1:PORT (path /mcp). Works with mcp 1.x (``FastMCP``) and 2.x
(renamed ``MCPServer``).
"""

from __future__ import annotations

import base64
import os
import sys

try:  # mcp >= 2
    from mcp.server.mcpserver import Image
    from mcp.server.mcpserver import MCPServer as Server
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef]
    from mcp.server.fastmcp import Image
    from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[no-redef]

# A 1x1 PNG, so a tool can return an image.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")

server = Server("demo")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper() + "!"


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the given reason."""
    raise ToolError(f"failed on purpose: {reason}")


@server.tool()
def pixel() -> list:
    """A tiny PNG image and a caption."""
    return ["one red pixel", Image(data=PIXEL, format="png")]


@server.tool()
def pid() -> int:
    """The server's process id (tests check restarts with it)."""
    return os.getpid()


@server.tool()
def secret_env(name: str) -> str:
    """The value of an environment variable of the server ('<unset>' when absent)."""
    return os.environ.get(name, "<unset>")


@server.tool()
def crash() -> str:
    """Kill the server process mid-call (tests the death of a server)."""
    print("demo server: crashing on purpose", file=sys.stderr, flush=True)
    os._exit(3)


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "http":
        port = int(sys.argv[2])
        try:  # mcp >= 2: host and port are run() options
            server.run("streamable-http", host="127.0.0.1", port=port)
        except TypeError:  # mcp 1.x: they are settings
            server.settings.host, server.settings.port = "127.0.0.1", port
            server.run("streamable-http")
    else:
        server.run()


if __name__ == "__main__":
    main()
