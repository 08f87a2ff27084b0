"""The agent's model profile and whether its text-mode calls go constrained: found once.

Before a request, ``resolve`` finds the profile for the current model, endpoint and
settings (``Agent.model_profile``, ``Agent.constrain_calls``): from the name alone for a
remote endpoint, and for one on this machine or network also from what the server and the
model file say (``models.profiles``), plus one grammar probe when the server looks like
llama.cpp's. The answer is kept until one of those settings changes, and said once on the
card: which profile, tested or not, why, and whether calls are constrained.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable
from urllib.parse import urlsplit

from ..context.events import Notice
from ..errors import ConfigError
from ..models.base import ModelRequest
from ..models.profiles.catalog import GENERIC
from ..models.profiles.choice import ProfileChoice
from ..models.profiles.detect import ServerFacts, choose_profile
from ..models.providers import is_local_host
from .view import AgentView

__all__ = ["resolve", "for_text", "text_from_the_start"]


def _client(agent: AgentView) -> Any:
    try:
        return agent.client
    except ConfigError:  # e.g. no key: the request says so in its one line, not this
        return None


def _local(agent: AgentView) -> bool:
    return is_local_host(urlsplit(agent.endpoint.base_url).hostname or "")


async def resolve(agent: AgentView, emit: Callable[[Notice], None]) -> ProfileChoice:
    """The choice for the agent's current settings (found once per settings, then kept)."""
    endpoint = agent.endpoint
    key = (agent.model, endpoint.base_url, endpoint.api, agent.model_profile, agent.constrain_calls)
    held = agent.profile_choice
    if held is not None and held.key == key:
        return held
    client = _client(agent)
    facts: ServerFacts | None = None
    asks = callable(getattr(client, "server_facts", None))  # an OpenAI chat client
    if asks and agent.model_profile == "auto" and _local(agent):
        facts = await client.server_facts(local=True)
    profile = choose_profile(agent.model_profile, agent.model, facts)
    grammar: bool | None = False
    if agent.constrain_calls is True:
        grammar = asks  # only chat completions carries the field
    elif agent.constrain_calls == "auto" and asks and _local(agent):
        grammar = None  # probed before the first text-mode request
    choice = ProfileChoice(profile, grammar, key, facts.calls_come_as_text if facts else "")
    agent.profile_choice = choice
    if profile.name != GENERIC.name or grammar:
        emit(Notice(f"Model profile {choice.describe()}.", "info"))
    return choice


async def for_text(agent: AgentView, choice: ProfileChoice, emit: Callable[[Notice], None],
                   request: ModelRequest) -> ProfileChoice:
    """``choice`` with its grammar question answered: the text-mode ``request`` is about to go.

    Under ``constrain_calls = "auto"`` a server that looks like llama.cpp's is asked once
    (a request of a few output tokens with ``request``'s messages, so the server's prompt
    cache is kept); a native conversation never pays for the question.
    """
    if choice.grammar is not None:
        return choice
    client = _client(agent)
    grammar = False
    if client is not None:
        facts = await client.server_facts(local=True)
        grammar = facts.llama_cpp and await client.takes_grammar(request)
    answered = replace(choice, grammar=bool(grammar))
    agent.profile_choice = answered
    if grammar:
        emit(Notice("Calls constrained by a grammar: the server obeys one (llama.cpp's "
                    "'grammar' field), so a call it writes is well-formed "
                    "(Agent.constrain_calls = 'auto').", "info"))
    return answered


def text_from_the_start(agent: AgentView, choice: ProfileChoice) -> str | None:
    """Why a new conversation under ``tool_mode = "auto"`` starts in text mode, or None:
    its chat template cannot carry tools, or the server would return the calls as text
    anyway. Why the second: switching after the first reply changes the system prompt, so
    the server's prompt cache is lost at step 2, and the first call would go unconstrained."""
    if agent.tool_mode != "auto":
        return None
    if choice.profile.template_tools is not False and not choice.calls_as_text:
        return None
    if not agent.offered_tools():
        return None  # no call to come back as text: the messages go as they are
    if agent.tool_mode_state.text_because or any("turn" in item.meta for item in agent.context):
        return None  # already text, or a conversation under way goes on as it went
    if choice.profile.template_tools is False:
        return f"the model profile {choice.profile.name}: {choice.profile.why}"
    return choice.calls_as_text
