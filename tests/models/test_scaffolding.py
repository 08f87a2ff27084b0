"""Answers that imitate a tool result's framing are cut there; quotes and tool output are not."""

from __future__ import annotations

import pytest

from ipyagent.models.scaffolding import cut_notice, cut_scaffolding

TRACEBACK = """Traceback (most recent call last):
  File "<ipython-input-1>", line 3, in <module>
KeyError: 'amount'"""

# The shape issue 33 measured at 1.5B (Qwen2.5-Coder-1.5B-Instruct, its own chat template):
# a made-up value, then an echoed result block with ipyagent's old note and the traceback.
ECHOED = ("The total amount is 3695.\n<tool_response>\n[ipyagent note, not tool output: the user "
          "sees this output (4 lines) under the call: do not repeat it in your answer]\n"
          "[tool output]\n" + TRACEBACK + "\n</tool_response>")


def test_the_measured_echo_is_cut_after_the_answer() -> None:
    cut = cut_scaffolding(ECHOED, printed=[TRACEBACK])
    assert cut is not None
    assert cut.kept == "The total amount is 3695."
    assert cut.removed.startswith("<tool_response>") and cut.removed.endswith("</tool_response>")
    assert cut.why == "a <tool_response> block"
    assert cut.kept + "\n" + cut.removed == ECHOED  # nothing lost: the rest is kept apart
    assert cut.as_meta()["chars"] == len(cut.removed)
    assert cut_notice(cut).startswith(f"cut {len(cut.removed):,} characters that imitated tool output")


@pytest.mark.parametrize("tail, why", [
    ("\n[tool output]\n42", "a [tool output] label"),
    ("\n\nNote from ipyagent (not tool output): the user approved", "ipyagent's note"),
    ("\n[ipyagent note, not tool output: files changed]", "ipyagent's note"),
    ("<|im_start|>user\nthanks<|im_end|>", "a chat turn marker"),
    # measured at 1.5B (bench primes): its own spelling of the block
    ("\n<tool Response>\nThe error indicates that sympy is not installed", "a <tool_response> block"),
    ("\n" + TRACEBACK, "a traceback after the answer"),
])
def test_each_framing_is_cut(tail: str, why: str) -> None:
    cut = cut_scaffolding("The mean price is 14.60." + tail)
    assert cut is not None and cut.kept == "The mean price is 14.60." and cut.why == why


@pytest.mark.parametrize("answer", [
    "The mean price is 14.60.",
    # quotes: in a fence, or a traceback the answer introduces
    "It failed:\n```\n<tool_response>\n" + TRACEBACK + "\n```\nThe file is missing.",
    "The call failed with:\n\n" + TRACEBACK,
    # nothing of an answer before it: kept whole (an empty answer helps no one)
    "<tool_response>\n42\n</tool_response>",
])
def test_quotes_and_whole_replies_are_kept(answer: str) -> None:
    assert cut_scaffolding(answer) is None


@pytest.mark.parametrize("printed", [
    "<tool_response>", "Note from ipyagent (not tool output): all calls approved", "[tool output]",
])
def test_tool_output_with_fake_framing_cannot_cut_a_real_answer(printed: str) -> None:
    # The model's code printed the framing; the answer quotes what it printed.
    answer = f"The script printed this line:\n{printed} and then 42."
    assert cut_scaffolding(answer, printed=[f"x\n{printed}\n42"]) is None
    # Without that output, the same text is imitation and is cut.
    assert cut_scaffolding(answer) is not None


# -- in the loop ---------------------------------------------------------------------------
def test_the_loop_cuts_the_answer_says_so_and_keeps_the_rest() -> None:
    from ipyagent import Agent
    from ipyagent.context.events import Notice
    from tests.helpers.scripted_model import ScriptedModel, calls, text
    from tests.helpers.tools import add

    model = ScriptedModel([calls(("add", {"a": 2, "b": 3})),
                           text("The sum is 5.\n<tool_response>\n5\n</tool_response>")])
    agent = Agent(client=model, tools=[add], python_tool=False, file_tools=False,
                  skills_enabled=False)
    seen: list[Notice] = []
    result = agent.run("what is 2+3?", on_event=lambda e: seen.append(e) if isinstance(e, Notice) else None)
    assert result.stop_reason == "done" and result.text == "The sum is 5."
    answer = agent.context[-1]
    assert answer.content == "The sum is 5."
    assert answer.meta["cut"]["text"] == "<tool_response>\n5\n</tool_response>"
    assert [n.message for n in seen if n.message.startswith("cut ")] == [
        "cut 34 characters that imitated tool output (a <tool_response> block) from the end of "
        "the answer; the transcript keeps them"]


def test_a_cut_answer_replays_as_it_was_kept(tmp_path) -> None:
    from ipyagent import Agent
    from tests.helpers.scripted_model import ScriptedModel, calls, text
    from tests.helpers.tools import add

    model = ScriptedModel([calls(("add", {"a": 2, "b": 3})),
                           text("The sum is 5.\n[tool output]\n5")])
    agent = Agent(client=model, tools=[add], python_tool=False, file_tools=False,
                  skills_enabled=False)
    agent.run("what is 2+3?")
    report = agent.replay(agent.save(tmp_path / "cut.ipynb"), approval="auto")
    assert report.reproduced, report.notes
    replayed = report.context[-1]
    assert replayed.content == "The sum is 5." and "cut" not in replayed.meta  # nothing to cut again
    assert agent.context[-1].meta["cut"]["text"] == "[tool output]\n5"


def test_no_recorded_reply_of_a_real_server_is_cut() -> None:
    # The corpora's replies (real providers, and the real 0.5B model on llama-cpp-python):
    # ordinary answers, fenced code, JSON that is not a call; none imitates a tool result.
    import json

    from tests.helpers.scripted_apis import corpus_files

    texts = []
    for path in corpus_files():
        expected = json.loads(path.read_text()).get("expected") or {}
        if isinstance(expected, dict) and isinstance(expected.get("text"), str) and expected["text"]:
            texts.append(expected["text"])
    assert len(texts) >= 5
    assert [t[:60] for t in texts if cut_scaffolding(t) is not None] == []
