"""What a run reaches: the places the state an expression can touch lives (``Slot``s), and the objects
reachable from them.

``reach`` follows the names its code loads through the code of the functions and classes defined in the
same namespace, their closure cells, and the data attributes of the user's classes and modules that the
code names. ``_walk`` lists every object (tensors and their grads included) reachable from a value.
``ReadOnly`` tells which of the tensors a run reached it left as they were (``_marks``: version counter,
grad, sum of the bits).

Names the code never mentions are never reached: an unrelated 200 MB tensor costs nothing. Copying what
is reached, to run it a second time, is ``replay``'s.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import re
import sys
import types
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from ..core import torch_compat
from .usercode import _user_module, import_names, imported_modules, user_code

_WALK_DEPTH = 8
_SKIP_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit", "open"})
#: IPython's output history (``_``, ``__``, ``_3``, ``_i3``, ``_ih``...) and module dunders: never state.
_HISTORY = re.compile(r"^(_{1,3}|_\d+|_i{1,3}|_i\d+|_ih|_oh|_dh|__\w+__)$")
_ATOMIC = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
           str, bytes, int, float, complex, bool, type(None), range, types.CodeType)
_ABSENT = object()


class Slot:
    """A place a value lives: a key of a namespace or module dict, a class attribute, a closure cell."""

    def __init__(self, owner: Any, key: str, label: str) -> None:
        self.owner, self.key, self.label = owner, key, label
        self._hash = hash((id(owner), key))  # a click hashes each of a big cell's slots a dozen times

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Slot) and other.owner is self.owner and other.key == self.key

    def get(self) -> Any:
        if isinstance(self.owner, dict):
            return self.owner.get(self.key, _ABSENT)
        if isinstance(self.owner, types.CellType):
            try:
                return self.owner.cell_contents
            except ValueError:
                return _ABSENT
        return self.owner.__dict__.get(self.key, _ABSENT)

    def set(self, value: Any) -> None:
        if isinstance(self.owner, dict):
            if value is _ABSENT:
                self.owner.pop(self.key, None)
            else:
                self.owner[self.key] = value
        elif isinstance(self.owner, types.CellType):
            self.owner.cell_contents = value
        elif value is _ABSENT:
            delattr(self.owner, self.key)
        else:
            setattr(self.owner, self.key, value)


class DefaultSlot(Slot):
    """A function's default argument (``def add(t, box=seen)``): the run's copy is put in its place for the
    duration, as for a closure cell (a default is read on every call that omits it)."""

    def __init__(self, fn: types.FunctionType, index: int | str, label: str) -> None:
        super().__init__(fn, f"default {index}", label)
        self.index = index

    def get(self) -> Any:
        if isinstance(self.index, int):
            defaults = self.owner.__defaults__ or ()
            return defaults[self.index] if self.index < len(defaults) else _ABSENT
        return (self.owner.__kwdefaults__ or {}).get(self.index, _ABSENT)

    def set(self, value: Any) -> None:
        if value is _ABSENT:
            return  # a default is never removed: the function keeps the one it has
        if isinstance(self.index, int):
            defaults = list(self.owner.__defaults__ or ())
            if self.index < len(defaults):
                defaults[self.index] = value
                self.owner.__defaults__ = tuple(defaults)
        else:
            self.owner.__kwdefaults__ = {**(self.owner.__kwdefaults__ or {}), self.index: value}


_UNCHANGING = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset, range)


def _codes(obj: Any) -> Iterator[types.CodeType]:
    code = getattr(obj, "__code__", None)
    if isinstance(code, types.CodeType):
        yield from torch_compat.iter_code_objects(code)


def _is_state(value: Any) -> bool:
    """Worth copying: data, not code (functions, classes, modules, compiled wrappers)."""
    if isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
                          types.MemberDescriptorType, types.GetSetDescriptorType, types.WrapperDescriptorType,
                          types.MethodDescriptorType, property, enum.Enum)):
        return False
    if isinstance(value, (logging.Logger, logging.LoggerAdapter, logging.Handler, logging.Manager)):
        return False  # where records go, not data: its registry holds every logger of the process
    if torch_compat.unwrap_compiled(value) is not value:
        return isinstance(torch_compat.unwrap_compiled(value), torch.nn.Module)
    if isinstance(value, (torch.Tensor, torch.nn.Module, torch.optim.Optimizer, list, dict, set, tuple)):
        return True
    return not callable(value) or dataclasses.is_dataclass(value) or hasattr(value, "__dict__")


_HEAPTYPE, _IMMUTABLETYPE = 1 << 9, 1 << 8  # Py_TPFLAGS_*


def _settable_class(cls: type) -> bool:
    """A class whose attributes can hold state the run changes: defined in Python (not builtins' or
    torch's), and not an immutable type (``functools.partial`` and other C types cannot be set)."""
    flags = cls.__flags__
    if issubclass(cls, enum.Enum):  # its members are constants: EnumType refuses to reassign them
        return False
    return (cls.__module__ != "builtins" and not cls.__module__.startswith("torch")
            and bool(flags & _HEAPTYPE) and not flags & _IMMUTABLETYPE)


class Reached(dict[str, "Slot"]):
    """``reach``'s answer: label -> slot, plus the user's modules the code can reach (by a global or an
    import inside a function: their attributes are what an audit watches) and the module names its
    functions import inside themselves."""

    modules: list[types.ModuleType]
    imports: set[str]


def reach(namespace: dict[str, Any], code: types.CodeType | None, functions: Iterable[Any] = ()) -> Reached:
    """The slots of state that ``code`` and ``functions`` can read: names of ``namespace``, the
    closure cells of the functions they call, data attributes of the user's classes and modules
    that the code names (a module named by a global, or imported inside a function); followed through
    every function and class defined in the namespace or in those modules."""
    pending: list[str] = []
    seen_codes: set[types.CodeType] = set()
    seen_objects: set[int] = set()
    slots: dict[str, Slot] = {}
    attributes: list[Any] = []  # user classes and modules whose named data attributes are state
    imports: set[str] = set()

    def add_module(module: types.ModuleType) -> None:
        if _user_module(module) and not any(module is a for a in attributes):
            attributes.append(module)

    def add_code(c: types.CodeType) -> None:
        for each in torch_compat.iter_code_objects(c):
            if each not in seen_codes:
                seen_codes.add(each)
                pending.extend(each.co_names)
        imports.update(import_names(c))
        for module in imported_modules(c):  # `import metrics` inside a function: metrics.calls is state
            add_module(module)

    def add_object(obj: Any) -> None:
        obj = torch_compat.unwrap_compiled(obj)
        if id(obj) in seen_objects:
            return
        seen_objects.add(id(obj))
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is not None and wrapped is not obj:
            add_object(wrapped)
        if isinstance(obj, torch.nn.Module):
            obj = type(obj)
        if isinstance(obj, type):
            if _settable_class(obj):
                attributes.append(obj)
                for member in list(vars(obj).values()):
                    add_object(getattr(member, "__func__", member))
            return
        fn = getattr(obj, "__func__", obj)
        home = sys.modules.get(getattr(fn, "__module__", None) or "")
        if home is not None and getattr(fn, "__globals__", None) is vars(home):  # a user module's function
            add_module(home)
        for c in _codes(fn):
            add_code(c)
        freevars = getattr(getattr(fn, "__code__", None), "co_freevars", ())
        for var, cell in zip(freevars, getattr(fn, "__closure__", None) or (), strict=False):
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if _is_state(value):
                slots.setdefault(f"{fn.__name__}.{var}", Slot(cell, "", f"{var} (in {fn.__name__}'s closure)"))
            elif callable(value) or isinstance(value, type):
                add_object(value)
        if isinstance(fn, types.FunctionType) and user_code(fn.__code__):  # `def add(t, box=seen)`: seen is read
            names = fn.__code__.co_varnames[:fn.__code__.co_argcount]
            defaults = fn.__defaults__ or ()
            for i, value in enumerate(defaults):
                if _is_state(value) and not isinstance(value, _UNCHANGING):
                    var = names[len(names) - len(defaults) + i] if len(names) >= len(defaults) else str(i)
                    label = f"{var} (a default of {fn.__name__})"
                    slots.setdefault(f"{fn.__name__}.{var}=", DefaultSlot(fn, i, label))
            for var, value in (fn.__kwdefaults__ or {}).items():
                if _is_state(value) and not isinstance(value, _UNCHANGING):
                    label = f"{var} (a default of {fn.__name__})"
                    slots.setdefault(f"{fn.__name__}.{var}=", DefaultSlot(fn, var, label))


    if code is not None:
        add_code(code)
    for fn in functions:
        add_object(fn)
    seen: set[str] = set()
    followed: set[tuple[int, str]] = set()
    while pending:
        while pending:
            name = pending.pop()
            if name in seen:
                continue
            seen.add(name)
            if name not in namespace or name in _SKIP_NAMES or _HISTORY.match(name):
                continue
            value = namespace[name]
            if isinstance(value, types.ModuleType):
                add_module(value)
            elif _is_state(value):
                slots.setdefault(name, Slot(namespace, name, name))
            if not isinstance(value, types.ModuleType) and (callable(value) or isinstance(value, type)):
                add_object(value)
        for owner in [a for a in attributes if isinstance(a, types.ModuleType)]:  # metrics.bump(): its code too
            where = vars(owner)
            for name in sorted(seen & set(where)):
                value = where[name]
                if (id(owner), name) not in followed and isinstance(value, (types.FunctionType, type)) \
                        and not name.startswith("__"):
                    followed.add((id(owner), name))
                    add_object(value)
    for owner in attributes:  # Counter.n += 1, a user module's state.seen.append(...)
        where = vars(owner)
        prefix = getattr(owner, "__name__", "?")
        for name in sorted(seen & set(where)):
            value = where[name]
            if (not name.startswith("__") and _is_state(value)
                    and not isinstance(value, (property, staticmethod, classmethod))):
                label = f"{prefix}.{name}"
                slots.setdefault(label, Slot(owner if isinstance(owner, type) else where, name, label))
    reached = Reached(sorted(slots.items()))
    reached.modules = [a for a in attributes if isinstance(a, types.ModuleType)]
    reached.imports = imports
    return reached


def _walk(value: Any, found: dict[int, tuple[Any, str]], label: str, depth: int = 0) -> None:
    """Every object (tensors and their grads included) reachable from ``value``: id -> (object, path)."""
    if depth > _WALK_DEPTH or id(value) in found or isinstance(value, _ATOMIC):
        return
    found[id(value)] = (value, label)
    if isinstance(value, torch.Tensor):
        return
    if isinstance(value, torch.nn.Module):
        for name, t in [*value.named_parameters(), *value.named_buffers()]:
            _walk(t, found, f"{label}.{name}", depth + 1)
        return
    if isinstance(value, torch.optim.Optimizer):
        for group in value.param_groups:
            for i, p in enumerate(group["params"]):
                _walk(p, found, f"{label} parameter {i}", depth + 1)
        for i, per_param in enumerate(value.state.values()):
            _walk(per_param, found, f"{label}.state[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        items: Iterable[tuple[str, Any]] = ((f"{label}[{k!r}]", v) for k, v in list(value.items()))
    elif isinstance(value, (list, tuple)):
        items = ((f"{label}[{i}]", v) for i, v in enumerate(value))
    elif isinstance(value, (set, frozenset)):
        items = ((label, v) for v in value)
    else:
        items = ((f"{label}.{k}", v) for k, v in list(getattr(value, "__dict__", {}).items()))
    for path, item in list(items):
        _walk(item, found, path, depth + 1)


def _checksum(t: torch.Tensor) -> Any:
    """A sum of the bits of every element (the tensor's bytes read as 64-bit integers, added
    in int64): what an in-place write the version counter does not see changes (``p.data.clamp_()``, an EMA
    through ``.data``). Exact and the same whatever the thread count or the order of the adds (a float sum
    is not: a forked trial, on one thread, read a float32 sum that differed in the last bit and took it for
    a write); read 8 bytes at a time, 300 MiB in about 15 ms on this CPU."""
    try:
        with torch.no_grad():
            flat = t.detach()
            if flat.is_complex():
                flat = torch.view_as_real(flat)
            flat = flat.reshape(-1)
            if flat.numel() == 0:
                return 0
            raw = flat.view(torch.uint8) if flat.dtype != torch.bool else flat.to(torch.uint8)
            lead = min(-raw.data_ptr() % 8, raw.numel())
            words = (raw.numel() - lead) // 8 * 8
            body = raw[lead:lead + words].view(torch.int64)  # as fast as a float sum (wraps: still exact)
            ends = torch.cat([raw[:lead], raw[lead + words:]])
            return (body.sum(dtype=torch.int64).item(), ends.sum(dtype=torch.int64).item())
    except (RuntimeError, TypeError, NotImplementedError):
        return None


def _marks(t: torch.Tensor) -> tuple[Any, ...]:
    """What tells a tensor was written: its version counter, its grad (the same object, at the same version)
    and the sum of its elements (writes through ``.data`` bump no version counter)."""
    grad = t.grad
    return (torch_compat.tensor_version(t), id(grad), grad is not None and torch_compat.tensor_version(grad),
            _checksum(t))


class ReadOnly:
    """The tensors a run reached and left as they were (no in-place write, no new or changed ``.grad``, the
    same sum of elements), told by their marks before and after it (``watch``, then ``done``): what later runs
    of the same code on copies may share with the user's objects instead of copying. Held by weak
    reference: a tensor the user dropped is not kept alive, and an id reused by another is not trusted;
    a tensor whose version moved since (the user wrote it in a cell) is not shared."""

    def __init__(self, before: dict[int, tuple[weakref.ref[torch.Tensor], Any, tuple[Any, ...]]]) -> None:
        #: id -> (weak ref, its grad then (held while the run lasts: no id of it is reused), its marks)
        self._before = before
        self._kept: dict[int, tuple[weakref.ref[torch.Tensor], tuple[Any, ...]]] = {}
        self._labels: dict[int, str] = {}
        self.written: list[str] = []

    @classmethod
    def watch(cls, roots: dict[str, tuple[Slot, Any]], extra: Any = None) -> ReadOnly:
        """The marks of every tensor ``roots`` and ``extra`` reach, before a run."""
        found: dict[int, tuple[Any, str]] = {}
        for label, (_, value) in roots.items():
            _walk(value, found, label)
        _walk(extra, found, "argument")
        before: dict[int, tuple[weakref.ref[torch.Tensor], Any, tuple[Any, ...]]] = {}
        out = cls(before)
        out._labels = {k: label for k, (_, label) in found.items()}
        for t, _ in found.values():
            if isinstance(t, torch.Tensor):
                try:
                    ref = weakref.ref(t)
                except TypeError:
                    continue
                before[id(t)] = (ref, t.grad, _marks(t))
        return out

    def done(self) -> ReadOnly:
        """After the run: keep the tensors it left as they were."""
        for key, (ref, _, mark) in self._before.items():
            t = ref()
            if t is None:
                continue
            if _marks(t) == mark:
                self._kept[key] = (ref, mark)
            else:
                self.written.append(self._labels.get(key, "a tensor"))
        self._before = {}
        return self

    def holds(self, t: torch.Tensor) -> tuple[Any, ...] | None:
        """The marks ``t`` had when the run left it unwritten, when it still has that version (None: not
        one the run left unwritten, or written since)."""
        kept = self._kept.get(id(t))
        if kept is None or kept[0]() is not t:
            return None
        mark = kept[1]
        grad = t.grad
        if torch_compat.tensor_version(t) != mark[0] or id(grad) != mark[1]:
            return None
        return mark

    def describe_written(self, copied: int) -> str:
        """"300 MiB of them must still be copied (your run wrote ...)": what must still be copied."""
        names = ", ".join(self.written[:3]) + (" and more" if len(self.written) > 3 else "")
        return (f"{copied / 2**20:.0f} MiB of them must still be copied"
                + (f" (your run wrote {names})" if names else " (reached since your run, or written by it)"))


