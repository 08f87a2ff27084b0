"""Plain-text rendering of a run, for terminals, scripts and terminal IPython.

Everything written goes through ``_util.text.visible`` (in ``_write``): model
text, code, arguments, tool names, output and error lines all come from outside, and a
terminal obeys the control sequences in them. The one control kept is a progress bar's
carriage return in live output, which rewrites only its own ``┆`` line (prefix included).
Colour (pygments for code, red for errors, as IPython's terminal does) only on a terminal
without ``NO_COLOR``, and only added *after* ``visible``: its escapes are the only ones.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import IO, Any, Callable

from .._util.text import visible
from ..context.events import (
    ContextCompacted,
    Discarded,
    FilesPreviewed,
    MemoryRecalled,
    Notice,
    ReplyRead,
    RunFinished,
    StepFinished,
    StepStarted,
    ToolCallDecided,
    ToolCallFinished,
    ToolCallRequested,
    ToolOutput,
    compaction_line,
)
from ..context.items import ToolCall, ToolResult, code_of, told_model
from ..context.spill import outputs_of
from ..kernel.outputs import model_text
from ..models.base import ReasoningDelta, TextDelta
from .fences import FenceReader, Piece
from .held_reply import HeldReply

__all__ = ["TerminalDisplay", "traceback_colours"]


class TerminalDisplay:
    """A listener that streams a run as plain text."""

    def __init__(self, stream: IO[str] | None = None, show_reasoning: bool = False,
                 max_output_lines: int = 20,
                 preview: Callable[[ToolCall], str | None] | None = None,
                 step_mode: bool = False, colour: bool | None = None,
                 scheme: str = "", step_hint: str = "%agent step runs the next one") -> None:
        self.stream = stream
        self._colour = colour  # None: on a terminal without NO_COLOR
        self.scheme = scheme  # IPython's colour scheme (InteractiveShell.colors); "": neutral
        self.step_mode = step_mode  # `%agent --step` / `%agent step`: say where each step ended
        self.step_hint = step_hint  # how to run the next step, said where one ended
        self.preview = preview or (lambda call: None)  # a tool's own view (diffs)
        self.show_reasoning = show_reasoning
        self.max_output_lines = max_output_lines
        self._at_line_start = True
        self._errors_shown: list[str] = []  # said once as a notice: the footer points up
        self._live: dict[str, _Live] = {}  # what running calls printed, by call id
        self._reply_shown = False  # model text was written since the step (or a discard) began
        self._held = HeldReply()  # a call the model writes as text is not printed as JSON
        self._fences = FenceReader()  # a reply's code blocks shown as code (on a terminal)
        self._fence_lang = "python"

    @property
    def out(self) -> IO[str]:
        return self.stream or sys.stdout

    @property
    def colour(self) -> bool:
        if self._colour is not None:
            return self._colour
        if os.environ.get("NO_COLOR"):  # https://no-color.org: present and not empty
            return False
        try:
            return bool(self.out.isatty())
        except (AttributeError, ValueError, OSError):
            return False

    def _code(self, code: str, lang: str = "python") -> str:
        """``code`` as the card's ``│`` lines: made visible, then highlighted (on a tty)."""
        # Only the final newlines go: str.rstrip would also drop a trailing FS/US/FF/CR/NEL
        # or U+2028 (Python counts them as whitespace), which bash keeps in the last word.
        lines = [visible(ln) for ln in _lines(code.rstrip("\n"))]
        if self.colour and lines:
            lines = _highlight(lines, self.scheme, lang)
        return "\n".join("  │ " + ln for ln in lines)

    def _marked(self, mark: str, lines: list[str]) -> str:
        """Result lines after ``mark``, made visible. On a tty an error's traceback has
        IPython's colours (its scheme, parsed from the plain text: the sibling's own escape
        codes never reach the terminal) and any other error line is red."""
        shown = [visible(ln) for ln in lines]
        if not (self.colour and mark == "✗"):
            return "\n".join(f"  {mark} {ln}" for ln in shown)
        coloured = traceback_colours(shown, self.scheme)
        if coloured is None:  # no IPython traceback in it: the whole error in red
            return "\n".join(f"{_RED}  {mark} {ln}{_RESET}" for ln in shown)
        return "\n".join(f"{_RED}  {mark}{_RESET} {ln}" for ln in coloured)

    def _reply(self, text: str) -> None:
        """The model's reply text. On a terminal its fenced code is shown as code: indented,
        highlighted, without the fence lines; elsewhere (a pipe, a log) the Markdown as
        written, which is what one would copy."""
        if not self.colour:
            self._write(text)
            return
        for piece in self._fences.feed(text):
            self._reply_piece(piece)

    def _reply_ended(self) -> None:
        for piece in self._fences.flush():
            self._reply_piece(piece)
        self._fence_lang = "python"

    def _reply_piece(self, piece: Piece) -> None:
        if piece.kind == "prose":
            self._write(piece.text)
        elif piece.kind == "open":
            self._fence_lang = _fence_lang(piece.text)
            if not self._at_line_start:
                self._write("\n")
        elif piece.kind == "code":
            line = visible(piece.text)
            try:
                shown = _highlight([line], self.scheme, self._fence_lang)[0]
            except Exception:  # a language pygments cannot lex: plain
                shown = line
            self._write(f"    {shown}\n", raw=True)

    def end_line(self) -> None:
        """End a line left open (a reply cut short): what comes next starts at column 0."""
        self._reply_ended()
        if not self._at_line_start:
            self._write("\n")

    def _raw_line(self, text: str) -> None:
        if not self._at_line_start:
            self._write("\n")
        self._write(text + "\n", raw=True)

    def _write(self, text: str, raw: bool = False) -> None:
        """Write ``text`` made visible (``raw``: already made visible, our own controls kept)."""
        if text:
            self.out.write(text if raw else visible(text))
            self.out.flush()
            self._at_line_start = text.endswith("\n")

    def _line(self, text: str) -> None:
        if not self._at_line_start:
            self._write("\n")
        self._write(text + "\n")

    def _clip(self, lines: list[str]) -> list[str]:
        """Head and tail of ``lines`` when there are more than ``max_output_lines``."""
        if self.max_output_lines <= 0 or len(lines) <= self.max_output_lines:
            return lines
        half = self.max_output_lines // 2
        return lines[:half] + [f"… {len(lines) - 2 * half} more lines …"] + lines[-half:]

    def _live_output(self, event: ToolOutput) -> None:
        """What a running call prints, as it prints it (up to half of max_output_lines)."""
        live = self._live.get(event.call.id)
        if live is None:
            live = self._live[event.call.id] = _Live()
            if not self._at_line_start:
                self._write("\n")
        for piece in _lines(event.text, keepends=True):
            if live.held:
                return  # the rest is summed up when the call ends
            if 0 < self.max_output_lines and live.lines >= self.max_output_lines // 2:
                live.held = True
                self._write(("" if self._at_line_start else "\n") + "  ┆ …\n")
                return
            # A progress bar's carriage return rewrites its line, prefix included; every
            # other control is made visible, so nothing reaches above this line.
            parts = piece.replace("\r\n", "\n").split("\r")
            piece = ("\r" + _LIVE).join(visible(part) for part in parts)
            self._write((_LIVE if self._at_line_start else "") + piece, raw=True)
            live.lines += piece.endswith("\n")

    def __call__(self, event: Any) -> None:
        if isinstance(event, ReplyRead):  # what was held back (a written call) as it was read
            shown = self._held.read(event.text)
            self._reply(shown)
            self._reply_shown = self._reply_shown or bool(shown)
            return
        if isinstance(event, (Discarded, StepStarted)):
            self._held.reset()  # void, or a new reply: nothing held is shown
        elif not isinstance(event, (TextDelta, ReasoningDelta)) and self._held.holding:
            self._reply(self._held.release())  # it was not read as a call: plain text
        if not isinstance(event, (TextDelta, ReasoningDelta)):
            self._reply_ended()
        if isinstance(event, TextDelta):
            shown = self._held.feed(event.text)
            self._reply(shown)
            self._reply_shown = self._reply_shown or bool(shown)
        elif isinstance(event, ReasoningDelta):
            if self.show_reasoning:
                self._write(event.text)
                self._reply_shown = self._reply_shown or bool(event.text)
        elif isinstance(event, Discarded):
            # A terminal cannot take back what it printed: one dim line says it is void.
            if self._reply_shown:
                marker = f"  ⌫ {event.line} (the text above is not kept)"
                self._raw_line(f"{_DIM}{visible(marker)}{_RESET}" if self.colour else visible(marker))
            self._reply_shown = False
        elif isinstance(event, StepStarted):
            self._reply_shown = False
        elif isinstance(event, ToolCallRequested):
            call = event.call
            code = code_of(call.name, call.arguments)
            if code is not None:  # python, or a shell command (highlighted as bash)
                # Split at newlines only: the lines shown are the code's own, byte for byte.
                self._raw_line(f"  ┌ {visible(call.name)} ({visible(call.id)})\n"
                               f"{self._code(code[1], code[0])}")
            else:
                diff = self.preview(call)
                # Without a preview the arguments are what will run: all of them, not a
                # summary (which cuts at 70 characters and folds whitespace).
                shown = call.summary() if diff else (
                    f"{call.name}({json.dumps(call.arguments, ensure_ascii=False)})")
                self._line(f"  ┌ {shown} ({call.id})")
                if diff:
                    self._line("\n".join("  │ " + ln for ln in _lines(diff.rstrip())))
        elif isinstance(event, ToolCallDecided):
            d = event.decision
            if not d.approved:
                # A policy's denial stops the run, and its reason ends the footer: said once.
                self._line("  ✗ denied" + (f": {d.reason}" if d.reason and d.by_person
                                           else f" ({d.by})" if not d.by_person else ""))
            elif d.by == "always":  # nobody was asked: say why it runs
                self._line("  ✓ approved by Always" + (f" (given at {d.detail})" if d.detail
                                                       else "") + ", not asked again in "
                           "this conversation")
            elif d.action == "edit":
                self._line("  ✎ edited before running; what runs:")
                args = d.arguments if d.arguments is not None else event.call.arguments
                code = code_of(event.call.name, args)
                if code is None and "code" in args:
                    code = ("python", str(args["code"]))
                lang, ran = code or ("json", json.dumps(args, indent=2, ensure_ascii=False))
                self._raw_line(self._code(ran, lang))
        elif isinstance(event, ToolOutput):
            self._live_output(event)
        elif isinstance(event, ToolCallFinished):
            if event.result.meta.get("denied"):
                return
            live = self._live.pop(event.call.id, None)
            mark = "✗" if event.result.error else "└"
            if live is None:
                lines = self._clip(_lines(event.result.output.rstrip()))
                self._raw_line(self._marked(mark, lines) or f"  {mark} (no output)")
            else:
                rest = live.finish(self, event.result)
                self._raw_line(self._marked(mark, rest)
                               or f"  {mark} {'failed' if event.result.error else 'done'}")
            note, _ = told_model(event.result)  # (the values line is in the output shown)
            if note:  # what the model was told about it, dim
                shown = f"  ℹ ipyagent's note to the model: {note}"
                self._raw_line(f"{_DIM}{shown}{_RESET}" if self.colour else shown)
            if _has_image(event.result):  # "[image/png …]" alone reads as if it were shown
                note = "  (a terminal cannot show images: a saved transcript keeps them)"
                self._raw_line(f"{_DIM}{note}{_RESET}" if self.colour else note)
        elif isinstance(event, ContextCompacted):
            self._line(f"[info] {compaction_line(event)}")
        elif isinstance(event, MemoryRecalled):  # collapsed: `%agent memory` shows the notes
            self._line(f"[info] {event.summary}")
        elif isinstance(event, FilesPreviewed):  # collapsed: `%agent context` shows the text
            for line in event.lines:
                self._line(f"[info] {line}")
        elif isinstance(event, Notice):
            self._line(f"[{event.level}] {event.message}")
            if event.level == "error":
                self._errors_shown.append(event.message)
        elif isinstance(event, StepFinished):
            if self.step_mode:
                self._line(f"── {event.step.footer(f'paused: {self.step_hint}')}")
        elif isinstance(event, RunFinished):
            self._line(f"── {event.result.footer(shown=self._errors_shown)}")


_LIVE = "  ┆ "  # the prefix of what a call prints while it runs


def _fence_lang(lang: str) -> str:
    """The lexer for a fence's language: Python's for none, "py" or "python3"."""
    lang = lang.lower()
    return "python" if lang in ("", "py", "python", "python3", "ipython", "ipython3") else lang


def _has_image(result: ToolResult) -> bool:
    """True when one of ``result``'s rich outputs is an image (a plot)."""
    datas = [out.get("data") for out in outputs_of(result)]
    return any(str(mime).startswith("image/") for data in datas if isinstance(data, dict)
               for mime in data)
_RED, _DIM, _RESET = "\x1b[31m", "\x1b[2m", "\x1b[0m"


def _theme(scheme: str) -> Any:
    """IPython's colour theme named ``scheme`` (its current one), or None without IPython."""
    try:
        from IPython.utils.PyColorize import theme_table
    except ImportError:
        return None
    try:
        return theme_table[(scheme or "neutral").lower()]
    except (KeyError, ValueError):  # a scheme this IPython does not know
        return theme_table["neutral"]


def _lexer(lang: str = "python") -> Any:
    if lang != "python":
        from pygments.lexers import get_lexer_by_name  # type: ignore[import-untyped]

        return get_lexer_by_name(lang, ensurenl=False, stripnl=False)
    try:
        from ipython_pygments_lexers import IPython3Lexer as Lexer  # type: ignore[import-untyped]
    except ImportError:
        from pygments.lexers import PythonLexer as Lexer  # type: ignore[import-untyped]
    return Lexer(ensurenl=False, stripnl=False)


def _code_tokens(code: str, lang: str = "python") -> list[tuple[Any, str]]:
    from pygments import lex  # type: ignore[import-untyped]

    tokens = list(lex(code, _lexer(lang)))
    if lang == "python":
        return tokens
    from pygments.token import Name, Text  # type: ignore[import-untyped]

    # IPython's themes extend pygments' default style, which paints a shell variable
    # (`$HOME`) 256-colour 18, a dark blue a dark terminal all but hides, and spaces grey:
    # the variable takes the theme's own blue (the terminal's palette), spaces stay plain.
    return [(Name.Variable.Magic if kind in Name.Variable else Text if kind in Text.Whitespace
             else kind, part) for kind, part in tokens]


def _paint(theme: Any, tokens: list[tuple[Any, str]]) -> str:
    """``tokens`` (of one line, no newline) in the theme's colours."""
    return str(theme.format(tokens)).rstrip("\n")


def _highlight(lines: list[str], scheme: str = "", lang: str = "python") -> list[str]:
    """Already-visible code lines in IPython's colours (its lexer, or pygments' for
    ``lang``, and its current scheme)."""
    try:
        theme = _theme(scheme)
        if theme is None:
            return lines
        return [_paint(theme, _code_tokens(ln, lang)) if ln.strip() else ln for ln in lines]
    except ImportError:  # no pygments: plain
        return lines


# The parts of an IPython traceback (ultratb's verbose form), as the plain text reads.
_TOPLINE = re.compile(r"-{20,}")
_HEADER = re.compile(r"([A-Za-z_][\w.]*)(\s+Traceback \(most recent call last\))")
_FRAME = re.compile(r"(Cell|File|Input)( )(.+?)((?:, line \d+|:\d+)?)(?:(, in )([\w.<>]+)(\(.*\))?)?")
_SOURCE = re.compile(r"(-*> ?\d+| +\d+)( )(.*)")
_ELLIPSIS = re.compile(r" +\(\.\.\.\)")
_LAST = re.compile(r"([A-Za-z_][\w.]*)(: .*)?")


def traceback_colours(lines: list[str], scheme: str = "") -> list[str] | None:
    """Plain, already-visible lines of an error, with IPython's traceback colours for the
    traceback part (what was printed before it stays plain); None when there is none.

    Why parse the plain text: the sibling's traceback carries escape codes, but they come
    from code we do not trust (a traceback can be faked, a formatter replaced), so only
    escapes made here, after ``visible``, reach the terminal.
    """
    start = next((i for i, ln in enumerate(lines[:-1])
                  if _TOPLINE.fullmatch(ln) and _HEADER.fullmatch(lines[i + 1])), None)
    try:
        theme = _theme(scheme) if start is not None else None
    except ImportError:
        theme = None
    if theme is None or start is None:
        return None
    from pygments.token import Token  # type: ignore[import-untyped]

    last = max(i for i, ln in enumerate(lines) if ln.strip())
    out = lines[:start]
    for i, ln in enumerate(lines[start:], start):
        toks: list[tuple[Any, str]]
        if _TOPLINE.fullmatch(ln):
            toks = [(Token.Topline, ln)]
        elif m := _HEADER.fullmatch(ln):
            toks = [(Token.ExcName, m[1]), (Token, m[2])]
        elif i == last and (m := _LAST.fullmatch(ln)):
            toks = [(Token.ExcName, m[1]), (Token, m[2] or "")]
        elif m := _SOURCE.fullmatch(ln):
            toks = [(Token.LinenoEm, m[1]), (Token, m[2]), *_code_tokens(m[3])]
        elif _ELLIPSIS.fullmatch(ln):
            toks = [(Token.LinenoEm, ln)]
        elif m := _FRAME.fullmatch(ln):
            # The frame's header as ultratb writes it (its emphasised variant).
            toks = [(Token.NormalEm, m[1]), (Token.NormalEm, m[2]), (Token.FilenameEm, m[3]),
                    (Token.FilenameEm, m[4])]
            if m[5]:
                toks += [(Token, m[5]), (Token.VName, m[6]), (Token.ValEm, m[7] or "")]
        else:
            toks = [(Token, ln)]
        out.append(_paint(theme, toks) if ln else ln)
    return out


def _lines(text: str, keepends: bool = False) -> list[str]:
    """``text.splitlines()`` at ``\\n`` only: the other breaks it knows (CR, VT, FF, U+2028…)
    stay in their line, where ``visible`` shows them."""
    lines = text.split("\n")
    if keepends:
        return [ln + "\n" for ln in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    return lines[:-1] if lines[-1] == "" else lines


class _Live:
    """What one running call has printed so far, and how much of it was shown."""

    def __init__(self) -> None:
        self.lines = 0  # whole lines shown
        self.held = False  # over the live limit: the tail is shown at the end

    def finish(self, display: TerminalDisplay, result: ToolResult) -> list[str]:
        """The lines of ``result`` still to show: what the live stream did not."""
        if not display._at_line_start:
            display._write("\n")
        full = result.output.rstrip()
        half = display.max_output_lines // 2
        streamed = model_text([o for o in outputs_of(result) if o.get("output_type") == "stream"],
                              max_chars=len(full) + 1)
        if not streamed or streamed not in full:
            # The kernel cut the output (or streams and results interleave): end with the
            # tail, which holds the outcome.
            tail = _lines(full)[-half:]
            return ["…", *tail] if tail and self.held else tail
        before, _, after = full.partition(streamed)
        unseen = _lines(streamed)[self.lines:] if self.held else []
        if len(unseen) > half:
            unseen = [f"… {len(unseen) - half} more lines …", *unseen[-half:]]
        return [*_lines(before.strip("\n")), *unseen, *_lines(after.strip("\n"))]
