"""Whether a memory file was made by ipyagent for this user (or agreed to), or came from elsewhere.

A project's ``.ipyagent/memory.sqlite`` can come with a cloned repository, an archive or a
shared folder, and its notes would be put before the model as remembered facts. So a store
that ipyagent makes carries a stamp: a random nonce and its HMAC under a key kept in the
user's own config directory (``~/.ipyagent/memory-key``, mode 0600; ``$IPYAGENT_MEMORY_KEY_FILE``
names another file), written in the same transaction as the schema. A file without a stamp
this key verifies is not read; ``%agent memory trust`` (``Memory.trust``) stamps it once the
person agreed. Nobody without the key can forge a stamp; the user's own file keeps its
stamp when it moves or is copied.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3
import tempfile
from pathlib import Path

__all__ = ["KEY_ENV", "key_file", "made_here", "stamp", "NOT_MADE_HERE"]

KEY_ENV = "IPYAGENT_MEMORY_KEY_FILE"
NOT_MADE_HERE = ("{path} was not made by ipyagent for you (it may have come with the folder), so "
                 "its notes are not read; to read them: %agent memory trust{flag}")


def key_file() -> Path:
    """Where the stamp key lives."""
    return Path(os.environ.get(KEY_ENV) or os.path.join(os.path.expanduser("~"), ".ipyagent",
                                                        "memory-key"))


def _key() -> bytes:
    """The user's stamp key, made on first use (atomically: two kernels agree on one)."""
    path = key_file()
    try:
        return bytes.fromhex(path.read_text().strip())
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".memory-key-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        os.chmod(tmp, 0o600)
        try:
            os.link(tmp, path)  # fails if another process made it first: theirs stands
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)
    return bytes.fromhex(path.read_text().strip())


def _mac(nonce: str) -> str:
    return hmac.new(_key(), f"ipyagent memory store {nonce}".encode(), hashlib.sha256).hexdigest()


def stamp(conn: sqlite3.Connection) -> None:
    """Mark the store on ``conn`` as made here (inside the caller's transaction)."""
    conn.execute("CREATE TABLE IF NOT EXISTS made (nonce TEXT NOT NULL, mac TEXT NOT NULL)")
    conn.execute("DELETE FROM made")
    nonce = secrets.token_hex(16)
    conn.execute("INSERT INTO made VALUES (?, ?)", (nonce, _mac(nonce)))


def made_here(conn: sqlite3.Connection) -> bool:
    """True when the store on ``conn`` carries a stamp this user's key verifies."""
    try:
        rows = conn.execute("SELECT nonce, mac FROM made LIMIT 4").fetchall()
    except sqlite3.OperationalError:  # no such table: an older or a foreign file
        return False
    return any(isinstance(n, str) and isinstance(m, str) and hmac.compare_digest(m, _mac(n))
               for n, m in rows)
