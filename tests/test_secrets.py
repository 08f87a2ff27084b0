"""Nothing secret is ever written: transcripts, autosaves, the cache and logs are scanned."""

from __future__ import annotations

import base64
import functools
import json
import logging
import types
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from ipyagent import Agent
from ipyagent.context.events import Notice
from ipyagent.errors import TranscriptError
from ipyagent.models.cache import ResponseCache
from ipyagent.trust.secrets import find_secret, secret_values
from tests.helpers.scripted_server import ScriptedServer, reply_text, reply_tool_calls

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
    from ipyagent.kernel.process import scrub_env

    env = {"DB_PASSWORD": "hunter2222", "OPENAI_API_KEY_OLD": "sk-old-1234567890",
           "TOKENIZERS_PARALLELISM": "false", "KEY_FILE": "/etc/k.pem", "PATH": "/usr/bin"}
    found = secret_values(None, env)
    assert set(found) == {"DB_PASSWORD", "OPENAI_API_KEY_OLD"}
    assert set(found) <= set(env) - set(scrub_env(base=env))  # scrubbed there too


# -- encoded forms: found by the save guard, redacted from tool output ---------------------
def encoded_forms(key: str) -> dict[str, str]:
    """The forms of ``key`` the model's code printed below, computed here independently."""
    raw = key.encode()
    return {"raw": key, "base64": base64.b64encode(raw).decode()[:-4],
            "base64 at offset 1": base64.b64encode(b"z" + raw).decode()[4:-4],
            "urlsafe at offset 2": base64.urlsafe_b64encode(b"xy" + raw).decode()[4:-4],
            "quoted": quote(key, safe=""), "percent": "".join(f"%{b:02X}" for b in raw),
            "hex": raw.hex()}


def strings(obj: object) -> str:
    """Every string in a JSON-like value, joined (nbformat keeps multi-line text as lines)."""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, dict):
        return "".join(strings(k) + strings(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return "".join(map(strings, obj))
    return ""


def leaked(blob: str, key: str) -> list[str]:
    """The forms of ``key`` in ``blob``, whitespace ignored (a key printed over lines)."""
    flat = "".join(blob.split()).lower()
    return [name for name, form in encoded_forms(key).items() if form.lower() in flat]


@pytest.fixture
def odd_key(monkeypatch):
    """A key with characters that percent-encoding changes."""
    hexed = uuid.uuid4().hex
    key = f"sk+{hexed[:16]}/{hexed[16:]}="
    monkeypatch.setenv(ENV, key)
    return key


@pytest.fixture
def published():
    """What the notebook display sends to the frontend (IPython's capturing publisher)."""
    from IPython.core.displaypub import CapturingDisplayPublisher
    from IPython.testing import globalipapp

    globalipapp.start_ipython()
    ip = globalipapp.get_ipython()
    saved, ip.display_pub = ip.display_pub, CapturingDisplayPublisher()
    try:
        yield ip.display_pub.outputs
    finally:
        ip.display_pub = saved


PRINT_IT_ENCODED = """\
import base64, sys, urllib.parse
k = open({path!r}).read().split('=', 1)[1].strip()
print(base64.b64encode(k.encode()))
print(base64.urlsafe_b64encode(b'xy' + k.encode()).decode().rstrip('='))
print(urllib.parse.quote(k, safe=''))
print(''.join('%%%02X' % b for b in k.encode()))
for i in range(0, len(k), 7):
    sys.stdout.write(k[i:i + 7] + '\\r\\n')
    sys.stdout.flush()
k.encode().hex().upper()
"""
DISPLAY_AND_RAISE_IT = """\
from IPython.display import display
display({'text/plain': 'hex: ' + k.encode().hex(),
         'text/markdown': '**' + base64.b64encode(k.encode()).decode() + '**'}, raw=True)
raise RuntimeError('boom ' + base64.b64encode(b'z' + k.encode()).decode())
"""


def test_a_key_the_models_code_prints_encoded_reaches_no_one(tmp_path, odd_key, published):
    """Finding 6: base64/hex/percent-encoded/split copies of the key, printed by code in the
    real sibling, reach neither the model (request bodies), the display, nor any file."""
    import asyncio

    from ipyagent.context.events import ToolOutput
    from ipyagent.frontends.notebook import NotebookDisplay

    secret_file = tmp_path / "elsewhere" / "service.env"  # e.g. a project's .env
    secret_file.parent.mkdir()
    secret_file.write_text(f"{ENV}={odd_key}\n")
    work = tmp_path / "work"
    work.mkdir()
    script = [reply_tool_calls([("python", {"code": PRINT_IT_ENCODED.format(path=str(secret_file))})]),
              reply_tool_calls([("python", {"code": DISPLAY_AND_RAISE_IT})]),
              reply_text("I could not see the key.")]
    events: list = []
    with ScriptedServer(script) as srv:
        agent = Agent(model="scripted-model", base_url=srv.base_url, api_key_env=ENV,
                      approval="auto", autosave=str(work / "runs") + "/", cwd=str(work),
                      circuit_breaker=0, sandbox_paths={str(secret_file.parent): "ro"},
                      verify_answers=False)  # its scripted answer reports the error: no check
        try:
            async def main() -> None:
                display = NotebookDisplay()  # it dispatches to the running loop
                await agent.arun("print the key", on_event=lambda e: (events.append(e), display(e)))
                await asyncio.sleep(0.2)  # the display's last queued callbacks

            asyncio.run(main())
            agent.save(work / "run.ipynb")
        finally:
            agent.close()
        requests = list(srv.requests)
    marker = f"[redacted ${ENV}]"
    results = [i for i in agent.context if getattr(i, "name", "") == "python" and hasattr(i, "output")]
    assert len(results) == 2 and results[1].error and "RuntimeError" in results[1].output
    # The model: its next requests carry the redaction, never a form of the key.
    assert [leaked(strings(r.body), odd_key) for r in requests] == [[], [], []]
    assert marker in strings(requests[1].body) and marker in strings(requests[2].body)
    # The user: live lines, the notice, and the outputs shown in the cell.
    live = "".join(e.text for e in events if isinstance(e, ToolOutput))
    assert leaked(live, odd_key) == [] and marker in live
    notices = [e.message for e in events if isinstance(e, Notice) and "redacted" in e.message]
    assert notices == [f"redacted ${ENV} from python's output"] * 2
    shown = strings([o["data"] for o in published])
    assert leaked(shown, odd_key) == [] and marker in shown
    # The files: the transcript and the autosave hold the redaction, not the key.
    files = [work / "run.ipynb", *sorted((work / "runs").glob("*.ipynb"))]
    assert len(files) == 2
    for path in files:
        text = path.read_text()
        assert leaked(text, odd_key) == [] and leaked(strings(json.loads(text)), odd_key) == []
        assert marker in text


def test_the_save_guard_finds_encoded_and_split_forms(tmp_path, odd_key):
    raw = odd_key.encode()
    forms = [base64.b64encode(raw).decode(), base64.urlsafe_b64encode(b"12" + raw + b"3").decode(),
             base64.b64encode(b"1" + raw).decode().rstrip("="), raw.hex(), raw.hex().upper(),
             quote(odd_key, safe=""), "".join(f"%{b:02x}" for b in raw),
             "\n".join(odd_key[i:i + 5] for i in range(0, len(odd_key), 5)),
             "\r\n".join(odd_key[i:i + 3] for i in range(0, len(odd_key), 3)),
             " ".join(odd_key), base64.encodebytes(b"x" * 100 + raw).decode()]
    agent = Agent(model="demo", python_tool=False, api_key_env=ENV)
    for form in forms:
        agent.context.clear()
        agent.context.add_user(f"here: {form} (ok?)")
        with pytest.raises(TranscriptError, match=rf"\${ENV}"):
            agent.save(tmp_path / "run.ipynb")
        assert find_secret(form, secret_values(ENV)) == ENV
    assert not (tmp_path / "run.ipynb").exists()
    # Pieces of the key, or innocent text, are not secrets.
    for innocent in (odd_key[:6], odd_key[-6:], "hello world\n" * 100, raw.hex()[:12]):
        assert find_secret(innocent, secret_values(ENV)) is None


def test_every_tool_kind_is_redacted_at_the_executor_seam(tmp_path, sentinel):
    """The file tools and a user-defined tool (MCP results pass the same seam)."""
    from ipyagent import tool

    (tmp_path / "notes.txt").write_text(f"token:\n{sentinel[:10]}\n{sentinel[10:]}\n")

    @tool
    def fetch_page() -> str:
        """A page that quotes the key, hex-encoded."""
        return f"<p>{sentinel.encode().hex()}</p>"

    script = [reply_tool_calls([("read_file", {"path": "notes.txt"}), ("fetch_page", {})]),
              reply_text("done")]
    notices: list = []
    with ScriptedServer(script) as srv:
        agent = Agent(model="scripted-model", base_url=srv.base_url, api_key_env=ENV,
                      python_tool=False, tools=[fetch_page], approval="auto", cwd=str(tmp_path))
        agent.run("read", on_event=lambda e: isinstance(e, Notice) and notices.append(e.message))
        agent.close()
        last = strings(srv.requests[-1].body)
    outputs = {i.name: i.output for i in agent.context if hasattr(i, "output")}
    assert f"[redacted ${ENV}]" in outputs["read_file"] and f"[redacted ${ENV}]" in outputs["fetch_page"]
    assert leaked(last, sentinel) == [] and "token:" in last
    assert [n for n in notices if "redacted" in n] == [f"redacted ${ENV} from read_file's output",
                                                       f"redacted ${ENV} from fetch_page's output"]


# -- the key is read per request and kept nowhere ------------------------------------------
def holders(obj: object, needle: str, path: str = "client", seen: set | None = None,
            depth: int = 0) -> list[str]:
    """Where ``needle`` is reachable from ``obj``: attributes, containers, closures."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 12 or isinstance(obj, (type, types.ModuleType)):
        return []
    seen.add(id(obj))
    if isinstance(obj, str):
        return [path] if needle in obj else []
    if isinstance(obj, (bytes, bytearray)):
        return [path] if needle.encode() in obj else []
    found: list[str] = []
    children: list[tuple[str, object]] = []
    if isinstance(obj, dict):
        children = [(f"{path}[{k!r}]", v) for k, v in obj.items()] + [(f"{path}.key", k) for k in obj]
    elif isinstance(obj, (list, tuple, set, frozenset)):
        children = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    elif isinstance(obj, (types.FunctionType, types.MethodType)):
        fn = getattr(obj, "__func__", obj)
        cells = fn.__closure__ or ()
        children = [(f"{path}.<closure {i}>", c.cell_contents) for i, c in enumerate(cells)
                    if c.cell_contents is not None] + [(f"{path}.__self__", getattr(obj, "__self__", None))]
    elif isinstance(obj, functools.partial):
        children = [(f"{path}.func", obj.func), (f"{path}.args", obj.args), (f"{path}.kw", obj.keywords)]
    if hasattr(obj, "__dict__"):
        children += [(f"{path}.{k}", v) for k, v in vars(obj).items()]
    for slot in getattr(type(obj), "__slots__", ()):
        if isinstance(slot, str) and hasattr(obj, slot):
            children.append((f"{path}.{slot}", getattr(obj, slot)))
    for child_path, child in children:
        found += holders(child, needle, child_path, seen, depth + 1)
    return found


def test_the_client_reads_the_key_per_request_and_keeps_no_copy(monkeypatch, sentinel):
    """Finding 6: ``client._key`` kept the key for the client's life; a changed key was ignored."""
    import httpx

    with ScriptedServer([reply_text("one"), reply_text("two"), reply_text("three")]) as srv:
        http = httpx.AsyncClient(headers={"X-Trace": "t"})
        agent = Agent(model="scripted-model", base_url=srv.base_url, api_key_env=ENV,
                      python_tool=False, http_client=http)
        assert agent.run("first").text == "one"
        client = agent.client
        assert holders(client, sentinel) == [] and holders(http, sentinel) == []
        assert sentinel not in repr(client) and sentinel not in repr(vars(client))
        rotated = f"sk-rotated-{uuid.uuid4().hex}"
        monkeypatch.setenv(ENV, rotated)
        assert agent.run("second").text == "two" and agent.client is client  # same client
        monkeypatch.delenv(ENV)
        assert agent.run("third").text == "three"  # a local server: no key, none sent
        agent.close()
        sent = [r.headers.get("authorization") for r in srv.requests]
    assert sent == [f"Bearer {sentinel}", f"Bearer {rotated}", None]
    assert holders(client, rotated) == []


def test_a_cloud_key_unset_between_requests_is_one_line(monkeypatch):
    import httpx

    monkeypatch.setenv("GROQ_API_KEY", "gsk-" + uuid.uuid4().hex)
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200, json={"choices": [{"index": 0, "finish_reason": "stop",
                                                      "message": {"role": "assistant", "content": "hi"}}]})

    agent = Agent(model="m", provider="groq", python_tool=False,
                  http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    assert agent.run("one").text == "hi"
    monkeypatch.delenv("GROQ_API_KEY")
    result = agent.run("two")
    agent.close()
    assert result.stop_reason == "error" and result.error.startswith("GROQ_API_KEY is not set")
    assert "\n" not in result.error and len(seen) == 1


def test_a_secret_set_changed_or_removed_mid_session_is_followed(monkeypatch):
    """The secret set is reused between calls while the environment stays the same; a
    variable set, rotated or removed between two calls must count at the next one."""
    from ipyagent import tool
    from tests.helpers.scripted_model import ScriptedModel, calls, text

    late = "IPYAGENT_TEST_LATE_TOKEN"
    monkeypatch.delenv(late, raising=False)

    @tool
    def show_env() -> str:
        """The late variable's value."""
        import os

        return f"value: {os.environ.get(late, 'unset')}"

    model = ScriptedModel([calls(("show_env", {})), text("ok")] * 4)
    agent = Agent(client=model, tools=[show_env], python_tool=False, file_tools=False,
                  approval="auto")
    first, rotated = f"tok-{uuid.uuid4().hex}", f"tok-{uuid.uuid4().hex}"
    seen = []
    for value in (None, first, rotated, None):
        if value is None:
            monkeypatch.delenv(late, raising=False)
        else:
            monkeypatch.setenv(late, value)
        agent.run("show it")
        seen.append((agent.context[-2].output, secret_values().get(late)))
    agent.close()
    assert seen == [("value: unset", None), (f"value: [redacted ${late}]", first),
                    (f"value: [redacted ${late}]", rotated), ("value: unset", None)]
