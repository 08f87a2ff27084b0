"""Provider presets: where a provider lives, which API it speaks, which variable holds its key.

``Agent.provider = "ollama"`` fills in ``base_url``, ``api`` and ``api_key_env`` from the
table below. Explicit settings win: a preset only fills a setting left at its default
(``base_url`` empty, ``api`` None, ``api_key_env`` at ``OPENAI_API_KEY``).

Local servers need no key (one is sent when its variable happens to be set); a cloud
endpoint without its key is a ``ConfigError`` naming the variable, before any request.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass
from typing import Literal, get_args
from urllib.parse import urlsplit

from ..errors import ConfigError

__all__ = [
    "Api",
    "APIS",
    "Preset",
    "PRESETS",
    "Endpoint",
    "resolve",
    "check_key",
    "provider_table",
]

Api = Literal["chat", "responses", "anthropic"]
APIS: tuple[str, ...] = get_args(Api)
DEFAULT_KEY_ENV = "OPENAI_API_KEY"  # Agent.api_key_env's default


@dataclass(frozen=True)
class Preset:
    """One provider: endpoint, API style, key variable, and whether the key is required."""

    name: str
    label: str
    base_url: str
    api: Api
    key_env: str  # "" when the server takes no key
    key_required: bool
    notes: str = ""


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("openai", "OpenAI", "https://api.openai.com/v1", "responses", "OPENAI_API_KEY", True,
           "Responses API (reasoning kept across tool calls); api='chat' for Chat Completions"),
    Preset("anthropic", "Anthropic", "https://api.anthropic.com/v1", "anthropic", "ANTHROPIC_API_KEY", True,
           "Messages API; x-api-key + anthropic-version headers"),
    Preset("ollama", "Ollama", "http://127.0.0.1:11434/v1", "chat", "", False,
           "`ollama serve`; model names as in `ollama list`, e.g. qwen2.5:7b"),
    Preset("llamacpp", "llama.cpp server", "http://127.0.0.1:8080/v1", "chat", "LLAMA_API_KEY", False,
           "`llama-server -m model.gguf --jinja` (tool calls need the Jinja chat template); key only if started with --api-key"),
    Preset("llama-cpp-python", "llama-cpp-python", "http://127.0.0.1:8000/v1", "chat", "", False,
           "`python -m llama_cpp.server --model model.gguf` (the model's own chat template: "
           "tool calls the model writes as text are read, Agent.tool_mode 'auto'); "
           "`--chat_format chatml-function-calling` cannot stream tool calls"),
    Preset("vllm", "vLLM", "http://127.0.0.1:8000/v1", "chat", "VLLM_API_KEY", False,
           "`vllm serve MODEL --enable-auto-tool-choice --tool-call-parser …`; key only if started with --api-key"),
    Preset("lmstudio", "LM Studio", "http://127.0.0.1:1234/v1", "chat", "", False,
           "start the local server in LM Studio (Developer tab, or `lms server start`)"),
    Preset("groq", "Groq", "https://api.groq.com/openai/v1", "chat", "GROQ_API_KEY", True, ""),
    Preset("openrouter", "OpenRouter", "https://openrouter.ai/api/v1", "chat", "OPENROUTER_API_KEY", True,
           "model names like anthropic/claude-sonnet-4.5; reasoning_details are sent back"),
)}

# Hosts that always need a key, whichever way their URL was given.
_CLOUD_HOSTS = {urlsplit(p.base_url).hostname: p for p in PRESETS.values() if p.key_required}


@dataclass(frozen=True)
class Endpoint:
    """Where requests go once presets and explicit settings are combined."""

    api: Api
    base_url: str
    key_env: str
    key_required: bool
    label: str  # for messages: the provider's name, or the URL's host

    def __repr__(self) -> str:
        from .._util.text import without_credentials

        # A base_url may carry user:password (basic auth) or a ?key=: never in a repr.
        return (f"Endpoint(api={self.api!r}, base_url={without_credentials(self.base_url)!r}, "
                f"key_env={self.key_env!r}, key_required={self.key_required!r}, label={self.label!r})")


def resolve(
    provider: str | None = None,
    *,
    api: str | None = None,
    base_url: str = "",
    key_env: str | None = None,
) -> Endpoint:
    """The endpoint for a preset plus explicit settings (``None``/``""`` = not set)."""
    return _resolve(provider, api, base_url, key_env)


@functools.lru_cache(maxsize=64)  # asked at every tool call (which key variables to redact)
def _resolve(provider: str | None, api: str | None, base_url: str, key_env: str | None) -> Endpoint:
    if provider is not None and provider not in PRESETS:
        raise ConfigError(f"unknown provider {provider!r}; one of: {', '.join(PRESETS)}")
    if api is not None and api not in APIS:
        raise ConfigError(f"unknown api {api!r}; one of: {', '.join(APIS)}")
    preset = PRESETS[provider] if provider else None
    url = (base_url or (preset.base_url if preset else PRESETS["openai"].base_url)).rstrip("/")
    host = urlsplit(url).hostname or ""
    cloud = _CLOUD_HOSTS.get(host)
    if key_env is None:
        key_env = _default_key_env(preset, cloud, host, explicit_url=bool(base_url))
    if preset is not None and not base_url:
        required, label = preset.key_required, preset.label
    else:  # an explicit URL (or none at all): a key is required by known cloud hosts only
        required, label = cloud is not None, cloud.label if cloud else (urlsplit(url).hostname or url)
    chosen = api or (preset.api if preset else "chat")
    return Endpoint(chosen, url, key_env, required, label)  # type: ignore[arg-type]


def _default_key_env(preset: Preset | None, cloud: Preset | None, host: str,
                     explicit_url: bool) -> str:
    """The key variable when ``api_key_env`` was not set: never a cloud key for a local host.

    A preset names its own; a known cloud host gets its provider's; a server on this
    machine or the local network gets none (``OPENAI_API_KEY`` must not travel to
    ``http://192.168.1.20``); any other URL is taken for an OpenAI-compatible proxy.
    """
    if preset is not None:
        return preset.key_env
    if cloud is not None:
        return cloud.key_env
    if explicit_url and is_local_host(host):
        return ""
    return DEFAULT_KEY_ENV


def is_local_host(host: str) -> bool:
    """True for loopback, private and link-local addresses, ``localhost``, ``*.local``
    and dot-less intranet names."""
    host = host.strip("[]").lower()
    if host in ("localhost", "host.docker.internal") or host.endswith((".local", ".localhost")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "." not in host and bool(host)
    return address.is_loopback or address.is_private or address.is_link_local


def check_key(endpoint: Endpoint, key: str | None) -> None:
    """Raise a one-line ``ConfigError`` when ``endpoint`` needs a key and has none."""
    if key or not endpoint.key_required:
        return
    if not endpoint.key_env:
        raise ConfigError(
            f"{endpoint.label} needs an API key but Agent.api_key_env is empty: "
            "set it to the name of the environment variable that holds the key")
    raise ConfigError(
        f"{endpoint.key_env} is not set: {endpoint.label} needs an API key; set it in the "
        f"environment that starts Jupyter/IPython, or os.environ[{endpoint.key_env!r}] = getpass.getpass()")


def provider_table() -> str:
    """The presets as a Markdown table (for the README and ``%agent?``)."""
    rows = ["| provider | base URL | api | key variable | notes |", "|---|---|---|---|---|"]
    for p in PRESETS.values():
        key = p.key_env if p.key_required else (f"{p.key_env} (optional)" if p.key_env else "none")
        rows.append(f"| `{p.name}` | `{p.base_url}` | `{p.api}` | {key} | {p.notes} |")
    return "\n".join(rows)


def server_hint(url: str | None) -> str:
    """For a refused connection to a local ``url``: which server is expected there and how
    to start it (from the presets), e.g. " — is Ollama running? `ollama serve`"; else ''."""
    if not url:
        return ""
    parts = urlsplit(url)
    if not is_local_host(parts.hostname or ""):
        return ""
    there = [p for p in PRESETS.values()
             if not p.key_required and urlsplit(p.base_url).port == parts.port]
    if len(there) == 1:
        return f" — is the {there[0].label} server running? Start it with {_start(there[0])}"
    if there:  # one port, several servers (8000: vLLM, llama-cpp-python)
        starts = "; ".join(f"{p.label}: {_start(p)}" for p in there)
        return f" — is the model server running? Start it with {starts}"
    return " — is the model server running at that address?"


def _start(preset: Preset) -> str:
    return preset.notes.split(";")[0].split(" (")[0]
