"""Provider-neutral context items: plain dataclasses that round-trip through JSON.

The same items are sent to the model, shown to the user and saved in transcripts.
Each has a ``type`` tag (``item.to_dict()["type"]``) so ``item_from_dict`` can
rebuild it; unknown keys in a dict are kept in ``meta`` so nothing is lost.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Literal, Type, TypeVar, Union

from .._util.text import one_line, visible
from ..trust.untrusted import fence, inline_code, markdown_literal, markdown_text
from .spill import OutputsField, ReplacedField, outputs_of, raw_replaced, replaced_of

__all__ = [
    "CODE_ARGUMENTS",
    "NOTE_LEAD",
    "CHANGES_NOTE",
    "PREVIEW_KEY",
    "told_model",
    "code_of",
    "note_line",
    "skip_reason",
    "NO_OUTPUT",
    "SHOWN",
    "VALUES",
    "kernel_output",
    "Message",
    "ToolCall",
    "ToolResult",
    "Reasoning",
    "Summary",
    "Item",
    "item_from_dict",
    "new_call_id",
    "unfold",
    "unfold_dicts",
    "turn_spans",
]

Role = Literal["user", "assistant", "system"]
_I = TypeVar("_I", bound="_ItemBase")
_N = TypeVar("_N")


def new_call_id() -> str:
    """A fresh tool-call id, for servers that send none (or ``""``)."""
    return "call_" + uuid.uuid4().hex[:24]


class _ItemBase:
    """Shared JSON and repr behaviour."""

    type: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict with a ``type`` tag."""
        data = asdict(self._whole())  # type: ignore[call-overload]
        return {"type": self.type, **data}

    def _whole(self) -> Any:
        """The item to serialise: itself, or a shallow copy holding its spilled values read
        back (a read of the field itself would keep them on the item)."""
        return self

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    # Type, not type: in this class body ``type`` is the tag attribute.
    @classmethod
    def from_dict(cls: Type[_I], data: dict[str, Any]) -> _I:  # noqa: UP006
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        known = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names and k != "type"}
        if extra and "meta" in names:
            known["meta"] = {**known.get("meta", {}), **extra}
        return cls(**known)

    def summary(self) -> str:
        """One line for tables."""
        raise NotImplementedError

    def text(self) -> str:
        """The item's full text (``str(item)``; ``repr`` is the short form)."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.text()

    @property
    def label(self) -> str:
        return self.type

    def _repr_markdown_(self) -> str:
        return f"**{self.label}** — {markdown_literal(self.summary())}"


@dataclass
class Message(_ItemBase):
    """A user, assistant or system message."""

    type: ClassVar[str] = "message"
    role: Role
    content: str
    meta: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        return one_line(self.content, 80)

    def text(self) -> str:
        return self.content

    @property
    def label(self) -> str:
        return self.role

    def __repr__(self) -> str:
        return f"Message({self.role}: {one_line(self.content, 60)!r})"

    def _repr_markdown_(self) -> str:
        return f"**{markdown_literal(self.role)}**\n\n{markdown_text(self.content)}"


# Tools whose call is one piece of code: tool -> (its argument, the language it is in).
# Such a call is shown as that code, highlighted, byte for byte (never as JSON).
CODE_ARGUMENTS: dict[str, tuple[str, str]] = {"python": ("code", "python"),
                                              "shell": ("command", "bash")}


def code_of(name: str, arguments: dict[str, Any]) -> tuple[str, str] | None:
    """(language, code) of a call of ``name`` that is one piece of code, else None.

    Only when the code is the call's one argument: a tool of the user's may take the name
    and more parameters, and what the model set besides the code is part of what runs,
    so such a call is shown whole (as JSON)."""
    key, lang = CODE_ARGUMENTS.get(name, ("", ""))
    if key and isinstance(arguments, dict) and key in arguments and len(arguments) == 1:
        return lang, str(arguments[key])
    return None


@dataclass
class ToolCall(_ItemBase):
    """A request by the model to run a tool with JSON arguments."""

    type: ClassVar[str] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    # The arguments exactly as the server sent them, when they did not parse as JSON:
    # kept so the model can be told what was wrong and the transcript stays honest.
    raw_arguments: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        code = code_of(self.name, self.arguments)
        if code is not None:
            return f"{self.name}: {one_line(code[1], 70)}"
        return f"{self.name}({one_line(json.dumps(self.arguments, ensure_ascii=False), 70)})"

    def text(self) -> str:
        code = code_of(self.name, self.arguments)
        if code is not None:
            return code[1]
        return f"{self.name}({json.dumps(self.arguments, indent=2, ensure_ascii=False)})"

    @property
    def label(self) -> str:
        return "tool call"

    def __repr__(self) -> str:
        return f"ToolCall({self.summary()!r}, id={self.id!r})"

    def _repr_markdown_(self) -> str:
        head = f"**tool call** {inline_code(self.name)} ({markdown_literal(self.id)})"
        code = code_of(self.name, self.arguments)
        if code is not None:
            return f"{head}\n\n{fence(code[1], code[0])}"
        args = json.dumps(self.arguments, indent=2, ensure_ascii=False)
        return f"{head}\n\n{fence(args, 'json')}"


@dataclass
class ToolResult(_ItemBase):
    """What a tool call produced. ``output`` is the text the model sees."""

    type: ClassVar[str] = "tool_result"
    call_id: str
    output: str
    error: bool = False
    name: str = ""
    # Rich outputs (nbformat output dicts) for display and transcripts; the model
    # sees only ``output``. Once saved, large values may be spilled from memory; a read
    # brings them back onto the item (``ipyagent.context.spill``) until the next save.
    outputs: list[dict[str, Any]] = field(default_factory=list)
    execution_count: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        return _equal(self, other, "outputs", outputs_of)

    def _whole(self) -> ToolResult:
        return _read_back(self, "outputs", outputs_of)

    def summary(self) -> str:
        return ("error: " if self.error else "") + one_line(self.output, 80)

    def text(self) -> str:
        return self.output

    @property
    def full_output(self) -> str:
        """The text the tool gave: ``output``, or what compaction cleared from it
        (``meta["cleared_output"]``) to fit the context window."""
        text = self.meta.get("cleared_output")
        return text if isinstance(text, str) else self.output

    def for_model(self) -> str:
        """``output`` as the model gets it, then ipyagent's note (``meta["note"]``, e.g. that
        the user edited the call) on a line of its own after it (``note_line``).

        A line of the output that reads like our note is marked as printed by the tool, so
        what a tool prints can never pass for ipyagent's words."""
        output = unforged(self.output)
        note = self.meta.get("note")
        if not note:
            return output
        output = output.rstrip("\n")
        return f"{output}\n\n{note_line(str(note))}" if output else note_line(str(note))

    @property
    def label(self) -> str:
        return "tool error" if self.error else "tool result"

    def __repr__(self) -> str:
        flag = ", error=True" if self.error else ""
        return f"ToolResult({one_line(self.output, 60)!r}, call_id={self.call_id!r}{flag})"

    def _repr_markdown_(self) -> str:
        return f"**{self.label}** ({markdown_literal(self.call_id)})\n\n{fence(self.output)}"


NO_OUTPUT = "(no output)"  # a result's text when its call printed nothing
# ToolResult.meta: the name whose value ipyagent showed in the text of a call that printed
# nothing ("(no output; x = 3)"): not the kernel's output, so a re-run is not compared on it.
SHOWN = "shown"
# ToolResult.meta: the line ipyagent added after a failed call's output, the values its
# failing line read ("values when line 5 failed: city = 'Oslo'"; ``tools.line_values``).
VALUES = "line_values"


# Message.meta: a file preview put in the context before the first request (engine.previews);
# its value describes the files. Here, below the engine, so the checks and the export know it.
PREVIEW_KEY = "preview"


# ToolResult.meta: the part of ``meta["note"]`` that says which files reached the folder (the
# card's changes panel shows those files; ``told_model`` leaves it out).
CHANGES_NOTE = "changes_note"


def told_model(result: ToolResult) -> tuple[str, str]:
    """What ipyagent added for the model to this result, beyond the call's own output, as
    lines to show the person: ``(its note, the values line)``, each "" when there is none
    (the files-changed part of the note aside: the card's changes panel shows it).
    Why: a card showed the kernel's outputs only, so what the model was told about its error
    ("'price' is a column name, not a value: …") was in ``%agent context`` alone."""
    note = str(result.meta.get("note") or "")
    changes = str(result.meta.get(CHANGES_NOTE) or "")
    if changes:  # wherever it sits among the note's parts
        note = "; ".join(part for part in note.replace(changes, "\0").split("; ")
                         if part.strip() and part != "\0").replace("\0", "")
    values = result.meta.get(VALUES)
    # Hidden characters made visible here, once, for every place that shows them.
    return (visible(one_line(note, 2000)),
            visible(one_line(values, 400)) if isinstance(values, str) else "")


def kernel_output(result: ToolResult) -> str:
    """A result's text without the values line ipyagent added after it: what the code's
    own error says (the last error name, the last line) is read from this."""
    values = result.meta.get(VALUES)
    if isinstance(values, str) and values and result.output.endswith("\n" + values):
        return result.output[:-len(values) - 1]
    return result.output


def skip_reason(meta: dict[str, Any]) -> str:
    """Why a result's call was not run (``meta["skipped"]``: True for a call after a denied
    one in the same turn, else ipyagent's words); "" when it was not skipped."""
    skipped = meta.get("skipped")
    if not skipped:
        return ""
    return "an earlier call in the same turn was denied" if skipped is True else str(skipped)


# ipyagent's note on a tool result, as the model reads it: plain words on one line AFTER the
# output. Why not a bracketed tag before it ("[ipyagent note, not tool output: …]\n[tool
# output]"): a 1.5B model copied that framing, tag and all, into its final answer; a short
# sentence at the end is not a template to imitate.
NOTE_LEAD = "Note from ipyagent (not tool output):"
# A line of tool output that starts like our note (ours, or the framing we used before),
# after any quoting or markup characters: it is the tool's, and is marked so.
_FORGED = re.compile(r"^(?=[\s>*_`#|(\[-]*(?:note from ipyagent|ipyagent note|\[tool output\]))",
                     re.I | re.M)
PRINTED_MARK = "(printed by the tool) "


def note_line(note: str) -> str:
    """The line that carries ipyagent's ``note`` to the model (one line, whatever it holds)."""
    return f"{NOTE_LEAD} {' '.join(note.split())}"


def unforged(output: str) -> str:
    """``output`` with every line that could pass for ipyagent's note marked as the tool's."""
    return _FORGED.sub(PRINTED_MARK, output) if _FORGED.search(output) else output


@dataclass
class Reasoning(_ItemBase):
    """Reasoning text a model exposed; ``details`` keeps opaque data to send back."""

    type: ClassVar[str] = "reasoning"
    content: str
    details: Any = None
    meta: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        return one_line(self.content, 80) if self.content else "(opaque reasoning)"

    def text(self) -> str:
        return self.content or "(opaque reasoning)"

    def __repr__(self) -> str:
        return f"Reasoning({one_line(self.content, 60)!r})"


@dataclass
class Summary(_ItemBase):
    """A compaction summary that stands in for ``replaced`` older items."""

    type: ClassVar[str] = "summary"
    content: str
    replaced: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        return _equal(self, other, "replaced", replaced_of)

    def _whole(self) -> Summary:
        return _read_back(self, "replaced", replaced_of)

    def summary(self) -> str:
        return f"[{len(raw_replaced(self))} items] " + one_line(self.content, 80)

    def text(self) -> str:
        return self.content

    def __repr__(self) -> str:
        return f"Summary({len(raw_replaced(self))} items: {one_line(self.content, 50)!r})"


def _equal(item: Any, other: object, name: str, read: Callable[[Any], Any]) -> bool:
    """``item == other`` for an item whose field ``name`` may be spilled: the other fields
    first, the spilled values read back (``read``) only to compare items otherwise equal
    (``item in context`` must not read every plot back)."""
    if other.__class__ is not item.__class__:
        return NotImplemented
    mine, theirs = vars(item), vars(other)
    if any(mine.get(k) != theirs.get(k) for k in mine.keys() | theirs.keys() if k != name):
        return False
    return bool(mine.get(name) == theirs.get(name) or read(item) == read(other))


def _read_back(item: _I, name: str, read: Callable[[Any], Any]) -> _I:
    """``item``, or a shallow copy holding field ``name`` read back whole (reading the field
    itself would keep the values on the item)."""
    value = read(item)
    if value is vars(item)[name]:
        return item
    whole = copy.copy(item)
    whole.__dict__[name] = value
    return whole


# Read through descriptors: a saved result's large display values (and those of the results
# a summary replaced) may be spilled to a private file (``ipyagent.context.spill``) and are read back
# here, so every reader gets them whole.
ToolResult.outputs = OutputsField()  # type: ignore[assignment]
Summary.replaced = ReplacedField()  # type: ignore[assignment]

Item = Union[Message, ToolCall, ToolResult, Reasoning, Summary]

_TYPES: dict[str, type[Item]] = {
    cls.type: cls for cls in (Message, ToolCall, ToolResult, Reasoning, Summary)
}


def item_from_dict(data: dict[str, Any]) -> Item:
    """Rebuild an item from ``Item.to_dict()`` output."""
    try:
        cls = _TYPES[data["type"]]
    except KeyError:
        raise ValueError(f"not an ipyagent item: type={data.get('type')!r}") from None
    return cls.from_dict(data)


# -- compacted items: a Summary holds the dicts of the items it replaced ---------------------
def unfold(items: Iterable[Item], *, keep_summaries: bool = False) -> Iterator[Item]:
    """``items`` in the order they happened, each Summary replaced by the items it replaced
    (and so on, however deep they nest); ``keep_summaries``: each Summary also comes, after
    its items."""
    def inner(item: Item) -> Iterator[Item] | None:
        # the dicts as held: a spilled result's payloads are read when someone reads them
        return (item_from_dict(d) for d in raw_replaced(item)) if isinstance(item, Summary) else None

    return _unfold(items, inner, keep_summaries)


def unfold_dicts(dicts: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Item dicts with each summary dict replaced by the dicts it replaced, however deep;
    the dicts themselves are yielded, not copies."""
    def inner(d: dict[str, Any]) -> list[dict[str, Any]] | None:
        return (d.get("replaced") or []) if d.get("type") == "summary" else None

    return _unfold(dicts, inner, False)


def _unfold(nodes: Iterable[_N], inner: Callable[[_N], Iterable[_N] | None],
            keep: bool) -> Iterator[_N]:
    # A stack of iterators, not recursion: transcripts from before compaction flattened its
    # summaries nest them thousands deep.
    stack: list[tuple[Iterator[_N], _N | None]] = [(iter(nodes), None)]
    while stack:
        level, owner = stack[-1]
        for node in level:
            below = inner(node)
            if below is not None:
                stack.append((iter(below), node))
                break
            yield node
        else:
            stack.pop()
            if keep and owner is not None:
                yield owner


# -- turns -------------------------------------------------------------------------------
def turn_spans(items: Sequence[Item]) -> list[range]:
    """Where each model turn lies in ``items``: the index range of its assistant-side items
    (reasoning, assistant text, tool calls), in order.

    A turn is what one model reply adds: reasoning, then text, then calls, each optional.
    Anything else (a result, a user or system message, a summary) ends the turn; within a
    run of assistant-side items, reasoning after anything, or text after text or calls,
    starts the next one (the chat wire groups them the same way).
    """
    spans: list[range] = []
    start: int | None = None
    seen: set[str] = set()  # kinds of item the current turn has
    for i, item in enumerate(items):
        kind = _assistant_kind(item)
        if kind is None:
            if start is not None:
                spans.append(range(start, i))
            start = None
            continue
        if start is not None and (kind == "reasoning" and seen or
                                  kind == "message" and seen & {"message", "call"}):
            spans.append(range(start, i))
            start = None
        if start is None:
            start, seen = i, set()
        seen.add(kind)
    if start is not None:
        spans.append(range(start, len(items)))
    return spans


def _assistant_kind(item: Item) -> str | None:
    if isinstance(item, ToolCall):
        return "call"
    if isinstance(item, Reasoning) or (isinstance(item, Message) and item.role == "assistant"):
        return item.type
    return None
