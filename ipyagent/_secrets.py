"""The last guard before anything is written to disk: no secret value may be in it.

Transcripts, autosaves and the response cache all pass their text through
``find_secret`` before writing. The secrets are *values* from the environment: the one
``Agent.api_key_env`` names, plus any variable whose name says it holds a key or token
(``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*_ACCESS_KEY``). Short values are ignored:
a 3-character "key" would match innocent text everywhere.
"""

from __future__ import annotations

import os
import re
from typing import Iterable, Mapping

__all__ = ["secret_values", "find_secret"]

MIN_LENGTH = 8
_SECRET_NAME = re.compile(r"(API_?KEY|_TOKEN|_SECRET|SECRET_KEY|ACCESS_KEY)$", re.IGNORECASE)


def secret_values(key_env: str | None = None,
                  environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{env var name: value}`` for every value that must never be written."""
    env = os.environ if environ is None else environ
    found: dict[str, str] = {}
    for name, value in env.items():
        named_key = name == key_env or bool(_SECRET_NAME.search(name))
        # Names that merely look like keys need a key-like value, not a word or a path.
        long_enough = len(value) >= (MIN_LENGTH if name == key_env else 16)
        if named_key and long_enough and not value.startswith(("/", "~")):
            found[name] = value
    return found


def find_secret(text: str, secrets: Mapping[str, str] | Iterable[tuple[str, str]]) -> str | None:
    """The name of the first secret whose value occurs in ``text``, else None."""
    pairs = secrets.items() if isinstance(secrets, Mapping) else secrets
    for name, value in pairs:
        if value and value in text:
            return name
    return None
