"""Compaction's prompt-cache effect measured on a real llama-cpp-python server.

``bench/long_run.py`` counts how much of each request differs from the previous one's
prefix against a scripted model; this sends the same kind of run to a real server and
reads what its prompt cache actually reused. A real ipyagent ``Agent`` (``model=…,
base_url=…``, its own ``OpenAIChat`` client) talks to a small recording proxy on 127.0.0.1.
The proxy plays the model — every turn calls ``page`` (a ~3,000-character result), a
summary request gets a short summary, as ``CompactingModel`` does — and forwards each JSON
body ipyagent posted, unchanged but for ``stream: false`` (no ``stream_options``),
``max_tokens: 1`` and ``temperature: 0``, to a real ``python -m llama_cpp.server`` it started (one thread, the
model's own chat template, verbose so that it logs ``Llama.generate: N prefix-match hit,
remaining M prompt tokens to eval``). The server's reported ``prompt_tokens`` go back to
ipyagent as the usage (so its token counter calibrates on the real tokenizer), and summary
requests go to the same server in their place in the sequence, as in a real run: the
server keeps ONE cached prompt, so a summary request evicts the conversation's. Each run
has its own fresh server; their requests take turns (one at a time: old, default, old, …)
so that both meet the same load on a shared machine.

Per request: prompt tokens (usage), tokens the server evaluated (its log line; a request
with no prefix-match line evaluated its whole prompt), whether its messages start with the
previous request's (JSON) and wall time. Printed side by side for before (the summary
asked in a request of its own, ``compact_summary = "separate"``; ``--shallow`` adds the
old shallow compaction, ``compact_target`` at ``compact_threshold``) and the default:
requests, total prompt tokens, total evaluated, the share reused, the share a perfect
cache could reuse (each request evaluating only the turn it added: the ceiling, since a
new result has to be read once), exact appends (the server reused the whole previous
prompt, tokens and all) while the window is not full and in all, the tokens evaluated by
summary requests and by the first turn after each, seconds, and the ratio. Tokens are the
measure; seconds move with whatever else the machine runs.

Run: ``python bench/real_prompt_cache.py [--steps 24] [--model smollm2-135m]
[--result-chars 3000] [--window 4096] [--shallow] [--per-request]``; the server's
python is ``$IPYAGENT_LLAMA_PYTHON`` (or ``--llama-python``), the models are in
``$IPYAGENT_LLAMA_MODELS`` (default ``~/.cache/ipyagent-ci/models``, ``.ci/local_models.py``
fetches them). Without them it says so in one line and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ipyagent import Agent, tool  # noqa: E402
from ipyagent.engine.compaction import SUMMARY_PROMPT  # noqa: E402
from ipyagent.models.base import SUMMARY_REQUEST  # noqa: E402

WINDOW = 4096  # the tests' and bench/long_run.py's long-run window
TEXT = "a page of tool output, about three thousand characters long; " * 200
PAGE = TEXT[:3000]  # --result-chars sets it
MODELS = {"smollm2-135m": "smollm2-135m.gguf", "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b.gguf"}
HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
WHOLE = "Llama.generate: full prompt already cached"


@tool
async def page() -> str:
    """Read the next page (~3,000 characters)."""
    return PAGE


@dataclass
class Sent:
    """One request as the real server saw it."""

    summary: bool
    prompt: int  # prompt tokens the server reported
    evaluated: int  # prompt tokens it evaluated (the rest came from its cache)
    seconds: float
    appended: bool = False  # its messages start with the previous request's, byte for byte


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """``python -m llama_cpp.server`` on 127.0.0.1, its log read request by request."""

    def __init__(self, python: Path, model: Path, log: Path, n_ctx: int) -> None:
        self.log = log
        self.url = f"http://127.0.0.1:{free_port()}/v1"
        port = self.url.rsplit(":", 1)[1].split("/")[0]
        with log.open("wb") as out:  # verbose is the server's default: it logs prefix hits
            self.process = subprocess.Popen(
                [str(python), "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "bench",
                 "--host", "127.0.0.1", "--port", port, "--n_threads", "1", "--n_ctx", str(n_ctx)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 180
        while True:
            if self.process.poll() is not None:
                raise SystemExit(f"llama-cpp-python server exited while starting; log: {log}")
            try:
                if httpx.get(f"{self.url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"llama-cpp-python server not up in 180 s; log: {log}")
            time.sleep(0.5)
        self.client = httpx.Client(timeout=1800)

    def complete(self, body: dict[str, Any], summary: bool) -> Sent:
        """Send one body (one token, greedy); what the server reported and evaluated."""
        body = {**body, "stream": False, "max_tokens": 1, "temperature": 0}
        body.pop("stream_options", None)
        start = self.log.stat().st_size
        t = time.perf_counter()
        reply = self.client.post(f"{self.url}/chat/completions", json=body)
        seconds = time.perf_counter() - t
        reply.raise_for_status()
        prompt = int(reply.json()["usage"]["prompt_tokens"])
        with self.log.open("rb") as f:  # the server serves one request at a time: this one's lines
            f.seek(start)
            lines = f.read().decode("utf-8", "replace")
        hit = HIT.search(lines)
        evaluated = 0 if WHOLE in lines else int(hit.group(2)) if hit else prompt
        return Sent(summary, prompt, evaluated, seconds)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Turns:
    """Lets the runs' requests take turns, one at a time, so that both meet the same load
    on a shared machine (each run has its own server, so its cache is its own)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.done: set[str] = set()
        self.current = 0
        self.cond = threading.Condition()

    def wait(self, name: str) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.names[self.current] == name)

    def passed(self, name: str, finished: bool = False) -> None:
        """``name`` sent its request (or ended): the next run that has not ended goes."""
        with self.cond:
            if finished:
                self.done.add(name)
            if self.names[self.current] == name and len(self.done) < len(self.names):
                self.current = (self.current + 1) % len(self.names)
                while self.names[self.current] in self.done:
                    self.current = (self.current + 1) % len(self.names)
            self.cond.notify_all()


class Proxy:
    """Plays the model for ipyagent on 127.0.0.1; forwards every body it gets to the server."""

    def __init__(self, server: LlamaServer, turns: Turns, name: str) -> None:
        self.server = server
        self.turns, self.name = turns, name
        self.sent: list[Sent] = []
        self.bodies: list[list[Any]] = []  # each request's messages, as posted
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                reply = proxy.answer(body)
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return None

        self.http = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The server's usage, with a scripted reply: a summary, or text and a call of ``page``."""
        messages = body["messages"]
        summary = (messages[0]["role"] == "system" and messages[0]["content"] == SUMMARY_PROMPT
                   or messages[-1].get("content") == SUMMARY_REQUEST)
        self.turns.wait(self.name)
        try:
            sent = self.server.complete(body, summary)
        finally:
            self.turns.passed(self.name)
        before = self.bodies[-1] if self.bodies else None
        sent.appended = before is not None and messages[:len(before)] == before
        self.bodies.append(messages)
        self.sent.append(sent)
        turns = sum(not s.summary for s in self.sent)
        if summary:
            message: dict[str, Any] = {"role": "assistant",
                                       "content": "- fetched pages; each held the same text"}
        else:
            message = {"role": "assistant", "content": f"Reading page {turns}.", "tool_calls": [
                {"id": f"call_{turns}", "type": "function",
                 "function": {"name": "page", "arguments": "{}"}}]}
        return {"id": f"chatcmpl-{len(self.sent)}", "object": "chat.completion", "model": "bench",
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "stop" if summary else "tool_calls"}],
                "usage": {"prompt_tokens": sent.prompt, "completion_tokens": 20,
                          "total_tokens": sent.prompt + 20}}

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def run(server: LlamaServer, turns: Turns, name: str, steps: int, out: dict[str, list[Sent]],
        **settings: Any) -> None:
    """The requests of one ``steps``-step run with these Agent settings, as the server saw them."""
    try:
        proxy = Proxy(server, turns, name)
        with tempfile.TemporaryDirectory() as cwd:  # no repository .ipyagent/ or AGENTS.md in the prompt
            agent = Agent(model="bench", base_url=proxy.url, tools=[page], python_tool=False,
                          file_tools=False, approval="auto", temperature=0, cwd=cwd,
                          context_window=WINDOW, request_max_tokens=256, max_steps=steps,
                          circuit_breaker=0, **settings)
            try:
                result = agent.run("read the pages")
            finally:
                agent.close()
                proxy.stop()
    finally:
        turns.passed(name, finished=True)  # the other run goes on alone
    if result.stop_reason != "max_steps":
        print(f"the {name} run stopped early ({result.stop_reason}): {result.steps[-1].error}",
              file=sys.stderr)
        return
    out[name] = proxy.sent


def both(python: Path, model: Path, steps: int, shallow: bool = False) -> dict[str, list[Sent]]:
    """Before (the summary asked in a request of its own; with ``shallow``, the old shallow
    compaction too) and the default, each on its own fresh server, their requests taking
    turns (before, default, before, ...)."""
    runs: dict[str, dict[str, Any]] = {"before": {"compact_summary": "separate"}, "default": {}}
    if shallow:
        runs = {"old": {"compact_target": Agent.compact_threshold.default_value,
                        "compact_summary": "separate"}, **runs}
    out: dict[str, list[Sent]] = {}
    with tempfile.TemporaryDirectory() as d:
        servers: dict[str, LlamaServer] = {}
        try:
            for name in runs:
                servers[name] = LlamaServer(python, model, Path(d) / f"llama-{name}.log", n_ctx=2 * WINDOW)
            turns = Turns(list(runs))
            threads = [threading.Thread(target=run, args=(servers[name], turns, name, steps, out),
                                        kwargs=settings) for name, settings in runs.items()]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            for server in servers.values():
                server.stop()
    if set(out) != set(runs):
        raise SystemExit("a run failed (see above)")
    return out


def appends(sent: list[Sent]) -> tuple[int, int, int, int]:
    """(exact appends, requests) while the window was not full (before the first request
    whose messages do not start with the previous one's), and in all: a request is an
    exact append when the server reused the whole previous prompt (tokens and all)."""
    first = next((i for i, s in enumerate(sent) if i and not s.appended), len(sent))
    exact = [i > 0 and s.prompt - s.evaluated >= sent[i - 1].prompt for i, s in enumerate(sent)]
    return sum(exact[1:first]), max(0, first - 1), sum(exact[1:]), len(sent) - 1


def ceiling(sent: list[Sent]) -> float:
    """The share of prompt tokens a perfect cache could reuse: every request evaluates only
    what it added (the turn before it and its results; estimated for a request after a
    compaction as the median added by an append)."""
    turns = [s for s in sent if not s.summary]
    grown = sorted(b.prompt - a.prompt for a, b in zip(turns, turns[1:]) if b.appended)
    median = grown[len(grown) // 2] if grown else 0
    new = turns[0].prompt + sum(b.prompt - a.prompt if b.appended else median
                                for a, b in zip(turns, turns[1:]))
    return 1 - new / sum(s.prompt for s in turns)


def totals(sent: list[Sent]) -> dict[str, float]:
    after = [b for a, b in zip(sent, sent[1:]) if a.summary and not b.summary]
    prompt = sum(s.prompt for s in sent)
    evaluated = sum(s.evaluated for s in sent)
    exact, before_full, exact_all, requests = appends(sent)
    return {
        "requests (turns + summaries)": len(sent),
        "summary requests": sum(s.summary for s in sent),
        "prompt tokens sent": prompt,
        "prompt tokens evaluated": evaluated,
        "  by summary requests": sum(s.evaluated for s in sent if s.summary),
        "  by the first turn after a summary": sum(s.evaluated for s in after),
        "share of prompt tokens reused from the cache": 1 - evaluated / prompt,
        "  the same, turn requests only": 1 - sum(s.evaluated for s in sent if not s.summary)
        / sum(s.prompt for s in sent if not s.summary),
        "  of turn requests, the share a perfect cache could reuse (estimate)": ceiling(sent),
        "exact appends while the window is not full (of requests)": exact,
        "  requests while the window is not full": before_full,
        "exact appends in all (of requests after the first)": exact_all,
        "  requests after the first": requests,
        "server seconds": sum(s.seconds for s in sent),
        # a token evaluated after a long cached prefix attends to all of it: dearer on CPU
        "server seconds per 1,000 tokens evaluated": sum(s.seconds for s in sent) / evaluated * 1000,
    }


def report(steps: int, model: str, runs: dict[str, list[Sent]]) -> None:
    names = list(runs)
    print(f"{steps} steps in a {WINDOW}-token window, ~{len(PAGE):,}-character results, {model} "
          f"on llama-cpp-python (one cached prompt)")
    print(f"  {'':90}" + "".join(f"{n:>12}" for n in names) + f"{'default/' + names[0]:>16}")
    table = {n: totals(sent) for n, sent in runs.items()}
    for name in table[names[0]]:
        values = [table[n][name] for n in names]
        a, b = values[0], values[-1]
        ratio = f"{b / a:16.2f}" if a and not ("share" in name or "exact" in name or "same" in name
                                                 or name.startswith("  req")) else ""
        if "share" in name or name.startswith("  the same"):
            cells = "".join(f"{v:12.1%}" for v in values)
        elif "seconds" in name:
            cells = "".join(f"{v:12.1f}" for v in values)
        else:
            cells = "".join(f"{v:12.0f}" for v in values)
        print(f"  {name:90}{cells}{ratio}")


def per_request(name: str, sent: list[Sent]) -> None:
    print(f"{name}: per request (S = summary, + = its messages append to the previous "
          "request's) prompt/evaluated tokens, seconds")
    print("  " + "  ".join(f"{'S' if s.summary else ''}{'+' if s.appended else ''}"
                           f"{s.prompt}/{s.evaluated} {s.seconds:.0f}s" for s in sent))


def main() -> None:
    global PAGE, WINDOW
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--model", default="smollm2-135m", choices=sorted(MODELS))
    parser.add_argument("--llama-python", default=os.environ.get("IPYAGENT_LLAMA_PYTHON", ""))
    parser.add_argument("--models", default=os.environ.get("IPYAGENT_LLAMA_MODELS")
                        or str(Path.home() / ".cache" / "ipyagent-ci" / "models"))
    parser.add_argument("--per-request", action="store_true", help="print every request's tokens")
    parser.add_argument("--result-chars", type=int, default=3000, help="characters of each page")
    parser.add_argument("--shallow", action="store_true", help="the old shallow compaction too")
    parser.add_argument("--window", type=int, default=WINDOW, help="Agent.context_window")
    args = parser.parse_args()
    PAGE, WINDOW = TEXT[:args.result_chars], args.window
    python = Path(args.llama_python) if args.llama_python else (
        Path(__file__).resolve().parents[1] / ".venv-llama" / "bin" / "python")  # the repo's, as .ci/run makes it
    model = Path(args.models) / MODELS[args.model]
    if not python.exists() or not model.exists():
        missing = f"llama-cpp-python's python {python}" if not python.exists() else f"model file {model}"
        print(f"skipped: no {missing}; set IPYAGENT_LLAMA_PYTHON and IPYAGENT_LLAMA_MODELS "
              "(.ci/run installs them)")
        return
    runs = both(python, model, args.steps, args.shallow)
    report(args.steps, args.model, runs)
    if args.per_request:
        for name, sent in runs.items():
            per_request(name, sent)


if __name__ == "__main__":
    main()
