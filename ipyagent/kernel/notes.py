"""What the model is told when a kernel call did not simply finish: one wording for the
local sibling and a remote kernel, so a death reads the same wherever the code ran."""

from __future__ import annotations

__all__ = ["died_idle", "died_running", "interrupted", "restart_failed", "stuck_restarted",
           "unknown_outcome"]


def died_idle(cause: str) -> str:
    """The kernel died between calls (a background thread, a limit, a server that culled it)."""
    return (f"[The kernel had died ({cause}) since the last call and was restarted: variables "
            "from earlier calls are lost.]")


def died_running(cause: str) -> str:
    """The kernel died while running this call's code."""
    return (f"[The kernel died ({cause}) while running this code. All variables and imports "
            "were lost; a fresh kernel was started.]")


def restart_failed(error: object) -> str:
    """The fresh kernel after a death did not come up."""
    return f" [Restart failed: {error}]"


def interrupted(timeout: float) -> str:
    """The call ran past its time limit and the interrupt stopped it."""
    return f"[Interrupted after {timeout:g} s (timeout). The kernel's variables are kept.]"


def stopped_call_restarted() -> str:
    """A call that was stopped would not end before this one: the kernel was restarted."""
    return ("[A call stopped earlier would not end, so the kernel was restarted before this "
            "one: variables from earlier calls are lost.]")


def stuck_restarted(timeout: float) -> str:
    """The call ran past its time limit and the interrupt did not stop it."""
    return (f"[Still running {timeout:g} s after the timeout and the interrupt did not stop it "
            "(a long call in C?); the kernel was restarted, so all variables were lost.]")


def unknown_outcome(why: str) -> str:
    """The connection to a remote kernel dropped while this call ran: it was not re-sent."""
    return (f"[The connection to the remote kernel dropped while this code was running ({why}). "
            "Whether it finished is unknown: it was not run again. Check its effects before "
            "repeating it; the kernel's variables are kept.]")
