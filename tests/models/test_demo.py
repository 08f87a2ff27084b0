"""The demo model drives the real loop and the real sibling kernel, offline."""

from __future__ import annotations

import pytest

from ipyagent import Agent, ToolResult, tool
from ipyagent.models.demo import DemoModel, find_expression


@pytest.fixture(scope="module")
def demo_agent():
    with Agent(model="demo", approval="auto") as agent:
        yield agent


def test_compute_error_recover_answer(demo_agent):
    demo_agent.reset()
    result = demo_agent.run("Use Python to compute 2**100")
    assert result.stop_reason == "done"
    assert str(2**100) in result.text and "digits: 31" in result.text
    assert "[demo model]" in result.text
    results = [i for i in demo_agent.context if isinstance(i, ToolResult)]
    assert len(results) == 2
    assert results[0].error and "TypeError" in results[0].output  # a real error, really hit
    assert not results[1].error and results[1].output.strip() == "digits: 31"
    # It ran in a separate process, not here.
    assert demo_agent.kernel.is_alive()
    assert "value" not in globals()


def test_conversation_continues(demo_agent):
    demo_agent.reset()
    demo_agent.run("compute sum(range(10))")
    result = demo_agent.run("now compute 3**5")
    assert result.stop_reason == "done" and "243" in result.text
    assert sum(1 for i in demo_agent.context if getattr(i, "role", "") == "user") == 2


def test_printed_backticks_cannot_close_the_answers_fence(demo_agent):
    demo_agent.reset()
    result = demo_agent.run("compute '`' * 4")
    assert result.stop_reason == "done"
    assert "\n`````text\nvalue = '````'\n" in result.text  # a fence longer than what it holds


def test_a_long_output_is_pointed_at_not_repeated(demo_agent):
    """Issue 17, finding 8: the answer repeated an output the user had just seen."""
    demo_agent.reset()
    result = demo_agent.run("Use Python to compute list(range(300))")
    printed = str(list(range(300)))
    assert printed in demo_agent.context[-2].output  # the model saw it all
    assert printed not in result.text and "shown above under the call" in result.text
    assert "digits: 300" in result.text  # the short lines that matter are still quoted


def test_runs_are_deterministic():
    texts = []
    for _ in range(2):
        with Agent(model="demo") as agent:
            texts.append([i.to_dict() for i in (agent.run("compute 7*6"), agent.context)[1]])
    def strip(items):
        return [{k: v for k, v in d.items() if k not in ("outputs", "meta")} for d in items]
    assert strip(texts[0]) == strip(texts[1])


def test_plans_from_user_tools_without_python():
    @tool
    def square(n: int) -> int:
        """Square a number."""
        return n * n

    with Agent(model="demo", python_tool=False, tools=[square]) as agent:
        result = agent.run("square 12 please")
    assert result.stop_reason == "done" and "144" in result.text


@pytest.mark.parametrize("task,expr", [
    ("Use Python to compute 2**100", "2**100"),
    ("what is `sum(range(10))`?", "sum(range(10))"),
    ("add 3 and 4", None),
    ("hello", None),
])
def test_find_expression(task, expr):
    assert find_expression(task) == expr


def test_the_sibling_starts_in_the_background_at_creation():
    import time

    agent = Agent(model="demo")
    deadline = time.monotonic() + 30
    while agent.kernel_if_started is None and time.monotonic() < deadline:  # nobody asked for it
        time.sleep(0.05)
    kernel = agent.kernel
    assert kernel.execute("1+1").text == "2"
    agent.close()
    assert not kernel.is_alive()


def test_close_right_after_creation_leaves_no_kernel():
    agent = Agent(model="demo")
    agent.close()  # races the background start: either no kernel, or one that is shut down
    import time

    time.sleep(1.0)
    assert agent.kernel_if_started is None or not agent.kernel_if_started.is_alive()


# -- where it says the code ran ----------------------------------------------------------

def _say(tools, task: str, results=()) -> str:
    """What the demo model replies to ``task`` (and the ``results`` of its calls so far)."""
    import asyncio

    from ipyagent.context.items import Message, ToolCall
    from ipyagent.models.base import ModelRequest, TurnComplete

    items: list = [Message("user", task)]
    for n, (name, output) in enumerate(results):
        items += [ToolCall(f"c{n}", name, {}), ToolResult(f"c{n}", output, name=name)]

    async def turn() -> str:
        async for event in DemoModel().stream(ModelRequest("", items, [t.spec() for t in tools])):
            if isinstance(event, TurnComplete):
                return event.turn.text
        raise AssertionError("no turn")

    return asyncio.run(turn())


def _tools(remote: bool):
    from ipyagent.tools.python import python_description, python_tool
    from ipyagent.tools.shell import shell_description, shell_tool

    python, shell = python_tool(None), shell_tool(None)  # type: ignore[arg-type]
    python.description = python_description(remote, False)
    shell.description = shell_description(remote)
    return [python, shell]


def test_it_says_where_the_code_and_the_commands_ran():
    """Python in the sibling kernel, or in the remote one; a command with bash, started by
    the sibling, or on the server: as the tools' descriptions say, never "the sibling" for
    what did not run there."""
    local, remote = _tools(False), _tools(True)
    assert "in the sibling kernel" in _say(local, "compute 2**10")
    assert "The sibling kernel printed:" in _say(local, "compute 2**10", [("python", "value")])
    said = _say(remote, "compute 2**10") + _say(remote, "compute 2**10", [("python", "value")])
    assert "in the kernel on the remote Jupyter server" in said and "The remote kernel printed:" in said
    assert "sibling" not in said
    said = _say(local, "run `ls`") + _say(local, "run `ls`", [("shell", "a.txt")])
    assert said.count("with bash, started by the sibling kernel") == 2 and "Bash printed:" in said
    assert "sibling kernel printed" not in said
    said = _say(remote, "run `ls`") + _say(remote, "run `ls`", [("shell", "a.txt")])
    assert said.count("with bash on the remote Jupyter server") == 2 and "sibling" not in said
    many = "\n".join(f"line {i}" for i in range(40))  # a long output: pointed at, same truth
    assert "Bash printed 40 lines" in _say(local, "run `ls`", [("shell", many)])
    assert "The remote kernel printed 40 lines" in _say(remote, "compute 2**10", [("python", many)])


def test_the_remote_marker_is_what_the_tools_say():
    """The demo may not import the engine: it keeps the phrase, and this keeps them equal."""
    from ipyagent.models.demo import REMOTE_MARKER
    from ipyagent.tools.python import python_description
    from ipyagent.tools.shell import shell_description

    for files in (True, False):
        assert REMOTE_MARKER in python_description(True, files)
        assert REMOTE_MARKER not in python_description(False, files)
    assert REMOTE_MARKER in shell_description(True) and REMOTE_MARKER not in shell_description(False)


def test_the_table_the_meter_and_each_requests_tokens_are_one_count(demo_agent):
    """Issue 30: the context table said ~838 tokens, the footer ~1,713. Now the demo
    model counts a request as ipyagent estimates it, so each request's reported prompt
    tokens are the meter's figure just before it, and the table's title says that figure
    and what it is made of (the run's 'in' is their sum over requests)."""
    from ipyagent.context.events import StepStarted
    from ipyagent.frontends.cellrun import request_meter

    demo_agent.reset()
    before: list[int] = []
    result = demo_agent.run("Use Python to compute 2**100", on_event=lambda e: isinstance(
        e, StepStarted) and before.append(request_meter(demo_agent)[0]))
    assert [s.usage.input for s in result.steps] == before
    assert result.usage.input == sum(before) and result.usage.estimated
    after = request_meter(demo_agent)[0]
    title = demo_agent.context.table()._title()
    assert f"next request ~{after:,} tokens" in title and "(estimated:" in title
    system = demo_agent.context.counter.scaled(demo_agent.context.counter.raw(demo_agent.context.system) + 4)
    specs = after - demo_agent.context.tokens
    assert (f"items ~{demo_agent.context.tokens - system:,} · system prompt ~{system:,} · "
            f"tool specs ~{specs:,}") in title
    assert "tokens in 3 requests, estimated" in result.footer()
