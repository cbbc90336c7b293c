"""What the user's source shows and changes, read statically (``ast``): whether an expression has a side
effect (the ``where`` rewrite evaluates both branches on every call), and what changes in place, through an
alias or by rebinding, what a logging call shows between the call and a later point (the ``defer`` rewrite,
``reorderable_logging_functions``). Used by the rewrites (analysis) and the fix search's candidates (engine);
what these rules cannot see, a trial's comparison of what the run prints, logs and leaves judges.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# -- what a logging call shows, and what may change it after the call ---------------------------------------
#
# ``reorderable_logging_functions`` runs a print after its graph, and the ``defer`` rewrite moves a print
# before the function's return: both show the print's arguments as they are then, not as they were at the
# call. They keep what the user's code prints only where nothing between the call and its new place changes
# what it shows (in place, through any alias, or by rebinding a name the moved source reads); the ``where``
# rewrite keeps what the code does only where the branch it now evaluates on every call has no effect at all.
# The rules read the source alone (``ast``): what they cannot see (a helper that mutates its argument, a
# module's forward) the trial's comparison of what the run prints, logs and leaves judges.

#: Tensor attributes and methods that read metadata (sizes, dtype, device), never values.
_META_ATTRS = frozenset({
    "shape", "ndim", "dtype", "device", "is_cuda", "layout", "is_sparse", "is_meta", "is_quantized", "names",
    "requires_grad", "is_leaf",
})
_META_CALLS = frozenset({
    "dim", "size", "numel", "ndimension", "nelement", "stride", "is_contiguous", "element_size",
    "is_floating_point", "is_complex", "get_device", "storage_offset",
})
#: In-place methods that change what a metadata read shows.
_META_INPLACE = frozenset({
    "resize_", "resize_as_", "squeeze_", "unsqueeze_", "t_", "transpose_", "swapdims_", "swapaxes_",
    "as_strided_", "set_", "requires_grad_", "detach_", "rename_",
})
#: Methods that change the object they are called on (besides ``x.name_(...)``, a tensor's in-place method).
_MUTATORS = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem", "add", "discard",
    "sort", "reverse", "step", "zero_grad", "backward", "appendleft", "extendleft", "popleft", "put", "write",
    "register_buffer", "register_parameter", "add_module", "__setitem__", "__delitem__",
})
#: Methods that put their arguments into the object they are called on (it then holds them: an alias).
_STORING = frozenset({
    "append", "extend", "insert", "add", "update", "setdefault", "appendleft", "extendleft", "put",
    "register_buffer", "register_parameter", "add_module", "__setitem__",
})
#: Methods that hand back a view of their object, or the object itself (``x.to(x.dtype)`` is ``x``).
_ALIASING_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "t", "flatten", "unflatten", "squeeze",
    "unsqueeze", "expand", "expand_as", "narrow", "select", "chunk", "split", "unbind", "contiguous", "movedim",
    "moveaxis", "diagonal", "detach", "to", "type", "type_as", "float", "double", "half", "bfloat16", "int",
    "long", "bool", "cpu", "cuda", "numpy", "get", "values", "items", "keys", "copy", "as_strided", "swapdims",
    "swapaxes", "unfold", "split_with_sizes", "tensor_split", "hsplit", "vsplit", "real", "imag", "conj",
    "resolve_conj", "resolve_neg", "ravel", "view_as_real", "data_ptr",
})
#: Methods that change nothing (a tensor's out-of-place math, views and conversions; reading a dict, a str).
_PURE_METHODS = _ALIASING_METHODS | _META_CALLS | frozenset({
    "abs", "neg", "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "relu", "gelu", "silu", "softmax", "log_softmax",
    "pow", "square", "sign", "sgn", "floor", "ceil", "round", "trunc", "frac", "clamp", "clip", "clamp_min",
    "clamp_max", "add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "matmul", "mm",
    "bmm", "mv", "dot", "outer", "sum", "mean", "std", "var", "prod", "max", "min", "amax", "amin", "argmax",
    "argmin", "norm", "median", "nansum", "nanmean", "logsumexp", "cumsum", "cumprod", "all", "any",
    "count_nonzero", "isnan", "isinf", "isfinite", "isneginf", "isposinf", "eq", "ne", "gt", "lt", "ge", "le",
    "logical_and", "logical_or", "logical_not", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_not",
    "bitwise_xor", "where", "masked_fill", "masked_select", "index_select", "gather", "topk", "kthvalue", "diff",
    "trace", "maximum", "minimum", "lerp", "addmm", "baddbmm", "reciprocal", "erf", "erfc", "flip", "roll",
    "repeat", "repeat_interleave", "tril", "triu", "clone", "tolist", "item", "new_zeros", "new_ones",
    "new_empty", "new_full", "new_tensor", "allclose", "equal", "isclose", "nonzero", "unique", "argsort",
    "cross", "det", "inverse", "float_power", "hypot", "atan2", "addcmul", "addcdiv", "einsum", "scatter",
    "scatter_add", "index_add", "index_fill", "index_copy", "masked_scatter", "put", "take", "sort",
    "count", "index", "format", "join", "startswith", "endswith", "strip", "lstrip", "rstrip", "lower",
    "upper", "replace", "encode", "decode", "__getitem__", "__len__", "__contains__",
}) - {"put", "sort"}
#: torch functions that draw random numbers (evaluated once more, they move the generator), by name.
_RANDOM = frozenset({
    "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "bernoulli", "normal",
    "multinomial", "poisson", "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
    "feature_alpha_dropout", "rrelu", "gumbel_softmax", "fractional_max_pool2d", "fractional_max_pool3d",
})
#: torch functions that change global state or reach outside the process.
_IMPURE_TORCH = frozenset({
    "manual_seed", "seed", "save", "load", "set_grad_enabled", "set_default_dtype", "set_default_device",
    "set_printoptions", "use_deterministic_algorithms", "set_num_threads", "set_rng_state", "compile",
    "set_default_tensor_type", "set_float32_matmul_precision", "set_flush_denormal", "set_anomaly_enabled",
})
#: torch's functions that hand back a view of an argument (or the argument itself).
_TORCH_ALIASING = frozenset({
    "reshape", "view_as_real", "view_as_complex", "narrow", "select", "squeeze", "unsqueeze", "transpose",
    "permute", "t", "flatten", "unflatten", "chunk", "split", "unbind", "movedim", "moveaxis", "diagonal",
    "as_strided", "swapdims", "swapaxes", "tensor_split", "hsplit", "vsplit", "dsplit", "as_tensor", "asarray",
    "from_numpy", "detach", "broadcast_tensors", "atleast_1d", "atleast_2d", "atleast_3d", "split_with_sizes",
    "real", "imag", "conj", "resolve_conj", "resolve_neg", "ravel", "broadcast_to", "expand_copy", "identity",
    "dropout", "contiguous",
})
#: Where a torch function is pure if its name is (``torch.relu``, ``F.relu``, ``torch.linalg.norm``).
_TORCH_SPACES = frozenset({"torch", "F", "torch.nn.functional", "torch.linalg", "torch.special", "torch.fft"})
#: Builtins that change nothing, and those of them whose value shares nothing with their arguments.
_PURE_BUILTINS = frozenset({
    "abs", "min", "max", "len", "float", "int", "bool", "round", "sum", "isinstance", "issubclass", "hasattr",
    "getattr", "callable", "tuple", "list", "dict", "set", "frozenset", "range", "enumerate", "zip", "divmod",
    "pow", "any", "all", "str", "repr", "format", "type", "id", "sorted", "reversed", "hash", "slice", "complex",
    "chr", "ord", "hex", "oct", "bin",
})
_FRESH_BUILTINS = frozenset({
    "abs", "len", "float", "int", "bool", "round", "sum", "isinstance", "issubclass", "hasattr", "callable",
    "range", "divmod", "pow", "any", "all", "str", "repr", "format", "type", "id", "hash", "complex", "chr",
    "ord", "hex", "oct", "bin",
})
#: Calls that show their arguments and change none of them (what the rules move or reorder).
_LOGGING_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})
_LOGGER = re.compile(r"^_?(logger|log|LOGGER|LOG|logging)$")

_Function = ast.FunctionDef | ast.AsyncFunctionDef
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _dotted(node: ast.expr) -> str | None:
    """``torch.nn.functional.relu`` for a chain of names and attributes; None for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _root(node: ast.expr) -> str:
    """The name an attribute, item or method chain starts from (``self`` of ``self.buf[0].x``), or ""."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call, ast.Starred)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _keywords(call: ast.Call) -> dict[str | None, ast.expr]:
    return {k.arg: k.value for k in call.keywords}


def _in_place_request(call: ast.Call) -> bool:
    """``out=`` given, or ``inplace=`` anything but a literal False."""
    kws = _keywords(call)
    inplace = kws.get("inplace")
    return "out" in kws or (inplace is not None and not (isinstance(inplace, ast.Constant) and inplace.value is False))


def _in_place_name(name: str) -> bool:
    """``add_``, ``relu_``: a tensor's (or torch's) in-place form."""
    return name.endswith("_") and not name.startswith("_")


def _torch_function(call: ast.Call) -> tuple[str, str] | None:
    """(its namespace, its name) for a call of a torch function (``torch.relu``, ``F.relu``), else None."""
    dotted = _dotted(call.func)
    if dotted is None or "." not in dotted:
        return None
    space, _, name = dotted.rpartition(".")
    return (space, name) if space in _TORCH_SPACES else None


def _pure_call(call: ast.Call) -> bool:
    """Whether the call changes nothing: torch's out-of-place math (no ``out=``, no in-place form, no random
    numbers, no global setting), a pure method of a value that is not ``self`` (``self.norm(x)`` calls a
    module), a pure builtin."""
    if _in_place_request(call):
        return False
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in _PURE_BUILTINS
    torch_fn = _torch_function(call)
    if torch_fn is not None:
        name = torch_fn[1]
        return (name[:1].islower() and not name.startswith("_") and not _in_place_name(name)
                and name not in _RANDOM and name not in _IMPURE_TORCH)
    if isinstance(func, ast.Attribute):
        if isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
            return False
        return func.attr in _PURE_METHODS
    return False


def _shows_only(call: ast.Call) -> bool:
    """A print, ``warnings.warn`` or logging call: it shows its arguments and changes none of them."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in ("print", "warn")
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return (func.value.id == "warnings" and func.attr == "warn") or \
            (bool(_LOGGER.match(func.value.id)) and func.attr in _LOGGING_METHODS)
    return False


def side_effect(expr: ast.expr) -> str:
    """What evaluating ``expr`` may do besides giving its value (``calls note()``), or "" when nothing: it only
    reads names, attributes and items, does arithmetic and calls what changes nothing (``_pure_call``)."""
    for node in ast.walk(expr):
        if isinstance(node, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)):
            return f"{type(node).__name__.lower()} {ast.unparse(node)}"
        if isinstance(node, ast.Call) and not _pure_call(node):
            return f"calls {ast.unparse(node.func)}()"
    return ""


def _fresh(call: ast.Call) -> bool:
    """Whether the call's value shares nothing with its arguments (``x.sum()``, ``torch.relu(x)``, ``len(x)``)."""
    if not _pure_call(call):
        return False
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in _FRESH_BUILTINS
    torch_fn = _torch_function(call)
    if torch_fn is not None:
        return torch_fn[1] not in _TORCH_ALIASING
    return isinstance(func, ast.Attribute) and func.attr not in _ALIASING_METHODS


def _roots(expr: ast.expr) -> set[str]:
    """The names whose objects the value of ``expr`` may be, hold, or be a view of."""
    if isinstance(expr, ast.Name):
        return {expr.id}
    if isinstance(expr, (ast.Constant, ast.JoinedStr, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Lambda)):
        return set()
    if isinstance(expr, ast.Attribute):
        return set() if expr.attr in _META_ATTRS else _roots(expr.value)
    if isinstance(expr, (ast.Subscript, ast.Starred)):
        return _roots(expr.value)
    if isinstance(expr, ast.Call):
        if _fresh(expr):
            return set()
        out: set[str] = set()
        for arg in [*expr.args, *(k.value for k in expr.keywords)]:
            out |= _roots(arg)
        if isinstance(expr.func, ast.Attribute):
            out |= _roots(expr.func.value)
        return out
    if isinstance(expr, ast.IfExp):
        return _roots(expr.body) | _roots(expr.orelse)
    if isinstance(expr, ast.NamedExpr):
        return _roots(expr.value) | {expr.target.id}
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}  # containers, `a or b`, comprehensions


def _bound(target: ast.expr) -> set[str]:
    """The names an assignment to ``target`` binds, or whose object then holds the value (``self`` of
    ``self.buf = y``)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_bound(t) for t in target.elts)) if target.elts else set()
    if isinstance(target, ast.Starred):
        return _bound(target.value)
    root = _root(target)
    return {root} if root else set()


class _Aliases:
    """Which names of a function may share an object (one is the other, holds it or is a view of it): every
    assignment, loop, ``with``, and store into a container joins its target with what its value may be, over
    the whole function whatever the order (what a later line binds may be read by an earlier one in a loop)."""

    def __init__(self, fn: _Function) -> None:
        self.parent: dict[str, str] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    self.join(_bound(target) | _roots(node.value))
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                self.join(_bound(node.target) | _roots(node.value))
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                self.join(_bound(node.target) | _roots(node.iter))
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                self.join(_bound(node.optional_vars) | _roots(node.context_expr))
            elif isinstance(node, ast.NamedExpr):
                self.join({node.target.id} | _roots(node.value))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _STORING:
                held = set().union(*(_roots(a) for a in [*node.args, *(k.value for k in node.keywords)])) \
                    if node.args or node.keywords else set()
                self.join(_roots(node.func.value) | held)

    def find(self, name: str) -> str:
        while self.parent.get(name, name) != name:
            name = self.parent[name]
        return name

    def join(self, names: set[str]) -> None:
        for name in names:
            self.parent.setdefault(name, name)
        roots = [self.find(n) for n in sorted(names)]
        for other in roots[1:]:
            if other != roots[0]:
                self.parent[other] = roots[0]

    def of(self, names: set[str]) -> set[str]:
        heads = {self.find(n) for n in names}
        return set(names) | {n for n in self.parent if self.find(n) in heads}


def _reads(expr: ast.AST, values: set[str], metas: set[str]) -> None:
    """The names ``expr`` shows: by value, or only through their metadata (``h.shape``, ``h.size(0)``)."""
    if isinstance(expr, ast.Attribute) and expr.attr in _META_ATTRS and _dotted(expr.value) is not None:
        metas.add(_root(expr.value))
        return
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _META_CALLS \
            and _dotted(expr.func.value) is not None:
        metas.add(_root(expr.func.value))
        for arg in [*expr.args, *(k.value for k in expr.keywords)]:
            _reads(arg, values, metas)
        return
    if isinstance(expr, ast.Name):
        values.add(expr.id)
        return
    for child in ast.iter_child_nodes(expr):
        _reads(child, values, metas)


@dataclass
class Shown:
    """What a call shows: the names it reads by value, with every name that may alias them in its function,
    and the names it reads only through their metadata."""

    values: set[str]
    aliases: set[str]
    metas: set[str]

    @classmethod
    def of(cls, fn: _Function, call: ast.Call) -> Shown:
        values: set[str] = set()
        metas: set[str] = set()
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            _reads(arg, values, metas)
        return cls(values, _Aliases(fn).of(values), metas - values)

    def changed_by(self, node: ast.AST, *, rebinding: bool, unknown_calls: bool) -> str:
        """How running ``node`` may change what the call shows, or "": a write into, an in-place update of or
        a mutating method on anything that may alias what it shows (``y.add_(1)``, ``v[0] = 1``, ``y += 1``,
        ``out=y``, ``lst.append``); a change of the sizes it shows (``h.resize_``); with ``rebinding``, a new
        value for a name it reads (its source moves past it); with ``unknown_calls``, any call that may
        change them (a function handed one of them, a method nbcompile does not know to be pure)."""
        values, metas = self.aliases, self.metas
        for sub in _walk_scope(node):
            if rebinding and isinstance(sub, ast.Name) and not isinstance(sub.ctx, ast.Load) \
                    and sub.id in self.values | metas:
                return f"rebinds {sub.id}"
            if isinstance(sub, (ast.Global, ast.Nonlocal)) and set(sub.names) & (values | metas):
                return f"declares {', '.join(sorted(set(sub.names) & (values | metas)))} {type(sub).__name__.lower()}"
            if isinstance(sub, (ast.Attribute, ast.Subscript)) and not isinstance(sub.ctx, ast.Load) and \
                    (_root(sub) in values or (isinstance(sub, ast.Attribute) and _root(sub) in metas)):
                return f"writes {ast.unparse(sub)}"
            if isinstance(sub, ast.AugAssign) and _bound(sub.target) & values:
                return f"updates {ast.unparse(sub.target)} in place"
            if isinstance(sub, ast.Call):
                why = self._call_changes(sub, unknown_calls)
                if why:
                    return why
        return ""

    def _call_changes(self, call: ast.Call, unknown_calls: bool) -> str:
        values, metas = self.aliases, self.metas
        func = call.func
        kws = _keywords(call)
        passed = set().union(*(_roots(a) for a in [*call.args, *(k.value for k in call.keywords)])) \
            if call.args or call.keywords else set()
        if "out" in kws and _roots(kws["out"]) & values:
            return f"writes {ast.unparse(kws['out'])} (out=) in {ast.unparse(func)}()"
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if _in_place_request(call) and passed & values:
            return f"calls {ast.unparse(func)}() in place on {', '.join(sorted(passed & values))}"
        if isinstance(func, ast.Attribute):
            receiver = _roots(func.value)
            if receiver & values and (_in_place_name(name) or name in _MUTATORS
                                      or (unknown_calls and name not in _PURE_METHODS)):
                return f"calls {ast.unparse(func)}()"
            if receiver & metas and name in _META_INPLACE:
                return f"calls {ast.unparse(func)}()"
        if _in_place_name(name) and passed & values:
            return f"calls {ast.unparse(func)}() on {', '.join(sorted(passed & values))}"
        if name in ("setattr", "delattr") and call.args and _roots(call.args[0]) & values:
            return f"calls {name}() on {ast.unparse(call.args[0])}"
        if unknown_calls and passed & values and not _pure_call(call) and not _shows_only(call):
            return f"hands {', '.join(sorted(passed & values))} to {ast.unparse(func)}(), which may change it"
        return ""


def _walk_scope(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and what it runs now: not the bodies of the functions, lambdas and classes it defines."""
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, _SCOPES):
            continue
        yield from _walk_scope(child)


def _contains(outer: ast.AST, inner: ast.AST) -> bool:
    start, end = (outer.lineno, outer.col_offset), (outer.end_lineno or outer.lineno, outer.end_col_offset or 0)  # type: ignore[attr-defined]
    first = (inner.lineno, inner.col_offset)  # type: ignore[attr-defined]
    last = (inner.end_lineno or inner.lineno, inner.end_col_offset or 0)  # type: ignore[attr-defined]
    return start <= first and last <= end


def _units(fn: _Function) -> Iterator[ast.AST]:
    """What ``fn``'s body runs, as units a statement at a time: each simple statement, and the headers of
    the compound ones (an ``if``'s test, a ``for``'s target and iterable), outside nested functions."""
    def walk(body: list[ast.stmt]) -> Iterator[ast.AST]:
        for stmt in body:
            if isinstance(stmt, _SCOPES):
                continue
            if isinstance(stmt, (ast.If, ast.While)):
                yield stmt.test
            elif isinstance(stmt, (ast.For, ast.AsyncFor)):
                yield stmt.target
                yield stmt.iter
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                yield from (item.context_expr for item in stmt.items)
                yield from (item.optional_vars for item in stmt.items if item.optional_vars is not None)
            elif isinstance(stmt, ast.Match):
                yield stmt.subject
            subs = [getattr(stmt, f, None) for f in ("body", "orelse", "finalbody")]
            subs += [h.body for h in getattr(stmt, "handlers", ())] + [c.body for c in getattr(stmt, "cases", ())]
            nested = [s for s in subs if isinstance(s, list) and s and isinstance(s[0], ast.stmt)]
            if nested:
                for sub in nested:
                    yield from walk(sub)
            else:
                yield stmt

    yield from walk(fn.body)


def runs_after(fn: _Function, node: ast.AST) -> list[ast.AST]:
    """What ``fn`` may run after ``node`` within the same call: the units that start after it, and every
    unit of a loop it is in (the loop's next turn runs them after it too)."""
    end = (node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[attr-defined]
    loops = [n for n in _walk_scope(fn) if isinstance(n, _LOOPS) and _contains(n, node)]
    return [u for u in _units(fn)
            if (u.lineno, u.col_offset) >= end or any(_contains(loop, u) for loop in loops)]  # type: ignore[attr-defined]


def changed_after(fn: _Function, call: ast.Call, later: Iterable[ast.AST], *, rebinding: bool,
                  unknown_calls: bool) -> tuple[ast.AST, str] | None:
    """The first of ``later`` that may change what ``call`` shows (``Shown.changed_by``), with how; None."""
    shown = Shown.of(fn, call)
    for node in later:
        why = shown.changed_by(node, rebinding=rebinding, unknown_calls=unknown_calls)
        if why:
            return node, why
    return None


def _enclosing(tree: ast.Module, lineno: int) -> _Function | None:
    """The innermost function whose body holds line ``lineno``."""
    found: _Function | None = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body and \
                node.body[0].lineno <= lineno <= (node.end_lineno or node.lineno):
            if found is None or node.lineno >= found.lineno:
                found = node
    return found


def _calls_of(dotted: str, call: ast.Call) -> bool:
    """Whether ``call`` calls the logging function ``dotted`` (``builtins.print``, ``warnings.warn``,
    ``logging.info``) as code names it."""
    name = dotted.rsplit(".", 1)[-1]
    named = _dotted(call.func)
    if dotted.startswith("builtins."):
        return named == name
    return named == dotted or (dotted == "warnings.warn" and named == "warn")


def reorder_withheld(source: str, lineno: int, dotted: str) -> str:
    """Why Dynamo must not run the call of ``dotted`` at ``lineno`` of ``source`` after its graph
    (``reorderable_logging_functions``): something its function runs after the call changes in place what it
    shows (``y.add_(1)`` after ``print(y)``), so the reordered call would show the new values. "" when nothing
    the source shows does, or the source cannot be read (the trial's comparison of what the run prints judges
    then)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    fn = _enclosing(tree, lineno)
    if fn is None:
        return ""
    for call in (n for n in _walk_scope(fn) if isinstance(n, ast.Call)):
        if not (call.lineno <= lineno <= (call.end_lineno or call.lineno)) or not _calls_of(dotted, call):
            continue
        found = changed_after(fn, call, runs_after(fn, call), rebinding=False, unknown_calls=False)
        if found is not None:
            node, why = found
            text = " ".join(ast.unparse(node).split())
            return (f"torch would run {ast.unparse(call.func)}() of line {lineno} after its graph, past line "
                    f"{getattr(node, 'lineno', '?')} ({text[:60]}), which {why}: it would show the values as "
                    "changed there")
    return ""
