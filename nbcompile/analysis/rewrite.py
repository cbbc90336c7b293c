"""Source rewrites for code in the user's cells (issue 23): candidates only, proven elsewhere.

A toggle or a config flag changes how torch.compile treats the code; some graph breaks only go away when
the code itself says what it means in a form Dynamo can trace. This module reads a cell's source and
proposes such rewrites, one per site, as ``Rewrite`` records:

- ``where``: a tensor-valued ``if``/``else`` that picks one of two values (an assignment to one name, a
  conditional expression, a ``return`` in each branch) becomes ``torch.where(cond, a, b)``: Dynamo breaks the
  graph on ``if`` over a tensor (data-dependent control flow) but traces ``torch.where``; only where neither
  branch does anything but give its value (no call that may append, print or update in place), as
  ``torch.where`` evaluates both on every call;
- ``check``: ``if cond: raise ...`` (and ``assert cond, f"..."``) becomes ``torch._check`` (a shape or integer
  condition) or ``torch._assert_async`` (a tensor condition), which stay in the graph;
- ``item``: ``n = t.item()`` (or ``float(t.sum())``) whose value only feeds tensor math keeps ``n`` a 0-dim
  tensor, so the graph need not break to hand a Python number back;
- ``defer``: a ``print`` or logging call in the middle of a function moves to just before its one final
  ``return``: the break stays but no longer splits the function's work into two graphs; only where what it
  prints cannot change on the way (nothing it passes changes, in place or through an alias, what it shows).

Proposals may be speculative: the engine runs each as a trial (the rewritten function compiled, its breaks
counted, its results checked against eager) and keeps only those that prove out. What this module promises is
that every ``after`` parses, keeps the indentation of the lines it replaces and, where it can, their number
(so the untouched lines keep their cell line numbers and the trial's break lines read like the original's),
and that a rewrite only fires where it keeps eager behaviour for the values it targets (a tensor condition, a
value that only feeds tensor math). ``apply`` puts rewrites into the cell text; ``rewritten_function`` builds
the rewritten function object without running the cell or touching the user's namespace.

Pure ``ast``: nothing executed. How an expression reads to Dynamo is judged in ``conditions.py``; what a
call shows and what may change it, or what a branch does besides giving its value, in ``core/dynconfig.py``
(the fix search's guard on ``reorderable_logging_functions`` reads the same); the rewritten function's def is
compiled by ``rewrite_build.py``.
"""

from __future__ import annotations

import ast
import re
import sys
import types
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

from ..core import sideeffects
from ..model.report import Rewrite, RewriteRule
from .conditions import (
    BOOL_TORCH,
    PY_TESTS,
    TENSOR_CALLS,
    ToTensor,
    call_name,
    has_meta,
    is_torch_call,
    mentions,
    python_level,
    reads_only,
    tensor_calls,
)
from .rewrite_build import closure_for, compile_def, find_def, needs_torch

_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef

#: Calls a 0-dim tensor cannot stand in for a Python number in (or that show it to the user).
_PY_ONLY_CALLS = frozenset({
    "print", "range", "int", "float", "bool", "str", "repr", "len", "round", "format", "list", "tuple",
    "enumerate", "zip", "min", "max", "abs", "sum", "divmod", "hex", "oct", "chr", "ord", "input", "open",
})
#: Methods that keep or show a value outside tensor math (a list, a set, a logger, string formatting).
_PY_ONLY_METHODS = frozenset({
    "append", "extend", "insert", "add", "update", "setdefault", "format", "write", "debug", "info", "warning",
    "warn", "error", "exception", "critical", "log", "put", "send", "join",
})
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.FloorDiv, ast.Mod, ast.MatMult)
_LOGGING_CALLS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})
_LOGGER_NAME = re.compile(r"^_?(logger|log|LOGGER|LOG|logging)$")
_INVERSE: dict[type[ast.cmpop], str] = {
    ast.Eq: "!=", ast.NotEq: "==", ast.Lt: ">=", ast.LtE: ">", ast.Gt: "<=", ast.GtE: "<",
}
_PRIORITY: dict[RewriteRule, int] = {"where": 0, "check": 1, "item": 2, "defer": 3}
#: Where an ``after`` puts the value of a deferred ``return`` (a numbered one if the function has it already).
_RESULT = "_result"


# -- the public API -------------------------------------------------------------------------------------


def propose(source: str, lines: Collection[int] | None = None) -> list[Rewrite]:
    """Candidate rewrites in the cell ``source``, in cell-line order; with ``lines`` (1-based cell lines, the
    graph-break lines), only those whose replaced lines cover one of them. A cell that does not parse has
    none. Proposals never overlap: where two rules want the same lines, the earlier rule of ``where``,
    ``check``, ``item``, ``defer`` wins."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: a null byte in the source
        return []
    src = _Source(source)
    found: list[Rewrite] = []
    for label, fn in _functions(tree):
        found.extend(_propose_in(fn, label, src))
    if lines is not None:
        wanted = set(lines)
        found = [r for r in found if wanted.intersection(range(r.cell_line, _last_line(r) + 1))]
    kept: list[Rewrite] = []
    for rewrite in sorted(found, key=lambda r: (_PRIORITY[r.rule], r.cell_line)):
        if not any(_overlap(rewrite, other) for other in kept):
            kept.append(rewrite)
    return sorted(kept, key=lambda r: r.cell_line)


def apply(source: str, rewrites: Sequence[Rewrite]) -> str:
    """``source`` with ``rewrites`` applied (they must not overlap). Each is checked against the text at its
    ``cell_line`` first: a ``ValueError`` says which one no longer matches (the cell changed since)."""
    text = source.split("\n")
    ordered = sorted(rewrites, key=lambda r: r.cell_line, reverse=True)
    for later, earlier in zip(ordered, ordered[1:], strict=False):
        if _overlap(later, earlier):
            raise ValueError(f"rewrites at cell lines {earlier.cell_line} and {later.cell_line} overlap")
    for rewrite in ordered:  # bottom-up: an earlier rewrite's lines do not move
        start, count = rewrite.cell_line - 1, rewrite.before.count("\n") + 1
        current = [line.rstrip("\r") for line in text[start:start + count]]
        if start < 0 or len(current) < count or current != rewrite.before.split("\n"):
            raise ValueError(f"cell line {rewrite.cell_line} does not read as the {rewrite.rule} rewrite expects "
                             "(the cell changed since it was proposed)")
        text[start:start + count] = rewrite.after.split("\n")
    return "\n".join(text)


def rewritten_function(fn: types.FunctionType, source: str, rewrites: Sequence[Rewrite],
                       filename: str) -> types.FunctionType:
    """A copy of ``fn`` (defined in the cell ``source``, compiled as ``filename``) whose code is the cell's def
    with ``rewrites`` applied; rewrites outside that def are left out. Only the def is compiled, at its cell
    lines, so a trial's graph breaks name the same lines; the cell is not run and ``fn.__globals__`` (the
    user's namespace) is not written. ``fn`` is the plain function (a method as its class dict holds it)."""
    code = fn.__code__
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"the cell does not parse ({exc.msg}, line {exc.lineno})") from exc
    found = find_def(tree, fn.__name__, code.co_firstlineno)
    if found is None:
        raise ValueError(f"no def of {fn.__name__} at cell line {code.co_firstlineno} in the cell")
    node, _ = found
    first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
    last = node.end_lineno or node.lineno
    inside = [r for r in rewrites if first <= r.cell_line and _last_line(r) <= last]
    new_tree = ast.parse(apply(source, inside))
    new_found = find_def(new_tree, fn.__name__, code.co_firstlineno)
    if new_found is None:  # the def line itself was rewritten: nothing here proposes that
        raise ValueError(f"the rewrites move or remove the def of {fn.__name__}")
    new_node, classes = new_found
    needs_torch(new_node, fn)
    new_code = compile_def(new_node, classes, code.co_freevars, filename)
    closure = closure_for(fn, new_code)
    if sys.version_info >= (3, 11):  # the name tracebacks show, as the original's
        new_code = new_code.replace(co_qualname=code.co_qualname)
    result = types.FunctionType(new_code, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    result.__kwdefaults__ = dict(fn.__kwdefaults__) if fn.__kwdefaults__ is not None else None
    result.__qualname__ = fn.__qualname__
    result.__module__ = fn.__module__
    result.__doc__ = fn.__doc__
    result.__annotations__ = dict(fn.__annotations__)
    result.__dict__.update(fn.__dict__)
    return result


# -- reading the cell ------------------------------------------------------------------------------------


class _Source:
    """The cell's lines, and the text of a node as it stands in them."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = [line.rstrip("\r") for line in source.split("\n")]

    def block(self, first: int, last: int) -> str:
        """Lines ``first`` .. ``last`` (1-based), whole, joined by newlines."""
        return "\n".join(self.lines[first - 1:last])

    def indent(self, node: ast.stmt) -> str:
        line = self.lines[node.lineno - 1]
        return line[:len(line) - len(line.lstrip())]

    def owns_lines(self, first: ast.stmt, last: ast.stmt) -> bool:
        """True when statements ``first`` .. ``last`` fill their lines alone (no ``a = 1; b = 2``, no code
        after them on the last line but a comment), so whole lines can be replaced."""
        start = self.lines[first.lineno - 1].encode()[:first.col_offset].decode(errors="replace")
        end_line = self.lines[(last.end_lineno or last.lineno) - 1].encode()
        rest = end_line[last.end_col_offset or 0:].decode(errors="replace").strip()
        return not start.strip() and (not rest or rest.startswith("#"))

    def text(self, node: ast.expr) -> str:
        """The expression's source when it sits on one line, else its unparsed text (always one line)."""
        segment = ast.get_source_segment(self.source, node)
        if segment is None or "\n" in segment:
            segment = ast.unparse(node)
        if isinstance(node, (ast.Tuple, ast.GeneratorExp)) and not segment.startswith("("):
            segment = f"({segment})"
        return segment

    def operand(self, node: ast.expr) -> str:
        """The expression's text, in parentheses where it would not bind as an operand of a comparison or of
        an attribute access (``x.sum() > 0``, not ``a + b``: arithmetic binds tighter than a comparison)."""
        text = self.text(node)
        loose = (ast.BoolOp, ast.IfExp, ast.Lambda, ast.NamedExpr, ast.Compare)
        if isinstance(node, loose) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            return f"({text})"
        return text


def _functions(tree: ast.Module) -> Iterator[tuple[str, _FunctionNode]]:
    """The cell's top-level functions and its top-level classes' methods, with their labels."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{node.name}.{sub.name}", sub


@dataclass
class _Site:
    """One statement in its block, and the innermost function it runs in."""

    stmt: ast.stmt
    block: list[ast.stmt]
    index: int
    owner: _FunctionNode


def _sites(fn: _FunctionNode) -> Iterator[_Site]:
    """Every statement of ``fn``'s body, in nested blocks and nested defs too."""

    def walk(block: list[ast.stmt], owner: _FunctionNode) -> Iterator[_Site]:
        for i, stmt in enumerate(block):
            yield _Site(stmt, block, i, owner)
            inner = stmt if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) else owner
            if isinstance(stmt, ast.ClassDef):
                continue
            for name in ("body", "orelse", "finalbody"):
                sub = getattr(stmt, name, None)
                if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
                    yield from walk(sub, inner)
            for handler in getattr(stmt, "handlers", ()):
                yield from walk(handler.body, owner)
            for case in getattr(stmt, "cases", ()):
                yield from walk(case.body, owner)

    yield from walk(fn.body, fn)


def _propose_in(fn: _FunctionNode, label: str, src: _Source) -> Iterator[Rewrite]:
    rules: list[tuple[RewriteRule, Callable[[_Site, _Source], _Edit | None]]] = [
        ("where", _where), ("check", _check), ("item", _item)]
    for site in _sites(fn):
        for rule, make in rules:
            edit = make(site, src)
            if edit is not None:
                yield _rewrite(src, edit, rule, label)
                break
    edit = _defer(fn, src)
    if edit is not None:
        yield _rewrite(src, edit, "defer", label)


@dataclass
class _Edit:
    """Lines ``first`` .. ``last`` of the cell become ``after`` (whole lines, indentation included)."""

    first: int
    last: int
    after: list[str]


def _rewrite(src: _Source, edit: _Edit, rule: RewriteRule, label: str) -> Rewrite:
    return Rewrite(edit.first, src.block(edit.first, edit.last), "\n".join(edit.after), rule, label)


def _last_line(rewrite: Rewrite) -> int:
    return rewrite.cell_line + rewrite.before.count("\n")


def _overlap(a: Rewrite, b: Rewrite) -> bool:
    return a.cell_line <= _last_line(b) and b.cell_line <= _last_line(a)


def _span(first: ast.stmt, last: ast.stmt) -> tuple[int, int]:
    return first.lineno, last.end_lineno or last.lineno


def _call_lines(indent: str, head: str, args: list[str], count: int) -> list[str]:
    """``head(arg, ...)`` over ``count`` lines where the arguments allow (one per line, the rest on the last),
    so a rewrite keeps the line count of what it replaces; on one line otherwise."""
    if count <= 1 or len(args) < count - 1:
        return [f"{indent}{head}({', '.join(args)})"]
    inner = indent + "    "
    rows = [*args[:count - 2], ", ".join(args[count - 2:])]
    return [f"{indent}{head}(", *(f"{inner}{row}," for row in rows[:-1]), f"{inner}{rows[-1]})"]


def _trailing_comment(src: _Source, stmt: ast.stmt) -> str:
    """The ``  # ...`` after a one-line statement, kept on its rewrite."""
    if stmt.end_lineno != stmt.lineno:
        return ""
    line = src.lines[stmt.lineno - 1].encode()
    rest = line[stmt.end_col_offset or 0:].decode(errors="replace")
    return rest.rstrip() if rest.strip().startswith("#") else ""


# -- conditions: tensor tests as text ------------------------------------------------------------------


def _tensor_cond(src: _Source, test: ast.expr) -> str:
    """The text of ``test`` as a tensor condition (its own text when nothing needs changing)."""
    if not any(isinstance(n, (ast.BoolOp, ast.UnaryOp)) or (isinstance(n, ast.Call) and call_name(n) == "item")
               for n in ast.walk(test)):
        return src.text(test)
    copy = ast.parse(ast.unparse(test), mode="eval").body
    return ast.unparse(ToTensor().visit(copy))


# -- where -----------------------------------------------------------------------------------------------


def _where(site: _Site, src: _Source) -> _Edit | None:
    """``if c: y = a else: y = b`` (or ``y = a if c else b``, or the same with ``return``) ->
    ``torch.where(c, a, b)``, for a ``c`` that is not obviously a Python-level test."""
    stmt = site.stmt
    picked = _picks(site)
    if picked is None:
        return None
    head, test, a, b, last = picked
    if python_level(test) or not all(reads_only(e) for e in (test, a, b)):
        return None
    if any(sideeffects.side_effect(e) for e in (a, b)):  # torch.where evaluates both on every call: a branch
        return None  # that appends, prints, updates in place or calls what nbcompile cannot see into stays an if
    if not src.owns_lines(stmt, last):
        return None
    if all(isinstance(e, ast.Constant) for e in (a, b)):
        # torch.where gives a tensor where the code had a Python number: only where that number feeds tensor
        # math (the item rule's test), never for a value returned as it is
        name = head.removesuffix(" = ")
        if head == "return " or not _tensor_only_uses(site.owner, name, stmt):
            return None
    first, end = _span(stmt, last)
    args = [_tensor_cond(src, test), src.text(a), src.text(b)]
    return _Edit(first, end, _call_lines(src.indent(stmt), f"{head}torch.where", args, end - first + 1))


def _picks(site: _Site) -> tuple[str, ast.expr, ast.expr, ast.expr, ast.stmt] | None:
    """(``"y = "`` or ``"return "``, test, value if true, value if false, the last statement replaced)."""
    stmt = site.stmt
    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.IfExp) and _simple_target(stmt):
        target = stmt.targets[0]
        assert isinstance(target, ast.Name)
        return f"{target.id} = ", stmt.value.test, stmt.value.body, stmt.value.orelse, stmt
    if isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.IfExp):
        return "return ", stmt.value.test, stmt.value.body, stmt.value.orelse, stmt
    if not isinstance(stmt, ast.If) or len(stmt.body) != 1:
        return None
    then, orelse = stmt.body[0], stmt.orelse
    if len(orelse) == 1 and not isinstance(orelse[0], ast.If):
        other = orelse[0]
        if _simple_target(then) and _simple_target(other):
            assert isinstance(then, ast.Assign) and isinstance(other, ast.Assign)
            name, other_name = then.targets[0], other.targets[0]
            assert isinstance(name, ast.Name) and isinstance(other_name, ast.Name)
            if name.id == other_name.id:
                return f"{name.id} = ", stmt.test, then.value, other.value, stmt
        if isinstance(then, ast.Return) and isinstance(other, ast.Return) and then.value and other.value:
            return "return ", stmt.test, then.value, other.value, stmt
        return None
    if orelse:
        return None
    following = site.block[site.index + 1] if site.index + 1 < len(site.block) else None
    if isinstance(then, ast.Return) and then.value and isinstance(following, ast.Return) and following.value:
        return "return ", stmt.test, then.value, following.value, following  # if c: return a / return b
    if isinstance(then, ast.Assign) and _simple_target(then) and _bound_before(site, then):
        # if c: y = a  ->  y = torch.where(c, a, y)
        name = then.targets[0]
        assert isinstance(name, ast.Name)
        return f"{name.id} = ", stmt.test, then.value, ast.Name(name.id, ast.Load()), stmt
    return None


def _simple_target(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)


def _bound_before(site: _Site, assign: ast.Assign) -> bool:
    """True when the name ``assign`` sets already holds a value before the ``if``: a parameter, or a plain
    assignment earlier in the same block (so ``torch.where(c, a, y)`` reads a value that exists)."""
    target = assign.targets[0]
    assert isinstance(target, ast.Name)
    args = site.owner.args
    if target.id in {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}:
        return True
    return any(_simple_target(s) and isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name)
               and s.targets[0].id == target.id for s in site.block[:site.index])


# -- check -----------------------------------------------------------------------------------------------


def _check(site: _Site, src: _Source) -> _Edit | None:
    """``if c: raise E(msg)`` -> ``torch._check(not c, lambda: msg)`` for a shape or integer ``c``, or
    ``torch._assert_async(torch.logical_not(c), "msg")`` for a tensor ``c``; ``assert c, f"..."`` on a
    tensor -> ``torch._assert_async(c, "...")`` (with a plain string message Dynamo traces the assert
    itself)."""
    stmt = site.stmt
    if isinstance(stmt, ast.Assert):
        return _check_assert(stmt, src)
    if not (isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1
            and isinstance(stmt.body[0], ast.Raise) and stmt.body[0].exc is not None):
        return None
    raise_ = stmt.body[0]
    assert raise_.exc is not None
    test, message = stmt.test, _raise_message(raise_.exc)
    if not src.owns_lines(stmt, raise_) or not reads_only(test) or _typed_test(test):
        return None
    first, last = _span(stmt, raise_)
    indent, count = src.indent(stmt), last - first + 1
    if tensor_calls(test) or mentions(test, calls={"item"}):
        if mentions(test, calls=BOOL_TORCH) or (has_meta(test) and not _one_comparison(test)):
            return None  # mixed Python and tensor parts: no single form takes both
        ok = _negated_tensor(src, test)
        args = [ok, repr(_plain_message(message, raise_.exc))]
        return _Edit(first, last, _call_lines(indent, "torch._assert_async", args, count))
    if has_meta(test) or _int_compare(test) or mentions(test, calls=BOOL_TORCH):
        args = [_negated(src, test)]
        if message is not None:
            args.append(f"lambda: {src.text(message)}")
        return _Edit(first, last, _call_lines(indent, "torch._check", args, count))
    return None


def _one_comparison(test: ast.expr) -> bool:
    """``t.sum() != x.shape[1]``: one comparison, no ``and``/``or``/``not``, one side a tensor computation with no
    size in it and the other a Python number (a size) with no tensor call: the tensor side makes the whole a
    tensor. Not when the tensor side is made a Python number (``int(t.sum())``, ``math.``, ``np.``)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    if any(isinstance(node, ast.BoolOp) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not))
           for node in ast.walk(test)):
        return False
    if any(isinstance(node, ast.Call) and (
            (isinstance(node.func, ast.Name) and node.func.id in ("int", "float", "bool", "len", "round"))
            or (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                and node.func.value.id in ("math", "np", "numpy"))) for node in ast.walk(test)):
        return False
    left, right = test.left, test.comparators[0]
    return any(bool(tensor_calls(a)) and not has_meta(a) and has_meta(b) and not tensor_calls(b)
               for a, b in ((left, right), (right, left)))


def _check_assert(stmt: ast.Assert, src: _Source) -> _Edit | None:
    test, message = stmt.test, stmt.msg
    if isinstance(message, ast.Constant) and isinstance(message.value, str):
        return None  # Dynamo turns ``assert tensor_cond, "text"`` into an in-graph assert already
    if not (tensor_calls(test) or mentions(test, calls={"item"})) or has_meta(test) or _typed_test(test):
        return None
    if not src.owns_lines(stmt, stmt) or not reads_only(test):
        return None
    args = [_tensor_cond(src, test)]
    if message is not None:
        args.append(repr(_plain_message(message, None)))
    first, last = _span(stmt, stmt)
    return _Edit(first, last, _call_lines(src.indent(stmt), "torch._assert_async", args, last - first + 1))


def _typed_test(test: ast.expr) -> bool:
    """``is``, ``in``, ``isinstance``, ``hasattr``: tests of types and membership, not values."""
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn))
                                                 for op in node.ops):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PY_TESTS - {"len"}:
            return True
    return False


def _int_compare(test: ast.expr) -> bool:
    """A comparison against an integer literal (``if n_heads % 2 != 0``): a Python or symbolic int."""
    for node in ast.walk(test):
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                if isinstance(operand, ast.Constant) and type(operand.value) is int:
                    return True
    return False


def _raise_message(exc: ast.expr) -> ast.expr | None:
    if isinstance(exc, ast.Call) and exc.args and not isinstance(exc.args[0], ast.Starred):
        return exc.args[0]
    return None


def _plain_message(message: ast.expr | None, exc: ast.expr | None) -> str:
    """A message as a plain string (``_assert_async`` takes no f-string): an f-string's text with its fields
    left as ``{name}``; the exception's name when there is no message."""
    if isinstance(message, ast.Constant) and isinstance(message.value, str):
        return message.value
    if isinstance(message, ast.JoinedStr):
        parts = []
        for value in message.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                parts.append("{" + ast.unparse(value.value) + "}")
        return "".join(parts)
    if message is not None:
        return ast.unparse(message)
    if exc is not None:
        return ast.unparse(exc.func if isinstance(exc, ast.Call) else exc)
    return "assertion failed"


def _negated(src: _Source, test: ast.expr) -> str:
    """``not test`` for ``torch._check`` (ints and bools: a comparison is inverted, ``not x`` unwrapped)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return src.text(test.operand)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _INVERSE:
        inverse = _INVERSE[type(test.ops[0])]
        return f"{src.operand(test.left)} {inverse} {src.operand(test.comparators[0])}"
    return f"not ({src.text(test)})"


def _negated_tensor(src: _Source, test: ast.expr) -> str:
    """``not test`` as a tensor (``torch.logical_not``: inverting ``>`` would change what NaN gives)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _tensor_cond(src, test.operand)
    return f"torch.logical_not({_tensor_cond(src, test)})"


# -- item ------------------------------------------------------------------------------------------------


def _item(site: _Site, src: _Source) -> _Edit | None:
    """``n = t.item()`` (or ``float(t.sum())``, ``int(mask.sum())``) -> ``n = t`` kept as a 0-dim tensor,
    where every use of ``n`` is tensor math: an arithmetic operand or an argument of a ``torch`` function."""
    stmt = site.stmt
    if not (_simple_target(stmt) and isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)):
        return None
    target = stmt.targets[0]
    assert isinstance(target, ast.Name)
    value = _kept_tensor(stmt.value, src)
    if value is None or not src.owns_lines(stmt, stmt):
        return None
    if not _tensor_only_uses(site.owner, target.id, stmt):
        return None
    first, last = _span(stmt, stmt)
    return _Edit(first, last, [f"{src.indent(stmt)}{target.id} = {value}{_trailing_comment(src, stmt)}"])


def _kept_tensor(call: ast.Call, src: _Source) -> str | None:
    """The text that keeps ``call``'s tensor as a tensor, or None when ``call`` is no tensor-to-Python call."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "item" and not call.args and not call.keywords:
        return src.text(func.value)
    if (isinstance(func, ast.Name) and func.id in ("float", "int") and len(call.args) == 1 and not call.keywords
            and _tensor_chain(call.args[0])):
        # ``int()`` truncates toward zero and so does ``.long()``; ``.float()`` keeps a float dtype
        return f"{src.operand(call.args[0])}.{'float' if func.id == 'float' else 'long'}()"
    return None


def _tensor_chain(expr: ast.expr) -> bool:
    """A call that gives a tensor: a tensor method (``x.sum()``, ``(a - b).abs().max()``) or ``torch.f(...)``."""
    if not isinstance(expr, ast.Call):
        return False
    if is_torch_call(expr):
        return call_name(expr) not in BOOL_TORCH
    return isinstance(expr.func, ast.Attribute) and expr.func.attr in TENSOR_CALLS


def _scope_nodes(owner: _FunctionNode) -> Iterator[ast.AST]:
    """The nodes of ``owner``'s body, nested defs and lambdas included (a read there is a closure read)."""
    for stmt in owner.body:
        yield from ast.walk(stmt)


def _parents(owner: _FunctionNode) -> dict[int, ast.AST]:
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(owner):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    return parents


def _tensor_only_uses(owner: _FunctionNode, name: str, assign: ast.stmt) -> bool:
    """True when ``name`` (set once, by ``assign``) could hold a 0-dim tensor instead of a Python number:
    every read is tensor math (an arithmetic operand, an argument of a ``torch`` function), and a name
    computed from it alone obeys the same. Never a test (``if n``, a comparison), ``range(n)``, an f-string,
    ``print``, ``.append(n)`` or a ``return n``."""
    parents = _parents(owner)
    pending, seen = [name], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        stores = [n for n in _scope_nodes(owner) if isinstance(n, ast.Name) and n.id == current
                  and not isinstance(n.ctx, ast.Load)]
        declared = any(isinstance(n, (ast.Global, ast.Nonlocal)) and current in n.names for n in _scope_nodes(owner))
        if len(stores) != 1 or declared or _in_nested_scope(stores[0], owner, parents):
            return False
        for node in _scope_nodes(owner):
            if isinstance(node, ast.Name) and node.id == current and isinstance(node.ctx, ast.Load):
                if _in_nested_scope(node, owner, parents):
                    return False
                verdict = _use(node, parents, seen | {current})
                if verdict is False:
                    return False
                if isinstance(verdict, str):
                    pending.append(verdict)
    return True


def _in_nested_scope(node: ast.AST, owner: _FunctionNode, parents: dict[int, ast.AST]) -> bool:
    current = parents.get(id(node))
    while current is not None and current is not owner:
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
                                ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return True
        current = parents.get(id(current))
    return False


def _use(node: ast.Name, parents: dict[int, ast.AST], tainted: set[str]) -> bool | str:
    """How one read of a would-be tensor is used: True (tensor math, fine), False (needs a Python number), or
    the name it flows into unchanged (``k = n * 2``: ``k`` must obey the same)."""
    child: ast.AST = node
    parent = parents.get(id(child))
    mixed = False  # the arithmetic also reads something other than the would-be tensors and literals
    while isinstance(parent, (ast.BinOp, ast.UnaryOp)):
        if isinstance(parent, ast.BinOp):
            if not isinstance(parent.op, _ARITHMETIC):
                return False
            other = parent.right if parent.left is child else parent.left
            mixed = mixed or _reads_other(other, tainted)
        elif not isinstance(parent.op, (ast.USub, ast.UAdd)):
            return False
        child, parent = parent, parents.get(id(parent))
    if isinstance(parent, ast.keyword):
        child, parent = parent, parents.get(id(parent))
    if isinstance(parent, ast.Call) and child is not parent.func:
        if is_torch_call(parent):
            return True
        return mixed and call_name(parent) not in _PY_ONLY_CALLS | _PY_ONLY_METHODS
    if isinstance(parent, ast.Assign) and child is parent.value:
        if len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
            return True if mixed else parent.targets[0].id
        return False
    if isinstance(parent, ast.AugAssign) and child is parent.value and isinstance(parent.target, ast.Name):
        return True if mixed else parent.target.id
    if not mixed:
        return False
    if isinstance(parent, ast.Attribute):
        return True  # (x * n).sum()
    if isinstance(parent, ast.Subscript):
        return child is parent.value
    if isinstance(parent, (ast.Return, ast.Tuple, ast.List)):
        return not any(isinstance(p, (ast.JoinedStr, ast.Compare)) for p in _ancestors(parent, parents))
    return False


def _reads_other(expr: ast.expr, tainted: set[str]) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id not in tainted:
            return True
        if isinstance(node, (ast.Call, ast.Attribute, ast.Subscript)):
            return True
    return False


def _ancestors(node: ast.AST, parents: dict[int, ast.AST]) -> Iterator[ast.AST]:
    current = parents.get(id(node))
    while current is not None:
        yield current
        current = parents.get(id(current))


# -- defer -----------------------------------------------------------------------------------------------


def _defer(fn: _FunctionNode, src: _Source) -> _Edit | None:
    """``print``/``logger.info``/``warnings.warn`` calls in the body moved to just before the one final
    ``return`` (``return e`` -> ``_result = e``, the calls, ``return _result``); each moved call's line is left
    as a comment, so the lines between keep their numbers. Only top-level calls whose output cannot change:
    their arguments only read, nothing they pass (the return's own work included) rebinds or changes in place
    what they show or anything that may alias it (``sideeffects.changed_after``), and no print or log call they
    pass stays, which would then show before them."""
    body = fn.body
    final = body[-1]
    if not isinstance(final, ast.Return) or len(body) < 2:
        return None
    parents = _parents(fn)
    for node in _scope_nodes(fn):
        if node is not final and isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)) \
                and not _in_nested_scope(node, fn, parents):
            return None
    moved: list[int] = []
    for i in reversed(range(len(body) - 1)):  # from the return up: a call kept in place is a barrier
        if _deferrable(fn, body[i], body[i + 1:]):
            moved.insert(0, i)
        elif _shows(body[i]):
            break  # the calls above it would now print after it
    # a call already at the end (only moved calls between it and the return) gains nothing, unless the
    # return itself computes (``return x + self.fc2(h)``): the call then moves after that work
    computes = final.value is not None and not isinstance(final.value, (ast.Name, ast.Constant))
    while moved and not computes and all(j in moved for j in range(moved[-1], len(body) - 1)):
        moved.pop()
    if not moved or not all(src.owns_lines(body[i], body[i]) for i in moved) or not src.owns_lines(final, final):
        return None
    first, last = body[moved[0]].lineno, final.end_lineno or final.lineno
    after = src.lines[first - 1:final.lineno - 1]
    for i in moved:
        stmt = body[i]
        start, end = _span(stmt, stmt)
        after[start - first:end - first + 1] = [f"{src.indent(stmt)}# {ast.unparse(_call(stmt).func)} moved before the "
                                                "return", *([""] * (end - start))]
    calls = [line for i in moved for line in src.lines[body[i].lineno - 1:(body[i].end_lineno or 0)]]
    indent = src.indent(final)
    if final.value is None or isinstance(final.value, (ast.Name, ast.Constant)):
        after += calls + src.lines[final.lineno - 1:last]
    else:
        result = _fresh_name(fn)
        returned = src.lines[final.lineno - 1:last]
        prefix = returned[0].encode()[:final.col_offset + len("return")].decode()
        after += [f"{indent}{result} = {returned[0][len(prefix):].lstrip()}", *returned[1:], *calls,
                  f"{indent}return {result}"]
    return _Edit(first, last, after)


def _call(stmt: ast.stmt) -> ast.Call:
    assert isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
    return stmt.value


def _logging_call(call: ast.Call) -> bool:
    """``print(...)``, ``warnings.warn(...)``, ``logger.info(...)`` (a logger by its usual names)."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id == "print"
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return (func.value.id == "warnings" and func.attr == "warn") or \
            (bool(_LOGGER_NAME.match(func.value.id)) and func.attr in _LOGGING_CALLS)
    return False


def _shows(stmt: ast.stmt) -> bool:
    """Whether ``stmt`` prints, warns or logs itself (a call the defer rule would move past)."""
    return any(isinstance(n, ast.Call) and _logging_call(n) for n in ast.walk(stmt))


def _deferrable(fn: _FunctionNode, stmt: ast.stmt, later: list[ast.stmt]) -> bool:
    """A ``print``/logging/``warnings.warn`` call whose arguments only read, and whose output nothing ``later``
    (the final ``return``, whose value is now computed before it, included) can change: no rebinding of a name
    it reads, no change in place of what it shows or of anything that may alias it, no call handed one of those
    that nbcompile cannot see into (``sideeffects.changed_after``)."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)) or not _logging_call(stmt.value):
        return False
    call = stmt.value
    if not all(reads_only(a) for a in [*call.args, *(k.value for k in call.keywords)]):
        return False
    return sideeffects.changed_after(fn, call, later, rebinding=True, unknown_calls=True) is None


def _fresh_name(fn: _FunctionNode) -> str:
    used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | {a.arg for a in ast.walk(fn)
                                                                   if isinstance(a, ast.arg)}
    name, k = _RESULT, 1
    while name in used:
        name, k = f"{_RESULT}{k}", k + 1
    return name


__all__ = ["apply", "propose", "rewritten_function"]
