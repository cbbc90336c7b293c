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

import ast
import collections
import contextlib
import copy
import dataclasses
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
import re
import sys
import tempfile
import types
import weakref
from collections.abc import Iterable, Iterator, MutableMapping, MutableSequence, MutableSet
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
#: What ``copy.deepcopy`` hands back as it is (``Replay.refresh`` expects the same object in the copies).
_DEEPCOPY_KEEPS = (*_ATOMIC, types.BuiltinMethodType, weakref.ref, property, enum.Enum, torch.dtype, torch.device,
                   torch.layout, torch.memory_format, type(Ellipsis), type(NotImplemented))
_SYSTEM_PREFIXES = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
#: Floating-point dtypes the float64 reference widens.
_NARROW = (torch.float16, torch.bfloat16, torch.float32)


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


_OWN_PACKAGE = __name__.split(".", 1)[0]


def _user_module(module: types.ModuleType) -> bool:
    """A module of the user's (not the standard library, not an installed package): one loaded from a
    file outside them, or one the user's code built (``types.ModuleType(...)`` put in ``sys.modules``)."""
    name = str(getattr(module, "__name__", ""))
    if name.startswith("torch"):
        return False
    path = getattr(module, "__file__", None)
    if path:
        return not str(path).startswith(_SYSTEM_PREFIXES)
    return made_at_run_time(module)


def user_code(code: types.CodeType) -> bool:
    """Code the user wrote (a cell, a file of theirs), not the standard library's or an installed package's."""
    return user_file(code.co_filename)


def user_file(filename: str) -> bool:
    """A file of the user's (a cell's, a module of theirs), not the standard library's or an installed package's."""
    return not filename.startswith(_SYSTEM_PREFIXES) and not filename.startswith(os.path.dirname(torch.__file__))


def made_at_run_time(module: types.ModuleType) -> bool:
    """A module with no file that no import system made: not a builtin, frozen or extension module, not a
    namespace package, not a part of an installed package (``six.moves``, ``pyexpat.errors``)."""
    name = str(getattr(module, "__name__", ""))
    if (getattr(module, "__file__", None) or getattr(module, "__spec__", None) is not None
            or getattr(module, "__path__", None) is not None or name in sys.builtin_module_names
            or name in ("__main__", "__mp_main__")  # the notebook's own namespace (IPython's user module)
            or name.startswith(("torch", "_cython", "cython_runtime")) or name.split(".", 1)[0] == _OWN_PACKAGE):
        return False
    top = sys.modules.get(name.split(".", 1)[0])
    return top is None or top is module or (isinstance(top, types.ModuleType) and _user_module(top))


def user_modules(exclude: Iterable[dict[str, Any]] = ()) -> list[types.ModuleType]:
    """Every user module loaded now (``sys.modules``), however a run reaches it (``import``,
    ``importlib.import_module``, ``sys.modules[...]``, ``__import__``): what an audit watches besides
    the copies. Not nbcompile's own modules, not ``__main__``, not a module whose namespace is one of
    ``exclude`` (the notebook's, whose names the copies hold)."""
    skip = {id(space) for space in exclude}
    generated = (torch_compat.compile_cache_dir(), os.path.join(tempfile.gettempdir(), "torchinductor_"),
                 os.path.join(os.path.expanduser("~"), ".triton"))
    if _JUDGED_UNDER[0] != generated:  # torch's cache directory moved: every module is judged again
        _JUDGED.clear()
        _JUDGED_UNDER[0] = generated
    found = []
    for name, module in list(sys.modules.items()):
        judged = _JUDGED.get(name)
        if judged is not None and judged[0] is module:  # a module with a file, judged once (every run asks)
            mine = judged[1]
        else:
            mine = _is_user_module(name, module, generated)
            if getattr(module, "__file__", None):  # one without: whether it is the user's depends on its package
                _JUDGED[name] = (module, mine)
        if mine and id(vars(module)) not in skip:
            found.append(module)
    return found


#: name -> (the module, whether it is the user's), for ``user_modules``, under the paths of ``_JUDGED_UNDER``.
_JUDGED: dict[str, tuple[Any, bool]] = {}
_JUDGED_UNDER: list[tuple[str, ...]] = [()]


def _is_user_module(name: str, module: Any, generated: tuple[str, ...]) -> bool:
    path = str(getattr(module, "__file__", None) or "")
    return (isinstance(module, types.ModuleType) and "__main__" not in (name, module.__name__)
            and name.split(".", 1)[0] != _OWN_PACKAGE
            and (path.endswith(".py") or made_at_run_time(module))
            and not path.startswith(generated)  # not torch's generated kernels
            and _user_module(module))


def imported_modules(code: types.CodeType) -> list[types.ModuleType]:
    """The modules ``code`` (nested code included) imports inside itself (``import metrics``,
    ``from pkg import mod``), as they are in ``sys.modules`` now: the code's ``IMPORT_NAME``s."""
    found: list[types.ModuleType] = []
    for name in _import_names(code):
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            module = sys.modules.get(".".join(parts[:i]))
            if isinstance(module, types.ModuleType) and module not in found:
                found.append(module)
    return found


@functools.lru_cache(maxsize=4096)
def _import_names(code: types.CodeType) -> tuple[str, ...]:
    """The module names ``code`` (nested code included) imports inside itself, in order (read once per
    code: every run on copies asks again)."""
    return tuple(ins.argval for each in torch_compat.iter_code_objects(code) for ins in dis.get_instructions(each)
                 if ins.opname == "IMPORT_NAME" and isinstance(ins.argval, str) and ins.argval)


def import_names(code: types.CodeType) -> frozenset[str]:
    """The absolute module names ``code`` (nested code included) imports inside itself."""
    return frozenset(_import_names(code))


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
                for member in vars(obj).values():
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


def _nbytes(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().nbytes() if t.layout == torch.strided else t.numel() * t.element_size()
    except (RuntimeError, NotImplementedError):
        return t.numel() * t.element_size()


#: How many swaps (``Replay.swapped``, ``Workload.scratch``) hold the user's names now: copies, originals or
#: scratch values are bound in their place. A change of a session must not start meanwhile (a kernel can
#: handle a widget's message from inside one): it would read them as redefined.
SWAPPED = [0]


def swapping() -> bool:
    """Whether the user's names hold swapped-in values now (``SWAPPED``)."""
    return SWAPPED[0] > 0


#: What ``copy.deepcopy`` hands back as it is although it can hold the real objects: a function's closure
#: (``LRScheduler`` patches ``optimizer.step`` with a closure over a weak reference to the real
#: optimizer), a method bound to a real object, a weak reference to one.
_REHOMED = (types.FunctionType, types.MethodType, types.BuiltinMethodType, weakref.ref)
_REHOME_DEPTH = 3


def _rehomed(value: Any, memo: dict[int, Any], keep_alive: list[Any], depth: int = 0) -> Any:
    """``value`` as the copies must hold it: a function whose closure reaches a copied object is made anew
    with cells that hold the copies, a method bound to a copied object is bound to its copy, a weak
    reference to a copied object refers to its copy; anything else is itself. The new object is kept in
    ``memo`` (the same twin on each refresh: compiled code guards on its identity) and the real one in
    ``keep_alive`` (no id in the memo is reused)."""
    twin = memo.get(id(value), _ABSENT)
    if twin is not _ABSENT:
        return twin
    if depth > _REHOME_DEPTH:
        return value
    made: Any = value
    if isinstance(value, weakref.ref) and type(value) is weakref.ref:
        target = value()
        if target is not None and id(target) in memo and memo[id(target)] is not target:
            made = weakref.ref(memo[id(target)])
    elif isinstance(value, types.MethodType):
        owner = value.__self__
        mapped_owner = memo.get(id(owner), owner)
        func = _rehomed(value.__func__, memo, keep_alive, depth + 1) \
            if isinstance(value.__func__, types.FunctionType) else value.__func__
        if mapped_owner is not owner or func is not value.__func__:
            made = types.MethodType(func, mapped_owner)
    elif isinstance(value, types.BuiltinMethodType):
        owner = getattr(value, "__self__", None)
        twin_owner = memo.get(id(owner), owner) if owner is not None and not isinstance(owner, types.ModuleType) \
            else owner
        if twin_owner is not owner:
            bound = getattr(twin_owner, value.__name__, None)
            if isinstance(bound, types.BuiltinMethodType):
                made = bound
    elif isinstance(value, types.FunctionType) and (value.__closure__ or value.__defaults__ or value.__kwdefaults__):
        def twin_of(inner: Any) -> Any:
            found = memo.get(id(inner), _ABSENT)
            if found is _ABSENT:
                found = _rehomed(inner, memo, keep_alive, depth + 1) if isinstance(inner, _REHOMED) else inner
            return found

        defaults = tuple(twin_of(d) for d in value.__defaults__) if value.__defaults__ else value.__defaults__
        kwdefaults = {k: twin_of(d) for k, d in value.__kwdefaults__.items()} if value.__kwdefaults__ else \
            value.__kwdefaults__
        changed = any(a is not b for a, b in zip(defaults or (), value.__defaults__ or (), strict=False)) or any(
            kwdefaults[k] is not d for k, d in (value.__kwdefaults__ or {}).items())
        contents = []
        for cell in value.__closure__ or ():
            try:
                inner = cell.cell_contents
            except ValueError:  # an empty cell (a name assigned later in the enclosing function)
                contents.append(cell)
                continue
            twin_inner = twin_of(inner)
            changed = changed or twin_inner is not inner
            contents.append(types.CellType(twin_inner))
        if changed:
            fresh = types.FunctionType(value.__code__, value.__globals__, value.__name__, defaults,
                                       tuple(contents) if value.__closure__ else None)
            fresh.__kwdefaults__ = kwdefaults
            fresh.__dict__.update(value.__dict__)  # __wrapped__, _wrapped_by_lr_sched, ...
            fresh.__qualname__, fresh.__module__ = value.__qualname__, value.__module__
            fresh.__doc__ = value.__doc__
            made = fresh
    if made is not value:
        memo[id(value)] = made
        keep_alive.append(value)
    return made


def rehome_callables(values: Iterable[Any], memo: dict[int, Any], keep_alive: list[Any]) -> None:
    """After a deep copy (``memo``: id(real) -> copy): every function, method or weak reference the copies
    hold in an object's ``__dict__`` or a container that reaches a real object is swapped for its twin
    (``_rehomed``), so a run on the copies cannot reach the user's objects through it (deepcopy hands
    functions back as they are)."""
    copied_ids = {id(c) for c in memo.values()}
    seen: set[int] = set()
    stack = [(v, 0) for v in values]
    while stack:
        value, depth = stack.pop()
        if id(value) in seen or depth > 4 * _WALK_DEPTH or isinstance(value, (*_ATOMIC, torch.Tensor)):
            continue
        seen.add(id(value))
        if isinstance(value, dict):
            space: Any = value
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, _REHOMED):
                    value[i] = _rehomed(item, memo, keep_alive)
                else:
                    stack.append((item, depth + 1))
            continue
        elif isinstance(value, (tuple, set, frozenset, collections.deque)):
            stack.extend((item, depth + 1) for item in value)
            continue
        else:
            space = getattr(value, "__dict__", None)
            if not isinstance(space, dict) or id(value) not in copied_ids:
                continue  # only the copies' own objects are rehomed (a shared one is not ours to change)
        for key, item in list(space.items()):
            if isinstance(item, _REHOMED):
                twin = _rehomed(item, memo, keep_alive)
                if twin is not item:
                    space[key] = twin
            else:
                stack.append((item, depth + 1))


class Replay:
    """Copies of the state a run reaches, taken before it, to run a second time on."""

    #: The fingerprint of the copies right after ``capture`` (unset on a refused replay).
    _marks: list[Any]
    #: The same of the user's objects the copies were made from (``reals_moved``).
    _real_marks: list[Any]

    def __init__(self, slots: dict[str, Slot], reals: dict[str, Any], copies: dict[str, Any],
                 extra_copy: Any, refused: str | None, modules: Iterable[types.ModuleType] = (),
                 imports: Iterable[str] = ()) -> None:
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
        #: The user's modules the run can reach (a global, an import inside a function): an audit watches
        #: their attributes (``check.no_outside_effects``), as the copies hold only those the code names.
        self.modules: list[types.ModuleType] = list(modules)
        #: Module names the run's functions import inside themselves (a first import runs a module's code).
        self.imports: set[str] = set(imports)
        #: What the copies' containers held right after ``capture`` (``rewind`` puts it back).
        self._contents: list[tuple[Any, Any]] = []
        #: The user's tensors shared with the copies, not copied (over the budget, the user's own run left
        #: them unwritten): (tensor, its marks: ``_marks``). ``shared_written`` audits them.
        self.shared: list[tuple[torch.Tensor, tuple[Any, ...]]] = []
        self._keep_alive: Any = []

    @classmethod
    def capture(cls, roots: dict[str, tuple[Slot, Any]], extra: Any = None,
                budget: int | None = None, *, modules: Iterable[types.ModuleType] = (),
                imports: Iterable[str] = (), read_only: ReadOnly | None = None) -> Replay:
        """Copy the ``roots`` (label -> (slot, the real object)) and ``extra`` (a call's arguments) in one
        deep copy; refuse (``refused``) what cannot be copied or replayed. ``modules``: the user's modules
        the run reaches (watched by the audit); ``imports``: the module names its functions import.
        ``read_only``: the tensors the user's own run of the same code left unwritten (``ReadOnly``); when the
        tensors reached are over the copy ``budget`` (default ``MAX_COPY_BYTES``), those are shared with
        the copies instead of copied (``shared``; ``shared_written`` audits them after a run), and only
        what that run wrote is copied."""
        budget = MAX_COPY_BYTES if budget is None else budget
        modules, imports = list(modules), set(imports)
        slots = {label: slot for label, (slot, _) in roots.items()}
        reals = {label: real for label, (_, real) in roots.items()}
        found: dict[int, tuple[Any, str]] = {}
        for label, value in reals.items():
            _walk(value, found, label)
        _walk(extra, found, "argument")
        tensors = [t for t, _ in found.values() if isinstance(t, torch.Tensor)]
        tensors += [t.grad for t in tensors if t.grad is not None]

        def refuse(why: str) -> Replay:
            return cls(slots, reals, {}, None, why, modules, imports)

        size = sum(_nbytes(t) for t in tensors)
        memo: dict[int, Any] = {}
        shared: list[tuple[torch.Tensor, tuple[Any, ...]]] = []
        if size > budget:
            what = ", ".join(list(reals)[:3]) or "the arguments"
            if read_only is None:
                return refuse(f"not compared: the run reaches {size / 2**20:.0f} MiB of tensors ({what}), more than "
                              f"the {budget >> 20} MiB nbcompile copies to run it again without touching yours")
            grads = {id(t.grad) for t in tensors if t.grad is not None}
            for t in tensors:
                mark = read_only.holds(t) if id(t) not in grads else None
                if mark is not None:
                    memo[id(t)] = t  # deepcopy hands back the tensor itself: shared, not copied
                    shared.append((t, mark))
            if shared:
                memo[id(memo)] = [t for t, _ in shared]  # deepcopy's keep-alive list, as it makes it
            shared_grads = {id(t.grad) for t, _ in shared if t.grad is not None}
            copied_size = sum(_nbytes(t) for t in tensors if id(t) not in memo and id(t) not in shared_grads)
            if copied_size > budget:
                return refuse(f"not compared: the run reaches {size / 2**20:.0f} MiB of tensors ({what}) and "
                              f"{read_only.describe_written(copied_size)}, more than the {budget >> 20} MiB "
                              "nbcompile copies to run it again without touching yours")
        history = next((label for t, label in found.values()
                        if isinstance(t, torch.Tensor) and t.requires_grad and not t.is_leaf), None)
        if history is not None:
            return refuse(f"not compared: {history} carries autograd history (a tensor computed from tensors "
                          "that require grad), which cannot be copied to run again without touching yours")
        try:
            copied = copy.deepcopy((reals, extra), memo)
        except Exception as exc:  # a lock, a file, a generator: say so, repeat nothing
            return refuse(f"not compared: {_uncopyable(reals)} cannot be copied ({type(exc).__name__}: "
                          f"{(str(exc).splitlines() or [''])[0][:80]}), "
                          "so the eager run could not be kept off your objects")
        replay = cls(slots, reals, copied[0], copied[1], None, modules, imports)
        replay._keep_alive = memo.pop(id(memo), [])  # what deepcopy kept alive: no id in the memo is reused
        replay.memo = memo
        rehome_callables([*replay.copies.values(), replay.extra_copy], memo, replay._keep_alive)
        replay.shared = shared
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
        replay._real_marks = replay._real_fingerprint()
        replay._contents = _containers([*replay.copies.values(), replay.extra_copy])
        return replay

    def rewind(self) -> None:
        """Put back what the copies held right after ``capture``: each slot its copy (a counter the run
        rebound), each list, dict and set among the copies its first contents (an append), the same
        objects, so compiled code guarding on them stays valid. Between timed runs: what a run appends
        never accumulates. Tensors changed in place (a training step) are left as they are."""
        for label, value in self.copies.items():
            slot = self.slots[label]
            if slot.get() is not value:
                slot.set(value)
        for container, contents in self._contents:
            if isinstance(container, list):
                if len(container) != len(contents) or any(a is not b for a, b in zip(container, contents,
                                                                                      strict=False)):
                    container[:] = contents
            elif isinstance(container, dict):
                if len(container) != len(contents) or any(container.get(k, _ABSENT) is not v
                                                          for k, v in contents.items()):
                    container.clear()
                    container.update(contents)
            elif isinstance(container, set) and container != contents:
                container.clear()
                container.update(contents)

    def refresh(self, reals: dict[str, Any]) -> str | None:
        """Make the copies equal again to the real objects as they are now (``reals``: label -> the real
        object, as ``capture`` was given), keeping every copy's identity: compiled code of runs on the copies
        guards on those identities (an optimizer's, a module's), so a toggle back runs it without compiling.
        Each tensor gets its real's values and grad in place; each container and object attribute the same
        contents as its real, through the copies; nothing the run added stays. Refused (the reason returned,
        the copies then unusable: capture anew) when the reals are other objects now, hold an object that
        was not copied (the user's run made it: an optimizer's first state), a tensor changed shape, dtype
        or device, or the copies share tensors with the user (over the copy budget). None: done."""
        if self.refused is not None:
            return self.refused
        if self.shared:
            return "the copies share tensors with your objects (the state is over the copy budget)"
        if set(reals) != set(self.reals) or any(reals[k] is not self.reals[k] for k in reals):
            return "the names the run reaches hold other objects now"
        memo = self.memo
        seen: set[int] = set()

        def mapped(value: Any) -> Any:
            if isinstance(value, _REHOMED):  # a closure, method or weak reference: the copies' own, when it
                return _rehomed(value, memo, self._keep_alive)  # reaches a real object (else itself)
            if isinstance(value, _DEEPCOPY_KEEPS):
                return value  # deepcopy hands these back as they are
            twin = memo.get(id(value), _ABSENT)
            if twin is _ABSENT and type(value) in (tuple, frozenset) and all(mapped(v) is v for v in value):
                return value  # immutable through and through: deepcopy hands it back
            return twin

        def graft(real: Any, twin: Any, where: str, depth: int = 0) -> str | None:
            if real is twin or id(real) in seen or isinstance(real, _ATOMIC):
                return None
            if depth > 4 * _WALK_DEPTH:
                return f"{where} is nested too deep to compare"
            seen.add(id(real))
            if isinstance(real, torch.Tensor):
                return _graft_tensor(real, twin, where)
            if isinstance(real, dict):
                return graft_items(list(real.items()), twin, where, depth, keyed=True)
            if isinstance(real, (list, set)):
                return graft_items([(None, v) for v in real], twin, where, depth, keyed=False)
            if isinstance(real, (tuple, frozenset)):
                for a, b in zip(real, twin, strict=False):
                    problem = graft_value(a, b, where, depth)
                    if problem:
                        return problem
                return None
            if isinstance(real, collections.deque) and isinstance(twin, collections.deque):
                return graft_items([(None, v) for v in real], twin, where, depth, keyed=False)
            state = getattr(real, "__dict__", None)
            if isinstance(state, dict) and isinstance(getattr(twin, "__dict__", None), dict) \
                    and _plain_class(type(real)):
                return graft_items(list(state.items()), twin.__dict__, where, depth, keyed=True)
            if isinstance(state, dict) and isinstance(getattr(twin, "__dict__", None), dict) \
                    and isinstance(real, (torch.nn.Module, torch.optim.Optimizer)):
                return graft_items(list(state.items()), twin.__dict__, where, depth, keyed=True)
            # state held outside a __dict__ (a generator's, a random.Random's, an array's): not refreshed in place
            return f"{where} ({type(real).__name__}) holds state nbcompile cannot refresh in place"

        def graft_value(real: Any, twin: Any, where: str, depth: int) -> str | None:
            expected = mapped(real)
            if expected is _ABSENT:
                return f"{where} holds a {type(real).__name__} made after the copies"
            if expected is not twin:
                return f"{where} holds other objects in the copies"
            return graft(real, twin, where, depth + 1)

        def graft_items(items: list[tuple[Any, Any]], twin: Any, where: str, depth: int, *, keyed: bool) -> str | None:
            contents: list[tuple[Any, Any]] = []
            olds = list(twin.items()) if isinstance(twin, dict) else list(twin) if isinstance(twin, list) else []
            for i, (key, value) in enumerate(items):
                label = (f"{where}[{key!r}]" if isinstance(key, (str, int)) else f"{where}[a {type(key).__name__}]") \
                    if keyed else where
                twin_key = mapped(key) if keyed else None
                twin_value = mapped(value)
                if twin_value is _ABSENT and twin_key is not _ABSENT:
                    # not copied by the deep copy (an object's __setstate__ made it: an optimizer's hook dicts),
                    # or made since on both sides (an optimizer's state, by each one's step): the copies' own
                    # object at the same place, when it is of the same kind, is given the real one's contents
                    here = twin.get(twin_key, _ABSENT) if isinstance(twin, dict) else \
                        olds[i] if isinstance(twin, list) and i < len(olds) else _ABSENT
                    if here is not _ABSENT and type(here) is type(value) and isinstance(value, (dict, list, set,
                                                                                                 torch.Tensor)):
                        twin_value = here
                if twin_key is _ABSENT or twin_value is _ABSENT:
                    return f"{label} holds a {type(value).__name__} made after the copies"
                problem = graft(value, twin_value, label, depth + 1)
                if problem:
                    return problem
                contents.append((twin_key, twin_value))
            if isinstance(twin, dict):
                if len(twin) != len(contents) or any(twin.get(k, _ABSENT) is not v for k, v in contents):
                    twin.clear()
                    twin.update(contents)
            elif isinstance(twin, list):
                if len(twin) != len(contents) or any(a is not b for a, (_, b) in zip(twin, contents, strict=False)):
                    twin[:] = [v for _, v in contents]
            elif isinstance(twin, set):
                wanted = {v for _, v in contents}
                if twin != wanted:
                    twin.clear()
                    twin.update(wanted)
            elif isinstance(twin, collections.deque):
                if len(twin) != len(contents) or any(a is not b for a, (_, b) in zip(twin, contents, strict=False)):
                    twin.clear()
                    twin.extend(v for _, v in contents)
            return None

        for label, real in self.reals.items():
            problem = graft_value(real, self.copies[label], label, 0) if label in self.copies else None
            if problem:
                return problem
            self.slots[label].get()  # the slot still reads (a deleted global raises here, refused below)
        self.pairs = [(t, c, torch_compat.tensor_version(t), torch_compat.tensor_version(c))
                      for t, c, _, _ in self.pairs]
        self.outcomes = []
        self._marks = self._fingerprint()
        self._real_marks = self._real_fingerprint()
        self._contents = _containers([*self.copies.values(), self.extra_copy])
        return None

    def _real_fingerprint(self) -> list[Any]:
        marks: list[Any] = []
        for real, _, _, _ in self.pairs:
            grad = real.grad
            marks.append((torch_compat.tensor_version(real), id(grad),
                          grad is not None and torch_compat.tensor_version(grad)))
        marks.extend(len(real.state) for _, real, _ in self.optimizers)
        return marks

    def reals_moved(self, since: list[Any] | None = None) -> str | None:
        """The first of the user's objects (by its label) that changed since the copies were made or
        refreshed (or since ``since``, a ``_real_fingerprint``): a run on the copies reached it through
        something the copies do not hold apart. None: none did (or nothing was recorded)."""
        before = since if since is not None else getattr(self, "_real_marks", None)
        if before is None:
            return None
        now = self._real_fingerprint()
        for i, (a, b) in enumerate(zip(before, now, strict=False)):
            if a != b:
                if i < len(self.pairs):
                    return self.labels.get(id(self.pairs[i][0]), "a tensor")
                return self.optimizers[i - len(self.pairs)][0]
        return None

    def restore_reals(self, pristine: Replay) -> list[str]:
        """Put the user's tensors that moved back to their values in ``pristine`` (a copy of the same state
        made before the run and not run on since), in place; returns the labels it could not put back."""
        lost: list[str] = []
        before, now = getattr(self, "_real_marks", []), self._real_fingerprint()
        with torch.no_grad():
            for i, (real, _, _, _) in enumerate(self.pairs):
                if i < len(before) and before[i] == now[i]:
                    continue
                twin = pristine.memo.get(id(real))
                label = self.labels.get(id(real), "a tensor")
                if not isinstance(twin, torch.Tensor) or twin is real or twin.shape != real.shape:
                    lost.append(label)
                    continue
                real.copy_(twin)
                real.grad = None if twin.grad is None else twin.grad.detach().clone()
        for label, real, _ in self.optimizers:
            twin = pristine.memo.get(id(real))
            if isinstance(twin, torch.optim.Optimizer) and twin is not real:
                try:
                    real.load_state_dict(twin.state_dict())
                except Exception:  # noqa: BLE001  a state the optimizer will not take back: say so
                    lost.append(label)
        return lost

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

    def widened(self, budget: int = MAX_COPY_BYTES) -> Replay:
        """A further copy of the copies (taken before any run used them), its floating-point tensors in
        float64: the state the float64 reference run gets. ``refused`` says why there is none (over the
        copy budget, tensors sharing storage, a layout that cannot be widened, a copy that failed); the
        memo still maps each real object (by id) to its float64 copy."""
        if self.refused is not None:
            return Replay(self.slots, self.reals, {}, None, self.refused, self.modules, self.imports)

        def refuse(why: str) -> Replay:
            return Replay(self.slots, self.reals, {}, None, why, self.modules, self.imports)

        found: dict[int, tuple[Any, str]] = {}
        for label, value in self.copies.items():
            _walk(value, found, label)
        _walk(self.extra_copy, found, "argument")
        tensors = [t for t, _ in found.values() if isinstance(t, torch.Tensor)]
        tensors += [t.grad for t in tensors if t.grad is not None]
        wide = sum(t.numel() * 8 if t.dtype in _NARROW else _nbytes(t) for t in tensors)
        if wide > budget:
            return refuse(f"a float64 copy of the state would take {wide / 2**20:.0f} MiB, more than the "
                          f"{budget >> 20} MiB nbcompile copies")
        storages: dict[tuple[str, int], int] = {}
        for t in tensors:
            if t.dtype not in _NARROW:
                continue
            if t.layout != torch.strided or t.is_sparse:
                return refuse(f"a tensor has layout {t.layout}, which a float64 copy does not keep")
            key = (str(t.device), t.untyped_storage().data_ptr())
            if key in storages and storages[key] != id(t):
                return refuse("two tensors share storage (views of one tensor), which a float64 copy would part")
            storages[key] = id(t)
        memo: dict[int, Any] = {}
        try:
            copies, extra = copy.deepcopy((self.copies, self.extra_copy), memo)
        except Exception as exc:
            return refuse(f"the copies could not be copied again ({type(exc).__name__})")
        composed = {real: memo.get(id(c), c) for real, c in self.memo.items()}
        for c in list(self.memo.values()):
            twin = memo.get(id(c))
            if isinstance(c, torch.Tensor) and isinstance(twin, torch.Tensor) and c.grad is not None \
                    and twin.grad is None and twin.is_leaf:
                twin.grad = c.grad.detach().clone()  # Parameter's deepcopy drops .grad
        try:
            with torch.no_grad():
                for twin in [v for v in memo.values() if isinstance(v, torch.Tensor)]:
                    if twin.dtype not in _NARROW:
                        continue
                    grad = twin.grad
                    if grad is not None:
                        twin.grad = None
                    twin.data = twin.data.to(torch.float64)
                    if grad is not None:
                        twin.grad = grad.to(torch.float64)
        except (RuntimeError, TypeError) as exc:
            return refuse(f"a tensor could not be made float64 ({type(exc).__name__}: "
                          f"{(str(exc).splitlines() or [''])[0][:80]})")
        replay = Replay(self.slots, self.reals, copies, extra, None, self.modules, self.imports)
        replay.memo = composed
        replay.labels = dict(self.labels)
        replay.optimizers = [(label, real, composed[id(real)]) for label, real, _ in self.optimizers
                             if id(real) in composed]
        for real, _, v_real, _ in self.pairs:
            wide_twin = composed.get(id(real))
            if isinstance(wide_twin, torch.Tensor):
                replay.pairs.append((real, wide_twin, v_real, torch_compat.tensor_version(wide_twin)))
        replay._marks = replay._fingerprint()
        replay._contents = _containers([*replay.copies.values(), replay.extra_copy])
        return replay

    @contextlib.contextmanager
    def swapped(self, also: dict[Slot, Any] | None = None,
                override: dict[Slot, Any] | None = None) -> Iterator[Any]:
        """The copies (and ``also``: slot -> object) put in place of the real objects for the duration;
        yields the copy of ``extra``. ``override`` (slot -> object) wins over a copy (a module entry's copy
        compiled). Each slot gets back what it held, unless the run itself rebound it."""
        put: dict[Slot, Any] = {**(also or {}), **{self.slots[label]: c for label, c in self.copies.items()},
                                **(override or {})}
        saved: list[tuple[Slot, Any]] = []
        try:
            SWAPPED[0] += 1
            for slot, value in put.items():
                saved.append((slot, slot.get()))
                slot.set(value)
            yield self.extra_copy
        finally:
            labels = {slot: label for label, slot in self.slots.items()}
            self.outcomes = [(labels[slot], before, slot.get()) for slot, before in saved if slot in labels]
            for slot, before in reversed(saved):
                slot.set(before)
            SWAPPED[0] -= 1

    def shared_written(self) -> str | None:
        """The first shared tensor a run on the copies changed (in place, or its grad), by its label; None
        when they are all as they were. A run of the same code that the user's own run made read-only
        writes them only when it took another path: the caller refuses further runs."""
        for t, mark in self.shared:
            if _marks(t) != mark:
                return self.labels.get(id(t), "a tensor")
        return None

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


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement, not by C code
_OWN_STATE = ("__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__deepcopy__", "__slots__")


def _plain_class(cls: type) -> bool:
    """A class whose instances keep all their state in their ``__dict__``: written in Python all the way up,
    none of its classes copying or pickling itself its own way (a ``random.Random`` keeps its state in C)."""
    return all(klass is object or (klass.__flags__ & _HEAPTYPE and not any(n in vars(klass) for n in _OWN_STATE))
               for klass in cls.__mro__)


def _graft_tensor(real: torch.Tensor, twin: Any, where: str) -> str | None:
    """``twin`` given ``real``'s values and grad in place (``Replay.refresh``), or why it cannot be."""
    if not isinstance(twin, torch.Tensor):
        return f"{where} is not a tensor in the copies"
    if (real.shape, real.stride(), real.dtype, real.device, real.requires_grad, real.layout) != \
            (twin.shape, twin.stride(), twin.dtype, twin.device, twin.requires_grad, twin.layout):
        return f"{where} changed shape, dtype or device since the copies were made"
    if real.layout != torch.strided or real.is_quantized:
        return f"{where} has layout {real.layout}, which nbcompile does not refresh in place"
    with torch.no_grad():
        twin.detach().copy_(real.detach())
        grad = real.grad
        if grad is None:
            twin.grad = None
        elif twin.grad is not None and twin.grad.shape == grad.shape and twin.grad.dtype == grad.dtype:
            twin.grad.copy_(grad)
        else:
            twin.grad = grad.detach().clone()
    return None


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


def _containers(values: Iterable[Any]) -> list[tuple[Any, Any]]:
    """(container, a shallow copy of what it holds) for every list, dict and set reachable from
    ``values`` (through containers and plain objects, to the walk's depth)."""
    found: dict[int, tuple[Any, str]] = {}
    for value in values:
        _walk(value, found, "")
    out: list[tuple[Any, Any]] = []
    for obj, _ in found.values():
        if type(obj) in (list, set):
            out.append((obj, type(obj)(obj)))
        elif type(obj) is dict:
            out.append((obj, dict(obj)))
    return out


# --- globals a traced-once function freezes -------------------------------------------------------

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


def _uncopyable(roots: dict[str, Any]) -> str:
    """The first root that cannot be deep-copied, by label."""
    for name, value in roots.items():
        try:
            copy.deepcopy(value)
        except Exception:
            return f"`{name}`"
    return "an argument of the call"
