"""The agent's model profile and whether its text-mode calls go constrained: found once.

Before a request, ``resolve`` finds the profile for the current model, endpoint and
settings (``Agent.model_profile``, ``Agent.constrain_calls``): from the name alone for a
remote endpoint, and for one on this machine or network also from what the server and the
model file say (``models.profiles``), plus one grammar probe when the server looks like
llama.cpp's. The answer is kept until one of those settings changes, and said once on the
card: which profile, tested or not, why, and whether calls are constrained.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit

from ..context.events import Notice
from ..errors import ConfigError
from ..models.profiles.catalog import GENERIC, Profile
from ..models.profiles.detect import ServerFacts, choose_profile
from ..models.providers import is_local_host

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["ProfileChoice", "resolve", "text_from_the_start"]


@dataclass(frozen=True)
class ProfileChoice:
    """The profile in force and whether text-mode replies are constrained by a grammar."""

    profile: Profile = GENERIC
    grammar: bool = False
    key: tuple[Any, ...] = ()

    def describe(self) -> str:
        constrained = "; calls constrained by a grammar" if self.grammar else ""
        return self.profile.describe() + constrained


async def resolve(agent: Agent, emit: Callable[[Notice], None]) -> ProfileChoice:
    """The choice for the agent's current settings (found once per settings, then kept)."""
    endpoint = agent.endpoint
    key = (agent.model, endpoint.base_url, endpoint.api, agent.model_profile, agent.constrain_calls)
    held = agent.profile_choice
    if held is not None and held.key == key:
        return held
    try:
        client: Any = agent.client
    except ConfigError:  # e.g. no key: the request says so in its one line, not this
        client = None
    local = is_local_host(urlsplit(endpoint.base_url).hostname or "")
    facts: ServerFacts | None = None
    asks = callable(getattr(client, "server_facts", None))  # an OpenAI chat client
    if asks and agent.model_profile == "auto" and local:
        facts = await client.server_facts(local=True)
    profile = choose_profile(agent.model_profile, agent.model, facts)
    grammar = False
    if agent.constrain_calls is True:
        grammar = asks  # only chat completions carries the field
    elif agent.constrain_calls == "auto" and asks and local:
        facts = facts or await client.server_facts(local=True)
        grammar = facts.llama_cpp and await client.takes_grammar()
    choice = ProfileChoice(profile, bool(grammar), key)
    agent.profile_choice = choice
    if profile.name != GENERIC.name or grammar:
        emit(Notice(f"Model profile {choice.describe()}.", "info"))
    return choice


def text_from_the_start(agent: Agent, choice: ProfileChoice) -> str | None:
    """Why a new conversation under ``tool_mode = "auto"`` starts in text mode (its chat
    template cannot carry tools), or None."""
    if agent.tool_mode != "auto" or choice.profile.template_tools is not False:
        return None
    if agent.tool_mode_state.text_because or any("turn" in item.meta for item in agent.context):
        return None  # already text, or a conversation under way goes on as it went
    return f"the model profile {choice.profile.name}: {choice.profile.why}"
