"""How an expression of a cell reads to Dynamo, judged from its ``ast`` alone: decided while tracing,
a tensor, or safe to evaluate again; and a condition turned into a tensor expression.

``python_level``: a test Dynamo decides while tracing (a flag, ``isinstance``, a shape);
``tensor_calls``: one that is a tensor (a reduction or predicate, which ``if`` turns into a
data-dependent break); ``reads_only``: evaluating it again changes nothing; ``ToTensor``: the
condition as a tensor expression. The rewrite rules ask these questions; nothing is run.
"""

from __future__ import annotations

import ast
from collections.abc import Collection

#: Tensor attributes and methods that read metadata (static or symbolic sizes), never values: a test made of
#: them is decided at trace time, so Dynamo does not break on it.
META_ATTRS = frozenset({
    "shape", "ndim", "dtype", "device", "training", "is_cuda", "requires_grad", "layout", "is_sparse",
    "is_leaf", "is_meta", "is_quantized", "names",
})
META_CALLS = frozenset({
    "dim", "size", "numel", "ndimension", "nelement", "stride", "is_contiguous", "element_size",
    "is_floating_point", "is_complex", "get_device", "storage_offset",
})
#: Builtins whose result is a plain Python value decided from types or lengths.
PY_TESTS = frozenset({"isinstance", "issubclass", "hasattr", "callable", "len", "type", "getattr", "id"})
#: Calls that give a tensor (a reduction, a predicate, elementwise math): a condition made of them is a
#: tensor, which ``if`` turns into a data-dependent break.
TENSOR_CALLS = frozenset({
    "any", "all", "sum", "mean", "max", "min", "amax", "amin", "norm", "abs", "std", "var", "prod",
    "count_nonzero", "isnan", "isinf", "isfinite", "isneginf", "isposinf", "eq", "ne", "gt", "lt", "ge", "le",
    "logical_and", "logical_or", "logical_not", "logical_xor", "median", "nansum", "nanmean", "argmax",
    "argmin", "square", "sqrt", "exp", "log", "detach", "clone", "float", "double", "dot", "trace",
    "logsumexp", "cpu", "diff", "cumsum", "sign", "frac", "round", "floor", "ceil",
})
#: torch functions that answer a Python bool (not a tensor): ``torch._check`` takes them, ``_assert_async`` not.
BOOL_TORCH = frozenset({"allclose", "equal", "is_tensor", "is_floating_point", "is_complex", "is_nonzero"})
#: Methods that change the object they are called on: a call of one is not a read.
MUTATORS = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem", "add",
    "discard", "sort", "reverse", "step", "zero_grad", "backward",
})


def call_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def is_torch_call(node: ast.Call) -> bool:
    """``torch.x(...)``, ``torch.nn.functional.x(...)``, ``F.x(...)``."""
    root: ast.expr = node.func
    while isinstance(root, ast.Attribute):
        root = root.value
    return isinstance(node.func, ast.Attribute) and isinstance(root, ast.Name) and root.id in ("torch", "F")


def python_level(test: ast.expr, top: bool = True) -> bool:
    """True for a test that is obviously a Python value Dynamo decides while tracing (``x is None``,
    ``isinstance``, ``hasattr``, ``in``, a flag, ``not flag``, comparisons of shapes, lengths, ``.dim()``,
    ``.training``): ``torch.where`` cannot take it and Dynamo does not break on it anyway."""
    if isinstance(test, ast.Constant):
        return True
    if isinstance(test, (ast.Name, ast.Attribute)) and top:
        return True  # a bare flag: ``if training:``, ``if self.use_bias:``
    if isinstance(test, ast.Attribute):
        return test.attr in META_ATTRS or python_level(test.value, False)
    if isinstance(test, ast.Subscript):
        return python_level(test.value, False)
    if isinstance(test, ast.Call):
        func = test.func
        if isinstance(func, ast.Name):
            return func.id in PY_TESTS
        if isinstance(func, ast.Attribute):
            return func.attr in META_CALLS or (is_torch_call(test) and func.attr in BOOL_TORCH)
        return False
    if isinstance(test, ast.UnaryOp):
        if isinstance(test.op, ast.Not) and isinstance(test.operand, (ast.Name, ast.Attribute)):
            return True
        return python_level(test.operand, top)
    if isinstance(test, ast.BoolOp):
        return any(python_level(v, True) for v in test.values)
    if isinstance(test, ast.BinOp):
        return python_level(test.left, False) and python_level(test.right, False)
    if isinstance(test, ast.Compare):
        if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in test.ops):
            return True
        operands = [test.left, *test.comparators]
        if any(isinstance(o, ast.Constant) and isinstance(o.value, (str, bytes, type(None))) for o in operands):
            return True
        return all(python_level(o, False) for o in operands)
    return False


def tensor_calls(expr: ast.expr) -> bool:
    """True when ``expr`` calls a tensor reduction or predicate (``x.isnan().any()``, ``torch.isinf(x)``)."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in TENSOR_CALLS and node.func.attr not in BOOL_TORCH:
                return True
    return False


def mentions(expr: ast.expr, attrs: Collection[str] = (), calls: Collection[str] = ()) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Attribute) and node.attr in attrs:
            return True
        if isinstance(node, ast.Call) and call_name(node) in calls:
            return True
    return False


def has_meta(expr: ast.expr) -> bool:
    return mentions(expr, META_ATTRS, {*META_CALLS, "len"})


class ToTensor(ast.NodeTransformer):
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
            result = ast.Call(torch_attr(name), [result, value], [])
        return result

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.Call(torch_attr("logical_not"), [node.operand], [])
        return node


def torch_attr(name: str) -> ast.Attribute:
    return ast.Attribute(ast.Name("torch", ast.Load()), name, ast.Load())


def reads_only(expr: ast.expr) -> bool:
    """True when evaluating ``expr`` twice, or once more than before, changes nothing: no assignment
    expression, no yield, no in-place method (``x.add_(1)``) or container mutation, no ``next``/``input``."""
    for node in ast.walk(expr):
        if isinstance(node, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)):
            return False
        if isinstance(node, ast.Call):
            name = call_name(node)
            if (isinstance(node.func, ast.Attribute) and (name.endswith("_") and not name.startswith("_")
                                                          or name in MUTATORS)):
                return False
            if isinstance(node.func, ast.Name) and name in ("next", "input", "open", "exec", "eval", "setattr"):
                return False
    return False if isinstance(expr, ast.Starred) else True
