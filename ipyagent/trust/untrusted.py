"""Untrusted text made inert for ``text/markdown`` and ``text/html`` outputs.

Why: JupyterLab, Notebook 7 and VS Code render a cell's own outputs as *trusted*, so raw
HTML in a model's reply (``<img src=x onerror=…>``) would run script in the page — script
that can click Approve. Everything the model writes, a tool returns or a file we did not
write passes through here before it reaches a rich output.

``markdown_text`` keeps Markdown formatting but lets no HTML through; ``fence`` and
``inline_code`` show text as code that its own backticks cannot close; ``markdown_literal``
shows a name or id exactly as it is; ``html_text`` is for our own HTML; ``sanitize_html``
(nh3) and ``sibling_bundle`` are for what the model's code displays in the sibling kernel.
"""

from __future__ import annotations

import base64
import html
import re
from html.parser import HTMLParser
from typing import Any

__all__ = ["dropped_note", "fence", "html_text", "inline_code", "markdown_literal",
           "markdown_text", "sanitize_html", "sibling_bundle"]

_PUNCT = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_SAFE_SCHEMES = ("http", "https", "mailto")
_FENCE_OPEN = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_AUTOLINK = re.compile(r"<(?:https?://|mailto:)[^\s<>\"'`\\]*>", re.IGNORECASE)
_SCHEME = re.compile(r"([a-z][a-z0-9+.\-]*):")
_MATH_BEGIN = re.compile(r"\\begin\{([A-Za-z]*\*?)\}")
_BLANK = re.compile(r"[ \t]*(\n|$)")
# What JupyterLab's removeMath takes for a math delimiter. It cuts math out *before* the
# Markdown parser and pastes it back escaping only & < >: a cut that takes a fence's
# opening line turns its code into live HTML, and a cut inside a link's target or title
# pastes raw '"' into an attribute. So where these can occur, every fence gets a blank
# line on each side (a cut never crosses one) and no raw '"' is left outside fences.
# marked (JupyterLab's Markdown parser) reads a link reference definition across lines:
# its label, its destination and a "…" or (…) title may continue onto the next lines, so a
# definition started in prose could swallow a fence's opening line and turn the code under
# it into live HTML. A line that no label, destination or title can cross ends it first.
_DEF_START = re.compile(r"^[ \t>*+\-0-9.)]*\[", re.MULTILINE)  # list/quote markers too
_DEF_STOP = "<!-- [(\"' -->"
_MATHY = re.compile(r"\$|\\\\[(\[]|\\(?:begin|end)\{", re.IGNORECASE)


def html_text(text: str) -> str:
    """``text`` for an HTML element's content or a quoted attribute."""
    return html.escape(str(text))


def fence(text: str, lang: str = "") -> str:
    """A fenced code block that no backtick run inside ``text`` can close."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{_info(lang)}\n{text.rstrip()}\n{ticks}"


def inline_code(text: str) -> str:
    """``text`` as a one-line code span (for a name or id shown inline)."""
    text = " ".join(str(text).splitlines())  # a blank line would end the paragraph
    if not text:
        return "` `"
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def markdown_literal(text: str) -> str:
    """``text`` shown exactly as it is in Markdown (one line, no formatting, no HTML)."""
    out = []
    for ch in " ".join(str(text).splitlines()):
        if ch == "<":
            out.append("&lt;")
        elif ch == "&":
            out.append("&amp;")
        elif ch == '"':
            out.append("&quot;")  # not \", which a math cut would paste raw into an attribute
        elif ch in _PUNCT:
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def markdown_text(text: str) -> str:
    """Markdown from an untrusted source: its formatting kept, no raw HTML, no live links
    to ``javascript:``/``data:``/… targets, images shown as links (a remote image would
    load, and so leak, as soon as it renders).

    Fenced code is re-emitted with a fence its content cannot close, so code and prose are
    split the same way here and in the browser's Markdown parser; code spans become
    ``<code>`` elements with escaped content, so no parser disagreement about where a span
    ends can let a ``<`` through (spans with no ``<`` and no link syntax stay as written).
    """
    text = str(text).replace("\r\n", "\n").replace("\r", "\n")
    mathy = _MATHY.search(text) is not None
    lines = text.split("\n")
    out: list[str] = []
    prose: list[str] = []
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if m is None or (m.group(2)[0] == "`" and "`" in m.group(3)):
            prose.append(lines[i])
            i += 1
            continue
        if prose:
            chunk = "\n".join(prose)
            out.append(_prose(chunk, mathy))
            if _DEF_START.search(chunk):
                out.append(_DEF_STOP)
            prose = []
        indent, marker = len(m.group(1)), m.group(2)
        close = re.compile(rf"^ {{0,{indent + 3}}}{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not close.match(lines[i]):
            line = lines[i]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))):])
            i += 1
        i += 1  # the closing line (or past the end: an unclosed fence runs to the end)
        pad = " " * indent
        block = fence("\n".join(body), m.group(3).strip().split(" ")[0] if m.group(3) else "")
        block = "\n".join(pad + ln if ln.strip() else ln for ln in block.split("\n"))
        out.append(f"\n{block}\n" if mathy else block)
    if prose:
        out.append(_prose("\n".join(prose), mathy))
    return "\n".join(out)


def _info(lang: str) -> str:
    """A fence's info string that cannot break the fence (no backticks, one word)."""
    return re.sub(r"[^A-Za-z0-9_+#.\-]", "", lang)[:40]


def _code_html(content: str) -> str:
    """A code span's content as a ``<code>`` element the Markdown parser leaves alone."""
    content = content.replace("\n", " ")
    if len(content) > 2 and content[0] == " " and content[-1] == " " and content.strip():
        content = content[1:-1]  # as CommonMark does
    out = []
    for ch in content:
        if ch in "<>&\"":
            out.append(html.escape(ch))
        elif ch in _PUNCT:
            out.append("\\" + ch)  # no emphasis, links or escapes inside the element
        else:
            out.append(ch)
    return "<code>" + "".join(out) + "</code>"


def _unsafe_target(rest: str) -> bool:
    """Whether a link or image destination starting at ``rest`` has a scheme we block."""
    head = html.unescape(rest[:200])
    head = re.sub(r"[\x00-\x20\\]", "", head).lstrip("<").lower()
    m = _SCHEME.match(head)
    return m is not None and m.group(1) not in _SAFE_SCHEMES


def _prose(text: str, mathy: bool = False) -> str:
    """Markdown prose (no fenced code): ``<`` escaped, code spans as elements, links checked;
    if ``mathy``, ``"`` too (see ``_MATHY``)."""
    out: list[str] = []
    n = len(text)
    i = 0
    math: str | None = None  # the closing delimiter while inside math
    while i < n:
        ch = text[i]
        if ch == "\\" and text.startswith("<", i + 1):
            # Not "\<": a bare URL just before it (www.x.com/\<img …>) takes the backslash
            # into its link, and the '<' would open a tag.
            out.append("\\lt " if math is not None else "&lt;")
            i += 2
            continue
        if ch == "\\" and i + 1 < n and text[i + 1] in _PUNCT:
            if math is None and text.startswith(("\\\\(", "\\\\["), i):
                math = "\\\\)" if text[i + 2] == "(" else "\\\\]"
                out.append(text[i:i + 3])
                i += 3
                continue
            if math is not None and text.startswith(math, i):
                out.append(math)
                i += len(math)
                math = None
                continue
            out.append(text[i:i + 2])
            i += 2
            continue
        if ch == "\n" and math is not None and _BLANK.match(text, i + 1):
            math = None  # a blank line ends math, as in JupyterLab's math splitter
        if ch == "$":
            run = "$$" if text.startswith("$$", i) else "$"
            if math is None:
                math = run
            elif math == run:
                math = None
            out.append(run)
            i += len(run)
            continue
        if ch == "\\" and math is None:
            begin = _MATH_BEGIN.match(text, i)
            if begin:
                math = f"\\end{{{begin.group(1)}}}"
                out.append(begin.group(0))
                i = begin.end()
                continue
        if ch == "\\" and math is not None and math.startswith("\\end") and text.startswith(math, i):
            out.append(math)
            i += len(math)
            math = None
            continue
        if ch == "`":
            j = i
            while j < n and text[j] == "`":
                j += 1
            width = j - i
            k = j
            close = -1
            while k < n:
                if text[k] == "`":
                    e = k
                    while e < n and text[e] == "`":
                        e += 1
                    if e - k == width:
                        close = k
                        break
                    k = e
                else:
                    k += 1
            if close < 0:
                out.append("\\`" * width)  # a lone run is literal; it must not pair later
                i = j
                continue
            content = text[j:close]
            # A span that could not make HTML or a link even if a parser saw it as prose
            # stays as written; any other becomes an element with escaped content.
            plain = ("<" not in content and not re.search(r"\][(:]", content)
                     and not (mathy and '"' in content))
            out.append(text[i:close + width] if plain else _code_html(content))
            i = close + width
            continue
        if ch == '"' and mathy:
            out.append("&quot;")
            i += 1
            continue
        if ch == "<":
            auto = _AUTOLINK.match(text, i)
            if auto and math is None:
                out.append(auto.group(0))
                i = auto.end()
                continue
            out.append("\\lt " if math is not None else "&lt;")
            i += 1
            continue
        if ch == "!" and text.startswith("![", i):
            alt = re.match(r"!\[([^\[\]\n]*)\]\(", text[i:])
            if alt:
                label = alt.group(1).strip()
                out.append(f"[image: {_prose(label, mathy)}](" if label else "[image](")
                i += alt.end()
                out.append(_check_target(text, i))
                continue
            out.append("\\!")
            i += 1
            continue
        if ch == "]" and i + 1 < n and text[i + 1] in "(:":
            out.append(text[i:i + 2])
            i += 2
            out.append(_check_target(text, i))
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _check_target(text: str, i: int) -> str:
    """What to insert at ``i`` (just after ``](`` or ``]:``): ``#`` before a blocked target,
    which makes it an in-page fragment."""
    m = re.match(r"[ \t]*\n?[ \t]*", text[i:])
    start = i + (m.end() if m else 0)
    return "#" if _unsafe_target(text[start:]) else ""


# -- HTML from the sibling kernel -------------------------------------------------------
_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "caption", "cite", "code", "col", "colgroup", "dd",
    "del", "details", "dfn", "div", "dl", "dt", "em", "figcaption", "figure", "h1", "h2", "h3",
    "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd", "li", "mark", "ol", "p", "pre", "q", "s",
    "samp", "small", "span", "strike", "strong", "sub", "summary", "sup", "table", "tbody",
    "td", "tfoot", "th", "thead", "tr", "tt", "u", "ul", "var", "wbr",
}
_ATTRIBUTES = {
    "*": {"class", "title", "style", "align", "valign", "lang", "dir"},
    "a": {"href"}, "img": {"src", "alt", "width", "height"},
    "td": {"colspan", "rowspan"}, "th": {"colspan", "rowspan", "scope"},
    "table": {"border", "cellpadding", "cellspacing"}, "ol": {"start", "type"},
}
# CSS that cannot load a URL or move an element over the page (no position, no url()).
_STYLES = {
    "text-align", "vertical-align", "font-weight", "font-style", "font-family", "font-size",
    "color", "background-color", "white-space", "text-decoration", "padding", "padding-left",
    "padding-right", "padding-top", "padding-bottom", "border", "border-collapse",
    "border-bottom", "border-top", "border-left", "border-right", "width", "min-width",
    "max-width", "height",
}
# The classes pandas (DataFrame.to_html, Styler) emits; JupyterLab's own (jp-…) are refused,
# so sibling HTML cannot dress up as the page's widgets.
_CLASS = re.compile(r"(dataframe|index_name|blank|row_heading|col_heading|data|"
                    r"level\d+|row\d+|col\d+|row_trim|col_trim|T_[A-Za-z0-9_]+)")
_IMAGE_SRC = re.compile(r"data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*")
_ACTIVE = {"script", "iframe", "frame", "object", "embed", "form", "input", "button", "style",
           "link", "meta", "base", "svg", "math", "textarea", "select", "applet", "template"}


def _attribute_filter(tag: str, attr: str, value: str) -> str | None:
    if attr == "class":
        kept = [c for c in value.split() if _CLASS.fullmatch(c)]
        return " ".join(kept) or None
    if tag == "img" and attr == "src":
        # Embedded images only: a remote one loads (and leaks) the moment it renders.
        return value if _IMAGE_SRC.fullmatch(value) else None
    if tag == "a" and attr == "href" and value.strip().lower().startswith("data:"):
        return None
    return value


def sanitize_html(markup: str) -> str:
    """HTML with only inert content: tables (pandas' too), text formatting, embedded images
    and http(s) links; no script, event handlers, styles sheets, frames, forms or SVG."""
    import nh3

    return str(nh3.clean(markup, tags=_TAGS, attributes=_ATTRIBUTES,
                         url_schemes={"http", "https", "mailto", "data"},
                         attribute_filter=_attribute_filter, filter_style_properties=_STYLES,
                         strip_comments=True, link_rel="noopener noreferrer"))


class _Inventory(HTMLParser):
    """The active parts of some HTML (for saying what sanitizing removed)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _ACTIVE:
            self.found.add(f"<{tag}>")
        for name, value in attrs:
            if name.startswith("on"):
                self.found.add(f"{name}=")
            elif value and "javascript:" in re.sub(r"[\x00-\x20]", "", value).lower():
                self.found.add("javascript: URL")


def _active_parts(markup: str) -> list[str]:
    parser = _Inventory()
    try:
        parser.feed(markup)
        parser.close()
    except Exception:  # noqa: BLE001 - an inventory for a note; never break the output
        return ["unparsable markup"]
    return sorted(parser.found)


_KEEP = ("text/plain", "image/png", "image/jpeg", "image/gif", "text/latex", "application/json")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "".join(value)


def dropped_note(what: list[str]) -> str:
    """The one line that says what was kept out of an output, and why."""
    return f"ipyagent: {'; '.join(what)} from the sibling kernel (untrusted)"


def sibling_bundle(data: dict[str, Any], metadata: dict[str, Any] | None = None,
                   ) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """A display bundle from the model's code made safe to show in a trusted cell:
    ``(data, metadata, note)``; ``note`` says what was dropped or removed, if anything.

    Kept: plain text, PNG/JPEG/GIF, LaTeX (MathJax runs in its safe mode), JSON; SVG only
    as an ``<img>`` (inline SVG can carry script); HTML and Markdown made inert. Dropped:
    JavaScript, widget views (their models live in the sibling kernel) and every other type.
    """
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    removed: list[str] = []
    for mime, value in data.items():
        if mime in _KEEP:
            kept[mime] = value
        elif mime == "text/html":
            markup = _text(value)
            removed += _active_parts(markup)
            kept[mime] = sanitize_html(markup)
        elif mime == "text/markdown":
            kept[mime] = markdown_text(_text(value))
        elif mime == "image/svg+xml":
            if "text/html" not in data:
                svg = base64.b64encode(_text(value).encode("utf-8")).decode("ascii")
                kept["text/html"] = f"<img src=\"data:image/svg+xml;base64,{svg}\" alt=\"SVG image\">"
        else:
            dropped.append(mime)
    meta = {k: v for k, v in (metadata or {}).items() if k in kept or "/" not in k}
    what = []
    if dropped:
        what.append(f"dropped {', '.join(dropped)}")
    if removed:
        what.append(f"removed {', '.join(removed)} from its HTML")
    return kept, meta, dropped_note(what) if what else None
