"""The house's rule: the layers are the folders, and dependencies point one way.

Every folder directly under ``ipyagent/`` is a layer. Its ``__init__`` docstring says what it
owns and, in a paragraph that starts ``May import:``, which other layers it may import; this
test reads those paragraphs (it keeps no list of its own), checks that they never run in a
circle, and holds every import of every module against them: the ones inside functions and
under ``if TYPE_CHECKING:`` too (a lower layer that needs a higher one's type names what it
uses as a ``typing.Protocol``, and mypy checks the higher one's class against it). The
modules directly under ``ipyagent/`` are the floor (they import nothing of ours, so every layer may import them:
``errors``, ``_version``) or the face (``__init__``, ``_doc``: what a user or the docs
import; nothing inside imports them).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ipyagent"
MAX_TOP_MODULES = 12


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name below ``ipyagent`` ("" is the package)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package modules ``module`` imports, wherever the import statement is."""
    tree = ast.parse(path.read_text())
    here = module.split(".") if module else []
    if path.name != "__init__.py":
        here = here[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "ipyagent":
                base = node.module.split(".")[1:]
            else:
                continue
            target = ".".join(base)
            for alias in node.names:
                sub = f"{target}.{alias.name}" if target else alias.name
                found.add(sub if sub in known else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ipyagent":
                    found.add(".".join(alias.name.split(".")[1:]))
    return {m for m in found if m in known and m != module}


KNOWN = modules()
GRAPH = {m: imports(m, p, KNOWN) for m, p in KNOWN.items()}
TOP = {m for m in KNOWN if m and "." not in m and KNOWN[m].name != "__init__.py"}
FLOOR = {m for m in TOP if not GRAPH[m]}
FACE = (TOP - FLOOR) | {""}


def layer(module: str) -> str:
    """The folder a module lives in ("" for the modules directly under ``ipyagent/``)."""
    return module.split(".")[0] if module.split(".")[0] not in TOP else ""


@functools.cache
def declared() -> dict[str, set[str]]:
    """Each layer and the layers its ``__init__`` says it may import."""
    layers = sorted(p.name for p in PACKAGE.iterdir()
                    if p.is_dir() and (p / "__init__.py").exists())
    found = {}
    for name in layers:
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text())) or ""
        said = re.search(r"^May import:(.*?)(?:\n\s*\n|\Z)", doc, re.M | re.S)
        assert said, f"ipyagent/{name}/__init__.py: its docstring has no 'May import:' paragraph"
        found[name] = set(re.findall(r"``(\w+)``", said.group(1)))
    return found


def order() -> list[str]:
    """The layers from the ground up: each one after every layer it may import."""
    done: list[str] = []
    rules = declared()
    while len(done) < len(rules):
        ready = sorted(n for n in rules if n not in done and rules[n] <= set(done))
        assert ready, f"the layers' 'May import:' paragraphs run in a circle: {set(rules) - set(done)}"
        done += ready
    return done


def test_every_layer_names_only_layers_it_may_import() -> None:
    for name, allowed in declared().items():
        assert allowed <= set(declared()) - {name}, (name, allowed - set(declared()))


def test_the_layers_stand_on_each_other_without_a_circle() -> None:
    assert order()[0] == "_util" and order()[-1] == "frontends"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if m))
def test_imports_point_down(module: str) -> None:
    if module in FACE:
        return  # the face may import anything
    allowed = declared().get(layer(module), set()) | {layer(module)}
    wrong = sorted(f"{dep} ({layer(dep) or 'the face'})" for dep in GRAPH[module]
                   if dep not in FLOOR and (dep in FACE or layer(dep) not in allowed))
    assert not wrong, f"{module} ({layer(module) or 'the floor'}) may not import: {wrong}"


def test_imports_for_types_only_count(tmp_path: Path) -> None:
    source = tmp_path / "low.py"
    source.write_text("from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    from ..engine.agent import Agent\n"
                      "else:\n    from ..context import items\n")
    known = {"trust.low": source, "engine.agent": source, "context.items": source}
    assert imports("trust.low", source, known) == {"engine.agent", "context.items"}


def test_no_import_cycles() -> None:
    cycles = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(GRAPH.get(module, ())):
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles: " + "; ".join(" → ".join(c) for c in cycles)


def test_the_top_holds_only_the_floor_and_the_face() -> None:
    assert len(TOP) <= MAX_TOP_MODULES, sorted(TOP)
    assert {"errors", "_version"} <= FLOOR and "_doc" in FACE
