"""Text that can always be encoded: UTF-16 surrogate halves repaired.

Why: JSON's ``\\ud83d\\ude00`` escape pair, cut in two by a streaming server, decodes to
two lone halves; Python keeps them, but UTF-8 (requests, notebooks, SQLite) refuses
them. One repair for every place text leaves the process.
"""

from __future__ import annotations

__all__ = ["repair_surrogates"]


def repair_surrogates(text: str) -> str:
    """Halves side by side become their character; a lone half becomes U+FFFD."""
    if not any("\ud800" <= ch <= "\udfff" for ch in text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
