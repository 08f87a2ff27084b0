"""Whether a re-run call reproduced its recorded output: replay and rebuild compare alike.

Both sides are normalised first (``_util.normalise``: dates, addresses, temporary paths…); what
ipyagent itself appended to a result (the note that says which files reached your folder)
is not the code's output and is left out.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from .._util.normalise import normalise
from ..context.items import NO_OUTPUT, SHOWN, ToolResult
from ..context.spill import outputs_of

__all__ = ["Difference", "observed", "differs"]

# Transcripts from before the note was kept apart (meta["note"]) have it at the end of the text.
_FILES_NOTE = "[ipyagent note, not tool output: files changed:"


@dataclass
class Difference:
    """One python call whose re-run output differs from the recorded one."""

    step: int  # 1-based index of the recorded turn (one model request = one step)
    call_id: str
    code: str
    recorded: str
    new: str
    recorded_error: bool = False
    new_error: bool = False

    def diff(self) -> str:
        """A unified diff of the normalised outputs."""
        lines = difflib.unified_diff(normalise(self.recorded).splitlines(),
                                     normalise(self.new).splitlines(),
                                     "recorded", "replayed", lineterm="")
        return "\n".join(lines)

    def status_line(self) -> str:
        """How each ended, for a difference that is not in the text."""
        return (f"recorded {'an error' if self.recorded_error else 'success'}, replay "
                f"{'an error' if self.new_error else 'success'}")

    def __repr__(self) -> str:
        return f"<Difference step {self.step} call {self.call_id}>"


def observed(result: ToolResult) -> str:
    """What the kernel produced: the full outputs' text (the model's copy may have been cut
    to fit the context window or to ``tool_output_limit``), else the result's text without
    ipyagent's note on the files the call changed or the value it showed of a silent call."""
    outputs = outputs_of(result)
    if outputs:
        from ..kernel.outputs import model_text

        return model_text(outputs, 0)
    text = result.output
    if result.meta.get(SHOWN):  # the value a silent last line set: shown by ipyagent
        return NO_OUTPUT
    at = text.find(_FILES_NOTE)
    return text[:at].rstrip("\n") if at >= 0 else text


def differs(old: ToolResult, new: ToolResult) -> bool:
    """True when ``new`` did not reproduce ``old`` (normalised output, error, status)."""
    return (normalise(observed(old)) != normalise(observed(new)) or old.error != new.error
            or old.meta.get("status") != new.meta.get("status"))
