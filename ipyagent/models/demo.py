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
* with other tools: call every tool whose required arguments it can fill (in parallel),
  then report their results;
* a denied call: acknowledge it and stop. Every reply is labelled ``[demo model]``.

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

from .._untrusted import fence
from ..items import Message, ToolCall, ToolResult
from ..tokens import TokenCounter
from .base import (
    OUTCOME_PROMPT,
    SUMMARY_PROMPT,
    ModelEvent,
    ModelRequest,
    TextDelta,
    ToolCallDelta,
    Turn,
    TurnComplete,
)

__all__ = ["DemoModel"]

LABEL = "[demo model]"
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
        if request.system == SUMMARY_PROMPT:
            return _summarise(items), []
        if request.system == OUTCOME_PROMPT:  # the memory note: the facts it was given
            facts = str(getattr(items[-1], "content", "")).split("\n\n")[0] if items else ""
            return f"{LABEL} {facts}", []
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
        command = shell_command(task) if "shell" in tools else None
        if command is not None:
            return self._plan_shell(command, task, results, n_calls, remote)
        if "python" in tools and SKILL_TOOL in tools:
            planned = self._plan_plot(task, request.system, items, results, n_calls)
            if planned is not None:
                return planned
        if "python" in tools:
            return self._plan_python(task, results, n_calls, remote)
        if tools:
            return self._plan_tools(task, tools, results, n_calls)
        return (f"{LABEL} I have no tools, so I cannot compute anything. "
                f"Your task was: {task!r}"), []

    def _call(self, name: str, arguments: dict[str, Any], n: int) -> ToolCall:
        # Deterministic ids, so that runs (and their transcripts) are reproducible.
        return ToolCall(id=f"demo_call_{n}", name=name, arguments=arguments)

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
        if not _PLOT.search(task):
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
            said = (f"It failed:\n\n{fence(last.output.strip())}" if last.error
                    else "The figure is shown above, under the call."
                    + (f" It printed:\n\n{fence(printed)}" if printed else ""))
            return (f"{LABEL} I plotted the data following the skill `{skill}`. {said}\n\n"
                    "(This answer was produced by the built-in demo model, not an LLM.)"), []
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
        return (f"{LABEL} {what} {where}. {status}\n\n{fence(shown)}\n\n"
                "(This answer was produced by the built-in demo model, not an LLM.)"), []

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


# Never called on a guess: the workspace tools change files, remember keeps a note; offer_result puts a question
# to the person (and is for a value worth keeping, which a demo never has); load_skill is
# called only for a task a listed skill fits (the plot plan).
_NOT_GUESSED = {"read_file", "write_file", "edit_file", "list_files", "offer_result",
               "remember", "shell", "load_skill"}

# The skills listing in the system prompt (ipyagent.skills.MARKER; a test keeps them equal:
# a model may not import the engine).
SKILLS_MARKER = "# Skills (load_skill)"
SKILL_TOOL = "load_skill"
_LISTED = re.compile(r"^- ([a-z0-9]+(?:-[a-z0-9]+)*): ", re.MULTILINE)
_PLOT = re.compile(r"\b(plot|plots|plotting|chart|charts|graph|graphs|histogram|scatter|"
                   r"visuali[sz]e)\b", re.IGNORECASE)
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
