"""The sibling's process: memory sizes, the scrubbed environment, limits that fit the user."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ipyagent.kernel.process import parse_memory, process_limit, scrub_env


def test_parse_memory_and_scrub_env() -> None:
    assert parse_memory("2GB") == 2 * 1024**3
    assert parse_memory("512 MB") == 512 * 1024**2
    assert parse_memory(1000) == 1000 and parse_memory(None) is None
    with pytest.raises(ValueError, match="memory_limit"):
        parse_memory("lots")
    env = scrub_env({"OPENAI_API_KEY": "x", "gh_token": "x", "DB_PASSWORD": "x", "X": "1", "MINE": "s"}, ["mine"])
    assert set(env) >= {"X", "MPLBACKEND"} and not {"OPENAI_API_KEY", "gh_token", "DB_PASSWORD", "MINE"} & set(env)


def test_sizes_in_binary_units_and_environment_overrides() -> None:
    assert parse_memory("1.5 GiB") == int(1.5 * 1024**3) and parse_memory("64kb") == 64 * 1024
    env = scrub_env({"PATH": "/bin", "MY_SECRET": "s", "api_key": "k"}, overrides={"PATH": "/usr/bin"})
    assert env["PATH"] == "/usr/bin" and "MY_SECRET" not in env and "api_key" not in env
    assert env["MPLBACKEND"] == "module://matplotlib_inline.backend_inline"


def test_the_process_limit_is_on_top_of_what_the_user_runs_now() -> None:
    nproc, cgroup = process_limit(50)
    if os.geteuid() != 0:
        assert cgroup is None and nproc is not None and nproc > 50  # this test process counts
        return
    assert nproc is None  # root ignores RLIMIT_NPROC: a pids cgroup, when one can be made
    if cgroup is not None:
        try:
            assert (Path(cgroup) / "pids.max").read_text().strip() == "50"
        finally:
            os.rmdir(cgroup)
