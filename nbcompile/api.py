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

from . import check as check_ops
from . import suggest, torch_compat
from .lint import lint_allow_in_graph
from .capture import HUB, Recording, RecordingBackend
from .options import CompileOptions, NbcompileError
from .report import CompileError, LintWarning, Report
from .toggles import Registration, copy_function, resolve_torch_callable, toggled_function, undo_allow, validate


def _fresh_copy(fn: Any) -> Any:
    """A callable equal to ``fn`` whose code object Dynamo has never seen."""
    fn = torch_compat.unwrap_compiled(fn)
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        return types.MethodType(copy_function(fn.__func__), fn.__self__)
    return copy_function(fn)  # nn.Module instances and other callables come back as they are


def _namespace(fn: Any) -> dict[str, Any]:
    target = torch_compat.unwrap_compiled(fn)
    return getattr(getattr(target, "__func__", target), "__globals__", {})


def _advisor(fn: Any, toggles: dict[Any, str]) -> suggest.Advisor:
    """Suggestions for ``inspect``: the functions of ``fn``'s module are the candidates."""
    namespace = _namespace(fn)
    target = getattr(torch_compat.unwrap_compiled(fn), "__func__", torch_compat.unwrap_compiled(fn))
    filename = getattr(getattr(target, "__code__", None), "co_filename", None)
    tracked = {n: v for n, v in list(namespace.items())
               if isinstance(v, types.FunctionType) and v.__code__.co_filename == filename}
    named = {}
    for key, mode in toggles.items():
        label = key if isinstance(key, str) else next((n for n, v in tracked.items() if v is key), getattr(key, "__name__", repr(key)))
        named[label] = mode
    disallowed = {k: resolve_torch_callable(k) for k, m in named.items() if m == "disallow_in_graph" and k.startswith("torch.")}
    lints: dict[str, list[LintWarning]] = {}

    def lint(name: str) -> list[LintWarning]:
        if name not in lints:
            lints[name] = lint_allow_in_graph(tracked[name], name) if name in tracked else []
        return lints[name]

    return suggest.Advisor(tracked, named, [getattr(target, "__name__", "")], suggest.inspect_command, lint, disallowed)


@contextlib.contextmanager
def _toggled(fn: Any, toggles: dict[Any, str], report: Optional[Report] = None) -> Iterator[None]:
    """Apply ``inspect``'s toggles for the duration of the call; undo them exactly after."""
    namespace = _namespace(fn)
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
                if mode == "allow_in_graph" and report is not None:
                    report.warnings.extend(lint_allow_in_graph(original, target))
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
    recording.advise = _advisor(fn, toggles or {})
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
        if check:
            state = check_ops.StateSnapshot(_state_roots(fn, args, kwargs))
            rng = check_ops.RngState()
        with _toggled(fn, toggles or {}, report), HUB.active(recording):
            report.result = compiled(*args, **kwargs)
    finally:
        HUB.release()
    if check:
        original = torch_compat.unwrap_compiled(fn)
        report.check = check_ops.against_eager(
            report.result, lambda: original(*args, **kwargs), state, rng,
            random_ops=[op for g in report.graphs for op in g.ops], backend=backend,
        )
        if not report.check.ok:
            report.add("errors", CompileError(name, "", "check", report.check.message))
    return report


def _state_roots(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """What the call can change in place: its arguments, the module it is bound to, tensors in its globals."""
    roots: list[tuple[str, Any]] = [(f"argument {i}", a) for i, a in enumerate(args)]
    roots += [(f"argument {k}", v) for k, v in kwargs.items()]
    target = torch_compat.unwrap_compiled(fn)
    if isinstance(target, torch.nn.Module):
        roots.append(("module", target))
    owner = getattr(target, "__self__", None)
    if isinstance(owner, torch.nn.Module):
        roots.append(("self", owner))
    globals_ = getattr(getattr(target, "__func__", target), "__globals__", {})
    roots += [(n, v) for n, v in list(globals_.items())
              if not n.startswith("_") and isinstance(v, (torch.Tensor, torch.nn.Module))]
    return roots
