"""Whether a value of the user's holds a secret: by its name, its text, or anywhere inside.

The rule for what may go *into* the sandbox (which has a network) and what the model may
be told about the user's variables. A name looks secret when one of its parts is a word
for a credential (``db_pass``, ``passwd``, ``pwd``, ``apiKey``, ``dsn``, ``conn_str``,
``auth``…) or it contains one of the environment's markers (KEY, TOKEN, SECRET, PASSWORD:
the sibling's scrub rule). A text is secret when it holds the value of one of the
environment's secrets (``trust.secrets.find_secret``, every printable form), looks like a
provider's key (``sk-…``, ``ghp_…``, ``AKIA…``, a private key block, a JWT) or is a URL
with ``user:password@``. ``secret_inside`` looks through containers, objects' attributes
and DataFrame cells (bounded) and says where, in a sentence.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .secrets import SECRET_MARKERS, find_secret

__all__ = ["credential_url", "key_like", "key_like_redacted", "own_object", "secret_file", "secret_inside",
           "secret_name", "secret_text"]

_MARKERS = (*SECRET_MARKERS, "PASSWD", "CREDENTIAL", "APIKEY")
_WORDS = {"pass", "pwd", "pw", "passwd", "passphrase", "dsn", "conn", "connstr", "connection",
          "auth", "authz", "authn", "cred", "creds", "cookie", "cookies", "jwt", "bearer", "otp",
          "private", "privkey"}
_PREFIXES = ("passw", "authori", "authtok", "authkey", "credential", "secret", "token")
_PARTS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_KEY = re.compile(
    r"(?:sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}|\bAKIA[0-9A-Z]{16}\b|\bAIza[0-9A-Za-z_\-]{35}|\bhf_[A-Za-z0-9]{30,}"
    r"|glpat-[A-Za-z0-9_\-]{20,}|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.)")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:[^/\s@]+@")
MAX_SEEN = 20_000  # values looked at inside one value (a big list is checked at its head)


def secret_name(name: str) -> bool:
    """True when ``name`` reads as a credential's (``db_pass``, ``apiKey``, ``DATABASE_URL`` no)."""
    if any(m in name.upper() for m in _MARKERS):
        return True
    parts = [p.lower() for p in _PARTS.findall(name)]
    return any(p in _WORDS or p.startswith(_PREFIXES) for p in parts)


# Files that hold keys or credentials whatever their content looks like: never previewed,
# never offered to a model on ipyagent's own initiative.
_KEY_SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".kdbx", ".gpg", ".pgp",
                 ".asc", ".ovpn", ".ppk", ".crt", ".cer", ".der")
_KEY_FILES = {"id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk",
              "authorized_keys", "known_hosts", "htpasswd", "shadow", "passwd", "netrc", "pgpass",
              "pypirc", "npmrc", "git-credentials", "kubeconfig"}


def secret_file(path: str) -> str | None:
    """Why the file at ``path`` (a workspace path) is not one to show a model unasked:
    a dotfile or a file in a dot-folder (``.env``, ``.ssh/…``), a key file (``id_rsa``,
    ``*.pem``) or a name that reads as a credential's (``secrets.yaml``); None otherwise."""
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    if any(p.startswith(".") for p in parts):
        return "a dotfile (or in a dot-folder): such files hold settings and secrets"
    name = parts[-1] if parts else ""
    stem = name.lower().split(".", 1)[0]
    if name.lower().endswith(_KEY_SUFFIXES) or stem in _KEY_FILES or name.lower() in _KEY_FILES:
        return "a key or credentials file"
    if secret_name(name.rsplit(".", 1)[0]):
        return "named like a secret"
    return None


def key_like_redacted(text: str) -> str:
    """``text`` with everything shaped like a provider's or a private key replaced."""
    return _KEY.sub("[redacted: looks like a key]", text)


def key_like(text: str) -> bool:
    """True when ``text`` holds something shaped like a provider's key or a private key."""
    return _KEY.search(text) is not None


def credential_url(text: str) -> bool:
    """True when ``text`` holds a URL with ``user:password@`` before its host."""
    return _URL.search(text) is not None


def secret_text(text: str, secrets: Mapping[str, str]) -> str | None:
    """Why ``text`` is secret (``holds the value of $NAME``, ``looks like an API key``…), or None."""
    found = find_secret(text, secrets) if secrets else None
    if found:
        return f"holds the value of ${found}"
    if key_like(text):
        return "looks like an API key"
    if credential_url(text):
        return "holds a password in a URL"
    return None


def own_object(value: Any) -> bool:
    """True for ipyagent's own objects (the agent, its context…): never offered or copied."""
    module = getattr(type(value), "__module__", "") or ""
    return module == "ipyagent" or module.startswith("ipyagent.")


def secret_inside(value: Any, secrets: Mapping[str, str], where: str = "the value") -> str | None:
    """Where ``value`` holds a secret, as a sentence (``cfg['db']['password'] is named like a
    secret``), or None. Looks through dicts, lists, tuples, sets, objects' attributes, numpy
    string arrays and DataFrame cells, up to ``MAX_SEEN`` values."""
    seen: set[int] = set()
    stack: list[tuple[Any, str, bool]] = [(value, where, False)]
    budget = MAX_SEEN
    while stack and budget > 0:
        v, at, named = stack.pop()
        budget -= 1
        if isinstance(v, (str, bytes, bytearray)):
            text = v if isinstance(v, str) else bytes(v).decode("latin-1")
            why = secret_text(text, secrets)
            if why:
                return f"{at} {why}"
            if named and text.strip():
                return f"{at} is named like a secret"
            continue
        if id(v) in seen or v is None or isinstance(v, (bool, int, float, complex)):
            continue
        seen.add(id(v))
        if own_object(v):
            return f"{at} is ipyagent's own {type(v).__name__}"
        stack.extend(_inside(v, at, secrets))
    return None


_PLAIN_KEY = re.compile(r"^[A-Za-z_][\w .\-]{0,30}$")


def _key(k: Any, i: int, secrets: Mapping[str, str]) -> str:
    """How to name key ``k`` (the ``i``-th) in a sentence: itself when it is a short plain
    word or a number, else its position (a key may be the secret itself)."""
    if isinstance(k, int) and not isinstance(k, bool):
        return repr(k)
    if isinstance(k, str) and _PLAIN_KEY.match(k) and secret_text(k, secrets) is None:
        return repr(k)
    return f"<key #{i}>"


def _inside(v: Any, at: str, secrets: Mapping[str, str]) -> list[tuple[Any, str, bool]]:
    """The values directly inside ``v``: (value, where, whether its name looks secret)."""
    if isinstance(v, Mapping):
        out = []
        for i, (k, x) in enumerate(list(v.items())[:MAX_SEEN]):
            out.append((k, f"{at} key #{i}", False))
            out.append((x, f"{at}[{_key(k, i, secrets)}]", isinstance(k, str) and secret_name(k)))
        return out
    if isinstance(v, (list, tuple, set, frozenset)):
        return [(x, f"{at}[{i}]", False) for i, x in enumerate(list(v)[:MAX_SEEN])]
    kind = type(v).__name__
    if kind == "ndarray" and getattr(getattr(v, "dtype", None), "kind", "") in "USO":
        flat = v.ravel()[:MAX_SEEN]
        return [(x, f"{at}[…]", False) for x in flat.tolist()]
    if kind == "DataFrame" and hasattr(v, "select_dtypes"):
        out = [(c, f"{at} column #{i}", False) for i, c in enumerate(v.columns)]
        for i, column in enumerate(v.columns):
            cells = v.iloc[:, i]
            if getattr(cells, "ndim", 1) != 1 or getattr(cells.dtype, "kind", "O") not in "OUS":
                continue
            out += [(x, f"{at}[{_key(column, i, secrets)}]", secret_name(str(column)))
                    for x in cells.iloc[:MAX_SEEN].tolist()]
        return out
    if kind == "Series" and getattr(getattr(v, "dtype", None), "kind", "") in "OUS":
        named = secret_name(str(getattr(v, "name", "")))
        return [(x, f"{at}[…]", named) for x in v.iloc[:MAX_SEEN].tolist()]
    attrs = getattr(v, "__dict__", None)
    if isinstance(attrs, dict) and not isinstance(v, type):
        return [(x, f"{at}.{k}", secret_name(k)) for k, x in list(attrs.items())[:MAX_SEEN]]
    return []
