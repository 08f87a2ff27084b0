"""The last guard before anything is written to disk: no secret value may be in it.

Transcripts, autosaves and the response cache all pass their text through
``find_secret`` before writing, and tool output passes ``SecretScanner.redact`` before
the model or the user sees it. The secrets are *values* from the environment: the one
``Agent.api_key_env`` names, plus any variable whose name contains KEY, TOKEN, SECRET or
PASSWORD — the same rule that keeps them out of the sibling kernel's environment
(``SECRET_MARKERS``), so nothing the sibling is denied can reach a file either. Short
values, paths and booleans are ignored: a 3-character "key" would match innocent text
everywhere.

A value is found in its common printable forms too: base64 (standard and URL-safe, at
each of the three byte alignments, so inside a longer blob as well), hex, percent-encoded,
and split by whitespace, ANSI escapes or zero-width characters (a key printed in chunks on
several lines). Code that encrypts or reverses the key is not caught: the guard is a net
for slips, the sibling's scrubbed environment (and the sandbox) the actual boundary.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

__all__ = ["SecretScanner", "find_secret", "key_envs", "marker", "scanner", "secret_values"]

MIN_LENGTH = 8
# Names holding secrets: one rule for the save guard and the sibling's scrub (kernel.process).
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
# Paths, booleans, numbers, dotted names (KEYRING_BACKEND=keyring.backends.null.Keyring).
_NOT_SECRET = re.compile(r"^(?:[/~.]|[A-Za-z]:\\|(?:true|false|yes|no|on|off|none|null|\d+)$"
                         r"|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$)", re.IGNORECASE)

# What may sit between a secret's characters and still print it: whitespace, ANSI escapes,
# zero-width characters, NUL and backspace. Matching ignores these, so a key printed in
# chunks (one per line, or coloured piece by piece) is still that key.
_INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\x00\x08"
_SEP = re.compile(r"\s+|\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]"
                  f"|[{_INVISIBLE}]+")
_SEP_BETWEEN = f"(?:{_SEP.pattern})*"
MIN_HELD = 4  # live output: a tail this long that may begin a secret waits for the next chunk


def secret_values(key_env: str | Iterable[str | None] | None = None,
                  environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{env var name: value}`` for every value that must never be written."""
    chosen = frozenset({key_env} if isinstance(key_env, str) else {n for n in (key_env or ()) if n})
    if environ is None or environ is os.environ:
        # Every tool call and save asks: reuse the answer while the environment is the same
        # (a variable set, changed or removed mid-session changes the snapshot, so it counts).
        return dict(_from_environ(_environ_snapshot(), chosen))
    return _secret_values(chosen, environ)


def _environ_snapshot() -> tuple[tuple[Any, Any], ...]:
    """The whole of ``os.environ`` as a hashable value, cheaply.

    CPython's ``os._Environ`` keeps the raw (bytes) mapping that every change goes through in
    ``_data``; snapshotting it is a C-speed copy, where iterating ``os.environ`` decodes every
    key and value in Python. Any other mapping falls back to its decoded items.
    """
    data = getattr(os.environ, "_data", None)
    items = data.items() if isinstance(data, dict) else os.environ.items()
    return tuple(items)


@functools.lru_cache(maxsize=8)
def _from_environ(snapshot: tuple[tuple[Any, Any], ...], chosen: frozenset[str]) -> dict[str, str]:
    # From the snapshot itself, decoded as os.environ decodes: the answer matches its key
    # even if another thread changes the environment meanwhile.
    env = {_decoded(k): _decoded(v) for k, v in snapshot}
    return _secret_values(chosen, env)


def _decoded(value: Any) -> str:
    return os.fsdecode(value) if isinstance(value, bytes) else str(value)


def _secret_values(chosen: frozenset[str], env: Mapping[str, str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in env.items():
        if len(value) < MIN_LENGTH:
            continue
        # Names that merely look like keys need a key-like value, not a word or a path.
        if name in chosen or (any(m in name.upper() for m in SECRET_MARKERS)
                              and not _NOT_SECRET.match(value)):
            found[name] = value
    return found


def key_envs(agent: object) -> list[str]:
    """The environment variables an agent reads its keys from (setting, provider's, remote kernel token)."""
    names = [getattr(agent, "api_key_env", "") or "", getattr(agent, "kernel_token_env", "") or ""]
    with contextlib.suppress(Exception):  # an unresolvable endpoint has no extra key variable
        names.append(agent.endpoint.key_env or "")  # type: ignore[attr-defined]
    return [n for n in dict.fromkeys(names) if n]


def marker(name: str) -> str:
    """What a secret's value is replaced with: ``[redacted $NAME]``."""
    return f"[redacted ${name}]"


def flatten(text: str) -> str:
    """``text`` without anything that may sit unseen between a secret's characters."""
    if "\x1b" in text or any(c in text for c in _INVISIBLE):
        return _SEP.sub("", text)
    return "".join(text.split())  # the common case, at C speed


def _base64_cores(raw: bytes) -> set[str]:
    """The base64 characters that encode only ``raw``, at each of the 3 byte alignments.

    Preceded by k bytes, ``raw`` starts in output character ceil(8k/6); a character that
    mixes in a neighbour's bits is left out, so the core is in any blob holding ``raw``.
    """
    cores = set()
    for k in range(3):
        encoded = base64.b64encode(b"\0" * k + raw).decode()
        core = encoded[-(-8 * k // 6):(8 * (k + len(raw))) // 6]
        cores.add(core)
        cores.add(core.replace("+", "-").replace("/", "_"))
    return cores


def _forms(value: str) -> tuple[set[str], set[str]]:
    """(forms matched exactly, forms matched ignoring case) of one secret value, flattened."""
    raw = value.encode("utf-8", "surrogatepass")
    exact = {flatten(value), *_base64_cores(raw)}
    folded = {raw.hex(), "".join(f"%{b:02x}" for b in raw)}
    folded |= {quote(value, safe=""), quote_plus(value, safe="")} - {value}
    return ({f for f in map(flatten, exact) if f}, {f.lower() for f in map(flatten, folded) if f})


class SecretScanner:
    """Finds and redacts a fixed set of secret values in any of their printable forms.

    Build one per secret set (``scanner()`` caches them): the forms are computed once, and a
    scan is a whitespace-stripped copy of the text plus one substring search per form;
    the slower span-finding regex runs only when a form is present.
    """

    def __init__(self, secrets: Mapping[str, str] | Iterable[tuple[str, str]]) -> None:
        pairs = list(secrets.items() if isinstance(secrets, Mapping) else secrets)
        self.names = [name for name, value in pairs if value]
        self._needles: list[tuple[str, str, bool]] = []  # (name, flat form, ignore case)
        for name, value in pairs:
            if not value:
                continue
            exact, folded = _forms(value)
            self._needles += [(name, f, False) for f in sorted(exact, key=len, reverse=True)]
            self._needles += [(name, f, True) for f in sorted(folded, key=len, reverse=True)]
        self.longest = max((len(n[1]) for n in self._needles), default=0)
        self._prefixes = {n[1][:i] for n in self._needles if not n[2] for i in range(MIN_HELD, len(n[1]))}
        self._folded_prefixes = {n[1][:i] for n in self._needles if n[2] for i in range(MIN_HELD, len(n[1]))}
        self._patterns: dict[tuple[str, bool], re.Pattern[str]] = {}

    def __bool__(self) -> bool:
        return bool(self._needles)

    def __repr__(self) -> str:
        return f"SecretScanner({', '.join('$' + n for n in self.names)})"  # names, never values

    def _present(self, text: str) -> list[tuple[str, str, bool]]:
        if not self._needles or not text:
            return []
        flat = flatten(text)
        lowered: str | None = None
        found = []
        for needle in self._needles:
            if needle[2]:
                lowered = flat.lower() if lowered is None else lowered
                if needle[1] in lowered:
                    found.append(needle)
            elif needle[1] in flat:
                found.append(needle)
        return found

    def find(self, text: str) -> str | None:
        """The name of the first secret found in ``text`` in any form, else None."""
        found = self._present(text)
        return found[0][0] if found else None

    def redact(self, text: str) -> tuple[str, list[str]]:
        """``text`` with every form of every secret replaced by ``[redacted $NAME]``; the names."""
        found = self._present(text)
        if not found:
            return text, []
        for name, form, fold in found:
            pattern = self._patterns.get((form, fold))
            if pattern is None:
                pattern = re.compile(_SEP_BETWEEN.join(map(re.escape, form)), re.IGNORECASE if fold else 0)
                self._patterns[(form, fold)] = pattern
            text = pattern.sub(marker(name).replace("\\", r"\\"), text)
        names = list(dict.fromkeys(n for n, _, _ in found))
        if self._present(text):  # overlapping forms left a spliced one: lose the text, not the key
            text = " ".join(marker(n) for n in names)
        return text, names

    def held_from(self, text: str) -> int:
        """Where the tail of ``text`` that may begin a secret starts (``len(text)``: none).

        Live output arrives in chunks; a tail that could be a secret's first characters is
        held until the next chunk shows whether it is.
        """
        if not self._needles:
            return len(text)
        window = text[-4 * self.longest:]
        start = len(text) - len(window)
        positions = [i for i, c in enumerate(window) if not c.isspace() and c not in _INVISIBLE]
        chars = "".join(window[i] for i in positions)
        for j in range(max(0, len(chars) - self.longest + 1), len(chars) - MIN_HELD + 1):
            tail = chars[j:]
            if tail in self._prefixes or tail.lower() in self._folded_prefixes:
                return start + positions[j]
        return len(text)


@functools.lru_cache(maxsize=16)
def _cached(pairs: tuple[tuple[str, str], ...]) -> SecretScanner:
    return SecretScanner(pairs)


def scanner(secrets: Mapping[str, str] | Iterable[tuple[str, str]]) -> SecretScanner:
    """The ``SecretScanner`` for ``secrets``, built once per distinct set."""
    pairs = secrets.items() if isinstance(secrets, Mapping) else secrets
    return _cached(tuple(sorted(pairs)))


def _strings(obj: Any) -> Iterable[str]:
    """Every string in a JSON-like value, lists of strings joined (nbformat's multi-line text)."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(obj, (list, tuple)):
        if obj and all(isinstance(x, str) for x in obj):
            yield "".join(obj)
        else:
            for x in obj:
                yield from _strings(x)


def find_secret(text: Any, secrets: Mapping[str, str] | Iterable[tuple[str, str]]) -> str | None:
    """The name of the first secret whose value occurs in ``text`` (a string, or a JSON-like
    value whose strings are searched: serialised JSON splits lines with ``\\n`` escapes)."""
    found = scanner(secrets)
    if not found:
        return None
    if isinstance(text, str):
        return found.find(text)
    for s in _strings(text):
        name = found.find(s)
        if name:
            return name
    return None
