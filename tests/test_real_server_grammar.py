"""One grammar-constrained call against a real llama-cpp-python server with the real 0.5B model.

The server is started the usual way (the model's own chat template); ipyagent probes it
once, finds that it obeys a grammar, and sends the text-mode request constrained by the
grammar made from the tool schemas. Recorded on this task without the grammar, the same
model wrote its answer call without an arguments object (``tests/data/families``); here every
call it writes must read whole, and the python call must run in the real sibling kernel.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ipyagent import Agent
from ipyagent.context.events import Notice
from ipyagent.models.profiles import server
from ipyagent.models.written_calls import FROM_TEXT, PROBLEM
from tests.helpers.llama_server import llama_server

pytestmark = [pytest.mark.real_server, pytest.mark.slow]

QWEN = "qwen2.5-coder-0.5b"
TWO_TO_THE_100 = "1267650600228229401496703205376"


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with llama_server(QWEN, log_dir=tmp_path_factory.mktemp("llama")) as url:
        yield url


def test_a_grammar_constrained_call_is_made_and_parses(qwen: str, tmp_path: Path) -> None:
    server.forget()
    events: list[Any] = []
    agent = Agent(model=QWEN, base_url=qwen, approval="auto", temperature=0, request_max_tokens=120,
                  tool_mode="text", file_tools=False, max_steps=1, cwd=str(tmp_path),
                  workspace=str(tmp_path))
    result = agent.run("What is 2**100? Run it with the python tool.", on_event=events.append)
    choice = agent.profile_choice
    agent.close()
    assert choice is not None and choice.grammar and choice.profile.name == "qwen2.5"
    said = [e.message for e in events if isinstance(e, Notice)]
    assert any(m.startswith("Model profile qwen2.5") for m in said)
    assert any(m.startswith("Calls constrained by a grammar") for m in said)
    first = result.steps[0]
    assert first.stop_reason in (None, "max_steps"), first.error  # one step: the call and its run
    (call,) = first.tool_calls  # an early answer call beside it is dropped by the loop
    assert call.name == "python" and call.meta.get(FROM_TEXT) and PROBLEM not in call.meta
    assert set(call.arguments) == {"code"}
    assert TWO_TO_THE_100 in first.results[0].output  # it ran, in the sibling


def test_a_model_served_as_local_is_known_by_the_real_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> None:
    """``--model_alias local`` names no family; the server's /extras/tokenize still does."""
    import asyncio

    import httpx

    from ipyagent.models.profiles.detect import choose_profile

    server.forget()
    with llama_server(QWEN, log_dir=tmp_path_factory.mktemp("llama"), alias="local") as url:
        async def ask() -> Any:
            async with httpx.AsyncClient() as http:
                return await server.gather(http, url, "local", local=True)
        facts = asyncio.run(ask())
    assert facts.model_ids == ("local",) and facts.gguf is None and not facts.props
    assert facts.special_tokens == ("<|im_start|>", "<tool_call>")
    chosen = choose_profile("auto", "local", facts)
    assert chosen.name == "qwen2.5" and "tokenizer" in chosen.why
    assert facts.calls_come_as_text  # llama-cpp-python: a conversation starts in text mode
