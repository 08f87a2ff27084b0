"""A file preview reaches a real llama-cpp-python server (0.5B, own chat template) in the
first request, and the server takes it. What is asserted is what was sent and accepted, not
what a 0.5B model makes of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from ipyagent import Agent
from tests.helpers.llama_server import llama_server

pytestmark = [pytest.mark.real_server, pytest.mark.slow]

QWEN = "qwen2.5-coder-0.5b"


def test_the_preview_is_in_the_first_request_to_a_real_server(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    (tmp_path / "sales.csv").write_text("region;amount\nnorth;10\nsouth;12\neast;7\n")
    sent: list[dict[str, Any]] = []
    answered: list[int] = []

    async def on_request(request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            sent.append(json.loads(request.content))

    async def on_response(response: httpx.Response) -> None:
        if response.request.url.path.endswith("/chat/completions"):
            answered.append(response.status_code)

    client = httpx.AsyncClient(event_hooks={"request": [on_request], "response": [on_response]})
    with llama_server(QWEN, log_dir=tmp_path_factory.mktemp("llama")) as url, \
            Agent(model=QWEN, base_url=url, http_client=client, workspace=str(tmp_path),
                  approval="auto", temperature=0, request_max_tokens=16, python_tool=False,
                  file_tools=False, shell_tool="off", start_kernel=False, skills_enabled=False,
                  agents_md=False, system_prompt="Answer briefly.") as agent:
        # A short prompt: on a 2-core CPU the server reads ~35 tokens/s.
        result = agent.run("What is the total of the amount column in sales.csv? "
                           "Answer with one number.")
    assert result.stop_reason == "done", result.steps[-1].error
    assert answered[0] == 200 and result.usage.input > 0
    users = [m["content"] for m in sent[0]["messages"] if m["role"] == "user"]
    assert users[-1].startswith("What is the total of the amount column in sales.csv?")
    preview = users[-2]
    assert preview.startswith("[ipyagent: previewed sales.csv (3 rows, separator ';', columns "
                              "region:str, amount:int)]")
    assert "region;amount\nnorth;10\nsouth;12\neast;7" in preview
