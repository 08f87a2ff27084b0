"""What ran in this process after a yes: the python code and the copies approved here.

Why: a rewind re-runs the kept python calls in a fresh sibling. Code that already ran in
this session, approved as it ran (by a person or by the user's policy), runs again without
asking; code that came in a transcript (``%agent load`` without ``--rerun``) is asked about
first, as ``--rerun`` asks. It is kept by the sha256 of what ran, in memory only: nothing
in an item (its ``meta`` may come from a file) can claim it, and the same code approved
once is the same code, wherever its item came from (a summary, a branch's copy).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

__all__ = ["RanHere", "code_key"]


def code_key(tool: str, code: str) -> str:
    """The key of ``code`` run by ``tool``."""
    return tool + ":" + hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()


class RanHere:
    """The code and copies approved and run in this process (shared by a conversation's
    branches)."""

    def __init__(self) -> None:
        self._keys: set[str] = set()

    def add_code(self, tool: str, code: str) -> None:
        """``code`` ran through ``tool`` after its approval."""
        self._keys.add(code_key(tool, code))

    def add_copy(self, sha256: Any) -> None:
        """A copy with this payload hash was made into the sibling after its approval."""
        if isinstance(sha256, str) and sha256:
            self._keys.add("copy:" + sha256)

    def has_code(self, tool: str, code: str) -> bool:
        return code_key(tool, code) in self._keys

    def has_copy(self, sha256: Any) -> bool:
        return isinstance(sha256, str) and ("copy:" + sha256) in self._keys

    def record_step(self, calls: Iterable[Any], results: Iterable[Any]) -> None:
        """The python calls of a live step that ran (not denied, skipped or interrupted), the
        files its file tools wrote, and the copies a ``NameError`` made after a yes."""
        ran = {r.call_id: r for r in results}
        for call in calls:
            result = ran.get(call.id)
            meta = getattr(result, "meta", None) or {}
            if result is None or any(meta.get(k) for k in ("denied", "skipped", "interrupted")):
                continue
            code = call.arguments.get("code") if isinstance(call.arguments, dict) else None
            if call.name == "python" and isinstance(code, str):
                self.add_code("python", code)
            written = meta.get("file")
            if isinstance(written, dict) and isinstance(written.get("text"), str) \
                    and not getattr(result, "error", False):
                self.add_code(f"file:{written.get('path')}", written["text"])
            for copy in meta.get("copies") or ():
                if isinstance(copy, dict) and copy.get("copied"):
                    self.add_copy(copy.get("sha256"))

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"<RanHere: {len(self)} approved piece(s) of code and copies>"
