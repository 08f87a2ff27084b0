"""``AgentSettings``: every setting of an ``Agent``, as traitlets with help.

``Agent`` inherits them, so ``%config Agent.model = ...``, ``c.Agent.model`` in
``ipython_config.py`` and ``Agent(model=...)`` all work; the ``_doc`` module turns
them into the README's configuration table.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from traitlets import Bool, Dict, Enum, Float, Int, List, TraitError, Unicode, Union, validate
from traitlets.config import LoggingConfigurable

from ..models.profiles.catalog import PROFILES
from ..models.providers import APIS, PRESETS, Endpoint, is_local_host, resolve
from ..models.timeouts import Timeouts
from .approval import MODES

__all__ = ["AgentSettings", "DEFAULT_SYSTEM_PROMPT"]

DEFAULT_SYSTEM_PROMPT = """\
You are an assistant working inside a user's Jupyter notebook. You can run Python with \
the `python` tool: it executes in a separate, persistent Python kernel (variables persist \
between calls; the user's own variables are not there unless they share them). Use it for \
anything that needs computing or checking, instead of guessing. File tools, when offered, \
reach only the user's workspace folder: read before you edit. Each call is \
shown to the user and may need their approval. Keep code short; print what you need to \
see. When you are done, answer plainly and concisely, with the key numbers."""


# The restored settings that bound a run (its length, cost, time, memory, what the model
# sees, whether python is offered). A file may only tighten them: a looser value (and
# 0 / None / "" mean "no limit", the loosest) is ignored and named in one line.
LIMITS = ("max_steps", "max_tokens", "circuit_breaker", "request_max_tokens", "context_window",
          "tool_output_limit", "tool_timeout", "memory_limit", "python_tool", "shell_tool")


class AgentSettings(LoggingConfigurable):
    """The settings of an ``Agent`` (the loop itself lives in ``ipyagent.engine.agent``), and what
    follows from them alone (``endpoint``, ``workspace_path``)."""

    @classmethod
    def class_get_help(cls, inst: Any = None) -> str:
        """``%config Agent``: headed 'Agent options' (not traitlets' 'Agent(AgentSettings)')."""
        text = super().class_get_help(inst)
        head, _, rest = text.partition("\n")
        title = f"{cls.__name__} options"
        return f"{title}\n{'-' * len(title)}\n{rest.partition(chr(10))[2]}"

    model = Unicode("demo", help=(
        "Model name sent to the endpoint; 'demo' is the built-in deterministic offline model."
    )).tag(config=True)
    base_url = Unicode("", help=(
        "Endpoint base URL, e.g. http://127.0.0.1:11434/v1 (Ollama). "
        "Empty: the provider's, else https://api.openai.com/v1."
    )).tag(config=True)
    api_key_env = Unicode("OPENAI_API_KEY", help=(
        "Name of the environment variable holding the API key. The key is read when a "
        "request is made and is never stored, shown or logged. Left at its default, the "
        "provider's variable is used."
    )).tag(config=True)
    provider = Enum(list(PRESETS), default_value=None, allow_none=True, help=(
        "Preset that fills in base_url, api and api_key_env: " + ", ".join(PRESETS) + ". "
        "Explicit settings win: the preset fills only those left at their defaults. "
        "Local servers (ollama, llamacpp, llama-cpp-python, vllm, lmstudio) need no key."
    )).tag(config=True)
    api = Enum(list(APIS), default_value=None, allow_none=True, help=(
        "Wire protocol: 'chat' (Chat Completions), 'responses' (OpenAI Responses) or "
        "'anthropic' (Anthropic Messages). None: the provider's, else 'chat'."
    )).tag(config=True)
    system_prompt = Unicode(DEFAULT_SYSTEM_PROMPT, help="System prompt for the model.").tag(config=True)
    approval = Enum(list(MODES), default_value="auto", help=(
        "Who approves tool calls: 'auto' runs them, 'ask' asks (notebook buttons, terminal "
        "prompt, or approval_hook), 'deny' refuses them all."
    )).tag(config=True)
    allow = List(Unicode(), help="Tool names that run without asking, whatever `approval` says.").tag(config=True)
    approval_timeout = Float(0.0, help=(
        "Seconds to wait for an approval click before denying the call; 0: no limit. Where "
        "nobody can click (the frontend allows no input: nbclient, papermill, CI), calls are "
        "denied after this many seconds, or at once when it is 0."
    )).tag(config=True)

    @validate("approval_timeout")
    def _check_approval_timeout(self, proposal: Any) -> float:
        if proposal["value"] < 0:
            raise TraitError(f"Agent.approval_timeout must be >= 0, not {proposal['value']}")
        return proposal["value"]

    max_steps = Int(20, help="Stop after this many iterations (stop reason 'max_steps').").tag(config=True)
    answer_at_limit = Bool(True, help=(
        "When max_steps is reached right after tool calls, ask the model once more for its "
        "answer from what they returned (no call it makes then runs; the stop reason stays "
        "'max_steps'). One request more than max_steps; False: stop at once, with no answer."
    )).tag(config=True)
    circuit_breaker = Int(3, help=(
        "Stop when the same tool fails this many times in a row (stop reason 'circuit_breaker')."
    )).tag(config=True)
    max_tokens = Int(0, help=(
        "Token budget for the whole session, input + output (stop reason 'budget'); 0: unlimited."
    )).tag(config=True)
    temperature = Union([Float(), Unicode()], default_value=None, allow_none=True, help=(
        "Sampling temperature; None: the server's default."
    )).tag(config=True)
    request_max_tokens = Int(None, allow_none=True, help=(
        "Maximum output tokens per model request; None: the server's default."
    )).tag(config=True)
    tool_choice = Unicode(None, allow_none=True, help=(
        "'auto', 'none', 'required' or a tool name; None: the server's default."
    )).tag(config=True)
    tool_mode = Enum(["auto", "native", "text"], default_value="auto", help=(
        "How tools reach the model: 'native' sends the API's tools field; 'text' sends none: "
        "the tool specs and the call format (Hermes/Qwen tool_call tags) go in the system "
        "prompt, calls are read from the reply and results go back as user messages (for "
        "servers or chat templates without tool calling; tool_choice is not sent); 'auto' "
        "starts native and switches to text for the rest of the conversation, with one line "
        "saying why, when the server refuses or drops the tools or the model writes its "
        "calls as text. Calls written as text are recovered in every mode, each approved "
        "like any call."
    )).tag(config=True)
    model_profile = Enum(["auto", *PROFILES], default_value="auto", help=(
        "The model family's profile: the call syntax a text-mode prompt shows and reads first, "
        "the stop strings, and whether its chat template carries tools (a template without "
        "them starts a conversation in text mode under tool_mode 'auto'). 'auto' reads the "
        "model name, the server's /v1/models and, for a server on this machine or network, "
        "llama.cpp's /props and the GGUF file's metadata; a profile name forces it. Profiles "
        "not tested against a real recording of their family say 'untested'."
    )).tag(config=True)
    constrain_calls = Union([Bool(), Enum(["auto"])], default_value="auto", help=(
        "Constrain text-mode replies with a GBNF grammar built from the tool schemas (free "
        "text, or well-formed calls of offered tools), sent as the 'grammar' field that "
        "llama.cpp's servers (llama-cpp-python, llama-server) take. 'auto': when a server on "
        "this machine or network looks like llama.cpp's and one probe (the conversation's "
        "messages, a few output tokens, before the first text-mode request) shows it obeys "
        "a grammar (asked once per server); True: always send it (chat completions only); "
        "False: never."
    )).tag(config=True)
    first_token_timeout = Float(None, allow_none=True, help=(
        "Seconds a model request may wait for the reply's first token (text, reasoning or a "
        "tool call): the server reading the prompt, a reasoning model thinking. Keep-alive "
        "comments and pings do not count. Not retried (a server that slow is as slow again). "
        "None: 600, or 1800 for a server on this machine or the local network (a CPU reads a "
        "long prompt for minutes). 0: no limit."
    )).tag(config=True)
    idle_timeout = Float(None, allow_none=True, help=(
        "Seconds a reply may go without an event once it has started (keep-alive comments, "
        "pings and partial lines do not count); a stalled reply is discarded and asked again, "
        "within max_retries. None: Agent.timeout. 0: no limit."
    )).tag(config=True)
    request_timeout = Float(None, allow_none=True, help=(
        "Seconds one model request may take in all, retries included. Not retried. None: 1800, "
        "or 3600 for a server on this machine or the local network. 0: no limit."
    )).tag(config=True)
    timeout = Float(120.0, help=(
        "The idle limit's old name, kept for configurations that set it: seconds a started "
        "reply may go without an event, used when Agent.idle_timeout is None. 0: no limit."
    )).tag(config=True)

    @validate("first_token_timeout", "idle_timeout", "request_timeout", "timeout")
    def _check_timeout(self, proposal: Any) -> float | None:
        value = proposal["value"]
        if value is not None and not value >= 0:  # not >=: NaN too
            raise TraitError(f"Agent.{proposal['trait'].name} must be >= 0 (0: no limit), not {value}")
        return value  # type: ignore[no-any-return]

    max_retries = Int(3, help=(
        "Retries on 429, 5xx, dropped connections and stalled replies, also once part of the "
        "reply streamed (that part is discarded: nothing ran yet)."
    )).tag(config=True)
    python_tool = Bool(True, help="Offer the `python` tool (runs in the sibling kernel).").tag(config=True)
    shell_tool = Enum(["auto", "on", "off"], default_value="auto", help=(
        "Offer the `shell` tool: a command (bash -c) run by the sibling kernel in its "
        "directory, so inside its sandbox, with its clean environment and limits; each call "
        "is approved like any other (`allow` can name `shell`). 'auto': offered where the "
        "sibling is sandboxed (bubblewrap) and the python tool is on, not where it is not; "
        "'on': offered either way (it starts the sibling kernel); 'off': never."
    )).tag(config=True)
    kernel_name = Unicode("python3", help="Kernelspec of the sibling kernel.").tag(config=True)
    cwd = Unicode("", help="Working directory of the sibling kernel; empty: the current directory.").tag(config=True)
    kernel_url = Unicode("", help=(
        "Run the model's code on a Jupyter Server, Kernel Gateway or Enterprise Gateway at this "
        "URL (e.g. 'http://127.0.0.1:8888'), over its REST + websocket kernel API; the loop, "
        "approvals, display and transcript stay here, and file tools still act on this machine "
        "(see Agent.workspace). Not sandboxed by ipyagent. Empty: a local sibling kernel."
    )).tag(config=True)
    kernel_token_env = Unicode("JUPYTER_TOKEN", help=(
        "Environment variable holding the token for Agent.kernel_url; read at each request, "
        "sent only to that server (never stored, shown or logged)."
    )).tag(config=True)
    kernel_env = Dict(value_trait=Unicode(), help=(
        "Environment variables for a kernel that Agent.kernel_url's gateway launches, e.g. "
        "{'KERNEL_USERNAME': 'ana', 'KERNEL_NAMESPACE': 'gpu'} (Enterprise Gateway's KERNEL_* "
        "conventions). Nothing else of your environment is sent; a plain Jupyter Server ignores them."
    )).tag(config=True)
    tool_timeout = Float(60.0, help=(
        "Seconds a tool call may run: a python call is then interrupted (state is kept); a "
        "file tool or MCP call is abandoned with an error value. 0: no limit."
    )).tag(config=True)
    context_window = Int(0, help=(
        "The model's context window in tokens; before each request the context is compacted "
        "to fit it. 0: unknown, no compaction until the server refuses a request as too long "
        "and names its window (then that one, for this endpoint and model)."
    )).tag(config=True)
    compact_threshold = Float(0.8, help=(
        "Compact when prompt + request_max_tokens would pass this fraction of context_window."
    )).tag(config=True)
    compact_keep_recent = Float(0.5, help=(
        "Fraction of the room inside the compaction limit (what is left after the reply "
        "reserve, system prompt, tool specs and task) kept for the most recent turns, verbatim, "
        "when a compaction summarises (and no more than compact_target leaves room for)."
    )).tag(config=True)
    compact_target = Float(0.5, help=(
        "Low-water mark: a compaction goes on until prompt + request_max_tokens is at most "
        "this fraction of context_window (clearing older tool results first, then "
        "summarising), so the next one is many steps away and the requests between share "
        "their prefix (a server's prompt cache). At or above compact_threshold: compact "
        "only just under the threshold, and never clear results."
    )).tag(config=True)
    compact_summary = Enum(["conversation", "separate"], default_value="conversation", help=(
        "How a compaction asks for its summary. 'conversation': the request the step would "
        "send, with one instruction of ipyagent's appended, so a server's prompt cache reads "
        "the whole conversation back and a server that keeps one cached prompt "
        "(llama.cpp, llama-cpp-python) keeps it. 'separate': a request of its own (a "
        "summariser's system prompt, the old turns as text, cleared results in full). "
        "'conversation' falls back to 'separate' when its reply has no text or the request "
        "would not fit the window."
    )).tag(config=True)
    prompt_cache = Bool(True, help=(
        "Mark prompt-cache breakpoints on Anthropic (cache_control on the system prompt, "
        "the last tool, the last message and the previous request's last message), and send "
        "OpenAI's API one prompt_cache_key per conversation, so the unchanged prefix of the "
        "next request is read from the cache. Other servers cache prefixes on their own. "
        "Cache reads and writes show in Usage and the footers either way."
    )).tag(config=True)
    on_length = Enum(["continue", "stop"], default_value="continue", help=(
        "When a reply is cut at request_max_tokens: 'continue' asks the model to go on, "
        "'stop' ends the run (stop reason 'length')."
    )).tag(config=True)
    verify_answers = Union([Enum(["auto"]), Bool()], default_value="auto", help=(
        "Look before answering: when the model's final answer goes against what this run's "
        "tools returned (the last call failed and the answer does not say so; the last "
        "output was empty, 0, NaN or None; a number in the answer is in no tool output, "
        "rounding and notation aside; a file the task asked to write was not written; a "
        "physical quantity computed in one step from constants the model chose), ipyagent "
        "tells the model so once per run, "
        "as a labelled note, and it answers again (one more request). 'auto': on for local "
        "endpoints (loopback, private network) and model ids naming a size up to 8B, off "
        "for others; True/False: always/never."
    )).tag(config=True)
    repeat_temperature = Float(0.7, min=0.0, max=2.0, help=(
        "Where answers are checked (verify_answers in force): when the model writes again, "
        "word for word, a call ipyagent would not run (it failed, printed nothing, or its "
        "output was questioned by the check), the reply is set aside and asked once more at "
        "this temperature, with a fixed seed (so a run repeats on the same server). Greedy "
        "small models otherwise write the same call until the circuit breaker. 0: never."
    )).tag(config=True)
    tool_output_limit = Int(20000, help=(
        "Characters of one tool result the model sees (head and tail kept); the notebook "
        "keeps the full output."
    )).tag(config=True)
    output_lines = Int(20, help=(
        "Lines of one tool output shown in the notebook cell or the terminal before its "
        "middle is folded away: the first and last half of this many stay (in a notebook a "
        "'more lines' toggle opens the rest, with no kernel round trip). The context and "
        "the transcript keep all of it. 0: show every line."
    )).tag(config=True)
    send_images = Bool(False, help=(
        "Send images that python tool calls display (plots) to the model; needs a "
        "vision-capable model. Off: the model sees a placeholder like [image/png 640x480]."
    )).tag(config=True)
    memory_limit = Unicode("", help=(
        "Address-space limit of the sibling kernel, e.g. '4GB'; empty: no limit."
    )).tag(config=True)
    sandbox = Enum(["auto", "bwrap", "none"], default_value="auto", help=(
        "Sandbox of the sibling kernel: 'bwrap' runs it in bubblewrap (own PID namespace; "
        "the workspace read-write, the Python environment and system libraries read-only, "
        "a private /tmp, an empty home, no capabilities, a process limit; nothing it starts "
        "outlives the agent), and is an error where bubblewrap cannot run; 'auto' is 'bwrap' "
        "where it works, else 'none' with one line saying so; 'none' is a plain process of "
        "your account. Read when the kernel starts."
    )).tag(config=True)
    sandbox_network = Bool(False, help=(
        "Give the sandboxed sibling (and the shell tool) outside network access (pip install, "
        "downloads) through slirp4netns, a user-mode network stack: the host's loopback (your "
        "kernel, Jupyter Server, local model servers, databases) and abstract unix sockets "
        "stay out of reach either way. Needs slirp4netns (apt install slirp4netns); where it "
        "is missing, the kernel does not start and says how to get it: there is no fallback "
        "to the host's network. False: an empty network namespace. Read when the kernel starts."
    )).tag(config=True)
    sandbox_env = List(Unicode(), help=(
        "Names of environment variables of yours the sandbox gets, beyond its fixed list "
        "(PATH, LANG/LC_*, TERM, TZ, the Python ones, thread counts); nothing else of your "
        "environment enters. E.g. ['HF_HOME', 'PIP_INDEX_URL']. Read when the kernel starts."
    )).tag(config=True)
    apply_changes = Enum(["data", "ask", "never"], default_value="data", help=(
        "What happens to files the model's code writes in the sandbox, which sees your "
        "folder copy-on-write: 'data' applies data files to your folder after each call and "
        "asks for anything that can run code later (Python files and what they shadow, "
        ".pyc, .pth, native modules, launchers, conftest.py, setup.py/pyproject.toml, "
        "Makefiles, executables, symlinks, .git/, .ipyagent/, AGENTS.md, mcp.json, skills, "
        "shell rc files); 'ask' asks for every change; 'never' applies nothing (the sandbox "
        "keeps its own view). Not asked where nobody can answer: pending changes wait for "
        "%agent apply. Every applied set can be undone (%agent undo)."
    )).tag(config=True)
    sandbox_paths = Dict(value_trait=Unicode(), help=(
        "More directories for the sandboxed sibling: path -> 'ro' or 'rw', e.g. "
        "{'~/data': 'ro', '/scratch': 'rw'}. A path that does not exist is an error."
    )).tag(config=True)
    share_namespace = Enum(["describe", "names", "off"], default_value="describe", help=(
        "What the model is told about your notebook's variables before a %agent run: "
        "'describe' their names, types and shapes (scalars and short strings by value), "
        "'names' the names only, 'off' nothing. Private names, modules and anything whose "
        "name or value looks secret are left out; values are never copied by this."
    )).tag(config=True)
    copy_limit = Unicode("50MB", help=(
        "Under approval 'auto', a variable the agent's code needs from your kernel (a "
        "NameError) is copied into the sibling without asking up to this pickled size; "
        "larger ones ask. Under 'ask' every copy asks; under 'deny' none happens."
    )).tag(config=True)
    autosave = Unicode("", help=(
        "Rewrite the transcript notebook here (atomically) after every step; a path ending "
        "in '/' is a directory with one run-<date>.ipynb per conversation. Empty: off."
    )).tag(config=True)
    autosave_keep = Int(50, min=0, help=(
        "When Agent.autosave is a directory: keep only the newest this many run-<date>.ipynb "
        "files there (older ones are deleted when a new conversation starts). 0: keep all."
    )).tag(config=True)
    prices = Dict(help=(
        "Model prices for the footer's cost line, US dollars per million tokens: "
        "{'my-model': {'input': 0.5, 'output': 1.5, 'cached_input': 0.05, 'cache_write': 0.6}} "
        "(the last two optional); None for a model turns its cost line off. Merged over a "
        "built-in table of OpenAI's and Anthropic's list prices, dated (ipyagent.models.prices"
        ".PRICES_AS_OF): prices change, check yours. No cost line for an unknown model or a "
        "server on this machine or the local network."
    )).tag(config=True)
    cache = Enum(["off", "on", "replay-only"], default_value="off", help=(
        "Response cache: 'on' answers a request seen before from disk (no model request); "
        "'replay-only' also never calls the model and fails on a miss."
    )).tag(config=True)
    extra_body = Dict(help=(
        "Extra fields merged into every request body, for what a provider offers beyond "
        "the common settings, e.g. {'options': {'num_ctx': 16384}} (Ollama's context size), "
        "{'thinking': {'type': 'enabled', 'budget_tokens': 2048}} (Anthropic) or "
        "{'reasoning': {'effort': 'low'}} (OpenAI)."
    )).tag(config=True)
    cache_path = Unicode("", help=(
        "SQLite file of the response cache; empty: .ipyagent/cache.sqlite in the working "
        "directory."
    )).tag(config=True)

    memory = Enum(["off", "on"], default_value="off", help=(
        "Long-term memory: 'on' keeps notes in SQLite (what you tell it with %agent remember "
        "or agent.remember(), what each run found) and, before each task, gives the model "
        "the few notes relevant to it as a labelled block ('Notes from earlier sessions — "
        "may be outdated'), shown collapsed in the cell and recorded in the transcript. "
        "'off': nothing is read or written."
    )).tag(config=True)
    memory_path = Unicode("", help=(
        "SQLite file of the project's notes; empty: .ipyagent/memory.sqlite in the current "
        "directory (beside the notebook; not Agent.cwd, which a --rerun moves)."
    )).tag(config=True)
    memory_global_path = Unicode("", help=(
        "SQLite file of the notes kept for every project (%agent remember --global); empty: "
        "~/.ipyagent/memory.sqlite. Searched together with memory_path."
    )).tag(config=True)
    memory_write = Enum(["outcome", "model", "off"], default_value="outcome", help=(
        "What a run that ended 'done' leaves as a note: 'outcome' a deterministic summary "
        "(task, the answer's first sentence, files and variables made, failures with their "
        "error line; no model call), 'model' the same facts condensed by the model in one "
        "extra request, 'off' nothing (facts you give and the remember tool still are kept)."
    )).tag(config=True)
    memory_max_entries = Int(1000, min=0, help=(
        "Notes kept per memory file; past it the least valuable go (oldest last use first, "
        "each use counting a week younger, your own notes a month). 0: no limit."
    )).tag(config=True)
    memory_top_k = Int(5, min=0, help="Notes at most given to the model before a task.").tag(config=True)
    memory_min_relevance = Float(0.15, min=0.0, max=1.0, help=(
        "Relevance floor (0..1: how much of the task's and the note's distinctive words they "
        "share, weighted by rarity) below which a note is not given to the model."
    )).tag(config=True)
    memory_retriever = Enum(["lexical", "embedding"], default_value="lexical", help=(
        "How notes are found: 'lexical' is SQLite FTS5 with a BM25-style score weighted by "
        "recency and use (offline, no model download); 'embedding' compares vectors from "
        "Agent.memory_embedding_model by cosine similarity (same weighting), and falls back "
        "to 'lexical' with one line when they cannot be had."
    )).tag(config=True)
    memory_embedding_model = Unicode("", help=(
        "For memory_retriever = 'embedding': a model of the endpoint's OpenAI-compatible "
        "/embeddings (e.g. 'nomic-embed-text' on Ollama), or 'fastembed:<model>' to run "
        "fastembed here (pip install fastembed; it downloads the model once)."
    )).tag(config=True)
    memory_min_similarity = Float(0.5, min=-1.0, max=1.0, help=(
        "For memory_retriever = 'embedding': the cosine similarity below which a note is "
        "not given to the model."
    )).tag(config=True)
    memory_tool = Bool(True, help=(
        "While memory is on, offer the model a `remember` tool to keep a fact mid-run "
        "(approved like any tool call; the project's notes only)."
    )).tag(config=True)

    workspace = Unicode("", help=(
        "Directory the file tools (read_file, write_file, list_files, edit_file) are confined "
        "to; empty: Agent.cwd, else the current directory. Absolute paths outside it, '..' "
        "and symlinks that lead out are refused. 'remote': the root directory of the Jupyter "
        "Server at Agent.kernel_url, through its contents API (not on a bare Kernel Gateway)."
    )).tag(config=True)
    file_tools = Bool(True, help=(
        "Offer the workspace file tools read_file, write_file, list_files and edit_file, each "
        "approved like any tool (Agent.allow = ['read_file', 'list_files'] skips asking for the "
        "read-only ones). Read when the agent is created."
    )).tag(config=True)
    preview_files = Union([Bool(), Enum(["auto"])], default_value="auto", help=(
        "Before a task's first request, put a short preview of the workspace files the task "
        "names (a table's first lines, separator, columns and types; a JSON outline; a text "
        "file's first lines) into the context, marked as file content. 'auto': at once for "
        "a model on this machine (the demo model, a loopback base_url); for a remote "
        "endpoint only after you said yes once (asked under approval 'ask'; under 'auto' or "
        "'deny', or with nobody to ask, nothing is sent). True: always. False: never. "
        "Dotfiles, key files and paths outside the workspace are never previewed."
    )).tag(config=True)
    preview_max_files = Int(3, min=0, max=10, help=(
        "Files previewed for one task at most (Agent.preview_files); each is read up to "
        "64 KiB and shown in up to 1,500 characters."
    )).tag(config=True)
    web_tools = Bool(False, help=(
        "Offer the web tools web_search (titles, URLs and snippets) and fetch_url (a page's "
        "readable text), each approved like any tool. Setting Agent.search_url turns them on "
        "too. What they return is untrusted text from the web."
    )).tag(config=True)
    search_url = Unicode("", help=(
        "Base URL of a SearXNG instance whose JSON API web_search uses (GET "
        "{search_url}/search?q=...&format=json; its settings.yml must list json in "
        "search.formats), e.g. http://127.0.0.1:8888. Setting it turns the web tools on. "
        "Empty: DuckDuckGo's keyless HTML page, once Agent.web_tools is True."
    )).tag(config=True)
    search_backend = Enum(["auto", "searxng", "duckduckgo"], default_value="auto", help=(
        "Which search engine web_search asks: 'searxng' (Agent.search_url), 'duckduckgo' "
        "(its HTML endpoint, no key; may rate-limit), 'auto': SearXNG when search_url is "
        "set, else DuckDuckGo."
    )).tag(config=True)
    web_timeout = Float(15.0, help=(
        "Seconds a web request may wait to connect and between bytes of the answer (each "
        "redirect hop too); a whole web call is also bounded by Agent.tool_timeout. 0: no "
        "limit."
    )).tag(config=True)
    web_max_bytes = Int(2_000_000, help=(
        "Bytes of one page fetch_url reads; the rest is not read and the answer says it was "
        "cut. 0: no limit."
    )).tag(config=True)
    web_allow_private = Bool(False, help=(
        "Let fetch_url reach loopback, link-local (the cloud metadata service), private and "
        "unique-local addresses. False: it reaches only public addresses, checked after DNS "
        "resolution on every redirect hop."
    )).tag(config=True)

    @validate("search_url")
    def _check_search_url(self, proposal: Any) -> str:
        value = str(proposal["value"]).strip()
        if not value:
            return ""
        problem = base_url_problem(value)
        if problem:
            raise TraitError(f"Agent.search_url {problem}")
        return value

    @validate("web_timeout", "web_max_bytes")
    def _check_web_limits(self, proposal: Any) -> Any:
        value = proposal["value"]
        if not value >= 0:
            raise TraitError(f"Agent.{proposal['trait'].name} must be >= 0 (0: no limit), not {value}")
        return value

    mcp_servers = Dict(help=(
        "MCP servers whose tools are offered as server__tool: name -> {command, args, env} "
        "(stdio) or {url, headers} (streamable HTTP), the value of the usual mcpServers key "
        "(a dict holding mcpServers is accepted too); these start without asking. "
        ".ipyagent/mcp.json or mcp.json beside the notebook adds servers that start only once "
        "you agreed to that file as it is (asked in a run, or %agent mcp trust). Needs pip "
        "install 'ipyagent[mcp]'."
    )).tag(config=True)
    mcp_files = Bool(True, help=(
        "Also read MCP servers from .ipyagent/mcp.json or mcp.json beside the notebook; "
        "False uses Agent.mcp_servers only (a directory you do not trust, a replay)."
    )).tag(config=True)
    personas = Dict(help=(
        "Extra personas: name -> {system_prompt, tools, description, any Agent setting} or a "
        "prompt string. Also read from ~/.ipyagent/agents/*.md (same power) and from "
        ".ipyagent/agents/*.md beside the notebook, which may set only the prompt, "
        "description, tools and temperature."
    )).tag(config=True)
    personas_override_builtin = Bool(False, help=(
        "Let a persona file in .ipyagent/agents/ beside the notebook replace the built-in "
        "persona of its name (coder, data-analyst, reviewer). False: the built-in wins and "
        "one line names the ignored file. Such a file still cannot change trust settings."
    )).tag(config=True)
    persona = Unicode(None, allow_none=True, help=(
        "Active persona: its system prompt, tools and settings apply while it is set "
        "(built-in: coder, data-analyst, reviewer; %agent personas lists all). None: none."
    )).tag(config=True)
    agents_md = Bool(True, help=(
        "Add the nearest AGENTS.md (in the notebook's directory, or a parent up to the "
        "repository root) to the system prompt."
    )).tag(config=True)
    skills_enabled = Bool(True, help=(
        "Offer skills: folders with a SKILL.md of instructions, found in .ipyagent/skills/ "
        "beside the notebook, Agent.skills_paths, ~/.ipyagent/skills/ and the built-ins "
        "(plotting, data-cleaning). Each one's name and description go into the system "
        "prompt, and the load_skill tool returns its instructions. Skills add instructions "
        "only: they cannot change any setting."
    )).tag(config=True)
    skills_paths = List(Unicode(), help=(
        "More folders holding skills (each skill a folder with a SKILL.md), searched after "
        ".ipyagent/skills/ beside the notebook and before ~/.ipyagent/skills/; a relative "
        "path is relative to the notebook's directory."
    )).tag(config=True)
    skills_max_chars = Int(20_000, min=1000, help=(
        "Characters of a SKILL.md's instructions given to the model when it is loaded; a "
        "longer one is cut with a note saying so."
    )).tag(config=True)

    @validate("kernel_url")
    def _check_kernel_url(self, proposal: Any) -> str:
        if not proposal["value"]:
            return ""
        from ..kernel._rest import check_url

        try:
            return check_url(proposal["value"])
        except ValueError as exc:
            raise TraitError(f"Agent.kernel_url: {exc}") from None

    @validate("sandbox_paths")
    def _check_sandbox_paths(self, proposal: Any) -> Any:
        from ..kernel.sandbox import check_paths

        try:
            check_paths(proposal["value"])
        except ValueError as exc:
            raise TraitError(str(exc)) from None
        return proposal["value"]

    @validate("persona")
    def _check_persona(self, proposal: Any) -> str | None:
        if not proposal["value"]:
            return None
        from ..instructions.personas import PersonaError, check

        try:
            return check(self, proposal["value"]).name
        except PersonaError as exc:
            raise TraitError(str(exc)) from None

    @validate("max_steps")
    def _check_max_steps(self, proposal: Any) -> int:
        if proposal["value"] < 1:
            raise TraitError(f"Agent.max_steps must be at least 1, not {proposal['value']}")
        return proposal["value"]

    @validate("base_url")
    def _check_base_url(self, proposal: Any) -> str:
        value = str(proposal["value"]).strip()
        if not value:
            return ""
        problem = base_url_problem(value)
        if problem:
            raise TraitError(f"Agent.base_url {problem}")
        return value

    @validate("circuit_breaker", "max_tokens", "max_retries", "context_window", "tool_output_limit",
              "output_lines")
    def _check_non_negative(self, proposal: Any) -> int:
        if proposal["value"] < 0:
            raise TraitError(f"Agent.{proposal['trait'].name} must be >= 0, not {proposal['value']}")
        return proposal["value"]

    @validate("compact_threshold", "compact_keep_recent", "compact_target")
    def _check_fraction(self, proposal: Any) -> float:
        if not 0 < proposal["value"] <= 1:
            raise TraitError(f"Agent.{proposal['trait'].name} must be in (0, 1], "
                             f"not {proposal['value']}")
        return proposal["value"]

    @validate("prices")
    def _check_prices(self, proposal: Any) -> dict[str, Any]:
        from ..models.prices import parse_prices

        try:
            parse_prices(proposal["value"])
        except ValueError as exc:
            raise TraitError(str(exc)) from None
        return dict(proposal["value"])

    @property
    def price(self) -> Any:
        """The ``Price`` of this model at this endpoint, or None (unknown, or local: free)."""
        from ..models.prices import parse_prices, price_for

        if self.model == "demo" or is_local_host(urlsplit(self.endpoint.base_url).hostname or ""):
            return None
        return price_for(self.model, parse_prices(self.prices))

    @validate("temperature")
    def _check_temperature(self, proposal: Any) -> float | None:
        value = proposal["value"]
        if value is None or value == "":
            return None
        try:
            return float(value)
        except ValueError:
            raise TraitError(f"Agent.temperature must be a number, not {value!r}") from None

    @property
    def endpoint(self) -> Endpoint:
        """Where requests go: ``provider`` preset + explicit settings (explicit ones win)."""
        # A setting counts as explicit when it differs from its default.
        key_env = self.api_key_env
        default_key_env = type(self).class_traits()["api_key_env"].default_value
        return resolve(self.provider, api=self.api, base_url=self.base_url,
                       key_env=None if key_env == default_key_env else key_env)

    @property
    def model_timeouts(self) -> Timeouts:
        """The time limits of a model request: the settings, with None filled in for the
        endpoint (a server on this machine or the local network gets longer ones)."""
        local = is_local_host(urlsplit(self.endpoint.base_url).hostname or "")
        first, total = (1800.0, 3600.0) if local else (600.0, 1800.0)
        idle = self.timeout if self.idle_timeout is None else self.idle_timeout
        return Timeouts(first_token=first if self.first_token_timeout is None else self.first_token_timeout,
                        idle=idle,
                        total=total if self.request_timeout is None else self.request_timeout)

    @property
    def workspace_path(self) -> Path:
        """The directory the file tools are confined to."""
        local = "" if self.workspace == "remote" else self.workspace  # "remote": the server's files
        return Path(local or self.cwd or os.getcwd()).resolve()


def base_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as an endpoint, in words; None when it can be used."""
    from urllib.parse import urlsplit

    from .._util.text import without_credentials

    shown = without_credentials(url)  # a user:password or a ?key= is never repeated
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("http", "https"):
        guess = shown.split("://", 1)[-1]
        return (f"must start with http:// or https://, not {shown!r} "
                f"(did you mean 'http://{guess}'?)")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError as exc:
        return f"is not a valid URL: {shown!r} ({without_credentials(str(exc))})"
    if not parts.hostname or any(c.isspace() for c in url):
        return f"is not a valid URL: {shown!r} (no host, or a space in it)"
    return None
