"""Decisions: what counts as approved, who counts as a person, and a short repr."""

from __future__ import annotations

import datetime as dt

import pytest

from ipyagent.context.decisions import BY, PERSON, Decision, utc_now


@pytest.mark.parametrize("action, approved", [("approve", True), ("edit", True), ("deny", False)])
def test_approved(action: str, approved: bool) -> None:
    assert Decision(action).approved is approved  # type: ignore[arg-type]


@pytest.mark.parametrize("by, detail, person", [
    ("click", "", True), ("terminal", "y", True), ("user", "", True),
    ("allow-list", "calc__add", False), ("policy", "auto", False), ("timeout", "", False),
    ("replay", "click", True),  # a person's answer, re-applied
    ("replay", "policy", False),
])
def test_by_person(by: str, detail: str, person: bool) -> None:
    assert Decision("approve", by=by, detail=detail).by_person is person


def test_every_person_is_a_known_way_to_decide() -> None:
    assert set(PERSON) <= set(BY)


def test_repr_says_action_scope_who_and_why_only_when_set() -> None:
    assert repr(Decision("approve")) == "Decision(approve)"
    assert repr(Decision("approve", scope="always", by="click-always")) == "Decision(approve, always, by=click-always)"
    assert repr(Decision("deny", reason="no", by="terminal", detail="n")) == (
        "Decision(deny, by=terminal (n), reason='no')")


def test_utc_now_is_utc_iso_with_milliseconds() -> None:
    stamp = utc_now()
    assert stamp.endswith("Z") and len(stamp.split(".")[1]) == 4  # "123Z"
    parsed = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert abs(parsed - dt.datetime.now(dt.timezone.utc)) < dt.timedelta(minutes=5)
