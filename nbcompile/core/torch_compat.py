"""Every use of torch's private API in nbcompile, feature-tested at import.

A torch upgrade that moves one of these internals touches this file only. Each
entry is probed once when nbcompile is imported; a missing one degrades the
feature that needs it with a clear message (see ``MISSING``) instead of
crashing somewhere deep inside a capture.
"""

from __future__ import annotations

import copy
import inspect as _inspect
import logging
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .errors import NbcompileError

#: Features that this torch lacks, name -> what nbcompile does without it.
MISSING: dict[str, str] = {}

TRACE_LOGGER_NAME = "torch.__trace"


def trace_logger() -> logging.Logger:
    """The logger that ``torch._logging.trace_structured`` writes to."""
    return logging.getLogger(TRACE_LOGGER_NAME)


# --- backends ---------------------------------------------------------------

def list_backends(user_facing: bool = False) -> list[str]:
    """Backend names `%%compile` accepts: the registry plus eager and aot_eager; with
    ``user_facing``, without torch's debug and experimental ones (what the panel offers)."""
    names = set(torch._dynamo.list_backends() if user_facing else torch._dynamo.list_backends(exclude_tags=()))
    names.update({"eager", "aot_eager", "inductor"})
    return sorted(names)


def make_backend(name: str, mode: str | None, dynamic: bool | None) -> Callable[..., Any]:
    """The backend object ``torch.compile(backend=name, mode=mode)`` would build.

    nbcompile wraps it in a recording backend, so it must build it the same
    way torch.compile does to get the same graphs, kernels and modes.
    """
    if name == "inductor":
        return torch._TorchCompileInductorWrapper(mode, None, dynamic)  # type: ignore[no-untyped-call]  # private
    return torch._TorchCompileWrapper(name, mode, None, dynamic)  # type: ignore[no-untyped-call]  # private


def compile_kwargs_supported() -> set[str]:
    return set(_inspect.signature(torch.compile).parameters)


_COMPILE_PARAMS = compile_kwargs_supported()
ISOLATE_RECOMPILES = "isolate_recompiles" in _COMPILE_PARAMS
if not ISOLATE_RECOMPILES:
    MISSING["isolate_recompiles"] = (
        "torch.compile has no isolate_recompiles: frames that nbcompile.inspect compiles "
        "separately share the default cache bucket of their code"
    )


#: What torch.compile raises when compiling fails (a break under fullgraph=True, a backend error).
DYNAMO_ERRORS: tuple[type[BaseException], ...] = (torch._dynamo.exc.TorchDynamoException,)


def _wrapper_frame_span() -> tuple[str, int, int]:
    """Where the frame torch.compile adds around a callable it cannot start tracing at lives
    (``external_utils.wrap_inline``): a decorated entry's graphs are compiled in it."""
    try:
        from torch._dynamo import external_utils

        code = external_utils.wrap_inline(lambda: None).__code__
        return (code.co_filename, code.co_firstlineno, code.co_firstlineno)
    except (ImportError, AttributeError):  # pragma: no cover - older torch
        return ("", 0, -1)


WRAPPER_FRAME_SPAN = _wrapper_frame_span()


def current_compile_id() -> str | None:
    """The compile id ('3/1') of the frame Dynamo is compiling right now."""
    cid = torch._guards.CompileContext.current_compile_id()
    if cid is None:
        return None
    return f"{cid.frame_id}/{cid.frame_compile_id}"


def unwrap_compiled(obj: Any) -> Any:
    """The original callable behind a ``torch.compile`` wrapper (``obj`` itself if none)."""
    if isinstance(obj, torch._dynamo.eval_frame.OptimizedModule):
        return obj._orig_mod
    original = getattr(obj, "_nbcompile_original", None)  # nbcompile's own wrappers (custom_op, nonstrict_trace)
    if original is not None:
        return original
    return getattr(obj, "_torchdynamo_orig_callable", obj)


# --- caches -------------------------------------------------------------------

def cache_entries(code: types.CodeType) -> list[Any]:
    """Dynamo's cache entries of a code object, newest first."""
    return list(torch._dynamo.eval_frame._debug_get_cache_entry_list(code))


def resume_codes(code: types.CodeType) -> list[types.CodeType]:
    """Resume functions Dynamo generated for ``code`` (its graph-break continuations)."""
    from torch._dynamo.resume_execution import ContinueExecutionCache

    found: list[types.CodeType] = []
    stack = [code]
    while stack:
        current = stack.pop()
        try:
            generated = ContinueExecutionCache.cache[current]
        except KeyError:
            continue
        for resumed in generated.values():
            found.append(resumed)
            stack.append(resumed)
    return found


def drop_compiled_code(code: types.CodeType) -> None:
    """Drop the compiled code of one code object and of its resume functions.

    Only that code's cache entries go; every other function keeps its own.
    """
    for each in [code, *resume_codes(code)]:
        torch._dynamo.eval_frame.reset_code(each)  # type: ignore[attr-defined]  # private, not re-exported


def iter_code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and every code object nested in it (closures, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from iter_code_objects(const)


# --- allow / disallow registries -------------------------------------------------------

_REGISTRIES = ("_allowed_callable_ids", "_disallowed_callable_ids", "_nonstrict_trace_callable_ids")


def _registry(name: str) -> Any:
    from torch._dynamo import trace_rules

    return getattr(trace_rules, name)


def registry_membership(obj: Any) -> dict[str, bool]:
    """Whether ``id(obj)`` is in each of Dynamo's allow/disallow registries."""
    return {name: id(obj) in _registry(name) for name in _REGISTRIES}


def restore_registry_membership(obj: Any, membership: dict[str, bool]) -> None:
    """Put ``id(obj)`` back exactly as ``registry_membership`` saw it."""
    for name, present in membership.items():
        registry = _registry(name)
        if present:
            registry.add(id(obj))
        else:
            registry.remove(id(obj))


def registries_snapshot() -> dict[str, frozenset[int]]:
    """Every id in every registry: what an exact undo must give back."""
    return {name: frozenset(_registry(name)()) for name in _REGISTRIES}


# --- the eager reference run ---------------------------------------------------

def force_eager() -> Any:
    """A context in which every torch.compile'd callable runs its original code eagerly.

    ``torch.compiler.set_stance`` is public from torch 2.6; on older torch
    the context does nothing (the check binds the original functions anyway).
    """
    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is None:  # pragma: no cover - torch < 2.6
        import contextlib

        return contextlib.nullcontext()
    return set_stance("force_eager")


def inductor_caches_disabled() -> Any:
    """A context in which Inductor compiles from scratch (its FX graph and kernel caches off)."""
    import contextlib

    try:
        import torch._inductor.config as inductor_config
    except ImportError:  # pragma: no cover
        return contextlib.nullcontext()
    if not hasattr(inductor_config, "force_disable_caches"):  # pragma: no cover - older torch
        return contextlib.nullcontext()
    return inductor_config.patch(force_disable_caches=True)


def tensor_version(tensor: torch.Tensor) -> int:
    """The tensor's in-place version counter (bumped by every in-place op on it or a view)."""
    return tensor._version


# --- feature tests ------------------------------------------------------------

def _probe() -> None:
    checks: dict[str, Callable[[], Any]] = {
        "structured trace": lambda: torch._logging.trace_structured,  # type: ignore[attr-defined]  # private
        "inductor wrapper": lambda: torch._TorchCompileInductorWrapper,
        "backend wrapper": lambda: torch._TorchCompileWrapper,
        "compile id": lambda: torch._guards.CompileContext.current_compile_id,
        "cache entries": lambda: torch._dynamo.eval_frame._debug_get_cache_entry_list,
        "reset_code": lambda: torch._dynamo.eval_frame.reset_code,  # type: ignore[attr-defined]  # private
        "optimized module": lambda: torch._dynamo.eval_frame.OptimizedModule,
        "tensor version counter": lambda: torch.zeros(1)._version,
        "inductor cache switch": lambda: __import__("torch._inductor.config", fromlist=["x"]).force_disable_caches,
        "registries": lambda: [_registry(name)() for name in _REGISTRIES],
        "resume cache": lambda: __import__(
            "torch._dynamo.resume_execution", fromlist=["ContinueExecutionCache"]
        ).ContinueExecutionCache.cache,
    }
    for name, get in checks.items():
        try:
            get()
        except (AttributeError, ImportError) as exc:  # pragma: no cover - older torch
            MISSING[name] = f"torch {torch.__version__} lacks it ({exc})"


_probe()


# --- automatic-dynamic memory (torch._dynamo.pgo) ---------------------------------------------

CodeKey = tuple[str, int, str]  # (filename, first line, code name): how a recording names a compiled code


def _pgo_state() -> Any:
    try:
        from torch._dynamo import pgo
    except ImportError:  # torch without profile-guided dynamism: nothing is remembered
        return None
    return getattr(pgo, "_CODE_STATE", None)


def code_state_snapshot() -> dict[Any, Any]:
    """What Dynamo remembers, per code, about dimensions that changed (its automatic-dynamic memory,
    which outlives compiled code and cache regions): a copy to give back later."""
    state = _pgo_state()
    return copy.deepcopy(dict(state)) if state else {}


def restore_code_state(snapshot: dict[Any, Any], codes: set[CodeKey]) -> None:
    """Give back, for ``codes`` only (those nbcompile compiled), the memory ``snapshot`` saw: a
    second run then compiles as the first did, and other code's memory is left alone."""
    state = _pgo_state()
    if not state or not codes:
        return
    for key in list(state):
        if (getattr(key, "filename", None), getattr(key, "firstlineno", None), getattr(key, "name", None)) in codes:
            if key in snapshot:
                state[key] = copy.deepcopy(snapshot[key])
            else:
                del state[key]


# --- the frame a recompile is for -------------------------------------------------------------

_REASONS_FUNCTION = "get_and_maybe_log_recompilation_reasons"


def recompiling_frame() -> tuple[types.CodeType, dict[str, Any], dict[str, Any]] | None:
    """While Dynamo logs why it recompiles a frame (from the trace handler): the frame's code, locals
    and globals, to read the values that failed the guards. Found as the ``frame`` argument of the
    function that logs the reasons; None where torch differs."""
    caller: types.FrameType | None = sys._getframe(1)
    while caller is not None:
        if caller.f_code.co_name == _REASONS_FUNCTION:
            frame = caller.f_locals.get("frame")
            code = getattr(frame, "f_code", None)
            f_locals, f_globals = getattr(frame, "f_locals", None), getattr(frame, "f_globals", None)
            if isinstance(code, types.CodeType) and isinstance(f_locals, dict) and isinstance(f_globals, dict):
                return code, f_locals, f_globals
            return None
        caller = caller.f_back
    return None


def errors_suppressed() -> bool:
    """Whether Dynamo falls back to eager on a compile error instead of raising it."""
    return bool(getattr(torch._dynamo.config, "suppress_errors", False))


# --- guard cost --------------------------------------------------------------------------------

GUARD_TIMING_CALLS = 101


def time_new_guards(calls: int = GUARD_TIMING_CALLS) -> float | None:
    """While Dynamo logs a new guard tree (from the trace handler): its check timed on the inputs it was
    built for, warm, the median of ``calls`` checks in microseconds. None where torch differs."""
    import time

    caller: types.FrameType | None = sys._getframe(1)
    while caller is not None:
        manager = caller.f_locals.get("self") if caller.f_code.co_name == "__init__" else None
        guard_manager = getattr(manager, "guard_manager", None)
        graph = getattr(manager, "output_graph", None)
        scope = getattr(graph, "local_scope", None)
        if guard_manager is not None and isinstance(scope, dict) and hasattr(guard_manager, "check"):
            times = []
            try:
                for _ in range(calls):
                    start = time.perf_counter_ns()
                    guard_manager.check(scope)
                    times.append(time.perf_counter_ns() - start)
            except Exception:
                return None
            times.sort()
            return times[len(times) // 2] / 1000.0
        caller = caller.f_back
    return None


def recompile_limit() -> int:
    """Dynamo's cache entries per code before it falls back to eager (``recompile_limit``; older torch:
    ``cache_size_limit``)."""
    config = torch._dynamo.config
    return int(getattr(config, "recompile_limit", getattr(config, "cache_size_limit", 8)))



#: The dimension marks a recompile fix may try, by the name the fix is written with.
MARKS: dict[str, Callable[[torch.Tensor, int], Any]] = {
    name: fn for name, fn in (
        ("maybe_mark_dynamic", getattr(torch._dynamo, "maybe_mark_dynamic", None)),
        ("mark_static", getattr(torch._dynamo, "mark_static", None)),
        ("mark_unbacked", getattr(getattr(torch._dynamo, "decorators", None), "mark_unbacked", None)),
    ) if fn is not None}


#: ``torch._dynamo.nonstrict_trace`` (torch >= 2.7) and ``torch.library.custom_op`` with ``opcheck``.
NONSTRICT_TRACE = callable(getattr(torch._dynamo, "nonstrict_trace", None))
CUSTOM_OP = callable(getattr(torch.library, "custom_op", None)) and callable(getattr(torch.library, "opcheck", None))


def nonstrict_trace(fn: Callable[..., Any]) -> tuple[Callable[..., Any], Callable[[], None]]:
    """``torch._dynamo.nonstrict_trace(fn)`` and a release that takes its registration back now (torch
    itself lets go only when the wrapper is garbage-collected, by a ``weakref.finalize``)."""
    import weakref

    wrapped = torch._dynamo.nonstrict_trace(fn)

    def release() -> None:
        for finalizer in list(getattr(weakref.finalize, "_registry", {})):
            info = finalizer.peek()
            if info is not None and info[0] is wrapped:
                finalizer()  # runs torch's deregistration once; the later collection is then a no-op

    return wrapped, release


def destroy_custom_op(op: Any) -> None:
    """Take a ``torch.library.custom_op`` operator out of the dispatcher and torch's registries (its
    name is free again, nothing of it is left behind)."""
    qualname = getattr(op, "_qualname", None)
    lib = getattr(op, "_lib", None)
    if lib is not None and callable(getattr(lib, "_destroy", None)):
        lib._destroy()
    if qualname is None:
        return
    try:
        from torch._library import custom_ops, simple_registry
    except ImportError:
        return
    if getattr(custom_ops, "OPDEFS", {}).get(qualname) is op:
        custom_ops.OPDEFS.pop(qualname)
    data = getattr(getattr(simple_registry, "singleton", None), "_data", None)
    if isinstance(data, dict):
        data.pop(qualname, None)


def _cache_api() -> tuple[Callable[..., Any], Callable[..., Any]]:
    save = getattr(torch.compiler, "save_cache_artifacts", None)
    load = getattr(torch.compiler, "load_cache_artifacts", None)
    if not callable(save) or not callable(load):
        raise NbcompileError(f"torch {torch.__version__} has no torch.compiler.save_cache_artifacts (torch >= 2.7)")
    return save, load


def save_compile_cache(path: str) -> tuple[int, str]:
    """``torch.compiler.save_cache_artifacts()`` written to ``path``: (bytes, what it holds)."""
    save, _ = _cache_api()
    artifacts = save()
    if artifacts is None:
        raise NbcompileError("nothing to save: no compile in this process has left cache artifacts yet (run the "
                             "compiled code first; artifacts come from Inductor and AOTAutograd, not backend eager)")
    data, info = artifacts
    try:
        with open(path, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise NbcompileError(f"cannot write {path}: {exc.strerror}") from None
    return len(data), _describe_cache_info(info)


def load_compile_cache(path: str) -> tuple[int, str]:
    """``torch.compiler.load_cache_artifacts`` of the bytes in ``path``: (bytes, what it held)."""
    _, load = _cache_api()
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise NbcompileError(f"cannot read {path}: {exc.strerror}") from None
    quiet = logging.getLogger("torch.compiler._cache")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # torch logs its own traceback for a file it cannot read; the error says it
    try:
        info = load(data)
    except Exception as exc:
        raise NbcompileError(f"{path} is not a torch.compile cache artifact file ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:120] if str(exc) else ''})") from None
    finally:
        quiet.setLevel(level)
    if info is None:
        raise NbcompileError(f"{path} is not a torch.compile cache artifact file (torch could not read it: a "
                             "different torch version, or not a file %nbcompile cache save wrote)")
    return len(data), _describe_cache_info(info)


def _describe_cache_info(info: Any) -> str:
    parts = []
    for name in ("inductor_artifacts", "autotune_artifacts", "aot_autograd_artifacts", "pgo_artifacts"):
        items = getattr(info, name, None)
        if items:
            parts.append(f"{len(items)} {name.replace('_artifacts', '').replace('_', ' ')}")
    return ", ".join(parts) or "no entries"


# --- small private-API seams the engine uses (kept here so a torch upgrade touches one file) -----

def disallow_in_graph(obj: Any) -> None:
    """``torch._dynamo.disallow_in_graph`` (public in spirit, private by path)."""
    torch._dynamo.disallow_in_graph(obj)


def dynamo_config_patch(**changes: Any) -> Any:
    """A context manager setting ``torch._dynamo.config`` values for its duration, restored after."""
    return torch._dynamo.config.patch(**changes)
