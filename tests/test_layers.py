"""The house's rule: dependencies point one way, and no module waits on itself.

frontends → transcripts → engine → {tools, kernel, models} → data. Every import counts,
the ones inside functions too; only ``if TYPE_CHECKING:`` imports are exempt (they never
run). A few named lazy delegators are the allowed upward edges.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ipyagent"

DATA = {"errors", "items", "_spill", "context", "context_table", "tokens", "events", "decisions", "_text", "_secrets",
        "steps", "provenance",
        "_untrusted", "_normalise", "_eventloop", "_mainthread", "_atomic", "_version", "_stamps",
        "_sqlite", "_nesting"}
ENGINE = {"agent", "step", "settings", "approval", "compaction", "personas", "providers",
          "agents_md", "reply_checks", "resources", "redaction", "audit", "namespace", "copies",
          "written_calls", "lenient_json", "text_tools", "tool_mode",
          "offers", "memory", "skills"}
LAYERS = {"data": 0, "models": 1, "kernel": 1, "tools": 1, "trust": 1, "engine": 2, "transcripts": 3,
          "frontends": 4}

# (importer, imported): the lazy delegators the contract asks for, each inside a function.
UPWARD = {
    ("agent", "transcripts.transcript"),  # Agent.save / load / from_transcript
    ("agent", "transcripts.rebuild"),  # Agent.rebuild_kernel
    ("agent", "transcripts.replay"),  # Agent.replay
    ("agent", "transcripts.rewind"),  # Agent.rewind / rewind_plan
    ("agent", "transcripts.branches"),  # Agent.fork / branches
    ("context", "transcripts.export"),  # Context.to_notebook
    ("context", "compaction"),  # Context.compaction_preview
}


def layer(module: str) -> str:
    top = module.split(".")[0]
    if top in LAYERS:
        return top
    if top in DATA:
        return "data"
    if top in ENGINE:
        return "engine"
    return "frontends"  # _doc, the package's own __init__: the outermost faces


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package modules ``module`` imports, outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text())
    exempt = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
              and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    here = module.split(".") if module else []
    if path.name != "__init__.py":
        here = here[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in exempt:
            continue
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
    return {m for m in found if m in known and m != module and m}


GRAPH = {m: imports(m, p, modules()) for m, p in modules().items() if m}


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_point_down(module: str) -> None:
    upward = sorted(dep for dep in GRAPH[module]
                    if LAYERS.get(layer(dep), 0) > LAYERS.get(layer(module), 0)
                    and (module, dep) not in UPWARD)
    assert not upward, f"{module} ({layer(module)}) imports upward: {upward}"


def test_no_import_cycles() -> None:
    cycles = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(GRAPH.get(module, ())):
            if (module, dep) in UPWARD:
                continue  # a lazy delegator: the edge back is the point
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles: " + "; ".join(" → ".join(c) for c in cycles)


def test_every_module_is_placed() -> None:
    assert all(layer(m) for m in GRAPH)
