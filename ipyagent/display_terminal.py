"""Plain-text rendering of a run, for terminals, scripts and terminal IPython."""

from __future__ import annotations

import sys
from typing import IO, Any, Callable

from .events import (
    ContextCompacted, Notice, compaction_line, RunFinished, StepStarted, ToolCallDecided, ToolCallFinished, ToolCallRequested,
)
from .items import ToolCall
from .models.base import ReasoningDelta, TextDelta

__all__ = ["TerminalDisplay"]


class TerminalDisplay:
    """A listener that streams a run as plain text."""

    def __init__(self, stream: IO[str] | None = None, show_reasoning: bool = False,
                 max_output_lines: int = 40,
                 preview: Callable[[ToolCall], str | None] | None = None) -> None:
        self.stream = stream
        self.preview = preview or (lambda call: None)  # a tool's own view (diffs)
        self.show_reasoning = show_reasoning
        self.max_output_lines = max_output_lines
        self._at_line_start = True
        self._errors_shown: list[str] = []  # said once as a notice: the footer points up

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
        elif isinstance(event, ToolCallFinished):
            if event.result.meta.get("denied"):
                return
            lines = event.result.output.rstrip().splitlines()
            if len(lines) > self.max_output_lines:
                half = self.max_output_lines // 2
                lines = lines[:half] + [f"… {len(lines) - 2 * half} more lines …"] + lines[-half:]
            mark = "✗" if event.result.error else "└"
            self._line("\n".join(f"  {mark} " + ln for ln in lines) or f"  {mark} (no output)")
        elif isinstance(event, ContextCompacted):
            self._line(f"[info] {compaction_line(event)}")
        elif isinstance(event, Notice):
            self._line(f"[{event.level}] {event.message}")
            if event.level == "error":
                self._errors_shown.append(event.message)
        elif isinstance(event, RunFinished):
            self._line(f"── {event.result.footer(shown=self._errors_shown)}")
