"""``nbcompile.inspect``: compile one callable, call it once, return its Report.

It compiles a fresh copy of the function's code (its own Dynamo cache, gone
with the copy) behind a recording backend, so earlier compiles of the same
function neither hide graphs from it nor see its entries. It never calls
``torch._dynamo.reset()`` or ``torch._dynamo.explain()``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ..analysis import suggest
from ..analysis.lint import lint_allow_in_graph
from ..capture.hub import HUB, Recording
from ..core import torch_compat
from ..core.errors import NbcompileError, describe_failure
from ..core.options import CompileOptions
from ..engine import check as check_ops
from ..engine import trial
from ..engine.compiler import applied, call_with, compiled_copy, module_functions, replay_for, toggle_engine
from ..engine.replay import Replay
from ..model.report import CompileError, LintWarning, Report


def _advisor(fn: Any, toggles: dict[str, str], disallowed: dict[str, Any]) -> suggest.Advisor:
    """Suggestions for ``inspect``: the functions of ``fn``'s module are the candidates."""
    tracked = module_functions(fn)
    target = getattr(torch_compat.unwrap_compiled(fn), "__func__", torch_compat.unwrap_compiled(fn))
    lints: dict[str, list[LintWarning]] = {}

    def lint(name: str) -> list[LintWarning]:
        if name not in lints:
            lints[name] = lint_allow_in_graph(tracked[name], name) if name in tracked else []
        return lints[name]

    return suggest.Advisor(
        tracked, toggles, [getattr(target, "__name__", "")], suggest.inspect_command, lint, disallowed
    )


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
    functions = module_functions(fn)
    for key, toggle in named.items():
        if toggle == "allow_in_graph" and key in functions:
            report.warnings.extend(lint_allow_in_graph(functions[key], key))
    replay = replay_for(fn, args, kwargs) if check else None
    rng = check_ops.RngState() if check else None
    code_state = torch_compat.code_state_snapshot()
    HUB.acquire()
    try:
        compiled: Callable[..., Any] = compiled_copy(fn, options, recording=recording)
        with applied(engine, named), HUB.active(recording):
            recording.advise = _advisor(fn, named, engine.disallowed())
            try:
                report.result = compiled(*args, **kwargs)
            except torch_compat.DYNAMO_ERRORS as exc:  # fullgraph=True on a break, a backend failure
                raise NbcompileError(f"inspect({name}) failed to compile ({describe_failure(exc)})") from exc
    finally:
        HUB.release()
        torch_compat.restore_code_state(code_state, recording.codes)  # what Dynamo remembered of these codes
    if replay is not None and rng is not None:
        report.check = check_ops.against_eager(
            report.result, call_with, replay, rng,
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
        compiled_fn: Callable[..., Any] = compiled_copy(  # the copied callable (a module's copy)
            replay.extra_copy[0], options, recording=recording, backend=backend,
            **{k: v for k, v in overrides.items() if not k.startswith("_")})

        def call(copied: tuple[Any, tuple[Any, ...], dict[str, Any]]) -> Any:
            _, c_args, c_kwargs = copied
            return compiled_fn(*c_args, **c_kwargs)

        with applied(engine, named):
            yield call

    return trial.Spec(capture=lambda: replay_for(fn, args, kwargs), compiled=compiled, eager=call_with, originals={},
                      backend=backend)


def torch_support() -> dict[str, bool | str]:
    """The optional torch features nbcompile uses, for the running torch: name -> True, or why it is off and
    what nbcompile does without it (a string). Feature-tested at import (``core.torch_compat``), never by
    the version number."""
    flags = {
        "isolate_recompiles": torch_compat.ISOLATE_RECOMPILES,
        "cache regions": torch_compat.CACHE_REGIONS,
        "nonstrict_trace": torch_compat.NONSTRICT_TRACE,
        "custom_op": torch_compat.CUSTOM_OP,
        **{mark: mark in torch_compat.MARKS for mark in ("maybe_mark_dynamic", "mark_static", "mark_unbacked")},
    }
    lacks = f"torch {torch_compat.TORCH_VERSION} lacks it"
    out: dict[str, bool | str] = {name: True if on else torch_compat.MISSING.get(name, lacks)
                                  for name, on in flags.items()}
    for name, why in torch_compat.MISSING.items():  # the private APIs the import probed and did not find
        out.setdefault(name, why)
    return out
