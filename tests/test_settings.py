"""The Agent's settings: each a documented, configurable traitlet; bad values refused in words."""

from __future__ import annotations

import pytest
from traitlets import TraitError

from ipyagent import Agent
from ipyagent.engine.settings import AgentSettings, base_url_problem
from ipyagent.models.timeouts import Timeouts


def test_every_setting_has_help_and_is_configurable() -> None:
    traits = AgentSettings.class_traits(config=True)
    assert {"model", "base_url", "approval", "allow", "max_steps", "temperature", "workspace"} <= set(traits)
    undocumented = [name for name, trait in traits.items() if not (trait.help or "").strip()]
    assert undocumented == []
    assert set(traits) <= set(Agent.class_traits(config=True))  # the Agent has them all


@pytest.mark.parametrize("name, value, says", [
    ("max_steps", 0, "Agent.max_steps must be at least 1, not 0"),
    ("approval_timeout", -1.0, "Agent.approval_timeout must be >= 0"),
    ("max_tokens", -5, "Agent.max_tokens must be >= 0, not -5"),
    ("context_window", -1, "Agent.context_window must be >= 0"),
    ("compact_threshold", 0.0, "Agent.compact_threshold must be in (0, 1]"),
    ("compact_keep_recent", 1.5, "Agent.compact_keep_recent must be in (0, 1], not 1.5"),
    ("compact_target", 0.0, "Agent.compact_target must be in (0, 1], not 0.0"),
    ("temperature", "warm", "Agent.temperature must be a number, not 'warm'"),
    ("base_url", "localhost:11434/v1", "did you mean 'http://localhost:11434/v1'?"),
    ("approval", "sometimes", "approval"),
])
def test_bad_values_are_refused_saying_what_is_wrong(name: str, value: object, says: str) -> None:
    settings = AgentSettings()
    with pytest.raises(TraitError, match=None) as info:
        setattr(settings, name, value)
    assert says in str(info.value)


def test_good_values_are_normalised() -> None:
    settings = AgentSettings()
    settings.base_url = "  http://127.0.0.1:8080/v1 "
    settings.temperature = "0.5"  # type: ignore[assignment]  # %config passes text
    settings.max_steps = 1
    assert (settings.base_url, settings.temperature, settings.max_steps) == ("http://127.0.0.1:8080/v1", 0.5, 1)
    settings.temperature = ""  # type: ignore[assignment]
    settings.base_url = "   "
    assert (settings.temperature, settings.base_url) == (None, "")


def test_an_unknown_persona_is_refused_and_none_clears_it() -> None:
    settings = AgentSettings()
    with pytest.raises(TraitError):
        settings.persona = "no-such-persona-anywhere"
    settings.persona = ""
    assert settings.persona is None


@pytest.mark.parametrize("url, problem", [
    ("https://api.openai.com/v1", None),
    ("http://[::1]:8000/v1", None),
    ("ftp://host/v1", "must start with http:// or https://"),
    ("http://host:port/v1", "is not a valid URL"),
    ("http:///v1", "no host"),
    ("http://my host/v1", "a space in it"),
])
def test_base_url_problem(url: str, problem: str | None) -> None:
    found = base_url_problem(url)
    assert found is None if problem is None else (found is not None and problem in found)


@pytest.mark.parametrize("name", ["first_token_timeout", "idle_timeout", "request_timeout", "timeout"])
@pytest.mark.parametrize("value", [-1.0, float("nan")])
def test_a_time_limit_below_zero_is_refused(name: str, value: float) -> None:
    with pytest.raises(TraitError, match=f"Agent.{name} must be >= 0 \\(0: no limit\\)"):
        setattr(AgentSettings(), name, value)


@pytest.mark.parametrize("where, limits", [
    (dict(base_url="https://api.openai.com/v1"), Timeouts(600, 120, 1800)),
    (dict(provider="groq"), Timeouts(600, 120, 1800)),
    (dict(base_url="http://127.0.0.1:8080/v1"), Timeouts(1800, 120, 3600)),
    (dict(provider="ollama"), Timeouts(1800, 120, 3600)),
    (dict(base_url="http://192.168.1.20:8000/v1"), Timeouts(1800, 120, 3600)),
    (dict(base_url="http://127.0.0.1:8080/v1", first_token_timeout=0, request_timeout=90),
     Timeouts(0, 120, 90)),
])
def test_a_server_on_this_machine_gets_longer_time_limits_unless_they_are_set(where, limits) -> None:
    assert AgentSettings(**where).model_timeouts == limits


def test_the_old_timeout_is_the_idle_limit_unless_idle_timeout_is_set() -> None:
    assert AgentSettings(timeout=5).model_timeouts.idle == 5
    assert AgentSettings(timeout=5, idle_timeout=9).model_timeouts.idle == 9
    assert AgentSettings(idle_timeout=0).model_timeouts.idle == 0


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
def test_the_time_limits_reach_every_http_client_and_a_change_rebuilds_it(api: str) -> None:
    with Agent(model="m", api=api, base_url="http://127.0.0.1:9/v1", python_tool=False,
               file_tools=False, first_token_timeout=42) as agent:
        assert agent.client.timeouts == Timeouts(42, 120, 3600)  # type: ignore[attr-defined]
        agent.idle_timeout = 3
        assert agent.client.timeouts == Timeouts(42, 3, 3600)  # type: ignore[attr-defined]
