"""A reply that shows the Python the task asks to run, instead of calling the tool: its block
is the call, approved like any other and run in the real sibling kernel (``engine/verify``).
Against a real HTTP server on 127.0.0.1 playing the model."""

from __future__ import annotations

from typing import Any

import pytest

from ipyagent import Agent, Message, ToolCall, ToolResult
from ipyagent.context.decisions import Decision
from ipyagent.context.events import Notice
from ipyagent.context.evidence import asks_to_run_code
from ipyagent.engine.verify import FROM_BLOCK
from ipyagent.models.written_calls import shown_code
from tests.helpers.scripted_server import ScriptedServer, reply_text

TASK = "Use Python to add up the numbers 3, 4 and 7, doubled, and reply with the result."
CODE = "rows = [3, 4, 7]\nprint(sum(rows) * 2)"
SHOWN = (f"To do this, we add them and double the sum:\n\n```python\n{CODE}\n```\n\n"
         "When you run this code, it will print the result.")


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory):
    with Agent(model="m", approval="auto", file_tools=False, max_retries=0, tool_mode="text",
               cwd=str(tmp_path_factory.mktemp("shown"))) as agent:
        yield agent


def run(agent: Agent, replies: list[Any], task: str = TASK, **settings: Any) -> tuple[Any, list[str], list[dict]]:
    events: list[Any] = []
    old = {name: getattr(agent, name) for name in settings}
    with ScriptedServer(replies) as srv:
        agent.reset()
        agent.base_url = srv.base_url  # 127.0.0.1: answers are checked ("auto")
        for name, value in settings.items():
            setattr(agent, name, value)
        try:
            result = agent.run(task, on_event=events.append)
        finally:
            for name, value in old.items():
                setattr(agent, name, value)
        bodies = srv.bodies
    said = [e.message for e in events if isinstance(e, Notice)]
    return result, said, bodies


def test_the_block_a_reply_shows_runs_as_the_call_and_goes_back_as_written(agent):
    result, said, bodies = run(agent, [reply_text(SHOWN), reply_text("28")])
    assert result.stop_reason == "done" and result.text == "28"
    items = list(agent.context)
    (call,) = [i for i in items if isinstance(i, ToolCall)]
    assert (call.name, call.arguments) == ("python", {"code": CODE})
    assert call.meta[FROM_BLOCK] and call.meta["from_text"]
    (res,) = [i for i in items if isinstance(i, ToolResult)]
    assert res.output.strip() == "28" and not res.error  # ran in the sibling kernel
    assert res.meta["decision"]["by"] == "policy"  # approved like any call
    # The reply's prose stays the assistant's text, the block is the call.
    prose = [i for i in items if isinstance(i, Message) and i.role == "assistant"][0]
    assert prose.content.startswith("To do this") and "```" not in prose.content
    assert any("showed Python code instead of running it" in s for s in said)
    # The model reads its own reply back exactly as it wrote it, then the result.
    assert {"role": "assistant", "content": SHOWN} in bodies[1]["messages"]
    assert "28" in bodies[1]["messages"][-1]["content"]


def denier(reason: str) -> tuple[list[ToolCall], Any]:
    """An approval hook that denies every call by a click (and the calls it was asked)."""
    asked: list[ToolCall] = []

    async def deny(call: ToolCall) -> Decision:
        asked.append(call)
        return Decision("deny", reason=reason, by="click")

    return asked, deny


def test_a_denied_block_runs_nothing(agent):
    asked, deny = denier("not now")
    marker = "import pathlib; pathlib.Path('ran.txt').write_text('x')"
    shown = f"```python\n{marker}\n```"
    result, _, _ = run(agent, [reply_text(shown), reply_text("I did not run it.")],
                       approval="ask", approval_hook=deny)
    assert [c.arguments["code"] for c in asked] == [marker]
    (res,) = [i for i in agent.context if isinstance(i, ToolResult)]
    assert res.error and res.meta["denied"] and result.stop_reason == "done", result
    assert agent.kernel.execute("import os; os.path.exists('ran.txt')").text == "False"


@pytest.mark.parametrize("case", ["no python asked", "two blocks", "answers unchecked", "not compiling"])
def test_a_shown_block_stays_text(agent, case):
    reply, task, settings = SHOWN, TASK, {}
    if case == "no python asked":
        task = "How would I add up 3, 4 and 7 and double it in pandas? Show me the code."
    elif case == "two blocks":
        reply = SHOWN + "\n\nOr:\n\n```python\nprint(2 * (3 + 4 + 7))\n```"
    elif case == "answers unchecked":
        settings = {"verify_answers": False}
    else:
        reply = "```python\nfor x in rows print(x)\n```"
    result, said, _ = run(agent, [reply_text(reply), reply_text("28"), reply_text("28")], task,
                          **settings)
    assert not [i for i in agent.context if isinstance(i, ToolCall) and i.meta.get(FROM_BLOCK)]
    assert not any("showed Python code" in s for s in said)


def test_after_code_ran_cleanly_a_shown_block_is_an_answer(agent):
    first = reply_text('```json\n{"name": "python", "arguments": {"code": "print(28)"}}\n```')
    answer = "The result is 28. You could also write:\n\n```python\nprint(2 * (3 + 4 + 7))\n```"
    result, said, _ = run(agent, [first, reply_text(answer)])
    assert result.stop_reason == "done" and result.text.startswith("The result is 28")
    assert len([i for i in agent.context if isinstance(i, ToolCall)]) == 1


def test_after_a_failed_call_the_corrected_block_runs(agent):
    first = reply_text('```json\n{"name": "python", "arguments": {"code": "print(total)"}}\n```')
    fixed = ("The error says `total` is not defined. Here is the corrected code:\n\n"
             f"```python\n{CODE}\n```")
    result, _, _ = run(agent, [first, reply_text(fixed), reply_text("28")])
    assert result.text == "28"
    outputs = [i.output.strip() for i in agent.context if isinstance(i, ToolResult)]
    assert outputs[-1] == "28" and "NameError" in outputs[0]


@pytest.mark.parametrize("text, code", [
    ("```python\nx = 1\nprint(x)\n```", "x = 1\nprint(x)"),
    ("Run:\n```py\nprint(1)\n```\nDone.", "print(1)"),
    ("```python\nprint(1)", None),  # not closed: cut off, not shown
    ("```\nprint(1)\n```", None),  # no language: it could be anything
    ("```python\n\n```", None),
    ("```python\nprint(1)\n```\n```python\nprint(2)\n```", None),
    ("inline ```python print(1)``` is not a block", None),
])
def test_shown_code(text: str, code: str | None) -> None:
    found = shown_code(text)
    assert (found[1] if found else None) == code


# -- the careless user's and the attacker's angle (found by a review of the first version) ----
def test_a_task_to_write_a_script_does_not_run_it(agent):
    """"Write a Python script that deletes …" asks for code to read: the block is the answer,
    under the default approval too, and no check asks the model to run it."""
    agent.reset()
    agent.kernel.execute("open('old.tmp', 'w').write('keep me')")
    script = "import pathlib\nfor p in pathlib.Path('.').glob('*.tmp'):\n    p.unlink()"
    reply = f"Here is the script:\n\n```python\n{script}\n```\n\nRun it in the folder to clean it."
    result, _, _ = run(agent, [reply_text(reply), reply_text("Done.")],
                       "Write a Python script that deletes every .tmp file in the current folder.")
    assert agent.kernel.execute("import os; os.path.exists('old.tmp')").text == "True"
    assert not [i for i in agent.context if isinstance(i, ToolCall)]
    assert "p.unlink()" in result.text and len(result.steps) == 1


@pytest.mark.parametrize("task", [
    "How do I reverse a list in Python?",
    "Write a Python function that tells whether a number is prime.",
    "Write code to parse an ISO date; I will run it myself.",
])
def test_a_request_for_code_to_read_is_not_a_request_to_run_python(task: str) -> None:
    assert not asks_to_run_code(task)


@pytest.mark.parametrize("task, runs", [
    ("Write a Python script that counts the lines of app.log and run it.", True),
    ("Write a function that checks primes, then execute it on 97.", True),
    ("Write code to parse an ISO date and run it myself later.", False),
    ("Write a Python script; I will run it.", False),
    ("Use Python to count the lines of app.log.", True),
    # Found by a review of the first version: someone else runs it, or later, or elsewhere.
    ("Draft a script for the migration; I'll review and then run it.", False),
    ("Write a bash script that starts the server and run it in the background.", False),
    ("Write a Python script that backs up my notes and run it daily.", False),
    ("Write a Python script I can copy and run it on my laptop.", False),
    ("Give me the code to train the model and run it on the GPU.", False),
    ("Write a script that sums data.csv and run it on data.csv.", True),
])
def test_code_to_read_and_run_is_a_request_to_run_python(task: str, runs: bool) -> None:
    assert asks_to_run_code(task) is runs


def test_after_the_person_denied_a_call_shown_code_is_not_asked_again(agent):
    asked, deny = denier("do not run it, just show me the code")
    block = "Here is the code:\n\n```python\nprint(sum(range(10)))\n```"
    first = reply_text('```json\n{"name": "python", "arguments": {"code": "print(sum(range(10)))"}}\n```')
    result, _, _ = run(agent, [first, reply_text(block), reply_text(block)],
                       "Use Python to add up 0..9.", approval="ask", approval_hook=deny)
    assert len(asked) == 1 and "```python" in result.text


def test_under_approval_deny_a_shown_block_is_the_answer(agent):
    reply = "```python\nprint(2 * (3 + 4 + 7))\n```\n\nIt prints 28."
    result, _, _ = run(agent, [reply_text(reply), reply_text("28")], approval="deny")
    assert result.stop_reason == "done" and "```python" in result.text


def test_a_huge_reply_is_not_scanned() -> None:
    """A small model stuck repeating a fence up to its output limit: read in linear time."""
    import time

    started = time.perf_counter()
    assert shown_code("```python\n" * 10_001) is None and shown_code("```python\n" * 9_000) is None
    assert time.perf_counter() - started < 1.0
