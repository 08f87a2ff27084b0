"""Record what real small models of each family write, for the model-profile tests.

For each model: ``GET /v1/models``, ``GET /props`` (llama.cpp's server has it,
llama-cpp-python's does not), and three chat requests streamed raw: the tools as ipyagent's
text mode sends them (in the system prompt), the same constrained by the call grammar
(``ipyagent.models.profiles.grammar``), and the tools in the native ``tools`` field.
Each goes to ``tests/data/families/<model>.json``, with the model file's GGUF metadata (so
the recording says what model it is, not what its file is called).

    python bench/record_families.py qwen2.5-coder-0.5b=/path/q.gguf gemma3-270m=/path/g.gguf:gemma

``NAME=PATH[:CHAT_FORMAT]``; the server is llama-cpp-python from ``$IPYAGENT_LLAMA_PYTHON``,
one thread, greedy; one server at a time.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ipyagent.engine.settings import DEFAULT_SYSTEM_PROMPT  # noqa: E402
from ipyagent.models.profiles.gguf import read_gguf  # noqa: E402
from ipyagent.models.profiles.grammar import call_grammar  # noqa: E402
from ipyagent.models.text_tools import FINAL_ANSWER_SPEC, tools_prompt  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "families"
TASK = "Use Python to compute 2**100"
# Tasks on which Qwen2.5-Coder-0.5B wrote malformed calls unconstrained (found by trying a
# few by hand): each goes once free and once under the grammar.
PAIRED = ("What is 2**100? Run it with the python tool.", "Compute the sum of the first 100 primes.")
PYTHON_SPEC = {
    "name": "python",
    "description": "Run Python code in a persistent, isolated IPython kernel and return what it "
                   "prints, the value of the last expression, or the error.",
    "parameters": {"type": "object", "properties": {"code": {
        "type": "string", "description": "Python source to execute."}},
        "required": ["code"], "additionalProperties": False},
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _requests(alias: str) -> dict[str, dict[str, Any]]:
    common = {"model": alias, "stream": True, "stream_options": {"include_usage": True},
              "temperature": 0, "max_tokens": 160}
    text_system = DEFAULT_SYSTEM_PROMPT.rstrip() + "\n\n" + tools_prompt([PYTHON_SPEC, FINAL_ANSWER_SPEC])
    text = [{"role": "system", "content": text_system}, {"role": "user", "content": TASK}]
    grammar = call_grammar([PYTHON_SPEC, FINAL_ANSWER_SPEC])
    paired: dict[str, dict[str, Any]] = {}
    for i, task in enumerate(PAIRED):
        asked = [text[0], {"role": "user", "content": task}]
        paired[f"paired{i}_free"] = {**common, "messages": asked}
        paired[f"paired{i}_grammar"] = {**common, "messages": asked, "grammar": grammar}
    return {**paired,
        "text_mode": {**common, "messages": text},
        "text_mode_grammar": {**common, "messages": text, "grammar": grammar},
        "native_tools": {**common, "messages": [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
                                                {"role": "user", "content": TASK}],
                         "tools": [{"type": "function", "function": PYTHON_SPEC}],
                         "tool_choice": "auto"},
    }


def record(alias: str, path: Path, chat_format: str | None) -> Path:
    python = os.environ.get("IPYAGENT_LLAMA_PYTHON", "python")
    port = _port()
    command = [python, "-m", "llama_cpp.server", "--model", str(path), "--model_alias", alias,
               "--host", "127.0.0.1", "--port", str(port), "--n_threads", "1", "--n_ctx", "4096",
               "--verbose", "False"]
    if chat_format:
        command += ["--chat_format", chat_format]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{base}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        models = httpx.get(f"{base}/v1/models", timeout=10)
        props = httpx.get(f"{base}/props", timeout=10)
        info = read_gguf(path)
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        version = subprocess.run([python, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                                 capture_output=True, text=True).stdout.strip()
        out: dict[str, Any] = {
            "source": (f"recorded here on {datetime.date.today()} from llama-cpp-python {version} "
                       f"(python -m llama_cpp.server, {'--chat_format ' + chat_format if chat_format else 'the model' + chr(39) + 's own chat template'}), "
                       "one thread, temperature 0"),
            "model_file": {"name": path.name, "sha256": digest.hexdigest(),
                           "size": path.stat().st_size,
                           "gguf": {"general.architecture": info.architecture if info else None,
                                    "general.name": info.name if info else None,
                                    "tokenizer.chat_template": info.chat_template if info else None}},
            "chat_format": chat_format,
            "models": {"status": models.status_code, "body": models.json()},
            "props": {"status": props.status_code, "body": props.text[:2000]},
            "exchanges": {},
        }
        for kind, body in _requests(alias).items():
            started = time.monotonic()
            response = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=600)
            out["exchanges"][kind] = {"request": body, "http_status": response.status_code,
                                      "raw_response": response.text,
                                      "seconds": round(time.monotonic() - started, 1)}
            print(f"{alias} {kind}: {response.status_code} in {time.monotonic() - started:.0f}s",
                  flush=True)
        OUT.mkdir(parents=True, exist_ok=True)
        target = OUT / f"{alias}.json"
        target.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
        return target
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        alias, _, rest = arg.partition("=")
        file, _, fmt = rest.partition(":")
        print(record(alias, Path(file), fmt or None), flush=True)
