"""How skills reach the model: their names and descriptions in the system prompt, the
``load_skill`` tool that returns one's instructions (and lists its files), and a skill
loaded up front by the person (``Agent.use_skill``, ``%agent -s NAME``).

Everything here is recorded where a transcript keeps it: the listing is part of the
system prompt (under ``MARKER``, so composing it again is a no-op), a ``load_skill`` call
and its result are items, and a skill loaded up front is a user message with
``meta["skill"]``. A replay answers ``load_skill`` from the recording.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

from ..._util.text import one_line, visible
from ...context.buffer import Context
from ...context.items import Message, ToolResult
from ...tools.base import Tool, tool
from ..view import InstructionSettings
from .found import Found, skills_of
from .skill import MAX_COUNTED, Skill, SkillError

__all__ = ["MARKER", "TOOL_NAME", "SkillAgent", "load_skill_tool", "preload", "skill_text",
           "with_skills", "without_skills"]

MARKER = "# Skills (load_skill)"
TOOL_NAME = "load_skill"
MAX_LISTED = 50  # skills named in the system prompt
LISTED_CHARS = 200  # of each description there


def with_skills(system: str, found: Found) -> str:
    """``system`` plus the skills' names and descriptions (unchanged if there are none or
    the listing is already in)."""
    if not found.skills or MARKER in system:
        return system
    skills = list(found.skills.values())
    lines = [f"- {s.name}: {visible(one_line(s.description, LISTED_CHARS))}"
             for s in skills[:MAX_LISTED]]
    if len(skills) > MAX_LISTED:
        lines.append(f"- … and {len(skills) - MAX_LISTED} more (load_skill with any name "
                     "answers with all of them)")
    return (f"{system.rstrip()}\n\n{MARKER}\n\nSkills are instructions for particular kinds "
            "of task. When the task needs one, call `load_skill` with its name first and "
            "follow what it says; load only the skills the task needs:\n" + "\n".join(lines))


def without_skills(system: str) -> str:
    """``system`` without its skills listing (it is always the last section)."""
    at = system.rfind(f"\n\n{MARKER}\n")
    return system if at < 0 else system[:at]


def skill_text(skill: Skill, limit: int, why: str = "") -> str:
    """What the model reads for a loaded skill: its instructions and its files."""
    body = skill.body(limit)
    files, more = skill.files()
    listed = "\n".join(f"- {skill.folder / rel} ({_size(size)})" for rel, size in files)
    if more:
        listed += f"\n- … and {more}{'+' if more >= MAX_COUNTED else ''} more files"
    where = "built-in" if skill.source == "built-in" else f"{skill.where}/{skill.folder.name}"
    head = f"Skill `{skill.name}` ({where}){why}: follow these instructions for this task."
    tail = (f"Files in this skill (read-only; read_file opens them by these paths):\n{listed}"
            if files else "This skill has no other files.")
    return f"{head}\n\n{body}\n\n{tail}"


def _meta(skill: Skill, text: str) -> dict[str, Any]:
    return {"name": skill.name, "source": skill.source, "folder": str(skill.folder),
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}


class SkillAgent(InstructionSettings, Protocol):
    """An ``engine.agent.Agent`` as skills use it: its settings and its conversation."""

    @property
    def context(self) -> Context: ...


def load_skill_tool(agent: SkillAgent) -> Tool:
    """The ``load_skill`` tool of ``agent`` (offered while ``Agent.skills_enabled`` is on)."""

    def load_skill(name: str) -> Any:
        """Load a skill: its instructions for a kind of task, and the list of its files. The skills are listed in the system prompt; load one before a task it fits, then follow it.

        Args:
            name: The skill's name, as listed.
        """
        found = skills_of(agent)
        try:
            skill = found.get(str(name))
            text = skill_text(skill, agent.skills_max_chars)
        except SkillError as exc:
            return ToolResult(call_id="", output=f"Error: {one_line(exc)}", error=True)
        return ToolResult(call_id="", output=text, meta={"skill": _meta(skill, text)})

    return tool(load_skill)


def preload(agent: SkillAgent, name: str) -> Skill:
    """Put skill ``name``'s instructions in ``agent``'s conversation now, before the next
    task, as a labelled user message; ``SkillError`` (close matches named) if there is none."""
    if not agent.skills_enabled:
        raise SkillError(f"cannot load skill {one_line(name, 80)!r}: skills are off "
                         "(Agent.skills_enabled = False)")
    skill = skills_of(agent).get(name)
    text = skill_text(skill, agent.skills_max_chars, why=", loaded by the user for the next task")
    agent.context.append(Message("user", text, meta={"skill": _meta(skill, text)}))
    return skill


def _size(n: int) -> str:
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.1f} KB"
