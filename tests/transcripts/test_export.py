"""A Context as a notebook: what ran is code (with its real outputs), the rest says what happened."""

from __future__ import annotations

import nbformat
import pytest

from ipyagent.context.buffer import Context
from ipyagent.context.items import Message, Reasoning, Summary, ToolCall, ToolResult
from ipyagent.transcripts.export import FORMAT, MAX_CELL_TEXT, context_to_notebook


def ran(call_id: str, code: str, **result: object) -> list[object]:
    result.setdefault("output", "")
    result.setdefault("meta", {"status": "ok"})
    return [ToolCall(call_id, "python", {"code": code}), ToolResult(call_id, name="python", **result)]


def notebook(*items: object, **kw: object) -> nbformat.NotebookNode:
    nb = context_to_notebook(Context(list(items), system=kw.pop("system", "Be brief.")), **kw)  # type: ignore[arg-type]
    nbformat.validate(nb)
    return nb


def kinds(nb: nbformat.NotebookNode) -> list[str]:
    return [c.cell_type if c.cell_type == "code" else c.metadata["ipyagent"]["kind"] for c in nb.cells]


def test_a_run_call_is_a_code_cell_with_its_outputs_and_count() -> None:
    outputs = [{"output_type": "stream", "name": "stdout", "text": "2\n"},
               {"output_type": "execute_result", "execution_count": 3, "data": {"text/plain": "4"},
                "metadata": {}, "transient": {"display_id": "x"}}]
    nb = notebook(Message("user", "add"), *ran("c1", "print(1+1)\n2+2", outputs=outputs, execution_count=3),
                  Message("assistant", "It is **4**."))
    assert kinds(nb) == ["user", "code", "assistant"]
    code = nb.cells[1]
    assert (code.source, code.execution_count) == ("print(1+1)\n2+2", 3)
    assert code.metadata["ipyagent"] == {"call_id": "c1", "status": "ok"}
    assert [o.output_type for o in code.outputs] == ["stream", "execute_result"]
    assert "transient" not in code.outputs[1]  # only what nbformat's schema allows
    assert nb.cells[2].source == "#### Assistant\n\nIt is **4**."


def test_a_call_that_raised_is_tagged_so_run_all_carries_on() -> None:
    error = {"output_type": "error", "ename": "ZeroDivisionError", "evalue": "division by zero"}
    nb = notebook(*ran("c1", "1/0", output="ZeroDivisionError", error=True, outputs=[error], execution_count=1))
    cell = nb.cells[0]
    assert cell.metadata["tags"] == ["raises-exception"] and cell.outputs[0].traceback == []


@pytest.mark.parametrize("meta, output, says", [
    ({"denied": True, "by": "click", "reason": "no"}, "denied", "denied by the user: no"),
    ({"denied": True, "by": "policy"}, "denied", "denied by the approval policy"),
    ({"skipped": True}, "skipped", "an earlier call in the same turn was denied"),
    ({"interrupted": True}, "interrupted", "interrupted by the user"),
    ({"status": "timeout"}, "partial output", "timed out (not re-run by Run All)"),
    ({"status": "died"}, "", "killed the kernel"),
    ({}, "unknown tool: python", "did not run: unknown tool: python"),
])
def test_calls_that_did_not_run_are_markdown_never_code(meta: dict, output: str, says: str) -> None:
    nb = notebook(*ran("c1", "import os", output=output, meta=meta))
    (cell,) = nb.cells
    assert cell.cell_type == "markdown" and says in cell.source and "```python\nimport os\n```" in cell.source
    assert ("Recorded output" in cell.source) is (meta.get("status") == "timeout")


def test_an_unanswered_call_says_the_run_stopped() -> None:
    nb = notebook(ToolCall("c1", "python", {"code": "x = 1"}), ToolCall("c2", "add", {"a": 1}))
    assert "not answered" in nb.cells[0].source and "*Not answered" in nb.cells[1].source


def test_an_edited_call_shows_what_was_proposed_then_runs_what_ran() -> None:
    call = ToolCall("c1", "python", {"code": "print(2)"}, meta={"original_arguments": {"code": "print(1)"}})
    nb = notebook(call, ToolResult("c1", "2", name="python", meta={"status": "ok", "edited": True}))
    assert kinds(nb) == ["note", "code"]
    assert "The model proposed:\n\n```python\nprint(1)\n```" in nb.cells[0].source
    assert nb.cells[1].source == "print(2)"


def test_other_tools_are_described_with_their_result_clipped() -> None:
    nb = notebook(ToolCall("c1", "add", {"a": 1}), ToolResult("c1", "x" * (MAX_CELL_TEXT + 5), name="add"))
    (cell,) = nb.cells
    assert "**Tool call** `add` (`c1`)" in cell.source and '"a": 1' in cell.source
    assert "[… 5 more characters in the metadata]" in cell.source
    assert nb.metadata["ipyagent"]["items"][1]["output"] == "x" * (MAX_CELL_TEXT + 5)  # lossless


def test_compacted_items_come_before_their_summary() -> None:
    inner = [i.to_dict() for i in ran("c0", "x = 1")]  # type: ignore[attr-defined]
    nb = notebook(Summary("We set x.", replaced=inner), Message("user", "go on"))
    assert kinds(nb) == ["note", "code", "summary", "user"]
    assert nb.cells[1].source == "x = 1"


def test_a_result_whose_call_was_edited_out_says_so() -> None:
    nb = notebook(ToolResult("gone", "42", name="add"))
    assert "its call is not in the context" in nb.cells[0].source


def test_header_reasoning_metadata_and_stable_ids() -> None:
    header = {"title": "My run", "model": "m|x", "empty": "", "note": "A note."}
    nb = notebook(Reasoning("think\nhard"), Message("user", "hi"), header=header, metadata={"extra": 1},
                  kernel_name="py3")
    head = nb.cells[0].source
    assert head.startswith("# My run") and "| model | m\\|x |" in head and "empty" not in head
    assert "A note." in head and "<summary>System prompt</summary>" in head and "Be brief." in head
    assert "<summary>Reasoning</summary>" in nb.cells[1].source
    assert [c.id for c in nb.cells] == ["ipyagent-0", "ipyagent-1", "ipyagent-2"]
    meta = nb.metadata["ipyagent"]
    assert meta["format"] == FORMAT and meta["system"] == "Be brief." and meta["extra"] == 1
    assert nb.metadata["kernelspec"]["name"] == "py3"


def test_the_audit_cell_is_last_and_only_when_a_tool_was_called() -> None:
    assert kinds(notebook(Message("user", "hi"), audit=True)) == ["user"]
    nb = notebook(*ran("c1", "x = 1"), audit=True)
    assert nb.cells[-1].id == "ipyagent-audit" and kinds(nb)[-1] == "audit"


def test_untrusted_text_never_becomes_live_html() -> None:
    nb = notebook(Message("assistant", "<img src=x onerror=alert(1)>"))
    assert "<img" not in nb.cells[0].source


def test_to_notebook_does_not_import_nbformat_and_is_a_valid_notebook(tmp_path) -> None:
    """nbformat's import costs ~1.5 s (its validator, jsonschema): to_notebook needs none of it."""
    import subprocess
    import sys

    code = ("import sys; from ipyagent import Agent, Message, ToolCall, ToolResult; "
            "from ipyagent.transcripts.transcript import to_notebook; "
            "a = Agent(model='demo', python_tool=False); "
            "a.context.extend([Message('user', 'plot'), ToolCall('c1', 'python', {'code': '1'}), "
            "ToolResult('c1', '1', name='python', execution_count=1, meta={'status': 'ok'}, "
            "outputs=[{'output_type': 'execute_result', 'execution_count': 1, "
            "'data': {'text/plain': '1'}, 'metadata': {}}])]); "
            "nb = to_notebook(a); a.context.to_notebook(); "
            "assert [c for c in nb.cells if c.cell_type == 'code'][0].outputs[0].data == "
            "{'text/plain': '1'}, nb.cells; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('nbformat', 'jsonschema')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    from ipyagent import Agent
    from ipyagent.transcripts.transcript import to_notebook

    agent = Agent(model="demo", python_tool=False)
    agent.context.extend([Message("user", "plot"), *ran("c1", "1", execution_count=1, outputs=[
        {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"},
         "metadata": {}}])])
    nb = to_notebook(agent)
    nbformat.validate(nb)
    code_cell = next(c for c in nb.cells if c.cell_type == "code")
    assert code_cell.outputs[0].data["image/png"] == "iVBORw0KGgo="
    code_cell.metadata.tags = ["x"]  # attribute writes land in the dict, as nbformat's
    assert code_cell["metadata"]["tags"] == ["x"]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    back = nbformat.read(path, as_version=4)
    assert [c for c in back.cells if c.cell_type == "code"][0].outputs[0].data["image/png"] == "iVBORw0KGgo="


def test_a_notebook_shows_as_a_table_of_its_cells_with_their_text_inert() -> None:
    """Issue 30: ``to_notebook()`` in a cell showed a page of nested dicts (and the
    step-through notebook a bare tuple); a notebook now says what it holds."""
    ctx = Context()
    ctx.add_user("plot <img src=x onerror=alert(1)> \u202egnp.exe")
    ctx.append(ToolCall("c1", "python", {"code": "print(1)"}))
    ctx.append(ToolResult("c1", "1", name="python", outputs=[
        {"output_type": "stream", "name": "stdout", "text": "1\n"}], execution_count=1,
        meta={"status": "ok"}))
    nb = context_to_notebook(ctx)
    assert repr(nb) == "<NotebookNode: a notebook of 2 cells (1 markdown, 1 code)>"
    html = nb._repr_html_()
    assert "2 cells (1 markdown, 1 code)" in html and "nbformat 4." in html
    assert "User: plot &amp;lt;img src=x" in html and "<img" not in html  # the source, as text
    assert "\u202e" not in html  # a bidi override is shown, not obeyed
    assert "code · 1 output" in html and "<code>print(1)</code>" in html
    assert nb.cells[0]._repr_html_() is None and repr(nb.cells[0]).startswith("NotebookNode({")
