"""A real ipykernel driven as JupyterLab drives it: %agent cells, approval clicks, routing.

The frontend (``kernel_frontend.Frontend``) sends the same ``comm_msg`` a browser sends for
a click, and shows only outputs whose parent is the cell's ``execute_request`` — so a test
passes only if the clicks reach the kernel while the cell is still running *and* every
output lands in that cell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.kernel_frontend import Cell, Frontend
from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls

pytestmark = pytest.mark.slow

BIG = "1267650600228229401496703205376"  # 2**100


@pytest.fixture(scope="module")
def fe(tmp_path_factory: pytest.TempPathFactory):
    cwd = tmp_path_factory.mktemp("nb")
    frontend = Frontend(cwd=str(cwd))
    frontend.cwd = cwd  # type: ignore[attr-defined]
    # These tests count and index context items: no namespace picture among them.
    loaded = frontend.run("%load_ext ipyagent\nimport ipyagent\n"
                          "%config Agent.share_namespace = 'off'")
    assert loaded.reply["status"] == "ok", loaded.text()
    assert "model demo" in loaded.text() and "approval ask" in loaded.text()
    yield frontend
    frontend.close()


@pytest.fixture
def fresh(fe: Frontend) -> Frontend:
    cell = fe.run("%agent reset")
    assert cell.reply["status"] == "ok", cell.text()
    return fe


def approval_panels(fe: Frontend) -> list[dict[str, Any]]:
    """The approval panels' states (other boxes, e.g. "rewind to here", are not)."""
    return [s for s in fe.widgets.values() if s.get("_model_name") == "VBoxModel"
            and "ipyagent-approval" in s.get("_dom_classes", [])]


def statuses(fe: Frontend) -> list[str]:
    """Each approval panel's status line (its last child), oldest first."""
    return [fe.widgets[p["children"][-1].removeprefix("IPY_MODEL_")]["value"]
            for p in approval_panels(fe)]


def check_context(fe: Frontend) -> list[str]:
    """Every tool call answered, in order; returns the items' kinds."""
    cell = fe.run(
        "from ipyagent.context.items import ToolCall, ToolResult\n"
        "_ctx = ipyagent.current().context\n"
        "_open = set()\n"
        "for _i in _ctx:\n"
        "    if isinstance(_i, ToolCall): _open.add(_i.id)\n"
        "    elif isinstance(_i, ToolResult): _open.remove(_i.call_id)\n"
        "assert not _open, _open\n"
        "print('|'.join(_i.label for _i in _ctx))")
    assert cell.reply["status"] == "ok", cell.text()
    return cell.text().strip().split("|")


def finish(fe: Frontend, cell: Cell) -> Cell:
    fe.pump_until(lambda: cell.done, 60)
    assert cell.reply["status"] == "ok", cell.text()
    assert not fe.stray, [m["msg_type"] for m in fe.stray]  # no output went astray
    return cell


def test_approve_runs_only_after_the_click(fresh: Frontend) -> None:
    fe = fresh
    cell = fe.execute("%agent Use Python to compute 2**100")
    approve = fe.wait_for_button("Approve")
    fe.pump_for(1.0)
    # Waiting: the cell is still busy, the card says so, and the code has not run.
    assert not cell.done
    assert "waiting for approval" in cell.text()
    assert BIG not in cell.text()
    fe.click(approve)
    # The demo model's first attempt fails, so it asks again for its fix.
    fe.pump_until(lambda: fe.buttons("Approve") != [] and fe.buttons("Approve")[-1] != approve)
    assert "value = " + BIG in cell.text()  # the first call ran, as a real output
    fe.click(fe.buttons("Approve")[-1])
    finish(fe, cell)
    text = cell.text()
    assert "digits: 31" in text and "✓ done · 3 steps" in text
    assert "· [1]" in text  # the sibling kernel's first execution was the approved call
    assert fe.buttons("Approve") == []  # every button disabled once decided
    assert statuses(fe)[-1].endswith("✓ approved by you</span>")
    assert check_context(fe) == ["user", "assistant", "tool call", "tool error", "assistant",
                                 "tool call", "tool result", "assistant"]


def test_tool_with_side_effect_waits_for_approval(fresh: Frontend) -> None:
    fe = fresh
    marker = Path(fe.cwd) / "marker.txt"  # type: ignore[attr-defined]
    setup = fe.run(
        "from pathlib import Path\n"
        "@ipyagent.tool\n"
        "def touch(name: str) -> str:\n"
        "    '''Create a file.'''\n"
        "    Path(name).write_text('ran')\n"
        "    return 'created ' + name\n"
        "_a = ipyagent.current()\n"
        "_python = _a.tools.remove('python')\n"
        "_a.tools.add(touch)")
    assert setup.reply["status"] == "ok", setup.text()
    try:
        cell = fe.execute("%agent marker.txt")
        approve = fe.wait_for_button("Approve")
        fe.pump_for(1.0)
        assert not marker.exists() and not cell.done
        fe.click(approve)
        finish(fe, cell)
        assert marker.read_text() == "ran"
        assert "created marker.txt" in cell.text()
    finally:
        fe.run("_a.tools.remove('touch'); _a.tools.add(_python)")


def test_deny_with_reason_reaches_the_model(fresh: Frontend) -> None:
    fe = fresh
    cell = fe.execute("%agent Use Python to compute 3**5")
    fe.wait_for_panel()
    deny = fe.buttons("Deny")[-1]
    fe.set_value(fe.widget_of("TextModel"), "use pen and paper")
    fe.click(deny)
    finish(fe, cell)
    text = cell.text()
    assert "not approved (use pen and paper)" in text  # the model got the reason
    assert "denied by you: use pen and paper" in text  # the card says so
    assert "243" not in text  # nothing ran
    assert check_context(fe)[-2:] == ["tool error", "assistant"]


def test_edit_runs_the_edited_code_and_shows_the_figure(fresh: Frontend) -> None:
    fe = fresh
    edited = ("import matplotlib.pyplot as plt\n"
              "plt.plot([1, 4, 9, 16])\n"
              "plt.show()\n"
              "print(open('edited.txt', 'w').write('edited'))")
    cell = fe.execute("%agent Use Python to compute 2**8")
    fe.wait_for_panel()
    fe.click(fe.buttons("Edit")[-1])
    fe.set_value(fe.widget_of("AnyModel"), edited)  # the Edit box (frontends/editor.py)
    fe.click(fe.wait_for_button("Run edited"))
    finish(fe, cell)
    assert "image/png" in cell.mimetypes()  # the figure is a real image output
    assert (Path(fe.cwd) / "edited.txt").read_text() == "edited"  # type: ignore[attr-defined]
    assert "✎ edited" in cell.text()
    recorded = fe.run("print(ipyagent.current().context[2].arguments['code'])")
    assert recorded.text().strip() == edited  # the context records what actually ran


def test_run_all_waits_and_always_approves_later_calls(fresh: Frontend) -> None:
    fe = fresh
    before = len(fe.buttons("Always", enabled=False))
    # Run All: every cell is sent at once; the later ones queue behind the agent cell.
    cell = fe.execute("%agent Use Python to compute 2**100")
    after = fe.execute("print('the next cell ran')")
    fe.wait_for_panel()
    fe.pump_for(0.5)
    assert not after.done  # it waits for the agent cell, which waits for the click
    fe.click(fe.buttons("Always")[-1])  # the click still gets through the queue
    finish(fe, cell)
    fe.pump_until(lambda: after.done)
    assert "the next cell ran" in after.text()
    assert len(fe.buttons("Always", enabled=False)) == before + 1  # asked once, not twice
    assert "digits: 31" in cell.text()


def test_agent_lines_inside_top_level_blocks_await_with_variables(fresh: Frontend) -> None:
    cell = fresh.run("for _expr in ['2**3', '2**4']:\n"
                     "    %agent --approve auto Use Python to compute {_expr}")
    assert cell.reply["status"] == "ok", cell.text()
    assert "value = 8" in cell.text() and "value = 16" in cell.text()


def test_headless_run_denies_at_once_and_says_how_to_allow(fresh: Frontend) -> None:
    fe = fresh
    panels = len(fe.buttons("Approve", enabled=False))
    cell = fe.execute("%agent Use Python to compute 2**100", allow_stdin=False)
    finish(fe, cell)
    text = cell.text()
    assert "nobody could approve this call" in text
    assert "%config Agent.approval = 'auto'" in text
    assert BIG not in text
    assert len(fe.buttons("Approve", enabled=False)) == panels  # no dead buttons left behind


def test_interrupt_while_waiting_leaves_a_valid_context(fresh: Frontend) -> None:
    fe = fresh
    cell = fe.execute("%agent Use Python to compute 2**100")
    fe.wait_for_button("Approve")
    fe.interrupt()
    finish(fe, cell)
    assert "interrupted" in cell.text()
    assert check_context(fe)[-1] == "tool error"  # the open call got an "Interrupted" result
    again = fe.run("%agent --approve auto Use Python to compute 2**10")
    assert again.reply["status"] == "ok" and "1024" in again.text()


def test_bad_input_is_one_line(fe: Frontend) -> None:
    for code, expected in [("%agent", "give a task"), ("%agent --frobnicate x", "--frobnicate"),
                           ("%agent --max-steps -1 hi", "max_steps")]:
        cell = fe.run(code)
        assert cell.reply["status"] == "error"
        assert cell.reply["ename"] == "UsageError"
        shown = cell.text().strip()
        assert shown.startswith("UsageError:") and "\n" not in shown, shown
        assert expected in shown


def test_interrupt_stops_a_running_tool_call_at_once(fresh: Frontend) -> None:
    fe = fresh
    cell = fe.execute("%agent Use Python to compute 2**100")
    fe.wait_for_panel()
    fe.click(fe.buttons("Edit")[-1])
    fe.set_value(fe.widget_of("AnyModel"),
                 # A Python loop: SIGINT stops it at once (a C call like time.sleep only
                 # stops when it returns, if the signal lands on another thread).
                 # ('start' + 'ed': the card shows the code, so wait for the *output*.)
                 "import time\nprint('start' + 'ed', flush=True)\n"
                 "end = time.time() + 120\nwhile time.time() < end:\n    pass")
    fe.click(fe.wait_for_button("Run edited"))
    fe.pump_until(lambda: "started" in cell.text())
    fe.interrupt()
    fe.pump_until(lambda: cell.done, 30)  # long before the 120 s loop would end
    assert cell.reply["status"] == "ok"
    assert "■ interrupted" in cell.text()  # on the card and in the footer
    assert check_context(fe)[-1] == "tool error"
    told = fe.run("print([i for i in ipyagent.current().context if isinstance(i, ToolResult)][-1].output)")
    assert told.text().strip() == "Interrupted by the user. It had printed:\nstarted"  # the model knows
    again = fe.run("%agent --approve auto Use Python to compute 2**10", timeout=30)
    assert "1024" in again.text(), again.text()  # the sibling kernel was interrupted too


def test_older_kernels_run_detached_and_say_so(fresh: Frontend) -> None:
    fe = fresh
    # What load_ext does on ipykernel < 7.4: no awaiting rewrite, so the magic detaches.
    setup = fe.run("import ipyagent.frontends.transformer as _t\n"
                   "ipyagent.frontends.magics._MAGICS.awaits = False\n"
                   "get_ipython().input_transformers_post.remove(_t.await_agent_magics)")
    assert setup.reply["status"] == "ok", setup.text()
    try:
        cell = fe.run("%agent --approve auto Use Python to compute 2**6")
        assert "cannot take clicks while a cell waits" in cell.text()
        # The run goes on after the cell has ended, and its outputs still land in that cell.
        fe.pump_until(lambda: "✓ done" in cell.text())
        assert "value = 64" in cell.text()
    finally:
        fe.run("ipyagent.frontends.magics._MAGICS.awaits = True\n"
               "get_ipython().input_transformers_post.append(_t.await_agent_magics)")


def test_awaiting_the_agent_directly_after_a_run_does_not_draw_in_the_old_cell(
        fresh: Frontend) -> None:
    fe = fresh
    first = fe.run("%agent --approve auto Use Python to compute 2**3")
    n = len(first.outputs)
    cell = fe.run("try:\n"
                  "    await ipyagent.current().arun('Use Python to compute 2**4')\n"
                  "except ipyagent.errors.ApprovalError as exc:\n"
                  "    print('refused:', exc)")
    assert "refused: the approval buttons have no cell to appear in" in cell.text()
    assert len(first.outputs) == n  # nothing was added to the earlier cell
    check_context(fe)


def test_a_running_call_prints_live_and_its_outputs_take_that_place(fresh: Frontend) -> None:
    fe = fresh
    code = ("import time\nfor i in range(3):\n    print('tick', i, flush=True)\n"
            "    time.sleep(0.6)\n'finished'")
    with ScriptedServer([reply_tool_calls([("python", {"code": code})]), reply_text("Ticked.")]) as srv:
        configured = fe.run(f"%config Agent.model = 'scripted'\n%config Agent.base_url = '{srv.base_url}'")
        assert configured.reply["status"] == "ok", configured.text()
        try:
            cell = fe.execute("%agent --approve auto tick three times")
            fe.pump_until(lambda: "tick 0" in cell.text(), 30)
            # Shown while the call still runs: the cell is busy and the last tick is to come.
            assert not cell.done and "tick 2" not in cell.text()
            finish(fe, cell)
        finally:
            fe.run("%config Agent.model = 'demo'\n%config Agent.base_url = ''")
    text = cell.text()
    assert "Ticked." in text and "'finished'" in text
    assert text.count("tick 0") == 1  # the live text gave way to the real output
    assert all(out.get("data") != {"text/plain": ""} for out in cell.outputs), cell.outputs


def test_each_call_of_a_turn_shows_its_card_buttons_and_output_together(fresh: Frontend) -> None:
    fe = fresh
    turn = reply_tool_calls([("python", {"code": "print('out' + '-a')"}),
                             ("python", {"code": "print('out' + '-b')"})])
    with ScriptedServer([turn, reply_text("Both ran.")]) as srv:
        configured = fe.run(f"%config Agent.model = 'scripted'\n%config Agent.base_url = '{srv.base_url}'")
        assert configured.reply["status"] == "ok", configured.text()
        try:
            cell = fe.execute("%agent two calls")
            first = fe.wait_for_button("Approve")
            fe.click(first)
            fe.pump_until(lambda: fe.buttons("Approve") not in ([], [first]))
            fe.click(fe.buttons("Approve")[-1])
            finish(fe, cell)
        finally:
            fe.run("%config Agent.model = 'demo'\n%config Agent.base_url = ''")

    def at(predicate: Any) -> list[int]:
        return [i for i, out in enumerate(cell.outputs) if predicate(out)]

    def shows(text: str) -> Any:
        return lambda out: text in (out.get("text") or out.get("data", {}).get("text/plain", ""))

    def widget(model: str, css: str = "") -> Any:
        def test(out: dict[str, Any]) -> bool:
            view = out.get("data", {}).get("application/vnd.jupyter.widget-view+json")
            state = fe.widgets.get(view["model_id"], {}) if view else {}
            return state.get("_model_name") == model and (not css or css in state.get("_dom_classes", []))
        return test

    panels = at(widget("VBoxModel", "ipyagent-approval"))
    codes = at(widget("AnyModel"))  # "code → new cell" (anywidget, a dependency)
    card_a, card_b = at(shows("print('out' + '-a')")), at(shows("print('out' + '-b')"))
    out_a, out_b = at(shows("out-a\n")), at(shows("out-b\n"))
    # Read top to bottom: card a with its output inside its frame, its buttons; then card b.
    assert len(panels) == len(codes) == 2 and len(card_a) == len(card_b) == 1, cell.outputs
    assert card_a == out_a and card_b == out_b, cell.outputs  # issue 30: inside the card
    assert card_a[0] < panels[0] < codes[0] < card_b[0] < panels[1] < codes[1], cell.outputs
    assert "writing" not in cell.text()  # no placeholder left behind


def test_the_panel_status_uses_the_theme_colours(fresh: Frontend) -> None:
    """Fixed dark reds and browns were hard to read in a dark theme; the card's own theme
    variables (with the light colours as fallbacks) read in both."""
    fe = fresh
    cell = fe.execute("%agent Use Python to compute 3**3")
    fe.wait_for_panel()
    assert "waiting" not in statuses(fe)[-1]  # the card's header says it (issue 30)
    fe.click(fe.buttons("Deny")[-1])
    finish(fe, cell)
    assert "var(--jp-error-color1" in statuses(fe)[-1] and "denied by you" in statuses(fe)[-1]
    assert not any("color:#" in s for s in statuses(fe)), statuses(fe)


@pytest.mark.parametrize("allow_stdin", [True, False], ids=["lab", "headless"])
def test_load_ext_and_agent_in_one_cell(tmp_path: Path, allow_stdin: bool) -> None:
    # The cell was read before %load_ext installed the awaiting rewrite, so its %agent is a
    # blocking call. Where someone can click, the run goes on after the cell (and says so);
    # headless (nbclient), nobody clicks, so it runs in the cell and the call is denied.
    fe = Frontend(cwd=str(tmp_path))
    try:
        cell = fe.run("%load_ext ipyagent\n%agent Use Python to compute 2**6  # in one cell",
                      allow_stdin=allow_stdin)
        assert cell.reply["status"] == "ok", cell.text()
        assert "UsageError" not in cell.text() and "cannot wait for approval" not in cell.text()
        if allow_stdin:
            assert "this cell loaded ipyagent, so it cannot wait for the run" in cell.text()
            fe.click(fe.wait_for_button("Approve"))
            fe.pump_until(lambda: "value = 64" in cell.text())
            fe.click(fe.wait_for_button("Approve"))  # the demo's second call (its first fails)
            # the run's footer, not the call card's "✓ done": the run still answers after the card
            fe.pump_until(lambda: "✓ done · 3 steps" in cell.text())
            assert not fe.stray, [m["msg_type"] for m in fe.stray]  # all of it in that cell
        else:
            assert "nobody could approve this call" in cell.text()
            assert "value = 64" not in cell.text()
        tasks = fe.run("import ipyagent\nprint([i.content for i in ipyagent.current().context "
                       "if i.label == 'user'][-1])")
        assert tasks.text().strip() == "Use Python to compute 2**6"  # the comment was a comment
        # The next cell is read with the rewrite in place: it awaits, as always.
        later = fe.execute("%agent --approve auto Use Python to compute 2**7")
        fe.pump_until(lambda: later.done, 60)
        assert "value = 128" in later.text() and "this cell loaded" not in later.text()
    finally:
        fe.close()


def test_the_kernel_says_busy_while_the_agent_cell_runs(fresh: Frontend) -> None:
    """Issue 30: a control request during the run (JupyterLab's widget manager asks for a
    subshell when the first widget appears) ended with 'idle', and the status bar said
    Idle while the cell was still running. The cell says busy again, until it ends."""
    fe = fresh
    cell = fe.execute("%agent Use Python to compute 2**100")
    fe.wait_for_panel()
    request = fe.kc.session.msg("kernel_info_request")
    fe.kc.control_channel.send(request)
    control = request["header"]["msg_id"]

    def busy_again() -> bool:
        said = fe.statuses
        idle = [i for i, s in enumerate(said) if s == ("idle", control)]
        return bool(idle) and ("busy", cell.msg_id) in said[idle[0] + 1:]

    fe.pump_until(busy_again, 15)
    assert fe.statuses[-1] == ("busy", cell.msg_id), fe.statuses[-4:]
    first = fe.buttons("Approve")[-1]
    fe.click(first)
    fe.pump_until(lambda: fe.buttons("Approve") != [] and fe.buttons("Approve")[-1] != first)
    fe.click(fe.buttons("Approve")[-1])  # the demo model's fix
    finish(fe, cell)
    assert fe.statuses[-1] == ("idle", cell.msg_id)
    after = fe.kc.session.msg("kernel_info_request")  # once the cell is done: no extra busy
    fe.kc.control_channel.send(after)
    fe.pump_until(lambda: ("idle", after["header"]["msg_id"]) in fe.statuses, 15)
    fe.pump_for(0.5)
    assert fe.statuses[-1] == ("idle", after["header"]["msg_id"]), fe.statuses[-4:]
