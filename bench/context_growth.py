"""Does the loop slow down as a run grows, and what does compaction save?

Two 1000-step runs side by side in one process, against a zero-latency in-process model
that always calls a no-op tool returning ~400 characters:

* without compaction (``context_window=0``): the context grows to ~2000 items;
* with compaction (``context_window=8192``): the context is summarised when needed.

Prints the loop's own overhead per step around step 10 and step 1000 (target: ratio
≤ 1.5) and the tokens each request would send. Run: ``python bench/context_growth.py``.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ipyagent import Agent, ToolCall, tool  # noqa: E402
from ipyagent._util import eventloop as _eventloop
from ipyagent.context.tokens import TokenCounter  # noqa: E402
from ipyagent.models.base import ToolCallDelta, Turn, TurnComplete, asks_summary  # noqa: E402

STEPS = 1000


class ZeroLatencyModel:
    """Calls the tool every turn; answers summary requests with a short summary."""

    name = "zero-latency"

    def __init__(self) -> None:
        self.sent: list[int] = []  # estimated prompt tokens of each (non-summary) request
        self.context = None

    async def aclose(self) -> None:
        return None

    async def stream(self, request):  # type: ignore[no-untyped-def]
        if asks_summary(request):  # either form (Agent.compact_summary)
            yield TurnComplete(Turn(text="- ran the no-op tool many times; all returned ok"))
            return
        self.sent.append(self.context.tokens if self.context is not None else 0)
        call = ToolCall(f"call_{len(self.sent)}", "noop", {"x": 1})
        yield ToolCallDelta(0, call.id, call.name, '{"x": 1}')
        yield TurnComplete(Turn(tool_calls=[call], finish_reason="tool_calls"))


@tool
async def noop(x: int) -> str:
    """Return a medium-sized result."""
    return "ok " * 130


async def run(agent: Agent, model: ZeroLatencyModel) -> list[float]:
    agent.context.add_user("go")
    times = []
    for _i in range(STEPS):
        model.context = agent.context
        t0 = time.perf_counter()
        await agent._astep([], steps_so_far=0)
        times.append(time.perf_counter() - t0)
    return times


def measure(window: int) -> tuple[list[float], list[int], int]:
    model = ZeroLatencyModel()
    agent = Agent(client=model, tools=[noop], python_tool=False, circuit_breaker=0,
                  context_window=window, request_max_tokens=512)
    agent.context.counter = TokenCounter(use_tokenizer=False)
    times = _eventloop.run_sync(run(agent, model))
    return times, model.sent, len(agent.context)


def main() -> None:
    print(f"{'run':<22} {'µs/step @10':>12} {'µs/step @1000':>14} {'ratio':>6} "
          f"{'tokens sent @10':>16} {'@1000':>8} {'items at end':>13}")
    for label, window in (("no compaction", 0), ("compaction (8192)", 8192)):
        times, sent, items = measure(window)
        early = statistics.median(times[5:55]) * 1e6
        late = statistics.median(times[-50:]) * 1e6
        print(f"{label:<22} {early:>12.1f} {late:>14.1f} {late / early:>6.2f} "
              f"{statistics.median(sent[5:15]):>16.0f} {statistics.median(sent[-10:]):>8.0f} "
              f"{items:>13}")
    print("(with compaction, per-step time includes the compactions themselves)")


if __name__ == "__main__":
    main()
