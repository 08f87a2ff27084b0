"""A web page's readable text: the stdlib ``html.parser``, no new dependency.

What a reader would not see is dropped: ``<script>``, ``<style>``, ``<noscript>``,
``<template>``, ``<svg>``, the ``<head>`` (its ``<title>`` is kept apart), and elements
marked hidden (``hidden``, ``aria-hidden="true"``, an inline ``display:none`` or
``visibility:hidden``) — hidden text is where a page hides instructions meant for a model
rather than for people. Block elements become line breaks, list items get a ``- ``,
table cells are separated by `` | ``, entities are decoded, runs of spaces fold into one
(except in ``<pre>``) and blank lines into one (paragraphs, headings, lists and tables
get one around them; other blocks a line break).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser

__all__ = ["PageText", "html_to_text", "feed_leniently"]

_DROPPED = {"script", "style", "noscript", "template", "svg", "math", "head", "iframe",
            "object", "canvas", "select", "button"}
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
         "param", "source", "track", "wbr"}
_BLOCK = {"address", "article", "aside", "blockquote", "body", "dd", "details", "dialog",
          "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2",
          "h3", "h4", "h5", "h6", "header", "hr", "html", "li", "main", "nav", "ol", "p",
          "pre", "section", "summary", "table", "tbody", "thead", "tfoot", "tr", "ul",
          "caption", "br"}
_PARAGRAPH = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "dl", "table", "pre",
              "blockquote", "figure", "hr", "section", "article", "header", "footer", "nav",
              "main", "aside", "form", "details"}  # a blank line around; other blocks: a line break
_CELLS = {"td", "th"}
# What may stand in <head>; anything else ends it, as a browser reads a page whose
# optional </head> is left out.
_HEAD_CONTENT = {"title", "meta", "link", "style", "script", "base", "noscript", "template"}
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
_BLANKS = re.compile(r"\n(?:[ \t]*\n){2,}")


@dataclass
class PageText:
    """A page as text: its ``<title>`` (may be empty) and its readable ``text``."""

    title: str
    text: str

    def __repr__(self) -> str:
        return f"PageText(title={self.title[:40]!r}, {len(self.text)} chars)"


def _hidden(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    """True for an element a browser would not show (its attributes say so)."""
    for name, value in attrs:
        if name == "hidden":
            return True
        if name == "aria-hidden" and (value or "").strip().lower() == "true":
            return True
        if name == "style" and value and _HIDDEN_STYLE.search(value):
            return True
    return False


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self.skip: list[str] = []  # open dropped elements, innermost last
        self.in_title = False
        self.pre = 0
        self.had_pre = False
        self.cells = 0  # cells so far in this table row

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title" and not self.skip_below_head():
            self.in_title = True
            return
        if self.skip == ["head"] and tag not in _HEAD_CONTENT:
            self.skip.pop()  # <body> (or content) began without a </head>
        if self.skip:
            if tag == self.skip[-1] and tag not in _VOID:
                self.skip.append(tag)  # the same element nested: its end is not ours yet
            return
        if tag not in _VOID and (tag in _DROPPED or _hidden(tag, attrs)):
            self.skip.append(tag)
            return
        if tag == "pre":
            self.pre += 1
            self.had_pre = True
        if tag == "li":
            self.parts.append("\n- ")
        elif tag in _BLOCK:
            self.parts.append("\n\n" if tag in _PARAGRAPH else "\n")
        elif tag in _CELLS:
            self.parts.append(" | " if self.cells else "")
            self.cells += 1
        if tag == "tr":
            self.cells = 0

    def skip_below_head(self) -> bool:
        """True inside a dropped element other than ``<head>`` (a title in an SVG)."""
        return any(t != "head" for t in self.skip)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if not self.skip and tag in _BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
            return
        if self.skip:
            if tag == self.skip[-1]:
                self.skip.pop()
            elif tag in self.skip:  # unclosed elements inside: close them all
                del self.skip[self.skip.index(tag):]
            return
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag in _BLOCK and tag not in ("li", "tr", "dt", "dd"):  # the next one starts a line
            self.parts.append("\n\n" if tag in _PARAGRAPH else "\n")

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        elif not self.skip:
            self.parts.append(data if self.pre else _SPACES.sub(" ", data.replace("\n", " ")))


def feed_leniently(parser: HTMLParser, markup: str) -> None:
    """Feed ``markup`` to ``parser``; broken HTML keeps what was read (html.parser is lenient)."""
    try:
        parser.feed(markup)
        parser.close()
    except Exception:  # noqa: BLE001 - keep what was read
        pass


def html_to_text(markup: str) -> PageText:
    """``markup``'s title and readable text (never raises on broken HTML)."""
    reader = _Reader()
    feed_leniently(reader, markup)
    keep_indent = reader.had_pre  # code in <pre> keeps its indentation
    lines = [line.rstrip() if keep_indent else line.strip()
             for line in "".join(reader.parts).split("\n")]
    text = _BLANKS.sub("\n\n", "\n".join(lines)).strip()
    title = _SPACES.sub(" ", " ".join("".join(reader.title).split())).strip()
    return PageText(title=title, text=text)
