"""The toggle engine: disable / allow_in_graph / disallow_in_graph, applied and undone exactly.

Used by sessions, ``nbcompile.inspect`` and ``nbcompile.bench``; nothing else in
nbcompile validates or applies a toggle.

- A tracked function's toggle rebinds its name (a ``Binding``: a namespace
  key or a class attribute) to ``torch.compiler.disable(fn)`` or to a copy of
  ``fn`` registered with ``allow_in_graph`` (a copy, so a registration the
  user made on the original is never touched). A binding writes only while
  its slot still holds what it last put there: a name the user redefined,
  deleted or that a newer cell took over raises ``StaleError`` instead of
  being overwritten.
- Registrations in Dynamo's registries (``disallow_in_graph`` on a torch
  callable, ``allow_in_graph`` on an object that cannot be copied) go through
  ``REGISTRY``, which counts holders across sessions and ``inspect`` calls:
  the first holder records the registries' state for that object, the last
  one to let go puts it back exactly, whatever the order.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import types
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core import torch_compat
from ..core.errors import NbcompileError
from ..core.names import copy_function, is_torch_name, resolve_torch_callable

FUNCTION_MODES = ("compile", "disable", "allow_in_graph", "nonstrict_trace", "custom_op")
#: Function modes that hold an object of their own (a registered copy, a wrapper, an operator).
_HELD = ("allow_in_graph", "nonstrict_trace", "custom_op")
TORCH_MODES = ("compile", "disallow_in_graph")
#: The %%compile flag that sets each mode.
FLAGS = {"disable": "--disable", "allow_in_graph": "--allow", "disallow_in_graph": "--disallow"}

_MISSING = object()


class StaleError(NbcompileError):
    """A binding no longer holds what nbcompile put there; the message says what happened."""


def available_function_modes() -> tuple[str, ...]:
    """The function modes this torch has (``nonstrict_trace`` and ``custom_op`` are newer)."""
    return tuple(m for m in FUNCTION_MODES if m not in ("nonstrict_trace", "custom_op")
                 or (m == "nonstrict_trace" and torch_compat.NONSTRICT_TRACE)
                 or (m == "custom_op" and torch_compat.CUSTOM_OP))


# --- validation (the only copy) ---------------------------------------------------------------

def validate(name: str, mode: str, functions: Collection[str], *, where: str = "") -> None:
    """Check one toggle before anything is applied; a one-line error says what is valid.

    ``functions`` are the names that take function modes (a cell's defs, a
    module's globals); dotted ``torch.`` names take the torch modes.
    """
    if name in functions and not is_torch_name(name):
        if mode not in available_function_modes():
            hint = (" (disallow_in_graph is for torch callables; for your own function use disable)"
                    if mode == "disallow_in_graph" else
                    f" ({mode} needs a newer torch than {torch.__version__})" if mode in FUNCTION_MODES else "")
            raise NbcompileError(
                f"unknown mode {mode!r} for {name}; valid: {', '.join(available_function_modes())}{hint}")
        return
    if is_torch_name(name):
        if mode not in TORCH_MODES:
            hint = (" (allow_in_graph is for your own functions; torch callables are in the graph already)"
                    if mode == "allow_in_graph" else "")
            raise NbcompileError(
                f"unknown mode {mode!r} for {name}; valid for torch callables: {', '.join(TORCH_MODES)}{hint}")
        obj = resolve_torch_callable(name)
        if mode == "disallow_in_graph" and name.startswith("torch.Tensor."):
            raise NbcompileError(f"{name} is a tensor method, which Dynamo traces itself: disallow_in_graph has no "
                                 f"effect on it; give the function form (torch.{name.rsplit('.', 1)[1]})")
        if mode == "disallow_in_graph" and isinstance(obj, type):
            raise NbcompileError(f"{name} is a class; disallow_in_graph takes torch functions "
                                 "(torch.sub, torch.nn.functional.gelu)")
        return
    valid = ", ".join(sorted(functions)) or "(none)"
    raise NbcompileError(
        f"unknown function {name!r}{where}; valid: {valid}, or a torch callable by dotted name (torch.sub)")


def validate_flags(toggles: Iterable[tuple[str, str]], functions: Collection[str]) -> None:
    """``%%compile`` flags: each name valid for its flag, and no name under two flags."""
    seen: dict[str, str] = {}
    for name, mode in toggles:
        flag = FLAGS[mode]
        if name in seen and seen[name] != mode:
            raise NbcompileError(f"{name} is given to both {FLAGS[seen[name]]} and {flag}; choose one")
        seen[name] = mode
        if mode == "disallow_in_graph" and not is_torch_name(name):
            what = "a function of this cell" if name in functions else "not a torch callable"
            raise NbcompileError(
                f"--disallow {name}: {what}; --disallow takes torch callables by dotted name (torch.sub), "
                "and your own functions take --disable")
        if mode != "disallow_in_graph" and is_torch_name(name):
            raise NbcompileError(
                f"{flag} {name}: {flag} takes functions of this cell ({', '.join(sorted(functions)) or 'none'}); "
                "a torch callable takes --disallow")
        validate(name, mode, functions, where=f" for {flag}")


# --- counted registrations ------------------------------------------------------------------

@dataclass
class _Held:
    obj: Any
    before: dict[str, bool]
    counts: dict[str, int] = field(default_factory=dict)


class Registry:
    """Registrations nbcompile holds in Dynamo's allow/disallow registries, counted per object."""

    def __init__(self) -> None:
        self._held: dict[int, _Held] = {}
        self._lock = threading.RLock()

    def acquire(self, obj: Any, kind: str, label: str = "") -> Registration:
        """Register ``obj`` (``kind``: ``allow`` or ``disallow``) for one more holder."""
        with self._lock:
            held = self._held.get(id(obj))
            fresh = held is None
            if held is None:
                held = _Held(obj, torch_compat.registry_membership(obj))
            if held.counts.get(kind, 0) == 0:
                try:
                    _register(obj, kind, label)
                except BaseException:
                    if fresh:
                        torch_compat.restore_registry_membership(obj, held.before)
                    raise
            held.counts[kind] = held.counts.get(kind, 0) + 1
            self._held[id(obj)] = held
            return Registration(obj, kind)

    def release(self, registration: Registration) -> None:
        with self._lock:
            held = self._held.get(id(registration.obj))
            if held is None or held.counts.get(registration.kind, 0) == 0:
                return
            held.counts[registration.kind] -= 1
            if held.counts[registration.kind]:
                return
            # Back to the state before any holder, then the kinds other holders still hold.
            torch_compat.restore_registry_membership(held.obj, held.before)
            remaining = [k for k, n in held.counts.items() if n]
            for kind in remaining:
                _register(held.obj, kind, "")
            if not remaining:
                del self._held[id(registration.obj)]

    @contextlib.contextmanager
    def suspended(self, objs: Iterable[Any], kind: str) -> Iterator[None]:
        """``objs`` as torch had them before any holder registered them as ``kind``, for the duration (a
        scratch run's configuration without them); every holder's registration is back afterwards. The
        counts are left alone: nothing a holder did is undone, only lent."""
        with self._lock:
            lent = []
            for obj in objs:
                held = self._held.get(id(obj))
                if held is not None and held.counts.get(kind, 0):
                    torch_compat.restore_registry_membership(held.obj, held.before)
                    for other in [k for k, n in held.counts.items() if n and k != kind]:
                        _register(held.obj, other, "")
                    lent.append(held)
            try:
                yield
            finally:
                for held in lent:
                    if held.counts.get(kind, 0):
                        _register(held.obj, kind, "")

    def held(self) -> dict[int, dict[str, int]]:
        """id(obj) -> holders per kind (for tests and diagnostics)."""
        with self._lock:
            return {k: {kind: n for kind, n in h.counts.items() if n} for k, h in self._held.items()}


def _register(obj: Any, kind: str, label: str) -> None:
    if kind == "allow":
        torch.compiler.allow_in_graph(obj)  # type: ignore[no-untyped-call]  # unannotated in torch
        return
    try:
        torch_compat.disallow_in_graph(obj)
    except (RuntimeError, AssertionError) as exc:
        raise NbcompileError(
            f"disallow_in_graph({label or obj!r}) refused: {str(exc).splitlines()[0]} "
            "It applies to torch ops; for your own function use disable") from None


REGISTRY = Registry()


@dataclass
class Registration:
    """One holder's registration; ``undo`` lets go of it (idempotent)."""

    obj: Any
    kind: str
    done: bool = False
    #: For what nbcompile made itself (a nonstrict_trace wrapper, a custom operator): how it is undone.
    release: Callable[[], None] | None = None

    def undo(self) -> None:
        if not self.done:
            self.done = True
            if self.release is not None:
                self.release()
            else:
                REGISTRY.release(self)


# --- bindings -------------------------------------------------------------------------------

def slot_problem(name: str, holder: tuple[dict[str, Any], str, Any] | None, value: Any, expected: Any) -> str | None:
    """What happened to a slot nbcompile wrote ``expected`` into, now holding ``value`` (``_MISSING``: gone),
    with the class that holds it (``holder``: namespace, class name, class), in a few words; None when
    nothing did."""
    if holder is not None:
        namespace, cls_name, cls = holder
        now = namespace.get(cls_name, _MISSING)
        if now is _MISSING:
            return f"class {cls_name} was deleted"
        if now is not cls:
            return f"class {cls_name} was redefined"
    if value is _MISSING:
        return f"{name} was deleted"
    if value is not expected:
        return f"{name} was redefined"
    return None


class Binding:
    """A name nbcompile may rebind: a key of a namespace dict or a class attribute.

    ``original`` is what was there when nbcompile took it; ``expected`` is what
    nbcompile last put there. Writes are refused (``StaleError``) once the slot
    holds anything else.
    """

    def __init__(self, name: str, owner: Any, attr: str, *, holder: tuple[dict[str, Any], str, Any] | None = None):
        self.name = name
        self.owner = owner  # the namespace dict, or the class for Class.method
        self.attr = attr
        #: For a class attribute: (namespace, class name, the class); the class itself must still be there.
        self.holder = holder
        self.original = self._read()
        self.expected = self.original

    def _read(self) -> Any:
        if isinstance(self.owner, dict):
            return self.owner.get(self.attr, _MISSING)
        return self.owner.__dict__.get(self.attr, _MISSING)

    def owned(self) -> bool:
        """``problem() is None``, cheaply where no class holds the slot: the slot holds what nbcompile put there."""
        if self.holder is None:
            return self._read() is self.expected
        return self.problem() is None

    def problem(self) -> str | None:
        """None while the slot holds what nbcompile put there; else what happened, in a few words."""
        return slot_problem(self.name, self.holder, self._read(), self.expected)

    def write(self, value: Any) -> None:
        with no_compile_elsewhere():
            self.write_now(value)

    def write_now(self, value: Any) -> None:
        """``write`` inside a ``no_compile_elsewhere`` the caller holds (one for many bindings); a slot that
        holds ``value`` already is left as it is."""
        problem = self.problem()
        if problem is not None:
            raise StaleError(problem)
        if self._read() is not value:
            if isinstance(self.owner, dict):
                self.owner[self.attr] = value
            else:
                setattr(self.owner, self.attr, value)
        self.expected = value

    def restore(self) -> bool:
        """Put the original back if the slot is still ours; False (nothing written) otherwise."""
        if self.problem() is not None:
            return False
        if self.expected is not self.original:
            self.write(self.original)
        return True


#: How long a binding waits for another thread's compile to end before it binds all the same.
BIND_WAIT_S = 10.0


def _compiling_elsewhere() -> bool:
    """Whether another thread is inside Dynamo's frame conversion (a compile in progress)."""
    me = threading.get_ident()
    for ident, frame in sys._current_frames().items():  # noqa: SLF001  # documented in sys; no public form
        each: types.FrameType | None = frame
        while ident != me and each is not None:
            seen = torch_compat.dynamo_frame(each)
            if seen is not None and seen[0] == "compiling":
                return True
            each = each.f_back
    return False


@contextlib.contextmanager
def no_compile_elsewhere(wait_s: float = BIND_WAIT_S) -> Iterator[None]:
    """For the duration, with no forced thread switch: no other thread compiling (one that is, waited for up to
    ``wait_s``). A compile checks the guards it made on the frame it compiled, names' bindings included: a name
    bound anew meanwhile (a toggle while the user's thread compiles) fails them, and torch raises in that thread
    ("Guard failed on the same frame it was created")."""
    interval = sys.getswitchinterval()
    deadline = time.monotonic() + wait_s
    try:
        while True:
            # the check and what follows with no forced thread switch between them (Python code only: no other
            # thread runs unless this one waits), so no compile starts in between
            sys.setswitchinterval(max(interval, 1.0))
            if not _compiling_elsewhere() or time.monotonic() >= deadline:
                break
            sys.setswitchinterval(interval)
            time.sleep(0.001)
        yield
    finally:
        sys.setswitchinterval(interval)


def binding_for(name: str, namespace: dict[str, Any]) -> Binding:
    """The binding of a top-level name or of ``Class.method`` in ``namespace``."""
    if "." in name and not is_torch_name(name):
        cls_name, attr = name.split(".", 1)
        cls = namespace[cls_name]
        return Binding(name, cls, attr, holder=(namespace, cls_name, cls))
    return Binding(name, namespace, name)


# --- the engine ---------------------------------------------------------------------------------

class Toggles:
    """The toggles one owner (a session, an ``inspect`` call) applied; ``undo_all`` gives all back.

    ``bindings`` maps tracked names to their bindings. ``wrap(name, obj)``
    gives what the name is bound to (the session compiles its entries there).
    """

    def __init__(self, bindings: dict[str, Binding], wrap: Callable[[str, Any], Any] | None = None,
                 functions: Collection[str] | None = None,
                 custom_op: Callable[[str, Any], tuple[Any, Callable[[], None]]] | None = None) -> None:
        self.bindings = bindings
        self.wrap = wrap or (lambda _name, obj: obj)
        #: ``custom_op(name, original)`` -> (the operator, its release); the owner knows a sample call.
        self.custom_op = custom_op
        #: The names that take function toggles (default: every binding).
        self.functions = list(bindings if functions is None else functions)
        self.modes: dict[str, str] = {name: "compile" for name in self.functions}
        #: name -> (mode, the object it runs as: the registered copy, the wrapper, the operator).
        self._held: dict[str, tuple[str, Any]] = {}
        self._registrations: dict[str, Registration] = {}
        #: Objects whose id stays registered: kept alive so the id is never reused.
        self._keepalive: list[Any] = []

    def mode(self, name: str) -> str:
        return self.modes.get(name, "compile")

    def validate(self, name: str, mode: str) -> None:
        validate(name, mode, self.functions)

    def toggled(self, name: str) -> Any:
        """The object ``name`` runs as under its current mode (before ``wrap``)."""
        original = self.bindings[name].original
        mode = self.mode(name)
        if mode == "disable":
            return torch.compiler.disable(original)  # type: ignore[no-untyped-call]  # unannotated in torch
        if mode in _HELD:
            return self._held[name][1]
        return original

    def apply(self, name: str, mode: str) -> None:
        """Set one toggle; on error nothing changed."""
        self.validate(name, mode)
        if is_torch_name(name):
            self._apply_torch(name, mode)
            return
        binding = self.bindings[name]
        problem = binding.problem()
        if problem is not None:
            raise StaleError(problem)
        previous = self.mode(name)
        # The object the previous mode held and its registration, taken aside together: the new mode's
        # registration takes the same key, and each is let go exactly once (the old one after success).
        old_held = self._held.pop(name, None) if mode != previous else None
        old_registration = self._registrations.pop(f"held:{name}", None) if old_held is not None else None
        made = False
        try:
            if mode in _HELD and name not in self._held:
                self._held[name] = (mode, self._hold(name, mode, binding.original))
                made = True
            self.modes[name] = mode
            binding.write(self.wrap(name, self.toggled(name)))
        except BaseException:
            self.modes[name] = previous
            if made:
                self._release(name)
                self._held.pop(name, None)
            if old_held is not None:
                self._held[name] = old_held
                if old_registration is not None:
                    self._registrations[f"held:{name}"] = old_registration
            raise
        if old_registration is not None:
            old_registration.undo()

    def rebind(self, names: Iterable[str] | None = None) -> None:
        """Bind names (default: all) again under their modes: ``wrap`` is asked anew (new options, a
        fresh compiled wrapper)."""
        # what each name runs as, made first; then every write in one wait for other threads' compiles (a wait
        # per name walked every thread's stack once per function of the cell)
        values = [(self.bindings[name], self.wrap(name, self.toggled(name)))
                  for name in (self.bindings if names is None else names)]
        with no_compile_elsewhere():
            for binding, value in values:
                binding.write_now(value)

    def _hold(self, name: str, mode: str, original: Any) -> Any:
        """The object ``name`` runs as under ``mode``, made (and registered) now; ``_release`` undoes it."""
        plain = torch_compat.unwrap_compiled(original)
        if mode == "nonstrict_trace":
            wrapped, release = torch_compat.nonstrict_trace(copy_function(plain))
            setattr(wrapped, "_nbcompile_original", plain)  # noqa: B010  # what nbcompile's views show
            self._registrations[f"held:{name}"] = Registration(wrapped, "nonstrict", release=release)
            return wrapped
        if mode == "custom_op":
            if self.custom_op is None:
                raise NbcompileError(f"custom_op({name}) needs a sample call to read its argument types from: use it "
                                     "in a %%compile session with --run")
            op, release = self.custom_op(name, plain)
            for key, value in vars(plain).items() if isinstance(plain, types.FunctionType) else ():
                if not key.startswith(("__", "_torchdynamo", "_dynamo", "_nbcompile")) and not hasattr(op, key):
                    with contextlib.suppress(AttributeError, TypeError):  # what the cell hung on it: `helper.set_x`
                        setattr(op, key, value)
            self._registrations[f"held:{name}"] = Registration(op, "custom_op", release=release)
            return op
        if isinstance(plain, types.FunctionType):
            copy = copy_function(plain)
            self._registrations[f"held:{name}"] = REGISTRY.acquire(copy, "allow", name)
            self._keepalive.append(copy)
            return copy
        # A class or a callable object cannot be copied: register it, counted, undone exactly.
        if not hasattr(plain, "__name__"):
            raise NbcompileError(f"allow_in_graph({name}): {type(plain).__name__} objects have no __name__, which "
                                 "Dynamo needs to name the graph node; give the object a __name__, or use disable")
        self._registrations[f"held:{name}"] = REGISTRY.acquire(plain, "allow", name)
        return plain

    def _release(self, name: str) -> None:
        registration = self._registrations.pop(f"held:{name}", None)
        if registration is not None:
            registration.undo()

    def _apply_torch(self, name: str, mode: str) -> None:
        if mode == "disallow_in_graph" and name not in self._registrations:
            self._registrations[name] = REGISTRY.acquire(resolve_torch_callable(name), "disallow", name)
        elif mode == "compile" and name in self._registrations:
            self._registrations.pop(name).undo()
        if mode == "compile":
            self.modes.pop(name, None)
        else:
            self.modes[name] = mode

    def disallowed(self) -> dict[str, Any]:
        """Dotted torch names this owner disallowed -> the callables."""
        return {n: r.obj for n, r in self._registrations.items() if r.kind == "disallow"}

    def undo_all(self) -> list[str]:
        """Every registration released; every binding still ours restored. Returns the names left alone."""
        left: list[str] = []
        for name in list(self._registrations):
            self._registrations.pop(name).undo()
        self._held.clear()
        for name, binding in self.bindings.items():
            if name in self.modes:
                self.modes[name] = "compile"
            if not binding.restore():
                left.append(name)
        self.modes = {n: m for n, m in self.modes.items() if not is_torch_name(n)}
        return left
