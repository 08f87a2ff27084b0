"""Fixtures of the model-client tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Callable

import pytest

from ipyagent.models.openai_chat import OpenAIChatModel
from tests.helpers.scripted_server import ScriptedServer


@pytest.fixture
async def make_model(scripted_server: ScriptedServer,
                     request: pytest.FixtureRequest) -> AsyncIterator[Callable[..., OpenAIChatModel]]:
    """Chat models pointed at ``scripted_server`` (no backoff), closed after the test.

    The API key is the test module's ``KEY``: each file checks that its own sentinel never leaks.
    """
    made: list[OpenAIChatModel] = []

    def make(**options: Any) -> OpenAIChatModel:
        options.setdefault("backoff", 0)
        options.setdefault("api_key", request.module.KEY)
        model = OpenAIChatModel(options.pop("model", "test-model"), options.pop("base_url", scripted_server.base_url),
                                **options)
        made.append(model)
        return model

    yield make
    for model in made:
        await model.aclose()
