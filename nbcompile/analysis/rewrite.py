"""Source rewrites for code in the user's cells (issue 23): candidates only, proven elsewhere.

A toggle or a config flag changes how torch.compile treats the code; some graph breaks only go away when
the code itself says what it means in a form Dynamo can trace. This module reads a cell's source and
proposes such rewrites, one per site, as ``Rewrite`` records:

- ``where``: a tensor-valued ``if``/``else`` that picks one of two values (an assignment to one name, a
  conditional expression, a ``return`` in each branch) becomes ``torch.where(cond, a, b)``: Dynamo breaks the
  graph on ``if`` over a tensor (data-dependent control flow) but traces ``torch.where``;
- ``check``: ``if cond: raise ...`` (and ``assert cond, f"..."``) becomes ``torch._check`` (a shape or integer
  condition) or ``torch._assert_async`` (a tensor condition), which stay in the graph;
- ``item``: ``n = t.item()`` (or ``float(t.sum())``) whose value only feeds tensor math keeps ``n`` a 0-dim
  tensor, so the graph need not break to hand a Python number back;
- ``defer``: a ``print`` or logging call in the middle of a function moves to just before its one final
  ``return``: the break stays but no longer splits the function's work into two graphs.

Proposals may be speculative: the engine runs each as a trial (the rewritten function compiled, its breaks
counted, its results checked against eager) and keeps only those that prove out. What this module promises is
that every ``after`` parses, keeps the indentation of the lines it replaces and, where it can, their number
(so the untouched lines keep their cell line numbers and the trial's break lines read like the original's),
and that a rewrite only fires where it keeps eager behaviour for the values it targets (a tensor condition, a
value that only feeds tensor math). ``apply`` puts rewrites into the cell text; ``rewritten_function`` builds
the rewritten function object without running the cell or touching the user's namespace.

Pure ``ast``: no torch import, nothing executed.
"""

from __future__ import annotations

import ast
import re
import sys
import types
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

from ..model.report import Rewrite, RewriteRule

_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef

#: Tensor attributes and methods that read metadata (static or symbolic sizes), never values: a test made of
#: them is decided at trace time, so Dynamo does not break on it.
_META_ATTRS = frozenset({
    "shape", "ndim", "dtype", "device", "training", "is_cuda", "requires_grad", "layout", "is_sparse",
    "is_leaf", "is_meta", "is_quantized", "names",
})
_META_CALLS = frozenset({
    "dim", "size", "numel", "ndimension", "nelement", "stride", "is_contiguous", "element_size",
    "is_floating_point", "is_complex", "get_device", "storage_offset",
})
#: Builtins whose result is a plain Python value decided from types or lengths.
_PY_TESTS = frozenset({"isinstance", "issubclass", "hasattr", "callable", "len", "type", "getattr", "id"})
#: Calls that give a tensor (a reduction, a predicate, elementwise math): a condition made of them is a
#: tensor, which ``if`` turns into a data-dependent break.
_TENSOR_CALLS = frozenset({
    "any", "all", "sum", "mean", "max", "min", "amax", "amin", "norm", "abs", "std", "var", "prod",
    "count_nonzero", "isnan", "isinf", "isfinite", "isneginf", "isposinf", "eq", "ne", "gt", "lt", "ge", "le",
    "logical_and", "logical_or", "logical_not", "logical_xor", "median", "nansum", "nanmean", "argmax",
    "argmin", "square", "sqrt", "exp", "log", "detach", "clone", "float", "double", "dot", "trace",
    "logsumexp", "cpu", "diff", "cumsum", "sign", "frac", "round", "floor", "ceil",
})
#: torch functions that answer a Python bool (not a tensor): ``torch._check`` takes them, ``_assert_async`` not.
_BOOL_TORCH = frozenset({"allclose", "equal", "is_tensor", "is_floating_point", "is_complex", "is_nonzero"})
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
#: Methods that change the object they are called on: a call of one is not a read.
_MUTATORS = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem", "add",
    "discard", "sort", "reverse", "step", "zero_grad", "backward",
})
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
    found = _find_def(tree, fn.__name__, code.co_firstlineno)
    if found is None:
        raise ValueError(f"no def of {fn.__name__} at cell line {code.co_firstlineno} in the cell")
    node, _ = found
    first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
    last = node.end_lineno or node.lineno
    inside = [r for r in rewrites if first <= r.cell_line and _last_line(r) <= last]
    new_tree = ast.parse(apply(source, inside))
    new_found = _find_def(new_tree, fn.__name__, code.co_firstlineno)
    if new_found is None:  # the def line itself was rewritten: nothing here proposes that
        raise ValueError(f"the rewrites move or remove the def of {fn.__name__}")
    new_node, classes = new_found
    _needs_torch(new_node, fn)
    new_code = _compile_def(new_node, classes, code.co_freevars, filename)
    closure = _closure_for(fn, new_code)
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


# -- conditions ------------------------------------------------------------------------------------------


def _call_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _is_torch_call(node: ast.Call) -> bool:
    """``torch.x(...)``, ``torch.nn.functional.x(...)``, ``F.x(...)``."""
    root: ast.expr = node.func
    while isinstance(root, ast.Attribute):
        root = root.value
    return isinstance(node.func, ast.Attribute) and isinstance(root, ast.Name) and root.id in ("torch", "F")


def _python_level(test: ast.expr, top: bool = True) -> bool:
    """True for a test that is obviously a Python value Dynamo decides while tracing (``x is None``,
    ``isinstance``, ``hasattr``, ``in``, a flag, ``not flag``, comparisons of shapes, lengths, ``.dim()``,
    ``.training``): ``torch.where`` cannot take it and Dynamo does not break on it anyway."""
    if isinstance(test, ast.Constant):
        return True
    if isinstance(test, (ast.Name, ast.Attribute)) and top:
        return True  # a bare flag: ``if training:``, ``if self.use_bias:``
    if isinstance(test, ast.Attribute):
        return test.attr in _META_ATTRS or _python_level(test.value, False)
    if isinstance(test, ast.Subscript):
        return _python_level(test.value, False)
    if isinstance(test, ast.Call):
        func = test.func
        if isinstance(func, ast.Name):
            return func.id in _PY_TESTS
        if isinstance(func, ast.Attribute):
            return func.attr in _META_CALLS or (_is_torch_call(test) and func.attr in _BOOL_TORCH)
        return False
    if isinstance(test, ast.UnaryOp):
        if isinstance(test.op, ast.Not) and isinstance(test.operand, (ast.Name, ast.Attribute)):
            return True
        return _python_level(test.operand, top)
    if isinstance(test, ast.BoolOp):
        return any(_python_level(v, True) for v in test.values)
    if isinstance(test, ast.BinOp):
        return _python_level(test.left, False) and _python_level(test.right, False)
    if isinstance(test, ast.Compare):
        if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in test.ops):
            return True
        operands = [test.left, *test.comparators]
        if any(isinstance(o, ast.Constant) and isinstance(o.value, (str, bytes, type(None))) for o in operands):
            return True
        return all(_python_level(o, False) for o in operands)
    return False


def _tensor_calls(expr: ast.expr) -> bool:
    """True when ``expr`` calls a tensor reduction or predicate (``x.isnan().any()``, ``torch.isinf(x)``)."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _TENSOR_CALLS and node.func.attr not in _BOOL_TORCH:
                return True
    return False


def _mentions(expr: ast.expr, attrs: Collection[str] = (), calls: Collection[str] = ()) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Attribute) and node.attr in attrs:
            return True
        if isinstance(node, ast.Call) and _call_name(node) in calls:
            return True
    return False


def _has_meta(expr: ast.expr) -> bool:
    return _mentions(expr, _META_ATTRS, {*_META_CALLS, "len"})


class _ToTensor(ast.NodeTransformer):
    """A condition as a tensor expression: ``.item()`` dropped, ``and``/``or``/``not`` as logical ops."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if (isinstance(node.func, ast.Attribute) and node.func.attr == "item" and not node.args
                and not node.keywords):
            return node.func.value
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        name = "logical_and" if isinstance(node.op, ast.And) else "logical_or"
        result = node.values[0]
        for value in node.values[1:]:
            result = ast.Call(_torch_attr(name), [result, value], [])
        return result

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.Call(_torch_attr("logical_not"), [node.operand], [])
        return node


def _torch_attr(name: str) -> ast.Attribute:
    return ast.Attribute(ast.Name("torch", ast.Load()), name, ast.Load())


def _tensor_cond(src: _Source, test: ast.expr) -> str:
    """The text of ``test`` as a tensor condition (its own text when nothing needs changing)."""
    if not any(isinstance(n, (ast.BoolOp, ast.UnaryOp)) or (isinstance(n, ast.Call) and _call_name(n) == "item")
               for n in ast.walk(test)):
        return src.text(test)
    copy = ast.parse(ast.unparse(test), mode="eval").body
    return ast.unparse(_ToTensor().visit(copy))


def _reads_only(expr: ast.expr) -> bool:
    """True when evaluating ``expr`` twice, or once more than before, changes nothing: no assignment
    expression, no yield, no in-place method (``x.add_(1)``) or container mutation, no ``next``/``input``."""
    for node in ast.walk(expr):
        if isinstance(node, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)):
            return False
        if isinstance(node, ast.Call):
            name = _call_name(node)
            if (isinstance(node.func, ast.Attribute) and (name.endswith("_") and not name.startswith("_")
                                                          or name in _MUTATORS)):
                return False
            if isinstance(node.func, ast.Name) and name in ("next", "input", "open", "exec", "eval", "setattr"):
                return False
    return False if isinstance(expr, ast.Starred) else True


# -- where -----------------------------------------------------------------------------------------------


def _where(site: _Site, src: _Source) -> _Edit | None:
    """``if c: y = a else: y = b`` (or ``y = a if c else b``, or the same with ``return``) ->
    ``torch.where(c, a, b)``, for a ``c`` that is not obviously a Python-level test."""
    stmt = site.stmt
    picked = _picks(site)
    if picked is None:
        return None
    head, test, a, b, last = picked
    if _python_level(test) or not all(_reads_only(e) for e in (test, a, b)):
        return None
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
    if not src.owns_lines(stmt, raise_) or not _reads_only(test) or _typed_test(test):
        return None
    first, last = _span(stmt, raise_)
    indent, count = src.indent(stmt), last - first + 1
    if _tensor_calls(test) or _mentions(test, calls={"item"}):
        if _has_meta(test) or _mentions(test, calls=_BOOL_TORCH):
            return None  # mixed Python and tensor parts: no single form takes both
        ok = _negated_tensor(src, test)
        args = [ok, repr(_plain_message(message, raise_.exc))]
        return _Edit(first, last, _call_lines(indent, "torch._assert_async", args, count))
    if _has_meta(test) or _int_compare(test) or _mentions(test, calls=_BOOL_TORCH):
        args = [_negated(src, test)]
        if message is not None:
            args.append(f"lambda: {src.text(message)}")
        return _Edit(first, last, _call_lines(indent, "torch._check", args, count))
    return None


def _check_assert(stmt: ast.Assert, src: _Source) -> _Edit | None:
    test, message = stmt.test, stmt.msg
    if isinstance(message, ast.Constant) and isinstance(message.value, str):
        return None  # Dynamo turns ``assert tensor_cond, "text"`` into an in-graph assert already
    if not (_tensor_calls(test) or _mentions(test, calls={"item"})) or _has_meta(test) or _typed_test(test):
        return None
    if not src.owns_lines(stmt, stmt) or not _reads_only(test):
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
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _PY_TESTS - {"len"}:
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
    if _is_torch_call(expr):
        return _call_name(expr) not in _BOOL_TORCH
    return isinstance(expr.func, ast.Attribute) and expr.func.attr in _TENSOR_CALLS


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
        if _is_torch_call(parent):
            return True
        return mixed and _call_name(parent) not in _PY_ONLY_CALLS | _PY_ONLY_METHODS
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
    as a comment, so the lines between keep their numbers. Only top-level calls whose arguments only read
    values that nothing after them changes."""
    body = fn.body
    final = body[-1]
    if not isinstance(final, ast.Return) or len(body) < 2:
        return None
    parents = _parents(fn)
    for node in _scope_nodes(fn):
        if node is not final and isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)) \
                and not _in_nested_scope(node, fn, parents):
            return None
    moved = [i for i, stmt in enumerate(body[:-1]) if _deferrable(stmt, body[i + 1:-1])]
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


def _deferrable(stmt: ast.stmt, later: list[ast.stmt]) -> bool:
    """A ``print``/logging/``warnings.warn`` call whose arguments only read, and read nothing ``later``
    statements rebind or change in place."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    call = stmt.value
    func = call.func
    if isinstance(func, ast.Name):
        ok = func.id == "print"
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        ok = (func.value.id == "warnings" and func.attr == "warn") or \
             (bool(_LOGGER_NAME.match(func.value.id)) and func.attr in _LOGGING_CALLS)
    else:
        ok = False
    args = [*call.args, *(k.value for k in call.keywords)]
    if not ok or not all(_reads_only(a) for a in args):
        return False
    read = {n.id for a in args for n in ast.walk(a) if isinstance(n, ast.Name)}
    return not any(_changes(s, read) for s in later)


def _changes(stmt: ast.stmt, names: set[str]) -> bool:
    """True when ``stmt`` may rebind or change in place one of ``names`` (or what hangs off it)."""
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) and node.id in names:
            return True
        if isinstance(node, (ast.Attribute, ast.Subscript)) and not isinstance(node.ctx, ast.Load) \
                and _root(node) in names:
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _root(node.func.value) in names:
            name = node.func.attr
            if (name.endswith("_") and not name.startswith("_")) or name in _MUTATORS:
                return True
        if isinstance(node, (ast.Global, ast.Nonlocal)) and names.intersection(node.names):
            return True
    return False


def _root(node: ast.expr) -> str:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _fresh_name(fn: _FunctionNode) -> str:
    used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | {a.arg for a in ast.walk(fn)
                                                                   if isinstance(a, ast.arg)}
    name, k = _RESULT, 1
    while name in used:
        name, k = f"{_RESULT}{k}", k + 1
    return name


# -- building the rewritten function ---------------------------------------------------------------------


def _find_def(tree: ast.Module, name: str, firstlineno: int) -> tuple[_FunctionNode, list[str]] | None:
    """The def of ``name`` whose first line (its first decorator's, if any) is ``firstlineno``, with the
    names of the classes it sits in (outermost first)."""

    def walk(body: list[ast.stmt], classes: list[str]) -> tuple[_FunctionNode, list[str]] | None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                starts = {node.lineno, *(d.lineno for d in node.decorator_list[:1])}
                if node.name == name and firstlineno in starts:
                    return node, classes
                found = walk(node.body, [])
            elif isinstance(node, ast.ClassDef):
                found = walk(node.body, [*classes, node.name])
            else:
                found = None
                for field in ("body", "orelse", "finalbody"):
                    sub = getattr(node, field, None)
                    if isinstance(sub, list) and found is None:
                        found = walk([s for s in sub if isinstance(s, ast.stmt)], classes)
            if found is not None:
                return found
        return None

    return walk(tree.body, [])


def _needs_torch(node: _FunctionNode, fn: types.FunctionType) -> None:
    """Refuse a rewrite whose code reads ``torch`` where the cell's namespace has no ``torch``."""
    reads = any(isinstance(n, ast.Name) and n.id == "torch" and isinstance(n.ctx, ast.Load) for n in ast.walk(node))
    local = any(isinstance(n, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name).split(".")[0] == "torch"
                                                                     for a in n.names) for n in ast.walk(node))
    if reads and not local and "torch" not in fn.__globals__ and "torch" not in fn.__code__.co_freevars:
        raise ValueError(f"the rewrite of {fn.__qualname__} calls torch, but the cell does not import torch "
                         "(add `import torch` to the cell)")


def _compile_def(node: _FunctionNode, classes: list[str], freevars: tuple[str, ...],
                 filename: str) -> types.CodeType:
    """Compile the def alone, at its own line numbers, and take its code object from the constants: inside
    its class (so ``super()`` and private names work) and, for a closure, inside a function that holds the
    free names as cells (so the code reads them from a closure, not from globals)."""
    node.decorator_list = []
    wrapped: ast.stmt = node
    for name in reversed(classes):
        wrapped = ast.copy_location(ast.ClassDef(name=name, bases=[], keywords=[], body=[wrapped],
                                                 decorator_list=[]), node)
    outer_vars = [v for v in freevars if v != "__class__"]
    if outer_vars:
        holders: list[ast.stmt] = [ast.copy_location(ast.Assign([ast.Name(v, ast.Store())], ast.Constant(None)),
                                                     node) for v in outer_vars]
        wrapped = ast.copy_location(ast.FunctionDef(
            name="__nbcompile_closure__", args=ast.arguments([], [], None, [], [], None, []),
            body=[*holders, wrapped], decorator_list=[], returns=None), node)
    module = ast.fix_missing_locations(ast.Module(body=[wrapped], type_ignores=[]))
    compiled = compile(module, filename, "exec", dont_inherit=True)
    found = _code_named(compiled, node.name, node.lineno)
    if found is None:  # pragma: no cover - compile always makes the def's code object
        raise ValueError(f"compiling the rewritten {node.name} gave no code object for it")
    return found


def _code_named(code: types.CodeType, name: str, lineno: int) -> types.CodeType | None:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name == name and const.co_firstlineno == lineno:
                return const
            found = _code_named(const, name, lineno)
            if found is not None:
                return found
    return None


def _closure_for(fn: types.FunctionType, code: types.CodeType) -> tuple[types.CellType, ...] | None:
    """The cells of ``fn`` the new code reads, in its order; a free name ``fn`` has no cell for is refused."""
    if not code.co_freevars:
        return None
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))
    missing = [v for v in code.co_freevars if v not in cells]
    if missing:
        raise ValueError(f"a closure: the rewritten {fn.__qualname__} reads {', '.join(missing)} from an enclosing "
                         "function, which the original does not")
    return tuple(cells[v] for v in code.co_freevars)


__all__ = ["apply", "propose", "rewritten_function"]
