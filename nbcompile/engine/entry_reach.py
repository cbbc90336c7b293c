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
from collections.abc import Collection, Iterable
from typing import Any

import torch

from ..core import torch_compat
from ..core.names import is_torch_name
from . import library
from .codes import names_of, unwrap
from .usercode import user_code

_MISSING = object()


class EntryReach:
    """Reads what the entries of a namespace's cell reach. ``tracked``: name -> the cell's function."""

    def __init__(self, namespace: dict[str, Any], tracked: dict[str, Any]) -> None:
        self.namespace = namespace
        self.tracked = tracked

    def affected(self, changed: Collection[str], entries: dict[str, Any]) -> set[str] | None:
        """The entries (name -> the object compiled for it) whose compiled code a change of the names ``changed``
        can alter: each entry that is one of them or reaches one. None: every entry (a torch callable, a library
        function, a method, or an entry that cannot be read through)."""
        if any(is_torch_name(n) or library.is_library_name(n) or "." in n for n in changed):
            return None
        targets = {n: self.tracked.get(n) for n in changed}
        out: set[str] = set()
        for entry, obj in entries.items():
            original = torch_compat.unwrap_compiled(obj)
            if entry in targets:
                out.add(entry)
            elif isinstance(original, torch.nn.Module):
                if self._module_reaches(original, targets):
                    out.add(entry)
            elif not isinstance(unwrap(original), types.FunctionType):
                return None
            elif self._function_reaches(unwrap(original), targets, set()):
                out.add(entry)
        return out

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
