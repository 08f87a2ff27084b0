"""Untrusted text made inert: Markdown keeps its formatting but no HTML, script or live
``javascript:`` link; code cannot be closed by its own backticks; sibling HTML is cleaned."""

from __future__ import annotations

import pytest

from ipyagent.trust.untrusted import (
    fence,
    inline_code,
    markdown_literal,
    markdown_text,
    sanitize_html,
    sibling_bundle,
)
from tests.helpers.inert import ATTACKS, elements, problems, render, render_jupyterlab

ANSWER = """## Result

The value is **1267650600228229401496703205376**, and a < b holds for *every* pair.

| n | 2**n |
|---|------|
| 1 | 2 |
| 10 | 1024 |

1. Compute it:
   ```python
   value = 2**100
   if value < 10**31 and value > 0:
       print("<ok>")
   ```
2. Check with `len(str(value)) < 32`.

> A quote, and a [link](https://docs.python.org/3/).
"""


def text_of(markup: str) -> str:
    import html
    import re

    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


@pytest.mark.parametrize("attack", ATTACKS)
def test_markdown_text_lets_no_html_script_or_live_link_through(attack: str) -> None:
    for where in (attack, f"Some text {attack} more", f"- item {attack}", f"| a |\n|---|\n| {attack} |",
                  f"**{attack}**", f"[{attack}](https://ok.example)"):
        assert problems(render(where)), f"the test payload is inert already: {where!r}"
        assert problems(render(markdown_text(where))) == [], where


def test_an_ordinary_answer_renders_the_same() -> None:
    before, after = render(ANSWER), render(markdown_text(ANSWER))
    assert elements(after) == elements(before)  # headings, bold, table, list, code, quote
    assert text_of(after) == text_of(before)  # `a < b`, the code's '<ok>' read the same
    assert "print(&quot;&lt;ok&gt;&quot;)" in after or 'print("&lt;ok&gt;")' in after


def test_code_that_holds_a_fence_or_backticks_stays_code() -> None:
    attack = "```\n<img src=x onerror=alert(1)>\n```"
    for code in (attack, "`` ` ``", "~~~\n<script>x</script>"):
        block = fence(code, "python")
        html = render(f"text\n\n{block}\n\n<b>after</b>")
        assert problems(html) == [], html
        assert elements(html).count("pre") == 1
    # A fence in the model's own Markdown that an inner fence would close early.
    html = render(markdown_text("````\n```\n<script>alert(1)</script>\n```\n````\nafter"))
    assert problems(html) == [] and "&lt;script&gt;" in html


def test_fences_in_lists_and_unclosed_ones_cannot_leak() -> None:
    for text in ("- item\n\n  ```\n<img src=x onerror=alert(1)>\n  ```",
                 "text\n    ```\n    <img src=x onerror=alert(1)>",
                 "```python\nstill streaming <img src=x onerror=alert(1)>",
                 "`unclosed <img src=x onerror=alert(1)>",
                 "`a\n\n<img src=x onerror=alert(1)>\n\n`"):
        assert problems(render(markdown_text(text))) == [], text


def test_math_keeps_working() -> None:
    out = markdown_text(r"for $x < 0$ and $$\begin{aligned} a &= b \\ c &< d \end{aligned}$$")
    assert "$x \\lt  0$" in out and "a &= b" in out  # MathJax reads \lt; & stays alignment
    assert "<" not in out


def test_images_become_links_and_links_keep_working() -> None:
    html = render(markdown_text("![a plot](http://evil.example/p.png?k=secret) see "
                                "[docs](https://example.org) and <https://example.org/x>"))
    assert problems(html) == []
    assert "<img" not in html and 'href="http://evil.example/p.png?k=secret"' in html
    assert 'href="https://example.org"' in html and 'href="https://example.org/x"' in html


def test_inline_code_and_literal_survive_their_content() -> None:
    for name in ("gpt`</code><img src=x onerror=alert(1)>`", "``", "a\n\n<script>x</script>"):
        html = render(f"model {inline_code(name)} and {markdown_literal(name)} end")
        assert problems(html) == [], html
        assert elements(html) == ["p", "code"]


def test_sanitize_html_keeps_pandas_tables_and_drops_script() -> None:
    # What pandas' DataFrame.to_html / _repr_html_ emits (pandas is not installed here).
    frame = ('<div>\n<style scoped>\n    .dataframe tbody tr th:only-of-type {\n'
             '        vertical-align: middle;\n    }\n</style>\n'
             '<table border="1" class="dataframe">\n  <thead>\n'
             '    <tr style="text-align: right;">\n      <th></th>\n      <th>a</th>\n'
             '    </tr>\n  </thead>\n  <tbody>\n    <tr>\n      <th>0</th>\n'
             '      <td>1</td>\n    </tr>\n  </tbody>\n</table>\n</div>')
    clean = sanitize_html(frame)
    assert elements(clean) == ["div", "table", "thead", "tr", "th", "th", "tbody", "tr", "th", "td"]
    assert 'class="dataframe"' in clean and "text-align:right" in clean.replace(" ", "")
    hostile = ('<b onclick="x()">b</b><script>alert(1)</script><iframe src="https://e"></iframe>'
               '<a href="javascript:alert(1)">a</a><img src="http://evil/x.png">'
               '<div class="jp-Dialog" style="position:fixed;top:0;color:red">over</div>'
               '<svg><script>alert(1)</script></svg><form action="/x"><input></form>')
    assert problems(hostile)
    clean = sanitize_html(hostile)
    assert problems(clean) == [], clean
    assert "position" not in clean and "jp-Dialog" not in clean and "color:red" in clean


def test_sibling_bundle_keeps_images_and_drops_script() -> None:
    svg = '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><circle r="4"/></svg>'
    data, meta, note = sibling_bundle({"image/svg+xml": svg, "text/plain": "<svg>"})
    assert "image/svg+xml" not in data and problems(data["text/html"]) == []
    assert data["text/html"].startswith('<img src="data:image/svg+xml;base64,') and note is None
    data, meta, note = sibling_bundle({"application/javascript": "alert(1)",
                                       "text/plain": "<Javascript>"})
    assert data == {"text/plain": "<Javascript>"}
    assert note == ("ipyagent: dropped application/javascript from the sibling kernel "
                    "(untrusted)")
    data, meta, note = sibling_bundle({"text/html": "<b>x</b><script>1</script>",
                                       "image/png": "iVBOR", "text/plain": "x"},
                                      {"image/png": {"width": 3}})
    assert data["image/png"] == "iVBOR" and meta == {"image/png": {"width": 3}}
    assert note is not None and "removed <script>" in note


# JupyterLab cuts math ($…$, $$…$$, \\(…\\), \begin…\end) out before marked parses the
# Markdown and pastes it back escaping only & < >; marked reads a reference definition
# across lines; a bare URL takes a backslash into its link. Each of these ran script (or
# put an event handler on a link) in real JupyterLab + Chromium on the old markdown_text.
PARSER_GAPS = [
    # a math cut takes an indented fence's opening line: the code under it is HTML
    "$x\n ```\n$ <img src=x onerror=alert(1)>\n ```",
    # a math cut inside a link target or title pastes '"' into the attribute
    "[x]($\" onmouseover=\"alert(1)$)",
    "[x](http://a.example \"$\" onmouseover=\"alert(1)$\")",
    "[x](http://a.example \"${$\" onmouseover=\"alert(1)$\")",
    "[x](<$\" onmouseover=\"alert(1)$>)",
    "[x](http://a '$\n```\n\" onmouseover=\"alert(1)\n```\n$')",
    # a definition whose destination is the next line: a fence's opening line
    "[y]: \n   ~~~\n<img src=x onerror=alert(1)>\n~~~",
    "[y]:\n```\n<img src=x onerror=alert(1)>\n```\n\n[y]",
    # \< after a bare URL: the URL takes the backslash, the '<' opens a tag
    "see http://a.example/\\<img src=x onerror=alert(1)>",
]


@pytest.mark.parametrize("attack", PARSER_GAPS)
def test_what_jupyterlab_cuts_or_reads_across_lines_stays_inert(attack: str) -> None:
    out = markdown_text(attack)
    assert problems(render_jupyterlab(out)) == [], out
    assert problems(render(out)) == [], out


def test_math_fences_and_definitions_still_render() -> None:
    text = ("The mean is $\\bar x = \\frac{1}{n}\\sum x_i$ and \"quoted\".\n\n"
            "- step\n  ```python\n  print(\"$HOME\")\n  ```\n\n[1]: https://docs.python.org/3/\n"
            "```\ncode\n```")
    html = render_jupyterlab(markdown_text(text))
    assert problems(html) == [] and elements(html).count("pre") == 2, html
    assert 'print("$HOME")' in html.replace("&quot;", '"'), html  # code as written
    assert "\\bar x" in html and '"quoted"' in text_of(html), html
