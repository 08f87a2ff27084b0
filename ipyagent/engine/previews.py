"""Before a task's first request: previews of the files it names, where the setting allows.

``Agent.preview_files``: False never; True always; "auto" (the default) previews at once
for a model on this machine (the demo model, an in-process client, a loopback
``base_url``) and, for any other endpoint, only after a person said yes once for it
(``confirm_preview`` on the approval UI: the notebook's buttons, the terminal's prompt),
remembered for this agent. Under ``approval`` "auto" or "deny", and where nobody can be
asked (a script, CI, a headless notebook), nothing is asked and nothing is sent: a run
that approves tool calls unasked still never sends file content ipyagent chose by itself
to a provider; one line says how to allow it.

The preview goes into the context as one user message (``meta["preview"]``: the files and
what was said of each), before the task, so a transcript holds exactly what the model saw
and a replay feeds the recorded text instead of reading the files again.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from ..context.events import Event, FilesPreviewed, Notice
from ..context.items import PREVIEW_KEY, Message
from ..instructions.file_preview import FilePreview, block, preview_files
from ..models.retry import safe_url
from ..trust.secrets import key_envs, secret_values
from .view import AgentView


class PreviewAgent(AgentView, Protocol):
    """What previews use of an ``Agent`` beyond the step's view (``agent`` imports this
    module, so it may not be imported back, even for types)."""

    preview_consent: dict[str, bool]
    preview_said: set[str]

    @property
    def client_is_injected(self) -> bool: ...
    @property
    def preview_files(self) -> bool | str: ...
    @property
    def preview_max_files(self) -> int: ...

__all__ = ["META_KEY", "PreviewRequest", "is_loopback", "preview_for_task", "where_sent"]

META_KEY = PREVIEW_KEY
INJECTED = "the injected model client (Agent(client=...))"


@dataclass
class PreviewRequest:
    """The question put to a person: may these previews go to this endpoint?"""

    previews: list[FilePreview]
    endpoint: str  # where they would go, without credentials

    def lines(self) -> list[str]:
        return [p.line() for p in self.previews]

    def question(self) -> str:
        rows = "\n".join(f"  {line}" for line in self.lines())  # names already made visible
        return (f"Before the first request, ipyagent can send the model a short preview of the "
                f"files your task names (their first lines) to {self.endpoint}, a remote "
                f"endpoint:\n{rows}\nAsked once for this agent (Agent.preview_files).")

    def _repr_markdown_(self) -> str:
        return self.question()


def is_loopback(host: str) -> bool:
    """True for ``localhost``, ``*.localhost`` and loopback addresses (not the local network:
    a server there is another machine, and a preview would leave this one)."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def where_sent(agent: PreviewAgent) -> str | None:
    """Where a request goes, without credentials; None when it stays on this machine."""
    if agent.client_is_injected:
        client = agent.client
        url = getattr(client, "url", None)
        if not url:
            # ipyagent's own in-process models (demo, replay, recorded) send nothing; of any
            # other client nothing is known, so it counts as remote: asked, never assumed.
            own = (type(client).__module__ or "").startswith("ipyagent.models.")
            return None if own else INJECTED
    elif agent.model == "demo":
        return None
    else:
        url = agent.endpoint.base_url
    host = urlsplit(str(url)).hostname or ""
    return None if is_loopback(host) else safe_url(str(url))


async def preview_for_task(agent: PreviewAgent, task: str) -> list[Event]:
    """Add the previews of the files ``task`` names to the context, if allowed; what to say."""
    if agent.preview_files is False or agent.workspace == "remote":
        return []  # off, or the files are a remote server's: not read from here
    previews = preview_files(agent.workspace_path, task, secret_values(key_envs(agent)),
                             limit=agent.preview_max_files)
    if not previews:
        return []
    endpoint = where_sent(agent)
    if agent.preview_files == "auto" and endpoint is not None:
        allowed, why = await _consent(agent, PreviewRequest(previews, endpoint))
        if not allowed:
            return [Notice(why, "info")] if why else []
    # Which files and what was said of each; their text is the message's own (not twice).
    files = [{k: v for k, v in p.to_dict().items() if k != "body"} for p in previews]
    meta = {"files": files, "sent_to": endpoint or "this machine"}
    text = block(previews)
    agent.context.append(Message("user", text, meta={META_KEY: meta}))
    return [FilesPreviewed([p.line() for p in previews], text)]


async def _consent(agent: PreviewAgent, request: PreviewRequest) -> tuple[bool, str]:
    """Whether the previews may go to a remote endpoint: asked once per endpoint and agent;
    (yes or no, the line to say when not)."""
    known = agent.preview_consent.get(request.endpoint)
    if known is not None:
        return known, ""  # said once already for this endpoint
    how = ("set Agent.preview_files = True to send them, or False not to look")
    ui = agent.policy.ui
    confirm = getattr(ui, "confirm_preview", None)
    if agent.approval != "ask" or not callable(confirm):
        # Approval "auto" approves the model's calls; it is not a yes to ipyagent sending
        # files it picked itself. Said once, not remembered: a UI may appear later.
        if request.endpoint in agent.preview_said:
            return False, ""
        agent.preview_said.add(request.endpoint)
        return False, (f"file previews not sent: {request.endpoint} is a remote endpoint and "
                       f"nobody was asked (approval is {agent.approval!r}); {how}")
    answer: Any = await confirm(request)
    if answer is True:
        agent.preview_consent[request.endpoint] = True
        return True, ""
    if answer is False:
        agent.preview_consent[request.endpoint] = False
        return False, f"file previews not sent to {request.endpoint}: you said no (this agent remembers)"
    return False, f"file previews not sent to {request.endpoint}: {answer}"
