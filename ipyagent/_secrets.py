"""The last guard before anything is written to disk: no secret value may be in it.

Transcripts, autosaves and the response cache all pass their text through
``find_secret`` before writing. The secrets are *values* from the environment: the one
``Agent.api_key_env`` names, plus any variable whose name contains KEY, TOKEN, SECRET or
PASSWORD — the same rule that keeps them out of the sibling kernel's environment
(``SECRET_MARKERS``), so nothing the sibling is denied can reach a file either. Short
values, paths and booleans are ignored: a 3-character "key" would match innocent text
everywhere.
"""

from __future__ import annotations

import os
import re
from typing import Iterable, Mapping

__all__ = ["secret_values", "find_secret", "key_envs"]

MIN_LENGTH = 8
# Kept in step with kernel_process.SECRET_MARKERS (a test checks): the sibling's scrub.
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
# Paths, booleans, numbers, dotted names (KEYRING_BACKEND=keyring.backends.null.Keyring).
_NOT_SECRET = re.compile(r"^(?:[/~.]|[A-Za-z]:\\|(?:true|false|yes|no|on|off|none|null|\d+)$"
                         r"|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$)", re.IGNORECASE)


def secret_values(key_env: str | Iterable[str | None] | None = None,
                  environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{env var name: value}`` for every value that must never be written."""
    env = os.environ if environ is None else environ
    chosen = {key_env} if isinstance(key_env, str) else {n for n in (key_env or ()) if n}
    found: dict[str, str] = {}
    for name, value in env.items():
        named = name in chosen
        # Names that merely look like keys need a key-like value, not a word or a path.
        if named and len(value) >= MIN_LENGTH:
            found[name] = value
        elif (any(m in name.upper() for m in SECRET_MARKERS) and len(value) >= MIN_LENGTH
              and not _NOT_SECRET.match(value)):
            found[name] = value
    return found


def key_envs(agent: object) -> list[str]:
    """The environment variables an agent reads its key from (setting and provider's)."""
    names = [getattr(agent, "api_key_env", "") or ""]
    try:
        names.append(agent.endpoint.key_env or "")  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an unresolvable endpoint has no extra key variable
        pass
    return [n for n in dict.fromkeys(names) if n]


def find_secret(text: str, secrets: Mapping[str, str] | Iterable[tuple[str, str]]) -> str | None:
    """The name of the first secret whose value occurs in ``text``, else None."""
    pairs = secrets.items() if isinstance(secrets, Mapping) else secrets
    for name, value in pairs:
        if value and value in text:
            return name
    return None
