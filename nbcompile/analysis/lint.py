"""The allow_in_graph lint: what a function does that ``allow_in_graph`` asks it not to.

``allow_in_graph`` skips Dynamo's safety checks, so a function that breaks its
promises gives wrong results silently (seeds 000 and 003). Before the toggle
is applied, the lint reads the function's source and its closure and globals,
and warns about:

- captured tensors: closure variables and globals holding tensors or nn.Modules;
- captured state: closure variables holding what can change under the same object (a dict, a list, a
  config object), read once at trace time;
- mutation of inputs or of globals (and of ``self`` in a module method), in-place methods and
  methods that change an object's state included: ``opt.step()``, ``opt.zero_grad()``, ``net.train()``,
  ``register_*``, ``sched.step()``, ``loss.backward()``;
- calls of nn.Module objects (use ``torch.func.functional_call``);
- data-dependent Python control flow (``if x.sum() > 0``, ``.item()``);
- inputs or outputs that cannot be proxied in an FX graph;
- side effects (``print``, logging) that run while tracing, not at every call.

It warns; it never refuses. It reads source only and never calls the function.
"""

from __future__ import annotations

import ast
import builtins
import inspect as _pyinspect
import textwrap
import types
from collections.abc import Iterator
from typing import Any, cast

import torch

from ..capture.cell import cell_line_of
from ..core.text import cut
from ..model.report import LintWarning

#: Attribute reads and calls that look at a tensor's metadata, not its values.
_STATIC_ATTRS = frozenset({
    "shape", "ndim", "dtype", "device", "is_cuda", "requires_grad", "layout", "is_sparse",
    "size", "dim", "numel", "ndimension", "nelement", "stride", "is_contiguous", "element_size",
})
_STATIC_FUNCS = frozenset({"len", "isinstance", "type", "callable", "hasattr", "id"})
_TO_PYTHON = frozenset({"item", "tolist", "numpy", "__bool__", "__int__", "__float__"})
_CONTAINER_MUTATORS = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem",
    "add", "discard", "sort", "reverse",
})
#: Methods that change the object they are called on (``opt.step()``, ``net.train()``): a call of one on an
#: optimizer, an LR scheduler or an nn.Module the function does not own is a mutation of global state.
_OPTIMIZER_MUTATORS = frozenset({"step", "zero_grad", "add_param_group", "load_state_dict"})
_MODULE_MUTATORS = frozenset({
    "train", "eval", "zero_grad", "load_state_dict", "apply", "to", "cuda", "cpu", "xpu", "type", "half",
    "float", "double", "bfloat16", "to_empty", "share_memory", "add_module", "set_submodule", "set_extra_state",
})
_SCHEDULER_MUTATORS = frozenset({"step", "load_state_dict"})
#: The same by name alone, for an input whose type the source does not say (``def update(opt): opt.step()``).
_STATEFUL_NAMES = frozenset({"step", "zero_grad", "add_param_group", "load_state_dict", "train", "eval"})
_SIDE_EFFECTS = frozenset({"print", "input", "open", "breakpoint"})
_LOGGING_CALLS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})
_PROXYABLE_ANNOTATIONS = frozenset({
    "Tensor", "torch.Tensor", "int", "float", "bool", "None", "Optional", "typing.Optional",
    "list", "List", "typing.List", "tuple", "Tuple", "typing.Tuple", "Sequence", "typing.Sequence",
    "torch.dtype", "dtype", "torch.device", "device", "torch.Size", "Union", "typing.Union",
    "torch.nn.Parameter", "Parameter", "torch.SymInt", "SymInt", "torch.SymFloat", "SymFloat",
})
_NON_TENSOR_DEFAULTS = (int, float, bool, str, bytes)


def lint_allow_in_graph(fn: Any, name: str | None = None, owner: type | None = None) -> list[LintWarning]:
    """Warnings for ``fn`` under ``allow_in_graph``; ``owner`` is the class for ``Class.method``."""
    fn = getattr(fn, "__func__", fn)
    label: str = name or cast(str, getattr(fn, "__qualname__", repr(fn)))
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    try:
        source = textwrap.dedent(_pyinspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError) as exc:
        return [LintWarning(label, "no-source", label, code.co_firstlineno,
                            cell_line_of(code.co_filename, code.co_firstlineno),
                            f"{label}: source not available ({type(exc).__name__}), not linted")]
    node = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if node is None:
        return []
    closure = dict(zip(code.co_freevars, (_cell_value(c) for c in (fn.__closure__ or ())), strict=True))
    linter = _Linter(label, node, code.co_filename, code.co_firstlineno - 1, closure, fn.__globals__, owner)
    return linter.run()


def _cell_value(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


class _Linter:
    def __init__(self, label: str, node: ast.FunctionDef | ast.AsyncFunctionDef, filename: str, offset: int,
                 closure: dict[str, Any], globals_: dict[str, Any], owner: type | None) -> None:
        self.label = label
        self.node = node
        self.filename = filename
        self.offset = offset
        self.closure = closure
        self.globals = globals_
        self.owner = owner
        self.warnings: list[LintWarning] = []
        self._seen: set[tuple[str, str, int]] = set()
        args = node.args
        self.params = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
        self.self_name = self.params[0] if owner is not None and self.params else None
        self.locals = set(self.params) | {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        self.global_decls: set[str] = set()
        self.nonlocal_decls: set[str] = set()  # among global_decls: those the enclosing function holds
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                self.locals.add(sub.id)
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                self.locals.update((a.asname or a.name).split(".")[0] for a in sub.names)
            elif isinstance(sub, (ast.Global, ast.Nonlocal)):
                self.global_decls.update(sub.names)
                if isinstance(sub, ast.Nonlocal):
                    self.nonlocal_decls.update(sub.names)
            elif isinstance(sub, ast.arg):
                self.locals.add(sub.arg)
        self.locals -= self.global_decls
        self.tensors = self._tensor_names(args)
        # names that alias an input (y = x, y = x[0], y = x.view(...)): mutating them mutates the input
        self.aliases = {p: p for p in self.params if p in self.tensors}
        #: names bound to the module's own state (``for group in self.param_groups: for p in group["params"]``):
        #: assigning into them changes the module (``p.grad = None`` in ``Optimizer.zero_grad``)
        self.state_names: set[str] = {self.self_name} if self.self_name else set()

    # -- helpers ---------------------------------------------------------------------
    def warn(self, rule: str, variable: str, node: ast.AST, message: str) -> None:
        lineno = self.offset + getattr(node, "lineno", 1)
        key = (rule, variable, lineno)
        if key in self._seen:
            return
        self._seen.add(key)
        cell = cell_line_of(self.filename, lineno)
        where = f"cell line {cell}" if cell is not None else f"line {lineno}"
        self.warnings.append(LintWarning(self.label, rule, variable, lineno, cell, f"{where}: {message}"))

    def resolve(self, name: str) -> tuple[str, Any]:
        """(``closure``/``global``/``builtin``/``local``/``unknown``, value) for a free name."""
        if name in self.locals:
            return "local", None
        if name in self.closure:
            return "closure", self.closure[name]
        if name in self.globals:
            return "global", self.globals[name]
        if hasattr(builtins, name):
            return "builtin", getattr(builtins, name)
        return "unknown", None

    def _tensor_names(self, args: ast.arguments) -> set[str]:
        """Parameters that may hold tensors (not annotated or defaulted as plain Python values)."""
        positional = [*args.posonlyargs, *args.args]
        defaults = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults):], args.defaults,
                            strict=True))
        defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None})
        names = set()
        for a in [*positional, *args.kwonlyargs]:
            if a.arg == self.self_name:
                continue
            note = ast.unparse(a.annotation) if a.annotation is not None else ""
            if note and "Tensor" not in note and "Parameter" not in note:
                continue
            default = defaults.get(a.arg)
            if isinstance(default, ast.Constant) and isinstance(default.value, _NON_TENSOR_DEFAULTS):
                continue
            names.add(a.arg)
        return names

    def _mentions_tensor(self, expr: ast.AST) -> str | None:
        """The tensor-derived name ``expr`` reads values of (not just metadata), if any."""
        for sub in _value_reads(expr):
            if isinstance(sub, ast.Name) and sub.id in self.tensors:
                return sub.id
        return None

    # -- the rules ----------------------------------------------------------------------
    def run(self) -> list[LintWarning]:
        self._signature()
        for stmt in self.node.body:
            self._flow(stmt)
        for sub in _walk_body(self.node):
            self._captures(sub)
            self._mutations(sub)
            self._state_calls(sub)
            self._calls(sub)
            self._control_flow(sub)
            self._outputs(sub)
        self.warnings.sort(key=lambda w: (w.lineno, w.rule))
        return self.warnings

    def _flow(self, stmt: ast.AST) -> None:
        """Grow the set of tensor-derived names and input aliases in statement order."""
        for sub in ast.walk(stmt):
            if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and sub.value is not None:
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                derived = self._mentions_tensor(sub.value) is not None
                source = _alias_source(sub.value)
                for target in targets:
                    for name in _target_names(target):
                        if derived:
                            self.tensors.add(name)
                        if isinstance(sub, ast.Assign) and source in self.aliases:
                            self.aliases[name] = self.aliases[source]
            elif isinstance(sub, (ast.For, ast.comprehension)):
                if self._mentions_tensor(sub.iter):
                    for name in _target_names(sub.target):
                        self.tensors.add(name)
                root = _root_name(sub.iter)
                for name in _target_names(sub.target):  # an element of the state or of an input is that state
                    if root in self.state_names:
                        self.state_names.add(name)
                    elif root in self.aliases:
                        self.aliases[name] = self.aliases[root]
            if isinstance(sub, ast.Assign) and _root_name(sub.value) in self.state_names and \
                    _alias_source(sub.value) is not None:
                for target in sub.targets:
                    self.state_names.update(_target_names(target))

    def _signature(self) -> None:
        args = self.node.args
        if self.self_name is not None and self.owner is not None:  # self_name is set only with an owner
            if issubclass(self.owner, torch.nn.Module):
                self.warn("not-proxyable", self.self_name, self.node,
                          f"input {self.self_name} is an nn.Module ({self.owner.__name__}), which an FX graph cannot "
                          "take as an input; use torch.func.functional_call with its parameters passed in")
            else:
                self.warn("not-proxyable", self.self_name, self.node,
                          f"input {self.self_name} is a {self.owner.__name__}, which an FX graph cannot take as an "
                          "input")
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if a.annotation is not None and not _proxyable_annotation(a.annotation):
                self.warn("not-proxyable", a.arg, a,
                          f"input {a.arg}: {ast.unparse(a.annotation)} is not a type an FX graph can take "
                          "(tensors, int, float, bool, None, lists/tuples of them, dtype, device)")
        positional = [*args.posonlyargs, *args.args]
        pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
        for a, default in pairs:
            if _unproxyable_literal(default):
                self.warn("not-proxyable", a.arg, default,
                          f"input {a.arg} defaults to {cut(ast.unparse(default), 40)}, which an FX graph cannot take")
        if self.node.returns is not None and not _proxyable_annotation(self.node.returns):
            self.warn("not-proxyable", "return", self.node,
                      f"output annotated {ast.unparse(self.node.returns)} is not a type an FX graph can return")

    def _captures(self, sub: ast.AST) -> None:
        if not (isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load)):
            return
        where, value = self.resolve(sub.id)
        if where not in ("closure", "global"):
            return
        if isinstance(value, torch.Tensor):
            kind = "parameter" if isinstance(value, torch.nn.Parameter) else "tensor"
            self.warn("captured-tensor", sub.id, sub,
                      f"{sub.id} is a {kind} captured from the {where} scope; allow_in_graph needs every tensor "
                      f"passed in as an input (add a parameter for {sub.id})")
        elif isinstance(value, torch.nn.Module) and not _is_called(sub, self.node):
            self.warn("captured-tensor", sub.id, sub,
                      f"{sub.id} is an nn.Module captured from the {where} scope; its parameters are tensors "
                      "the graph does not see as inputs")
        elif where == "closure" and _mutable_state(value):
            alias = next((n for n, v in self.globals.items() if v is value and not n.startswith("_")), None)
            self.warn("captured-state", sub.id, sub,
                      f"{sub.id} is a {type(value).__name__} captured from the closure scope"
                      + (f" (the same object as the global {alias})" if alias else "")
                      + "; allow_in_graph runs the function once, at trace time, so a later change to it is not "
                      "seen (pass the values in, or keep them as tensors)")

    def _mutations(self, sub: ast.AST) -> None:
        #: (what is written, how it is said, whether it is a container's method: a list's append, a dict's
        #: update, which writes the container, not a tensor)
        targets: list[tuple[ast.expr, str, bool]] = []
        if isinstance(sub, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            nodes = sub.targets if isinstance(sub, (ast.Assign, ast.Delete)) else [sub.target]
            for target in nodes:
                if isinstance(target, (ast.Subscript, ast.Attribute)):
                    targets.append((target, "assigns into", False))
                elif isinstance(sub, ast.AugAssign) and isinstance(target, ast.Name):
                    operator = ast.unparse(sub)[len(target.id):].split()[0]
                    targets.append((target, f"applies {operator} (in place on a tensor) to", False))
                elif isinstance(target, ast.Name) and target.id in self.global_decls:
                    scope = "the enclosing function's" if target.id in self.nonlocal_decls else "the global"
                    self.warn("mutation", target.id, target, f"rebinds {scope} {target.id}")
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
            attr = sub.func.attr
            if attr.endswith("_") and not attr.startswith("_"):
                targets.append((sub.func.value, f"calls the in-place {attr}() on", False))
            elif attr in _CONTAINER_MUTATORS and isinstance(sub.func.value, ast.Name):
                where, value = self.resolve(sub.func.value.id)
                if isinstance(value, (list, dict, set)):
                    targets.append((sub.func.value, f"calls {attr}() on", True))
        if isinstance(sub, ast.Call):
            for kw in sub.keywords:
                if kw.arg == "out":
                    targets.append((kw.value, "writes out= into", False))
        for target, verb, container_call in targets:
            root = _root_name(target)
            if root is None:
                continue
            if root == self.self_name:
                self.warn("mutation", ast.unparse(target), target, f"{verb} {ast.unparse(target)}: state of the module")
            elif root in self.state_names and not container_call:
                self.warn("mutation", ast.unparse(target), target,
                          f"{verb} {ast.unparse(target)}, which is state of the module ({root} comes from "
                          f"{self.self_name})")
            elif root in self.aliases and not container_call:
                param = self.aliases[root]
                via = "" if root == param else f" (through {root}, a view of {param})"
                if isinstance(sub, ast.AugAssign) and isinstance(target, ast.Name) and param not in self.tensors:
                    continue
                self.warn("mutation", param, target, f"{verb} the input {param}{via}")
            elif root not in self.locals or root in self.global_decls:
                where, value = self.resolve(root)
                if where in ("closure", "global") or root in self.global_decls:
                    if (isinstance(sub, ast.AugAssign) and isinstance(target, ast.Name)
                            and not isinstance(value, torch.Tensor)):
                        continue  # `total += 1` on a global without `global` is an UnboundLocalError, not ours
                    self.warn("mutation", root, target,
                              f"{verb} {ast.unparse(target)}, which belongs to the {where} scope")

    def _state_calls(self, sub: ast.AST) -> None:
        """Method calls that change an object's state, not its values: ``opt.step()`` and ``opt.zero_grad()`` on
        an optimizer (its state and the parameters it updates), ``net.train()`` or ``register_*`` on a module,
        ``sched.step()``, ``loss.backward()`` (the ``.grad`` of every leaf it reaches, on any tensor), on a
        global, a closure variable, an input or ``self``. (In-place ``x.add_()`` is ``_mutations``'.)"""
        if not (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)):
            return
        attr, receiver = sub.func.attr, sub.func.value
        root = _root_name(receiver)
        call = f"{cut(ast.unparse(sub.func), 40)}()"
        if attr == "backward":
            self.warn("mutation", ast.unparse(receiver), sub,
                      f"calls {call}, which writes the .grad of every leaf tensor it reaches (the parameters): "
                      "state outside the function")
            return
        if root is None or (root in self.locals and root not in self.params) or attr.startswith("_"):
            return
        if root == self.self_name:
            what = self._state_kind(self.owner, attr) if isinstance(receiver, ast.Name) else None
            if what is not None:
                self.warn("mutation", ast.unparse(receiver), sub, f"calls {call}, which changes {what}: state of "
                                                                   "the module")
            return
        if root in self.params:
            if attr in _STATEFUL_NAMES or attr.startswith("register_"):
                self.warn("mutation", root, sub, f"calls {call} on the input {root}, which changes its state "
                                                  "(an optimizer's step, a module's mode)")
            return
        where, _ = self.resolve(root)
        if where not in ("closure", "global"):
            return
        value = _resolve_dotted(receiver, self)
        what = self._state_kind(type(value), attr)
        if what is not None:
            self.warn("mutation", root, sub, f"calls {call}, which changes {what}, which belongs to the {where} "
                                             "scope")

    @staticmethod
    def _state_kind(cls: type | None, attr: str) -> str | None:
        """What a call of ``attr`` on an instance of ``cls`` changes, or None for a call that changes nothing
        the lint knows of."""
        if cls is None:
            return None
        if issubclass(cls, torch.optim.Optimizer) and (attr in _OPTIMIZER_MUTATORS or attr.startswith("register_")):
            return "the optimizer's state and the parameters it updates"
        if _SCHEDULER is not None and issubclass(cls, _SCHEDULER) and attr in _SCHEDULER_MUTATORS:
            return "its optimizer's learning rate"
        if issubclass(cls, torch.nn.Module) and (attr in _MODULE_MUTATORS or attr.startswith("register_")):
            return "the module (its mode, parameters, buffers or hooks)"
        return None

    def _calls(self, sub: ast.AST) -> None:
        if not isinstance(sub, ast.Call):
            return
        func = sub.func
        if isinstance(func, ast.Name):
            where, value = self.resolve(func.id)
            if isinstance(value, torch.nn.Module):
                self.warn("module-call", func.id, sub,
                          f"calls the nn.Module {func.id}; its output depends on parameters the graph does not see. "
                          f"Use torch.func.functional_call({func.id}, params, args) with params passed in")
            elif where == "builtin" and func.id in _SIDE_EFFECTS:
                self._side_effect(func.id, sub)
        elif isinstance(func, ast.Attribute):
            base = _root_name(func)
            if base == self.self_name and isinstance(func.value, ast.Name) and self._is_submodule(func.attr):
                self.warn("module-call", f"{base}.{func.attr}", sub,
                          f"calls the submodule {base}.{func.attr}; its output depends on parameters the graph does "
                          "not see. Use torch.func.functional_call with the parameters passed in")
            elif isinstance(func.value, ast.Name) and func.attr in _LOGGING_CALLS:
                where, value = self.resolve(func.value.id)
                if getattr(value, "__name__", "") == "logging" or type(value).__name__ in ("Logger", "RootLogger"):
                    self._side_effect(f"{func.value.id}.{func.attr}", sub)
        elif isinstance(func, ast.Call) and isinstance(func.func, (ast.Name, ast.Attribute)):
            ctor = _resolve_dotted(func.func, self)
            if isinstance(ctor, type) and issubclass(ctor, torch.nn.Module):
                self.warn("module-call", ast.unparse(func.func), sub,
                          f"builds and calls an nn.Module ({ast.unparse(func.func)}) inside; use the "
                          "torch.nn.functional form, with any weights passed in")
        if isinstance(func, ast.Attribute) and func.attr in _TO_PYTHON:
            name = self._mentions_tensor(func.value)
            if name is not None:
                self.warn("data-dependent", name, sub,
                          f"{cut(ast.unparse(sub), 60)} turns tensor values into Python values; the graph cannot "
                          "follow them (keep them as tensors)")
        if isinstance(func, ast.Name) and func.id in ("bool", "int", "float") and sub.args:
            name = self._mentions_tensor(sub.args[0])
            if name is not None:
                self.warn("data-dependent", name, sub,
                          f"{cut(ast.unparse(sub), 60)} reads a tensor's value into Python")

    def _is_submodule(self, attr: str) -> bool:
        value = getattr(self.owner, attr, None) if self.owner is not None else None
        if isinstance(value, (types.FunctionType, property, staticmethod, classmethod)):
            return False
        return True  # set in __init__ (submodules live on the instance, not the class)

    def _side_effect(self, what: str, node: ast.AST) -> None:
        self.warn("side-effect", what, node,
                  f"{what}(...) is a side effect: with aot_eager and inductor it runs while tracing, "
                  "not at every call")

    def _control_flow(self, sub: ast.AST) -> None:
        if isinstance(sub, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            name = self._mentions_tensor(sub.test)
            if name is not None:
                kind = {ast.If: "if", ast.While: "while", ast.IfExp: "conditional expression",
                        ast.Assert: "assert"}[type(sub)]
                self.warn("data-dependent", name, sub,
                          f"{kind} on the values of {name} ({cut(ast.unparse(sub.test), 50)}): the graph keeps one "
                          "branch; use torch.where or torch.cond")
        elif isinstance(sub, ast.BoolOp):
            for value in sub.values[:-1]:
                name = self._mentions_tensor(value)
                if name is not None:
                    self.warn("data-dependent", name, sub,
                              f"'{cut(ast.unparse(sub), 50)}' branches on the values of {name}")

    def _outputs(self, sub: ast.AST) -> None:
        if isinstance(sub, (ast.Yield, ast.YieldFrom)):
            self.warn("not-proxyable", "return", sub, "the function is a generator; an FX graph cannot return one")
        if not (isinstance(sub, ast.Return) and sub.value is not None):
            return
        values = sub.value.elts if isinstance(sub.value, ast.Tuple) else [sub.value]
        for value in values:
            if _unproxyable_literal(value):
                self.warn("not-proxyable", "return", sub,
                          f"returns {cut(ast.unparse(value), 40)}, which an FX graph cannot hold "
                          "(return tensors, numbers, or tuples/lists of them)")
            elif isinstance(value, ast.Name):
                where, obj = self.resolve(value.id)
                if isinstance(obj, torch.nn.Module):
                    self.warn("not-proxyable", "return", sub, f"returns the nn.Module {value.id}")


#: torch's LR scheduler base (``LRScheduler``; ``_LRScheduler`` before torch 2.0), when this torch has one.
_SCHEDULER: type | None = getattr(torch.optim.lr_scheduler, "LRScheduler", None)


def _mutable_state(value: Any) -> bool:
    """A value a closure holds that can change under the same object (a dict, a list, a config object), so a
    function that read it once at trace time goes stale; not numbers, strings, tuples, tensors, modules,
    functions or classes (a closure over those cannot change without making the function again)."""
    if isinstance(value, (dict, list, set, bytearray)):
        return True
    if isinstance(value, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, torch.Tensor,
                          torch.nn.Module)) or callable(value):
        return False
    return hasattr(value, "__dict__") and not type(value).__module__.startswith(("torch", "builtins"))


# --- AST helpers ----------------------------------------------------------------------

def _walk_body(node: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """Every node of the function's body (not its decorators or signature)."""
    for stmt in node.body:
        yield from ast.walk(stmt)


def _value_reads(expr: ast.AST) -> Iterator[ast.AST]:
    """Nodes of ``expr`` that read values, skipping metadata reads (x.shape, len(x), x is None)."""
    if isinstance(expr, ast.Attribute) and expr.attr in _STATIC_ATTRS:
        return
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in _STATIC_ATTRS:
            return
        if isinstance(expr.func, ast.Name) and expr.func.id in _STATIC_FUNCS:
            return
    if isinstance(expr, ast.Compare) and all(isinstance(op, (ast.Is, ast.IsNot)) for op in expr.ops):
        return
    yield expr
    for child in ast.iter_child_nodes(expr):
        yield from _value_reads(child)


def _target_names(target: ast.AST) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _target_names(elt)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)


_VIEW_METHODS = frozenset({
    "view", "view_as", "reshape", "t", "transpose", "permute", "squeeze", "unsqueeze", "expand", "narrow",
    "select", "flatten", "unflatten", "diagonal", "movedim", "swapaxes", "as_strided", "detach", "unfold",
    "split", "chunk", "unbind", "real", "imag", "T", "mT",
})


def _alias_source(value: ast.AST) -> str | None:
    """``y = x`` / ``y = x[0]`` / ``y = x.view(...)``: the name ``y`` aliases."""
    while True:
        if isinstance(value, ast.Name):
            return value.id
        if isinstance(value, ast.Subscript):
            value = value.value
        elif isinstance(value, ast.Attribute) and value.attr in _VIEW_METHODS:
            value = value.value
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _VIEW_METHODS:
            value = value.func.value
        else:
            return None


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_called(name: ast.Name, root: ast.AST) -> bool:
    for sub in ast.walk(root):
        if isinstance(sub, ast.Call) and sub.func is name:
            return True
    return False


def _resolve_dotted(node: ast.AST, linter: _Linter) -> Any:
    parts = ast.unparse(node).split(".")
    where, value = linter.resolve(parts[0])
    for part in parts[1:]:
        value = getattr(value, part, None)
    return value


def _annotation_names(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Subscript):
        yield from _annotation_names(node.value)
        yield from _annotation_names(node.slice)
    elif isinstance(node, ast.Tuple):
        for elt in node.elts:
            yield from _annotation_names(elt)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        yield from _annotation_names(node.left)
        yield from _annotation_names(node.right)
    elif isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            try:
                yield from _annotation_names(ast.parse(node.value, mode="eval").body)
            except SyntaxError:
                yield node.value
        elif node.value is None or node.value is Ellipsis:
            return
        else:
            yield repr(node.value)
    else:
        yield ast.unparse(node)


def _proxyable_annotation(node: ast.AST) -> bool:
    return all(name in _PROXYABLE_ANNOTATIONS for name in _annotation_names(node))


def _unproxyable_literal(node: ast.AST) -> bool:
    if isinstance(node, (ast.Dict, ast.Set, ast.DictComp, ast.SetComp, ast.Lambda, ast.GeneratorExp, ast.JoinedStr)):
        return True
    return isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))
