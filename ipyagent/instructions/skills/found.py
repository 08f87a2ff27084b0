"""Where skills are found, which one a name means, and the table ``%agent skills`` shows.

Looked for, nearest first (the first skill of a name wins; the table names each one it
hides): ``.ipyagent/skills/*/SKILL.md`` beside the notebook (the project's), each folder of
``Agent.skills_paths`` in order, ``~/.ipyagent/skills/`` (yours), then ipyagent's built-ins.
A project's skill folder that is a symlink leading out of its ``.ipyagent/skills`` is refused,
and so is a ``.ipyagent/skills`` (or ``.ipyagent``) leading out of the project: a repository
cannot point the agent at files elsewhere on your disk.
"""

from __future__ import annotations

import difflib
import html
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..._util.text import one_line, visible
from ..view import InstructionSettings
from .skill import FILENAME, Skill, SkillError, read_skill

__all__ = ["BUILTIN", "Found", "SkillTable", "find_skills", "skills_of"]

BUILTIN = Path(__file__).resolve().parent / "builtin"
MAX_PER_FOLDER = 200
_LABELS = {"project": "this project (.ipyagent/skills)", "skills_paths": "Agent.skills_paths",
           "home": "yours (~/.ipyagent/skills)", "built-in": "built-in"}


@dataclass
class Found:
    """The skills by name (nearest first), those they hide, and the files that could not be read."""

    skills: dict[str, Skill] = field(default_factory=dict)
    hidden: list[tuple[Skill, Skill]] = field(default_factory=list)  # (hidden, the one that wins)
    problems: list[str] = field(default_factory=list)

    def get(self, name: str) -> Skill:
        """The skill called ``name``; ``SkillError`` names the close matches."""
        skill = self.skills.get(name) or self.skills.get(name.strip().lower())
        if skill is not None:
            return skill
        near = difflib.get_close_matches(name.strip().lower(), list(self.skills), n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        known = ", ".join(sorted(self.skills)) or "none"
        unread = f" ({len(self.problems)} SKILL.md could not be read)" if self.problems else ""
        raise SkillError(f"unknown skill {one_line(name, 80)!r}{hint}; the skills are: {known}"
                         f"{unread}")

    @property
    def folders(self) -> list[Path]:
        """The folders of the skills in use (what ``read_file`` may read beside a ``SKILL.md``)."""
        return [s.folder for s in self.skills.values()]


def find_skills(directory: str | Path, paths: list[str] | tuple[str, ...] = (),
                home: Path | None = None, builtins: bool = True) -> Found:
    """Every skill for a notebook in ``directory`` (see the module doc for the order)."""
    directory = Path(directory)
    home = Path.home() if home is None else home
    yours = home / ".ipyagent" / "skills"
    roots: list[tuple[str, Path, str]] = []
    project = directory / ".ipyagent" / "skills"
    if not _same(project, yours):  # the notebook is in $HOME: those skills are yours
        roots.append(("project", project, ".ipyagent/skills"))
    for p in paths:
        folder = Path(os.path.expanduser(p))
        roots.append(("skills_paths", folder if folder.is_absolute() else directory / folder, p))
    roots.append(("home", yours, "~/.ipyagent/skills"))
    if builtins:
        roots.append(("built-in", BUILTIN, "built-in"))
    found = Found()
    for source, root, label in roots:
        if source == "project" and root.is_dir() and not _within(root, directory):
            # .ipyagent/skills (or .ipyagent) is a symlink: the repository points elsewhere.
            found.problems.append(f"{root}: a symlink that leads out of the project; refused (a "
                                  "folder of skills of yours goes in Agent.skills_paths)")
            continue
        if source == "skills_paths" and not root.is_dir():
            found.problems.append(f"Agent.skills_paths: {root} is not a folder (a typo?)")
            continue
        for skill in _read_root(source, root, label, found.problems):
            winner = found.skills.get(skill.name)
            if winner is None:
                found.skills[skill.name] = skill
            elif winner.folder != skill.folder:
                found.hidden.append((skill, winner))
                found.skills[skill.name] = replace(
                    winner, overrides=(*winner.overrides, _place(skill)))
    return found


def _place(skill: Skill) -> str:
    return "the built-in one" if skill.source == "built-in" else f"{skill.where}/{skill.folder.name}"


def _read_root(source: str, root: Path, label: str, problems: list[str]) -> list[Skill]:
    try:
        entries = [e for e in os.scandir(root) if not e.name.startswith(".")] \
            if root.is_dir() else []
    except OSError as exc:
        problems.append(f"{root}: not readable ({exc.strerror or exc})")
        return []
    skills: list[Skill] = []
    names: set[str] = set()
    real_root = root.resolve()
    for entry in sorted(entries, key=lambda e: e.name):
        folder = Path(entry.path)
        if not folder.is_dir() or not (folder / FILENAME).exists() and not (folder / FILENAME).is_symlink():
            continue
        if source == "project" and real_root not in folder.resolve().parents:
            problems.append(f"{folder}: a symlink that leads out of {label}; refused (a "
                            "project's skill must live in its own folder)")
            continue
        if len(skills) >= MAX_PER_FOLDER:
            problems.append(f"{root}: more than {MAX_PER_FOLDER} skills; the rest are not read")
            break
        try:
            skill = read_skill(folder, source, label)
        except SkillError as exc:
            problems.append(str(exc))
            continue
        if skill.name in names:
            problems.append(f"{skill.path}: another skill in {label} is already called "
                            f"{skill.name!r}; this one is ignored")
            continue
        names.add(skill.name)
        skills.append(skill)
    return skills


def _within(path: Path, directory: Path) -> bool:
    """Whether ``path``, its symlinks followed, is inside ``directory`` (followed too)."""
    try:
        return path.resolve().is_relative_to(directory.resolve())
    except OSError:
        return False


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def skills_of(agent: InstructionSettings) -> Found:
    """The skills an agent's settings find (none when ``Agent.skills_enabled`` is off)."""
    if not agent.skills_enabled:
        return Found()
    return find_skills(agent.cwd or os.getcwd(), list(agent.skills_paths))


# -- the table ---------------------------------------------------------------------------
class SkillTable:
    """What ``%agent skills`` (and ``Agent.skills``) shows: each skill, where it is from,
    what it hides, and the files that could not be read."""

    def __init__(self, found: Found, enabled: bool = True) -> None:
        self.found = found
        self.enabled = enabled

    def __repr__(self) -> str:
        return self.text()

    def text(self, up_front: str = "%agent -s NAME TASK") -> str:
        """The table as plain lines, each as wide as the terminal at most; ``up_front``:
        how to load a skill before a task where it is shown."""
        if not self.enabled:
            return "skills: off (Agent.skills_enabled = False)"
        import shutil

        columns = shutil.get_terminal_size((120, 24)).columns
        lines = []
        for skill, note in self._rows():
            where = f"  [{skill.where}]"
            room = max(20, min(90, columns - 23 - len(where)))  # a line wraps nowhere
            lines.append(f"  {skill.name:<20} {one_line(skill.description, room)}{where}"
                         + (f"\n  {'':<20} {note}" if note else ""))
        for hidden, winner in self.found.hidden:
            lines.append(f"  {hidden.name:<20} (hidden: {winner.where}/{winner.folder.name} "
                         f"wins)  [{hidden.where}]")
        lines += [f"! {p}" for p in self.found.problems]
        head = f"skills (load_skill NAME; {up_front} loads one up front):"
        return visible(head + "\n" + ("\n".join(lines) or "  (none)"))

    def _rows(self) -> list[tuple[Skill, str]]:
        rows = []
        for skill in self.found.skills.values():
            notes = [f"overrides {where}" for where in skill.overrides]
            if skill.ignored:
                notes.append("ignored keys: " + ", ".join(skill.ignored))
            rows.append((skill, "; ".join(notes)))
        return rows

    def _repr_html_(self) -> str:
        # Names, descriptions and paths come from files we did not write.
        esc = html.escape
        if not self.enabled:
            return "<div><b>ipyagent skills</b>: off (<code>Agent.skills_enabled = False</code>)</div>"
        cell = "<td style='text-align:left'>{}</td>"
        # A name is one word to read: "data-cleaning" broken at its hyphen reads as two
        # (JupyterLab styles <code> pre-wrap: the cell's nowrap alone does not hold).
        name = "<td style='text-align:left;white-space:nowrap'>{}</td>"
        rows = self._rows()
        notes = any(note for _, note in rows) or bool(self.found.hidden)  # else no empty column
        body = "".join(
            "<tr>" + name.format(f"<code style='white-space:nowrap'>{esc(s.name)}</code>") + cell.format(esc(s.description))
            + cell.format(esc(_LABELS.get(s.source, s.source)) + "<br><small>" + esc(str(s.folder))
                          + "</small>") + (cell.format(esc(note)) if notes else "") + "</tr>"
            for s, note in rows)
        body += "".join(
            "<tr style='opacity:0.6'>" + name.format(f"<s>{esc(h.name)}</s>")
            + cell.format(esc(h.description)) + cell.format(esc(_LABELS.get(h.source, h.source)))
            + cell.format(esc(f"hidden: {w.where}/{w.folder.name} wins")) + "</tr>"
            for h, w in self.found.hidden)
        head = "".join(f"<th style='text-align:left'>{h}</th>"
                       for h in ("skill", "what it is for", "from", "note")[:4 if notes else 3])
        problems = "".join(f"<div style='color:#b00020'>⚠ {esc(p)}</div>" for p in self.found.problems)
        return (f"<div><b>ipyagent skills</b> — the model sees each name and description and "
                f"loads one with <code>load_skill</code>; <code>%agent -s NAME TASK</code> loads "
                f"one up front<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
                f"{problems}</div>")
