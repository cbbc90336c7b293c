"""The state a run reaches, copied so that a second run (the eager check, a benchmark) repeats nothing.

``reach`` finds where the state an expression can touch lives (``Slot``s):
the names its code loads, followed through the code of the functions and
classes defined in the same namespace, their closure cells, and the data
attributes of the user's classes and modules that the code names.
``Replay.capture`` copies what those slots hold, plus the call's own arguments. Tensors, ``nn.Module``s
(with their ``.grad``), optimizers (with their state), lists, dicts and plain
objects among them are deep-copied together, so aliasing survives (an
optimizer's parameters are the copied model's). ``swapped()`` binds the
copies in place of the real objects for the duration of the second run; the
user's objects see exactly one run. What cannot be copied within the budget
is said in ``refused``, and nothing is run twice.

Names the code never mentions are never copied: an unrelated 200 MB tensor
costs nothing.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import re
import sys
import types
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from ..core import torch_compat

#: The most bytes of tensor state copied to replay a run.
MAX_COPY_BYTES = 256 * 2**20
_WALK_DEPTH = 8
_SKIP_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit", "open"})
#: IPython's output history (``_``, ``__``, ``_3``, ``_i3``, ``_ih``...) and module dunders: never state.
_HISTORY = re.compile(r"^(_{1,3}|_\d+|_i{1,3}|_i\d+|_ih|_oh|_dh|__\w+__)$")
_ATOMIC = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
           str, bytes, int, float, complex, bool, type(None), range, types.CodeType)
_ABSENT = object()
_SYSTEM_PREFIXES = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})


class Slot:
    """A place a value lives: a key of a namespace or module dict, a class attribute, a closure cell."""

    def __init__(self, owner: Any, key: str, label: str) -> None:
        self.owner, self.key, self.label = owner, key, label

    def __hash__(self) -> int:
        return hash((id(self.owner), self.key))

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


def _codes(obj: Any) -> Iterator[types.CodeType]:
    code = getattr(obj, "__code__", None)
    if isinstance(code, types.CodeType):
        yield from torch_compat.iter_code_objects(code)


def _is_state(value: Any) -> bool:
    """Worth copying: data, not code (functions, classes, modules, compiled wrappers)."""
    if isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
                          types.MemberDescriptorType, types.GetSetDescriptorType, types.WrapperDescriptorType,
                          types.MethodDescriptorType, property)):
        return False
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
    return (cls.__module__ != "builtins" and not cls.__module__.startswith("torch")
            and bool(flags & _HEAPTYPE) and not flags & _IMMUTABLETYPE)


def _user_module(module: types.ModuleType) -> bool:
    """A module of the user's (not the standard library, not an installed package)."""
    path = getattr(module, "__file__", None)
    return bool(path) and not str(path).startswith(_SYSTEM_PREFIXES) and not module.__name__.startswith("torch")


def reach(namespace: dict[str, Any], code: types.CodeType | None, functions: Iterable[Any] = ()) -> dict[str, Slot]:
    """The slots of state that ``code`` and ``functions`` can read: names of ``namespace``, the
    closure cells of the functions they call, data attributes of the user's classes and modules
    that the code names; followed through every function and class defined in the namespace."""
    pending: list[str] = []
    seen_codes: set[types.CodeType] = set()
    seen_objects: set[int] = set()
    slots: dict[str, Slot] = {}
    attributes: list[Any] = []  # user classes and modules whose named data attributes are state

    def add_code(c: types.CodeType) -> None:
        for each in torch_compat.iter_code_objects(c):
            if each not in seen_codes:
                seen_codes.add(each)
                pending.extend(each.co_names)

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
                for member in vars(obj).values():
                    add_object(getattr(member, "__func__", member))
            return
        fn = getattr(obj, "__func__", obj)
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

    if code is not None:
        add_code(code)
    for fn in functions:
        add_object(fn)
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name not in namespace or name in _SKIP_NAMES or _HISTORY.match(name):
            continue
        value = namespace[name]
        if isinstance(value, types.ModuleType):
            if _user_module(value):
                attributes.append(value)
        elif _is_state(value):
            slots.setdefault(name, Slot(namespace, name, name))
        if not isinstance(value, types.ModuleType) and (callable(value) or isinstance(value, type)):
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
    return dict(sorted(slots.items()))


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


def _nbytes(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().nbytes() if t.layout == torch.strided else t.numel() * t.element_size()
    except (RuntimeError, NotImplementedError):
        return t.numel() * t.element_size()


class Replay:
    """Copies of the state a run reaches, taken before it, to run a second time on."""

    #: The fingerprint of the copies right after ``capture`` (unset on a refused replay).
    _marks: list[Any]

    def __init__(self, slots: dict[str, Slot], reals: dict[str, Any], copies: dict[str, Any],
                 extra_copy: Any, refused: str | None) -> None:
        #: label -> where the real object lives; label -> the real object copied; label -> its copy
        self.slots = slots
        self.reals = reals
        self.copies = copies
        self.extra_copy = extra_copy
        #: Why the run cannot be replayed (nothing was copied), or None.
        self.refused = refused
        #: id(real) -> copy, for every object copied (tensors, modules, optimizers...)
        self.memo: dict[int, Any] = {}
        #: (real tensor, its copy, real version at capture, copy version at capture)
        self.pairs: list[tuple[torch.Tensor, torch.Tensor, int, int]] = []
        #: id(real object) -> where it was found ("model.fc.weight"), for messages
        self.labels: dict[int, str] = {}
        #: Optimizers among the copied objects: (label, real, copy)
        self.optimizers: list[tuple[str, Any, Any]] = []
        #: After ``swapped``: (label, what the slot held before the swap, what the second run left in it)
        self.outcomes: list[tuple[str, Any, Any]] = []

    @classmethod
    def capture(cls, roots: dict[str, tuple[Slot, Any]], extra: Any = None,
                budget: int = MAX_COPY_BYTES) -> Replay:
        """Copy the ``roots`` (label -> (slot, the real object)) and ``extra`` (a call's arguments) in one
        deep copy; refuse (``refused``) what cannot be copied or replayed."""
        slots = {label: slot for label, (slot, _) in roots.items()}
        reals = {label: real for label, (_, real) in roots.items()}
        found: dict[int, tuple[Any, str]] = {}
        for label, value in reals.items():
            _walk(value, found, label)
        _walk(extra, found, "argument")
        tensors = [t for t, _ in found.values() if isinstance(t, torch.Tensor)]
        tensors += [t.grad for t in tensors if t.grad is not None]

        def refuse(why: str) -> Replay:
            return cls(slots, reals, {}, None, why)

        size = sum(_nbytes(t) for t in tensors)
        if size > budget:
            what = ", ".join(list(reals)[:3]) or "the arguments"
            return refuse(f"not compared: the run reaches {size / 2**20:.0f} MiB of tensors ({what}), more than the "
                          f"{budget >> 20} MiB nbcompile copies to run it again without touching yours")
        history = next((label for t, label in found.values()
                        if isinstance(t, torch.Tensor) and t.requires_grad and not t.is_leaf), None)
        if history is not None:
            return refuse(f"not compared: {history} carries autograd history (a tensor computed from tensors "
                          "that require grad), which cannot be copied to run again without touching yours")
        memo: dict[int, Any] = {}
        try:
            copied = copy.deepcopy((reals, extra), memo)
        except Exception as exc:  # a lock, a file, a generator: say so, repeat nothing
            return refuse(f"not compared: {_uncopyable(reals)} cannot be copied ({type(exc).__name__}: "
                          f"{(str(exc).splitlines() or [''])[0][:80]}), "
                          "so the eager run could not be kept off your objects")
        replay = cls(slots, reals, copied[0], copied[1], None)
        replay.memo = memo
        replay.labels = {k: label for k, (_, label) in found.items()}
        replay.optimizers = [(label, o, memo[id(o)]) for o, label in found.values()
                             if isinstance(o, torch.optim.Optimizer) and id(o) in memo]
        grad_ids = {id(t.grad) for t in tensors if t.grad is not None}
        for t in tensors:
            if id(t) in grad_ids:
                continue  # a grad: compared with its tensor
            c = memo.get(id(t))
            if isinstance(c, torch.Tensor) and c is not t:
                if t.grad is not None and c.grad is None and c.is_leaf:
                    c.grad = t.grad.detach().clone()  # Parameter's deepcopy drops .grad
                replay.pairs.append((t, c, torch_compat.tensor_version(t), torch_compat.tensor_version(c)))
        replay._marks = replay._fingerprint()
        return replay

    def _fingerprint(self) -> list[Any]:
        marks: list[Any] = []
        for _, twin, _, _ in self.pairs:
            grad = twin.grad
            marks.append((torch_compat.tensor_version(twin), id(grad),
                          grad is not None and torch_compat.tensor_version(grad)))
        for value in [*self.copies.values(), self.extra_copy]:
            marks.append(len(value) if isinstance(value, (list, dict, set)) else None)
        return marks

    def touched(self) -> bool:
        """Whether runs on the copies changed them (a training step, an append): their outputs then
        differ from run to run by design."""
        return self.refused is None and self._fingerprint() != getattr(self, "_marks", None)

    @contextlib.contextmanager
    def swapped(self, also: dict[Slot, Any] | None = None) -> Iterator[Any]:
        """The copies (and ``also``: slot -> object) put in place of the real objects for the duration;
        yields the copy of ``extra``. Each slot gets back what it held, unless the run itself rebound it."""
        put: dict[Slot, Any] = {**(also or {}), **{self.slots[label]: c for label, c in self.copies.items()}}
        saved: list[tuple[Slot, Any]] = []
        try:
            for slot, value in put.items():
                saved.append((slot, slot.get()))
                slot.set(value)
            yield self.extra_copy
        finally:
            labels = {slot: label for label, slot in self.slots.items()}
            self.outcomes = [(labels[slot], before, slot.get()) for slot, before in saved if slot in labels]
            for slot, before in reversed(saved):
                slot.set(before)

    def counterpart(self, obj: Any) -> Any:
        """The copy of a real object (itself if it was not copied)."""
        return self.memo.get(id(obj), obj)

    def changed_pairs(self) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
        """(label, real, copy) for tensors that either run changed in place, or that have grads."""
        out = []
        for real, twin, v_real, v_copy in self.pairs:
            moved = torch_compat.tensor_version(real) != v_real or torch_compat.tensor_version(twin) != v_copy
            if moved or real.grad is not None or twin.grad is not None:
                out.append((self.labels.get(id(real), "a tensor"), real, twin))
        return out


def _uncopyable(roots: dict[str, Any]) -> str:
    """The first root that cannot be deep-copied, by label."""
    for name, value in roots.items():
        try:
            copy.deepcopy(value)
        except Exception:
            return f"`{name}`"
    return "an argument of the call"
