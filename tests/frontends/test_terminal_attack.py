"""The terminal's card of a shell command shows every character that runs, the trailing ones too."""

from __future__ import annotations

import io

import pytest

from ipyagent.events import ToolCallRequested
from ipyagent.frontends.terminal import TerminalDisplay
from ipyagent.items import ToolCall


@pytest.mark.parametrize("tail,shown", [("\x1c", "␜"), ("\x1f", "␟"), ("\x0c", "␌"), ("\r", "␍"),
                                        ("\x85", "⟨U+0085⟩"), ("\u2028", "⟨U+2028⟩")])
@pytest.mark.parametrize("colour", [False, True])
def test_a_character_at_the_end_of_a_command_is_shown(tail: str, shown: str, colour: bool) -> None:
    out = io.StringIO()
    call = ToolCall("c1", "shell", {"command": "rm -rf ./build" + tail})
    TerminalDisplay(out, colour=colour)(ToolCallRequested(call))
    assert shown in out.getvalue(), repr(out.getvalue())
