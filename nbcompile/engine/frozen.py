"""The globals a function under ``allow_in_graph`` or ``nonstrict_trace`` reads, which a function traced
once bakes in: ``frozen_globals`` finds them (numbers, strings, enum members, containers of them, through
the user's modules, classes, closures and defaults) with a different value of the same kind for each
(``perturbed``), so a second run can show whether a traced-once configuration follows a change; what it
reads and cannot vary is ``unjudged``. ``_CodeNames`` tells a name bound to code (``def``, ``class``,
``import``) from one bound to a value the user may assign again.
"""

from __future__ import annotations

import ast
import dis
import enum
import functools
import gc
import importlib.util
import inspect
import linecache
import logging
import math
import numbers
import os
import sys
import types
from collections.abc import MutableMapping, MutableSequence, MutableSet
from typing import Any

import torch

from ..core import torch_compat
from .state import _ABSENT, _HISTORY, Slot, _settable_class
from .usercode import _user_module, imported_modules

#: Python values a function may read from a global, which a function traced once bakes in.
_PLAIN = (bool, int, float, complex, str, bytes)
#: The most items of one container varied (a longer one is "not judged").
_MAX_PERTURBED = 4096


class Frozen(list[tuple["Slot", Any, Any]]):
    """``frozen_globals``' answer: (slot, value now, a different value of the same kind) for each global it
    can vary, and ``unjudged``: the ones it reads but cannot vary ("SCALE (Decimal)"), for which no
    second run can prove a traced-once configuration follows a change."""

    unjudged: list[str]


def frozen_globals(functions: dict[str, Any]) -> Frozen:
    """The Python globals (numbers, strings, enum members, containers of them) that ``functions`` read,
    and the functions, user classes and user modules they reach (a module imported inside a function
    included): (slot, value now, a different value of the same kind). A function ``allow_in_graph`` or
    ``nonstrict_trace`` puts in the graph runs its Python once, at trace time, and Dynamo does not guard
    what it read: such a global changed later is not seen. What it reads and cannot vary is
    ``unjudged``.

    It fails closed: chains of attributes (``pkg.config.SCALE``, ``Cfg.Inner.scale``) are followed
    through user modules and classes; a user module or class that is stored to a local, held in a
    closure cell, a default or passed on has every attribute the code names read; a function's defaults
    are read values; a bound method reads its ``__self__``; library state (``os.environ``) is unjudged.
    A global holding a function or a class is code when a ``def``/``class`` of its name or an import
    bound it; bound by an assignment (``ACT = torch.relu``), it is a value the user may assign again,
    which no same-kind change can stand for: unjudged. A number in a closure cell is varied when a
    function holding the cell stores to it (a sibling's ``nonlocal scale; scale = v``)."""
    out: dict[tuple[int, str], tuple[Slot, Any, Any]] = {}
    unjudged: dict[str, None] = {}
    seen: set[int] = set()
    pending = [(name, fn) for name, fn in functions.items()]
    names: set[str] = set()  # every attribute name the visited code mentions
    escaped: dict[int, tuple[Any, str]] = {}  # user modules, classes, instances read by any of those names
    done: dict[int, set[str]] = {}
    plain_cells: dict[int, tuple[types.CellType, str, str, Any]] = {}  # closure cells holding a number
    code_names: dict[int, _CodeNames] = {}  # per namespace: which names its code binds to code

    def attribute(owner: Any, name: str, label: str) -> None:
        holder = _holder(owner, name)
        if holder is None or name.startswith("__"):
            return
        attr = vars(holder)[name]
        if isinstance(attr, (types.FunctionType, staticmethod, classmethod)):
            pending.append((name, getattr(attr, "__func__", attr)))
        elif _followable(attr):  # a module or class reached by name: what the code names in it is read
            escaped.setdefault(id(attr), (attr, _name_of(attr)))
        elif not isinstance(attr, property):
            _add_frozen(out, unjudged, holder if isinstance(holder, type) else vars(holder), name, label, attr)

    def held(value: Any, label: str) -> None:
        """A value read by the code other than by a global's name: a closure cell's, a default's."""
        if isinstance(value, types.FunctionType):
            pending.append((label, value))
            if value.__name__ == "<lambda>":
                unjudged[f"{label} (a lambda the user may rebind)"] = None
        elif _followable(value):
            escaped.setdefault(id(value), (value, _name_of(value)))
        elif isinstance(value, types.ModuleType):
            library(value, set(), label)
        elif _bound_self(value) is not None:
            bound(value, label)
        elif type(value) is dict:
            items(value, label)
        elif not _immutable(value) and not _inert(value):
            unjudged[f"{label} ({type(value).__name__})"] = None

    def items(value: dict[Any, Any], label: str) -> None:
        """A dict read through a name that cannot be rebound (a default, a bound ``get``): varied in place."""
        if len(value) > _MAX_PERTURBED or not all(isinstance(k, str) for k in value):
            unjudged[f"{label} (a dict nbcompile cannot vary in place)"] = None
            return
        for key, item in value.items():
            _add_frozen(out, unjudged, value, key, f"{label}[{key!r}]", item)

    def bound(value: Any, label: str) -> None:
        """A bound method reads its ``__self__``."""
        owner = _bound_self(value)
        function = getattr(value, "__func__", None)
        if isinstance(function, types.FunctionType):
            pending.append((label, function))
        if owner is None or _inert(owner):
            return
        if _followable(owner):
            escaped.setdefault(id(owner), (owner, _name_of(owner)))
        elif type(owner) is dict:
            items(owner, f"{label}.__self__")
        elif isinstance(function, types.FunctionType) and _settable_class(type(owner)) \
                and isinstance(getattr(owner, "__dict__", None), dict):
            escaped.setdefault(id(owner), (owner, f"{label}.__self__"))
            escaped.setdefault(id(type(owner)), (type(owner), type(owner).__name__))
        else:
            unjudged[f"{label} (a method bound to a {type(owner).__name__})"] = None

    def library(module: types.ModuleType, keys: set[str], label: str) -> None:
        """A library module the code reads ``keys`` of: its mutable state (``os.environ``) is unjudged."""
        for key in sorted(keys):
            if _library_state(vars(module).get(key, _ABSENT)):
                unjudged[f"{label}.{key} (library state nbcompile cannot vary)"] = None

    def chain(value: Any, label: str, loads: list[dis.Instruction], i: int) -> None:
        """``value`` (a global module or class) and the attribute loads after it: followed to the end."""
        j = i + 1
        while True:
            step = loads[j] if j < len(loads) else None
            key = step.argval if step is not None and step.opname in ("LOAD_ATTR", "LOAD_METHOD") \
                and isinstance(step.argval, str) else None
            if isinstance(value, types.ModuleType) and not _user_module(value):
                if key is not None:
                    found = vars(value).get(key, _ABSENT)
                    if _library_state(found):
                        unjudged[f"{label}.{key} (library state nbcompile cannot vary)"] = None
                    elif isinstance(found, types.ModuleType):
                        value, label, j = found, f"{label}.{key}", j + 1
                        continue
                return
            if not _followable(value):
                return
            if key is None:  # stored to a local, passed on, called: every attribute the code names is read
                escaped.setdefault(id(value), (value, label))
                return
            holder = _holder(value, key)
            found = vars(holder)[key] if holder is not None else _ABSENT
            if _followable(found) or (isinstance(found, types.ModuleType) and key in vars(value)):
                value, label, j = found, f"{label}.{key}", j + 1
                continue
            attribute(value, key, f"{label}.{key}")
            return

    while True:
        while pending:
            label, fn = pending.pop()
            fn = torch_compat.unwrap_compiled(fn)
            if _bound_self(fn) is not None and not isinstance(_bound_self(fn), types.ModuleType):
                bound(fn, label)
                continue
            fn = getattr(fn, "__func__", fn)
            while getattr(fn, "__wrapped__", None) is not None and id(fn.__wrapped__) not in seen:
                seen.add(id(fn))
                fn = fn.__wrapped__
            code, space = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
            if not isinstance(code, types.CodeType) or not isinstance(space, dict) or id(fn) in seen:
                continue
            seen.add(id(fn))
            named = {name for each in torch_compat.iter_code_objects(code) for name in each.co_names}
            names.update(named)
            for var, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False):
                try:
                    content = cell.cell_contents
                except ValueError:
                    continue
                if isinstance(content, types.FunctionType):
                    pending.append((var, content))
                elif isinstance(content, types.ModuleType) or _followable(content) \
                        or _bound_self(content) is not None:
                    held(content, f"{var} (in {fn.__name__}'s closure)")
                elif not isinstance(content, _PLAIN):
                    _add_frozen(out, unjudged, cell, "", f"{var} (in {fn.__name__}'s closure)", content)
                else:  # a number: varied below if a function holding the cell stores to it (`nonlocal`)
                    plain_cells.setdefault(id(cell), (cell, var, f"{var} (in {fn.__name__}'s closure)", content))
            for var, default in _defaults(fn):  # `def helper(x, cfg=CFG)`: CFG is read
                held(default, f"{var} (a default of {fn.__name__})")
            for module in imported_modules(code):  # `import cfg` inside the function: cfg.SCALE is read
                if _user_module(module):
                    escaped.setdefault(id(module), (module, module.__name__))
                else:
                    library(module, named, module.__name__)
            for each in torch_compat.iter_code_objects(code):
                loads = [ins for ins in dis.get_instructions(each) if ins.opname not in _NOISE]
                for i, ins in enumerate(loads):
                    dynamic = _dynamic_lookup(loads, i, space)
                    if dynamic is not None:
                        owner, key = dynamic
                        if key is None:
                            unjudged[f"{owner} (a lookup by a name computed at run time, which nbcompile cannot "
                                     "follow)"] = None
                        else:
                            attribute(space[owner], key, f"{owner}.{key}")
                        continue
                    if ins.opname not in ("LOAD_GLOBAL", "LOAD_NAME") or not isinstance(ins.argval, str):
                        continue
                    name = ins.argval
                    if name not in space or name.startswith("__") or _HISTORY.match(name):
                        continue
                    value = space[name]
                    if _rebindable(value) and not code_names.setdefault(id(space), _CodeNames(space)).holds(
                            name, value):  # `ACT = torch.relu`: a value the user may assign again, not code
                        unjudged[f"{name} (a function the user may rebind)"] = None
                    if isinstance(value, types.FunctionType) and value.__name__ == "<lambda>":
                        unjudged[f"{name} (a lambda the user may rebind)"] = None  # a value, written as code
                        pending.append((name, value))
                    elif isinstance(value, types.FunctionType):
                        pending.append((name, value))
                    elif isinstance(value, (types.ModuleType, type)):
                        chain(value, _name_of(value), loads, i)
                    elif _bound_self(value) is not None and not isinstance(_bound_self(value), types.ModuleType):
                        bound(value, name)
                    else:
                        _add_frozen(out, unjudged, space, name, name, value)
        fresh = False
        for ident, (owner, label) in list(escaped.items()):
            new = names - done.setdefault(ident, set())
            fresh = fresh or bool(new)
            done[ident] |= new
            for name in sorted(new):
                attribute(owner, name, f"{label}.{name}")
        if not fresh and not pending:
            break
    written = _stored_cells([(cell, var) for cell, var, _, _ in plain_cells.values()])
    for cell, _, label, content in plain_cells.values():
        if id(cell) in written:  # a sibling's `nonlocal scale; scale = v`: the number changes after tracing
            _add_frozen(out, unjudged, cell, "", label, content)
    frozen = Frozen(out.values())
    frozen.unjudged = list(unjudged)
    return frozen


def _rebindable(value: Any) -> bool:
    """A global the helper calls or builds (a function, a builtin, a class), which Dynamo does not guard
    under a traced-once toggle; not a lambda (unjudged on its own), a module, or a method bound to an
    object (which reads its ``__self__``)."""
    if isinstance(value, types.ModuleType) or not callable(value):
        return False
    if isinstance(value, types.FunctionType) and value.__name__ == "<lambda>":
        return False
    return _bound_self(value) is None


class _CodeNames:
    """Which names of a namespace hold code: a ``def``/``class`` of that name made there, or what the latest
    statement that bound the name (in the cells an IPython shell compiled there, oldest first, or the
    module's file) imported. A name whose latest binding is an assignment, or that no source shows
    bound, holds a value the user may assign again."""

    def __init__(self, space: dict[str, Any]) -> None:
        self.space = space
        self.latest: dict[str, tuple[int, str, tuple[str, str | None]]] = {}
        self.stars: list[tuple[int, str]] = []  # (order, module) of each `from m import *`
        order = 0
        for source in _sources(space):
            for name, how, what in _bindings(source):
                order += 1
                if name == "*":
                    self.stars.append((order, what[0]))
                else:
                    self.latest[name] = (order, how, what)

    def holds(self, name: str, value: Any) -> bool:
        """Whether ``space[name]`` (``value``) is code its binding statement names."""
        original = _original(value)
        here = (isinstance(original, types.FunctionType) and original.__globals__ is self.space) or (
            isinstance(original, type) and original.__module__ == self.space.get("__name__"))
        if here and getattr(original, "__qualname__", None) == name:
            return True  # `def NAME` / `class NAME` run here (re-defining re-runs a cell, which is tracked)
        order, how, what = self.latest.get(name, (0, "", ("", None)))
        for at, module in self.stars:
            if at > order and _imported(self.space, (module, name)) is value:
                order, how, what = at, "import", (module, name)
        if how == "code":
            return True
        return how == "import" and any(v is value or _original(v) is original
                                       for v in (_imported(self.space, what),) if v is not _ABSENT)


def _original(value: Any) -> Any:
    """The function behind ``torch.compile``'s, nbcompile's and ``functools.wraps``' wrappers."""
    value = torch_compat.unwrap_compiled(value)
    try:
        return inspect.unwrap(value)
    except ValueError:  # a cycle of __wrapped__
        return value


def _imported(space: dict[str, Any], what: tuple[str, str | None]) -> Any:
    """What ``import MODULE`` (``what`` = (module, None)) or ``from MODULE import NAME`` binds, from the
    modules loaded now; ``_ABSENT`` when it cannot be told."""
    module_name, attr = what
    if module_name.startswith("."):
        try:
            module_name = importlib.util.resolve_name(module_name, space.get("__package__"))
        except (ImportError, ValueError, TypeError):
            return _ABSENT
    module = sys.modules.get(module_name)
    if module is None or attr is None:
        return _ABSENT if module is None else module
    found = getattr(module, attr, _ABSENT)
    return sys.modules.get(f"{module_name}.{attr}", _ABSENT) if found is _ABSENT else found


def _sources(space: dict[str, Any]) -> list[str]:
    """The code that bound ``space``'s names, oldest first: every cell the IPython shell whose namespace
    it is compiled (IPython keeps each in ``linecache``, stored in the history or not), or the module's
    file."""
    shell = None
    getter = space.get("get_ipython")
    if callable(getter):
        try:
            shell = getter()
        except Exception:
            shell = None
    if shell is not None and space in (getattr(shell, "user_ns", None), getattr(shell, "user_global_ns", None)):
        names = getattr(getattr(shell, "compile", None), "_filename_map", None)
        entries = [linecache.cache.get(n) for n in list(names or ())]
        texts = ["".join(entry[2]) for entry in entries if entry is not None and len(entry) == 4]
        return texts or [t for t in space.get("_ih", ()) if isinstance(t, str)]
    filename = space.get("__file__")
    return ["".join(linecache.getlines(filename))] if isinstance(filename, str) else []


_DEFINES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@functools.lru_cache(maxsize=4096)
def _bindings(source: str) -> tuple[tuple[str, str, tuple[str, str | None]], ...]:
    """Each binding of a global name ``source`` makes, in order: (name, how, what), how being "import"
    (what: (module, attribute or None); name "*" for ``from m import *``), "code" (a ``def`` or ``class``)
    or "value" (an assignment, a ``for``/``with``/``except``/``match`` target, a walrus, ``del``, and a
    ``global NAME`` in a function, which may assign it). A cell magic's body (``%%time``) is read too."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    out: list[tuple[str, str, tuple[str, str | None]]] = []
    nothing: tuple[str, str | None] = ("", None)

    def visit(node: ast.AST, top: bool) -> None:
        if isinstance(node, ast.Global):
            out.extend((name, "value", nothing) for name in node.names)
        elif top and isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    out.append((alias.asname, "import", (alias.name, None)))
                else:
                    head = alias.name.split(".", 1)[0]
                    out.append((head, "import", (head, None)))
        elif top and isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for alias in node.names:
                out.append((alias.asname or alias.name, "import", (module, alias.name if alias.name != "*" else None)))
        elif top and isinstance(node, _DEFINES):
            out.append((node.name, "code", nothing))
        elif top and isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.append((node.id, "value", nothing))
        elif top and isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            out.append((node.name, "value", nothing))
        elif top and isinstance(node, ast.MatchMapping) and node.rest:
            out.append((node.rest, "value", nothing))
        elif top and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "run_cell_magic" and len(node.args) == 3 \
                and isinstance(node.args[2], ast.Constant) and isinstance(node.args[2].value, str):
            out.extend(_bindings(node.args[2].value))
        inner = top and not isinstance(node, (*_DEFINES, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                                              ast.GeneratorExp))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, True)
    return tuple(out)


def _stored_cells(cells: list[tuple[types.CellType, str]]) -> set[int]:
    """The ids of the closure cells among ``cells`` ((cell, variable)) that some function holding them
    stores to (``nonlocal scale; scale = v`` in the reader's sibling, or in the reader), or that a suspended
    generator's frame may store to. Two scans of the objects the garbage collector tracks, only when
    there are such cells."""
    if not cells:
        return set()
    variables = {id(cell): var for cell, var in cells}
    written: set[int] = set()
    referrers = gc.get_referrers(*[cell for cell, _ in cells])
    closures = {id(r): r for r in referrers if type(r) is tuple}
    for frame in referrers:
        code = getattr(frame, "gi_code", None) or getattr(frame, "cr_code", None) or getattr(frame, "ag_code", None)
        if isinstance(code, types.CodeType):
            written |= {ident for ident, var in variables.items() if _stores(code, var)}
    holders = gc.get_referrers(*closures.values()) if closures else []
    for fn in holders:
        if not isinstance(fn, types.FunctionType) or id(fn.__closure__) not in closures:
            continue
        for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
            if id(cell) in variables and _stores(fn.__code__, var):
                written.add(id(cell))
    return written


def _stores(code: types.CodeType, var: str) -> bool:
    """Whether ``code`` or a function nested in it stores to (or deletes) the closure variable ``var``."""
    return any(ins.opname in ("STORE_DEREF", "DELETE_DEREF") and ins.argval == var
               for each in torch_compat.iter_code_objects(code) for ins in dis.get_instructions(each))


def _followable(value: Any) -> bool:
    """A user module or a user class: what the code reads through it is followed by name."""
    return (isinstance(value, types.ModuleType) and _user_module(value)) or (
        isinstance(value, type) and _settable_class(value))


def _name_of(value: Any) -> str:
    return str(getattr(value, "__name__", None) or type(value).__name__)


def _holder(owner: Any, name: str) -> Any:
    """What holds ``owner.name`` in its own ``__dict__``: the owner, or for a class the first of its bases
    (a user class) that defines it; None when none does."""
    if isinstance(owner, type):
        for base in owner.__mro__:
            if name in vars(base):
                return base if _settable_class(base) else None
        return None
    where = getattr(owner, "__dict__", None)
    return owner if isinstance(where, dict) and name in where else None


def _bound_self(value: Any) -> Any:
    """What a bound method reads besides its arguments (``c.get``'s ``c``, ``CFG.get``'s dict); None for
    a plain function (a builtin's ``__self__`` is its module, or None)."""
    if isinstance(value, types.MethodType):
        return value.__self__
    if isinstance(value, (types.BuiltinMethodType, types.MethodWrapperType)) or type(value).__name__ == "method":
        owner = getattr(value, "__self__", None)
        return None if isinstance(owner, types.ModuleType) else owner
    return None


def _defaults(fn: types.FunctionType) -> list[tuple[str, Any]]:
    """A function's default values, by parameter name: read on every call that does not pass them."""
    code = fn.__code__
    values = fn.__defaults__ or ()
    positional = code.co_varnames[:code.co_argcount]
    found = list(zip(positional[len(positional) - len(values):], values, strict=True))
    return found + list((fn.__kwdefaults__ or {}).items())


def _immutable(value: Any) -> bool:
    """A value no one can change in place: a number, a string, None, an enum member, a tuple of those."""
    if value is None or value is Ellipsis or isinstance(value, (*_PLAIN, enum.Enum, range)):
        return True
    return type(value) in (tuple, frozenset) and all(_immutable(v) for v in value)


def _library_state(value: Any) -> bool:
    """State a library module holds and the user may change (``os.environ``, ``sys.argv``), or a function
    that reads it (``os.getenv``): a traced-once function reading it cannot be judged."""
    if value is _ABSENT or isinstance(value, (types.ModuleType, type)):
        return False
    return value in _ENVIRON_READERS if callable(value) else isinstance(
        value, (MutableMapping, MutableSequence, MutableSet))


_ENVIRON_READERS = tuple(f for f in (os.getenv, getattr(os, "getenvb", None)) if f is not None)


#: Instructions between a load and what uses it that say nothing about the value.
_NOISE = frozenset({"PRECALL", "CACHE", "PUSH_NULL", "NOP", "EXTENDED_ARG", "RESUME"})
#: Builtins that look a name up at run time: what they reach cannot be varied by name.
_DYNAMIC_BUILTINS = frozenset({"getattr", "globals", "vars", "eval", "exec", "__import__", "locals"})
#: Attributes that reach a module or a namespace by a computed name.
_DYNAMIC_ATTRS = frozenset({"import_module", "modules", "__dict__", "__globals__", "attrgetter", "reload"})


def _dynamic_lookup(loads: list[dis.Instruction], i: int, space: dict[str, Any]) -> tuple[str, str | None] | None:
    """A lookup by a name computed at run time at ``loads[i]`` (``getattr(cfg, name)``, ``globals()[...]``,
    ``sys.modules[...]``, ``importlib.import_module(...)``, ``vars(...)``): (what it reads in, None), or,
    for ``getattr(X, "const")`` on a global user module or class ``X``, ("X", "const"), a plain attribute
    read; None when ``loads[i]`` is no such lookup."""
    ins = loads[i]
    if not isinstance(ins.argval, str):
        return None
    if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and ins.argval in _DYNAMIC_BUILTINS and ins.argval not in space:
        if ins.argval != "getattr":
            return f"{ins.argval}()", None
        target = loads[i + 1] if i + 1 < len(loads) else None
        if target is None or target.opname not in ("LOAD_GLOBAL", "LOAD_NAME") or target.argval not in space:
            return None  # getattr(self, ...), getattr(x, ...): not a global's attribute
        owner = space[target.argval]
        if not ((isinstance(owner, types.ModuleType) and _user_module(owner))
                or (isinstance(owner, type) and _settable_class(owner))):
            return None
        key = loads[i + 2] if i + 2 < len(loads) else None
        if key is not None and key.opname == "LOAD_CONST" and isinstance(key.argval, str):
            return str(target.argval), key.argval
        return f"getattr({target.argval}, ...)", None
    if ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and ins.argval in _DYNAMIC_ATTRS and i > 0:
        base = loads[i - 1]
        if base.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_DEREF", "LOAD_ATTR"):
            return f"{base.argval}.{ins.argval}", None
    return None


def _inert(value: Any) -> bool:
    """A value a traced-once function may read without freezing anything the user changes by rebinding
    a plain value: classes, modules, tensors and modules (Dynamo sees those), None, loggers, and the
    callables of Python, torch and numpy (not a ``functools.partial`` holding a value, not an object
    with ``__call__`` and state of its own, not a lambda)."""
    if value is None or value is Ellipsis or isinstance(
            value, (types.ModuleType, type, torch.Tensor, torch.nn.Module, logging.Logger)):
        return True
    if isinstance(value, types.FunctionType):
        return value.__name__ != "<lambda>"
    if not callable(value):
        return False
    owner = _bound_self(value)
    if owner is not None:  # `CFG.get`, `c.method`: reads its __self__
        return isinstance(owner, (type, torch.Tensor, torch.nn.Module, logging.Logger))
    home = type(value).__module__.split(".", 1)[0]
    return home in ("builtins", "torch", "numpy") or isinstance(
        value, (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType))


def _add_frozen(out: dict[tuple[int, str], tuple[Slot, Any, Any]], unjudged: dict[str, None], owner: Any,
                key: str, label: str, value: Any) -> None:
    if (id(owner), key) in out:
        return
    other = perturbed(value)
    if other is not _ABSENT:
        out[(id(owner), key)] = (Slot(owner, key, label), value, other)
    elif not _inert(value):
        unjudged[f"{label} ({type(value).__name__})"] = None


def perturbed(value: Any, depth: int = 0) -> Any:
    """A value of the same kind that differs from ``value`` (numbers scaled, numpy's included, strings
    changed, an enum member swapped for another, containers changed item by item, their inert items
    kept); ``_ABSENT`` for what cannot be varied."""
    if depth > 3:
        return _ABSENT
    kind = type(value)
    try:
        if isinstance(value, (bool, numbers.Integral)) and kind.__name__.startswith("bool"):
            return kind(not value)
        if isinstance(value, numbers.Integral):
            return kind(value + 1)
        if isinstance(value, numbers.Real):
            number = float(value)
            return kind(number * 2.5 + 0.5 if math.isfinite(number) else 1.0)
        if isinstance(value, numbers.Complex):
            return kind(complex(value) * 2.5 + 0.5)
    except (TypeError, ValueError, OverflowError):
        return _ABSENT
    if isinstance(value, enum.Enum):
        return next((m for m in kind if m is not value), _ABSENT)
    if kind is str:
        return value + "~"
    if kind is bytes:
        return value + b"~"
    if kind in (list, tuple) and 0 < len(value) <= _MAX_PERTURBED:
        items = [_item(v, depth) for v in value]
        if any(v is _ABSENT for v in items) or all(a is b for a, b in zip(items, value, strict=True)):
            return _ABSENT
        return kind(items)
    if kind is dict and 0 < len(value) <= _MAX_PERTURBED:
        changed = {k: _item(v, depth) for k, v in value.items()}
        if any(v is _ABSENT for v in changed.values()) or all(changed[k] is v for k, v in value.items()):
            return _ABSENT
        return changed
    return _ABSENT


def _item(value: Any, depth: int) -> Any:
    """An item of a varied container: varied, or kept when inert (a None beside the numbers)."""
    other = perturbed(value, depth + 1)
    return value if other is _ABSENT and _inert(value) else other


def short(value: Any) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= 40 else text[:37] + "..."


