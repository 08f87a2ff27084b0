"""The version: one PEP 440 string, the same in the package and its installed metadata."""

from __future__ import annotations

import importlib.metadata

from packaging.version import Version

import ipyagent
from ipyagent._version import __version__


def test_the_version_is_pep_440_and_the_installed_one() -> None:
    assert str(Version(__version__)) == __version__  # already in normal form
    assert ipyagent.__version__ == __version__
    assert importlib.metadata.version("ipyagent") == __version__
