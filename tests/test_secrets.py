"""Nothing secret is ever written: transcripts, autosaves, the cache and logs are scanned."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from ipyagent import Agent
from ipyagent._secrets import find_secret, secret_values
from ipyagent.cache import ResponseCache
from ipyagent.errors import TranscriptError
from ipyagent.events import Notice

from scripted_server import ScriptedServer, reply_text, reply_tool_calls

ENV = "IPYAGENT_TEST_SENTINEL_KEY"


@pytest.fixture
def sentinel(monkeypatch):
    key = f"sk-sentinel-{uuid.uuid4().hex}"
    monkeypatch.setenv(ENV, key)
    return key


@pytest.fixture
def debug_log(tmp_path):
    """Everything ipyagent, httpx and the agent's own logger say, at DEBUG, into a file."""
    path = tmp_path / "debug.log"
    handler = logging.FileHandler(path)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield path
    root.removeHandler(handler)
    root.setLevel(old_level)
    handler.close()


def files_containing(root: Path, secret: str) -> list[Path]:
    needle = secret.encode()
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_sentinel_key_is_used_but_never_written(tmp_path, sentinel, debug_log):
    script = [reply_tool_calls([("python", {"code": "import os\nprint(sorted(k for k in os.environ "
                                                      "if 'SENTINEL' in k))"})], text="checking"),
              reply_text("No key in the kernel.")]
    with ScriptedServer(script) as srv:
        agent = Agent(model="scripted-model", base_url=srv.base_url, api_key_env=ENV,
                      cache="on", cache_path=str(tmp_path / ".ipyagent" / "cache.sqlite"),
                      autosave=str(tmp_path / "runs") + "/", cwd=str(tmp_path))
        agent.log.addHandler(logging.FileHandler(tmp_path / "agent.log"))
        try:
            result = agent.run("check the environment")
            agent.save(tmp_path / "run.ipynb")
        finally:
            agent.close()
        # The key was really in play: it went to the server, and only there.
        assert {r.headers.get("authorization") for r in srv.requests} == {f"Bearer {sentinel}"}
    assert result.stop_reason == "done"
    assert "[]" in [i for i in agent.context if getattr(i, "name", "") == "python"][-1].output
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert "run.ipynb" in written and ".ipyagent/cache.sqlite" in written
    assert any(w.startswith("runs/run-") for w in written) and "debug.log" in written
    assert debug_log.stat().st_size > 0
    assert files_containing(tmp_path, sentinel) == []


def test_a_secret_in_the_context_is_refused_everywhere(tmp_path, sentinel):
    notices = []
    with ScriptedServer([reply_text(f"You said {sentinel}")]) as srv:
        agent = Agent(model="scripted-model", base_url=srv.base_url, api_key_env=ENV,
                      python_tool=False, cache="on", cache_path=str(tmp_path / "c.sqlite"),
                      autosave=str(tmp_path / "auto.ipynb"))
        agent.run(f"my key is {sentinel}", on_event=lambda e: isinstance(e, Notice) and notices.append(e))
        with pytest.raises(TranscriptError) as info:
            agent.save(tmp_path / "run.ipynb")
        agent.close()
    message = str(info.value)
    assert f"${ENV}" in message and sentinel not in message and "\n" not in message
    assert not (tmp_path / "run.ipynb").exists() and not (tmp_path / "auto.ipynb").exists()
    assert [n.level for n in notices] == ["warning"] and sentinel not in notices[0].message
    assert len(ResponseCache(tmp_path / "c.sqlite")) == 0  # the reply echoed the key: not stored
    assert files_containing(tmp_path, sentinel) == []
    # Edit the context (it is data) and the save goes through.
    agent.context.clear()
    agent.context.add_user("nothing secret")
    assert agent.save(tmp_path / "run.ipynb").exists()


def test_secret_values_pick_key_like_variables_only():
    env = {"MY_KEY_VAR": "short", "OPENAI_API_KEY": "sk-" + "a" * 40, "GITHUB_TOKEN": "ghp_" + "b" * 36,
           "KEYRING_BACKEND": "keyring.backends.null.Keyring", "HOME_TOKEN": "/home/me/.token/file/x",
           "CHOSEN": "chosen-secret-value"}
    found = secret_values("CHOSEN", env)
    assert set(found) == {"OPENAI_API_KEY", "GITHUB_TOKEN", "CHOSEN"}
    assert find_secret("x " + "b" * 36, found) is None
    assert find_secret("token ghp_" + "b" * 36, found) == "GITHUB_TOKEN"


def test_what_the_sibling_may_not_see_may_not_be_written_either():
    from ipyagent.kernel_process import scrub_env

    env = {"DB_PASSWORD": "hunter2222", "OPENAI_API_KEY_OLD": "sk-old-1234567890",
           "TOKENIZERS_PARALLELISM": "false", "KEY_FILE": "/etc/k.pem", "PATH": "/usr/bin"}
    found = secret_values(None, env)
    assert set(found) == {"DB_PASSWORD", "OPENAI_API_KEY_OLD"}
    assert set(found) <= set(env) - set(scrub_env(base=env))  # scrubbed there too
