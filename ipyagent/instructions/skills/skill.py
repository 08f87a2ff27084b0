"""One skill: a folder with a ``SKILL.md`` (front matter ``name``, ``description``; a
Markdown body of instructions) and the files beside it, read strictly and bounded.

The front matter is read here, so PyYAML is not a dependency: top-level ``key: value``
lines; a value may be plain, 'single' or "double" quoted, or a ``|``/``>`` block; lines
indented under a key continue it. Only ``name`` and ``description`` are used: every other
key (Claude's ``allowed-tools``, ``license``, ``metadata``, or one that names an Agent
setting) is skipped with its indented lines and can grant nothing. A file that cannot
be read is one line naming it.

Every file is opened through the workspace walker (``tools.files.locate``) with the
skill's folder as the root, so a symlink in a skill never leads out of its folder.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import ConfigError
from ...tools.files import WorkspaceError, locate, open_real_dir, open_regular

__all__ = ["FILENAME", "MAX_DESCRIPTION", "Skill", "SkillError", "parse_front_matter", "read_skill"]

FILENAME = "SKILL.md"
NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
MAX_NAME = 64
MAX_DESCRIPTION = 1024  # characters, as the SKILL.md convention says
HEAD_BYTES = 64 * 1024  # the front matter must be in the file's first 64 KiB
MAX_FILES = 50  # files listed per skill
MAX_DEPTH = 4
MAX_COUNTED = 1000  # files counted past MAX_FILES before the walk stops


class SkillError(ConfigError):
    """A skill that cannot be read or found (one line, naming the file or the name)."""


@dataclass(frozen=True)
class Skill:
    """A skill found on disk (its body is read when it is loaded, not when listed)."""

    name: str
    description: str
    folder: Path  # resolved
    source: str  # "project", "skills_paths", "home" or "built-in"
    where: str  # the folder it was found in, for people
    ignored: tuple[str, ...] = ()  # front-matter keys read and not used
    overrides: tuple[str, ...] = field(default=(), compare=False)  # where the ones it hides are

    @property
    def path(self) -> Path:
        """Its ``SKILL.md``."""
        return self.folder / FILENAME

    def body(self, limit: int) -> str:
        """The instructions (the text after the front matter), cut at ``limit`` characters
        with a note saying so; ``SkillError`` when the file can no longer be read."""
        text, whole = _read(self.folder, FILENAME, max(limit * 4, HEAD_BYTES) + 4, real=True)
        _, _, body = parse_front_matter(text, str(self.path))
        if len(body) > limit or not whole:
            size = os.path.getsize(self.path) if not whole else len(body)
            body = (body[:limit].rstrip() + f"\n\n[… {FILENAME} cut at {limit} characters "
                    f"(it has {size:,} {'bytes' if not whole else 'characters'}); "
                    "Agent.skills_max_chars sets the limit]")
        return body

    def files(self) -> tuple[list[tuple[str, int]], int]:
        """The files beside ``SKILL.md`` (relative path, size), at most ``MAX_FILES``, and
        how many more there are. Hidden names and symlinks are left out."""
        found: list[tuple[str, int]] = []
        more = 0
        try:  # the folder as found: a symlink swapped in for it since is not followed
            fd = open_real_dir(self.folder)
        except (WorkspaceError, OSError):
            return found, more
        try:
            for top, dirs, names, top_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
                depth = len(Path(top).parts) - 1
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and depth < MAX_DEPTH)
                for name in sorted(names):
                    rel = (Path(top) / name).as_posix()
                    if name.startswith(".") or rel == FILENAME:
                        continue
                    st = os.stat(name, dir_fd=top_fd, follow_symlinks=False)
                    if not stat.S_ISREG(st.st_mode):
                        continue  # a symlink may lead anywhere: read_file refuses those that leave
                    if len(found) < MAX_FILES:
                        found.append((rel, st.st_size))
                    else:
                        more += 1
                if more >= MAX_COUNTED:
                    break  # a huge folder: say "at least", do not walk all of it
        finally:
            os.close(fd)
        return found, more

    def __repr__(self) -> str:
        return f"<Skill {self.name!r} from {self.where}>"


def read_skill(folder: Path, source: str, where: str) -> Skill:
    """The skill in ``folder`` (its front matter only); ``SkillError`` names the file."""
    path = folder / FILENAME
    text, _ = _read(folder, FILENAME, HEAD_BYTES)
    fields, ignored, _ = parse_front_matter(text, str(path), head_only=True)
    name = fields.get("name", "").strip() or folder.name
    if not NAME.fullmatch(name) or len(name) > MAX_NAME:
        raise SkillError(f"{path}: the name {name!r:.80} is not lowercase letters, digits and "
                         f"single hyphens (at most {MAX_NAME} characters)")
    description = " ".join(fields.get("description", "").split())
    if not description:
        raise SkillError(f"{path}: no description: the front matter needs `description:` "
                         "(one line saying what the skill is for and when to use it)")
    if len(description) > MAX_DESCRIPTION:
        description = description[:MAX_DESCRIPTION - 1] + "…"
    return Skill(name, description, folder.resolve(), source, where, tuple(ignored))


def _read(folder: Path, name: str, max_bytes: int, real: bool = False) -> tuple[str, bool]:
    """``name`` in ``folder`` as text, at most ``max_bytes`` (and whether that was all).
    ``real``: ``folder`` is as it was found (resolved); no symlink is followed to reach it."""
    try:
        with locate(folder, name, real=real) as spot:
            fd = open_regular(spot)
        with open(fd, "rb") as f:
            data = f.read(max_bytes + 1)
    except (WorkspaceError, IsADirectoryError) as exc:
        raise SkillError(f"{folder / name}: {exc}") from None
    except OSError as exc:
        raise SkillError(f"{folder / name}: not readable ({exc.strerror or exc})") from None
    whole = len(data) <= max_bytes
    data = data[:max_bytes]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if whole or exc.start < len(data) - 4:  # not just a character cut at the end
            raise SkillError(f"{folder / name}: not UTF-8 text (byte {exc.start}); save it "
                             "as UTF-8") from None
        text = data[:exc.start].decode("utf-8")
    return text, whole


# -- front matter ------------------------------------------------------------------------
_KEY = re.compile(r"([A-Za-z_][\w.-]*)[ \t]*:(?:[ \t]+(.*))?")
_BLOCK = re.compile(r"([|>])([+-]?)([1-9]?)[ \t]*(#.*)?")
_USED = ("name", "description")


def parse_front_matter(text: str, where: str, head_only: bool = False,
                       ) -> tuple[dict[str, str], list[str], str]:
    """``(name and description, the other keys, body)`` of a ``SKILL.md``; ``SkillError``
    (``where``: line N: …) when it is not the small YAML subset described above.
    ``head_only``: ``text`` may be the file's head (the body is not needed)."""
    lines = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if not lines or lines[0].rstrip() != "---":
        raise SkillError(f"{where}: no front matter: a {FILENAME} starts with a '---' line, "
                         "then `name:` and `description:`, then '---'")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "...")), None)
    if end is None:
        more = " in its first 64 KiB" if head_only else ""
        raise SkillError(f"{where}: the front matter has no closing '---' line{more}")
    fields: dict[str, str] = {}
    ignored: list[str] = []
    i = 1
    while i < end:
        raw = lines[i]
        if not raw.strip() or raw.lstrip().startswith("#"):
            i += 1
            continue
        m = _KEY.fullmatch(raw.rstrip())
        if m is None or raw[0] in " \t":
            raise SkillError(f"{where}: line {i + 1}: {raw.strip()[:60]!r} is not `key: value` "
                             "(only a simple subset of YAML is read)")
        key, value = m.group(1), (m.group(2) or "").strip()
        j = i + 1
        while j < end and (not lines[j].strip() or lines[j][0] in " \t"):
            j += 1  # the lines indented under this key belong to it
        block = lines[i + 1:j]
        while block and not block[-1].strip():
            block.pop()
        if key in _USED:
            if key in fields:
                raise SkillError(f"{where}: line {i + 1}: `{key}` is given twice")
            fields[key] = _string(value, block, f"{where}: line {i + 1}")
        elif key not in ignored:
            ignored.append(key)
        i = j
    return fields, ignored, "\n".join(lines[end + 1:]).strip()


def _string(value: str, block: list[str], where: str) -> str:
    """A string value: plain, quoted or a ``|``/``>`` block, with its continuation lines."""
    header = _BLOCK.fullmatch(value)
    if header:
        present = [ln for ln in block if ln.strip()]
        indent = min((len(ln) - len(ln.lstrip()) for ln in present), default=0)
        rows = [ln[indent:] for ln in block]
        if header.group(1) == "|":
            return "\n".join(rows).strip()
        return _fold(rows)
    more = [ln.strip() for ln in block]
    if value[:1] in ("'", '"'):
        whole = " ".join([value, *(ln for ln in more if ln)])
        quote = value[0]
        if len(whole) < 2 or not whole.endswith(quote):
            raise SkillError(f"{where}: the quoted value does not end with its {quote}")
        inner = whole[1:-1]
        if quote == "'":
            return inner.replace("''", "'")
        return re.sub(r'\\(["\\/nt])', lambda e: {"n": "\n", "t": "\t"}.get(e.group(1), e.group(1)),
                      inner)
    if value[:1] in ("[", "{", "&", "*", "!", "|", ">"):
        raise SkillError(f"{where}: {value[:40]!r} is not a plain string (lists, mappings and "
                         "YAML tags are not read here)")
    value = re.sub(r"[ \t]#.*$", "", value)  # a comment
    return _fold([value, *more])


def _fold(rows: list[str]) -> str:
    """Lines folded as YAML folds them: a line break is a space, a blank line a newline."""
    out: list[str] = []
    for row in rows:
        if not row.strip():
            out.append("\n")
        else:
            out.append(row.strip() if not out or out[-1] == "\n" else " " + row.strip())
    return "".join(out).strip()
