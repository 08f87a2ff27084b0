"""Provider presets, the "explicit settings win" rule, and one task over all three APIs."""

from __future__ import annotations

import pytest
from traitlets import TraitError

from ipyagent import Agent
from ipyagent.errors import ConfigError
from ipyagent.models.anthropic import AnthropicModel
from ipyagent.models.openai_chat import OpenAIChatModel
from ipyagent.models.openai_responses import OpenAIResponsesModel
from ipyagent.models.providers import PRESETS, check_key, provider_table, resolve
from tests.helpers.scripted_apis import any_api_reply
from tests.helpers.scripted_server import ScriptedServer
from tests.helpers.tools import add

CLOUD_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GROQ_API_KEY", "OPENROUTER_API_KEY")


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (*CLOUD_KEYS, "LLAMA_API_KEY", "VLLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_preset_table() -> None:
    table = {p.name: (p.base_url, p.api, p.key_env, p.key_required) for p in PRESETS.values()}
    assert table == {
        "openai": ("https://api.openai.com/v1", "responses", "OPENAI_API_KEY", True),
        "anthropic": ("https://api.anthropic.com/v1", "anthropic", "ANTHROPIC_API_KEY", True),
        "ollama": ("http://127.0.0.1:11434/v1", "chat", "", False),
        "llamacpp": ("http://127.0.0.1:8080/v1", "chat", "LLAMA_API_KEY", False),
        "llama-cpp-python": ("http://127.0.0.1:8000/v1", "chat", "", False),
        "vllm": ("http://127.0.0.1:8000/v1", "chat", "VLLM_API_KEY", False),
        "lmstudio": ("http://127.0.0.1:1234/v1", "chat", "", False),
        "groq": ("https://api.groq.com/openai/v1", "chat", "GROQ_API_KEY", True),
        "openrouter": ("https://openrouter.ai/api/v1", "chat", "OPENROUTER_API_KEY", True),
    }
    markdown = provider_table()
    assert all(f"| `{name}` |" in markdown for name in PRESETS)


def test_explicit_settings_win() -> None:
    assert resolve() == resolve(None, api=None, base_url="", key_env=None)
    default = resolve()
    assert (default.api, default.base_url, default.key_env, default.key_required) == (
        "chat", "https://api.openai.com/v1", "OPENAI_API_KEY", True)
    e = resolve("groq", api="responses", base_url="http://proxy.local:9000/v1/", key_env="MY_KEY")
    assert (e.api, e.base_url, e.key_env) == ("responses", "http://proxy.local:9000/v1", "MY_KEY")
    assert not e.key_required  # an explicit URL needs a key only on a known cloud host
    assert resolve(base_url="https://openrouter.ai/api/v1").key_required  # however it was given
    assert resolve("ollama").key_required is False and resolve("ollama").key_env == ""
    assert resolve("openai", api="chat").api == "chat"
    with pytest.raises(ConfigError, match="unknown provider 'nope'; one of: openai"):
        resolve("nope")


def test_missing_cloud_key_is_one_line_naming_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        check_key(resolve("openrouter"), None)
    text = str(info.value)
    assert text.startswith("OPENROUTER_API_KEY is not set: OpenRouter needs an API key") and "\n" not in text
    with pytest.raises(ConfigError, match="api_key_env is empty"):
        check_key(resolve("anthropic", key_env=""), None)
    check_key(resolve("vllm"), None)  # local: fine without
    check_key(resolve("groq"), "gsk-x")


def test_agent_traits_pick_the_client(no_keys: pytest.MonkeyPatch) -> None:
    agent = Agent(model="qwen2.5:7b", provider="ollama", python_tool=False)
    client = agent.client  # no key needed for a local server
    assert isinstance(client, OpenAIChatModel) and client.base_url == "http://127.0.0.1:11434/v1"
    assert client.key_env is None  # no variable is read: no key goes out

    no_keys.setenv("ANTHROPIC_API_KEY", "sk-ant-x")
    agent.provider = "anthropic"  # a changed setting rebuilds the client
    assert isinstance(agent.client, AnthropicModel) and agent.client.base_url == "https://api.anthropic.com/v1"

    no_keys.setenv("OPENAI_API_KEY", "sk-x")
    agent.provider = "openai"
    assert isinstance(agent.client, OpenAIResponsesModel)
    agent.api = "chat"
    assert isinstance(agent.client, OpenAIChatModel) and agent.client.base_url == "https://api.openai.com/v1"

    assert Agent.class_traits()["provider"].help and Agent.class_traits()["api"].help
    with pytest.raises(TraitError):
        Agent(provider="ollamma", python_tool=False)


def test_preset_does_not_override_explicit_settings(no_keys: pytest.MonkeyPatch) -> None:
    no_keys.setenv("MY_GROQ_KEY", "gsk-mine")
    agent = Agent(model="m", provider="groq", api_key_env="MY_GROQ_KEY",
                  base_url="https://api.groq.com/openai/v1", api="chat", python_tool=False)
    assert agent.endpoint.key_env == "MY_GROQ_KEY" and agent.client.key_env == "MY_GROQ_KEY"


def test_cloud_provider_without_key_ends_the_run_with_one_line(no_keys: pytest.MonkeyPatch) -> None:
    agent = Agent(model="llama-3.3-70b-versatile", provider="groq", python_tool=False)
    result = agent.run("hello")
    assert result.stop_reason == "error"
    assert result.error and result.error.startswith("GROQ_API_KEY is not set") and "\n" not in result.error
    assert [type(i).__name__ for i in agent.context] == ["Message"]  # nothing half-appended


def test_local_preset_sends_no_key_even_when_an_openai_key_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default key variable must not leak to a local (or any other preset's) server."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    with ScriptedServer([any_api_reply("hi there")]) as srv:
        agent = Agent(model="qwen2.5:7b", provider="ollama", base_url=srv.base_url, python_tool=False)
        assert agent.run("hi").text == "hi there"
    assert "authorization" not in srv.requests[0].headers


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
def test_the_same_task_runs_unchanged_on_every_api(api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One script, one agent setup; only ``api`` differs, and so does nothing else."""
    monkeypatch.setenv("IPYAGENT_TEST_KEY", "k-123")
    script = [
        any_api_reply("I'll add them.", [("add", {"a": 20, "b": 22})]),
        any_api_reply("", [("add", {"a": 42, "b": 0})]),
        any_api_reply("The answer is 42."),
    ]
    with ScriptedServer(script) as srv:
        agent = Agent(model="m", api=api, base_url=srv.base_url, api_key_env="IPYAGENT_TEST_KEY",
                      tools=[add], python_tool=False)
        result = agent.run("Add 20 and 22, then add 0 to that.")
    assert result.stop_reason == "done" and result.text == "The answer is 42."
    assert [(type(i).__name__, getattr(i, "output", None)) for i in agent.context] == [
        ("Message", None), ("Message", None), ("ToolCall", None), ("ToolResult", "42"),
        ("ToolCall", None), ("ToolResult", "42"), ("Message", None)]
    path = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}[api]
    assert [r.path for r in srv.requests] == [path] * 3
    auth = srv.requests[0].headers.get("x-api-key" if api == "anthropic" else "authorization")
    assert auth in ("k-123", "Bearer k-123")


def test_an_explicit_local_url_gets_no_cloud_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's own example: base_url at 127.0.0.1, no provider, OPENAI_API_KEY set."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    monkeypatch.setenv("MY_LOCAL_KEY", "local-secret-123")
    with ScriptedServer([any_api_reply("hi there"), any_api_reply("again")]) as srv:
        agent = Agent(model="qwen2.5:7b", base_url=srv.base_url, python_tool=False)
        assert agent.run("hi").text == "hi there"
        agent.api_key_env = "MY_LOCAL_KEY"  # a local server with --api-key: named, then sent
        assert agent.run("again").text == "again"
        agent.close()
    assert "authorization" not in srv.requests[0].headers
    assert srv.requests[1].headers["authorization"] == "Bearer local-secret-123"


@pytest.mark.parametrize("url,key_env", [
    ("http://127.0.0.1:8080/v1", ""), ("http://localhost:11434/v1", ""),
    ("http://192.168.1.20:8000/v1", ""), ("http://[::1]:8000/v1", ""), ("http://gpu-box:8000/v1", ""),
    ("http://lab.local:1234/v1", ""),
    ("https://api.groq.com/openai/v1", "GROQ_API_KEY"),  # a known cloud host: its own key
    ("https://llm-proxy.example.com/v1", "OPENAI_API_KEY"),  # an OpenAI-compatible proxy
])
def test_which_key_an_explicit_url_gets(url: str, key_env: str) -> None:
    assert resolve(base_url=url).key_env == key_env
    assert resolve(base_url=url, key_env="MINE").key_env == "MINE"  # explicit always wins


def test_a_refused_local_connection_says_which_server_and_how_to_start_it() -> None:
    from ipyagent.models.providers import server_hint

    assert "Ollama server running? Start it with `ollama serve`" in server_hint(
        "http://127.0.0.1:11434/v1/chat/completions")
    assert "llama-server -m model.gguf --jinja" in server_hint("http://localhost:8080/v1")
    assert server_hint("http://127.0.0.1:5999/v1") == " — is the model server running at that address?"
    both = server_hint("http://127.0.0.1:8000/v1")  # vLLM's port is llama-cpp-python's too
    assert "vLLM: `vllm serve" in both and "llama-cpp-python: `python -m llama_cpp.server" in both
    assert server_hint("https://api.openai.com/v1") == "" and server_hint(None) == ""
