"""Full loops against a real llama-cpp-python server with real small models, on 127.0.0.1.

The server is started the way users start it (``python -m llama_cpp.server --model X.gguf``,
the model's own chat template; and ``--chat_format chatml-function-calling``), the python
tool runs in the real sibling kernel, approval is ``auto``. Sampling is greedy
(temperature 0), so a model's reply is the same on every run of the same build; what is
asserted is what the loop must do with it (a call run, its result accepted, an answer),
plus the facts only a correct run can produce (2**100's digits).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipyagent import Agent
from ipyagent.items import Message, ToolCall, ToolResult
from tests.helpers.llama_server import llama_server

pytestmark = [pytest.mark.real_server, pytest.mark.slow]

QWEN = "qwen2.5-coder-0.5b"


@pytest.fixture(scope="module")
def qwen_own_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with llama_server(QWEN, log_dir=tmp_path_factory.mktemp("llama")) as url:
        yield url


def _agent(base_url: str, model: str = QWEN, **settings: object) -> Agent:
    settings = {"approval": "auto", "temperature": 0, "request_max_tokens": 300, **settings}
    return Agent(model=model, base_url=base_url, **settings)  # type: ignore[arg-type]


def _posts(log: Path) -> list[str]:
    """Status codes of the chat requests the server logged."""
    return re.findall(r'"POST /v1/chat/completions HTTP/1.1" (\d{3})', log.read_text(errors="replace"))


def _log_of(base_url: str, tmp_root: Path) -> Path:
    port = base_url.rsplit(":", 1)[1].split("/")[0]
    (log,) = tmp_root.glob(f"**/llama-*-{port}.log")
    return log


def test_a_plain_question_gets_a_plain_answer(qwen_own_template: str) -> None:
    agent = _agent(qwen_own_template, python_tool=False, file_tools=False)
    result = agent.run("What is the capital of France? Answer with one word.")
    agent.close()
    assert result.stop_reason == "done", result.steps[-1].error
    assert len(result.steps) == 1 and "paris" in result.steps[0].text.lower()


def test_a_history_with_a_tool_call_is_accepted(qwen_own_template: str,
                                                tmp_path_factory: pytest.TempPathFactory) -> None:
    """An assistant message that made a tool call goes back with string content: the
    server's request model refused ``null`` with a 500 on every second request."""
    log = _log_of(qwen_own_template, tmp_path_factory.getbasetemp())
    before = len(_posts(log))
    agent = _agent(qwen_own_template, python_tool=False, file_tools=False)
    call = ToolCall("call_1", "python", {"code": "2**100"})
    for item in (Message("user", "Use Python to compute 2**100"), call,
                 ToolResult(call.id, "1267650600228229401496703205376", name="python")):
        agent.context.append(item)
    result = agent.run("What was the result? Quote the number exactly.")
    agent.close()
    assert result.stop_reason == "done", result.steps[-1].error
    assert _posts(log)[before:] == ["200"]
    assert "1267650600228229401496703205376" in result.steps[-1].text


def test_a_request_the_server_refuses_as_invalid_is_not_retried(
        qwen_own_template: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    log = _log_of(qwen_own_template, tmp_path_factory.getbasetemp())
    before = len(_posts(log))
    agent = _agent(qwen_own_template, python_tool=False, file_tools=False,
                   extra_body={"max_tokens": "lots"})
    result = agent.run("hi")
    agent.close()
    assert result.stop_reason == "error"
    error = result.steps[-1].error or ""
    assert "max_tokens: Input should be a valid integer" in error and "\n" not in error
    assert _posts(log)[before:] == ["500"]  # once: the same request is refused the same way
