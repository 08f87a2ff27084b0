"""The run, live in the notebook cell: streamed Markdown, tool-call cards, real outputs.

A listener: ``NotebookDisplay`` receives events on the engine thread and hands the work
to the main thread (``_util.mainthread``), so every output lands in the running cell. The
answer streams as Markdown through a display handle, re-rendered at most every
``interval`` seconds (deltas are coalesced before they even cross threads), so a
10,000-token answer costs a few dozen renders, not 10,000. Each tool call becomes a
card (HTML coloured with the frontend's own editor-theme variables, so it reads in
light and dark themes; Markdown and plain text as fallbacks) whose status follows the call; its nbformat outputs are re-published as real
outputs (a figure shows as an image); a footer sums the run up.
"""

from __future__ import annotations

import functools
import html
import json
import re
import threading
import time
from typing import Any, Callable, Iterable, Sequence

from .._util.mainthread import Dispatcher, LoopDispatcher
from .._util.text import one_line, visible
from ..context.events import (
    AnswerCut,
    ContextCompacted,
    Discarded,
    FilesPreviewed,
    MemoryRecalled,
    Notice,
    ReplyRead,
    RunFinished,
    RunResult,
    Step,
    StepFinished,
    StepStarted,
    ToolCallDecided,
    ToolCallFinished,
    ToolCallRequested,
    ToolOutput,
    compaction_line,
)
from ..context.items import ToolCall, ToolResult, code_of, note_line, skip_reason, told_model
from ..context.spill import outputs_of
from ..engine.approval import Decision
from ..kernel.outputs import collapse_carriage_returns, strip_ansi
from ..models.base import ReasoningDelta, TextDelta, ToolCallDelta
from ..trust.untrusted import fence, markdown_literal, markdown_text, sibling_bundle
from .widgets import card_says, describe

__all__ = ["NotebookDisplay", "card_html", "card_markdown", "folded_bundle", "footer_html",
           "highlight"]

_MUTED = "var(--jp-ui-font-color2, #57606a)"
_COLORS = {"ok": "var(--jp-success-color1, #1a7f37)", "warn": "var(--jp-warn-color1, #9a6700)",
           "bad": "var(--jp-error-color1, #cf222e)", "info": _MUTED}


def card_markdown(call: ToolCall, status: str, arguments: dict[str, Any] | None = None,
                  preview: str | None = None, badge: tuple[str, str] | None = None,
                  output: str = "", told: Sequence[str] = ()) -> str:
    """A tool call as Markdown: a header line with its status, the code, what it printed,
    and (``told``) what ipyagent told the model about it, quoted after the output's fence,
    where nothing the call printed can stand."""
    lang, code = ("diff", preview) if preview else _code_of(call, arguments)
    mark = f" · {markdown_text(one_line(badge[0]))}" if badge else ""
    code = shown_code(code, lang)  # what runs, with nothing hidden: bidi overrides reorder a page
    printed = f"\n\n{fence(strip_ansi(output))}" if output else ""
    said = "".join(f"\n\n> ℹ {markdown_text(line)}" for line in told)
    return (f"**{markdown_literal(call.name)}** <small>· {markdown_literal(call.id)} · "
            f"{markdown_text(one_line(status))}{mark}</small>\n\n{fence(code, lang)}{printed}{said}")


def card_html(call: ToolCall, status: str, arguments: dict[str, Any] | None = None,
              preview: str | None = None, badge: tuple[str, str] | None = None,
              output: str = "") -> str:
    """A tool call as a bordered card: name, id and status in a header, highlighted code
    (or the tool's preview of the call — a diff for file edits). ``badge``: (label,
    tooltip) of a small marker in the header, e.g. a call that ran because of Always.
    ``output``: the HTML of what the call printed (escaped text), inside the frame."""
    lang, code = ("diff", preview) if preview else _code_of(call, arguments)
    # The page must show what runs: a bidi override or isolate reorders the text a browser
    # shows, a zero-width character hides, and pygments turns a lone CR into a line break
    # (bash does not break there). See shown_code.
    code = shown_code(code, lang)
    pill = ("" if not badge else
            f"<span class='ipyagent-badge' title='{html.escape(badge[1])}' style='"
            "border:1px solid currentColor;border-radius:8px;padding:0 6px;"
            f"font-size:85%;color:{_COLORS['warn']}'>{html.escape(badge[0])}</span>")
    color = (_COLORS["bad"] if status.startswith("✗") else _COLORS["ok"]
             if status.startswith("✓") else _MUTED)
    return (
        "<div class='ipyagent-card' style='border:1px solid var(--jp-border-color1,#ccc);"
        "border-radius:4px;margin:4px 0;overflow:hidden'>"
        "<div style='display:flex;gap:.6em;align-items:baseline;padding:2px 8px;"
        "background:var(--jp-layout-color2,#eee);font-size:var(--jp-ui-font-size1,13px)'>"
        f"<b>{html.escape(call.name)}</b><span style='color:{_MUTED}'>{html.escape(call.id)}"
        f"</span>{pill}<span style='margin-left:auto;color:{color}'>{html.escape(status)}</span></div>"
        "<pre style='margin:0;padding:6px 8px;overflow-x:auto;"
        "background:var(--jp-cell-editor-background,#f7f7f7);"
        "font-family:var(--jp-code-font-family,monospace);"
        "font-size:var(--jp-code-font-size,13px);line-height:var(--jp-code-line-height,1.4)'>"
        f"{highlight(code, lang)}</pre>{_output_section(output)}</div>")


def _output_section(output: str) -> str:
    """What the call printed, under its code and inside the card's frame ('' for nothing)."""
    if not output:
        return ""
    return ("<div class='ipyagent-card-output' style='border-top:1px solid "
            "var(--jp-border-color2,#e0e0e0);padding:4px 4px'>" + output + "</div>")


def shown_code(code: str, lang: str) -> str:
    """Code as a card shows it. Python whose hidden characters all sit in string literals
    is shown with them written as escapes: exactly the text "code → new cell" inserts
    (``trust.cellcode``), character for character. Anything else keeps every hidden
    character as its visible stand-in (``⟨U+202E⟩``), as in a terminal."""
    if lang == "python":
        from ..trust.cellcode import UnsafeCode, cell_text

        try:
            return cell_text(code)
        except UnsafeCode:
            pass
    return visible(code)


def _code_of(call: ToolCall, arguments: dict[str, Any] | None) -> tuple[str, str]:
    args = call.arguments if arguments is None else arguments
    code = code_of(call.name, args)
    if code is not None:  # python, or a shell command (highlighted as bash)
        return code
    return "json", json.dumps(args, indent=2, ensure_ascii=False)


# Token colours from the frontend's own editor theme (light or dark), with light fallbacks.
_TOKEN_VARS = [
    ("Comment", "comment", "#408080"), ("Keyword", "keyword", "#008000"),
    ("Name.Builtin", "builtin", "#008000"), ("Name.Function", "def", "#0000ff"),
    ("Name.Class", "def", "#0000ff"), ("Literal.String", "string", "#ba2121"),
    ("Literal.Number", "number", "#080"), ("Operator", "operator", "#aa22ff"),
    ("Punctuation", "punctuation", "#05a"),
    ("Generic.Inserted", "string", "#1a7f37"), ("Generic.Deleted", "keyword", "#cf222e"),
    ("Generic.Subheading", "comment", "#6e7781"), ("Generic.Heading", "comment", "#6e7781"),
]


def highlight(code: str, lang: str = "python") -> str:
    """HTML for ``code`` with theme-aware token colours (JupyterLab's editor variables)."""
    try:
        from pygments import lex  # type: ignore[import-untyped]
        from pygments.lexers import (  # type: ignore[import-untyped]
            BashLexer,
            DiffLexer,
            JsonLexer,
            PythonLexer,
        )
        from pygments.token import string_to_tokentype  # type: ignore[import-untyped]
    except ImportError:  # pygments comes with IPython; plain text if it is missing
        return html.escape(code)
    styles = [(string_to_tokentype(name), f"color:var(--jp-mirror-editor-{var}-color,{fallback})")
              for name, var, fallback in _TOKEN_VARS]
    parts = []
    lexer = {"python": PythonLexer, "diff": DiffLexer, "bash": BashLexer}.get(lang, JsonLexer)()
    for token, text in lex(code, lexer):
        style = next((css for kind, css in styles if token in kind), None)
        escaped = html.escape(text)
        parts.append(f"<span style='{style}'>{escaped}</span>" if style and text.strip()
                     else escaped)
    return "".join(parts).rstrip("\n")


def memory_bundle(event: MemoryRecalled | FilesPreviewed) -> dict[str, str]:
    """The notes (or file previews) the model was given, collapsed (untrusted: escaped)."""
    kind = "ipyagent-preview" if isinstance(event, FilesPreviewed) else "ipyagent-memory"
    return {"text/html": (f"<details class='{kind}' style='font-size:85%;color:{_MUTED}'>"
                          f"<summary>{html.escape(event.summary)}</summary>"
                          f"<pre style='white-space:pre-wrap'>{html.escape(event.text)}</pre></details>"),
            "text/plain": event.summary}


def footer_html(text: str, kind: str = "info", meter: tuple[int, int] | None = None) -> dict[str, str]:
    """A small status line as a display bundle (with a token meter, when given)."""
    # The meter keeps to the right of the line, whole: a long line wraps on its own side
    # (a float let the wrapped words run around it).
    right = (f"<span style='flex:none;margin-left:auto;white-space:nowrap'>{meter_html(*meter)}"
             "</span>" if meter else "")
    plain = text + (f" · next request ~{meter[0]:,}" + (f"/{meter[1]:,}" if meter[1] else "")
                    + " tokens" if meter else "")
    return {"text/html": (f"<div style='display:flex;gap:1em;align-items:baseline;"
                          f"font-size:85%;color:{_COLORS[kind]};"
                          "border-top:1px solid var(--jp-border-color2,#e0e0e0);"
                          f"padding-top:2px;margin-top:4px'><span>{_inline_code(text)}</span>"
                          f"{right}</div>"),
            "text/plain": plain}


_METER_TIP = ("estimated tokens of the next request: the context, the system prompt and the "
              "tool specs (agent.context shows them item by item)")


def meter_html(tokens: int, window: int) -> str:
    """A small token meter: the next request's size against the model's window (if known);
    the same figure the context table's title gives."""
    if not window:
        return (f"<span title='{_METER_TIP}' style='color:{_MUTED}'>next request ~{tokens:,} "
                "tokens</span>")
    share = min(1.0, tokens / window)
    color = _COLORS["ok"] if share < 0.6 else _COLORS["warn"] if share < 0.8 else _COLORS["bad"]
    return (f"<span title='{_METER_TIP} / Agent.context_window' style='color:{_MUTED}'>"
            "next request <span style='display:inline-block;width:60px;height:7px;vertical-align:middle;"
            "border:1px solid var(--jp-border-color1,#ccc);border-radius:2px'>"
            f"<span style='display:block;height:100%;width:{share * 100:.0f}%;background:{color}'>"
            f"</span></span> ~{tokens:,} / {window:,}</span>")


def _inline_code(text: str) -> str:
    """Escaped text with `backticked` spans as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def model_note_of(result: ToolResult) -> str:
    """The changes note the model got (its note; in transcripts from before notes were kept
    apart, the last line of the result's text)."""
    note = result.meta.get("note")
    if isinstance(note, str) and "files changed: " in note:
        return note_line(note)
    last = result.output.rsplit("\n", 1)[-1]
    return last if last.startswith("[ipyagent note") else "files changed"


def _run_footer(result: RunResult, shown: Iterable[str] = ()) -> tuple[str, str]:
    mark = {"done": "✓", "denied": "✗", "error": "⚠"}.get(result.stop_reason, "■")
    kind = "ok" if result.ok else ("bad" if result.stop_reason in ("error", "denied") else "warn")
    return f"{mark} {result.footer(shown=shown)}", kind


def _step_footer(step: Step) -> tuple[str, str]:
    line = step.footer("paused: `%agent step` runs the next one")
    if step.stop_reason:
        return f"■ {line}", "ok" if step.stop_reason == "done" else "warn"
    return f"‖ {line}", "info"


def _bundles_for(output: dict[str, Any], lines: int = 0
                 ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """One nbformat output as (data, metadata) display bundles: what the model's code
    displayed, made safe for this trusted cell, and a line saying what was kept out.
    Text longer than ``lines`` lines is folded (``folded_bundle``)."""
    kind = output.get("output_type")
    if kind in ("display_data", "execute_result"):
        data, metadata, note = sibling_bundle(dict(output.get("data", {})),
                                              dict(output.get("metadata", {})))
        if set(data) == {"text/plain"}:  # a long repr folds like printed text
            data = folded_bundle(_joined(data["text/plain"]), lines) or data
        bundles = [(data, metadata)] if data else []
        return bundles + ([({"text/plain": note}, {})] if note else [])
    bundle = _plain_bundle_for(output, lines)
    return [bundle] if bundle is not None else []


def _joined(text: Any) -> str:
    return text if isinstance(text, str) else "".join(text)


_ERROR_BG = "var(--jp-rendermime-error-background,#fdd)"


def _plain_bundle_for(output: dict[str, Any], lines: int = 0
                      ) -> tuple[dict[str, Any], dict[str, Any]] | None:
    kind = output.get("output_type")
    if kind == "stream":
        text = _joined(output.get("text", ""))
        stderr = output.get("name") == "stderr"
        folded = folded_bundle(text, lines, background=_ERROR_BG if stderr else "")
        if folded is not None:
            return folded, {}
        if stderr:
            return {"text/html": ("<pre style='margin:0;padding:2px 4px;background:"
                                  f"{_ERROR_BG}'>{html.escape(text)}</pre>"),
                    "text/plain": text}, {}
        return {"text/plain": text}, {}
    if kind == "error":
        text = ("\n".join(output.get("traceback", []))
                or f"{output.get('ename')}: {output.get('evalue')}")
        return folded_bundle(text, lines, background=_ERROR_BG) or {"text/plain": text}, {}
    return None


def split_outputs(outputs: Iterable[dict[str, Any]], lines: int = 0
                  ) -> tuple[list[tuple[str, str]], list[tuple[dict[str, Any], dict[str, Any]]]]:
    """``(printed, rich)``: each text output as (escaped HTML, plain text), to show inside
    the card; every other output as display bundles made safe (``_bundles_for``)."""
    printed: list[tuple[str, str]] = []
    rich: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for output in outputs:
        kind = output.get("output_type")
        if kind == "stream":
            text = _joined(output.get("text", ""))
            stderr = output.get("name") == "stderr"
            printed.append((text_html(text, lines, _ERROR_BG if stderr else ""), text))
        elif kind == "error":
            text = ("\n".join(output.get("traceback", []))
                    or f"{output.get('ename')}: {output.get('evalue')}")
            printed.append((text_html(text, lines, _ERROR_BG), text))
        elif kind in ("display_data", "execute_result"):
            data, metadata, note = sibling_bundle(dict(output.get("data", {})),
                                                  dict(output.get("metadata", {})))
            if set(data) == {"text/plain"}:  # a repr: text like the rest
                text = _joined(data["text/plain"])
                printed.append((text_html(text, lines), text))
            elif data:
                rich.append((data, metadata))
            if note:  # ours, about what was kept out: an output of its own, where it was
                rich.append(({"text/plain": note}, {}))
    return printed, rich


def text_html(text: str, lines: int = 0, background: str = "") -> str:
    """Printed text as escaped HTML: folded when longer than ``lines`` (``folded_bundle``),
    colours dropped and a progress bar's carriage returns applied, as a terminal shows it."""
    folded = folded_bundle(text, lines, background)
    if folded is not None:
        return folded["text/html"]
    shown = collapse_carriage_returns(strip_ansi(text)).rstrip("\n")
    return _pre(background) + html.escape(shown) + "</pre>"


def _pre(background: str = "") -> str:
    bg = f"background:{background};" if background else "background:transparent;"
    return (f"<pre style='margin:0;padding:0 4px;border:0;{bg}white-space:pre-wrap;"
            "word-break:break-word;font-family:var(--jp-code-font-family,monospace);"
            "font-size:var(--jp-code-font-size,13px);line-height:var(--jp-code-line-height,1.4)'>")


def folded_bundle(text: str, lines: int, background: str = "") -> dict[str, str] | None:
    """``text`` with more than ``lines`` lines as its head and tail, the middle in a
    ``<details>`` toggle; None when it is short enough (or ``lines`` is 0).

    The toggle is the browser's own element: opening it needs no kernel round trip and
    no script, and everything in it is escaped text (the output is untrusted). The plain
    text stays whole, for the transcript and plain-text frontends.
    """
    if lines <= 0:
        return None
    # What the HTML shows is what a text/plain output would: colours dropped (the HTML
    # has no ANSI renderer), a progress bar's carriage returns applied.
    rows = collapse_carriage_returns(strip_ansi(text)).split("\n")
    if rows[-1] == "":
        rows.pop()
    if len(rows) <= lines:
        return None
    head, tail = lines // 2, lines - lines // 2
    hidden = len(rows) - head - tail
    pre = _pre(background)

    def block(part: list[str]) -> str:
        return pre + html.escape("\n".join(part)) + "</pre>"

    summary = (f"<summary style='cursor:pointer;color:{_MUTED};padding:1px 4px;"
               "font-size:var(--jp-ui-font-size1,13px)'>"
               f"⋯ {hidden:,} more line{'s' if hidden != 1 else ''} "
               f"({len(rows):,} in all) — click to show or hide</summary>")
    return {"text/html": ("<div class='ipyagent-folded'>" + block(rows[:head])
                          + f"<details>{summary}{block(rows[head:-tail])}</details>"
                          + block(rows[-tail:]) + "</div>"),
            "text/plain": text}


class _Stream:
    """A throttled Markdown display handle for streamed text."""

    def __init__(self, display: NotebookDisplay, render: Callable[[str], dict[str, str]]) -> None:
        self.d = display
        self.render = render
        self.chunks: list[str] = []
        self.handle: Any = None
        self.last = 0.0
        self.dirty = False
        self.timer: Any = None
        self.renders = 0

    def add(self, text: str) -> None:
        self.chunks.append(text)
        self.dirty = True
        now = time.monotonic()
        if self.handle is None or now - self.last >= self.d.interval:
            self.flush()
        elif self.timer is None and hasattr(self.d.dispatcher, "call_later"):
            # A trailing update, so the last words show even if the model pauses.
            self.timer = self.d.dispatcher.call_later(  # type: ignore[attr-defined]
                self.d.interval - (now - self.last), self.flush)

    def redraw(self, render: Callable[[str], dict[str, str]]) -> None:
        """Show everything streamed so far (pending words too) with ``render`` from now on."""
        self.render = render
        self.dirty = True
        self.flush()

    def flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if not self.dirty:
            return
        self.dirty = False
        self.last = time.monotonic()
        self.renders += 1
        bundle = self.render("".join(self.chunks))
        if self.handle is None:
            self.handle = self.d.publish(bundle, new=True)
        else:
            self.d.update(self.handle, bundle)


class _Card:
    """One tool call's card; its status line and what the call prints (inside its frame)
    are updated in place."""

    def __init__(self, display: NotebookDisplay, call: ToolCall, handle: Any = None) -> None:
        self.d, self.call, self.arguments = display, call, dict(call.arguments)
        self.badge: tuple[str, str] | None = None  # (label, tooltip): ran because of Always
        self.preview = display.preview(call)
        self.state = "● waiting for approval" if display.asks(call) else "▶ running…"
        self.printed: tuple[str, str] = ("", "")  # (HTML, plain text) of its text outputs
        self.told: list[str] = []  # what ipyagent told the model about it (told_model)
        self.approved = ""  # " · approved by you" when the approval panel gave way to the card
        bundle = self.bundle(self.state)
        if handle is None:
            self.handle = display.publish(bundle, new=True)
        else:
            self.handle = handle
            display.update(handle, bundle)
        self.started = time.monotonic()
        self.open = True  # not finished yet: an interruption says so on the card
        self.live: _Stream | None = None  # what the running call has printed so far

    def bundle(self, status: str) -> dict[str, str]:
        html_part, plain = self.printed
        md = card_markdown(self.call, status, self.arguments, self.preview, self.badge, plain,
                           self.told)
        told = "".join(f"<div class='ipyagent-told' style='color:{_MUTED};font-size:90%;"
                       f"padding:2px 4px 2px 1.6em;text-indent:-1.2em'>ℹ {html.escape(line)}</div>"
                       for line in self.told)
        return {"text/html": card_html(self.call, status, self.arguments, self.preview,
                                       self.badge, html_part + told),
                "text/markdown": md, "text/plain": md}

    def status(self, status: str, final: bool = False) -> None:
        self.open = not final
        self.state = status
        self.d.update(self.handle, self.bundle(status))

    def print_live(self, text: str) -> None:
        """Add what the running call printed; the card is redrawn at most every interval."""
        if self.live is None:
            self.live = _Stream(self.d, self._live_bundle)
            self.live.handle = self.handle  # the card itself is redrawn, no output of its own
        self.live.add(text)

    def _live_bundle(self, text: str) -> dict[str, str]:
        shown = _live_bundle(text, lines=self.d.output_lines)["text/plain"]
        self.printed = (text_html(shown, 0), shown)
        return self.bundle(self.state)


class NotebookDisplay:
    """A listener that renders a run in the current notebook cell."""

    def __init__(self, dispatcher: Dispatcher | None = None, *, interval: float = 0.1,
                 asks: Callable[[ToolCall], bool] | None = None, step_mode: bool = False,
                 preview: Callable[[ToolCall], str | None] | None = None,
                 meter: Callable[[], tuple[int, int]] | None = None,
                 code_action: Callable[[ToolCall, str], Any] | None = None,
                 output_lines: int = 20,
                 step_action: Callable[[Step], Any] | None = None) -> None:
        self.dispatcher = dispatcher or LoopDispatcher()
        # (python call, the code that runs) -> a widget or a display bundle under its card
        # ("code → new cell"), or None; main thread.
        self.code_action = code_action
        self.step_action = step_action  # under each finished step ("rewind to here"); main thread
        self.output_lines = output_lines  # longer outputs fold (Agent.output_lines)
        self.preview = preview or (lambda call: None)  # a tool's own view of a call (diffs)
        self.meter = meter  # () -> (context tokens, context window) for the footer
        self.interval = interval
        self.asks = asks or (lambda call: False)  # does this call wait for a click?
        self.step_mode = step_mode
        self.text: _Stream | None = None
        self.reasoning: _Stream | None = None
        # What this reply has shown so far (text and reasoning outputs, in order): struck
        # through if the reply is discarded; forgotten once a step starts or a call runs.
        self.reply: list[tuple[_Stream, str]] = []
        self.cards: dict[str, _Card] = {}
        # One 'writing the call…' line while calls stream in: the first card takes its
        # place; later cards are drawn when their turn comes, under the earlier call's
        # buttons and outputs, so each card reads with its own.
        self.placeholder: Any = None
        self.writing: list[str] = []  # names of the calls streamed in this step
        self.renders = 0  # text renders, summed over the run (the throttle's effect)
        self.finished = False
        self._lock = threading.Lock()
        self._open: tuple[type, list[str]] | None = None
        self._errors_shown: list[str] = []  # said once as a notice: the footer points up

    def __repr__(self) -> str:
        return f"<NotebookDisplay cards={len(self.cards)} renders={self.renders}>"

    # -- engine thread -------------------------------------------------------------
    def __call__(self, event: Any) -> None:
        if isinstance(event, (TextDelta, ReasoningDelta)):
            # Coalesce deltas here: one main-thread callback per burst, not per token.
            with self._lock:
                if self._open is not None and self._open[0] is type(event):
                    self._open[1].append(event.text)
                    return
                segment = (type(event), [event.text])
                self._open = segment
            self.dispatcher.call(self._drain, segment)
            return
        with self._lock:
            self._open = None
        self.dispatcher.call(self._handle, event)

    # -- main thread ---------------------------------------------------------------
    def publish(self, bundle: dict[str, Any], metadata: dict[str, Any] | None = None,
                new: bool = False) -> Any:
        from IPython.display import display

        return display(bundle, raw=True, metadata=metadata or {}, display_id=new or None)

    def update(self, handle: Any, bundle: dict[str, Any],
               metadata: dict[str, Any] | None = None) -> None:
        handle.update(bundle, raw=True, metadata=metadata or {})

    def _drain(self, segment: tuple[type, list[str]]) -> None:
        with self._lock:
            text = "".join(segment[1])
            segment[1].clear()
            if self._open is segment:
                self._open = None
        if not text:
            return
        if segment[0] is TextDelta:
            if self.text is None:
                # Model text: Markdown formatting, never live HTML (the cell is trusted).
                self.text = _Stream(self, lambda t: {"text/markdown": markdown_text(t),
                                                     "text/plain": t})
                self.reply.append((self.text, ""))
            self.text.add(text)
        else:
            if self.reasoning is None:
                self.reasoning = _Stream(self, _reasoning_bundle)
                self.reply.append((self.reasoning, "(reasoning) "))
            self.reasoning.add(text)

    def _end_streams(self) -> None:
        for stream in (self.reasoning, self.text):
            if stream is not None:
                stream.flush()
                self.renders += stream.renders
        self.text = self.reasoning = None

    def _handle(self, event: Any) -> None:
        if isinstance(event, StepStarted):
            self._end_streams()
            self.placeholder, self.writing, self.reply = None, [], []
        elif isinstance(event, Discarded):
            self._discard(event.line)
        elif isinstance(event, ToolCallDelta):
            self._end_streams()
            if event.name and event.index >= len(self.writing):
                self.writing.append(event.name)
                bundle = _writing_bundle(self.writing)
                if self.placeholder is None:
                    self.placeholder = self.publish(bundle, new=True)
                else:
                    self.update(self.placeholder, bundle)
        elif isinstance(event, ToolCallRequested):
            self._end_streams()
            self.reply = []  # the turn is complete: nothing of it can be discarded now
            handle, self.placeholder = self.placeholder, None
            self.cards[event.call.id] = _Card(self, event.call, handle)
        elif isinstance(event, ToolOutput):
            card = self.cards.get(event.call.id)
            if card is not None:
                card.print_live(event.text)
        elif isinstance(event, ToolCallDecided):
            self._decided(event.call, event.decision)
        elif isinstance(event, ToolCallFinished):
            self._finished(event.call, event.result)
        elif isinstance(event, ReplyRead):
            self._cut(event.text)  # a call written as text has its own card: not its JSON
        elif isinstance(event, Notice):
            if isinstance(event, AnswerCut):
                self._cut(event.kept)
            kind = {"error": "bad", "warning": "warn"}.get(event.level, "info")
            self.publish(footer_html(event.message, kind))
            if event.level == "error":
                self._errors_shown.append(event.message)
        elif isinstance(event, StepFinished):
            self._end_streams()
            self._unwritten("not run: the reply ended before the call was complete")
            if self.step_mode:
                self.publish(footer_html(*_step_footer(event.step), meter=self._meter()))
            if self.step_action is not None:
                self._show_action(self.step_action(event.step))
        elif isinstance(event, ContextCompacted):
            self._end_streams()
            self.publish(footer_html(compaction_line(event), "info"))
        elif isinstance(event, (MemoryRecalled, FilesPreviewed)):
            self.publish(memory_bundle(event))
        elif isinstance(event, RunFinished):
            self._end_streams()
            self.finished = True
            self.publish(footer_html(*_run_footer(event.result, self._errors_shown),
                                     meter=self._meter()))

    def _meter(self) -> tuple[int, int] | None:
        try:
            return self.meter() if self.meter else None
        except Exception:  # a meter is decoration; never break the footer
            return None

    def _decided(self, call: ToolCall, decision: Decision) -> None:
        card = self.cards.get(call.id)
        if card is None:
            return
        if decision.action == "edit" and decision.arguments is not None:
            card.arguments = dict(decision.arguments)  # show what actually runs
        if decision.by == "always":  # nobody was asked: the card says why it ran
            card.badge = always_badge(decision)
        if decision.approved:
            if card_says(decision):
                card.approved = " · approved by you"
            card.started = time.monotonic()  # time the run, not the wait for a click
            card.status(("✎ edited by you · " if decision.action == "edit" else "") + "▶ running…")
            if call.name == "python" and self.code_action is not None and "code" in card.arguments:
                self._show_action(self.code_action(call, str(card.arguments["code"])))
        else:
            card.status(describe(decision, call.name, brief=True), final=True)

    def _show_action(self, action: Any) -> None:
        """A card's action: a display bundle, or a widget (shown as itself)."""
        if action is None:
            return
        if isinstance(action, dict):
            self.publish(action)
            return
        from IPython.display import display

        display(action)

    def _finished(self, call: ToolCall, result: ToolResult) -> None:
        card = self.cards.get(call.id)
        if result.meta.get("denied") or result.meta.get("skipped"):
            if card is not None and result.meta.get("skipped"):
                card.status(f"✗ not run ({skip_reason(result.meta)})", final=True)
            return
        # What it printed goes inside its card's frame; what it displayed (a figure, a
        # table) follows the card, as outputs of their own.
        printed, rich = split_outputs(outputs_of(result), self.output_lines)
        if not printed and not rich and result.output:
            printed = [(text_html(result.output, self.output_lines), result.output)]
        if card is None:
            rich = [({"text/html": html_part, "text/plain": plain}, {}) for html_part, plain in printed] + rich
        else:
            if card.live is not None:
                card.live.flush()
                card.live = None  # the real outputs hold all of it
            card.printed = ("".join(h for h, _ in printed),
                            "".join(p if p.endswith("\n") else p + "\n" for _, p in printed))
            # What the model read after the outputs, in its order: the values line (the end
            # of the result's text), then ipyagent's note.
            note, values = told_model(result)
            card.told = [line for line in (
                values, f"ipyagent's note to the model: {note}" if note else "") if line]
            took = time.monotonic() - card.started
            edited = "✎ edited · " if result.meta.get("edited") else ""
            mark = "✗ error" if result.error else "✓ done"
            count = f" · [{result.execution_count}]" if result.execution_count else ""
            card.status(f"{edited}{mark} in {took:.1f}s{count}{card.approved}", final=True)
        for data, metadata in rich:
            self.publish(data, metadata)
        changes = result.meta.get("changes")
        if isinstance(changes, list) and changes:  # the staged workspace: what reached your folder
            from .changes_panel import changes_html

            plain = model_note_of(result)
            self.publish({"text/html": "<div class='ipyagent-card-changes'><b>files changed</b>"
                          + changes_html([c for c in changes if isinstance(c, dict)]) + "</div>",
                          "text/plain": plain}, {})

    def _discard(self, line: str) -> None:
        """The reply streamed so far is void: grey and strike it where it was shown, say so."""
        self._end_streams()  # the next attempt's reply starts outputs of its own
        for stream, label in self.reply:
            before = stream.renders
            stream.redraw(functools.partial(_discarded, line=line, label=label))
            self.renders += stream.renders - before
        self.reply = []
        self._unwritten(line)
        self.writing = []

    def _cut(self, kept: str) -> None:
        """Show the reply streamed so far as kept: an answer cut where it went on to imitate
        a tool result, or a reply read as calls (their cards follow) or as an answer."""
        for stream, label in self.reply:
            if not label:  # the text, not the reasoning
                before = stream.renders
                stream.redraw(lambda _streamed: {"text/markdown": markdown_text(kept),
                                                 "text/plain": kept})
                self.renders += stream.renders - before

    def _unwritten(self, why: str) -> None:
        """A call that was streaming in but never came to be: say so where it was shown."""
        if self.placeholder is not None:
            name = self.writing[-1] if self.writing else "tool"
            self.update(self.placeholder, {"text/markdown": f"**{markdown_literal(name)}** "
                                                            f"<small>· {why}</small>",
                                           "text/plain": f"{name}: {why}"})
            self.placeholder = None

    def interrupted(self) -> None:
        """Say that the run was stopped (main thread)."""
        self._end_streams()
        self._unwritten("interrupted while the model was writing the call")
        for card in self.cards.values():
            if card.live is not None:
                card.live.flush()  # what it printed before the interrupt stays visible
            if card.open:
                card.status("■ interrupted", final=True)
        self.publish(footer_html("■ interrupted — the context is valid: `%agent step` or a "
                                 "new task continues from here", "warn"))

    def close(self) -> None:
        """Final flush (main thread)."""
        self._end_streams()


def always_badge(decision: Decision) -> tuple[str, str]:
    """The card's marker for a call that ran unasked because of an earlier Always."""
    given = f" at {decision.detail}" if decision.detail else ""
    return ("Always", f"Not asked: Always was given{given} for this tool in this conversation "
                      "(%agent reset or --new asks again)")


def _writing_bundle(names: list[str]) -> dict[str, str]:
    """The line shown while the model is still writing its tool calls."""
    what = ("the call" if len(names) == 1
            else f"{len(names)} calls ({', '.join(dict.fromkeys(names))})")
    return {"text/markdown": f"**{markdown_literal(names[-1])}** <small>· writing "
                             f"{markdown_text(what)}…</small>",
            "text/plain": f"{names[-1]}: writing {what}…"}


def _live_bundle(text: str, limit: int = 20_000, lines: int = 0) -> dict[str, str]:
    """What a running call printed so far (its last ``lines`` lines and ``limit``
    characters, when it is long: the cell does not grow while it runs)."""
    if lines > 0 and text.count("\n") > lines:
        rows = text.split("\n")
        rows, above = rows[-lines - 1:], len(rows) - lines - 1
        text = f"[… {above:,} lines above …]\n" + "\n".join(rows)
    if len(text) > limit:
        text = f"[… {len(text) - limit} characters above …]\n" + text[-limit:]
    return {"text/plain": text}


def _reasoning_bundle(text: str) -> dict[str, str]:
    return {"text/html": (f"<details style='color:{_MUTED};font-size:90%'><summary>reasoning"
                          f"</summary><pre style='white-space:pre-wrap'>{html.escape(text)}"
                          "</pre></details>"), "text/plain": f"(reasoning) {text}"}


def _discarded(text: str, line: str, label: str = "") -> dict[str, str]:
    """What was shown of a void reply, greyed and struck, under the line that says why."""
    return {"text/html": (f"<div class='ipyagent-discarded' style='color:{_MUTED};opacity:.75'>"
                          f"<div style='text-decoration:line-through;white-space:pre-wrap'>"
                          f"{html.escape(label + text)}</div><div style='font-size:85%'>⌫ "
                          f"{html.escape(line)}</div></div>"),
            "text/plain": f"[{line}] {label}{text}"}

