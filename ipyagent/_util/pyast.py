"""Reading the model's Python without running it: one parse that never raises, and what
the loop asks of a call's code (what it last assigns, loops over, tests, calls, moves)."""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Sequence

__all__ = ["parsed", "comprehension_names", "last_assigned", "iterated", "stateful",
           "tested_in_loop", "filter_probe", "shadowed", "set_from_none",
           "subtracted", "split_joined"]


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
        test = _subject(next((n.test for n in ast.walk(loop) if isinstance(n, ast.If)), None))
        if test is None or isinstance(test, ast.Name) or not _one_line(test, 4 * limit):
            return None
        shown = _unparsed(test)
        return shown if shown is not None and len(shown) <= limit else None
    return None


def filter_probe(code: str, limit: int = 160) -> str | None:
    """Code that prints what the last filter of ``code`` tests, item by item, for the first
    five items: ``print([(year, datetime.date(year, 2, 28).isocalendar()[1]) for _, year in
    zip(range(5), range(1900, 2001))])`` for ``sum(1 for year in range(1900, 2001) if
    datetime.date(year, 2, 28).isocalendar()[1] == 2)``; None when no loop or comprehension
    at the top level of it tests its own item, what it goes over may be used up (an iterator
    the code made, a file it opened for writing), or the probe would not be one short line.

    Why: at 1.5B a count of leap years that tested each year's ISO week printed 0 and was
    written again unchanged after the check: a filter that held for nothing is read by
    looking at what it tested. Only the code's own expressions are quoted; ``zip(range(5),
    …)`` takes five items and no more (of ``itertools.count()`` too)."""
    tree = parsed(code)
    if tree is None:
        return None
    # A function's or a class's own loops are not the cell's: their names are not there.
    inner = {id(n) for d in ast.walk(tree) if isinstance(
        d, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
        for n in ast.walk(d) if n is not d}
    found: list[tuple[ast.expr, ast.expr, ast.expr, ast.AST]] = []
    for node in ast.walk(tree):
        if id(node) in inner:
            continue
        if isinstance(node, ast.comprehension) and node.ifs and not node.is_async:
            found.append((node.iter, node.target, node.ifs[0], node))
        elif isinstance(node, ast.For):
            test = next((n.test for n in ast.walk(node) if isinstance(n, ast.If)), None)
            if test is not None:
                found.append((node.iter, node.target, test, node))
    scoped = comprehension_names(tree)
    # What a name was set to: ``with open('t.txt') as f`` or ``f = open('t.txt')`` is read
    # again from open('t.txt'); an iterator the code made (a generator, a csv.reader, a
    # call's result) may be used up by then, and is not offered.
    made: dict[str, ast.expr] = {}
    entered: set[str] = set()  # with … as f: exited by the time a probe runs
    for n in ast.walk(tree):
        if isinstance(n, (ast.With, ast.AsyncWith)):
            made.update((item.optional_vars.id, item.context_expr) for item in n.items
                        if isinstance(item.optional_vars, ast.Name))
            entered.update(item.optional_vars.id for item in n.items
                           if isinstance(item.optional_vars, ast.Name))
        elif isinstance(n, ast.Assign):
            made.update((t.id, n.value) for t in n.targets if isinstance(t, ast.Name))
    for over, target, test, loop in sorted(found, key=lambda f: (f[0].lineno, f[0].col_offset),
                                           reverse=True):
        if isinstance(over, ast.Name) and over.id in made:
            again = made[over.id]
            if _read_open(again):
                over = again
            elif over.id in entered or isinstance(
                    again, (ast.Call, ast.GeneratorExp, ast.Await, ast.Yield)):
                continue
        own = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        subject = _subject(test)
        read = {n.id for n in ast.walk(subject)
                if isinstance(n, ast.Name)} if subject is not None else set()
        # Names the loop's body sets (``parts = line.split()``) are not there in the probe,
        # nor an outer comprehension's item in what this one goes over; ``x := …`` in the
        # test would rebind the probe's own item.
        set_inside = {n.id for n in ast.walk(loop) if isinstance(n, ast.Name)
                      and isinstance(n.ctx, ast.Store)} - own
        if (subject is None or not own & read or read & set_inside
                or any(isinstance(n, ast.NamedExpr) for n in ast.walk(subject))
                or any(isinstance(n, ast.Name) and n.id in scoped - own for n in ast.walk(over))
                or not _one_line(subject, 2 * limit) or not _one_line(over, 2 * limit)):
            continue
        item, seen, source = _unparsed(target), _unparsed(subject), _unparsed(over)
        if item is None or seen is None or source is None:
            return None
        count = "_n" if "_" in own else "_"
        shown = (f"print([{item} for {count}, {item} in zip(range(5), {source})])" if seen == item
                 else f"print([({item}, {seen}) for {count}, {item} in zip(range(5), {source})])")
        return shown if len(shown) <= limit else None
    return None


def _read_open(node: ast.expr) -> bool:
    """``open('t.txt')`` or ``open('t.txt', 'r')``: a file opened for reading, by constant
    arguments (a probe that opened one for writing would empty it)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "open" and not node.keywords and 1 <= len(node.args) <= 2
            and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args)
            and set(str(getattr(node.args[-1], "value", "")) if len(node.args) == 2 else "r")
            <= set("rbt"))


# Methods that change their object or write a file, and return None (``to_csv`` with a path:
# without one it returns the text).
_IN_PLACE = frozenset({"sort", "append", "extend", "insert", "update", "reverse", "clear",
                       "remove", "shuffle", "close"})
_WRITES = frozenset({"to_csv", "to_json", "to_excel", "to_parquet", "to_pickle", "to_html",
                     "to_markdown", "to_string", "savefig"})
# How a NoneType error shows the value was used: as x.attr, x[…], len(x), for … in x.
_USED_AS = (("has no attribute", "attribute"), ("not subscriptable", "item"),
            ("has no len", "len"), ("not iterable", "iterated"))


def set_from_none(code: str, error: str = "") -> list[tuple[str, str]]:
    """``(name, method)`` for each name the code sets to what a method that returns None gave
    (``rows = df[…].to_csv('fr.csv')``, ``names = names.sort()``, ``df = df.drop(…,
    inplace=True)``) and uses later the way ``error`` (a NoneType error's message) says a
    None was used (``len(rows)`` for "has no len()"), in the order set; [] when the code
    does not parse."""
    tree = parsed(code)
    if tree is None:
        return []
    how = next((use for said, use in _USED_AS if said in error), None)
    attribute = re.search(r"has no attribute '(\w{1,60})'", error)
    used: dict[str, list[tuple[int, int]]] = {}  # each name's uses of that kind, where
    for n in ast.walk(tree):
        name = None
        if how == "attribute" and isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            name = n.value.id if attribute is None or n.attr == attribute.group(1) else None
        elif how == "item" and isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name):
            name = n.value.id
        elif how == "len" and isinstance(n, ast.Call) and isinstance(n.func, ast.Name) \
                and n.func.id == "len" and n.args and isinstance(n.args[0], ast.Name):
            name = n.args[0].id
        elif how == "iterated" and isinstance(n, (ast.For, ast.comprehension)) \
                and isinstance(n.iter, ast.Name):
            name = n.iter.id
        elif how is None and isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            name = n.id
        if name is not None:
            where = n.iter if isinstance(n, (ast.For, ast.comprehension)) else n
            assert isinstance(where, (ast.expr, ast.stmt))
            used.setdefault(name, []).append((where.lineno, where.col_offset))
    found: list[tuple[int, int, str, str]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)):
            continue
        call, method = node.value, node.value.func.attr
        in_place = any(k.arg == "inplace" and isinstance(k.value, ast.Constant)
                       and k.value.value is True for k in call.keywords)
        written = method in _WRITES and (bool(call.args) or any(
            k.arg in ("path_or_buf", "path", "excel_writer", "buf", "fname", "fp")
            for k in call.keywords))
        if not (method in _IN_PLACE or written or in_place):
            continue
        name = node.targets[0].id
        if len(name) <= 40 and any(at > (node.lineno, node.col_offset) for at in used.get(name, ())):
            found.append((node.lineno, node.col_offset, name, method))
    return [(name, method) for _, _, name, method in sorted(found)]


def subtracted(code: str, lines: Sequence[int] = ()) -> tuple[str, str] | None:
    """``(a, b)`` of an ``a - b`` between two names (``end_time - start_time``), each at most
    40 characters: the last on the last of ``lines`` that has one (the lines a traceback
    pointed at), else the last in the code; None when there is none or it does not parse."""
    tree = parsed(code)
    pairs = sorted((n.lineno, n.col_offset, n.left.id, n.right.id) for n in ast.walk(tree)
                   if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub)
                   and isinstance(n.left, ast.Name) and isinstance(n.right, ast.Name)
                   and len(n.left.id) <= 40 and len(n.right.id) <= 40) if tree is not None else []
    for line in reversed(lines):
        on_it = [(a, b) for at, _, a, b in pairs if at == line]
        if on_it:
            return on_it[-1]
    return (pairs[-1][2], pairs[-1][3]) if pairs else None


def _subject(test: ast.expr | None) -> ast.expr | None:
    """What a condition looks at: ``x`` of ``x.isdigit()``, ``d.weekday()`` of
    ``d.weekday() == 0 and …``; None for a constant or no condition."""
    while isinstance(test, (ast.BoolOp, ast.UnaryOp)):
        test = test.values[0] if isinstance(test, ast.BoolOp) else test.operand
    if isinstance(test, ast.Compare):
        test = test.left
    elif isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute):
        test = test.func.value  # x.isdigit(): x
    return None if test is None or isinstance(test, ast.Constant) else test


def _one_line(node: ast.expr, limit: int) -> bool:
    """True when ``node`` sits on one line of the code, in at most ``limit`` characters."""
    return (node.end_lineno == node.lineno
            and (node.end_col_offset or 0) - node.col_offset <= limit)


def _unparsed(node: ast.AST) -> str | None:
    """``ast.unparse(node)``; None for a tree too deep to (a long a+a+…)."""
    try:
        return ast.unparse(node)
    except (RecursionError, ValueError, MemoryError):
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


_NAME_AT = re.compile(r"[A-Za-z_]\w*")
# A line that opens a block and holds its body after the colon: ``for x in xs: a b``.
_HEADER = re.compile(r"\s*(?:async\s+)?(?:for|while|if|elif|else|with|def|try|except|finally)\b")
_BLOCK_STARTS = ("for", "while", "if", "with", "def", "class", "try", "async", "import", "from")


def split_joined(code: str, tries: int = 6) -> tuple[int, str] | None:
    """``(the first line that held two statements, the code with each statement that followed
    another on its line set apart)`` when that is all that kept the code from compiling; None
    otherwise (it compiles, fails otherwise, is over 5,000 characters, or a part set apart
    would be a bare name or value: ``total = price quantity`` is a missing operator).

    Set apart: on a line of its own at the line's indent, or, in a block's body written after
    its colon (``for i in r: print(i) total += i``), after ``; `` so that it stays in the body;
    a block statement that follows (``… with open(b) as g: …``) always on a line of its own.

    Seen at 1.5B: ``with open('note.txt') as f: text = f.read().upper() with open('upper.txt',
    'w') as f: f.write(text)`` on one line, "invalid syntax", then an answer that the code
    "has a syntax error"; Python points at the second statement's first name."""
    if len(code) > 5000:
        return None
    current, first = code, 0
    parts: list[tuple[int, int]] = []
    for _ in range(tries):
        try:
            tree = ast.parse(current)
            compile(tree, "<cell>", "exec", dont_inherit=True)  # 'return' outside a function too
        except SyntaxError as exc:
            if exc.msg != "invalid syntax" or not exc.lineno or not exc.offset:
                return None
            number, at = exc.lineno, exc.offset - 1
        except (ValueError, RecursionError, MemoryError, TypeError):
            return None
        else:
            return (first, current) if first and not _bare(tree, parts) else None
        lines = current.split("\n")
        if number > len(lines):
            return None
        line = lines[number - 1]
        before = line[:at].rstrip()
        # The second statement's first name, after a space that ends something complete.
        name = _NAME_AT.match(line, at)
        if (name is None or at == 0 or not line[at - 1].isspace() or not before.strip()
                or not re.search(r"[\w)\]}'\";]$", before)):
            return None
        before = before.rstrip(";").rstrip()
        if _HEADER.match(line) and ":" in before and name.group() not in _BLOCK_STARTS:
            lines[number - 1] = f"{before}; {line[at:]}"
            parts.append((number, len(before) + 2))
        else:
            indent = line[:len(line) - len(line.lstrip())]
            lines[number - 1:number] = [before, indent + line[at:]]
            parts.append((number + 1, len(indent)))
        current, first = "\n".join(lines), first or number
    return None


def _bare(tree: ast.AST, parts: list[tuple[int, int]]) -> bool:
    """A statement set apart (at ``parts``' line and column) is a bare name or value: the
    code more likely lacks an operator than a line break."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Expr) and (node.lineno, node.col_offset) in parts
                and isinstance(node.value, (ast.Name, ast.Constant, ast.Attribute, ast.Subscript))):
            return True
    return False
