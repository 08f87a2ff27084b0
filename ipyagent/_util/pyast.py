"""Reading the model's Python without running it: one parse that never raises, and what
the loop asks of a call's code (what it last assigns, loops over, tests, calls, moves)."""

from __future__ import annotations

import ast
import builtins
import re

__all__ = ["parsed", "comprehension_names", "last_assigned", "iterated", "stateful",
           "tested_in_loop", "shadowed"]


def parsed(code: str) -> ast.Module | None:
    """``ast.parse(code)``, or None when it does not parse (or is too deep or too large to)."""
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def comprehension_names(tree: ast.AST) -> set[str]:
    """The names the comprehensions of ``tree`` bind (``row`` of ``for row in rows``): they
    live in the comprehension's scope, not in the kernel's namespace."""
    return {n.id for c in ast.walk(tree) if isinstance(c, ast.comprehension)
            for n in ast.walk(c.target) if isinstance(n, ast.Name)}


def last_assigned(code: str) -> str | None:
    """The name the code's last statement assigns (``x = …``, ``x += …``, ``x: int = …``);
    None when it ends otherwise or does not parse."""
    tree = parsed(code)
    if tree is None:
        return None
    last = tree.body[-1:]
    if not last:
        return None
    node = last[0]
    targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
               if isinstance(node, ast.AugAssign)
               or (isinstance(node, ast.AnnAssign) and node.value is not None) else [])
    names = [t.id for t in targets if isinstance(t, ast.Name)]
    return names[-1] if names else None


def iterated(code: str, limit: int = 80) -> str | None:
    """What the code's last loop or comprehension goes over (``monts_in_march`` of
    ``sum(1 for d in monts_in_march if …)``), as code to print: a name, an attribute or an
    item (``range(…)``, literals, calls aside); None when there is none.

    Why: at 1.5B a count of Mondays summed over the first days of three months, printed 0,
    and was written again unchanged after the check: what it counts over is what to look at."""
    tree = parsed(code)
    if tree is None:
        return None
    overs = [node.iter for node in ast.walk(tree)
             if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension))]
    scoped = comprehension_names(tree)  # ``row`` of ``for cell in row``: not the kernel's
    for over in sorted(overs, key=lambda o: (o.lineno, o.col_offset), reverse=True):
        # A stored value only: printing open(…), a generator or enumerate(…) shows an object.
        if not isinstance(over, (ast.Name, ast.Attribute, ast.Subscript)) or (
                over.end_lineno != over.lineno) or any(
                isinstance(n, ast.Name) and n.id in scoped for n in ast.walk(over)):
            continue
        try:
            shown = ast.unparse(over)
        except (RecursionError, ValueError, MemoryError):
            return None
        return shown if len(shown) <= limit else None
    return None

_DRAWS = re.compile(r"\b(?:input|random|randint|choice|shuffle|sample|uniform|uuid4|urlopen|"
                    r"recv|sleep|now|today|time|perf_counter|monotonic)\s*\(|"
                    r"\b(?:requests|socket|random|secrets)\.")
_STREAMS = frozenset({"next", "readline", "readlines", "read", "pop", "popleft", "popitem"})


def stateful(code: str) -> bool:
    """True when running ``code`` again may well print something else: it draws at random,
    reads a clock, the network or input, or moves a stream, a list or a counter that an
    earlier call made (``next(it)``, ``f.readline()``, ``queue.pop()``, ``count += 1``; not
    ``next(l for l in open(…))``, which starts afresh each time)."""
    if _DRAWS.search(code):
        return True
    tree = parsed(code)
    if tree is None:
        return True  # unread: not worth asserting it would print the same
    augmented = {id(a.target) for a in ast.walk(tree) if isinstance(a, ast.AugAssign)}
    set_here = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                and isinstance(n.ctx, ast.Store) and id(n) not in augmented}
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) \
                and node.target.id not in set_here:
            return True
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "next" and node.args:
            moved = node.args[0]  # next(it): the iterator's state
        elif isinstance(func, ast.Attribute) and func.attr in _STREAMS:
            moved = func.value  # f.readline(), queue.pop()
        else:
            continue
        if isinstance(moved, ast.Name) and moved.id not in set_here:
            return True  # a stream or a list an earlier call made
    return False

def tested_in_loop(code: str, limit: int = 80) -> str | None:
    """What the first ``if`` inside a ``for`` loop of ``code`` tests, as code to print
    (``line.split(',')[1]`` of ``if line.split(',')[1].isdigit() and …``), or None.

    Why: at 1.5B a loop whose test held for no line (``'34\\n'.isdigit()``) wrote an empty
    file, and the model ran the same silent call again: what the test sees is what to print.
    Only the code's own expression is quoted, never anything it printed."""
    tree = parsed(code)
    if tree is None:
        return None
    for loop in ast.walk(tree):
        if not isinstance(loop, (ast.For, ast.AsyncFor)):
            continue
        test = next((n.test for n in ast.walk(loop) if isinstance(n, ast.If)), None)
        while isinstance(test, (ast.BoolOp, ast.UnaryOp)):
            test = test.values[0] if isinstance(test, ast.BoolOp) else test.operand
        if isinstance(test, ast.Compare):
            test = test.left
        elif isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute):
            test = test.func.value  # x.isdigit(): x
        if test is None or isinstance(test, (ast.Name, ast.Constant)) or (
                test.end_lineno != test.lineno
                or (test.end_col_offset or 0) - test.col_offset > 4 * limit):
            return None
        try:
            shown = ast.unparse(test)
        except (RecursionError, ValueError, MemoryError):  # a deep a+a+…: nothing to quote
            return None
        return shown if len(shown) <= limit else None
    return None


# Python's own functions and types by name (``sum``, ``max``, ``list``): what a value of the
# same name hides in the kernel.
_BUILTINS = frozenset(n for n in dir(builtins) if n.islower() and not n.startswith("_")
                      and callable(getattr(builtins, n)))


def shadowed(code: str) -> tuple[list[str], list[str]]:
    """``(Python's own functions the code calls by name, those of them it also assigns)``,
    each in the order met; both empty when the code does not parse."""
    tree = parsed(code)
    if tree is None:
        return [], []
    called: list[str] = []
    assigned: list[str] = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in _BUILTINS and node.func.id not in called):
            called.append(node.func.id)
        elif (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
              and node.id in _BUILTINS and node.id not in assigned):
            assigned.append(node.id)
    return called, [n for n in assigned if n in called]
