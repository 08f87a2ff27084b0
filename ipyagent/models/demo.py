"""The demo model: deterministic, offline, and honest about being a demo.

It plans a small task from the tools it is given and the outcome of each call, so it
drives the real loop, the real approval and the real sibling kernel:

* with a ``python`` tool and a Python expression in the task (``2**100``, ``sum(range(10))``):
  compute it → hit a real error (``len`` of an int) → recover using the kernel's kept
  state → answer from the tool's actual output;
* with a ``python`` tool and no expression: count the task's words in Python, answer;
* with a ``shell`` tool and a task that clearly asks for a command ("run `ls -l`",
  "list the files"): run it, answer from its output;
* with ``python`` and ``load_skill`` tools, a plotting skill listed in the system prompt
  and a task that asks for a plot: load the skill → run plot code that follows it (the
  skill's first ```python block is its pattern, given ``x``, ``y``, ``label``, ``title``,
  ``xlabel`` and ``ylabel`` from the task) → say what it drew;
* with a ``python`` tool and a task that names one of the user's variables from the
  namespace picture ("summarise sales"): code that uses it — the sibling meets a
  ``NameError``, ipyagent offers the copy and runs the call again — then answer;
* ``%agent fix`` (the failing cell and its traceback): a fix by a few honest rules
  (``demo_fix``), checked in the sibling when there is a ``python`` tool, answered with the
  fixed cell as the python block ``%agent fix`` puts in a new cell;
* "remember that …" with the ``remember`` tool (memory on): keep the note; without it,
  say how to turn memory on;
* after a Python result, a file the task asks for ("save the result to result.txt") with
  ``write_file``, and a value it asks to keep ("…and offer it to me") with ``offer_result``;
* with other tools: call every tool whose required arguments it can fill (in parallel),
  then report their results;
* a denied call: acknowledge it and stop. Every reply is labelled ``[demo model]``, and
  what a tool printed is quoted in a ``text`` fence (never a python block).

It says where things ran as the tools' descriptions tell it (all a model can know): Python
in the sibling kernel or in the kernel on a remote Jupyter server, a command with bash
started by the sibling kernel or on that server.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
from typing import Any, AsyncIterator

from ..context.evidence import LIMIT_KEY
from ..context.items import Message, ToolCall, ToolResult
from ..context.tokens import TokenCounter
from ..trust.untrusted import fence
from .base import (
    OUTCOME_PROMPT,
    SUMMARY_PROMPT,
    ModelEvent,
    ModelRequest,
    TextDelta,
    ToolCallDelta,
    Turn,
    TurnComplete,
    asks_summary,
)
from .demo_fix import fix_request, propose_fix
from .demo_flows import (
    MEMORY_TOOL,
    OFFER_TOOL,
    PLOT_WORDS,
    fact_to_remember,
    file_to_write,
    follow_up,
    mentioned,
    pictured,
    variable_code,
    wants_offer,
)

__all__ = ["DemoModel"]

LABEL = "[demo model]"
DEMO_NOTE = "(This answer was produced by the built-in demo model, not an LLM.)"
_COUNT = TokenCounter()  # its tool-spec counts are kept: every step sends the same tools


class DemoModel:
    """A scripted, deterministic stand-in for an LLM."""

    name = "demo"

    def __init__(self, chunk_size: int = 12, delay: float = 0.0) -> None:
        self.chunk_size = chunk_size
        self.delay = delay  # per text chunk, to make streaming visible in demos
        self.calls = 0  # requests made, for tests and the footer

    def __repr__(self) -> str:
        return "DemoModel()"

    async def aclose(self) -> None:
        return None

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.calls += 1
        text, calls = self._plan(request)
        for i in range(0, len(text), self.chunk_size):
            if self.delay:
                await asyncio.sleep(self.delay)
            yield TextDelta(text[i : i + self.chunk_size])
        for index, call in enumerate(calls):
            yield ToolCallDelta(index, id=call.id, name=call.name,
                                arguments=json.dumps(call.arguments))
        # Counted as ipyagent estimates a request (the context table, the footer's meter):
        # a demo has no tokenizer of its own, and its numbers must agree with those.
        prompt = (_COUNT.raw(request.system) + 4 + sum(_COUNT.item(i) for i in request.items)
                  + (_COUNT.specs(request.tools) if request.tools else 0))
        written = _COUNT.raw(text) + sum(_COUNT.item(c) for c in calls)
        usage = {"prompt_tokens": prompt, "completion_tokens": max(1, written), "estimated": True}
        yield TurnComplete(Turn(text=text, tool_calls=calls, usage=usage, model="demo",
                                finish_reason="tool_calls" if calls else "stop"))

    # -- planning ------------------------------------------------------------------
    def _plan(self, request: ModelRequest) -> tuple[str, list[ToolCall]]:
        items = list(request.items)
        if asks_summary(request):  # its own request, or the question after the conversation
            if request.system != SUMMARY_PROMPT:  # the items themselves, as blocks of text
                items = [Message("user", "\n\n".join(f"[{getattr(it, 'label', 'item')}]\n{it}"
                                                      for it in items[:-1]))]
            return _summarise(items), []
        if request.system == OUTCOME_PROMPT:  # the memory note: the facts it was given
            facts = str(getattr(items[-1], "content", "")).split("\n\n")[0] if items else ""
            return f"{LABEL} {facts}", []
        if items and isinstance(items[-1], Message) and LIMIT_KEY in items[-1].meta:
            return _at_the_limit(items), []  # max_steps reached: an answer, not a call
        start = max((i for i, it in enumerate(items)
                     if isinstance(it, Message) and it.role == "user"), default=-1)
        if start < 0:
            return f"{LABEL} There is no task for me yet: add a user message.", []
        task = items[start].content  # type: ignore[union-attr]
        results = [it for it in items[start + 1 :] if isinstance(it, ToolResult)]
        tools = {spec["name"]: spec for spec in request.tools}
        # Ids count every call of the conversation: unique, and still deterministic.
        n_calls = sum(isinstance(it, ToolCall) for it in items)

        denied = [r for r in results if r.meta.get("denied")]
        if denied:
            reason = denied[-1].meta.get("reason") or "no reason given"
            return (f"{LABEL} Understood: the call was not approved ({reason}), so I did "
                    "not run anything. Tell me how you would like to proceed."), []
        remote = _remote(tools)
        shown = pictured(items[:start + 1])  # the user's variables, as the picture says them
        fix = fix_request(task)
        if fix is not None:
            return self._plan_fix(*fix, tools, results, n_calls, shown, remote)
        fact = fact_to_remember(task)
        if fact is not None:
            return self._plan_remember(fact, tools, results, n_calls)
        command = shell_command(task) if "shell" in tools else None
        if command is not None:
            return self._plan_shell(command, task, results, n_calls, remote)
        if "python" in tools and SKILL_TOOL in tools:
            planned = self._plan_plot(task, request.system, items, results, n_calls)
            if planned is not None:
                return planned
        if "python" in tools:
            ran = [r for r in results if r.name == "python"]
            name = mentioned(task, shown) if find_expression(task) is None else None
            if name is not None:
                planned = self._plan_variable(task, name, shown[name], ran, n_calls, remote)
                offered = None  # the user's own variable: nothing new to offer back
            else:
                planned = self._plan_python(task, ran, n_calls, remote)
                offered = "value" if find_expression(task) is not None else None
            return self._then(planned, task, tools, results, n_calls, offered)
        if tools:
            return self._plan_tools(task, tools, results, n_calls)
        return (f"{LABEL} I have no tools, so I cannot compute anything. "
                f"Your task was: {task!r}"), []

    def _call(self, name: str, arguments: dict[str, Any], n: int) -> ToolCall:
        # Deterministic ids, so that runs (and their transcripts) are reproducible.
        return ToolCall(id=f"demo_call_{n}", name=name, arguments=arguments)

    def _plan_fix(self, source: str, traceback: str, tools: dict[str, dict[str, Any]],
                  results: list[ToolResult], n: int, shown: dict[str, str],
                  remote: bool = False) -> tuple[str, list[ToolCall]]:
        """``%agent fix``: find the rule for the error, check the fixed cell in the python
        tool's kernel when there is one, answer with the cell as the last python block."""
        fix = propose_fix(source, traceback, list(shown))
        if fix is None:
            return (f"{LABEL} The traceback came without the cell's source, so I have no code "
                    "to fix: run the failing cell again, then `%agent fix`.\n\n" + DEMO_NOTE), []
        kernel = "the remote kernel" if remote else "the sibling kernel"
        ran = [r for r in results if r.name == "python"]
        if "python" in tools and fix.checkable and not ran:
            return (f"{LABEL} {_sentence(fix.why)}. I'll check the fixed cell in {kernel} first "
                    "(not in yours).", [self._call("python", {"code": fix.source}, n)])
        if ran:
            last = ran[-1]
            printed = _printed_part(last) or ""
            if last.error:
                check = (f"Checked in {kernel}, it still fails (maybe for a reason of its own "
                         f"there):\n\n{fence(last.output.strip(), 'text')}\n\n")
            elif printed and printed != "(no output)":
                check = f"Checked in {kernel}, it runs and prints:\n\n{fence(printed, 'text')}\n\n"
            else:
                check = f"Checked in {kernel}, it runs without an error.\n\n"
        else:
            check = ""
        # The cell first, what the check printed after it: a reader of the answer (and
        # ``%agent fix``, which takes its python block) finds the fix before any output.
        return (f"{LABEL} {_sentence(fix.why)}. The fixed cell, for you to read and run "
                f"(`%agent fix` puts it in a new cell below; nothing ran in your kernel):"
                f"\n\n{fence(fix.source, 'python')}\n\n{check}{DEMO_NOTE}"), []

    def _plan_remember(self, fact: str, tools: dict[str, dict[str, Any]],
                       results: list[ToolResult], n: int) -> tuple[str, list[ToolCall]]:
        """'remember that …': keep it with the remember tool (memory on), or say how."""
        if MEMORY_TOOL not in tools:
            return (f"{LABEL} I have no memory tool here, so I cannot keep that for later "
                    "sessions: `%config Agent.memory = 'on'` offers it to me, and "
                    f"`%agent remember TEXT` keeps a note yourself.\n\n{DEMO_NOTE}"), []
        kept = [r for r in results if r.name == MEMORY_TOOL]
        if not kept:
            return (f"{LABEL} I'll keep that as a note for later sessions (the remember tool).",
                    [self._call(MEMORY_TOOL, {"text": fact}, n)])
        last = kept[-1]
        if last.error:
            return f"{LABEL} The note was not kept: {last.output.strip()}\n\n{DEMO_NOTE}", []
        return (f"{LABEL} Noted ({last.output.strip()}): {fact} It comes back to me in later "
                f"sessions when a task is about it (`%agent memory` lists the notes).\n\n"
                f"{DEMO_NOTE}"), []

    def _plan_variable(self, task: str, name: str, description: str, results: list[ToolResult],
                       n: int, remote: bool = False) -> tuple[str, list[ToolCall]]:
        """A task about one of the user's variables (named in the namespace picture): code
        that uses it; in the python tool's kernel it meets a NameError, and ipyagent offers
        to copy the variable and runs the call again."""
        kernel = "the remote kernel" if remote else "the sibling kernel"
        if not results:
            code = variable_code(task, name, description)
            return (f"{LABEL} Your notebook has `{name}` ({description}); I'll look at it in "
                    f"Python. It is not in {kernel} yet: my code will ask for a copy.",
                    [self._call("python", {"code": code}, n)])
        last = results[-1]
        copies = [c for r in results for c in (r.meta.get("copies") or [])
                  if c.get("name") == name and c.get("direction") == "push"]
        if copies and not copies[-1].get("copied", True):
            why = copies[-1].get("reason") or "it was not copied"
            return (f"{LABEL} `{name}` stayed in your kernel ({why}), so I could not look at it "
                    "and did not guess. `%agent push " + name + "` copies it, if you want me to."
                    f"\n\n{DEMO_NOTE}"), []
        if last.error and f"name '{name}' is not defined" in last.output and not copies:
            return (f"{LABEL} `{name}` is in your kernel, not in {kernel}, and nothing offered to "
                    "copy it here (in a notebook or IPython the magics do); `%agent push "
                    f"{name}` or `agent.push({name}=...)` copies it.\n\n{DEMO_NOTE}"), []
        copied = " (copied from your kernel when my code needed it)" if copies else ""
        return self._answer(task, last, f"I used your `{name}`{copied}",
                            printer="The sibling kernel" if not remote else "The remote kernel")

    def _then(self, planned: tuple[str, list[ToolCall]], task: str,
              tools: dict[str, dict[str, Any]], results: list[ToolResult], n: int,
              offered: str | None) -> tuple[str, list[ToolCall]]:
        """After the python work: a file the task asks for (write_file), a value it asks to
        keep (offer_result); then the answer says what became of each."""
        text, calls = planned
        ran = [r for r in results if r.name == "python"]
        if calls or not ran or ran[-1].error:
            return planned
        path = file_to_write(task)
        if path is not None and "write_file" in tools and not _called(results, "write_file"):
            content = "\n".join(p for p in (_printed_part(r) for r in ran) if p) + "\n"
            return (f"{LABEL} The task asks for the result in `{path}`: I'll write it there "
                    "(write_file; you see the change first).",
                    [self._call("write_file", {"path": path, "content": content}, n)])
        if offered and wants_offer(task) and OFFER_TOOL in tools and not _called(results, OFFER_TOOL):
            expr = find_expression(task) or offered
            return (f"{LABEL} You asked to keep the result: I'll offer `{offered}` to you "
                    "(offer_result; nothing enters your kernel unless you take it).",
                    [self._call(OFFER_TOOL, {"name": offered, "description":
                                             f"the value of {expr}, computed in my python kernel"}, n)])
        said = [follow_up(r) for r in results if r.name in ("write_file", OFFER_TOOL)]
        if not said:
            return planned
        return text.replace(DEMO_NOTE, " ".join(said) + "\n\n" + DEMO_NOTE), []

    def _plan_python(self, task: str, results: list[ToolResult], n: int,
                     remote: bool = False) -> tuple[str, list[ToolCall]]:
        kernel = "the kernel on the remote Jupyter server" if remote else "the sibling kernel"
        printer = "The remote kernel" if remote else "The sibling kernel"
        expr = find_expression(task)
        if expr is None:
            if not results:
                code = (f"task = {task!r}\nwords = task.split()\n"
                        "print(len(words), 'words;', 'longest:', max(words, key=len))")
                return (f"{LABEL} I found no Python expression in the task, so I will "
                        "analyse its text in Python.", [self._call("python", {"code": code}, n)])
            return self._answer(task, results[-1], "I analysed the task's text",
                                printer=printer)
        if not results:
            imports = "import math\n" if re.search(r"\bmath\.", expr) else ""
            code = (f"{imports}value = {expr}\nprint(f'value = {{value!r}}')\n"
                    "print(f'digits: {len(value)}')")
            return (f"{LABEL} I'll evaluate `{expr}` in {kernel} and count its "
                    "digits.", [self._call("python", {"code": code}, n)])
        last = results[-1]
        if last.error and len(results) == 1 and "TypeError" in last.output:
            code = ("text = str(value)\n"
                    "print(f'digits: {len(text.lstrip(\"-\").split(\".\")[0])}')")
            return (f"{LABEL} `len()` does not work on a number, but the kernel kept "
                    "`value`, so I'll count the digits of its text form.",
                    [self._call("python", {"code": code}, n)])
        return self._answer(task, last, f"I evaluated `{expr}`", results, printer=printer)

    def _plan_shell(self, command: str, task: str, results: list[ToolResult], n: int,
                    remote: bool = False) -> tuple[str, list[ToolCall]]:
        # Where it runs, as the tool's description says: bash started by the sibling kernel
        # (in its sandbox, when it has one), or by the kernel on the remote server.
        where = ("with bash on the remote Jupyter server" if remote
                 else "with bash, started by the sibling kernel")
        if not results:
            return (f"{LABEL} The task asks for a shell command, so I'll run `{command}` {where} "
                    "(the shell tool).", [self._call("shell", {"command": command}, n)])
        return self._answer(task, results[-1], f"I ran `{command}`", where=where,
                            printer="Bash")

    def _plan_plot(self, task: str, system: str, items: list[Any], results: list[ToolResult],
                   n: int) -> tuple[str, list[ToolCall]] | None:
        """A plot task with a plotting skill listed: load it, follow it, answer; None: not one."""
        if not PLOT_WORDS.search(task):
            return None
        listed = _LISTED.findall(system.split(SKILLS_MARKER, 1)[1]) if SKILLS_MARKER in system else []
        skill = next((s for s in listed if re.search(r"plot|chart|graph|visual", s)), None)
        if skill is None:
            return None
        ran = [r for r in results if r.name == "python"]
        if ran:
            last = ran[-1]
            printed = "\n".join(ln for ln in _printed_part(last).splitlines()
                                 if not ln.startswith("[image/") and ln != "(no output)")
            said = (f"It failed:\n\n{fence(last.output.strip(), 'text')}" if last.error
                    else "The figure is shown above, under the call."
                    + (f" It printed:\n\n{fence(printed, 'text')}" if printed else ""))
            return (f"{LABEL} I plotted the data following the skill `{skill}`. {said}\n\n"
                    + DEMO_NOTE), []
        loaded = _loaded_skill(items, skill)
        if loaded is None and not any(r.name == SKILL_TOOL for r in results):
            return (f"{LABEL} The task asks for a plot and the skill `{skill}` is listed, so I'll "
                    "load its instructions first.", [self._call(SKILL_TOOL, {"name": skill}, n)])
        pattern = _python_block(loaded or "")
        code = _plot_data(task) + "\n" + (pattern or _PLOT_CODE)
        how = ("with the skill's pattern" if pattern else
               "as the skill says" if loaded else "without the skill (it did not load)")
        return (f"{LABEL} I'll make the data the task describes and plot it {how}.",
                [self._call("python", {"code": code}, n)])

    def _answer(self, task: str, last: ToolResult, what: str,
                results: list[ToolResult] | None = None,
                where: str = "in Python",
                printer: str = "The sibling kernel") -> tuple[str, list[ToolCall]]:
        outputs = [_printed_part(r) for r in (results or [last])]
        shown = "\n".join(o for o in outputs if o) or last.output.strip()
        status = "It failed:" if last.error else f"{printer} printed:"
        lines = shown.splitlines()
        if len(lines) > _QUOTED_LINES or len(shown) > _QUOTED_CHARS:
            # The user saw the output under the call: point at it, do not repeat it.
            last_few = lines[-(_QUOTED_LINES // 2):]
            status = (f"{'It failed; it' if last.error else printer} printed "
                      f"{len(lines)} line{'s' if len(lines) != 1 else ''} ({len(shown):,} "
                      "characters, shown above under the call); "
                      + (f"the last {len(last_few)}:" if len(last_few) < len(lines)
                         else "in short:"))
            shown = "\n".join(ln if len(ln) <= 80 else ln[:79] + "…" for ln in last_few)
        # Output in a ``text`` fence: it is what ran printed, never code to run (``%agent
        # fix`` takes an answer's last python block as the fix).
        return (f"{LABEL} {what} {where}. {status}\n\n{fence(shown, 'text')}\n\n{DEMO_NOTE}"), []

    def _plan_tools(self, task: str, tools: dict[str, dict[str, Any]],
                    results: list[ToolResult], n: int) -> tuple[str, list[ToolCall]]:
        if results:
            lines = [f"- `{r.name}`: {'error: ' if r.error else ''}{r.output.strip()}"
                     for r in results]
            return f"{LABEL} Here is what the tools returned:\n\n" + "\n".join(lines), []
        calls: list[ToolCall] = []
        numbers = [float(x) if "." in x else int(x) for x in re.findall(r"-?\d+(?:\.\d+)?", task)]
        # Built-in workspace tools change files, and `remember` keeps a note for later
        # sessions: never call them on a guess. Prefer the
        # tools the task names; else every tool whose arguments can be filled.
        candidates = {n: s for n, s in tools.items() if n not in _NOT_GUESSED}
        words = set(re.findall(r"\w+", task.lower()))
        named = {n: s for n, s in candidates.items() if n.lower() in words}
        for name, spec in (named or candidates).items():
            args = fill_arguments(spec.get("parameters", {}), task, numbers)
            if args is not None:
                calls.append(self._call(name, args, n + len(calls)))
        if not calls:
            return (f"{LABEL} None of the tools ({', '.join(tools)}) take arguments I can "
                    "fill from the task, so I cannot help with it."), []
        names = ", ".join(f"`{c.name}`" for c in calls)
        return f"{LABEL} I'll call {names}.", calls


# What the python tool's (and the shell tool's) description says when its kernel is on a
# remote server (ipyagent.tools.python.python_description; a test keeps them equal).
REMOTE_MARKER = "remote Jupyter server"


def _remote(tools: dict[str, dict[str, Any]]) -> bool:
    """Whether the code and commands run on a remote server, as the tools describe it."""
    return any(REMOTE_MARKER in str(tools.get(name, {}).get("description", ""))
               for name in ("python", "shell"))


def _called(results: list[ToolResult], name: str) -> bool:
    return any(r.name == name for r in results)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception): ")


def _at_the_limit(items: list[Any]) -> str:
    """The demo's answer once max_steps is reached: what its last call returned."""
    last = next((it for it in reversed(items) if isinstance(it, ToolResult)), None)
    lines = str(last.output).splitlines() if last is not None else []
    error = next((line for line in reversed(lines) if _ERROR_LINE.match(line)), None)
    said = " ".join((error or (lines[0] if lines else "")).split())[:200]
    got = ("" if not said else f" The last call failed: {said}." if error
           else f" The last call printed: {said}")
    return (f"{LABEL} I reached the step limit before I could finish.{got} Allow more "
            f"steps, or run again to go on.\n\n{DEMO_NOTE}")


# Never called on a guess: the workspace tools change files, remember keeps a note; offer_result puts a question
# to the person (and is for a value worth keeping, which a demo never has); load_skill is
# called only for a task a listed skill fits (the plot plan).
_NOT_GUESSED = {"read_file", "write_file", "edit_file", "list_files", "offer_result",
               "remember", "shell", "load_skill"}

# The skills listing in the system prompt (ipyagent.instructions.skills.MARKER; a test keeps them equal:
# a model may not import the engine).
SKILLS_MARKER = "# Skills (load_skill)"
SKILL_TOOL = "load_skill"
_LISTED = re.compile(r"^- ([a-z0-9]+(?:-[a-z0-9]+)*): ", re.MULTILINE)
_FENCED = re.compile(r"^(`{3,}|~{3,})[ \t]*(?:python|py)\b[^\n]*\n(.*?)^\1[ \t]*$",
                     re.MULTILINE | re.DOTALL)
_FUNCTIONS = ("sin", "cos", "tan", "tanh", "exp", "log", "sqrt")
_PLOT_CODE = """\
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(x, y, label=label)
ax.set_title(title)
ax.set_xlabel(xlabel)
ax.set_ylabel(ylabel)
fig.tight_layout()
plt.show()
"""


def _loaded_skill(items: list[Any], name: str) -> str | None:
    """The text of skill ``name`` as loaded in the conversation (by load_skill or up front)."""
    text = None
    for item in items:
        if isinstance(item, ToolResult) and item.name == SKILL_TOOL and not item.error \
                and item.output.startswith(f"Skill `{name}` "):
            text = item.output
        elif isinstance(item, Message) and item.role == "user" \
                and (item.meta.get("skill") or {}).get("name") == name:
            text = item.content
    return text


def _python_block(text: str) -> str | None:
    """The first fenced Python block of a skill's text (its pattern), or None."""
    m = _FENCED.search(text)
    return m.group(2).rstrip() + "\n" if m else None


def _plot_data(task: str) -> str:
    """Python that makes the data a plot task describes: ``fn(x)`` over a range (sin on 0–10)."""
    words = set(re.findall(r"[a-z]+", task.lower()))
    fn = next((f for f in _FUNCTIONS if f in words), "sin")
    span = re.search(r"from\s+(-?\d+(?:\.\d+)?)\s+to\s+(-?\d+(?:\.\d+)?)", task)
    lo, hi = (span.group(1), span.group(2)) if span else ("0", "10")
    if fn in ("log", "sqrt") and float(lo) <= 0:
        lo = "0.01"  # where the function is defined
    return (f"import numpy as np\n\nx = np.linspace({lo}, {hi}, 200)\ny = np.{fn}(x)\n"
            f"label = \"{fn}(x)\"\ntitle = \"{fn}(x) for x from {lo} to {hi}\"\n"
            f"xlabel, ylabel = \"x\", \"{fn}(x)\"\n")
# An answer quotes an output this short; a longer one it points at (the user saw it).
_QUOTED_LINES, _QUOTED_CHARS = 6, 400

_SAFE_NAMES = {"abs", "divmod", "len", "max", "min", "pow", "range", "round", "sorted", "str",
               "sum", "int", "float", "math", "sqrt", "pi", "e", "factorial", "list"}


def find_expression(task: str) -> str | None:
    """The longest run of words in ``task`` that is a Python expression computing something."""
    candidates = re.findall(r"`([^`]+)`", task)
    words = task.split()
    for i in range(len(words)):
        for j in range(i + 1, min(len(words), i + 12) + 1):
            candidates.append(" ".join(words[i:j]))
    best = None
    for raw in candidates:
        text = raw.strip().strip(".?,!:;")
        if not any(ch.isdigit() for ch in text):
            continue
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError:
            continue
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        if isinstance(tree.body, (ast.Constant, ast.BoolOp)) or not names <= _SAFE_NAMES:
            continue  # a bare number, or words that merely parse ("compute 2")
        if best is None or len(text) > len(best):
            best = text
    return best


_RUN = re.compile(r"\b(?:run|execute)\s+(?:the\s+)?(?:shell\s+)?(?:command\s+)?`([^`\n]+)`",
                  re.IGNORECASE)
_IN_SHELL = re.compile(r"`([^`\n]+)`\s+in\s+(?:the|a)\s+(?:shell|terminal)", re.IGNORECASE)
_LIST_FILES = re.compile(r"\blist\s+(?:all\s+)?(?:the\s+)?files\b", re.IGNORECASE)


def shell_command(task: str) -> str | None:
    """The command a task clearly asks to run in a shell ("run `ls -l`", "list the
    files"), else None; a backticked Python expression ("run `2**100`") is not one."""
    for pattern in (_RUN, _IN_SHELL):
        m = pattern.search(task)
        text = m.group(1).strip() if m else ""
        if text and find_expression(text) != text:  # a whole Python expression is python's
            return text
    return "ls -la" if _LIST_FILES.search(task) else None


def fill_arguments(schema: dict[str, Any], task: str,
                   numbers: list[int | float]) -> dict[str, Any] | None:
    """Arguments for a tool from the task text, or None when a required one cannot be filled."""
    args: dict[str, Any] = {}
    pool = list(numbers)
    for name in schema.get("required", []):
        kind = schema.get("properties", {}).get(name, {}).get("type")
        if kind == "string":
            args[name] = task
        elif kind in ("integer", "number") and pool:
            value = pool.pop(0)
            args[name] = int(value) if kind == "integer" else value
        else:
            return None
    return args


def _printed_part(result: ToolResult) -> str:
    """What a call printed before any traceback (the error itself was already handled)."""
    if not result.error:
        return result.output.strip()
    kept = []
    for line in result.output.splitlines():
        if re.match(r"\s*(Traceback|-{5,}|Error:|\w+(Error|Exception)\b)", line):
            break
        kept.append(line)
    return "\n".join(kept).strip()


def _summarise(items: list[Any]) -> str:
    """A compaction summary, honestly mechanical: the first line of each earlier block."""
    text = "\n".join(getattr(it, "content", "") for it in items)
    bullets = []
    for block in text.split("\n\n"):
        lines = [ln.strip() for ln in block.splitlines() if ln.strip()]
        if len(lines) >= 2 and lines[0].startswith("["):
            bullets.append(f"- {lines[0].strip('[]')}: {lines[1][:100]}")
    return f"{LABEL} summary of {len(bullets)} earlier blocks:\n" + "\n".join(bullets[-30:])
