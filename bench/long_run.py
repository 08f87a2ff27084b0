"""Long runs: what autosave, save, load and export cost at step 10, 100 and 1,000.

Each step is a tool call and its 4 KB result (what a small local model's long run looks
like). Per step, side by side: the autosave (``Autosave.write``, its cache warm, a few new
steps since the last save), and the floor — ``json.dumps`` of the same notebook dict plus
an atomic write of its bytes; the ratio must stay under 2; and a whole loop step (a
zero-latency model, a tool returning the 4 KB) with autosave off and on. Then the first save in a fresh
process against a later one (no stall), save and to_notebook of the 1,000-step run, and
its transcript read (beside ``nbformat.read``, which validates), loaded and replayed, each
cold in a fresh process and warm; the context table; the RSS growth (and, with a plot per
step, with the items' display payloads spilled to the spill file or kept); and an 80-step run in
a 4,096-token window with ~3,000-character results: how many summary requests it makes
and how much of each request differs from the previous one's prefix (prompt-cache churn),
with the old shallow compaction (``compact_target`` at the threshold) beside the default.
Run: ``python bench/long_run.py``.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ipyagent import Agent, Message, ToolCall, ToolResult, tool
from ipyagent._util import eventloop as _eventloop  # noqa: E402
from ipyagent._util.atomic import write_atomic  # noqa: E402
from ipyagent.context.tokens import TokenCounter  # noqa: E402
from ipyagent.models.base import Turn, TurnComplete, asks_summary  # noqa: E402
from ipyagent.models.openai_chat import to_chat_messages  # noqa: E402
from ipyagent.transcripts.export import notebook_dict  # noqa: E402
from ipyagent.transcripts.transcript import Autosave, _parts, read, save, to_notebook  # noqa: E402

CHECKPOINTS = (10, 100, 1000)
REPEATS = 7  # saves timed per checkpoint (the median is shown): fsync of megabytes is noisy
RESULT = ("line of tool output " * 4 + "\n") * 50  # ~4 KB


def add_step(agent: Agent, n: int) -> None:
    agent.context.append(ToolCall(f"call_{n}", "read_file", {"path": f"f{n}.txt"}))
    agent.context.append(ToolResult(f"call_{n}", RESULT, name="read_file"))


class StepModel:
    """Answers every request at once: one call of ``fetch`` (a zero-latency model)."""

    name = "zero-latency"

    async def aclose(self) -> None:
        return None

    async def stream(self, request):  # type: ignore[no-untyped-def]
        call = ToolCall(f"call_{len(request.items)}", "fetch", {})
        yield TurnComplete(Turn(tool_calls=[call], finish_reason="tool_calls",
                                usage={"prompt_tokens": 10, "completion_tokens": 1}))


@tool
async def fetch() -> str:
    """Return the next 4 KB page."""
    return RESULT


def one_step(agent: Agent, listeners: list) -> float:
    """Seconds one loop step takes (model, tool, record; autosave when it is listening),
    timed on the engine loop, where runs step (not the hop from this thread to it)."""
    async def timed() -> float:
        t = time.perf_counter()
        await agent._astep(listeners, steps_so_far=0)
        return time.perf_counter() - t

    return _eventloop.run_sync(timed())


def floor(agent: Agent, path: Path) -> float:
    header, metadata = _parts(agent)
    nb = notebook_dict(agent.context, header, kernel_name=agent.kernel_name,
                       metadata=metadata, audit=True)
    built = time.perf_counter()
    write_atomic(path, json.dumps(nb, ensure_ascii=False))
    return time.perf_counter() - built  # building the dict is not the floor: dumping it is


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def first_save() -> tuple[float, float]:
    code = ("import sys, time; from ipyagent import Agent, Message; a = Agent(model='demo', "
            "python_tool=False); a.context.append(Message('user', 'x')); t = time.perf_counter(); "
            "a.save(sys.argv[1]); t1 = time.perf_counter(); a.save(sys.argv[1]); "
            "print(t1 - t, time.perf_counter() - t1)")
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([sys.executable, "-c", code, os.path.join(d, "t.ipynb")],
                             capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    first, later = map(float, out.stdout.split())
    return first, later


# -- display payloads: a plot per step, autosaved; what stays in the kernel's memory -------
def plot_page(n: int) -> ToolResult:
    """A tool result as a python call's plot gives it: ~40 KB of PNG and ~5 KB of HTML, new
    each step (a run's payloads differ)."""
    png = base64.b64encode(n.to_bytes(4, "big") + os.urandom(30_000)).decode()
    return ToolResult("", f"<Figure {n}>", outputs=[{
        "output_type": "display_data", "metadata": {},
        "data": {"image/png": png, "text/html": f"<table>{'<tr><td>x</td></tr>' * 250}</table>",
                 "text/plain": f"<Figure {n}>"}}])


class PlotModel(StepModel):
    async def stream(self, request):  # type: ignore[no-untyped-def]
        call = ToolCall(f"call_{len(request.items)}", "plot", {})
        yield TurnComplete(Turn(tool_calls=[call], finish_reason="tool_calls",
                                usage={"prompt_tokens": 10, "completion_tokens": 1}))


def trim() -> None:
    """Give memory the allocator holds free back to the system (glibc), so RSS shows what
    is live, not the peak of one save's transient text."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def payload_run(steps: int, spill: bool, items: bool = True) -> None:
    """In this process: ``steps`` autosaved steps each adding a plot; prints the RSS growth
    per step and the payload bytes the items hold (``items``: their large display values
    spilled to the spill file once saved)."""
    import gc

    from ipyagent.context.spill import SpillStore, held
    from ipyagent.transcripts.notebook_text import NotebookText

    if not spill:
        NotebookText.SPILL = 10**12  # the code before: every cached text kept in memory
    if not items:
        SpillStore.threshold = 0  # the code before: every payload stays on its item
    count = iter(range(10**9))

    @tool
    async def plot() -> ToolResult:
        """Draw the next plot."""
        return plot_page(next(count))

    with tempfile.TemporaryDirectory() as d:
        agent = Agent(client=PlotModel(), tools=[plot], python_tool=False, file_tools=False,
                      circuit_breaker=0, max_steps=10**9, autosave=os.path.join(d, "auto.ipynb"))
        agent.context.append(Message("user", "go"))
        listeners = agent._listeners(None)
        for _ in range(10):
            one_step(agent, listeners)
        gc.collect()
        trim()
        rss0 = current_rss_mb()
        tracemalloc.start()
        for _ in range(steps):
            one_step(agent, listeners)
        gc.collect()
        live = tracemalloc.get_traced_memory()[0] / 1024 / steps
        tracemalloc.stop()
        trim()
        grown = (current_rss_mb() - rss0) * 1024 / steps
        kept = sum(held(i) for i in agent.context if isinstance(i, ToolResult)) / len(agent.context) * 2
        print(f"{grown:.0f} {live:.0f} {kept / 1024:.0f}")


PAYLOAD_MODES = {  # (the autosave's texts spilled, the items' payloads spilled)
    "now: items' payloads spilled too": (True, True),
    "before: autosave texts read back, payloads on the items": (True, False),
    "older: everything in memory": (False, False),
}


def payloads(steps: int = 300) -> None:
    """RSS growth per step of an autosaved run with a plot per step, side by side: the
    items' payloads spilled to the spill file (now), kept on the items (before), and the
    autosave's cached texts kept in memory too (older), each in a fresh process."""
    print(f"{steps} autosaved steps, each a ~45 KB plot (PNG + HTML), per step"
          f"{'':14}RSS KB   live KB   payload KB held per step")
    for name, (spill, items) in PAYLOAD_MODES.items():
        out = subprocess.run([sys.executable, __file__, "--payloads", str(steps), str(int(spill)),
                              str(int(items))], capture_output=True, text=True, check=True)
        grown, live, kept = map(float, out.stdout.split())
        print(f"  {name:62}{grown:6.0f} {live:9.0f} {kept:10.0f}")


def spill_cost(steps: int = 300, timed: int = 100) -> None:
    """What spilling costs a step: two autosaved plot runs side by side in one process, the
    items' payloads spilled and kept (``SpillStore.threshold = 0``), their steps interleaved
    in alternating order; the median of the last ``timed`` steps."""
    from ipyagent.context.spill import SpillStore

    count = iter(range(10**9))
    threshold = SpillStore.threshold

    @tool
    async def plot() -> ToolResult:
        """Draw the next plot."""
        return plot_page(next(count))

    with tempfile.TemporaryDirectory() as d:
        runs = {}
        for spill in (True, False):
            agent = Agent(client=PlotModel(), tools=[plot], python_tool=False, file_tools=False,
                          circuit_breaker=0, max_steps=10**9,
                          autosave=os.path.join(d, f"auto-{spill}.ipynb"))
            agent.context.append(Message("user", "go"))
            runs[spill] = (agent, agent._listeners(None), [])
        for n in range(steps):
            for spill in ((True, False) if n % 2 else (False, True)):
                SpillStore.threshold = threshold if spill else 0
                agent, listeners, times = runs[spill]
                t = one_step(agent, listeners)
                if n >= steps - timed:
                    times.append(t)
        SpillStore.threshold = threshold
        on, off = (statistics.median(runs[s][2]) * 1e3 for s in (True, False))
        for agent, _, _ in runs.values():
            agent.close()
    print(f"  an autosaved plot step at steps {steps - timed}-{steps}: {on:.0f} ms spilled, "
          f"{off:.0f} ms kept ({on / off:.2f}x)")


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        agent = Agent(client=StepModel(), tools=[fetch], python_tool=False, file_tools=False,
                      circuit_breaker=0, max_steps=10**9, autosave=os.path.join(d, "auto.ipynb"))
        agent.context.append(Message("user", "go"))
        with_autosave = agent._listeners(None)  # what a run hears: autosave first
        one_step(agent, with_autosave)
        step = 1
        autosave = agent._autosaver  # the agent's own: one cache of rendered cells, as in a run
        assert isinstance(autosave, Autosave)
        rss0 = rss_mb()
        print("per step (ms)     step   autosave   floor   ratio   step: autosave off     on   file MB")
        for target in CHECKPOINTS:
            while step < target - 10:
                step += 1
                add_step(agent, step)
            one_step(agent, with_autosave)  # the cache warm: what a run autosaved already
            step += 1
            saves, floors, off, on = [], [], [], []
            for _ in range(REPEATS):
                step += 1
                add_step(agent, step)
                t = time.perf_counter()
                autosave.write()
                saves.append(time.perf_counter() - t)
                floors.append(floor(agent, Path(d) / "floor.ipynb"))
                off.append(one_step(agent, []))  # a whole loop step, nobody listening
                on.append(one_step(agent, with_autosave))  # the same, autosaved
                step += 2
            s, f = statistics.median(saves), statistics.median(floors)
            size = os.path.getsize(agent.autosave) / 1e6
            print(f"{'':18}{step:5} {s * 1e3:10.1f} {f * 1e3:7.1f} {s / f:7.2f} "
                  f"{statistics.median(off) * 1e3:20.2f} {statistics.median(on) * 1e3:6.1f} "
                  f"{size:9.1f}")
        print(f"RSS growth: {(rss_mb() - rss0):.1f} MB over {step} steps "
              f"({(rss_mb() - rss0) * 1024 / step:.1f} KB/step)")
        first, later = first_save()
        print(f"first save in a fresh process {first * 1e3:.0f} ms, the next {later * 1e3:.0f} ms "
              f"(stall {max(first - later, 0) * 1e3:.0f} ms)")
        path = Path(d) / "cold.ipynb"
        t = time.perf_counter()
        save(agent, path)
        print(f"save (cold) at {step} steps: {(time.perf_counter() - t) * 1e3:.0f} ms")
        reading(path, step)
        t = time.perf_counter()
        to_notebook(agent)
        print(f"to_notebook at {step} steps: {(time.perf_counter() - t) * 1e3:.0f} ms warm, "
              f"{fresh_to_notebook(path) * 1e3:.0f} ms the first time in a fresh process "
              "(nbformat not imported)")
        t = time.perf_counter()
        table = agent.context._repr_html_()  # what %agent context displays
        print(f"context table at {step} steps: {(time.perf_counter() - t) * 1e3:.1f} ms, "
              f"{len(table) / 1e3:.0f} KB of HTML")
    payloads()
    spill_cost()
    compaction()


# -- compaction: how often it summarises, and how much of each request is new ------------
WINDOW = 4096  # the tests' long-run window (tests/test_compaction.py)
PAGE = ("a page of tool output, about three thousand characters long; " * 50)[:3000]


class CompactingModel:
    """Calls ``page`` every turn and answers summary requests with a short summary; keeps
    each request's chat wire text and reports usage as a server with another tokenizer
    would (3.5 characters per token over that text)."""

    name = "zero-latency"

    def __init__(self) -> None:
        self.sent: list[str] = []  # the wire text of each request that is not a summary
        self.summaries = 0

    async def aclose(self) -> None:
        return None

    async def stream(self, request):  # type: ignore[no-untyped-def]
        wire = json.dumps(to_chat_messages(request.system, request.items), ensure_ascii=False)
        usage = {"prompt_tokens": int(len(wire) / 3.5) + 1, "completion_tokens": 20}
        if asks_summary(request):  # either form (Agent.compact_summary)
            self.summaries += 1
            yield TurnComplete(Turn(text="- fetched pages; each held the same text", usage=usage))
            return
        self.sent.append(wire)
        call = ToolCall(f"call_{len(self.sent)}", "page", {})
        yield TurnComplete(Turn(text=f"Reading page {len(self.sent)}.", tool_calls=[call],
                                finish_reason="tool_calls", usage=usage))


@tool
async def page() -> str:
    """Read the next page (~3,000 characters)."""
    return PAGE


def compaction(steps: int = 80) -> None:
    """An ``steps``-step run in a 4,096-token window, before and after compaction respected
    the prompt cache: summary requests, and the share of the characters sent that were not
    the previous request's prefix (what a server's prompt cache cannot reuse). "Before" is
    the old, shallow compaction, still reachable: ``compact_target`` at the threshold."""
    before = compaction_run(steps, compact_target=Agent.compact_threshold.default_value)
    after = compaction_run(steps)
    print(f"compaction, {steps} steps in a {WINDOW}-token window, ~3,000-character results"
          f"{'':6}before   after")
    print(f"  summary requests{'':57}{before[0]:6} {after[0]:7}")
    print(f"  characters sent that differ from the previous request's prefix{'':9}"
          f"{before[1]:6.0%} {after[1]:7.0%}")


def compaction_run(steps: int, **settings: float) -> tuple[int, float]:
    """(summary requests, prefix churn) of one run with these Agent settings."""
    model = CompactingModel()
    agent = Agent(client=model, tools=[page], python_tool=False, file_tools=False,
                  context_window=WINDOW, request_max_tokens=256, max_steps=steps,
                  circuit_breaker=0, **settings)
    agent.context.counter = TokenCounter(use_tokenizer=False)  # as the tests count
    agent.run("read the pages")
    agent.close()
    new = sum(len(b) - len(os.path.commonprefix([a, b])) for a, b in zip(model.sent, model.sent[1:]))
    total = sum(len(b) for b in model.sent[1:])
    return model.summaries, new / total


# What each reading runs, in a fresh interpreter with ipyagent imported (as in a kernel
# that loaded the extension); the imports a reading needs beyond that are part of it.
FRESH = {
    "read": "from ipyagent.transcripts.transcript import read as run",
    "nbformat.read (validating)": "import functools, nbformat; "
                                  "run = functools.partial(nbformat.read, as_version=4)",
    "Agent.from_transcript": "import functools, ipyagent; "
                             "run = functools.partial(ipyagent.Agent.from_transcript, python_tool=False)",
    "replay (no python calls)": "import functools, ipyagent.transcripts.replay as r; "
                                "run = functools.partial(r.replay, approval='auto')",
}


def fresh(setup: str, path: Path) -> float:
    """Seconds ``setup`` and ``run(path)`` take in a new process that imported ipyagent."""
    code = ("import sys, time; import ipyagent; t0 = time.perf_counter(); " + setup
            + "; run(sys.argv[1]); print(time.perf_counter() - t0)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    return float(out.stdout.split()[-1])


def fresh_to_notebook(path: Path) -> float:
    """Seconds ``Context.to_notebook()`` takes the first time in a new process that imported
    ipyagent and holds the run's items (median of 3); it must not import nbformat."""
    code = ("import sys, time; import ipyagent; from ipyagent.context.buffer import Context; "
            "from ipyagent.transcripts.transcript import read; c = Context(read(sys.argv[1]).items); "
            "t = time.perf_counter(); c.to_notebook(); "
            "print(time.perf_counter() - t, 'nbformat' in sys.modules)")
    times = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                             text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
        seconds, imported = out.stdout.split()
        assert imported == "False", "to_notebook imported nbformat"
        times.append(float(seconds))
    return statistics.median(times)


def reading(path: Path, steps: int) -> None:
    """The transcript read, loaded and replayed, cold (a fresh process: nbformat's import is
    part of its read) and warm (median of 3), ipyagent's json read beside nbformat.read."""
    import nbformat

    print(f"reading the {steps}-step transcript ({path.stat().st_size / 1e6:.1f} MB)"
          f"{'':4}cold (fresh process)   warm")
    warm = {"read": lambda: read(path),
            "nbformat.read (validating)": lambda: nbformat.read(path, as_version=4)}
    rows = {}
    for name, setup in FRESH.items():
        cold = statistics.median(fresh(setup, path) for _ in range(3))
        again = None
        if name in warm:
            times = []
            for _ in range(3):
                t = time.perf_counter()
                warm[name]()
                times.append(time.perf_counter() - t)
            again = statistics.median(times)
        rows[name] = (cold, again)
        print(f"  {name:44}{cold * 1e3:9.0f} ms" + (f"{again * 1e3:11.0f} ms" if again else ""))
    ours, theirs = rows["read"], rows["nbformat.read (validating)"]
    print(f"  read vs nbformat.read: {theirs[0] / ours[0]:.1f}x faster cold, "
          f"{theirs[1] / ours[1]:.1f}x warm")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--payloads"]:
        payload_run(int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4:5] != ["0"])
    else:
        main()
