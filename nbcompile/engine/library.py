"""Library functions a session may toggle: ``module:function`` or ``module:Class.method``.

Most graph breaks in real models are in library code (transformers' attention, a logger call in a
model's ``forward``); a toggle on the cell's own functions cannot reach them. A session can track
such a function by its import path (``%%compile --track``, ``Session.track``, and the fix search on
the functions that hold its breaks): the toggle rebinds the module's or the class's attribute, and
the binding writes only while the attribute holds what it put there; ``reset`` puts the original
back. A library function's compiled code is never dropped by nbcompile (other models may use it).

Several sessions (or ``inspect`` calls) may track one library function. Its attribute is one
``SharedSlot`` for all of them: the true original is recorded by the first taker, each holder's value
is a layer (the latest write shows), and a holder that lets go takes only its own layer away: the
attribute shows the next layer down, or the original once the last holder is gone, whatever the order.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from ..core import torch_compat
from ..core.errors import NbcompileError
from .toggles import _MISSING, Binding, StaleError, slot_problem

SEP = ":"
_EXAMPLE = "transformers.models.gpt2.modeling_gpt2:GPT2Attention.forward"


def is_library_name(name: str) -> bool:
    return SEP in name


class SharedSlot:
    """One library attribute (a module's function, a class's method) as every holder shares it."""

    def __init__(self, owner: Any, attr: str, original: Any) -> None:
        self.owner = owner  # the module's dict, or the class (kept alive: the key is its id)
        self.attr = attr
        #: What was there before any holder wrote.
        self.original = original
        #: What the attribute holds as far as nbcompile knows (the top layer, or the original).
        self.current = original
        #: id(binding) -> (binding, the value it asked for); the last one is the top.
        self.layers: dict[int, tuple[LibraryBinding, Any]] = {}

    def read(self) -> Any:
        if isinstance(self.owner, dict):
            return self.owner.get(self.attr, _MISSING)
        return self.owner.__dict__.get(self.attr, _MISSING)

    def show(self) -> None:
        """Write the top layer's value (or the original) if it is not what the attribute holds."""
        value = next(reversed(self.layers.values()))[1] if self.layers else self.original
        if self.read() is not value:
            if isinstance(self.owner, dict):
                self.owner[self.attr] = value
            else:
                setattr(self.owner, self.attr, value)
        self.current = value


_SLOTS: dict[tuple[int, str], SharedSlot] = {}
_LOCK = threading.RLock()


def _slot(owner: Any, attr: str) -> SharedSlot:
    """The shared slot of ``owner.attr``: the one holders already share while the attribute still holds
    what they put there; a fresh one (what is there now as the original) otherwise."""
    with _LOCK:
        key = (id(owner), attr)
        slot = _SLOTS.get(key)
        if slot is None or slot.owner is not owner or slot.read() is not slot.current:
            now = owner.get(attr, _MISSING) if isinstance(owner, dict) else owner.__dict__.get(attr, _MISSING)
            slot = _SLOTS[key] = SharedSlot(owner, attr, now)
        return slot


class LibraryBinding(Binding):
    """A holder's binding of a shared library attribute: it writes its own layer, and ``restore`` takes only
    that layer away."""

    def __init__(self, name: str, slot: SharedSlot, *, holder: tuple[dict[str, Any], str, Any] | None = None):
        self.slot = slot
        super().__init__(name, slot.owner, slot.attr, holder=holder)
        self.original = self.expected = slot.original

    def problem(self) -> str | None:
        return slot_problem(self.name, self.holder, self._read(), self.slot.current)

    def write_now(self, value: Any) -> None:
        with _LOCK:
            problem = self.problem()
            if problem is not None:
                raise StaleError(problem)
            self.slot.layers.pop(id(self), None)
            self.slot.layers[id(self)] = (self, value)
            self.slot.show()
            self.expected = value

    def restore(self) -> bool:
        """This holder's layer taken away; the attribute shows the next layer down (or the original) if it
        still holds what nbcompile put there. False (nothing written) if the user changed it."""
        with _LOCK:
            problem = self.problem()
            had = self.slot.layers.pop(id(self), None) is not None
            if problem is not None:
                return False
            if had:
                self.slot.show()
            self.expected = self.original
            return True


def resolve(name: str) -> tuple[Binding, types.FunctionType]:
    """The binding and the function for ``module:function`` or ``module:Class.method``."""
    module_name, _, qual = name.partition(SEP)
    parts = qual.split(".")
    if not module_name or not qual or len(parts) > 2 or not all(p.isidentifier() for p in parts):
        raise NbcompileError(f"{name!r}: give a library function as module:function or module:Class.method "
                             f"({_EXAMPLE})")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise NbcompileError(f"{name!r}: module {module_name} does not import ({type(exc).__name__}: {exc})") from None
    space = vars(module)
    if len(parts) == 1:
        slot = _slot(space, parts[0])
        binding = LibraryBinding(name, slot)
    else:
        cls = space.get(parts[0])
        if not isinstance(cls, type):
            raise NbcompileError(f"{name!r}: {module_name} has no class {parts[0]}")
        slot = _slot(cls, parts[1])
        binding = LibraryBinding(name, slot, holder=(space, parts[0], cls))
    fn = None if slot.original is _MISSING else slot.original  # the true original, whatever a holder put there
    if not isinstance(fn, types.FunctionType):
        what = "nothing" if fn is None else f"a {type(fn).__name__}"
        raise NbcompileError(f"{name!r} is {what}, not a Python function defined there; nbcompile toggles plain "
                             "functions and methods")
    return binding, fn


class LibraryRewrite:
    """A library function's rewritten copy (a fix search's proven rewrite of library lines) bound where the
    function lives, as one layer of its shared slot: toggles of other holders still layer on it, and ``undo``
    takes only this layer away (the file is never written)."""

    def __init__(self, name: str, fn: types.FunctionType) -> None:
        self.name = name
        self.fn = fn
        self.binding, _ = resolve(name)
        self.binding.write(fn)

    def undo(self) -> bool:
        """The layer taken away; False (nothing written) when the attribute no longer holds it."""
        return self.binding.restore()


@dataclasses.dataclass
class RewriteSwap:
    """What setting a session's library rewrites did: ``changed`` (a function now binds another copy: its
    callers' compiled code must be compiled anew), and ``undo`` (the rewrites bound before, bound again)."""

    changed: bool
    undo: Callable[[], None]


def holder_of(filename: str, lineno: int) -> str | None:
    """The library function (``module:Class.method``) whose code holds ``filename:lineno``, or None."""
    module = next((m for m in list(sys.modules.values())
                   if isinstance(getattr(m, "__file__", None), str) and m.__file__ == filename), None)
    if module is None or module.__name__.split(".")[0] in ("torch", "functorch"):
        return None  # torch's own internals (hooks, nn.Module.__call__) are not nbcompile's to rebind
    for attr, value in torch_compat.namespace_items(vars(module)):
        if attr.startswith("__") or (isinstance(value, types.FunctionType) and
                                     value.__code__.co_name.startswith("torch_dynamo_resume_in_")):
            continue  # Dynamo's resume functions, installed in the module's globals: not the library's code
        if isinstance(value, types.FunctionType) and _holds(value, filename, lineno):
            return f"{module.__name__}{SEP}{attr}"
        if isinstance(value, type) and value.__module__ == module.__name__:
            for method, fn in list(vars(value).items()):
                if isinstance(fn, types.FunctionType) and _holds(fn, filename, lineno):
                    return f"{module.__name__}{SEP}{attr}.{method}"
    return None


def _holds(fn: Any, filename: str, lineno: int) -> bool:
    code = fn.__code__
    if code.co_filename != filename:
        return False
    lines = [line for _, _, line in code.co_lines() if line]
    return bool(lines) and min(code.co_firstlineno, *lines) <= lineno <= max(lines)


def short(name: str) -> str:
    """``GPT2Attention.forward`` for ``transformers....modeling_gpt2:GPT2Attention.forward``."""
    return name.partition(SEP)[2] or name


def export_target(name: str) -> tuple[str, str]:
    """(the import line, the dotted expression) that reach a library function in the user's code."""
    module_name, _, qual = name.partition(SEP)
    return f"import {module_name}", f"{module_name}.{qual}"
