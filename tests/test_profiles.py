"""Model profiles: detection from what servers and model files say, and each family's real output.

``tests/data/families/`` holds recordings of real models behind a real llama-cpp-python
server (``bench/record_families.py``): the server's ``/v1/models`` and ``/props`` answers,
the GGUF header, and the raw streams of three requests (ipyagent's text mode, the same with
the call grammar, native tools). A profile counts as tested only through these.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from ipyagent.models.openai_chat import ChatTurnAssembler
from ipyagent.models.profiles.catalog import GENERIC, PROFILES, profile_named
from ipyagent.models.profiles.detect import ServerFacts, choose_profile, family_of_template
from ipyagent.models.profiles.gguf import GGUFInfo, read_gguf
from ipyagent.models.profiles.syntax import SYNTAXES
from ipyagent.models.text_tools import FINAL_ANSWER
from ipyagent.models.written_calls import PROBLEM, recover_calls

FAMILIES = Path(__file__).parent / "data" / "families"
OFFERED = ["python", FINAL_ANSWER]


def _recording(name: str) -> dict[str, Any]:
    return json.loads((FAMILIES / f"{name}.json").read_text())


def _facts(rec: dict[str, Any]) -> ServerFacts:
    """What ``server.gather`` would have found, from the recorded answers."""
    gguf = rec["model_file"]["gguf"]
    body = rec["models"]["body"]
    return ServerFacts(model_ids=tuple(m["id"] for m in body["data"]),
                       owners=tuple(m["owned_by"] for m in body["data"]),
                       props=rec["props"]["status"] == 200,
                       gguf=GGUFInfo(gguf["general.architecture"] or "", gguf["general.name"] or "",
                                     gguf["tokenizer.chat_template"] or ""))


def _reply(rec: dict[str, Any], kind: str) -> str:
    """The text of a recorded stream, assembled the way the chat client assembles it."""
    assembler = ChatTurnAssembler()
    for line in rec["exchanges"][kind]["raw_response"].splitlines():
        if line.startswith("data: {"):
            assembler.feed(json.loads(line[len("data: "):]))
    turn = assembler.turn()
    assert not turn.tool_calls  # llama-cpp-python with the model's own template parses none
    return turn.text


# -- detection from the recordings ---------------------------------------------------------
@pytest.mark.parametrize("recording, profile, template_tools", [
    ("qwen2.5-coder-0.5b", "qwen2.5", True),
    ("qwen2.5-coder-1.5b", "qwen2.5", True),
    ("smollm2-135m", "smollm2", False),  # a "llama" architecture; its template has no tools
    ("gemma3-270m", "gemma3", False),  # no chat template in the file: the family's default
])
def test_each_recorded_model_gets_its_family_s_profile(recording: str, profile: str,
                                                       template_tools: bool) -> None:
    rec = _recording(recording)
    facts = _facts(rec)
    assert facts.llama_cpp and not facts.props  # llama-cpp-python: owned_by "me", no /props
    # The alias the server was started with says nothing; the GGUF header does.
    chosen = choose_profile("auto", "local", facts)
    assert chosen.name == profile and chosen.template_tools is template_tools
    assert "general.name" in chosen.why
    # Without the file, the model id alone (the alias here) is enough for these.
    assert choose_profile("auto", "local", ServerFacts(model_ids=(recording,))).name == profile


def test_the_recorded_gguf_headers_are_what_the_files_claim() -> None:
    """The models are what their package names say (read from their own headers)."""
    arch = {r: _recording(r)["model_file"]["gguf"]["general.architecture"] for r in
            ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m", "gemma3-270m")}
    assert arch == {"qwen2.5-coder-0.5b": "qwen2", "qwen2.5-coder-1.5b": "qwen2",
                    "smollm2-135m": "llama", "gemma3-270m": "gemma3"}
    assert "<tool_call>" in _recording("qwen2.5-coder-0.5b")["model_file"]["gguf"]["tokenizer.chat_template"]


# -- each family's real output, read with its profile -----------------------------------------
def test_qwen_0_5b_writes_code_not_a_call_and_imagines_the_result() -> None:
    """Recorded: in text mode the 0.5B writes a python fence and then a <tool_response> it
    made up; with the grammar the made-up block cannot be a <tool_ block any more (it
    writes <toolResponse>), and neither reply holds a call to run."""
    rec = _recording("qwen2.5-coder-0.5b")
    shape = PROFILES["qwen2.5"].syntax.shape
    free = _reply(rec, "text_mode")
    assert "<tool_response>" in free and recover_calls(free, OFFERED, shape)[1] == []
    constrained = _reply(rec, "text_mode_grammar")
    assert "<tool_" not in constrained and recover_calls(constrained, OFFERED, shape)[1] == []


def test_qwen_0_5b_native_reply_is_a_json_fence_call() -> None:
    text = _reply(_recording("qwen2.5-coder-0.5b"), "native_tools")
    around, calls = recover_calls(text, OFFERED, PROFILES["qwen2.5"].syntax.shape)
    assert [(c.name, c.arguments) for c in calls] == [("python", {"code": "2**100"})]
    assert around == ""


def test_qwen_1_5b_writes_its_call_then_an_imagined_result_then_an_answer() -> None:
    rec = _recording("qwen2.5-coder-1.5b")
    for kind in ("text_mode", "text_mode_grammar"):
        text = _reply(rec, kind)
        _, calls = recover_calls(text, OFFERED, PROFILES["qwen2.5"].syntax.shape)
        assert [c.name for c in calls][:1] == ["python"], kind
        assert calls[0].arguments == {"code": "print(2**100)"} and PROBLEM not in calls[0].meta


def test_the_grammar_turns_the_0_5b_s_malformed_calls_into_well_formed_ones() -> None:
    """Recorded on two tasks, each free and under the grammar (greedy, same prompt): free,
    the 0.5B wrote an answer call without its arguments object, a call with a stray brace
    and two results it imagined; constrained, every call it wrote reads whole, in order,
    and nothing is left over."""
    rec = _recording("qwen2.5-coder-0.5b")
    shape = PROFILES["qwen2.5"].syntax.shape
    free0 = recover_calls(_reply(rec, "paired0_free"), OFFERED, shape)
    assert [c.name for c in free0[1]] == ["python"] and '"name": "final_answer"' in free0[0]
    free1 = _reply(rec, "paired1_free")
    assert "<tool_response>" in free1
    assert any(PROBLEM in c.meta for c in recover_calls(free1, OFFERED, shape)[1])
    for kind in ("paired0_grammar", "paired1_grammar"):
        text = _reply(rec, kind)
        around, calls = recover_calls(text, OFFERED, shape)
        assert around == "" and [c.name for c in calls] == ["python", FINAL_ANSWER], kind
        assert all(PROBLEM not in c.meta for c in calls)
        assert set(calls[0].arguments) == {"code"} and set(calls[1].arguments) == {"answer"}
        assert "<tool_response" not in text


def test_every_call_under_the_grammar_is_well_formed() -> None:
    """Whatever each recorded model wrote under the grammar: every call block in it reads."""
    for path in sorted(FAMILIES.glob("*.json")):
        rec = json.loads(path.read_text())
        text = _reply(rec, "text_mode_grammar")
        _, calls = recover_calls(text, OFFERED)
        assert all(PROBLEM not in c.meta for c in calls), path.name
        assert "<tool_response" not in text and "<tool_call" not in text.replace("<tool_call>", ""), path.name


def test_smollm2_135m_answers_in_words_and_code_never_a_call() -> None:
    rec = _recording("smollm2-135m")
    for kind in ("text_mode", "text_mode_grammar", "native_tools"):
        text = _reply(rec, kind)
        assert recover_calls(text, OFFERED, PROFILES["smollm2"].syntax.shape)[1] == [], kind


def test_the_gemma3_270m_file_is_a_base_model_that_continues_the_prompt() -> None:
    """Recorded honestly: this GGUF has no chat template and continues the user's text; it
    shows detection works for Gemma, not that the Gemma profile's call format works."""
    rec = _recording("gemma3-270m")
    assert rec["model_file"]["gguf"]["tokenizer.chat_template"] == ""
    text = _reply(rec, "text_mode")
    assert text.startswith("Use Python to compute 2**100")
    assert recover_calls(text, OFFERED, PROFILES["gemma3"].syntax.shape)[1] == []
    assert PROFILES["gemma3"].untested


def test_only_families_with_a_recorded_call_are_marked_tested() -> None:
    tested = {name for name, p in PROFILES.items() if not p.untested}
    assert tested == {"qwen2.5", "smollm2"}
    for name in tested:
        for recording in PROFILES[name].tested:
            assert (FAMILIES / f"{recording}.json").exists()
    assert "untested" in PROFILES["llama3"].describe()
    assert "untested" in PROFILES["mistral"]._repr_markdown_()


# -- detection from names and templates (documented, not recorded) --------------------------
@pytest.mark.parametrize("name, profile", [
    ("Meta-Llama-3.2-1B-Instruct-Q4_K_M.gguf", "llama3"),
    ("llama3.1:8b", "llama3"),
    ("phi4-mini", "phi"),
    ("Phi-3.5-mini-instruct", "phi"),
    ("mistral-7b-instruct-v0.3", "mistral"),
    ("ministral-8b", "mistral"),
    ("qwen3:0.6b", "qwen3"),
    ("Qwen/Qwen2.5-Coder-7B-Instruct", "qwen2.5"),
    ("gemma3:1b", "gemma3"),
    ("HuggingFaceTB/SmolLM2-360M-Instruct", "smollm2"),
    ("gpt-4o-mini", "generic"),
    ("llama2-7b", "generic"),
])
def test_names_point_to_families(name: str, profile: str) -> None:
    assert choose_profile("auto", name).name == profile


@pytest.mark.parametrize("template, profile", [
    ("{%- if tools %}<|im_start|>system ... <tool_call> ... <think>", "qwen3"),
    ("{%- if tools %}<|im_start|>system ... <tool_call>", "qwen2.5"),
    ("<|start_header_id|>{{ role }}<|end_header_id|> {{ tools }}", "llama3"),
    ("[AVAILABLE_TOOLS] {{ tools }} [/AVAILABLE_TOOLS] [TOOL_CALLS]", "mistral"),
    ("<start_of_turn>user\n{{ content }}<end_of_turn>", "gemma3"),
    ("<|system|>{{ tools }}<|tool|><|/tool|><|assistant|>{{ content }}<|end|>", "phi"),
])
def test_a_served_template_points_to_its_family_when_no_name_does(template: str, profile: str) -> None:
    assert family_of_template(template) == profile
    facts = ServerFacts(model_ids=("local",), props=True, chat_template=template,
                        template_from="the server's /props")
    chosen = choose_profile("auto", "local", facts)
    assert chosen.name == profile and "the server's /props" in chosen.why
    assert chosen.template_tools is ("tools" in template)


def test_a_forced_profile_wins_and_an_unknown_one_is_a_clear_error() -> None:
    facts = ServerFacts(gguf=GGUFInfo("qwen2", "Qwen2.5 Coder 0.5B", "{{ plain chat }}"))
    forced = choose_profile("llama3", "qwen", facts)
    assert forced.name == "llama3" and forced.why == "set by Agent.model_profile"
    assert forced.template_tools is False  # what the served template shows still counts
    with pytest.raises(ValueError, match="no model profile 'llama4'; known: auto, qwen2.5"):
        profile_named("llama4")


def test_untrusted_names_are_shown_visible_and_short() -> None:
    evil = "qwen2\u202e\x1b[2Jfake\nline" + "x" * 200
    chosen = choose_profile("auto", "m", ServerFacts(model_ids=(evil,)))
    assert chosen.name == "qwen2.5"
    assert "\x1b" not in chosen.why and "\u202e" not in chosen.why and "\n" not in chosen.why
    assert len(chosen.why) < 140


def test_every_profile_names_a_known_syntax_and_the_generic_one_is_today_s_format() -> None:
    for profile in PROFILES.values():
        assert profile.syntax in SYNTAXES.values() and profile.source
    assert GENERIC.syntax.write("python", {"code": "1"}) == (
        '<tool_call>\n{"name": "python", "arguments": {"code": "1"}}\n</tool_call>')


# -- the GGUF header reader ----------------------------------------------------------------
def _gguf(pairs: list[tuple[str, int, bytes]], *, version: int = 3, count: int | None = None) -> bytes:
    def s(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw
    out = b"GGUF" + struct.pack("<IQQ", version, 0, len(pairs) if count is None else count)
    for key, kind, value in pairs:
        out += s(key) + struct.pack("<I", kind) + value
    return out


def _str(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def test_the_gguf_reader_takes_the_keys_it_needs_and_skips_the_rest(tmp_path: Path) -> None:
    tokens = struct.pack("<IQ", 8, 3) + _str("a") + _str("bb") + _str("<tool_call>")
    scores = struct.pack("<IQ", 6, 3) + struct.pack("<fff", 1, 2, 3)
    data = _gguf([("general.architecture", 8, _str("qwen2")), ("qwen2.context_length", 4, struct.pack("<I", 32768)),
                  ("tokenizer.ggml.tokens", 9, tokens), ("tokenizer.ggml.scores", 9, scores),
                  ("general.name", 8, _str("Qwen2.5 Tiny")), ("flag", 7, b"\x01"),
                  ("tokenizer.chat_template", 8, _str("{% if tools %}<tool_call>{% endif %}"))])
    path = tmp_path / "m.gguf"
    path.write_bytes(data + b"\x00" * 64)
    assert read_gguf(path) == GGUFInfo("qwen2", "Qwen2.5 Tiny", "{% if tools %}<tool_call>{% endif %}")


@pytest.mark.parametrize("make", [
    lambda: b"GGUG" + b"\x00" * 40,  # not GGUF
    lambda: _gguf([("general.architecture", 8, _str("qwen2"))])[:-3],  # cut short
    lambda: _gguf([], count=10**9),  # a count no model has
    lambda: _gguf([("general.name", 8, struct.pack("<Q", 2**62))]),  # a string past the file
    lambda: _gguf([("x", 99, b"")]),  # an unknown type
    lambda: _gguf([("general.name", 8, _str("old"))], version=1),
    lambda: b"",
])
def test_a_damaged_or_hostile_file_is_not_gguf(tmp_path: Path, make: Any) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(make())
    assert read_gguf(path) is None
    assert read_gguf(tmp_path / "missing.gguf") is None and read_gguf(tmp_path) is None


def test_the_real_model_files_read_as_their_recordings_say() -> None:
    from tests.helpers.llama_server import _models_dir

    for recording, file in (("smollm2-135m", "smollm2-135m.gguf"), ("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b.gguf")):
        path = _models_dir() / file
        if not path.exists():
            continue  # the recordings carry the header too (tested above)
        info = read_gguf(path)
        gguf = _recording(recording)["model_file"]["gguf"]
        assert info == GGUFInfo(gguf["general.architecture"], gguf["general.name"],
                                gguf["tokenizer.chat_template"])


def test_families_by_their_one_token_markers() -> None:
    from ipyagent.models.profiles.detect import family_of_tokens

    # Measured with llama-cpp-python 0.3.36 on the three GGUFs of .ci/local_models.py.
    assert family_of_tokens(("<|im_start|>", "<tool_call>")) == "qwen2.5"  # 0.5B and 1.5B
    assert family_of_tokens(("<|im_start|>",)) is None  # SmolLM2-135M: ChatML only
    assert family_of_tokens(("<|im_start|>", "<tool_call>", "<think>")) == "qwen3"
    assert family_of_tokens(("<|start_header_id|>", "<|eom_id|>")) == "llama3"
    assert family_of_tokens(()) is None
