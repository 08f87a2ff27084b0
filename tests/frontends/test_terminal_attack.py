"""The terminal's card of a shell command shows every character that runs, the trailing ones too."""

from __future__ import annotations

import io

import pytest

from ipyagent.context.events import ToolCallRequested
from ipyagent.context.items import ToolCall
from ipyagent.frontends.terminal import TerminalDisplay


@pytest.mark.parametrize("tail,shown", [("\x1c", "␜"), ("\x1f", "␟"), ("\x0c", "␌"), ("\r", "␍"),
                                        ("\x85", "⟨U+0085⟩"), ("\u2028", "⟨U+2028⟩")])
@pytest.mark.parametrize("colour", [False, True])
def test_a_character_at_the_end_of_a_command_is_shown(tail: str, shown: str, colour: bool) -> None:
    out = io.StringIO()
    call = ToolCall("c1", "shell", {"command": "rm -rf ./build" + tail})
    TerminalDisplay(out, colour=colour)(ToolCallRequested(call))
    assert shown in out.getvalue(), repr(out.getvalue())


@pytest.mark.parametrize("name,key", [("shell", "command"), ("python", "code")])
def test_a_code_call_with_more_arguments_shows_them_all(name: str, key: str) -> None:
    # A tool of the user's may take the name (and more parameters): what the model set
    # besides the code is part of what runs, so the card shows every argument.
    from ipyagent.frontends.notebook import card_html, card_markdown

    call = ToolCall("c1", name, {key: "ls", "host": "prod-db-1"})
    out = io.StringIO()
    TerminalDisplay(out)(ToolCallRequested(call))
    for shown in (out.getvalue(), card_html(call, "● waiting"), card_markdown(call, "● waiting")):
        assert "prod-db-1" in shown, shown
