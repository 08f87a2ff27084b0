"""What a run reports: usage arithmetic, Step and RunResult footers and reprs, the compaction line."""

from __future__ import annotations

import asyncio
import contextvars

from ipyagent.context.events import (
    ContextCompacted,
    RunResult,
    Step,
    Usage,
    compaction_line,
    live_emitter,
)
from ipyagent.context.items import Summary, ToolCall


def test_usage_adds_up_and_reads_the_three_server_shapes() -> None:
    total = Usage()
    total.add(Usage.from_server({"prompt_tokens": 10, "completion_tokens": 2}))  # Chat Completions
    total.add(Usage.from_server({"input_tokens": 5, "output_tokens": 1}))  # Responses
    assert (total.input, total.output, total.requests, total.total) == (15, 3, 2, 18)
    assert str(total) == "15 in / 3 out"
    anthropic = Usage.from_server({"input_tokens": 3, "output_tokens": 4, "cache_read_input_tokens": 100,
                                   "cache_creation_input_tokens": 20})
    # cached prompt tokens are prompt tokens; the cache's reads and writes are said apart
    assert anthropic == Usage(123, 4, 1, False, cache_read=100, cache_write=20)
    total.add(Usage(1, 1, 0, estimated=True))
    assert total.estimated and str(total) == "~16 in / ~4 out"
    assert Usage.from_server(None) is None and Usage.from_server({"total_tokens": 9}) is None


def test_usage_counts_prompt_cache_reads_and_writes_in_every_shape() -> None:
    # OpenAI Chat (and llama.cpp, OpenRouter) and Responses count cached tokens inside the
    # prompt's; Anthropic beside input_tokens (message_start and message_delta merged).
    chat = Usage.from_server({"prompt_tokens": 1500, "completion_tokens": 9,
                              "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0}})
    responses = Usage.from_server({"input_tokens": 2000, "output_tokens": 5,
                                   "input_tokens_details": {"cached_tokens": 1280}})
    anthropic = Usage.from_server({"input_tokens": 12, "cache_read_input_tokens": 3000,
                                   "cache_creation_input_tokens": 400, "output_tokens": 30})
    assert chat == Usage(1500, 9, 1, cache_read=1024)
    assert responses == Usage(2000, 5, 1, cache_read=1280)
    assert anthropic == Usage(3412, 30, 1, cache_read=3000, cache_write=400)
    total = Usage()
    for one in (chat, responses, anthropic):
        total.add(one)
    assert (total.input, total.cache_read, total.cache_write) == (6912, 5304, 400)
    assert str(total) == "6912 in (5304 cached, 400 cache written) / 44 out"
    assert str(Usage(10, 2, 1)) == "10 in / 2 out"  # nothing about a cache when there is none
    # A damaged or missing count reads as 0, never as an error.
    assert Usage.from_server({"prompt_tokens": 5, "prompt_tokens_details": None}) == Usage(5, 0, 1)
    assert Usage.from_server({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": "x"}}) \
        == Usage(5, 0, 1)
    # As a transcript keeps it; an older transcript without the cache counts still reads.
    assert Usage.from_dict(total.to_dict()) == total
    assert "cache_read" not in Usage(1, 1, 1).to_dict()
    assert Usage.from_dict({"input": 7, "output": 1, "requests": 1}) == Usage(7, 1, 1)


def test_step_footer_and_repr_say_how_it_ended() -> None:
    step = Step(2, tool_calls=[ToolCall("c1", "python", {}), ToolCall("c2", "read_file", {})],
                usage=Usage(100, 20, 1), duration=1.25)
    assert repr(step) == "<Step 2: python, read_file>" and not step.done
    assert step.footer() == "step 2 · 2 tool calls · 100 in / 20 out tokens · 1.2s · paused"
    cached = Step(5, usage=Usage(100, 20, 1, cache_read=80), duration=1.0)
    assert "· 100 in (80 cached) / 20 out tokens ·" in cached.footer()
    assert step.footer(paused="running").endswith(" · running")
    step.stop_reason, step.error = "error", "HTTP 500: down"
    assert step.done and repr(step) == "<Step 2: python, read_file, stop=error>"
    assert step.footer().endswith("1.2s · stopped: error · HTTP 500: down")
    one = Step(1, tool_calls=[ToolCall("c1", "python", {})], stop_reason="done")
    assert " 1 tool call · " in one.footer() and repr(Step(3)) == "<Step 3: no tool calls>"
    markdown = Step(4, text="*hi*", stop_reason="denied", error="`rm`")._repr_markdown_()
    assert markdown.startswith("**Step 4** (0.00s, 0 in / 0 out)") and "_stop: denied_" in markdown


def test_run_result_footer_points_at_an_error_already_shown() -> None:
    result = RunResult("error", "a long answer " * 10, steps=[Step(1)], usage=Usage(7, 3, 1),
                       duration=2.0, error="HTTP 429: slow down")
    assert not result.ok and RunResult("done", "").ok
    assert result.footer() == "error · 1 step · 7 in / 3 out tokens · 2.0s · HTTP 429: slow down"
    assert result.footer(shown=["HTTP 429: slow down"]).endswith(" · the error above")
    text = repr(result)
    assert text.startswith("RunResult(stop_reason='error', steps=1, usage=7 in / 3 out, text='a long")
    assert len(text) < 140  # the text is cut to one short line
    html = RunResult("done", "<b>x</b>", steps=[Step(1), Step(2)])._repr_html_()
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "#1a7f37" in html and "2 steps" in html


def test_compaction_line_says_what_was_summarised_or_dropped() -> None:
    summary = Summary("what happened", replaced=[{}, {}, {}], meta={"method": "summary"})
    line = compaction_line(ContextCompacted(12_000, 3_500, summary))
    assert line.startswith("context compacted before the request: ~12,000 → ~3,500 tokens "
                           "(3 earlier items summarised;")
    assert "0 earlier items dropped" in compaction_line(ContextCompacted(10, 5))
    one = Summary("x", replaced=[{}], meta={"method": "summary"})
    assert "(1 earlier item summarised;" in compaction_line(ContextCompacted(10, 5, one))
    assert "(1 older tool result cleared," in compaction_line(ContextCompacted(10, 5, cleared=1))
    assert "(2 older tool results cleared," in compaction_line(ContextCompacted(10, 5, cleared=2))
    assert "\n" not in line


def test_live_emitter_is_per_context_so_concurrent_runs_never_mix() -> None:
    assert live_emitter.get() is None

    async def run(name: str, seen: dict[str, list[str]]) -> None:
        live_emitter.set(seen.setdefault(name, []).append)
        await asyncio.sleep(0)
        emit = live_emitter.get()
        assert emit is not None
        emit(f"from {name}")

    async def main() -> dict[str, list[str]]:
        seen: dict[str, list[str]] = {}
        await asyncio.gather(run("a", seen), run("b", seen))
        return seen

    assert asyncio.run(main()) == {"a": ["from a"], "b": ["from b"]}
    assert contextvars.copy_context().get(live_emitter) is None  # nothing leaked out


def test_footers_split_the_time_and_say_estimates_and_cost() -> None:
    from ipyagent.context.events import cost_line, time_line, usage_line

    assert time_line(5.94, 0.42, 0.31, 5.2) == "5.9s (model 0.4s · tools 0.3s · waiting for you 5.2s)"
    assert time_line(1.0, 0.6, 0.2, 0.0) == "1.0s (model 0.6s · tools 0.2s)"  # nobody was asked
    assert time_line(1.0, 0, 0, 0) == "1.0s"  # no split known (an old record)
    assert usage_line(Usage(1115, 98, 3, estimated=True)) == "~1115 in / ~98 out tokens in 3 requests, estimated"
    assert usage_line(Usage(10, 2, 1)) == "10 in / 2 out tokens"
    assert cost_line(0.01234, Usage(1, 1, 1), "x") == "≈ $0.0123 (x)"
    assert cost_line(12.5, Usage(1, 1, 1, estimated=True), "") == "≈ ~$12.50"
    steps = [Step(1, model_time=0.5, tool_time=0.25, wait_time=4.0), Step(2, model_time=0.25)]
    result = RunResult("done", "ok", steps=steps, usage=Usage(900, 60, 2), duration=5.1,
                       cost=0.0005, cost_basis="gpt-4o-mini at OpenAI's list prices of 2025-10")
    assert result.footer() == ("done · 2 steps · 900 in / 60 out tokens in 2 requests · ≈ $0.0005 "
                               "(gpt-4o-mini at OpenAI's list prices of 2025-10) · "
                               "5.1s (model 0.8s · tools 0.2s · waiting for you 4.0s)")
