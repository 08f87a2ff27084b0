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
from typing import Any

import pytest

from ipyagent import Agent
from ipyagent.context.items import Message, ToolCall, ToolResult
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


@pytest.fixture(scope="module")
def qwen_chatml_function_calling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with llama_server(QWEN, chat_format="chatml-function-calling",
                      log_dir=tmp_path_factory.mktemp("llama")) as url:
        yield url


TWO_TO_THE_100 = "1267650600228229401496703205376"


def _calls(result: Any) -> list[ToolCall]:
    return [c for s in result.steps for c in s.tool_calls]


def test_with_the_model_s_own_template_a_call_it_writes_runs_and_the_answer_follows(
        qwen_own_template: str, tmp_path: Path) -> None:
    """The usual start (no --chat_format): the server parses no calls, so ipyagent's defaults
    send the tools as text from the first request (one system prompt for the whole
    conversation, calls constrained by a grammar); the model writes a call, the sibling runs
    it, the result goes back, the answer follows."""
    events: list[Any] = []
    agent = _agent(qwen_own_template, cwd=str(tmp_path), workspace=str(tmp_path))  # the defaults
    result = agent.run("Use Python to compute 2**100", on_event=events.append)
    state = repr(agent)
    agent.close()
    assert result.stop_reason == "done", result.steps[-1].error
    (call, *_) = _calls(result)
    assert call.name == "python" and call.meta.get("from_text") is True
    assert TWO_TO_THE_100 in result.steps[0].results[0].output  # computed by the sibling
    assert TWO_TO_THE_100 in result.text.replace(",", "")
    assert "tool_mode=auto(text)" in state  # text from the start, and said so once
    said = [getattr(e, "message", "") for e in events]
    assert sum(m.startswith("Tool calls as text from the start: llama-cpp-python's") for m in said) == 1
    assert not any("Tool calls as text from now on" in m for m in said)


def test_a_file_task_writes_the_file_and_answers_its_contents(qwen_own_template: str, tmp_path: Path) -> None:
    """The model's own write call lands in the user's folder and the answer carries what it
    wrote. Whether it also reads the file back is the model's choice: at 0.5B with the tools
    as text from the first request it answers from what it wrote (measured, greedy), where
    the native first request used to get a second call."""
    agent = _agent(qwen_own_template, cwd=str(tmp_path), workspace=str(tmp_path))
    result = agent.run("Use Python to write the text 'hello from the agent' to a file named "
                       "note.txt, then read the file back and reply with its contents.")
    agent.close()
    calls = _calls(result)
    assert calls and all(c.meta.get("from_text") for c in calls), calls  # calls the model wrote
    assert (tmp_path / "note.txt").read_text().strip() == "hello from the agent"
    assert result.stop_reason == "done", result.steps[-1].error
    assert "hello from the agent" in result.text


def test_chatml_function_calling_with_tool_choice_auto_reaches_the_answer(
        qwen_chatml_function_calling: str, tmp_path: Path) -> None:
    """That chat format cannot stream a call natively (an empty body, or only
    ``functions.python:``) and HTML-escapes what it renders: auto goes to text mode and the
    escaped call the model then writes is read."""
    agent = _agent(qwen_chatml_function_calling, cwd=str(tmp_path), file_tools=False,
                   tool_choice="auto")
    result = agent.run("Use Python to compute 2**100")
    agent.close()
    assert result.stop_reason == "done", result.steps[-1].error
    assert any(c.name == "python" and TWO_TO_THE_100 in r.output
               for s in result.steps for c, r in zip(s.tool_calls, s.results))
    assert TWO_TO_THE_100 in result.text.replace(",", "")


def test_the_smallest_model_answers_a_plain_question(tmp_path_factory: pytest.TempPathFactory) -> None:
    with llama_server("smollm2-135m", log_dir=tmp_path_factory.mktemp("llama")) as url:
        agent = _agent(url, model="smollm2-135m", python_tool=False, file_tools=False)
        result = agent.run("Say hello.")
        agent.close()
    assert result.stop_reason == "done", result.steps[-1].error
    assert result.text.strip()


FILE_NOT_FOUND = (
    "---------------------------------------------------------------------------\n"
    "FileNotFoundError                         Traceback (most recent call last)\n"
    "Cell In[1], line 2\n      1 import pandas as pd\n----> 2 df = pd.read_csv('sales.csv')\n"
    "FileNotFoundError: [Errno 2] No such file or directory: 'sales.csv'")


def test_an_answer_after_a_failed_call_gets_one_look_again(
        qwen_own_template: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Look before answering (issue 33), on the real 0.5B model. Its first call read a file
    by the wrong name and failed (recorded into the context, so every run starts from the
    same place; no tools are offered after it, which keeps the prompt to ~300 tokens).
    Measured, greedy, twice alike: the model answers by imagining the call's result with a
    number in it (a 404) that no output shows. The check is sent once, as ipyagent's
    labelled note, and the run ends within its limits whatever the model says next (at 0.5B,
    the same reply again)."""
    from ipyagent.context.evidence import CHECK_KEY
    from ipyagent.engine.verify import CHECK_LEAD

    log = _log_of(qwen_own_template, tmp_path_factory.getbasetemp())
    before = len(_posts(log))
    agent = _agent(qwen_own_template, python_tool=False, file_tools=False, skills_enabled=False,
                   request_max_tokens=100, max_steps=3)  # verify_answers: "auto", a local server
    task = "Use Python to read sales.csv and reply with the total of its amount column."
    call = ToolCall("call_1", "python", {"code": "import pandas as pd\ndf = pd.read_csv('sales.csv')\n"
                                                 "print(df['amount'].sum())"})
    for item in (Message("user", task), call,
                 ToolResult(call.id, FILE_NOT_FOUND, error=True, name="python")):
        agent.context.append(item)
    events: list[Any] = []
    result = agent.run(on_event=events.append)
    agent.close()
    items = list(agent.context)
    checks = [i for i in items if isinstance(i, Message) and CHECK_KEY in i.meta]
    assert len(checks) == 1, items
    assert checks[0].role == "user" and checks[0].content.startswith(CHECK_LEAD)
    assert sum(getattr(e, "message", "").startswith("checked the answer:") for e in events) == 1
    # The model was asked again after the check, and the run ended within its limits.
    at = items.index(checks[0])
    assert [i.role for i in items[at + 1:] if isinstance(i, Message)] == ["assistant"]
    assert result.stop_reason == "done", result.steps[-1].error
    assert len(result.steps) == 2 and _posts(log)[before:] == ["200", "200"]


# -- the prompt cache: each request appends to the previous one, tokens and all ----------
HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")


def test_each_request_reuses_the_whole_previous_prompt_from_the_server_s_cache(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """A scripted model in front of the real server (it plays the turns, the server counts
    the prompts): with the model's own chat template, each request's prompt starts with the
    whole previous prompt, so the server evaluates only the newest turn and its result."""
    import httpx

    from ipyagent import tool
    from tests.helpers.scripted_server import Completion, ScriptedServer

    @tool
    def item(n: int) -> str:
        """Read item n."""
        return f"item {n}: " + "a line of the item's text\n" * 8

    logs = tmp_path_factory.mktemp("llama")
    seen: list[tuple[int, int]] = []  # (prompt tokens, of them reused from the cache)
    with llama_server("smollm2-135m", log_dir=logs, verbose=True) as url:
        (log,) = logs.glob("llama-*.log")
        real = httpx.Client(timeout=300)

        def forward(body: dict[str, Any]) -> Completion:
            body = {**body, "stream": False, "max_tokens": 1, "temperature": 0}
            body.pop("stream_options", None)
            start = log.stat().st_size
            reply = real.post(f"{url}/chat/completions", json=body)
            reply.raise_for_status()
            prompt = int(reply.json()["usage"]["prompt_tokens"])
            with log.open("rb") as f:
                f.seek(start)
                hit = HIT.search(f.read().decode("utf-8", "replace"))
            seen.append((prompt, int(hit.group(1)) if hit else 0))
            n = len(seen)
            return Completion(text=f"Reading item {n}.", tool_calls=[("item", {"n": n})],
                              usage={"prompt_tokens": prompt, "completion_tokens": 8})

        with ScriptedServer(fallback=forward) as model:
            agent = Agent(model="smollm2-135m", base_url=model.base_url, tools=[item],
                          python_tool=False, file_tools=False, approval="auto", max_steps=4,
                          circuit_breaker=0, context_window=4096, request_max_tokens=256)
            result = agent.run("read the items")
            agent.close()
        real.close()
    # Four steps, then the request that asks for the answer at the limit (answer_at_limit):
    # it appends ipyagent's word to the fourth's prompt, so it too reuses the whole of it.
    assert result.stop_reason == "max_steps" and len(seen) == 5, result
    for (before, _), (prompt, reused) in zip(seen, seen[1:]):
        assert prompt > before and reused >= before, seen  # the whole previous prompt, reused
