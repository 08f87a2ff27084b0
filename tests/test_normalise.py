"""Normalisation: what varies between two runs of the same code becomes a placeholder."""

from __future__ import annotations

import pytest

from ipyagent._util.normalise import NORMALISATIONS, normalise
from ipyagent.transcripts import replay

SAME = [
    ("at 2024-05-01T12:30:00.123+02:00", "at 2025-11-30T01:02:03Z"),
    ("computed at 2026-11-29 08:45:20.548752", "computed at 2026-11-30 10:00:01.000001"),
    ("today 2024-05-01", "today 2025-01-31"),
    ("t=12:30:59.5", "t=01:02:03.25"),
    ("now 1714567890.123", "now 1764567890.9"),
    ("<object object at 0x7f3a2c1b4e50>", "<object object at 0x7fdd00a1c3a0>"),
    ("id=140234567890123", "id=139876543210987"),
    ("id(x): 140234567890123", "id(x): 139876543210987"),
    ("kernel pid 4242", "kernel pid 5151"),
    ("took 0.123s", "took 1.5s"),
    ("1.23 µs ± 4.5 ns per loop (mean ± std. dev. of 7 runs, 1,000,000 loops each)",
     "2.01 µs ± 10.2 ns per loop (mean ± std. dev. of 7 runs, 100,000 loops each)"),
    ("wrote /tmp/pytest-of-me/pytest-3/x.csv", "wrote /tmp/abc123/x.csv"),
    ("File /tmp/ipykernel_123/456.py:1", "File /tmp/ipykernel_999/789.py:1"),
    ("Cell In[3], line 1", "Cell In[12], line 1"),
    ("[image/png 640x480, 23 KB]", "[image/png 640x480, 24 KB]"),
    ("\x1b[0;31mValueError\x1b[0m   \n", "ValueError"),
]
DIFFERENT = [
    ("1267650600228229401496703205376", "1267650600228229401496703205377"),  # 2**100 stays
    ("0.123", "0.456"),  # a plain float is data, not a duration
    ("[image/png 640x480, 23 KB]", "[image/png 320x240, 23 KB]"),
    ("x = 12", "x = 13"),
    ("random: 0.8444218515250481", "random: 0.7579544029403025"),
]


@pytest.mark.parametrize("a,b", SAME)
def test_normalise_makes_varying_outputs_equal(a, b):
    assert normalise(a) == normalise(b)


@pytest.mark.parametrize("a,b", DIFFERENT)
def test_normalise_keeps_real_differences(a, b):
    assert normalise(a) != normalise(b)


def test_normalise_extra_rules():
    assert normalise("seed 17", extra=[(r"seed \d+", "seed <n>")]) == "seed <n>"


def test_placeholders_name_what_they_replaced() -> None:
    shown = normalise("at 2024-05-01T12:30:00Z pid 42 took 3 ms in /tmp/x/y.csv, Out[7]")
    assert shown == "at <datetime> pid <pid> took <duration> in <tmp> Out[<n>]"


def test_trailing_blanks_and_outer_newlines_go_inner_lines_stay() -> None:
    assert normalise("\n\na  \nb\t\n\n") == "a\nb"


def test_extra_rules_run_after_the_built_in_ones() -> None:
    # the date is already "<date>" when the extra rule sees the text
    assert normalise("on 2024-05-01", extra=[(r"on <date>", "someday")]) == "someday"
    assert normalise("on 2024-05-01", extra=[(r"2024", "year")]) == "on <date>"


def test_every_rule_is_a_valid_pattern_and_replay_uses_this_table() -> None:
    import re

    for pattern, _ in NORMALISATIONS:
        re.compile(pattern)
    assert replay.normalise is normalise
