"""``Agent``: the tool-calling loop, configured with traitlets.

One step = one model request → append the assistant's items → for each tool call:
approve → execute → append its result. ``run`` repeats steps until a stop reason:
``done`` (a turn without tool calls), ``max_steps``, ``circuit_breaker`` (the same tool
failed N times in a row), ``budget`` (``max_tokens`` spent), ``denied`` (a denial that
stops the run) or ``error`` (the endpoint failed after retries).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, MutableMapping

from traitlets import TraitError

from .._util import eventloop as _eventloop
from ..context.audit import Audit
from ..context.buffer import Context
from ..context.events import (
    Event,
    Notice,
    RunFinished,
    RunResult,
    RunStarted,
    Step,
    StepFinished,
    Usage,
)
from ..context.evidence import run_items
from ..context.items import Message, ToolCall, ToolResult
from ..context.steps import count_steps
from ..errors import ApprovalError, ConfigError
from ..instructions.personas import PersonaState
from ..instructions.skills import TOOL_NAME, Found, Skill, SkillTable, load_skill_tool, skills_of
from ..memory import Memory, remember_tool
from ..memory.run import recall, write_outcome
from ..models.base import Model, new_cache_key
from ..models.profiles.choice import ProfileChoice
from ..models.retry import safe_url
from ..models.tool_mode import ToolModeState, Wire
from ..tools.base import Tool, Toolbox
from ..tools.python import python_description, python_tool
from ..tools.shell import shell_description, shell_status, shell_tool
from ..trust.provenance import RanHere
from .approval import ApprovalPolicy, Approver, CallbackApprover, Mode
from .compaction import bind_settings
from .previews import preview_for_task
from .resources import Resources
from .settings import DEFAULT_SYSTEM_PROMPT, AgentSettings
from .step import CircuitBreaker, emit, limit_message, run_step

if TYPE_CHECKING:
    from pathlib import Path

    from ..kernel.base import Kernel
    from ..memory.store import Added
    from ..tools.mcp.client import MCPManager
    from . import plugs
    from .plugs import Autosaver, Rebuild, ReplayReport, RewindPlan, RewindReport, Transcript

    Branches = plugs.Branches["Agent"]  # this agent's branches (the docs say ``Branches``)

__all__ = ["Agent", "DEFAULT_SYSTEM_PROMPT"]

Listener = Callable[[Event], Any]


class Agent(AgentSettings):
    """An LLM agent whose Python runs in an isolated sibling kernel.

    It *is* its settings (traitlets need the class: ``%config Agent.model``) and *has* its
    resources (``agent.resources``: client, kernel, MCP servers, AGENTS.md), its tools,
    its context and its approval policy; ``ipyagent.engine.step`` runs each step.
    """

    def __init__(self, *, client: Model | None = None, http_client: Any = None,
                 tools: Iterable[Tool | Callable[..., Any]] = (),
                 approval_hook: Approver | Callable[..., Any] | None = None,
                 start_kernel: bool = True, **kwargs: Any) -> None:
        """Settings as keyword arguments; ``client`` injects a model client (tests, custom APIs);
        ``start_kernel=False``: the sibling starts at its first use, not in the background now
        (a branch that may never run)."""
        super().__init__(**kwargs)
        self.resources = Resources(self, client, http_client)
        self.observe(self._settings_changed, names=["model", "base_url", "api_key_env", "provider",
                                                     "api", "timeout", "first_token_timeout", "idle_timeout",
                                                     "request_timeout", "max_retries", "extra_body"])
        self.persona_state = PersonaState()  # the persona in effect and what it replaced
        self._agents_md_noted: Path | None = None
        self._demo_noted = ""  # the endpoint the demo model was said to ignore
        if self.persona:
            from ..instructions.personas import switch

            switch(self, self.persona)
        self.context = Context(system=self._effective_system())
        # One per conversation: a server that routes by it (OpenAI's prompt_cache_key) sends
        # its requests to the machine that holds their cached prefix. Random: it says nothing.
        self.prompt_cache_key = new_cache_key()
        self.tools = Toolbox(tools)
        self.listeners: list[Listener] = []
        self.usage = Usage()
        self._policy = ApprovalPolicy(mode=self.approval, allow=list(self.allow))
        if approval_hook is not None:
            self.approval_hook = approval_hook
        self._breaker = CircuitBreaker()
        # Windows servers said they have, refusing a request as too long (``window_in_force``).
        self._server_windows: dict[tuple[str, str], int] = {}
        self._step_counter = 0
        # What ran here after a yes: a rewind re-runs it without asking (shared by branches).
        self.ran_here = RanHere()
        self.tree: Branches | None = None  # this conversation's branches (fork, rewind)
        self._autosaver: Autosaver | None = None  # made when Agent.autosave is first used
        # The user's variables a NameError may offer to copy (the magics set it); None: none.
        self.copy_source: Callable[[], Mapping[str, Any]] | None = None
        # Where a value the user takes from an offer (``offer_result``) goes: the user's
        # namespace (the magics set it); None: nothing can be offered.
        self.copy_target: MutableMapping[str, Any] | None = None
        self.observe(self._policy_changed, names=["approval", "allow"])
        self.observe(lambda _: self.resources.kernel_place_changed(),
                     names=["kernel_url", "kernel_token_env", "kernel_env"])
        self.observe(self._system_changed, names=["system_prompt"])
        self.observe(self._on_persona, names=["persona"])
        if self.python_tool:
            self.tools.add(python_tool(self))
        self._shell: Tool | None = None  # our shell tool, while it is on offer
        self._shell_changed(None)
        self.observe(self._shell_changed, names=["shell_tool", "sandbox", "python_tool", "kernel_url"])
        if start_kernel and (self.python_tool or "shell" in self.tools):
            self.resources.start_kernel_soon()
        self._describe_python(None)
        self.observe(self._describe_python, names=["kernel_url", "workspace"])
        if self.file_tools:
            from ..tools.files import file_tools

            # read_file may also open the files beside a SKILL.md (read-only, by path).
            for t in file_tools(lambda: self.workspace_path, lambda: self.tool_timeout,
                                self.resources.remote_files,
                                read_roots=lambda: skills_of(self).folders):
                self.tools.add(t)
        # Web search and fetch (off by default: nothing reaches the web unless set).
        self._web_made: list[Tool] = []  # the web tools made here (not a user's own)
        self._web_settings_changed(None)
        self.observe(self._web_settings_changed, names=["web_tools", "search_url"])
        self._skill_tool = load_skill_tool(self)
        self._skill_problems_said: set[str] = set()
        self._skill_loads: list[str] = []  # what use_skill loaded, said at the next request
        self._skills_changed(None)
        self.observe(self._skills_changed, names=["skills_enabled", "skills_paths"])
        # Long-term memory (off by default: then nothing is read or written).
        self.memories = Memory(self)
        # File previews (``engine.previews``): a person's answer for each remote endpoint,
        # kept for this agent's life (a reset keeps it), and the endpoints said not asked.
        self.preview_consent: dict[str, bool] = {}
        self.preview_said: set[str] = set()
        self._memory_tool_wanted(None)
        self.observe(self._memory_tool_wanted, names=["memory", "memory_tool"])

    # -- resources -------------------------------------------------------------------
    @property
    def client(self) -> Model:
        """The model client for the current settings (built on first use)."""
        return self.resources.client

    @property
    def client_is_injected(self) -> bool:
        """True when the model client was given (``Agent(client=...)``), not built."""
        return self.resources.client_is_injected

    @property
    def kernel(self) -> Kernel:
        """The sibling kernel that runs the ``python`` tool (started in the background)."""
        return self.resources.kernel

    @property
    def kernel_if_started(self) -> Kernel | None:
        """The sibling kernel if one was made, else None (never starts one)."""
        return self.resources.kernel_if_started

    @property
    def mcp(self) -> MCPManager:
        """The MCP servers and their tools; ``agent.mcp.list()`` starts them (a table)."""
        return self.resources.mcp

    @property
    def agents_md_path(self) -> Path | None:
        """The AGENTS.md added to the system prompt (None: none found, or ``agents_md`` off)."""
        return self.resources.agents_md_path()

    def _settings_changed(self, change: Any) -> None:
        self.resources.settings_changed()

    def _describe_python(self, change: Any) -> None:
        """The python tool tells the model where its code runs (and where the file tools act)."""
        if "python" in self.tools:
            self.tools["python"].description = python_description(
                bool(self.kernel_url), self.workspace == "remote")

    # -- configuration ---------------------------------------------------------------
    @property
    def context(self) -> Context:
        """The conversation: list-like and editable; ``compaction_preview()`` uses this agent."""
        return self._context

    @context.setter
    def context(self, value: Context) -> None:
        bind_settings(value, self)  # the preview follows the current settings, even before a step
        self._context: Context = value
        # A new conversation starts native; a loaded one goes on in the mode it was in.
        self.tool_mode_state = ToolModeState.of(value)
        # The model profile in force (``engine.profile_use``): found before the next request.
        self.profile_choice: ProfileChoice | None = None

    @property
    def policy(self) -> ApprovalPolicy:
        """How each call is decided: ``approval``, ``allow`` and the tools approved "always"."""
        return self._policy

    @property
    def approval_hook(self) -> Approver | None:
        """The UI asked when ``approval == 'ask'``: an object with ``async decide(call)``."""
        return self._policy.ui

    @approval_hook.setter
    def approval_hook(self, hook: Approver | Callable[..., Any] | None) -> None:
        if hook is not None and not hasattr(hook, "decide"):
            hook = CallbackApprover(hook)  # a plain function
        self._policy.ui = hook  # type: ignore[assignment]

    def _policy_changed(self, change: Any) -> None:
        self._policy.mode = self.approval
        self._policy.allow = list(self.allow)

    def _system_changed(self, change: Any) -> None:
        self.context.system = self._effective_system()

    def _sandbox_mode(self) -> tuple[str, str]:
        """(the local sibling's sandbox mode, why) as ``Agent.sandbox`` resolves here."""
        from ..kernel.sandbox import resolve_mode

        try:
            return resolve_mode(self.sandbox)
        except RuntimeError as exc:  # sandbox='bwrap' where it cannot run: no kernel either
            return "none", str(exc)

    def shell_status(self) -> tuple[bool, str]:
        """(the ``shell`` tool is offered, one line saying so and why)."""
        if self.shell_tool == "off":
            return shell_status("off", False)
        if self.kernel_url:  # ipyagent's sandbox does not reach a remote kernel
            return shell_status(self.shell_tool, False, "the kernel is remote: ipyagent's sandbox "
                                "does not reach it", remote=True)
        mode, why = self._sandbox_mode()
        if mode == "bwrap" and self.shell_tool == "auto" and not self.python_tool:
            return shell_status("auto", False, "no sibling kernel: Agent.python_tool is False")
        return shell_status(self.shell_tool, mode == "bwrap", why)

    def _shell_changed(self, change: Any) -> None:
        # Only our own shell tool comes and goes: a tool of the user's called "shell" stays.
        ours = "shell" in self.tools and self.tools["shell"] is self._shell
        if self.shell_status()[0]:
            if "shell" not in self.tools:
                self._shell = self.tools.add(shell_tool(self))
            if self._shell is not None and self.tools["shell"] is self._shell:
                # It tells the model where commands run (the sandbox, the sibling without
                # one, or the remote server).
                self._shell.description = shell_description(bool(self.kernel_url),
                                                            self._sandbox_mode()[0] == "bwrap")
        elif ours:
            self.tools.remove("shell")

    def _memory_tool_wanted(self, change: Any) -> None:
        from ..memory import TOOL_NAME

        wanted = self.memory == "on" and self.memory_tool
        if wanted and TOOL_NAME not in self.tools:
            self.tools.add(remember_tool(lambda: self.memories))
        elif not wanted and TOOL_NAME in self.tools:
            self.tools.remove(TOOL_NAME)

    def _web_settings_changed(self, change: Any) -> None:
        from ..tools.web import WebConfig, web_tools
        from ..trust.secrets import key_envs, secret_values

        wanted = self.web_tools or bool(self.search_url)
        made = self._web_made
        if wanted and not made:
            def config() -> WebConfig:
                return WebConfig(search_url=self.search_url, search_backend=self.search_backend,
                                 timeout=self.web_timeout, max_bytes=self.web_max_bytes,
                                 allow_private=self.web_allow_private)

            for t in web_tools(config, lambda: self.tool_timeout,
                               secrets=lambda: secret_values(key_envs(self))):
                if t.name not in self.tools:  # a tool of that name given by the user stays
                    self.tools.add(t)
                    made.append(t)
        elif not wanted:
            for t in made:  # only the ones made here: a user's own web_search stays
                if t.name in self.tools and self.tools[t.name] is t:
                    self.tools.remove(t.name)
            made = []
        self._web_made = made

    def _on_persona(self, change: Any) -> None:
        from ..instructions.personas import PersonaError, switch

        try:
            switch(self, change["new"])
        except PersonaError as exc:  # its settings were rolled back; so is the name
            self.set_trait("persona", change["old"])
            raise TraitError(str(exc)) from None
        self._skills_changed({})  # its tools may offer load_skill, or not

    def _effective_system(self) -> str:
        """The system prompt sent: ``system_prompt`` (a persona's, if one is active) + AGENTS.md
        + the skills' names and descriptions (when ``load_skill`` is offered)."""
        from ..instructions.agents_md import with_agents_md
        from ..instructions.skills import with_skills

        return with_skills(with_agents_md(self.system_prompt, self.agents_md_path), self._listed_skills())

    def _listed_skills(self) -> Found:
        persona = self.persona_state.persona
        if persona is not None and not persona.offers(TOOL_NAME):
            return Found()  # the persona does not offer load_skill: no skills to list
        return skills_of(self)

    def _skills_changed(self, change: Any) -> None:
        from ..instructions.skills import with_skills, without_skills

        ours = TOOL_NAME in self.tools and self.tools[TOOL_NAME] is self._skill_tool
        if self.skills_enabled and TOOL_NAME not in self.tools:
            self.tools.add(self._skill_tool)  # a tool of that name the caller gave wins (a replay's)
        elif not self.skills_enabled and ours:
            self.tools.remove(TOOL_NAME)
        if change is not None:
            self.context.system = with_skills(without_skills(self.context.system), self._listed_skills())

    @property
    def skills(self) -> SkillTable:
        """The skills the model can load (a table: name, description, where from, what it hides)."""
        return SkillTable(skills_of(self), enabled=self.skills_enabled)

    def use_skill(self, name: str) -> Skill:
        """Load skill ``name`` up front: its instructions go into the conversation before the
        next task; ``SkillError`` (naming the close matches) when there is none."""
        from ..instructions.skills import preload

        skill = preload(self, name)
        where = "built-in" if skill.source == "built-in" else str(skill.folder)
        self._skill_loads.append(f"skill {skill.name} ({where}) loaded up front: its instructions come before this task")
        return skill

    def text_mode_offer(self, tools: list[Tool], system: str) -> tuple[list[Tool], str, list[str]]:
        """(tools, system prompt, names left out) of a request that carries its tools as text.

        Text mode is the small models' path, and each tool in the prompt costs them: measured
        on Qwen2.5-Coder-0.5B behind llama-cpp-python, ``2**100`` was solved with the shell
        tool or with the built-in skills listed, and not with both (it answered by echoing the
        number through ``shell``, then looped). So text mode leaves out what nobody asked for
        by name: ``shell`` under ``shell_tool = 'auto'``, and ``load_skill`` with its listing
        when the only skills found are the built-ins.
        """
        from ..instructions.skills import MARKER, without_skills

        dropped: list[str] = []
        if self.shell_tool == "auto" and any(t is self._shell for t in tools):
            dropped.append("shell")
        if any(t is self._skill_tool for t in tools) and (MARKER not in system or all(
                s.source == "built-in" for s in self._listed_skills().skills.values())):
            dropped.append(TOOL_NAME)
            system = without_skills(system)
        return [t for t in tools if t.name not in dropped], system, dropped

    def offered_tools(self) -> list[Tool]:
        """The tools offered to the model: every tool, or those the active persona offers."""
        persona = self.persona_state.persona
        return [t for t in self.tools if (persona is None or persona.offers(t.name)) and t.offered()]

    def asks_first(self, name: str) -> bool:
        """True when a call of tool ``name`` waits for the person's approval before it runs
        (a tool whose run is itself the question, ``offer_result``, does not)."""
        tool = self.tools[name] if name in self.tools else None
        return self.policy.asks(name) and not (tool is not None and tool.asks_user)

    def pending_notices(self) -> list[Notice]:
        """What to say before the next request, each once: a persona file's refused settings,
        the AGENTS.md now in the system prompt, a SKILL.md that cannot be read."""
        from ..instructions.agents_md import MARKER
        from ..instructions.personas import take_notes

        # What a persona file tried to set and was refused.
        notices = [Notice(note, "warning") for note in take_notes(self)]
        path = self.agents_md_path
        if path is not None and path != self._agents_md_noted and MARKER in self.context.system:
            self._agents_md_noted = path
            notices.append(Notice(f"AGENTS.md: {path} is in the system prompt", "info"))
        if TOOL_NAME in self.tools and self.tools[TOOL_NAME] is self._skill_tool:
            for problem in skills_of(self).problems:  # a SKILL.md that cannot be read, once each
                if problem not in self._skill_problems_said:
                    self._skill_problems_said.add(problem)
                    notices.append(Notice(f"skills: {problem}", "warning"))
        notices += [Notice(line, "info") for line in self._skill_loads]
        self._skill_loads.clear()
        # The demo model never calls an endpoint: a base_url set for it would silently do
        # nothing (and later read as "it goes on with demo at http://…").
        ignored = self.base_url or (self.provider or "")
        if (self.model == "demo" and ignored and ignored != self._demo_noted
                and not self.client_is_injected):
            self._demo_noted = ignored
            what = (f"Agent.base_url ({safe_url(self.base_url)})" if self.base_url
                    else f"Agent.provider ({self.provider})")
            notices.append(Notice(
                f"the demo model is built in and offline: {what} is not used; set "
                "Agent.model to a model that endpoint serves to use it", "info"))
        return notices

    # -- running ---------------------------------------------------------------------
    def run(self, task: str | None = None, *, on_event: Listener | None = None) -> RunResult:
        """Run until a stop reason (blocking). In a notebook prefer ``await agent.arun()``."""
        self._check_blocking_ok()
        return _eventloop.run_sync(self._arun(task, on_event))

    async def arun(self, task: str | None = None, *, on_event: Listener | None = None) -> RunResult:
        """Run until a stop reason, awaiting (approval clicks keep flowing meanwhile)."""
        return await _eventloop.run_async(self._arun(task, on_event))

    def step(self, task: str | None = None, *, on_event: Listener | None = None) -> Step:
        """Run one iteration (after adding ``task``, if given)."""
        self._check_blocking_ok()
        return _eventloop.run_sync(self._astep_public(task, on_event))

    async def astep(self, task: str | None = None, *, on_event: Listener | None = None) -> Step:
        """Run one iteration, awaiting."""
        return await _eventloop.run_async(self._astep_public(task, on_event))

    def _check_blocking_ok(self) -> None:
        # A blocking call inside a running loop (a notebook cell) stops the kernel from
        # reading widget clicks, so a button-based approval could never be answered.
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        ui = self._policy.ui
        if self.approval == "ask" and ui is not None and getattr(ui, "needs_event_loop", False):
            raise ApprovalError(
                "agent.run() would block this cell, so the Approve button could never be "
                "clicked: use `await agent.arun(...)` or the %agent magic instead")

    def pending(self) -> bool:
        """True when the context ends with something the model has not answered yet."""
        for item in reversed(self.context):
            if isinstance(item, (ToolResult,)):
                return True
            if isinstance(item, Message):
                return item.role == "user"
            if isinstance(item, ToolCall):
                return False  # an unanswered call: the context is mid-step
        return False

    async def _begin(self, task: str | None) -> list[Event]:
        """Add the task (after the notes memory finds for it and the previews of the files
        it names); what to tell the listeners."""
        if self.resources.closed:
            raise ConfigError("this agent is closed; create a new one")
        said: list[Event] = []
        if task is not None and task.strip():
            said = recall(self, task)  # the notes go just before the task
            said += await preview_for_task(self, task)  # then what its files look like
            self.context.add_user(task)
        elif not self.pending():
            raise ConfigError("nothing to continue: give a task")
        return said

    # -- long-term memory ------------------------------------------------------------
    def remember(self, text: str, *, scope: str = "project") -> Added:
        """Keep a note for later sessions (``scope="global"``: for every project).

        Raises ``MemoryRefused`` (one line) when memory is off, the text is empty or it
        holds a secret's value."""
        return self.memories.remember(text, scope=scope, source="user")

    async def _arun(self, task: str | None, on_event: Listener | None) -> RunResult:
        first = len(self.context)
        said = await self._begin(task)
        started = time.perf_counter()
        listeners = self._listeners(on_event)
        self._emit(listeners, RunStarted(task))
        self._say(listeners, said, on_event)
        steps: list[Step] = []
        usage = Usage()
        self._breaker.reset()
        while True:
            step = await self._astep(listeners, steps_so_far=len(steps))
            steps.append(step)
            usage.add(step.usage)
            if step.stop_reason:
                break
        stop, why = step.stop_reason or "done", step.error
        if stop == "max_steps" and self._answers_at_limit():
            # Measured at 1.5B: the call at the last step printed the answer (2026-07-02;
            # "total_value = 18.0") and the run ended with none; smolagents asks likewise.
            self._emit(listeners, Notice(
                f"max_steps={self.max_steps} reached after tool calls: asked the model for its "
                "answer from what they returned (Agent.answer_at_limit)", "info"))
            asked = limit_message(self.max_steps, run_items(list(self.context))[0])
            self.context.append(asked)
            step = await self._astep(listeners, steps_so_far=len(steps), answer_only=True)
            steps.append(step)
            usage.add(step.usage)
            if step.stop_reason == "max_steps":
                why = step.error
            else:  # the request failed (an error, the budget): the run ended at the limit
                if len(self.context) and self.context[-1] is asked:
                    del self.context[-1]  # not left for a later run to read as its last word
                why = f"{why}; asking for the answer failed: {step.error or step.stop_reason}"
        result = RunResult(
            stop_reason=stop, text=_final_text(steps), steps=steps,
            usage=usage, duration=time.perf_counter() - started, error=why)
        self._price(result)
        said = await write_outcome(self, task, first, result)
        self._say(listeners, [*said, *(Notice(n, "warning") for n in self.memories.take_notices())],
                  on_event)
        result.duration = time.perf_counter() - started
        self._emit(listeners, RunFinished(result))
        return result

    def _price(self, result: RunResult) -> None:
        """The run's cost at this model's known price (none for unknown or local models)."""
        from ..models.prices import cost_of

        price = self.price
        if price is None or not result.usage.requests:
            return
        u = result.usage
        result.cost = cost_of(price, u.input, u.output, u.cache_read, u.cache_write)
        result.cost_basis = f"{self.model} at {price.source}"

    async def _astep_public(self, task: str | None, on_event: Listener | None) -> Step:
        said = await self._begin(task)
        listeners = self._listeners(on_event)
        self._say(listeners, said, on_event)
        return await self._astep(listeners, steps_so_far=0)

    def _say(self, listeners: list[Listener], events: list[Event], on_event: Listener | None) -> None:
        """Tell the listeners; a warning nobody hears (a plain script) is a Python warning."""
        for event in events:
            self._emit(listeners, event)
            if isinstance(event, Notice) and event.level == "warning" \
                    and not self.listeners and on_event is None:
                import warnings

                warnings.warn(event.message, RuntimeWarning, stacklevel=3)

    def _listeners(self, extra: Listener | None) -> list[Listener]:
        """Who hears a run: autosave first (a step is saved before anyone hears it finished),
        then ``agent.listeners``, then ``on_event``."""
        others = [*self.listeners, *([extra] if extra else [])]
        return [self._autosave_listener(others), *others]

    def _emit(self, listeners: list[Listener], event: Event) -> None:
        emit(listeners, event, self.log)

    def _answers_at_limit(self) -> bool:
        """``answer_at_limit`` applies: the run's last items are results the model has not
        read (not a reply cut at the output limit, nor a step that failed)."""
        last = self.context[-1] if len(self.context) else None
        return self.answer_at_limit and isinstance(last, ToolResult)

    async def _astep(self, listeners: list[Listener], steps_so_far: int,
                     answer_only: bool = False) -> Step:
        """One iteration (``ipyagent.engine.step`` runs it). Never raises for model/tool failures."""
        self._step_counter += 1
        step = await run_step(self, self._step_counter, listeners, steps_so_far=steps_so_far,
                              breaker=self._breaker, answer_only=answer_only)
        self.ran_here.record_step(step.tool_calls, step.results)
        return step

    def _autosave_listener(self, others: list[Listener]) -> Listener:
        """Autosave as a ``StepFinished`` listener; what it says goes to ``others``.

        Where it saves is said at the end of a run (before its footer), not after the
        first step, where it landed between the model's words and its next call; a
        failure is said at once. A single step (``agent.step``) is its own end.
        """
        held: list[Notice] = []
        in_run = False

        def autosave(event: Event) -> None:
            nonlocal in_run
            if isinstance(event, RunStarted):
                in_run = True
            elif isinstance(event, RunFinished):
                in_run = False
                for kept in held:
                    self._emit(others, kept)
                held.clear()
            if not (isinstance(event, StepFinished) and self.autosave):
                return
            if self._autosaver is None:
                from .plugs import Autosave

                self._autosaver = Autosave(self)
            notice = self._autosaver.save()
            if notice is not None and in_run and notice.level == "info":
                held.append(notice)
            elif notice is not None:
                self._emit(others, notice)
                if not others and notice.level == "warning":
                    # A plain script shows no notices: lost steps must not be silent.
                    import warnings

                    warnings.warn(notice.message, RuntimeWarning, stacklevel=2)

        return autosave

    def audit(self) -> Audit:
        """Every tool call of the conversation and how it was decided (who, when, edits)."""
        return Audit.of(self.context)

    # -- transcripts -----------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the conversation as a transcript notebook; returns its Path. A conversation
        with branches writes each (``STEM.NAME.ipynb``) and their index (``STEM.branches.ipynb``)
        beside it."""
        from .plugs import save

        if self.tree is not None and len(self.tree) > 1:
            from .plugs import save_tree

            return save_tree(self, path)
        return save(self, path)

    @classmethod
    def from_transcript(cls, path: str | os.PathLike[str], *, rerun: bool = False,
                        **settings: Any) -> Agent:
        """A new agent continuing a saved transcript (``settings`` override recorded ones).

        ``rerun=True`` also re-runs its python calls so the sibling has their variables,
        each approved under the new agent's ``approval`` (see ``load``), in ``cwd=`` if
        given, else in a fresh empty temporary directory.
        """
        from .plugs import from_transcript, read

        transcript = read(path)
        fresh = rerun and "cwd" not in settings
        if rerun:
            transcript.verify_cells()  # run only the code its cells show
            if fresh:
                settings["cwd"] = _fresh_dir()
        agent = from_transcript(cls, transcript, **settings)
        agent.renumber_steps()
        if rerun:
            try:
                agent._check_blocking_ok()
                report = agent.rebuild_kernel()
            except BaseException:
                agent.close()
                raise
            report.cwd, report.fresh = agent.cwd, fresh
            transcript.rebuild = report
        return agent

    def load(self, path: str | os.PathLike[str], *, rerun: bool = False,
             approval: Mode | None = None, cwd: str | os.PathLike[str] | None = None,
             on_event: Listener | None = None) -> Transcript:
        """Replace the conversation with a transcript's (this agent's settings are kept).

        A running sibling is restarted: the old conversation's variables must not pass
        for this one's. ``rerun=True`` then re-runs its python calls and re-creates its
        files (``transcript.rebuild`` says what ran), each approved first as a live call
        is (``approval``, default ``self.approval``; a denial stops the rebuild), in a new
        sibling whose working directory is ``cwd`` — by default a fresh empty temporary
        directory, kept as ``Agent.cwd`` for the rest of the conversation.
        """
        if rerun and (approval or self.approval) == "ask":
            self._check_blocking_ok()
        return _eventloop.run_sync(self.aload(path, rerun=rerun, approval=approval, cwd=cwd,
                                         on_event=on_event))

    async def aload(self, path: str | os.PathLike[str], *, rerun: bool = False,
                    approval: Mode | None = None, cwd: str | os.PathLike[str] | None = None,
                    on_event: Listener | None = None) -> Transcript:
        """Awaitable ``load`` (in a notebook, approval clicks need this or ``%agent load``)."""
        from .plugs import load_into, load_tree, read, read_index

        index = read_index(path)  # a conversation's branches: all of them come back
        if index:
            path = next(b["file"] for b in index["branches"] if b["name"] == index["current"])
        transcript = read(path)
        where = os.path.abspath(os.path.expanduser(os.fspath(cwd))) if cwd is not None else ""
        if rerun:
            transcript.verify_cells()
            if cwd is not None and not os.path.isdir(where):
                raise ConfigError(f"--rerun: the working directory {where} does not exist")
        if index:
            transcript = load_tree(self, index)
        else:
            load_into(self, transcript)
        self._history_replaced()
        if not rerun:
            kernel = self.kernel_if_started
            if kernel is not None and kernel.is_alive():
                await kernel.restart_async()
            return transcript
        where = where or _fresh_dir()
        await self.resources.move_kernel(where)
        report = await _eventloop.run_async(self._arebuild(approval, on_event, where if cwd is None else None))
        report.cwd, report.fresh = where, cwd is None
        transcript.rebuild = report
        return transcript

    def rebuild_kernel(self, *, restart: bool = False, approval: Mode | None = None,
                       on_event: Listener | None = None) -> Rebuild:
        """Re-run every python call of the conversation that ran, in order -> ``Rebuild``.

        Use after loading a transcript: its variables then exist again in the sibling.
        Each step is approved first (``approval``, default ``self.approval``); a denial
        stops it. ``restart=True`` restarts the sibling first, so nothing stale is left over.
        """
        return _eventloop.run_sync(self.arebuild_kernel(restart=restart, approval=approval,
                                                   on_event=on_event))

    async def arebuild_kernel(self, *, restart: bool = False, approval: Mode | None = None,
                              on_event: Listener | None = None) -> Rebuild:
        """Awaitable ``rebuild_kernel``."""
        kernel = self.kernel_if_started
        if restart and kernel is not None:
            await kernel.restart_async()
        return await _eventloop.run_async(self._arebuild(approval, on_event, None))

    def _history_replaced(self) -> None:
        """The conversation was replaced: steps numbered after it, no branch re-run pending."""
        from .plugs import cancel_deferred

        self.renumber_steps()
        cancel_deferred(self)

    async def _arebuild(self, approval: Mode | None, on_event: Listener | None,
                        root: str | None) -> Rebuild:
        from .plugs import arebuild, cancel_deferred

        cancel_deferred(self)  # re-run now: a branch's first call need not do it again
        return await arebuild(self, approval=approval, on_event=on_event, root=root)

    def replay(self, path: str | os.PathLike[str], **settings: Any) -> ReplayReport:
        """Re-run a transcript's recorded turns in a fresh kernel -> ReplayReport.

        Its calls are approved as this agent's would be; it runs in a new empty temporary
        directory unless ``cwd=`` says where."""
        from .plugs import replay

        return replay(path, **self._replay_settings(settings))

    async def areplay(self, path: str | os.PathLike[str], **settings: Any) -> ReplayReport:
        """Awaitable ``replay`` (the notebook stays responsive meanwhile)."""
        from .plugs import areplay

        return await _eventloop.run_async(areplay(path, **self._replay_settings(settings)))

    def _replay_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        """This agent's approval and limits for a replay (``settings`` win)."""
        from .settings import LIMITS

        return {"approval": self.approval, "allow": list(self.allow),
                "approval_hook": self.approval_hook,
                "limits": {k: getattr(self, k) for k in LIMITS}, **settings}

    # -- rewind and branches -----------------------------------------------------------
    def rewind(self, n: int, *, keep: bool = True, approval: Mode | None = None,
               on_event: Listener | None = None) -> RewindReport:
        """Go back to step ``n``: keep steps 1..n, drop the rest -> ``RewindReport``.

        The sibling kernel goes back too (a fresh one re-runs the kept python calls; shell,
        web and MCP results stand as recorded), and the file changes applied after step
        ``n`` are undone (a file you edited since is left, and listed). ``keep=False``: the
        dropped steps are not kept as a branch. Code that did not run in this session (a
        loaded transcript's) is approved first (``approval``, default ``self.approval``).
        """
        self._check_blocking_ok()
        return _eventloop.run_sync(self.arewind(n, keep=keep, approval=approval, on_event=on_event))

    async def arewind(self, n: int, *, keep: bool = True, approval: Mode | None = None,
                      on_event: Listener | None = None) -> RewindReport:
        """Awaitable ``rewind`` (in a notebook, approval clicks need this or ``%agent rewind``)."""
        from .plugs import arewind

        report = await _eventloop.run_async(arewind(self, n, keep=keep, approval=approval,
                                                     on_event=on_event))
        self.renumber_steps()
        return report

    def rewind_plan(self, n: int) -> RewindPlan:
        """What ``rewind(n)`` would do (nothing changes): the steps, files and calls."""
        from .plugs import plan

        return plan(self, n)

    def fork(self, name: str | None = None) -> Agent:
        """A new agent sharing this conversation so far, with its own sibling kernel (it
        re-runs the python calls so far at its first call, not before); a branch of
        ``self.branches`` named ``name`` (default ``fork-N``)."""
        from .plugs import fork

        return fork(self, name)

    def renumber_steps(self) -> None:
        """Number the next step after the conversation's last (its items were replaced)."""
        self._step_counter = count_steps(self.context)

    @property
    def branches(self) -> Branches:
        """This conversation's branches: a table (name, steps, last answer, tokens), and
        ``agent.branches["NAME"]`` is that branch's agent."""
        from .plugs import tree_of

        return tree_of(self)

    # -- copies between the user's kernel and the sibling -------------------------------
    # -- the staged workspace: what the model's code changed in its copy of the folder -----
    def changes(self, everything: bool = False) -> Any:
        """The sandbox's pending file changes (``everything``: every change, with its status)."""
        from ..tools.changes import list_changes

        return list_changes(self, everything)

    def apply(self, *paths: str) -> Any:
        """Apply pending changes (all, or those at ``paths``) to your folder."""
        from ..tools.changes import apply_pending

        return apply_pending(self, paths)

    def discard(self, *paths: str) -> Any:
        """Keep pending changes in the sandbox's view only."""
        from ..tools.changes import discard_pending

        return discard_pending(self, paths)

    def undo(self) -> Any:
        """Undo the last applied change set; files you edited since are left (and listed)."""
        from ..tools.changes import undo_last

        return undo_last(self)

    def push(self, **values: Any) -> list[dict[str, Any]]:
        """Copy values into the sibling kernel (``agent.push(df=df)``), each recorded."""
        return _eventloop.run_sync(self.apush(**values))

    async def apush(self, **values: Any) -> list[dict[str, Any]]:
        """Async form of ``push``."""
        from ..kernel import copies

        return await _eventloop.run_async(copies.push(self, values))

    def pull(self, name: str, local: str | None = None) -> Any:
        """A copy of the sibling's variable ``name``, recorded (``local``: the user's name for it)."""
        return _eventloop.run_sync(self.apull(name, local))

    async def apull(self, name: str, local: str | None = None) -> Any:
        """Async form of ``pull``."""
        from ..kernel import copies

        return await _eventloop.run_async(copies.pull(self, name, local))

    # -- lifecycle -------------------------------------------------------------------
    def reset(self, *, kernel: bool = False) -> None:
        """Start a new conversation (the sibling kernel is kept unless ``kernel=True``)."""
        self.resources.forget_agents_md()  # a new conversation looks for AGENTS.md again
        self.context = Context(system=self._effective_system())
        self.prompt_cache_key = new_cache_key()
        self.usage = Usage()
        self._history_replaced()
        self.memories.written.clear()  # the notes this conversation's runs kept
        self._policy.always.clear()
        sibling = self.kernel_if_started
        if kernel and sibling is not None:
            sibling.restart()

    def close(self) -> None:
        """Shut down the sibling kernel, the MCP servers and the model client's connections."""
        self.resources.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.client_is_injected:
            model, where = getattr(self.resources.client_if_made, "name", "?"), "injected client"
        else:
            model = self.model
            where = "offline" if model == "demo" else f"{self.endpoint.api} @ {safe_url(self.endpoint.base_url)}"
        return (f"<Agent model={model!r} ({where}) approval={self.approval!r} "
                f"tool_mode={self._tool_mode_short()} items={len(self.context)} "
                f"tools={self.tools.names}>")

    def _repr_html_(self) -> str:
        import html

        rows = "".join(
            f"<tr><td>{name}</td><td>{html.escape(self._readable(name))}</td></tr>"
            for name in ("model", "base_url", "approval", "allow", "tool_mode", "max_steps",
                         "max_tokens"))
        return (f"<div><b>ipyagent Agent</b> — {len(self.context)} items, {self.usage} tokens, "
                f"tools: {html.escape(', '.join(self.tools.names) or 'none')}"  # MCP names: untrusted
                f"<table>{rows}</table></div>")

    def _readable(self, name: str) -> str:
        if name == "tool_mode":  # the setting, and under "auto" the mode in force and why
            return self.tool_mode_state.describe(self.tool_mode)
        return _readable(name, getattr(self, name))

    def _tool_mode_short(self) -> str:
        in_force = self.tool_mode_in_force
        return f"{self.tool_mode}({in_force})" if self.tool_mode == "auto" else in_force

    @property
    def window_in_force(self) -> int:
        """The window compaction fits: ``Agent.context_window``, or when that is 0 (unknown),
        the one this endpoint's server said it has when it refused a request as too long."""
        return self.context_window or self._server_windows.get(
            (self.endpoint.base_url, self.model), 0)

    def learn_window(self, tokens: int) -> None:
        """Remember the window this endpoint's server said it has (only used while
        ``Agent.context_window`` is 0; never changes the setting)."""
        self._server_windows[(self.endpoint.base_url, self.model)] = tokens

    @property
    def tool_mode_in_force(self) -> Wire:
        """How the next request carries the tools: 'native' or 'text' (``Agent.tool_mode``)."""
        return self.tool_mode_state.wire(self.tool_mode)


def _readable(name: str, value: Any) -> str:
    """A setting's value for people: what an empty or zero one means."""
    if name == "base_url" and not value:
        return "(the provider's default)"
    if name == "max_tokens" and not value:
        return "0 (unlimited)"
    if name == "allow" and not value:
        return "(none)"
    return value if isinstance(value, str) else repr(value)


def _fresh_dir() -> str:
    """A new empty temporary directory for a re-run (kept: the conversation goes on there)."""
    import tempfile

    return tempfile.mkdtemp(prefix="ipyagent-rerun-")


def _final_text(steps: list[Step]) -> str:
    """The answer: the last step's text (a run that stops early may have none)."""
    for step in reversed(steps):
        if step.text:
            return step.text
    return ""

