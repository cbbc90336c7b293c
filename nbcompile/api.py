"""``nbcompile.inspect``: compile one callable, call it once, return its Report.

It compiles a fresh copy of the function's code (its own Dynamo cache, gone
with the copy) behind a recording backend, so earlier compiles of the same
function neither hide graphs from it nor see its entries. It never calls
``torch._dynamo.reset()`` or ``torch._dynamo.explain()``.
"""

from __future__ import annotations

import contextlib
import functools
import types
from typing import Any, Callable, Iterator, Optional

import torch

from . import torch_compat
from .capture import HUB, Recording, RecordingBackend
from .options import CompileOptions, NbcompileError
from .report import Report
from .toggles import Registration, copy_function, resolve_torch_callable, toggled_function, undo_allow, validate


def _fresh_copy(fn: Any) -> Any:
    """A callable equal to ``fn`` whose code object Dynamo has never seen."""
    fn = torch_compat.unwrap_compiled(fn)
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        return types.MethodType(copy_function(fn.__func__), fn.__self__)
    return copy_function(fn)  # nn.Module instances and other callables come back as they are


@contextlib.contextmanager
def _toggled(fn: Any, toggles: dict[Any, str]) -> Iterator[None]:
    """Apply ``inspect``'s toggles for the duration of the call; undo them exactly after."""
    namespace = getattr(torch_compat.unwrap_compiled(fn), "__globals__", {})
    plan: list[tuple[str, Any, str]] = []  # (label, object-or-global-name, mode)
    for key, mode in toggles.items():
        if isinstance(key, str) and key.startswith("torch."):
            validate(key, mode, lambda n: False)
            plan.append((key, resolve_torch_callable(key), mode))
            continue
        if isinstance(key, str):
            if key not in namespace:
                raise NbcompileError(f"toggle {key!r}: no such name in {getattr(fn, '__name__', fn)!r}'s globals")
            names = [key]
        else:
            names = [n for n, v in namespace.items() if v is key]
            if not names:
                if getattr(key, "__module__", "").startswith("torch"):
                    validate(repr(key), mode, lambda n: False)
                    plan.append((getattr(key, "__name__", repr(key)), key, mode))
                    continue
                raise NbcompileError(f"toggle {key!r}: not reachable by name from {getattr(fn, '__name__', fn)!r}'s globals")
        for name in names:
            validate(name, mode, lambda n: True)
            plan.append((name, name, mode))

    undo: list[Callable[[], None]] = []
    keepalive: list[Any] = []
    try:
        for label, target, mode in plan:
            if isinstance(target, str):  # a global function of fn's module
                original = namespace[target]
                namespace[target] = toggled_function(original, mode, keepalive)
                undo.append(functools.partial(namespace.__setitem__, target, original))
                if mode == "allow_in_graph":
                    undo.append(functools.partial(undo_allow, namespace[target]))
            elif mode == "disallow_in_graph":
                undo.append(Registration.disallow(target, label).undo)
        yield
    finally:
        for step in reversed(undo):
            step()


def inspect(
    fn: Callable[..., Any],
    *args: Any,
    toggles: Optional[dict[Any, str]] = None,
    backend: str = "inductor",
    mode: Optional[str] = None,
    fullgraph: bool = False,
    dynamic: Optional[bool] = None,
    check: bool = True,
    **kwargs: Any,
) -> Report:
    """Compile ``fn`` with the given options, call it once with the arguments, report.

    Torch's global state is left as it was found: the trace handler is
    removed again when no session needs it, and other functions' compiled
    code is kept.
    """
    if not callable(fn):
        raise NbcompileError(f"inspect needs a callable, got {type(fn).__name__}")
    options = CompileOptions(backend, mode, fullgraph, dynamic).validate()
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    report = Report(title=f"inspect({name})", backend=backend, mode=mode, fullgraph=fullgraph, dynamic=dynamic)
    recording = Recording(report)
    target = _fresh_copy(fn)
    extra = {"isolate_recompiles": True} if torch_compat.ISOLATE_RECOMPILES else {}
    HUB.acquire()
    try:
        compiled = torch.compile(
            target,
            backend=RecordingBackend(backend, mode, dynamic, recording),
            **options.torch_compile_kwargs(),
            **extra,
        )
        with _toggled(fn, toggles or {}), HUB.active(recording):
            report.result = compiled(*args, **kwargs)
    finally:
        HUB.release()
    return report
