"""The cost line: a dated price table, overridable by Agent.prices; none for local or unknown models."""

from __future__ import annotations

import pytest
from traitlets import TraitError

from ipyagent import Agent
from ipyagent.models.prices import PRICES, PRICES_AS_OF, Price, cost_of, parse_prices, price_for
from tests.helpers.scripted_model import ScriptedModel, text
from tests.helpers.scripted_server import ScriptedServer, reply_text


def test_known_models_and_their_dated_snapshots_have_a_price() -> None:
    assert price_for("gpt-4o-mini") is PRICES["gpt-4o-mini"]
    assert price_for("gpt-4o-mini-2024-07-18") is PRICES["gpt-4o-mini"]
    assert price_for("claude-sonnet-4-5-20250929") is PRICES["claude-sonnet-4-5"]
    assert price_for("claude-3-5-haiku-latest") is PRICES["claude-3-5-haiku"]
    assert price_for("qwen2.5:7b") is None and price_for("gpt-4o-mini-instruct") is None
    assert all(PRICES_AS_OF in p.source for p in PRICES.values())  # every price says its date


def test_cost_counts_cached_and_cache_written_tokens_at_their_rates() -> None:
    price = Price(input=2.0, output=8.0, cached_input=0.5, cache_write=2.5, source="s")
    # 1M prompt tokens of which 400k read from the cache and 100k written to it, 10k out.
    assert cost_of(price, 1_000_000, 10_000, cache_read=400_000, cache_write=100_000) == \
        pytest.approx((500_000 * 2.0 + 400_000 * 0.5 + 100_000 * 2.5 + 10_000 * 8.0) / 1e6)
    plain = Price(1.0, 1.0)
    assert cost_of(plain, 1000, 0, cache_read=500) == pytest.approx(0.001)  # no cache rate: input's


def test_agent_prices_override_add_and_remove_entries_and_refuse_nonsense() -> None:
    table = parse_prices({"my-model": {"input": 1, "output": 2}, "gpt-4o": None})
    assert price_for("my-model", table) == Price(1.0, 2.0, None, None, "Agent.prices")
    assert price_for("gpt-4o", table) is None and price_for("gpt-4o-mini", table) is not None
    agent = Agent(python_tool=False)
    try:
        for bad, says in [({"m": {"input": 1}}, "must be None or a dict with 'input' and 'output'"),
                          ({"m": {"input": -1, "output": 1}}, "must be a number >= 0"),
                          ({"m": {"input": "1", "output": 1}}, "must be a number >= 0"),
                          ({"m": {"input": 1, "output": 1, "cached": 1}}, "unknown key(s) 'cached'")]:
            with pytest.raises(TraitError, match="Agent.prices") as info:
                agent.prices = bad
            assert says in str(info.value) and "\n" not in str(info.value)
        assert agent.prices == {}  # nothing was lost: the setting is as it was
    finally:
        agent.close()


def test_a_priced_model_gets_a_cost_line_a_local_or_unknown_one_none() -> None:
    usage = {"prompt_tokens": 120_000, "completion_tokens": 2_000,
             "prompt_tokens_details": {"cached_tokens": 100_000}}
    agent = Agent(model="gpt-4o-mini", client=ScriptedModel([text("hi", **usage)]),
                  python_tool=False)
    result = agent.run("hi")
    agent.close()
    want = (20_000 * 0.15 + 100_000 * 0.075 + 2_000 * 0.60) / 1e6
    assert result.cost == pytest.approx(want)
    assert f"≈ ${want:.4f} (gpt-4o-mini at OpenAI's list prices of {PRICES_AS_OF})" in result.footer()
    unknown = Agent(model="my-finetune", client=ScriptedModel([text("hi", **usage)]),
                    python_tool=False)
    assert unknown.run("hi").cost is None
    unknown.prices = {"my-finetune": {"input": 1.0, "output": 1.0}}  # now it has one
    unknown.context.add_user("again")
    unknown.resources.inject(ScriptedModel([text("hi", **usage)]))
    again = unknown.run()
    unknown.close()
    assert again.cost == pytest.approx(0.122) and "(my-finetune at Agent.prices)" in again.footer()


def test_a_model_named_like_a_paid_one_on_a_local_server_costs_nothing() -> None:
    """A real HTTP server on 127.0.0.1 that calls itself gpt-4o: no cost line."""
    with ScriptedServer([reply_text("hello")]) as srv, \
            Agent(model="gpt-4o", base_url=srv.base_url, python_tool=False, shell_tool="off") as agent:
        result = agent.run("hi")
    assert result.ok and result.cost is None and "$" not in result.footer()
