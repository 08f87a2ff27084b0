"""Skills: folders with a ``SKILL.md`` of instructions for a kind of task (the convention
agent tools share), offered to the model by name and loaded when a task needs one.

``skill`` reads one, ``found`` finds them all (and lists them), ``use`` gives them to the
model. Skills add instructions only: nothing in a ``SKILL.md`` can change approval, the
allow list, the workspace, the endpoint or any other setting.
"""

from __future__ import annotations

from .found import BUILTIN, Found, SkillTable, find_skills, skills_of
from .skill import Skill, SkillError, parse_front_matter
from .use import MARKER, TOOL_NAME, load_skill_tool, preload, skill_text, with_skills, without_skills

__all__ = ["BUILTIN", "Found", "MARKER", "Skill", "SkillError", "SkillTable", "TOOL_NAME",
           "find_skills", "load_skill_tool", "parse_front_matter", "preload", "skill_text",
           "skills_of", "with_skills", "without_skills"]
