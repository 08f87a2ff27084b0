"""Atomic writes: all or nothing, one file-mode policy, and leftovers of killed writes removed."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ipyagent._util.atomic import remove_stale_temps, write_atomic


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def aged(path: Path, seconds: float) -> Path:
    past = time.time() - seconds
    os.utime(path, (past, past))
    return path


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_a_new_file_gets_the_umasks_mode_and_a_replaced_one_keeps_its_own(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "new.txt", "fresh\r\n")
        (tmp_path / "script.sh").write_text("echo 1\n")
        (tmp_path / "script.sh").chmod(0o751)
        write_atomic(tmp_path / "script.sh", "echo 2\n")
    finally:
        os.umask(old)
    assert mode(tmp_path / "new.txt") == 0o640
    assert (tmp_path / "new.txt").read_bytes() == b"fresh\r\n"  # line ends as given
    assert mode(tmp_path / "script.sh") == 0o751 and (tmp_path / "script.sh").read_text() == "echo 2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.txt", "script.sh"]


def test_a_symlink_at_the_name_is_replaced_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "link.txt").symlink_to(outside)
    write_atomic(tmp_path / "ws" / "link.txt", "new")
    assert outside.read_text() == "keep me"
    assert not (tmp_path / "ws" / "link.txt").is_symlink()
    assert (tmp_path / "ws" / "link.txt").read_text() == "new"


def test_through_a_directory_descriptor(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_atomic("notes.txt", "one", dir_fd=fd)
        write_atomic("notes.txt", "two", dir_fd=fd)
    finally:
        os.close(fd)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "two"


def test_a_failed_write_leaves_the_file_as_it_was_and_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "run.ipynb"
    target.write_text("before")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(target, "half of an emoji: \ud83d")
    assert target.read_text() == "before" and list(tmp_path.iterdir()) == [target]
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "missing" / "x.txt", "no directory")


def test_a_long_name_still_fits(tmp_path: Path) -> None:
    name = "n" * 250
    write_atomic(tmp_path / name, "x")
    assert (tmp_path / name).read_text() == "x"


def test_each_write_removes_its_targets_stale_temps_only(tmp_path: Path) -> None:
    dead = dead_pid()

    def touch(name: str, age: float = 0) -> Path:
        path = tmp_path / name
        path.write_text("{")
        return aged(path, age)

    keep = {
        touch(f".a.txt.{os.getpid()}.abcdefgh.tmp", 120),  # this process: may be writing
        touch(f".a.txt.{dead}.abcdefgh.tmp"),  # dead, but fresh: another host's, maybe
        touch(f".a.txt.bak.{dead}.abcdefgh.tmp", 7200),  # another target's
        touch(".a.txt.my-notes.tmp", 7200),  # not a temp file of ours
        touch(f".b.txt.{dead}.abcdefgh.tmp", 7200),
    }
    stale = {touch(f".a.txt.{dead}.stale___.tmp", 60), touch(".a.txt.k2j4_x9q.tmp", 7200)}
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_atomic("a.txt", "new", dir_fd=fd)
        assert remove_stale_temps("a.txt", dir_fd=fd) == []  # the write already did
    finally:
        os.close(fd)
    assert {p for p in tmp_path.iterdir() if p.name != "a.txt"} == keep
    assert not any(p.exists() for p in stale)
    assert remove_stale_temps(tmp_path / "nowhere" / "x") == []  # never fails


def test_bytes_are_written_as_they_are_and_text_as_utf8(tmp_path: Path) -> None:
    target = tmp_path / "t.ipynb"
    data = b"\xff\x00raw\r\n" * 50_000  # not UTF-8, bigger than one write's buffer
    write_atomic(target, data)
    assert target.read_bytes() == data
    write_atomic(target, "caf\u00e9\r\n")
    assert target.read_bytes() == "caf\u00e9\r\n".encode()
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate: nothing written, no temp left
        write_atomic(target, "half \ud83d")
    assert target.read_bytes() == "caf\u00e9\r\n".encode() and os.listdir(tmp_path) == ["t.ipynb"]
