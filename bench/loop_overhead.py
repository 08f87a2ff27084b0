"""Per-iteration overhead of the agent loop, excluding model and tool time.

A zero-latency in-process model always asks for one call of an async no-op tool, so
what is timed is the loop itself: building the request, assembling the turn, approval,
dispatch, appending items, events, the MCP and secret checks. Measured at context sizes
10, 100 and 1000 items, interleaved step by step; it must stay flat (the ratio 1000/10 is
printed). Then the same with each protocol's request made as its HTTP client makes it
(``payload`` and its JSON encoding, no network), each item's wire form cached
(``WireCache``) and, beside it, made again every step (the code before). Last, the body
alone beside its floor: joining and encoding its bytes, each message's JSON text made
beforehand (the whole body goes on the wire each request; the rest is per-item Python
work). Run: ``python bench/loop_overhead.py``.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ipyagent import Agent, Message, ToolCall, ToolResult, tool  # noqa: E402
from ipyagent._util import eventloop as _eventloop
from ipyagent.models.anthropic import AnthropicModel  # noqa: E402
from ipyagent.models.base import ModelRequest, ToolCallDelta, Turn, TurnComplete  # noqa: E402
from ipyagent.models.http import encode_json  # noqa: E402
from ipyagent.models.openai_chat import OpenAIChatModel  # noqa: E402
from ipyagent.models.openai_responses import OpenAIResponsesModel  # noqa: E402

try:
    from ipyagent.models.wire_cache import WireCache
except ImportError:  # the code before the cache: run this file from an older tree
    WireCache = None  # type: ignore[assignment,misc]


class ZeroLatencyModel:
    """Answers every request at once with one tool call."""

    name = "zero-latency"

    async def aclose(self) -> None:
        return None

    async def stream(self, request):  # type: ignore[no-untyped-def]
        call = ToolCall("call_bench", "noop", {"x": 1})
        yield ToolCallDelta(0, call.id, call.name, '{"x": 1}')
        yield TurnComplete(Turn(tool_calls=[call], finish_reason="tool_calls",
                                usage={"prompt_tokens": 10, "completion_tokens": 1}))


class WireModel(ZeroLatencyModel):
    """The same answer, after making the request body a protocol's client would POST."""

    def __init__(self, protocol: type) -> None:
        self.http = protocol("m", base_url="http://127.0.0.1:9", api_key="k")
        self.encode = True  # False: the body only (its JSON encoding not timed)

    async def stream(self, request):  # type: ignore[no-untyped-def]
        body = self.http.payload(request)
        if self.encode:
            encode_json(body)
        async for event in super().stream(request):
            yield event


@tool
async def noop(x: int) -> str:
    """Do nothing."""
    return "ok"


def filler(n: int) -> list:
    items: list = []
    while len(items) < n - 1:
        i = len(items)
        items += [ToolCall(f"c{i}", "noop", {"x": i}), ToolResult(f"c{i}", "ok " * 20)]
    return items[: n - 1] + [Message("user", "go")]


async def measure(agents: dict[Any, Agent], rounds: int) -> dict[Any, list[float]]:
    """One step per agent per round, in a new order each round: the machine's load drifts
    the same way for every size (and every mode), so the ratios hold on a busy host. A key
    ``(size, cached)`` sets ``WireCache.enabled`` for that agent's step."""
    times: dict[Any, list[float]] = {key: [] for key in agents}
    order = list(agents)
    for _ in range(rounds):
        random.shuffle(order)
        for key in order:
            if isinstance(key, tuple) and WireCache is not None:
                WireCache.enabled = key[1]
            agent = agents[key]
            t0 = time.perf_counter()
            await agent._astep([], steps_so_far=0)
            times[key].append(time.perf_counter() - t0)
            del agent.context[-2:]  # keep the size constant; not timed
    if WireCache is not None:
        WireCache.enabled = True
    return times


def make_agent(size: int, model: ZeroLatencyModel | None = None) -> Agent:
    agent = Agent(client=model or ZeroLatencyModel(), tools=[noop], python_tool=False,
                  circuit_breaker=0, max_steps=10**9)
    agent.listeners.append(lambda event: None)  # a listener, as a display would be
    agent.context.extend(filler(size))
    return agent


def table(title: str, times: dict[int, list[float]]) -> None:
    rows = [(size, statistics.median(t) * 1e6, sorted(t)[int(len(t) * .9)] * 1e6)
            for size, t in times.items()]
    print(title)
    print(f"{'context items':>14} {'median µs/step':>15} {'p90 µs/step':>12}")
    for size, med, p90 in rows:
        print(f"{size:>14} {med:>15.1f} {p90:>12.1f}")
    print(f"ratio 1000 vs 10 items (median): {rows[2][1] / rows[0][1]:.2f}x")


SIZES = (10, 100, 1000)
BODY_KEY = {OpenAIChatModel: "messages", OpenAIResponsesModel: "input", AnthropicModel: "messages"}


def body_vs_floor(rounds: int = 300) -> None:
    """Per step (two new items, the cache warm for the rest), each protocol's body made and
    encoded (``payload`` + ``encode_json``) beside the floor: the same body's bytes joined
    from each message's JSON text, made beforehand, and encoded. Sizes interleaved."""
    import json

    print(f"{'the request body alone vs its floor (median µs)':48} {'10':>14} {'100':>14} "
          f"{'1000':>14}   body 1000/10")
    for protocol in (OpenAIChatModel, OpenAIResponsesModel, AnthropicModel):
        cases = {}
        for size in SIZES:
            model = protocol("m", base_url="http://127.0.0.1:9", api_key="k")
            cases[size] = (model, filler(size))
        built: dict[int, list[float]] = {size: [] for size in SIZES}
        floors: dict[int, list[float]] = {size: [] for size in SIZES}
        for n in range(rounds + 20):
            order = list(SIZES)
            random.shuffle(order)
            for size in order:
                model, items = cases[size]
                items += [ToolCall(f"new{n}", "noop", {"x": n}), ToolResult(f"new{n}", "ok")]
                request = ModelRequest(system="sys", items=items)
                t0 = time.perf_counter()
                body = model.payload(request)
                encode_json(body)
                t1 = time.perf_counter()
                key = BODY_KEY[protocol]
                texts = [json.dumps(m, ensure_ascii=False, separators=(",", ":")) for m in body[key]]
                head, _, tail = json.dumps({**body, key: 0}, ensure_ascii=False,
                                           separators=(",", ":")).partition(f'"{key}":0')
                t2 = time.perf_counter()
                "".join((head, f'"{key}":[', ",".join(texts), "]", tail)).encode("utf-8")
                t3 = time.perf_counter()
                if n >= 20:
                    built[size].append(t1 - t0)
                    floors[size].append(t3 - t2)
                del items[-2:]
        med = {size: (statistics.median(built[size]) * 1e6, statistics.median(floors[size]) * 1e6)
               for size in SIZES}
        cells = " ".join(f"{b:6.0f}/{f:<4.0f}{b / f:3.0f}x" for b, f in med.values())
        print(f"  {protocol.__name__.replace('Model', '') + ': body / floor, ratio':46} {cells}"
              f"   {med[1000][0] / med[10][0]:6.1f}x")


def main() -> None:
    agents = {size: make_agent(size) for size in SIZES}
    _eventloop.run_sync(measure(agents, 50))  # warm-up
    table("the loop (a model that makes no request body)", _eventloop.run_sync(measure(agents, 1000)))
    print()
    print(f"{'with the request body (median µs/step)':40} {'10':>8} {'100':>8} {'1000':>8} "
          f"{'1000/10':>8}")
    modes = (True, False) if WireCache is not None else (False,)
    for protocol in (OpenAIChatModel, OpenAIResponsesModel, AnthropicModel):
        for encode in (False, True):
            # cached and made again, interleaved step by step like the sizes
            agents = {}
            for size in SIZES:
                for cached in modes:
                    model = WireModel(protocol)
                    model.encode = encode
                    agents[size, cached] = make_agent(size, model)
            _eventloop.run_sync(measure(agents, 20))
            times = _eventloop.run_sync(measure(agents, 300))
            for cached in modes:
                med = [statistics.median(times[size, cached]) * 1e6 for size in SIZES]
                what = (f"{protocol.__name__.replace('Model', '')}, "
                        f"{'body + JSON' if encode else 'body'}, "
                        f"{'cached' if cached else 'made again' if WireCache else 'code before'}")
                print(f"  {what:38} {med[0]:8.0f} {med[1]:8.0f} {med[2]:8.0f} {med[2] / med[0]:7.2f}x")
    print()
    body_vs_floor()


if __name__ == "__main__":
    main()
