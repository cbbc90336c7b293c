"""``nbcompile.inspect``: compile one callable, call it once, return its Report.

It compiles a fresh copy of the function's code (its own Dynamo cache, gone
with the copy) behind a recording backend, so earlier compiles of the same
function neither hide graphs from it nor see its entries. It never calls
``torch._dynamo.reset()`` or ``torch._dynamo.explain()``.
"""

from __future__ import annotations

import functools
import types
from typing import Any, Callable, Optional

import torch

from . import torch_compat
from .capture import HUB, Recording, RecordingBackend
from .options import CompileOptions, NbcompileError
from .report import Report


def _fresh_copy(fn: Any) -> Any:
    """A callable equal to ``fn`` whose code object Dynamo has never seen."""
    fn = getattr(fn, "_torchdynamo_orig_callable", fn)
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        return types.MethodType(_fresh_copy(fn.__func__), fn.__self__)
    if isinstance(fn, types.FunctionType):
        copy = types.FunctionType(
            fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
        )
        copy.__kwdefaults__ = fn.__kwdefaults__
        functools.update_wrapper(copy, fn)
        del copy.__wrapped__
        return copy
    return fn  # nn.Module instances and other callables are compiled as they are


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
    if toggles:
        raise NbcompileError("inspect(toggles=...) is not available in this version of nbcompile")
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
        with HUB.active(recording):
            report.result = compiled(*args, **kwargs)
    finally:
        HUB.release()
    return report
