"""The Agent's settings: each a documented, configurable traitlet; bad values refused in words."""

from __future__ import annotations

import pytest
from traitlets import TraitError

from ipyagent import Agent
from ipyagent.settings import AgentSettings, base_url_problem


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
