"""Plain-text rendering of a run, for terminals, scripts and terminal IPython.

Everything written goes through ``_text.visible`` (in ``_write``): model
text, code, arguments, tool names, output and error lines all come from outside, and a
terminal obeys the control sequences in them. The one control kept is a progress bar's
carriage return in live output, which rewrites only its own ``┆`` line (prefix included).
Colour (pygments for code, red for errors, as IPython's terminal does) only on a terminal
without ``NO_COLOR``, and only added *after* ``visible``: its escapes are the only ones.
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any, Callable

from .._text import visible
from ..events import (
    ContextCompacted,
    MemoryRecalled,
    Notice,
    RunFinished,
    StepFinished,
    StepStarted,
    ToolCallDecided,
    ToolCallFinished,
    ToolCallRequested,
    ToolOutput,
    compaction_line,
)
from ..items import ToolCall, ToolResult
from ..kernel.outputs import model_text
from ..models.base import ReasoningDelta, TextDelta

__all__ = ["TerminalDisplay"]


class TerminalDisplay:
    """A listener that streams a run as plain text."""

    def __init__(self, stream: IO[str] | None = None, show_reasoning: bool = False,
                 max_output_lines: int = 40,
                 preview: Callable[[ToolCall], str | None] | None = None,
                 step_mode: bool = False, colour: bool | None = None) -> None:
        self.stream = stream
        self._colour = colour  # None: on a terminal without NO_COLOR
        self.step_mode = step_mode  # `%agent --step` / `%agent step`: say where each step ended
        self.preview = preview or (lambda call: None)  # a tool's own view (diffs)
        self.show_reasoning = show_reasoning
        self.max_output_lines = max_output_lines
        self._at_line_start = True
        self._errors_shown: list[str] = []  # said once as a notice: the footer points up
        self._live: dict[str, _Live] = {}  # what running calls printed, by call id

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

    def _code(self, code: str) -> str:
        """``code`` as the card's ``│`` lines: made visible, then highlighted (on a tty)."""
        lines = [visible(ln) for ln in _lines(code.rstrip())]
        if self.colour and lines:
            lines = _highlight(lines)
        return "\n".join("  │ " + ln for ln in lines)

    def _marked(self, mark: str, lines: list[str]) -> str:
        """Result lines after ``mark`` (made visible; an error's in red on a tty)."""
        shown = [f"  {mark} " + visible(ln) for ln in lines]
        if self.colour and mark == "✗":
            shown = [f"{_RED}{ln}{_RESET}" for ln in shown]
        return "\n".join(shown)

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
        if len(lines) <= self.max_output_lines:
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
            if live.lines >= self.max_output_lines // 2:
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
        if isinstance(event, TextDelta):
            self._write(event.text)
        elif isinstance(event, ReasoningDelta):
            if self.show_reasoning:
                self._write(event.text)
        elif isinstance(event, StepStarted):
            pass
        elif isinstance(event, ToolCallRequested):
            call = event.call
            if call.name == "python" and "code" in call.arguments:
                # Split at newlines only: the lines shown are the code's own, byte for byte.
                self._raw_line(f"  ┌ python ({visible(call.id)})\n"
                               f"{self._code(str(call.arguments['code']))}")
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
            elif d.action == "edit":
                self._line("  ✎ edited before running; what runs:")
                args = d.arguments if d.arguments is not None else event.call.arguments
                ran = (str(args["code"]) if "code" in args
                       else json.dumps(args, indent=2, ensure_ascii=False))
                self._raw_line(self._code(ran))
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
                return
            rest = live.finish(self, event.result)
            self._raw_line(self._marked(mark, rest)
                           or f"  {mark} {'failed' if event.result.error else 'done'}")
        elif isinstance(event, ContextCompacted):
            self._line(f"[info] {compaction_line(event)}")
        elif isinstance(event, MemoryRecalled):  # collapsed: `%agent memory` shows the notes
            self._line(f"[info] {event.summary}")
        elif isinstance(event, Notice):
            self._line(f"[{event.level}] {event.message}")
            if event.level == "error":
                self._errors_shown.append(event.message)
        elif isinstance(event, StepFinished):
            if self.step_mode:
                self._line(f"── {event.step.footer('paused: %agent step runs the next one')}")
        elif isinstance(event, RunFinished):
            self._line(f"── {event.result.footer(shown=self._errors_shown)}")


_LIVE = "  ┆ "  # the prefix of what a call prints while it runs
_RED, _RESET = "\x1b[31m", "\x1b[0m"


def _highlight(lines: list[str]) -> list[str]:
    """Already-visible code lines with pygments' terminal colours (IPython's lexer)."""
    try:
        from pygments import highlight  # type: ignore[import-untyped]
        from pygments.formatters import TerminalFormatter  # type: ignore[import-untyped]

        try:
            from ipython_pygments_lexers import (  # type: ignore[import-untyped]
                IPython3Lexer as Lexer,
            )
        except ImportError:
            from pygments.lexers import (  # type: ignore[import-untyped]
                PythonLexer as Lexer,
            )
    except ImportError:
        return lines
    text = highlight("\n".join(lines), Lexer(ensurenl=False, stripnl=False),
                     TerminalFormatter())
    out = text.split("\n")
    return out if len(out) == len(lines) else lines


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
        streamed = model_text([o for o in result.outputs if o.get("output_type") == "stream"],
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
