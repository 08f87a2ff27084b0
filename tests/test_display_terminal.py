"""The terminal rendering of a run: what a running call prints shows as it prints."""

from __future__ import annotations

import io
from typing import Any

import pytest

from ipyagent import Agent
from ipyagent.display_terminal import TerminalDisplay
from ipyagent.events import ToolCallFinished

from scripted_model import ScriptedModel, calls, text


def run_shown(tmp_path: Any, *codes: str, max_output_lines: int = 10) -> tuple[str, list[str]]:
    """Run each code as a python call; (what the terminal shows, what it showed at each call's end)."""
    out = io.StringIO()
    display = TerminalDisplay(out, max_output_lines=max_output_lines)
    at_finish: list[str] = []

    def listener(event: Any) -> None:
        if isinstance(event, ToolCallFinished):
            at_finish.append(out.getvalue())
        display(event)

    model = ScriptedModel([calls(("python", {"code": c})) for c in codes] + [text("Done.")])
    with Agent(client=model, approval="auto", cwd=str(tmp_path)) as agent:
        assert agent.run("go", on_event=listener).stop_reason == "done"
    return out.getvalue(), at_finish


def test_output_shows_while_the_call_runs_then_only_what_was_not_shown(tmp_path) -> None:
    code = "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.2)\n'finished'"
    shown, at_finish = run_shown(tmp_path, code)
    assert "  ┆ tick 0\n  ┆ tick 1\n  ┆ tick 2\n" in at_finish[0]  # before the call ended
    assert shown.count("tick 0") == 1
    assert "  ┆ tick 2\n  └ 'finished'\n" in shown  # the result follows, nothing twice


def test_a_flood_shows_its_head_live_and_its_tail_with_the_error_at_the_end(tmp_path) -> None:
    shown, _ = run_shown(tmp_path, "for i in range(100): print('line', i)\n1/0", max_output_lines=10)
    lines = shown.splitlines()
    assert [ln for ln in lines if ln.startswith("  ┆ ")] == [f"  ┆ line {i}" for i in range(5)] + ["  ┆ …"]
    assert "  ✗ … 90 more lines …" in lines and "  ✗ line 99" in lines
    assert lines.index("  ✗ line 99") < next(i for i, ln in enumerate(lines) if "ZeroDivisionError:" in ln)
    assert "line 50" not in shown


@pytest.mark.parametrize("code, last", [
    ("print('quiet')", "  └ done"),
    ("print('before')\nraise ValueError('bad')", "  ✗ ValueError: bad"),
])
def test_a_call_that_only_printed_ends_with_its_outcome(tmp_path, code, last) -> None:
    shown, _ = run_shown(tmp_path, code)
    card = shown.split("Done.")[0].rstrip().splitlines()
    assert card[-1] == last
    assert "  ✗ before" not in card and "  └ before" not in card  # printed live, not again
