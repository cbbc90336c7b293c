"""``nbcompile.inspect``: compile one callable, call it once, return its Report.

It compiles a fresh copy of the function's code (its own Dynamo cache, gone
with the copy) behind a recording backend, so earlier compiles of the same
function neither hide graphs from it nor see its entries. It never calls
``torch._dynamo.reset()`` or ``torch._dynamo.explain()``.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from . import check as check_ops
from . import suggest, torch_compat, trial
from .capture import HUB, Recording, RecordingBackend
from .lint import lint_allow_in_graph
from .options import CompileOptions, NbcompileError
from .report import CompileError, LintWarning, Report
from .state import Replay, reach
from .toggles import Binding, Toggles, copy_function, is_torch_name, torch_name


def _fresh_copy(fn: Any) -> Any:
    """A callable equal to ``fn`` whose code object Dynamo has never seen."""
    fn = torch_compat.unwrap_compiled(fn)
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        return types.MethodType(copy_function(fn.__func__), fn.__self__)
    return copy_function(fn)  # nn.Module instances and other callables come back as they are


def _namespace(fn: Any) -> dict[str, Any]:
    target = torch_compat.unwrap_compiled(fn)
    if isinstance(target, torch.nn.Module):
        target = type(target).forward
    return getattr(getattr(target, "__func__", target), "__globals__", {})


def _module_functions(fn: Any) -> dict[str, Any]:
    """The functions defined in the same file as ``fn``: what its toggles and suggestions name."""
    namespace = _namespace(fn)
    target = getattr(torch_compat.unwrap_compiled(fn), "__func__", torch_compat.unwrap_compiled(fn))
    filename = getattr(getattr(target, "__code__", None), "co_filename", None)
    return {n: v for n, v in list(namespace.items())
            if isinstance(v, types.FunctionType) and v.__code__.co_filename == filename}


def _advisor(fn: Any, toggles: dict[str, str], disallowed: dict[str, Any]) -> suggest.Advisor:
    """Suggestions for ``inspect``: the functions of ``fn``'s module are the candidates."""
    tracked = _module_functions(fn)
    target = getattr(torch_compat.unwrap_compiled(fn), "__func__", torch_compat.unwrap_compiled(fn))
    lints: dict[str, list[LintWarning]] = {}

    def lint(name: str) -> list[LintWarning]:
        if name not in lints:
            lints[name] = lint_allow_in_graph(tracked[name], name) if name in tracked else []
        return lints[name]

    return suggest.Advisor(
        tracked, toggles, [getattr(target, "__name__", "")], suggest.inspect_command, lint, disallowed
    )


def toggle_engine(fn: Any, toggles: dict[Any, str]) -> tuple[Toggles, dict[str, str]]:
    """The engine for ``inspect``/``bench`` toggles on ``fn``'s globals, and the toggles by name.

    Keys are names in ``fn.__globals__``, the objects bound there, or dotted torch
    names (or torch callables). Nothing is applied yet.
    """
    if not isinstance(toggles, dict):
        raise NbcompileError(f"toggles must be a dict of name or object -> mode, not {type(toggles).__name__} "
                             "(e.g. toggles={'helper': 'disable', 'torch.sub': 'disallow_in_graph'})")
    namespace = _namespace(fn)
    label = getattr(fn, "__name__", type(fn).__name__)
    named: dict[str, str] = {}
    for key, mode in toggles.items():
        if isinstance(key, str):
            if not is_torch_name(key) and key not in namespace:
                raise NbcompileError(f"toggle {key!r}: no such name in {label}'s globals; give a name defined "
                                     "there, the function object, or a torch callable by dotted name (torch.sub)")
            named[key] = mode
            continue
        names = [n for n, v in list(namespace.items()) if v is key]
        if names:
            named.update({n: mode for n in names})
        elif (getattr(key, "__module__", "") or "").startswith("torch"):
            named[torch_name(key)] = mode
        else:
            raise NbcompileError(f"toggle {key!r}: not reachable by name from {label}'s globals")
    engine = Toggles({n: Binding(n, namespace, n) for n in named if not is_torch_name(n)})
    for name, mode in named.items():
        engine.validate(name, mode)
    return engine, named


@contextlib.contextmanager
def applied(engine: Toggles, named: dict[str, str]) -> Iterator[Toggles]:
    """The toggles applied for the duration; undone exactly after (also on KeyboardInterrupt)."""
    try:
        for name, mode in named.items():
            engine.apply(name, mode)
        yield engine
    finally:
        engine.undo_all()


def replay_for(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Replay:
    """Copies of what a call of ``fn`` reaches: its arguments, its module or ``self``, the globals its code reads."""
    namespace = _namespace(fn)
    original = torch_compat.unwrap_compiled(fn)
    slots = reach(namespace, None, [original])
    return Replay.capture({label: (slot, slot.get()) for label, slot in slots.items()}, (original, args, kwargs))


def _call(extra: tuple[Any, tuple[Any, ...], dict[str, Any]]) -> Any:
    target, args, kwargs = extra
    return target(*args, **kwargs)


def inspect(
    fn: Callable[..., Any],
    *args: Any,
    toggles: dict[Any, str] | None = None,
    backend: str = "inductor",
    mode: str | None = None,
    fullgraph: bool = False,
    dynamic: bool | None = None,
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
    engine, named = toggle_engine(fn, toggles or {})
    report = Report(title=f"inspect({name})", backend=backend, mode=mode, fullgraph=fullgraph, dynamic=dynamic)
    recording = Recording(report)
    target = _fresh_copy(fn)
    extra: dict[str, Any] = {"isolate_recompiles": True} if torch_compat.ISOLATE_RECOMPILES else {}
    functions = _module_functions(fn)
    for key, toggle in named.items():
        if toggle == "allow_in_graph" and key in functions:
            report.warnings.extend(lint_allow_in_graph(functions[key], key))
    replay = replay_for(fn, args, kwargs) if check else None
    rng = check_ops.RngState() if check else None
    code_state = torch_compat.code_state_snapshot()
    HUB.acquire()
    try:
        compiled: Callable[..., Any] = torch.compile(
            target,
            backend=RecordingBackend(backend, mode, dynamic, recording),
            **options.torch_compile_kwargs(),
            **extra,
        )
        with applied(engine, named), HUB.active(recording):
            recording.advise = _advisor(fn, named, engine.disallowed())
            try:
                report.result = compiled(*args, **kwargs)
            except torch_compat.DYNAMO_ERRORS as exc:  # fullgraph=True on a break, a backend failure
                from .session import describe_failure

                raise NbcompileError(f"inspect({name}) failed to compile ({describe_failure(exc)})") from exc
    finally:
        HUB.release()
        torch_compat.restore_code_state(code_state, recording.codes)  # what Dynamo remembered of these codes
    if replay is not None and rng is not None:
        report.check = check_ops.against_eager(
            report.result, _call, replay, rng,
            random_ops=[op for g in report.graphs for op in g.ops], backend=backend,
        )
        if not report.check.ok:
            report.add("errors", CompileError(name, "", "check", report.check.message))
        elif report.frame_count == 0 and not report.errors:
            report.check = check_ops.nothing_compiled(f"{name} ran without reaching compiled code")
    try:
        trial.verify(report, named, _inspect_spec(fn, args, kwargs, options) if check else None,
                     why_not="not tried: inspect(check=False) makes no copies to try it on")
    except Exception as exc:  # proving advice must never cost the report
        for brk in report.breaks:
            for fix in brk.fixes:
                if fix.toggles and not fix.effect:
                    fix.effect = f"not tried ({type(exc).__name__}: {exc})"
    return report


def _inspect_spec(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], options: CompileOptions) -> trial.Spec:
    """Scratch runs of ``fn(*args, **kwargs)``: a fresh compiled copy of the (copied) callable per trial."""
    backend = trial.trial_backend(options.backend)

    @contextlib.contextmanager
    def compiled(modes: dict[str, str], replay: Replay, recording: Recording,
                 overrides: dict[str, Any]) -> Iterator[Callable[[Any], Any]]:
        engine, named = toggle_engine(fn, modes)
        extra: dict[str, Any] = {"isolate_recompiles": True} if torch_compat.ISOLATE_RECOMPILES else {}
        kwargs = {**options.torch_compile_kwargs(), **overrides}
        compiled_fn: Callable[..., Any] = torch.compile(
            _fresh_copy(replay.extra_copy[0]),  # the copied callable (a module's copy)
            backend=RecordingBackend(backend, options.mode, kwargs.get("dynamic"), recording), **kwargs, **extra)

        def call(copied: tuple[Any, tuple[Any, ...], dict[str, Any]]) -> Any:
            _, c_args, c_kwargs = copied
            return compiled_fn(*c_args, **c_kwargs)

        with applied(engine, named):
            yield call

    return trial.Spec(capture=lambda: replay_for(fn, args, kwargs), compiled=compiled, eager=_call, originals={},
                      backend=backend)
