"""What the run's own tool results say against the answer the model is about to give.

Why: measured at 0.5B-1.5B (issue 33), a small model makes one call, gets an exception, a
zero or an absurd value, and answers with confidence anyway; it never looks twice. Each
rule here is a small pure function of the task, the answer and the run's items, and says
what it found in two voices: ``said`` (one line for the person) and ``ask`` (for the model).
None of them judges whether an answer is *right*: they only notice that the evidence the
run gathered does not back it. The engine (``engine/verify.py``) decides whether to ask.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .._util.diffs import hunk_text, line_edits
from .._util.text import visible_name
from .items import NO_OUTPUT, PREVIEW_KEY, Item, Message, ToolCall, ToolResult, kernel_output

__all__ = ["Finding", "findings", "run_items", "empty_answer", "echoed_note", "error_ignored", "last_call_failed", "no_call_ran",
           "suspicious_value",
           "unsupported_numbers", "unchanged_files", "single_look", "own_constants", "numbers_in",
           "places_asked", "wrong_places", "form_asked", "wrong_form", "order_asked", "listed_items",
           "wrong_order", "receipt_answer",
           "files_to_write", "typed_files", "error_name", "wrong_line_changed", "asks_to_run_code", "code_ran_cleanly", "person_denied", "CHECK_KEY", "CONTINUE_KEY", "LIMIT_KEY", "ASKS_FOR_A_CALL"]

CHECK_KEY = "check"  # meta key of the message that carries the check to the model
# The rules whose ask is to run something again: where calls go under a grammar, the reply
# to such a check must be a call (measured at 1.5B: asked in words, the model repeated its
# answer, explained how to fix its SyntaxError, or showed a ```python block, without running
# anything). It can still say the call failed in the answer after that call's result.
ASKS_FOR_A_CALL = ("no_call", "units", "zero", "nan", "empty", "unsupported_number",
                   "error_ignored", "last_call_failed", "decimals", "receipt", "form", "order",
                   "file_edit", "file_empty", "empty_after_error", "case", "typed_file")
CONTINUE_KEY = "continue"  # meta key of ipyagent's "go on" after a reply cut at the limit
LIMIT_KEY = "limit"  # meta key of ipyagent's "answer now" once max_steps is reached


@dataclass(frozen=True)
class Finding:
    """One thing the evidence says against the answer."""

    rule: str  # empty_answer | empty_after_error | error_ignored | last_call_failed | no_call |
    #            empty | zero | nan | unsupported_number | file_unchanged | file_empty |
    #            file_edit | units | decimals | receipt | form | order | case | typed_file |
    #            code_answer
    said: str  # for the person: "the last output was a traceback"
    ask: str  # for the model: what to look at again


def run_items(items: Sequence[Item]) -> tuple[str, list[Item]]:
    """The task of the run in progress (its last user message that is not ours: not a
    check, not a "continue") and the items after it."""
    for i in range(len(items) - 1, -1, -1):
        item = items[i]
        if isinstance(item, Message) and item.role == "user" and not (
                CHECK_KEY in item.meta or CONTINUE_KEY in item.meta or LIMIT_KEY in item.meta):
            return item.content, list(items[i + 1:])
    return "", list(items)


def _ran(item: Item) -> bool:
    """A result of a call that ran (not denied, skipped, interrupted or unreadable)."""
    meta = item.meta if isinstance(item, ToolResult) else {}
    return isinstance(item, ToolResult) and not any(
        meta.get(k) for k in ("denied", "skipped", "interrupted", "unreadable"))


_NOTHING = ("", "null", "none", "nil", "undefined", "nan")


def empty_answer(answer: str, task: str = "", last: ToolResult | None = None) -> Finding | None:
    """The final reply says nothing: the person would get an empty answer (seen at 1.5B
    right after a result that held the answer). The ask repeats the task: told only that
    its reply was empty, the 1.5B model answered "The answer was empty". A reply with no
    word or number in it, or only a null ("NULL", ">", "None": seen at 0.5B when held to
    words), says nothing either. After a failed call (``last``) the ask is to fix it: at
    1.5B, an empty reply right after "name 'json' is not defined", told only to answer from
    the results above, answered a number no call had computed."""
    if re.sub(r"[\W_]+", "", answer).lower() not in _NOTHING:
        return None
    asked = " ".join(task.split())
    asked = asked if len(asked) <= 300 else asked[:299] + "…"
    if last is not None and (last.error or _TRACEBACK.search(last.output)):
        what = _what_failed(last)
        how = " (ipyagent's note after its error says how)" if last.meta.get("note") else ""
        return Finding("empty_after_error", f"the answer was empty, after {what}",
                       f"You have not answered yet, and your last tool call failed with {what}. "
                       f"Fix the call{how} and run it again; then answer."
                       + (f" The task was: {asked}" if asked else ""))
    return Finding("empty_answer", "the answer was empty",
                   (f"You have not answered yet. The task was: {asked} " if asked else
                    "You have not answered yet. ") +
                   "Reply with the answer, from the tool results above.")


def echoed_note(answer: str, items_now: Sequence[Item]) -> Finding | None:
    """The answer repeats ipyagent's words on a call it did not run (at 1.5B, told its
    questioned call was not run, the model answered with that message, word for word)."""
    said = " ".join(answer.split())
    for item in items_now:
        if isinstance(item, ToolResult) and item.meta.get("skipped") and item.meta.get("repeat_of"):
            head = " ".join(item.output.split())[:60]
            if len(head) >= 20 and head in said:
                return Finding("echoed_note", "the answer repeated ipyagent's note on a call not run",
                               "Your answer repeats ipyagent's message about a call it did not "
                               "run; that message is not an answer. Answer the task in your own "
                               "words from the tool outputs above, or write a different call.")
    return None


# -- the last output: an error the answer ignores, or a value that looks wrong --------------
_ACKNOWLEDGED = re.compile(
    r"\b(error|exception|traceback|fail(?:s|ed|ure)?|could ?n[o']t|can ?n[o']t|unable|"
    r"not (?:found|exist|possible|available)|does ?n[o']t exist|missing|no such|invalid)\b", re.I)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^\w*(?:Error|Exception): ", re.M)
_ERROR_NAME = re.compile(r"\b([A-Z]\w*(?:Error|Exception))\b")


def error_name(last: ToolResult) -> str | None:
    """The last error name the output shows ("KeyError"), or None."""
    names = [n for n in _ERROR_NAME.findall(kernel_output(last)) if n not in ("Error", "Exception")]
    return names[-1] if names else None


def _what_failed(last: ToolResult) -> str:
    """"an error (KeyError)", or "an error" when the output names none."""
    name = error_name(last)
    return f"an error ({name})" if name else "an error"


def error_ignored(answer: str, last: ToolResult) -> Finding | None:
    """The last call failed (an error, a traceback) and the answer does not say so."""
    if not (last.error or _TRACEBACK.search(last.output)):
        return None
    name = error_name(last)
    if _ACKNOWLEDGED.search(answer) or (name and name in answer):
        return None  # it told the user the call failed: that can be the answer
    what = _what_failed(last)
    return Finding("error_ignored", f"the last output was {what}",
                   f"Your last tool call failed with {what}, and your answer does not say so: "
                   "the answer cannot rest on that call. Read the error, fix the call and run it "
                   "again, or tell the user it failed.")


def last_call_failed(answer: str, last: ToolResult) -> Finding | None:
    """The last call failed and the answer reports it: told once that another way may work
    (a small model gives up on the first ModuleNotFoundError or wrong name it meets)."""
    if not (last.error or _TRACEBACK.search(last.output)):
        return None
    what = _what_failed(last)
    return Finding("last_call_failed", f"the last call ended in {what}",
                   f"Your last tool call failed with {what}. If another way can work (a module "
                   "that is installed, the standard library, a corrected name, path or "
                   "separator), write it and run it; only if none can, answer that it failed.")


# To run code, not to be shown it: "Use Python to …", "compute it with Python", "run some
# code"; not "write a Python script that …" or "how do I … in Python?".
_ASKS_TO_RUN = re.compile(
    r"\b(?:use|using|with)\s+(?:some\s+)?(?:python|the python tool)\b(?!\s+(?:script|function|"
    r"class|program|module|package|code\b))|\bpython\s+to\s+(?:compute|calculate|count|find|"
    r"convert|work out|check|read|add|sum|get|determine)\b|\brun\s+(?:some\s+)?(?:python|code)\b",
    re.I)
_ASKS_TO_SEE = re.compile(r"\b(?:write|show|give|draft|explain)\b[^.?!\n]{0,40}\b(?:script|function|"
                          r"class|program|snippet|example|code)\b", re.I)


# "Write a script that … and run it", "… then execute it": code to read, and to run; not
# "… and run it in the background / daily / on my laptop", nor "I'll review and then run it".
_AND_RUN_IT = re.compile(r"\b(?:and|then)\s+(?:also\s+)?(?:run|execute)\s+(?:it|them)"
                         r"(?:\s+on\s+(?!(?:my|our|your|a|an|the)\b)[\w.'-]+)?\s*(?:[.!]|$)", re.I | re.M)
_I_RUN = re.compile(r"\b(?:I|I'll|I'd|we|we'll|me)\b[^.;!?\n]*$", re.I)


def asks_to_run_code(task: str) -> bool:
    """The task asks for something computed by running Python, not for code to read."""
    run_it = _AND_RUN_IT.search(task)
    if run_it and not _I_RUN.search(task[:run_it.start()]) and (
            _ASKS_TO_RUN.search(task) or _ASKS_TO_SEE.search(task)):
        return True
    return bool(_ASKS_TO_RUN.search(task)) and not _ASKS_TO_SEE.search(task)


def person_denied(items: Iterable[Item]) -> bool:
    """The person denied a call among ``items``: their say, not the model's guess."""
    return any(isinstance(i, ToolResult) and i.meta.get("denied") for i in items)


def code_ran_cleanly(items: Iterable[Item]) -> bool:
    """A python or shell call among ``items`` ran and neither failed nor printed a traceback."""
    return any(_ran(i) and isinstance(i, ToolResult) and i.name in ("python", "shell")
               and not i.error and not _TRACEBACK.search(i.output) for i in items)


def no_call_ran(task: str, answer: str) -> Finding | None:
    """The task asks for Python and the model answered without running any."""
    if not asks_to_run_code(task) or not answer.strip():
        return None
    return Finding("no_call", "no code ran though the task asks for Python",
                   "The task asks you to use Python, and you answered without running any: "
                   "the answer is a guess. Call the python tool with code that computes it, "
                   "then answer from its output.")


def typed_files(task: str, results: Sequence[Item], can_run: bool) -> Finding | None:
    """The task asks for Python, and write_file wrote content the model typed itself: given
    neither by the task nor by any output of the code that ran (seen at 1.5B: asked to write
    list.txt's lines reversed "using Python", it wrote "4 3 2 1", the preview's line numbers,
    with write_file, and answered from its receipt; asked for numbers.txt sorted into
    sorted.txt, its code printed only the largest, and write_file wrote "1 42 7 19 3 25")."""
    if not can_run or not asks_to_run_code(task):
        return None
    outputs = [r.full_output for r in results
               if isinstance(r, ToolResult) and r.name in ("python", "shell")]
    # Text the task gives ("write 'hello from the agent' to note.txt") is not typed in, nor
    # text the code printed (its lines written out as they were shown). Once code ran, only
    # data is held against it (a line of a few words or a number each): a report in
    # sentences that quotes what the code printed is the model's to write.
    given = "\n".join([task, *outputs])
    typed = [str(r.meta["file"].get("path")) for r in results if isinstance(r, ToolResult)
             and r.name == "write_file" and not r.error and isinstance(r.meta.get("file"), dict)
             and (not outputs or _data_lines(str(r.meta["file"].get("text", ""))))
             and not all(line.strip() in given for line in
                         str(r.meta["file"].get("text", "")).splitlines())]
    if not typed:
        return None
    # The model's own path, but shown on one line and short: it is quoted three times.
    names = [visible_name(p) for p in typed[:3]]
    shown = ", ".join(dict.fromkeys(n if len(n) <= 60 else n[:59] + "…" for n in names))
    why = ("no output of your code shows it" if outputs else "no code ran")
    return Finding("typed_file", f"the task asks for Python; {shown} was typed in, not computed",
                   f"The task asks you to use Python, and {why}: what {shown} holds is "
                   "text you typed yourself. Run python code that reads the files it comes "
                   f"from, computes what {shown} should hold and writes {shown} itself; print "
                   "what it wrote, and then answer.")


def _data_lines(text: str) -> bool:
    """Two lines or more, each a value or a few words (not prose): what code computes."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return len(lines) >= 2 and all(len(line) <= 40 and len(line.split()) <= 3 for line in lines)


# Not an empty list or dict: "[]" is as often the answer ("no keys match") as a slip.
_NAN = re.compile(r"^(?:nan|-?inf|none|null|empty (?:dataframe|series)\b.*)$", re.I)
# The last value of a line, a unit after it or not ("Average speed: 0.00 m/s"); a word after
# it is not a unit ("0 errors" is a count).
_LAST_VALUE = re.compile(r"(?:^|[\s:=(\[,])(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|nan|-?inf|None)"
                         r"(?:\s?[a-zA-Z°µ%][a-zA-Z]{0,3}(?:[/^*·][\w²³^]{1,5})*[²³]?)?\W*$", re.I)


# What the python and shell tools say when the code printed nothing.
_NO_OUTPUT = (NO_OUTPUT, "(no output; exit code 0)")


# A task that asks for a count or an amount back: "reply with the number of lines", "how many".
_ASKS_A_NUMBER = re.compile(r"\b(?:reply|answer|respond)\s+with\s+(?:the\s+|its\s+|their\s+)?"
                            r"(?:line\s+|row\s+|page\s+)?(?:number|count|total|sum|amount)\b"
                            r"|\bhow\s+many\b", re.I)


def suspicious_value(answer: str, last: ToolResult, outputs_before: Sequence[str],
                     task: str = "") -> Finding | None:
    """The last output is empty (and nothing was printed before it), or its value is 0, NaN,
    infinite, None or an empty table. A silent call that wrote a file is no finding, unless
    the task asks for a number back and the answer gives one (seen at 1.5B: it appended a
    line without printing anything and answered "The file now has 4 lines"; it has 3)."""
    text = last.output.strip()
    text = "" if text in _NO_OUTPUT else text
    wrote = bool(last.meta.get("changes") or last.meta.get("file"))
    if not text:
        # A count the files-changed note shows (a file's lines now) is seen, not guessed: at
        # 1.5B "3 lines written" for a file of 3 lines was checked, and the answer lost its 3.
        shown = {c["lines"] for c in last.meta.get("changes") or []
                 if isinstance(c, dict) and isinstance(c.get("lines"), int)}
        claimed = numbers_in(answer)
        counted = bool(_ASKS_A_NUMBER.search(task)) and bool(claimed) and not all(
            n.value in shown for n in claimed)
        if (wrote and not counted) or any(o.strip() not in ("", *_NO_OUTPUT) for o in outputs_before) \
                or not answer.strip():
            return None
        return Finding("empty", "the last output was empty",
                       "Your last tool call printed nothing, and no call before it printed a "
                       "result: your answer rests on no output. Print the value you need and "
                       "look at it before answering.")
    line = text.splitlines()[-1].strip()
    match = _LAST_VALUE.search(line)
    value = match.group(1) if match else line
    if text.startswith(("Empty DataFrame", "Empty Series")):
        line = text.splitlines()[0]
    if _NAN.match(line) or _NAN.match(value):
        return Finding("nan", f"the last output was {_short(line)}",
                       f"Your last tool call gave {_short(line)}: that usually means the data "
                       "was not read or computed as intended (a wrong separator, column, filter "
                       "or unit). Check the data and the code before answering.")
    try:
        zero = float(value) == 0
    except ValueError:
        return None
    if not zero:
        return None
    return Finding("zero", f"the last output was {_short(line)}",
                   f"Your last tool call gave {_short(line)}: a zero (or a small value the "
                   "format rounded to zero) often means the data was not read as intended (a "
                   "wrong separator, column or filter) or a unit was converted twice. Call the "
                   "tool again to print the data or each intermediate value, check them, and "
                   "then answer.")


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit - 1] + "…")


# -- numbers in the answer that no output shows ---------------------------------------------
_SCI = re.compile(r"(?<![\w.])(-?\d+(?:\.(\d+))?)\s*(?:[x×*·]|\\times)\s*10\s*(?:\^|\*\*)\s*\{?"
                  r"([-+−]?\d+)\}?")
_SUPER = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
_SCI_SUPER = re.compile(r"(?<![\w.])(-?\d+(?:\.(\d+))?)\s*[x×·]\s*10([⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)")
_PLAIN = re.compile(r"(?<![\w.])([-−]?)(\d{1,3}(?:[, _  ]\d{3})+(?!\d)|\d+)(?:\.(\d+))?"
                    r"(?:[eE]([-+]?\d+))?(?!\.?\d)(%?)")
_FENCED = re.compile(r"^[ \t]*(```|~~~).*?(?:^[ \t]*\1|\Z)", re.S | re.M)


@dataclass(frozen=True)
class _Number:
    text: str
    value: float
    ulp: float  # the unit in the last place written: rounding to it is not a new number


def numbers_in(text: str) -> list[_Number]:
    """The numbers written in ``text``: thousands separators, decimals, scientific notation
    (``1.2e6``, ``1.2 × 10^6``, ``1.2×10⁶``) and percentages read as what they mean."""
    found: list[_Number] = []
    taken: list[tuple[int, int]] = []
    for pattern, exponent_of in ((_SCI, lambda m: m.group(3).replace("−", "-")),
                                 (_SCI_SUPER, lambda m: m.group(3).translate(_SUPER))):
        for m in pattern.finditer(text):
            try:
                exp = int(exponent_of(m))
                mantissa = float(m.group(1))
            except ValueError:
                continue
            places = len(m.group(2) or "")
            found.append(_Number(m.group(0), mantissa * 10.0 ** exp, 10.0 ** (exp - places)))
            taken.append(m.span())
    for m in _PLAIN.finditer(text):
        if any(a <= m.start() < b for a, b in taken):
            continue
        sign, whole, frac, power, percent = m.groups()
        digits = re.sub(r"[, _  ]", "", whole)
        places = len(frac or "")
        try:
            value = float(f"{'-' if sign else ''}{digits}.{frac or '0'}e{power or 0}")
        except ValueError:
            continue
        ulp = 10.0 ** (int(power or 0) - places)
        if percent:
            value, ulp = value / 100, ulp / 100
        found.append(_Number(m.group(0), value, ulp))
    return found


def _trivial(number: _Number) -> bool:
    """Small whole numbers (counts of steps, "2 decimals", list items): never a finding."""
    return number.value == int(number.value) and abs(number.value) <= 10 and number.ulp >= 1


def _backs(claim: _Number, seen: _Number) -> bool:
    """True when ``seen`` (from an output) backs ``claim``: equal, or equal once rounded or
    cut to the places the claim was written with (its sign aside: "a drop of 5")."""
    for value in (seen.value, -seen.value):
        slack = abs(value) * 1e-12 + claim.ulp * 1e-9  # float noise
        if abs(claim.value - value) <= claim.ulp / 2 + slack:  # rounded
            return True
        cut = (value - claim.value) * (1 if claim.value >= 0 else -1)
        if -slack <= cut < claim.ulp:  # truncated ("3.03" of 3.0399)
            return True
    return False


_LIST_MARKER = re.compile(r"^[ \t]*\d{1,3}[.)][ \t]", re.M)  # "1. a.py": a list's numbering
_EMPTY_RESULT = re.compile(r"^(?:\[\]|\{\}|set\(\)|\(\)|''|\"\"|Empty (?:DataFrame|Series)\b.*)$",
                           re.S)  # what an empty result prints: 0 is its count


def unsupported_numbers(answer: str, outputs: Iterable[str], inputs: Iterable[str],
                        task: str = "") -> Finding | None:
    """Numbers in the answer that appear in no tool output (nor in the task, the code, or
    anything else the run was given: ``inputs``), rounding and notation aside. A small whole
    number counts too when the task asks for a number back (at 1.5B: asked for the line
    number of the first ERROR, it printed the line and answered "the 5th line")."""
    outputs = list(outputs)
    seen = [n for text in outputs for n in numbers_in(text)]
    given = [n for text in inputs for n in numbers_in(text)]
    claims = numbers_in(_LIST_MARKER.sub("", _FENCED.sub("", answer)))

    def backed(claim: _Number) -> bool:
        return any(_backs(claim, n) for n in seen) or any(
            abs(claim.value - n.value) <= n.ulp * 1e-9 or _backs(claim, n) for n in given)

    # Small numbers count when a number is asked back and none of the answer's is backed:
    # with the count printed, "5 Mondays: March 2, 9, …" lists days, not guesses.
    asked = bool(_ASKS_A_NUMBER.search(task)) and not any(backed(c) for c in claims)
    nothing = any(_EMPTY_RESULT.match(o.strip()) for o in outputs)  # 0 is what an empty result says
    missing: list[str] = []
    for claim in claims:
        if (_trivial(claim) and not asked) or claim.text in missing or (
                nothing and claim.value == 0):
            continue
        if backed(claim):
            continue
        missing.append(claim.text)
    if not missing:
        return None
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return Finding("unsupported_number", f"{shown} in the answer appeared in no tool output",
                   f"Your answer says {shown}, but no tool output of this task shows "
                   f"{'that number' if len(missing) == 1 else 'these numbers'}. If you worked "
                   "it out yourself, compute it with a tool and print it; if it came from an "
                   "output, check you copied it right.")


# -- a file the task asked to write that no call changed ------------------------------------
_EXT = (r"(?:txt|csv|tsv|json|jsonl|py|md|yaml|yml|toml|ini|cfg|html|xml|log|ipynb|png|jpg|"
        r"jpeg|svg|pdf|xlsx|parquet|sql|sh|js|ts|r)")
_FILE = re.compile(rf"(?<![\w/.-])((?:[\w-]+/)*[\w-]+(?:\.[\w-]+)*\.{_EXT})\b", re.I)
_WRITE_VERB = re.compile(r"\b(?:write|writes|save|create|overwrite|append|export|store|"
                         r"generate|produce|make|edit|modify|update|change|fix|rename|add|put)\b",
                         re.I)
# Right before the name: "to", "into", "as", "named", "called", or the verb itself ("edit x.py").
_INTO = re.compile(r"(?:\b(?:to|into|as|named|called|in|write|save|create|overwrite|edit|"
                   r"modify|update|change|fix|rename)\s+(?:(?:a|an|the|new)\s+)?(?:file\s+)?"
                   r"(?:named\s+|called\s+)?[`'\"]?)$", re.I)


# "In settings.ini, change threshold …": the file first, the edit right after it.
_IN_FILE = re.compile(r"(?:^|\b(?:in|inside)\s+(?:the\s+)?(?:file\s+)?)[`'\"]?$", re.I)
_EDIT_AFTER = re.compile(r"^[`'\"]?\s*[,:]?\s*(?:please\s+)?(?:change|rename|replace|set|update|"
                         r"add|remove|delete|fix|edit|modify|append|insert)\b", re.I)


def files_to_write(task: str) -> list[str]:
    """Files the task asks to write or change ("write … to a file named note.txt", "In
    settings.ini, change threshold …")."""
    out: list[str] = []
    for m in _FILE.finditer(task):
        before = task[:m.start()]
        clause = re.split(r"[;!?\n]|\.\s", before)[-1][-120:]
        verbs = list(_WRITE_VERB.finditer(clause))
        edit_after = _IN_FILE.search(clause) and _EDIT_AFTER.match(task[m.end():m.end() + 60])
        if ((verbs and _INTO.search(clause)) or edit_after) and m.group(1) not in out:
            out.append(m.group(1))
    return out


def unchanged_files(task: str, written: Iterable[str]) -> Finding | None:
    """The task asked to write or change a file that no call of the run wrote."""
    paths = [p.replace("\\", "/") for p in written]
    missing = [name for name in files_to_write(task) if not _named(name, paths)]
    if not missing:
        return None
    shown = ", ".join(missing)
    # Asked for Python, a small model told "with a tool" typed the file in with write_file
    # (at 1.5B: "1 42 7 19 3 25" for numbers sorted into sorted.txt).
    how = ("with python code that computes what it should hold, and print what it wrote"
           if asks_to_run_code(task) else "with a tool (and check it)")
    return Finding("file_unchanged", f"{shown} was not written",
                   f"The task asks to write or change {shown}, but no tool call of this task "
                   f"wrote it. Write it {how}, or tell the user why not.")


def _named(name: str, paths: Iterable[str]) -> bool:
    return any(p == name or p.endswith("/" + name) or name.endswith("/" + p) for p in paths)


# A task that asks for a file to be emptied: an empty one is its work.
_EMPTIES = re.compile(r"\b(?:empty|clear|truncate|blank)\b", re.I)


# An answer that says nothing matched: an empty file is then the right one.
_NONE_FOUND = re.compile(r"\b(?:no|none|nothing|zero|0|empty)\b", re.I)
_EMPTY_BY_DESIGN = ("__init__.py", ".gitkeep", ".keep", "py.typed")


def empty_files(task: str, last_sizes: dict[str, int], answer: str = "") -> Finding | None:
    """The task asked to write a file and its last write left it empty (``last_sizes``:
    each written path's size after its last change). Seen at 1.5B: a loop whose condition
    (``'34\\n'.isdigit()``) held for no line wrote an empty adults.txt, and the answer named
    two people."""
    if _EMPTIES.search(task) or _NONE_FOUND.search(answer):
        return None  # asked for, or what the answer says: nothing matched
    empty = [name for name in files_to_write(task) if not name.endswith(_EMPTY_BY_DESIGN)
             and _named(name, [p for p, size in last_sizes.items() if size == 0])]
    if not empty:
        return None
    shown = ", ".join(empty)
    return Finding("file_empty", f"{shown} was left empty",
                   f"The task asks to write {shown}, but after your last call it is empty: "
                   "your code wrote nothing to it. Check why (print what it would write), "
                   "run it again, and answer from what the file holds.")


# "change threshold from 0.5 to 0.75", "replace 'colour' with 'color'": what may change.
_CHANGE_FROM = re.compile(r"\bchange\s+(?:the\s+)?[`'\"]?([\w.-]{1,40})[`'\"]?\s+from\s+[`'\"]?"
                          r"([^\s`'\"]{1,40}?)[`'\"]?\s+to\s+[`'\"]?([^\s`'\"]{1,40}?)[`'\"]?(?=[\s,;]|\.?$|\.\s)",
                          re.I)
_REPLACE = re.compile(r"\breplace\s+(?:every\s+|all\s+|each\s+)?(?:the\s+)?[`'\"]([^`'\"\n]{1,40})[`'\"]"
                      r"\s+(?:with|by)\s+[`'\"]([^`'\"\n]{0,40})[`'\"]", re.I)
MAX_EDITED_LINES = 3  # an edit of one thing; a conversion of the whole file is not judged
# A task that asks for lines to go: removed lines are its work.
_REMOVES = re.compile(r"\b(?:remove|removing|delete|deleting|drop|strip|clear|truncate|empty|"
                      r"dedupe|de-?duplicate|filter|keep only|shorten|merge|join|sort)\b", re.I)
_LEAVE_THE_REST = re.compile(r"\bleave\s+(?:every|all|each|the)\s+(?:other\s+lines?|other\s+entries|"
                             r"rest)\b", re.I)


def _unescaped(text: str) -> str:
    r"""``\t`` and ``\n`` as a task writes them in quotes ("replace '\t' with ','")."""
    return text.replace("\\t", "\t").replace("\\n", "\n")


def wrong_line_changed(task: str, results: Sequence[Item]) -> Finding | None:
    """The task asks to change one thing in a file ("change threshold from 0.5 to 0.75",
    "replace 'colour' with 'color'") and the last change of that file touched no line that
    holds the thing or its old value, but up to ``MAX_EDITED_LINES`` others (seen at 1.5B:
    ``lines[5] = 'threshold = 0.75\\n'`` overwrote '[data]', the line after the one asked,
    and the answer was the new line). Line endings, a diff that does not say line by line
    (``_util.diffs``), and files the task does not name are left alone."""
    changed = _CHANGE_FROM.search(task)
    replaced = _REPLACE.search(task)
    if replaced:
        keys, what = [replaced.group(1)], f"replace {replaced.group(1)!r} with {replaced.group(2)!r}"
    elif changed:
        keys = [changed.group(1), changed.group(2)]
        what = f"change {changed.group(1)} from {changed.group(2)} to {changed.group(3)}"
    elif _LEAVE_THE_REST.search(task):
        keys, what = [], "change one thing and leave the rest as it is"
    else:
        return None
    keys = [_unescaped(k).casefold() for k in keys]
    named = [m.group(1) for m in _FILE.finditer(task)]  # any file the task names
    last: dict[str, dict[str, Any]] = {}  # each file's latest change: a later call may fix it
    for result in results:
        for change in (result.meta.get("changes") or []) if isinstance(result, ToolResult) else []:
            if isinstance(change, dict) and isinstance(change.get("path"), str):
                last[change["path"]] = change
    for path, change in last.items():
        if change.get("kind") != "modified" or (named and not any(
                path == n or path.endswith("/" + n) for n in named)):
            continue
        edits = line_edits(str(change.get("diff") or ""))
        # Lines taken out and not put back (seen at 1.5B in a terminal: settings.ini rewritten
        # as its one new line, four lines of the user's lost): never part of such an edit.
        lost = [e.old for e in edits or [] if e.kind == "removed" and e.old.strip()
                and not any(k in e.old.casefold() for k in keys)] if not _REMOVES.search(task) else []
        if lost:
            shown = ", ".join(repr(line if len(line) <= 40 else line[:39] + "…") for line in lost[:4])
            more = f" and {len(lost) - 4} more" if len(lost) > 4 else ""
            where = visible_name(path)
            return Finding(
                "file_edit", f"a call removed {len(lost)} line{'s' if len(lost) != 1 else ''} of "
                f"{where} the task did not ask to remove",
                f"The task asks to {what}, but your code removed these lines of {where}: "
                f"{shown}{more}. Write the file again with every line it had, making only the "
                "change asked, print it, and then answer.")
        gone = [e.old for e in edits or [] if e.kind in ("replaced", "removed")]
        # The thing asked is nowhere in the diff's lines (its headers name the file): the task
        # names it in words the file does not use ("the temperatures from Fahrenheit to Celsius" of a two-row table).
        shown = "\n".join(hunk_text(str(change.get("diff") or ""))).casefold()
        if not keys or not gone or len(gone) > MAX_EDITED_LINES or any(
                k in line.casefold() for line in gone for k in keys) or not any(
                k in shown for k in keys):
            continue
        line = repr(gone[0] if len(gone[0]) <= 60 else gone[0][:59] + "…")
        where = visible_name(path)
        return Finding(
            "file_edit", f"a call changed the line {line} of {where}, not the one the task "
            "asked to change",
            f"The task asks to {what}, but your code changed the line {line} of {where} "
            "instead. Look at the file with the python tool, put that line back as it was, "
            "make only the change asked, and print the file; then answer.")
    return None


_ASKS_BACK = re.compile(r"\b(?:read|reply|answer|respond|return|tell|show|report|print|"
                        r"contents?|says?|contains?|what|which|how)\b|\?", re.I)


def receipt_answer(task: str, answer: str, last: ToolResult) -> Finding | None:
    """The answer is the receipt of the write just made ("created note.txt (20 bytes, 1
    line)"), where the task asks for something back (measured at 0.5B: asked to write a file,
    read it back and reply with its contents, it answered with write_file's receipt). An
    answer that also holds what was written is not one."""
    file = last.meta.get("file")
    receipt = " ".join(last.output.split())
    if (last.error or not isinstance(file, dict) or not receipt
            or not _ASKS_BACK.search(task)):
        return None
    said = " ".join(answer.split()).casefold()
    written = " ".join(str(file.get("text") or "").split()).casefold()
    if receipt.casefold().rstrip(".") not in said or (written and written in said):
        return None
    return Finding("receipt", "the answer was the write's receipt",
                   f"Your answer repeats the receipt of your last call ({_short(receipt)}): "
                   "it says that a file was written, not what the task asks for. Do the rest "
                   "of the task (read the file back if it asks for its contents), then answer "
                   "with what it asks for.")


_BLOCK = re.compile(r"^[ \t]*(```|~~~)[^\n]*\n(.*?)^[ \t]*\1", re.S | re.M)


def code_for_result(task: str, answer: str, last: ToolResult, code: str) -> Finding | None:
    """The task asks for Python's result and the answer shows the code of the call that just
    ran cleanly (``code``) instead of what it printed (seen at 1.5B: the 20th Fibonacci
    number computed, 6765 printed, and the answer was the code again with "This will output
    the 20th Fibonacci number")."""
    printed = last.output.strip()
    if (last.error or last.name != "python" or not code.strip() or not asks_to_run_code(task)
            or not printed or printed.startswith(NO_OUTPUT[:-1])):
        return None
    shown = [m.group(2) for m in _BLOCK.finditer(answer)]
    if not any(" ".join(block.split()) == " ".join(code.split()) for block in shown):
        return None
    prose = _FENCED.sub("", answer)
    if any(line.strip() in prose for line in printed.splitlines()[-3:] if line.strip()):
        return None  # what it printed is said too
    return Finding("code_answer", "the answer shows the code that ran, not what it printed",
                   f"Your answer shows the code you ran instead of its result. It printed "
                   f"{_short(printed)}: answer the task with what it printed.")


# -- one computation of a physical quantity, from constants the model brought ----------------
_UNIT = re.compile(r"\d\s*(?:(?:m/s\^?2|m/s²|m/s|km/h|km|cm|mm|kg|g|N|J|W|kW|Pa|K|°C|Hz|eV|m|s)"
                   r"(?![\w/])|(?i:seconds?|meters?|metres?|kilometers?|newtons?|joules?)\b)")


def own_constants(code: str, given: Iterable[str]) -> list[str]:
    """Numbers in ``code`` that the task (``given``) does not hold: what the model brought."""
    known = [n for text in given for n in numbers_in(text)]
    return [n.text for n in numbers_in(code) if not _trivial(n)
            and not any(abs(n.value - k.value) <= k.ulp * 1e-9 + abs(k.value) * 1e-12 for k in known)]


def single_look(answer: str, calls_run: int, constants: Sequence[str]) -> Finding | None:
    """A physical quantity computed in one call from constants the model supplied itself
    (``constants``): where a unit slip (a radius in km among SI values) gives a confident,
    plausible-looking wrong number that no other rule sees. The ask names variables by unit:
    measured at 1.5B (metres over hours called m/s), "print each intermediate value with its
    unit" or "write each value in SI units first" got the same call back; this got
    ``time_s = 1 + 48/60`` printed as "Time: 1.8 seconds", the slip in plain view."""
    if calls_run != 1 or not constants or not _UNIT.search(answer):
        return None
    shown = ", ".join(constants[:4])
    return Finding("units", f"a physical quantity computed once, from constants the model chose ({shown})",
                   f"You computed this physical quantity in a single step, from values you "
                   f"chose yourself ({shown}). Run it again with one variable per quantity, "
                   "named with its unit (distance_m, time_s, mass_kg), printing each, then the "
                   "result; check whether its size is plausible, and then answer.")


# -- the places the task asked for ----------------------------------------------------------
_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_PLACES = re.compile(r"\b(\d|one|two|three|four|five|six)[ -]?(?:decimals?|decimal places?|"
                     r"digits? after the (?:decimal )?point|dp)\b", re.I)


def places_asked(task: str) -> int | None:
    """The decimal places the task asks for ("reply with 2 decimals", "to two decimal
    places"); None when it names none, or names two different counts."""
    asked = {int(n) if n.isdigit() else _WORDS[n.lower()] for n in _PLACES.findall(task)}
    return asked.pop() if len(asked) == 1 else None


def _plain_number(text: str) -> str:
    """``text`` as a Python literal: "1,234.5" -> "1234.5"."""
    return re.sub(r"[, _  ]", "", text).replace("−", "-")


def wrong_places(task: str, answer: str) -> Finding | None:
    """The task asks for N decimal places and no number in the answer is written with N
    (seen at 0.5B: "reply with it, 2 decimals" answered 14.6)."""
    places = places_asked(task)
    if places is None:
        return None
    claims = [n for n in numbers_in(_FENCED.sub("", answer))
              if not _trivial(n) and "%" not in n.text and "e" not in n.text.lower()]
    if not claims or any(len(n.text.partition(".")[2]) == places for n in claims):
        return None
    shown = claims[-1].text
    return Finding("decimals", f"the task asks for {places} decimal places; the answer writes {shown}",
                   f"The task asks for {places} decimal place{'s' if places != 1 else ''}, and "
                   f"your answer writes {shown}. Print the value with the python tool formatted "
                   f"to exactly {places} decimal places (for example print(f\"{{{_plain_number(shown)}:.{places}f}}\")), then "
                   "answer with what it prints.")


# "in the form H:MM:SS", "as YYYY-MM-DD", "formatted as HH:MM": a shape of date and time
# fields; each field stands for digits, the separators for themselves.
_FORM = re.compile(r"\b(in the (?:form|format)|formatted as|in|as)\s+[`'\"]?"
                   r"((?:[HMSYD]{1,4})(?:[:\-/.](?:[HMSYD]{1,4})){1,3})(?![\w:\-/]|\.\w)")
_FIELD = re.compile(r"[HMSYD]+")
_SENTENCE = re.compile(r"(?<=[.?!;])\s+")
# "as HH:MM", "in HH:MM" or "formatted as HH:MM" is the answer's shape only in a sentence that
# asks for something ("times as HH:MM" describes a file's columns); "in the form" always is.
_ASKS = re.compile(r"\b(?:reply|replies|answer|respond|give|return|print|tell|say|express|"
                   r"convert|write|compute|calculate|find|what|when|which)\b|\?", re.I)


def form_asked(task: str) -> str | None:
    """The date or time shape the task asks its answer in ("H:MM:SS"); None for none, or
    two different ones."""
    # A time (its fields joined by ':') or a date (a year, a month and a day): "M/S" in
    # "speed in M/S" is a unit, "HDD/SSD" a pair of words.
    if places_asked(task) is not None:
        return None  # "reply with it, 1 decimal": a number, whatever shape its data has
    # Only where the task says how to answer: "times as HH:MM" describing a file's columns
    # is the data's shape (seen at 1.5B: a total of hours "10.5" was asked again as HH:MM).
    asked = {m.group(2) for sentence in _SENTENCE.split(task) for m in _FORM.finditer(sentence)
             if (_is_time(m.group(2)) or _is_date(m.group(2)))
             and (m.group(1).startswith("in the") or _ASKS.search(sentence))}
    return asked.pop() if len(asked) == 1 else None


def _is_time(form: str) -> bool:
    fields = _FIELD.findall(form)
    return ":" in form and all(set(f) <= {"H", "M", "S"} and len(set(f)) == 1 for f in fields)


def _is_date(form: str) -> bool:
    fields = _FIELD.findall(form)
    return (all(len(set(f)) == 1 for f in fields)
            and sorted(f[0] for f in fields) == ["D", "M", "Y"])


def wrong_form(task: str, answer: str) -> Finding | None:
    """The task asks for the answer in a date or time shape and nothing in the answer is
    written so (seen at 1.5B: "reply in the form H:MM:SS" answered 7384.0)."""
    form = form_asked(task)
    if form is None:
        return None
    parts = re.split(r"([:\-/.])", form)
    # The first field of a time may run past 99 (a duration of 123:45:06).
    shape = "".join(re.escape(p) if not _FIELD.fullmatch(p) else
                    r"\d+" if i == 0 and _is_time(form) else
                    (r"\d{1,2}" if len(p) == 1 else rf"\d{{{len(p)}}}") for i, p in enumerate(parts))
    if re.search(rf"(?<![\d.]){shape}(?![\d])", _FENCED.sub("", answer)):
        return None
    shown = " ".join(answer.split())
    shown = shown if len(shown) <= 60 else shown[:59] + "…"
    return Finding("form", f"the task asks for the form {form}; the answer is not written so",
                   f"The task asks for the answer in the form {form}, and your answer ({shown}) "
                   f"is not written so. Compute it in that form with the python tool and print "
                   "it, then answer with what it prints.")


# -- the order the task asked for -----------------------------------------------------------
_ORDER = re.compile(
    r"\b(?:(?P<reverse>reverse(?:d)?\s+)?alphabetical(?:ly)?(?:\s+order)?"
    r"|(?P<up>ascending|increasing)\s+order|(?P<down>descending|decreasing)\s+order"
    r"|from\s+(?:the\s+)?(?:smallest|lowest|least|fewest)\s+to\s+(?:the\s+)?(?:largest|highest|most|greatest)"
    r"|(?P<down2>from\s+(?:the\s+)?(?:largest|highest|most|greatest)\s+to\s+(?:the\s+)?(?:smallest|lowest|least|fewest)))",
    re.I)
_LIST_LINE = re.compile(r"^([ \t]*)(?:[-*•]|\d{1,3}[.)])[ \t]+(\S.*)$", re.M)
# "Sure, here it is: tape, glue" -> "tape, glue"; "The items are tape, glue" -> "tape, glue".
_LEAD = re.compile(r"^[^:\n]{0,200}?(?::\s|\b(?:are|is|were|was)\s)", re.I)
# "sorted by last name", "by date in ascending order": an order of something the answer
# does not show.
_BY_WHAT = r"(?<!separated )(?<!delimited )(?<!joined )(?<!split )\bby\s+(?!alphabet|commas?\b|new ?lines?\b)\w+"
_BY = re.compile(rf"\b(?:sort(?:ed)?|order(?:ed)?|rank(?:ed)?|ascending|descending|alphabetical(?:ly)?)\b"
                 rf"[^.?!\n]{{0,40}}?{_BY_WHAT}|{_BY_WHAT}[^.?!\n]{{0,40}}?\b(?:ascending|descending|"
                 r"alphabetical)", re.I)
_ARTICLE = re.compile(r"^(?:the|a|an)\s+", re.I)
LIST_LINE_CHARS = 1000  # a longer line is prose, not a list (and is not split)


def order_asked(task: str) -> str | None:
    """The order the task asks its list in: "alphabetical", "reverse alphabetical",
    "ascending", "descending"; None for none, two different ones, or an order "by" something
    else ("alphabetically by last name")."""
    if _BY.search(task):
        return None
    asked = set()
    for m in _ORDER.finditer(task):
        word = m.group(0).lower()
        asked.add(("reverse alphabetical" if m.group("reverse") else "alphabetical")
                  if "alphabetical" in word else
                  "descending" if m.group("down") or m.group("down2") else "ascending")
    return asked.pop() if len(asked) == 1 else None


def listed_items(answer: str) -> list[str]:
    """The items of the one list an answer gives ("tape, glue and ink", or one per line
    under "-", "*" or "1.", the outer level), as written; [] when it gives none, or it
    cannot tell."""
    text = _FENCED.sub("", answer)
    bullets = _LIST_LINE.findall(text)
    if len(bullets) >= 2:
        outer = min(len(indent) for indent, _ in bullets)
        items = [item for indent, item in bullets if len(indent) == outer]
    else:
        lines = [line.strip() for line in text.splitlines() if "," in line]
        if len(lines) != 1 or len(lines[0]) > LIST_LINE_CHARS:
            return []
        line = _LEAD.sub("", lines[0], count=1)
        # "1,200, 950": with ", " between the items, a bare comma is a thousands separator.
        items = line.split(", ") if ", " in line else line.split(",")
        items = [re.sub(r"^(?:and|or)\s+", "", i.strip()) for i in items]
        if not re.search(r",\s*(?:and|or)\s", line):  # "tape, glue and ink": the last pair
            items[-1:] = re.split(r"\s+(?:and|or)\s+", items[-1])
        items[-1] = items[-1].rstrip(".!")
    items = [i.strip().strip("`'\"").strip("*").strip() for i in items]
    if len(items) < 2 or any(not i or len(i.split()) > 4 or len(i) > 60 for i in items):
        return []  # a sentence with commas in it, not a list
    return items


def _as_number(text: str) -> float | None:
    try:
        return float(_plain_number(text))
    except ValueError:
        return None


def wrong_order(task: str, answer: str) -> Finding | None:
    """The task asks for a list in an order and the list in the answer is not in it (seen at
    1.5B: "in alphabetical order" answered "tape, glue, ink", as the loop printed them)."""
    order = order_asked(task)
    items = listed_items(answer) if order else []
    if not order or not items:
        return None
    down = order in ("descending", "reverse alphabetical")
    if order.endswith("alphabetical"):
        # As a person sorts (case aside, or a leading "The" aside) or as Python's sorted() does;
        # "…, salt and pepper" may be one item.
        joined = items[:-2] + [f"{items[-2]} and {items[-1]}"] if len(items) > 2 else items
        orders: list[list[Any]] = [[i.casefold() for i in items], list(items),
                                   [_ARTICLE.sub("", i).casefold() for i in items],
                                   [i.casefold() for i in joined]]
    else:
        numbers = [_as_number(i) for i in items]
        if any(n is None for n in numbers):
            return None  # names in an order of their values: the answer alone cannot tell
        orders = [list(numbers)]
    if any(keys == sorted(keys, reverse=down) for keys in orders):
        return None
    shown = ", ".join(items)
    shown = shown if len(shown) <= 80 else shown[:79] + "…"
    how = "sorted(…, reverse=True)" if down else "sorted(…)"
    # The answer's own items to sort, where they are words and few: at 1.5B, told only to
    # sort, the model sorted every item of the file and lost the filter it had applied.
    example = f"print(sorted({items!r}, key=str.casefold{', reverse=True' if down else ''}))"
    if order.endswith("alphabetical") and len(example) <= 160:
        how = example
    return Finding("order", f"the task asks for {order} order; the answer's list is not in it",
                   f"The task asks for the list in {order} order, and your answer lists {shown}, "
                   f"which is not in that order. Sort it with the python tool ({how}) and print "
                   "it, then answer with what it prints.")


# -- an instruction the code never carried out -----------------------------------------------
# Not "in either case": as often "anyway" as a word on letters.
_IGNORE_CASE = re.compile(r"\b(?:ignor(?:e|es|ing)\s+(?:the\s+)?(?:letter\s+)?case|case[- ]insensitive(?:ly)?|"
                          r"regardless\s+of\s+(?:the\s+)?(?:letter\s+)?case)\b", re.I)
# Folding as code writes it: Python's, a regex's, grep's -i, SQL's LIKE and NOCASE.
_FOLDS_CASE = re.compile(r"\.(?:lower|upper|casefold|title|capitalize)\s*\(|\bre\.(?:I|IGNORECASE)\b|"
                         r"\(\?i\)|\bstr\.(?:lower|upper|casefold)\b|"
                         r"\bcase\s*=\s*False|\bflags\s*=\s*2\b|"
                         r"(?<![\w-])-[A-Za-z]*i[A-Za-z]*\b|\b(?:LIKE|ILIKE|NOCASE|LOWER|UPPER)\b")


def case_not_ignored(task: str, code: str) -> Finding | None:
    """The task asks to ignore case and none of the code that ran folds it (``.lower()``,
    ``.casefold()``, ``re.I``, …). Seen at 1.5B: asked to count the distinct emails "ignoring
    case", ``set(re.findall(…))`` counted ``Ben@Y.com`` and ``ben@y.com`` apart, 6 for 4."""
    if not _IGNORE_CASE.search(task) or _FOLDS_CASE.search(code):
        return None
    # Both cases written out ('aeiouAEIOU') count letters either way; a regex's [A-Za-z]
    # matches both but compares nothing (at 1.5B: distinct emails by such a regex, 6 for 4).
    capitals = set(re.findall(r"(?<![A-Z]-)[A-Z]{2,}", code))
    if any(word.upper() in capitals for word in re.findall(r"[a-z]{2,}", code)):
        return None
    return Finding("case", "the task asks to ignore case; no code that ran does",
                   "The task asks to ignore case, but none of your code does (it compares the "
                   "text as written, so 'Ana' and 'ana' count apart). Lower-case the text first "
                   "(.lower()), run the call again, and answer from what it prints.")


# -- all of them -----------------------------------------------------------------------------
def findings(items: Sequence[Item], answer: str, *, staged: bool = False,
             can_run: bool = False, said: frozenset[str] = frozenset()) -> list[Finding]:
    """What the run in progress (``items``: the context; the answer may be in it already)
    says against ``answer``, the most telling first; [] when no call ran or nothing is amiss.

    ``staged``: the sibling writes to a staged workspace, whose change sets record every file
    a call wrote (without it, a file written by code leaves no trace to check). ``can_run``:
    a tool that runs code is offered (so an answer to "use Python" with no call is a guess).
    ``said``: rules already told this run, left out (so one behind them can be found)."""
    task, items_now = run_items(items)
    results = [i for i in items_now if _ran(i)]
    latest = next((r for r in reversed(items_now) if isinstance(r, ToolResult)), None)
    said_nothing = empty_answer(answer, task, latest if latest is not None and _ran(latest)
                                and not person_denied(items_now) else None)
    if said_nothing and said_nothing.rule in said:  # said, or no call can run: the plain ask
        said_nothing = empty_answer(answer, task)
    if said_nothing and said_nothing.rule not in said:
        return [said_nothing]
    echoed = echoed_note(answer, items_now)
    if echoed and echoed.rule not in said:
        return [echoed]
    if not results:
        # A call the person denied: no asking the model to run one.
        asked = no_call_ran(task, answer) if can_run and not person_denied(items_now) else None
        return [asked] if asked and asked.rule not in said else []
    last = results[-1]
    assert isinstance(last, ToolResult)
    # What the tools gave, also where compaction has since cleared it from the model's view.
    outputs = [r.full_output for r in results if isinstance(r, ToolResult)]
    earlier = [i.full_output if isinstance(i, ToolResult) else ""
               for i in items[:len(items) - len(items_now)]]
    inputs = [task, *[_code(c) for c in items_now if isinstance(c, ToolCall)],
              *[_ungutter(i) for i in items if isinstance(i, Message) and i.role != "assistant"],
              *earlier]
    found: list[Finding | None] = [error_ignored(answer, last) or last_call_failed(answer, last)]
    written = [str(c.get("path")) for r in results for c in (r.meta.get("changes") or [])
               if isinstance(c, dict) and c.get("kind") != "deleted"]
    written += [str(r.meta["file"].get("path")) for r in results
                if isinstance(r.meta.get("file"), dict)]
    if staged or any(isinstance(r.meta.get("file"), dict) for r in results):
        found.append(unchanged_files(task, written))
    found.append(wrong_line_changed(task, results))
    if found[0] is None:  # a failed call explains an empty file, a receipt, a value
        found.append(empty_files(task, _last_sizes(results), answer))
        found.append(receipt_answer(task, answer, last))
        ran = next((c for c in reversed(items_now) if isinstance(c, ToolCall)
                    and c.id == last.call_id), None)
        found.append(code_for_result(task, answer, last, _code(ran) if ran else ""))
        found.append(suspicious_value(answer, last, outputs[:-1], task))
        found.append(case_not_ignored(task, " ".join(_code(c) for c in items_now
                                                      if isinstance(c, ToolCall))))
    if found[0] is None or (found[0].rule == "error_ignored" and found[0].rule in said):
        # The failure told already and the answer ignoring it still, a number no output shows
        # is what is left to say (seen at 1.5B: told its time subtraction failed, it failed
        # the same way and answered 135.0). An answer that says it failed is not asked.
        # The lines each written file has now count as seen: the files-changed note showed
        # them (at 1.5B a silent write, then "3 lines written", was right).
        counted = [str(c["lines"]) for r in results for c in (r.meta.get("changes") or [])
                   if isinstance(c, dict) and isinstance(c.get("lines"), int)]
        found.append(unsupported_numbers(answer, [*outputs, *counted], inputs, task))
    kept = [f for f in found if f is not None and f.rule not in said]
    if not kept:
        code = " ".join(_code(c) for c in items_now if isinstance(c, ToolCall))
        single = [f for f in (typed_files(task, results, can_run),
                              single_look(answer, len(results), own_constants(code, [task])),
                              wrong_places(task, answer), wrong_form(task, answer),
                              wrong_order(task, answer))
                  if f is not None and f.rule not in said]
        kept = single[:1]
    return kept


_GUTTER = re.compile(r"^ *\d+\| ", re.M)


def _ungutter(message: Message) -> str:
    """A message's text; a file preview's without its line numbers (``5| INFO retry``):
    they are ipyagent's numbering, not the data (at 1.5B "the 5th line", from no output,
    was taken as given by the preview's ``5|``)."""
    return _GUTTER.sub("", message.content) if PREVIEW_KEY in message.meta else message.content


def _last_sizes(results: Sequence[Item]) -> dict[str, int]:
    """Each path the run wrote, and its size after the last call that wrote it."""
    sizes: dict[str, int] = {}
    for r in results:
        for c in r.meta.get("changes") or []:
            if isinstance(c, dict) and isinstance(c.get("size"), int) and c.get("kind") != "deleted":
                sizes[str(c.get("path"))] = c["size"]
        file = r.meta.get("file")
        if isinstance(file, dict) and isinstance(file.get("text"), str):
            sizes[str(file.get("path"))] = len(file["text"])
    return sizes


def _code(call: ToolCall) -> str:
    return " ".join(str(v) for v in call.arguments.values()) if call.arguments else ""
