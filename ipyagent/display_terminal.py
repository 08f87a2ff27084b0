"""Plain-text rendering of a run, for terminals, scripts and terminal IPython."""

from __future__ import annotations

import sys
from typing import IO, Any, Callable

from .events import (
    ContextCompacted, Notice, compaction_line, RunFinished, StepFinished, StepStarted,
    ToolCallDecided, ToolCallFinished, ToolCallRequested, ToolOutput,
)
from .items import ToolCall, ToolResult
from .kernel_outputs import model_text
from .models.base import ReasoningDelta, TextDelta

__all__ = ["TerminalDisplay"]


class TerminalDisplay:
    """A listener that streams a run as plain text."""

    def __init__(self, stream: IO[str] | None = None, show_reasoning: bool = False,
                 max_output_lines: int = 40,
                 preview: Callable[[ToolCall], str | None] | None = None,
                 step_mode: bool = False) -> None:
        self.stream = stream
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

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
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
        for piece in event.text.splitlines(keepends=True):
            if live.held:
                return  # the rest is summed up when the call ends
            if live.lines >= self.max_output_lines // 2:
                live.held = True
                self._write(("" if self._at_line_start else "\n") + "  ┆ …\n")
                return
            # A progress bar's carriage return rewrites its line, prefix included.
            piece = piece.replace("\r\n", "\n").replace("\r", "\r" + _LIVE)
            self._write((_LIVE if self._at_line_start else "") + piece)
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
                body = "\n".join("  │ " + ln for ln in str(call.arguments["code"]).splitlines())
                self._line(f"  ┌ python ({call.id})\n{body}")
            else:
                self._line(f"  ┌ {call.summary()} ({call.id})")
                diff = self.preview(call)
                if diff:
                    self._line("\n".join("  │ " + ln for ln in diff.rstrip().splitlines()))
        elif isinstance(event, ToolCallDecided):
            d = event.decision
            if not d.approved:
                self._line("  ✗ denied" + (f": {d.reason}" if d.reason else ""))
            elif d.action == "edit":
                self._line("  ✎ edited before running")
        elif isinstance(event, ToolOutput):
            self._live_output(event)
        elif isinstance(event, ToolCallFinished):
            if event.result.meta.get("denied"):
                return
            live = self._live.pop(event.call.id, None)
            mark = "✗" if event.result.error else "└"
            if live is None:
                lines = self._clip(event.result.output.rstrip().splitlines())
                self._line("\n".join(f"  {mark} " + ln for ln in lines) or f"  {mark} (no output)")
                return
            rest = live.finish(self, event.result)
            self._line("\n".join(f"  {mark} " + ln for ln in rest)
                       or f"  {mark} {'failed' if event.result.error else 'done'}")
        elif isinstance(event, ContextCompacted):
            self._line(f"[info] {compaction_line(event)}")
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
            tail = full.splitlines()[-half:]
            return ["…", *tail] if tail and self.held else tail
        before, _, after = full.partition(streamed)
        unseen = streamed.splitlines()[self.lines:] if self.held else []
        if len(unseen) > half:
            unseen = [f"… {len(unseen) - half} more lines …", *unseen[-half:]]
        return [*before.strip("\n").splitlines(), *unseen, *after.strip("\n").splitlines()]
