"""Recorded runs the transcript, replay and cache tests share (real sibling kernels)."""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

from ipyagent import Agent, Decision
from ipyagent.context.items import ToolCall
from tests.helpers.scripted_model import ScriptedModel, calls, text
from tests.helpers.tools import add


def tiny_png(width: int = 3, height: int = 2) -> bytes:
    """A valid RGB PNG, built by hand (no imaging library needed)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


PNG_B64 = base64.b64encode(tiny_png()).decode()

PLOT = (f"import base64, datetime\nfrom IPython.display import Image, display\n"
        f"display(Image(data=base64.b64decode({PNG_B64!r})))\n"
        "print('computed at', datetime.datetime.now())\nx = 21")
DOUBLE = "x * 2"
DELETE = "open('DENIED_CALL_RAN', 'w').write('oops')"
PROPOSED = "print(x + 1)"
EDITED = "print(x + 100)"


def rich_replies() -> list[Any]:
    """Five turns: an image and a timestamp, a result plus another tool, a denial, an edit."""
    return [
        calls(("python", {"code": PLOT}), text="I'll draw it.", prompt_tokens=10, completion_tokens=5),
        calls(("python", {"code": DOUBLE}), ("add", {"a": 1, "b": 2})),
        calls(("python", {"code": DELETE})),
        calls(("python", {"code": PROPOSED})),
        text("All done: x is 21."),
    ]


def rich_hook(call: ToolCall) -> Decision:
    """Deny the deleting call with a reason, edit the proposed one, approve the rest."""
    code = call.arguments.get("code", "")
    if code == DELETE:
        return Decision("deny", reason="no writing files", by="user")
    if code == PROPOSED:
        return Decision("edit", arguments={"code": EDITED}, by="user")
    return Decision("approve", by="user")


def rich_agent(cwd: str, **kw: Any) -> Agent:
    """An agent that runs the rich script against a real sibling kernel."""
    kw.setdefault("skills_enabled", False)  # the tools it records are add and python
    return Agent(client=ScriptedModel(rich_replies()), tools=[add], approval="ask", file_tools=False,
                 approval_hook=rich_hook, cwd=cwd, **kw)
