"""What a task asks of the demo model's notebook flows, read from its words and context.

The namespace picture (which of the user's variables a task names, and code that looks at
one as its type allows), a fact to remember, a file to write the result to, a value to
hand over: each a small reader, so the planning in ``demo`` stays a list of decisions.
"""

from __future__ import annotations

import re
from typing import Any

from ..context.items import Message, ToolResult

__all__ = ["PLOT_WORDS", "NAMESPACE_MARKER", "MEMORY_TOOL", "OFFER_TOOL", "pictured", "mentioned",
           "variable_code", "fact_to_remember", "file_to_write", "wants_offer", "follow_up"]

# Words that ask for a plot (the demo's plot plan reads them too).
PLOT_WORDS = re.compile(r"\b(plot|plots|plotting|chart|charts|graph|graphs|histogram|scatter|"
                   r"visuali[sz]e)\b", re.IGNORECASE)

# What the namespace picture begins with (ipyagent.kernel.namespace.picture; a test keeps them
# equal: a model may not import the engine), and the tools of memory and offers.
NAMESPACE_MARKER = "The user's notebook has these variables"
MEMORY_TOOL = "remember"
OFFER_TOOL = "offer_result"
_PICTURED = re.compile(r"^- ([A-Za-z_]\w*)(?:: (.*))?$", re.MULTILINE)
_REMEMBER = re.compile(r"^\s*(?:please\s+)?(?:remember|note|keep in mind|don't forget)"
                       r"(?:\s+that)?\s*[:,]?\s+(.+)$", re.IGNORECASE | re.DOTALL)
_FILE = re.compile(r"\b(?:write|save|store|put|create|make)\b[^`]*?`?\b([\w.-]+\.(?:txt|md|csv|json|py|log))\b",
                   re.IGNORECASE)
_OFFER = re.compile(r"\b(?:offer|give (?:it|me|the result)|keep (?:it|the result)|"
                    r"hand (?:it )?over|into my (?:kernel|notebook))\b", re.IGNORECASE)


def pictured(items: list[Any]) -> dict[str, str]:
    """The user's variables named by the last namespace picture: name -> description."""
    for item in reversed(items):
        content = getattr(item, "content", None)
        if isinstance(item, Message) and item.role == "user" and isinstance(content, str) \
                and content.startswith(NAMESPACE_MARKER):
            return {m.group(1): (m.group(2) or "a variable") for m in _PICTURED.finditer(content)
                    if m.group(1) != "and"}
    return {}


def mentioned(task: str, shown: dict[str, str]) -> str | None:
    """The first pictured variable the task names as a word (picture order: largest first)."""
    words = set(re.findall(r"[A-Za-z_]\w*", task))
    return next((name for name in shown if name in words), None)


def variable_code(task: str, name: str, description: str) -> str:
    """Python that looks at the user's variable as its type allows (a plot when asked and
    the columns are named)."""
    kind = description.split(" ", 1)[0]
    if kind == "DataFrame":
        columns = re.findall(r"([A-Za-z_]\w*): \w+", description)
        named = [c for c in columns if re.search(rf"\b{re.escape(c)}\b", task)]
        if PLOT_WORDS.search(task) and len(named) >= 2:
            by = re.search(r"\bby\s+([A-Za-z_]\w*)", task)
            x = by.group(1) if by and by.group(1) in named else named[-1]
            y = next(c for c in named if c != x)
            return (f"import matplotlib.pyplot as plt\n\nax = {name}.plot(x={x!r}, y={y!r}, "
                    f"title={f'{y} by {x}'!r})\nplt.show()\n"
                    f"print({name}[[{x!r}, {y!r}]].describe())")
        return f"print({name}.shape)\nprint({name}.head())"
    if kind in ("Series", "ndarray"):
        return f"print(type({name}).__name__, {name}.shape)\nprint({name}[:5])"
    if kind in ("list", "tuple", "set", "frozenset", "dict"):
        return f"print(type({name}).__name__, len({name}))\nprint(list({name})[:5])"
    return f"print(type({name}).__name__)\nprint(repr({name})[:500])"


def fact_to_remember(task: str) -> str | None:
    """The fact of a 'remember that …' task, as one sentence; None for other tasks."""
    found = _REMEMBER.match(task.strip())
    if not found:
        return None
    fact = " ".join(found.group(1).split()).rstrip(".")
    return fact[:1].upper() + fact[1:] + "." if fact else None


def file_to_write(task: str) -> str | None:
    """The file a task asks the result to be written to ('save the result to result.txt')."""
    found = _FILE.search(task)
    return found.group(1) if found else None


def wants_offer(task: str) -> bool:
    """Whether the task asks for the result to be handed over ('…and offer it to me')."""
    return bool(_OFFER.search(task))


def follow_up(result: ToolResult) -> str:
    """One sentence on what became of a file write or an offer."""
    said = " ".join(result.output.strip().split())
    if result.name == "write_file":
        return (f"Writing the file failed: {said}" if result.error
                else f"The file: {said}" if said else "I wrote the file.")
    return f"The offer: {said}" if said else "I offered the value."
