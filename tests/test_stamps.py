"""File stamps: a change shows in the stamp, and a recent one is never trusted to."""

from __future__ import annotations

import os
from pathlib import Path

from ipyagent._util.stamps import SETTLE_NS, settled, stamp


def test_a_stamp_changes_with_the_file_and_is_none_when_it_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    assert stamp(path) is None and stamp(tmp_path / "nul\0name") is None
    path.write_text("{}")
    first = stamp(path)
    assert first is not None and stamp(path) == first
    os.replace(_written(tmp_path / "new", "{}"), path)  # same size and text, another file
    assert stamp(path) != first
    path.unlink()
    path.mkdir()  # a directory named like the file is not the file
    assert stamp(path) is not None and stamp(path)[0] != first[0]


def test_only_a_file_still_long_enough_counts_as_settled(tmp_path: Path) -> None:
    s = stamp(_written(tmp_path / "f", "x"))
    assert s is not None
    changed = max(s[4], s[5])
    assert not settled([s], now_ns=changed + SETTLE_NS - 1)
    assert settled([s, None], now_ns=changed + SETTLE_NS)
    assert not settled([s], now_ns=changed - 10)  # a time in the future (clock skew): not either


def _written(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
