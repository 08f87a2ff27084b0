"""What the settings describe, made on first use: the model client, the kernel, MCP, paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipyagent import Agent
from ipyagent.errors import ConfigError
from ipyagent.models.anthropic import AnthropicModel
from ipyagent.models.demo import DemoModel
from ipyagent.models.openai_chat import OpenAIChatModel
from ipyagent.models.openai_responses import OpenAIResponsesModel
from tests.helpers.scripted_model import ScriptedModel, text


def agent(**kw: object) -> Agent:
    kw.setdefault("python_tool", False)
    return Agent(**kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("api, kind", [("chat", OpenAIChatModel), ("responses", OpenAIResponsesModel),
                                       ("anthropic", AnthropicModel)])
def test_the_client_follows_the_api(api: str, kind: type, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with agent(model="m", api=api, base_url="http://127.0.0.1:9/v1") as a:
        assert type(a.client) is kind
        assert a.client is a.client  # made once


def test_demo_needs_no_endpoint_and_a_cloud_endpoint_needs_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with agent() as a:
        assert isinstance(a.client, DemoModel)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with agent(model="claude", provider="anthropic") as a, pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        a.client  # noqa: B018


def test_a_setting_change_makes_a_new_client_an_injected_one_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with agent(model="m", base_url="http://127.0.0.1:9/v1") as a:
        first = a.client
        a.base_url = "http://127.0.0.1:10/v1"
        second = a.client
        assert second is not first and str(second.base_url).startswith("http://127.0.0.1:10")
    injected = ScriptedModel([text("hi")])
    with agent(client=injected) as a:
        a.model = "other"
        assert a.client is injected


def test_the_endpoint_combines_preset_and_explicit_settings() -> None:
    with agent(provider="ollama") as a:
        assert (a.endpoint.api, a.endpoint.base_url) == ("chat", "http://127.0.0.1:11434/v1")
        a.base_url = "http://127.0.0.1:9999/v1"  # explicit wins over the preset
        assert a.endpoint.base_url == "http://127.0.0.1:9999/v1"


def test_workspace_path(tmp_path: Path) -> None:
    with agent(cwd=str(tmp_path)) as a:
        assert a.workspace_path == tmp_path.resolve()
        a.workspace = str(tmp_path / "sub")
        assert a.workspace_path == (tmp_path / "sub").resolve()


def test_agents_md_path_is_looked_up_per_directory(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "AGENTS.md").write_text("Be careful.")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "AGENTS.md").write_text("Other rules.")
    with agent(cwd=str(tmp_path)) as a:
        assert a.agents_md_path == tmp_path / "AGENTS.md"
        a.cwd = str(tmp_path / "other")
        assert a.agents_md_path == tmp_path / "other" / "AGENTS.md"
        a.agents_md = False
        assert a.agents_md_path is None


def test_mcp_is_made_once_on_first_use(tmp_path: Path) -> None:
    with agent(cwd=str(tmp_path)) as a:
        assert a.mcp is a.mcp


def test_the_kernel_is_one_sibling_started_in_the_cwd(tmp_path: Path) -> None:
    with agent(cwd=str(tmp_path), python_tool=True) as a:
        kernel = a.kernel
        assert a.kernel is kernel
        assert a.kernel.execute("import os; print(os.getcwd())").text.strip() == str(tmp_path)
