"""The demo model's fixes for ``%agent fix``: honest rules, checked against real tracebacks."""

from __future__ import annotations

import traceback

import pytest

from ipyagent.frontends.aware import FailedCell, fix_task
from ipyagent.kernel.namespace import picture
from ipyagent.models.demo_fix import FIX_MARK, TRACEBACK_MARK, fix_request, propose_fix
from ipyagent.models.demo_flows import NAMESPACE_MARKER


def raised(source: str, ns: dict | None = None) -> str:
    """The real traceback of running ``source`` (as the user's kernel would show it)."""
    try:
        exec(compile(source, "<cell>", "exec"), dict(ns or {}))
    except BaseException as exc:  # noqa: BLE001 - any error is the point
        return "".join(traceback.format_exception(exc))
    raise AssertionError("the cell did not raise")


def test_the_markers_are_the_ones_the_magics_and_the_picture_use() -> None:
    task = fix_task(FailedCell("x = 1", "Traceback ...\nNameError: x"), None)
    assert FIX_MARK in task and TRACEBACK_MARK in task
    assert picture({"df": [1, 2]}).text.startswith(NAMESPACE_MARKER)


def test_a_fix_task_is_read_back_whole() -> None:
    source = "for i in range(3):\n    print(i / 0)"
    tb = raised(source)
    assert fix_request(fix_task(FailedCell(source, tb), "make it work")) == (source, tb.rstrip())
    assert fix_request("Use Python to compute 2**100") is None


@pytest.mark.parametrize(("source", "ns", "why", "fixed"), [
    ("x = np.arange(3)\nprint(x)", {}, "`np` is used but never imported",
     "import numpy as np\nx = np.arange(3)\nprint(x)"),
    ("total = sum(prics)", {"prices": [1]}, "`prics` is not defined, `prices` is: a typo",
     "total = sum(prices)"),
    ("value = 2**100\nprint(len(value))", {}, "`len()` does not work on a number",
     "value = 2**100\nprint(len(str(value)))"),
    ("n = 3\nprint('n is ' + n)", {}, "a string and a number cannot be joined",
     "n = 3\nprint('n is ' + str(n))"),
    ("d = {'a': 1}\nprint(d['b'])", {}, "the key 'b' is not there", "d = {'a': 1}\nprint(d.get('b'))"),
    ("xs = []\nxs.push(1)", {}, "a list has no `.push`; `.append` does that", "xs = []\nxs.append(1)"),
    ("s = 'abc'\nprint(s.uper())", {}, "a str has no `.uper`; `.upper` does that",
     "s = 'abc'\nprint(s.upper())"),
])
def test_each_rule_fixes_its_error_and_the_fix_runs(source: str, ns: dict, why: str, fixed: str) -> None:
    known = list(ns)
    fix = propose_fix(source, raised(source, ns), known)
    assert fix is not None and fix.certain and why in fix.why
    assert fix.source == fixed
    if "np." not in fixed:  # numpy may not be installed here; the others run as they are
        exec(compile(fix.source, "<fixed>", "exec"), dict(ns))


def test_a_missing_module_is_installed_first_and_not_checked() -> None:
    source = "import no_such_module_here"
    fix = propose_fix(source, raised(source))
    assert fix is not None and fix.source == "%pip install no_such_module_here\n" + source
    assert not fix.checkable


def test_without_a_rule_the_line_is_guarded_and_the_answer_says_it_is_no_fix() -> None:
    source = "a = 1\nratio = a / 0\nprint('after')"
    fix = propose_fix(source, raised(source))
    assert fix is not None and not fix.certain and "I know no certain fix" in fix.why
    assert fix.source == ("a = 1\ntry:\n    ratio = a / 0\nexcept ZeroDivisionError as exc:\n"
                          "    print('ZeroDivisionError:', exc)\n    ratio = None  # no value: "
                          "ZeroDivisionError\nprint('after')")
    exec(compile(fix.source, "<fixed>", "exec"), {})  # it runs to the end
    assert propose_fix("", raised("1/0")) is None  # no source: nothing to fix
