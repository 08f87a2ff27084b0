"""Final replies that end ``done`` but need a word: empty, filtered, a tool call in writing."""

from __future__ import annotations

import pytest

from ipyagent import Agent
from ipyagent.context.events import Notice
from ipyagent.models.base import Turn
from ipyagent.models.reply_checks import final_reply_notice
from tests.helpers.scripted_model import ScriptedModel

TOOLS = {"python", "read_file"}


@pytest.mark.parametrize("text,finish,expected", [
    ("", "stop", "empty reply"),
    ("  \n", None, "empty reply"),
    ("Sorry.", "content_filter", "content filter"),
    ('<tool_call>\n{"name": "python", "arguments": {"code": "1+1"}}\n</tool_call>', "stop", "'python' as text"),
    ('{"name": "python", "arguments": {"code": "1+1"}}', "stop", "'python' as text"),
    ('```json\n{"name": "read_file", "parameters": {"path": "a"}}\n```', "stop", "'read_file' as text"),
    ("[TOOL_CALLS] python", "stop", "a tool call as text"),
])
def test_suspicious_replies_get_one_line(text: str, finish: str | None, expected: str) -> None:
    notice = final_reply_notice(text, finish, False, TOOLS)
    assert notice is not None and expected in notice and "\n" not in notice


@pytest.mark.parametrize("text", [
    "The answer is 42.",
    '{"name": "Ada", "arguments": 3}',  # JSON, but no such tool
    '{"result": 1}',
    "Wrap each call in <tool_call> tags.",  # talks about the tag, is not one
])
def test_ordinary_replies_get_none(text: str) -> None:
    assert final_reply_notice(text, "stop", False, TOOLS) is None


def test_the_run_still_ends_done_and_the_listener_hears_it() -> None:
    model = ScriptedModel([Turn(text='<tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call>',
                                finish_reason="stop")])
    heard: list[Notice] = []
    with Agent(client=model, python_tool=False) as agent:
        result = agent.run("compute", on_event=lambda e: heard.append(e) if isinstance(e, Notice) else None)
    assert result.stop_reason == "done"
    # python is not offered here (python_tool=False): the call was not recovered, and the
    # line says why nothing ran.
    assert [n.level for n in heard] == ["warning"] and "'python'" in heard[0].message
    assert "nothing ran" in heard[0].message


def test_a_call_of_a_tool_that_does_not_exist_says_nothing_ran() -> None:
    # Measured on Qwen2.5-Coder-0.5B: the call named after the task, arguments python's.
    text = ('```json\n{\n  "name": "list_primes_below_30",\n  "arguments": {\n    "code": """\n'
            'print([p for p in range(2, 30) if all(p % d for d in range(2, p))])\n"""\n  }\n}\n```')
    notice = final_reply_notice(text, "stop", False, TOOLS)
    assert notice is not None and "'list_primes_below_30'" in notice and "nothing ran" in notice
    assert "python" in notice and "\n" not in notice
