"""Which of a cell's entries a change can alter: the fast loop recompiles those only (``Workload.affected``).

An entry is altered by a change of the names ``changed`` when it is one of them or its code reaches one: through
the globals its code names (functions of the cell, containers holding them, objects of classes the user wrote),
for a module through the methods the user wrote and the attributes (hooks, functions) of it and its submodules.
What cannot be read through (a torch callable, a library function, a method changed, a callable of another
kind) answers None: every entry. Where torch has no cache regions the cell's functions are bound to copies
shared by all entries (``Workload.copied_names``); ``reached`` tells which copies the altered entries reach.

Plain reading of code objects and namespaces, nothing compiled or run; ``codes`` holds the code helpers.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Collection, Iterable
from typing import Any

import torch

from ..core import torch_compat, user_runs
from ..core.names import is_torch_name
from . import library
from .codes import names_of, unwrap
from .usercode import user_code

_MISSING = object()


class _Index:
    """The entries by what they reach (``EntryReach._indexed``): ``by_name`` the names each function entry may
    call, ``always`` those that may call anything, ``opaque`` those that cannot be read through (every entry is
    affected by a change they are not part of), ``modules`` the module entries (read per change)."""

    def __init__(self) -> None:
        self.by_name: dict[str, set[str]] = {}
        self.always: set[str] = set()
        self.opaque: set[str] = set()
        self.modules: list[tuple[str, torch.nn.Module]] = []


class EntryReach:
    """Reads what the entries of a namespace's cell reach. ``tracked``: name -> the cell's function."""

    def __init__(self, namespace: dict[str, Any], tracked: dict[str, Any],
                 bound: Callable[[], Collection[str]] | None = None) -> None:
        self.namespace = namespace
        self.tracked = tracked
        #: The names nbcompile binds now (to a configuration's wrappers or copies): their values are nbcompile's.
        self.bound = bound if bound is not None else (lambda: ())
        #: ``_known_reach``: the moment, the namespace's names and values then, the entries' reach read.
        self._kept: tuple[int, list[tuple[str, Any]], dict[int, tuple[Any, frozenset[str] | None]]] | None = None
        #: ``_indexed``: the kept reach it was read from, the entries (name, object), the index.
        self._index: tuple[dict[int, Any], list[tuple[str, Any]], _Index] | None = None

    def affected(self, changed: Collection[str], entries: dict[str, Any]) -> set[str] | None:
        """The entries (name -> the object compiled for it) whose compiled code a change of the names ``changed``
        can alter: each entry that is one of them or reaches one. None: every entry (a torch callable, a library
        function, a method, or an entry that cannot be read through). A function entry's reach is read once
        (``names_reached``) and kept while the user's code cannot have run (``user_runs.epoch``) and the
        namespace holds the same values: a click of a 500-function cell then reads no entry again."""
        if any(is_torch_name(n) or library.is_library_name(n) or "." in n for n in changed):
            return None
        targets = {n: self.tracked.get(n) for n in changed}
        known = self._known_reach()
        if known is not None:  # the entries by the names they reach, read once while the reach is kept
            index = self._indexed(known, entries)
            if index.opaque - targets.keys():
                return None
            found = {name for name in targets if name in entries} | index.always
            for name in targets:
                found |= index.by_name.get(name, set())
            found.update(entry for entry, module in index.modules if self._module_reaches(module, targets))
            return found
        out: set[str] = set()
        by_id = self._tracked_by_id()
        for entry, obj in entries.items():
            original = torch_compat.unwrap_compiled(obj)
            if entry in targets:
                out.add(entry)
            elif isinstance(original, torch.nn.Module):
                if self._module_reaches(original, targets):
                    out.add(entry)
            elif not isinstance(unwrap(original), types.FunctionType):
                return None
            else:
                names = self.names_reached(unwrap(original), by_id)
                if names is None or not names.isdisjoint(targets):
                    out.add(entry)
        return out

    def _indexed(self, known: dict[int, tuple[Any, frozenset[str] | None]], entries: dict[str, Any]) -> _Index:
        """``_Index`` of ``entries`` (name -> the object compiled for it), kept with ``known`` for the same
        entries (the same objects under the same names)."""
        pairs = list(entries.items())
        kept = self._index
        if kept is not None and kept[0] is known and user_runs.same_values(kept[1], pairs):
            return kept[2]
        index = _Index()
        by_id = self._tracked_by_id()
        for entry, obj in pairs:
            original = torch_compat.unwrap_compiled(obj)
            if isinstance(original, torch.nn.Module):
                index.modules.append((entry, original))
                continue
            fn = unwrap(original)
            if not isinstance(fn, types.FunctionType):
                index.opaque.add(entry)
                continue
            names = known.get(id(fn))
            if names is None or names[0] is not fn:
                names = known[id(fn)] = (fn, self.names_reached(fn, by_id))
            if names[1] is None:
                index.always.add(entry)
            else:
                for name in names[1]:
                    index.by_name.setdefault(name, set()).add(entry)
        self._index = (known, pairs, index)
        return index

    def names_reached(self, fn: types.FunctionType, by_id: dict[int, list[str]] | None = None) -> frozenset[str] | None:
        """What ``fn`` may call, as names: every name its code (and that of what it reaches) uses, and the names
        under which the cell's functions it holds are tracked (a list of them, a closure, a default). None: it
        may call anything (an object of a class the user wrote, a library container of the user's modules).
        ``_function_reaches(fn, targets)`` is true exactly when this is None or meets ``targets``' names."""
        found: set[str] = set()
        if not self._collect_function(fn, found, set(), self._tracked_by_id() if by_id is None else by_id):
            return None
        return frozenset(found)

    def _tracked_by_id(self) -> dict[int, list[str]]:
        """The names each of the cell's functions is tracked under, by its id (the objects are held by
        ``tracked`` meanwhile)."""
        by_id: dict[int, list[str]] = {}
        for name, obj in self.tracked.items():
            if obj is not None:
                by_id.setdefault(id(obj), []).append(name)
        return by_id

    def _known_reach(self) -> dict[int, tuple[Any, frozenset[str] | None]] | None:
        """The entries' reach read so far (id of the function -> the function, its ``names_reached``), for this
        moment of the user's code and this namespace; None: nothing may be kept now."""
        epoch = user_runs.epoch()
        if epoch is None:
            return None
        # the names nbcompile binds aside (to a configuration's wrappers or copies, not held here: a configuration
        # forgotten frees them); the entries' functions are compared by identity instead
        values = user_runs.namespace_values(self.namespace, self.bound())
        kept = self._kept
        if kept is not None and kept[0] == epoch and user_runs.same_values(kept[1], values):
            return kept[2]
        user_runs.keep(self)
        self._kept = (epoch, values, {})
        return self._kept[2]

    def forget_user_reads(self) -> None:
        """The user's code may run now (a cell starts or ends): what was read off their objects is let go."""
        self._kept = None
        self._index = None

    def _collect_function(self, fn: types.FunctionType, found: set[str], seen: set[int],
                          by_id: dict[int, list[str]]) -> bool:
        """``_function_reaches``, collecting: the names ``fn`` may call into ``found``; False: anything."""
        if not self._collect_code(fn.__code__, found, seen, by_id):
            return False
        held = [c.cell_contents for c in fn.__closure__ or () if _filled(c)] + list(fn.__defaults__ or ())
        held += list((fn.__kwdefaults__ or {}).values())
        return all(self._collect_value(v, found, seen, by_id) for v in held)

    def _collect_code(self, code: types.CodeType, found: set[str], seen: set[int],
                      by_id: dict[int, list[str]]) -> bool:
        if id(code) in seen:
            return True
        seen.add(id(code))
        names = names_of(code)
        found.update(names)
        return all(self._collect_value(self.namespace.get(n, _MISSING), found, seen, by_id) for n in names)

    def _collect_value(self, value: Any, found: set[str], seen: set[int], by_id: dict[int, list[str]],
                       depth: int = 0) -> bool:
        """``_may_call``, collecting: the tracked names ``value`` is (by identity) or may call; False: anything."""
        if value is _MISSING or isinstance(value, (types.ModuleType, torch.Tensor, str, bytes, int, float, bool,
                                                   type(None))):
            return True
        plain = torch_compat.unwrap_compiled(value)
        for each in (plain, unwrap(plain)):
            found.update(by_id.get(id(each), ()))
        if isinstance(plain, (list, tuple, set, frozenset, dict)) and depth < 3:
            items = list(plain.values()) if isinstance(plain, dict) else list(plain)
            return all(self._collect_value(v, found, seen, by_id, depth + 1) for v in items[:1000])
        fn = unwrap(plain)
        if isinstance(fn, types.FunctionType):
            if not user_code(fn.__code__):
                return True  # a library function: it cannot call the cell's functions by name
            return self._collect_function(fn, found, seen, by_id)
        if isinstance(plain, torch.nn.Module):  # a library container (nn.Sequential) of the user's modules
            return not any(user_class(type(m)) for m in plain.modules())
        return not user_class(plain if isinstance(plain, type) else type(plain))

    def reached(self, entries: Iterable[Any], names: Collection[str]) -> set[str]:
        """Which of the cell's functions ``names`` the ``entries`` (the objects compiled) reach; every one when an
        entry cannot be read through."""
        functions = []
        for obj in entries:
            fn = unwrap(torch_compat.unwrap_compiled(obj))
            if not isinstance(fn, types.FunctionType):
                return set(names)
            functions.append(fn)
        return {n for n in names if any(self._function_reaches(f, {n: self.tracked.get(n)}, set()) for f in functions)}

    def _module_reaches(self, module: torch.nn.Module, targets: dict[str, Any]) -> bool:
        """Whether a module entry may call one of ``targets``: a method the user wrote (in the MRO of it or of a
        submodule) reaches one, or an attribute of one of them (a hook, a function kept on it) may call one."""
        seen: set[int] = set()
        for sub in module.modules():
            for klass in type(sub).__mro__:
                for fn in vars(klass).values():
                    fn = getattr(fn, "__func__", fn)  # staticmethod, classmethod
                    if isinstance(fn, types.FunctionType) and user_code(fn.__code__) and \
                            self._reaches(fn.__code__, targets, seen):
                        return True
            for attr, value in vars(sub).items():
                if attr not in ("_parameters", "_buffers", "_modules") and self._may_call(value, targets, seen):
                    return True
        return False

    def _function_reaches(self, fn: types.FunctionType, targets: dict[str, Any], seen: set[int]) -> bool:
        """Whether the function ``fn`` may call one of ``targets``: by a name its code uses, or through a value its
        closure or its defaults hold (``make_step(helper)``, ``lambda o, f=helper: f(o)``)."""
        if self._reaches(fn.__code__, targets, seen):
            return True
        held = [c.cell_contents for c in fn.__closure__ or () if _filled(c)] + list(fn.__defaults__ or ())
        held += list((fn.__kwdefaults__ or {}).values())
        return any(self._may_call(v, targets, seen) for v in held)

    def _reaches(self, code: types.CodeType, targets: dict[str, Any], seen: set[int]) -> bool:
        if id(code) in seen:
            return False
        seen.add(id(code))
        names = names_of(code)
        if not names.isdisjoint(targets):
            return True
        return any(self._may_call(self.namespace.get(n, _MISSING), targets, seen) for n in names)

    def _may_call(self, value: Any, targets: dict[str, Any], seen: set[int], depth: int = 0) -> bool:
        """Whether ``value`` (a global the code names) may call one of ``targets``: a function of the cell
        that reaches one, a container holding one, or an object of a class the user wrote."""
        if value is _MISSING or isinstance(value, (types.ModuleType, torch.Tensor, str, bytes, int, float, bool,
                                                   type(None))):
            return False
        plain = torch_compat.unwrap_compiled(value)
        if any(plain is t or unwrap(plain) is t for t in targets.values() if t is not None):
            return True
        if isinstance(plain, (list, tuple, set, frozenset, dict)) and depth < 3:
            items = list(plain.values()) if isinstance(plain, dict) else list(plain)
            return any(self._may_call(v, targets, seen, depth + 1) for v in items[:1000])
        fn = unwrap(plain)
        if isinstance(fn, types.FunctionType):
            if not user_code(fn.__code__):
                return False  # a library function: it cannot call the cell's functions by name
            return self._function_reaches(fn, targets, seen)
        if isinstance(plain, torch.nn.Module):  # a library container (nn.Sequential) of the user's modules
            return any(user_class(type(m)) for m in plain.modules())
        return user_class(plain if isinstance(plain, type) else type(plain))


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018  (an empty cell raises)
    except ValueError:
        return False
    return True


def user_class(cls: type) -> bool:
    """A class with a method the user wrote (in its MRO): its instances may call the cell's functions."""
    return any(isinstance(f, types.FunctionType) and user_code(f.__code__)
               for klass in cls.__mro__ if klass.__module__ != "builtins" for f in vars(klass).values())
