"""Every use of torch's private API in nbcompile, feature-tested at import.

A torch upgrade that moves one of these internals touches this file only. Each
entry is probed once when nbcompile is imported; a missing one degrades the
feature that needs it with a clear message (see ``MISSING``) instead of
crashing somewhere deep inside a capture. What needs no torch API is not
here: the cache artifact format is read in ``cache_artifacts.py``.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import inspect as _inspect
import logging
import os
import re
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from . import cache_artifacts
from .cache_artifacts import ARTIFACT_HEAD as ARTIFACT_HEAD
from .cache_artifacts import CacheEntry as CacheEntry
from .cache_artifacts import CacheLayout as CacheLayout
from .cache_artifacts import TooManyEntries as TooManyEntries
from .errors import NbcompileError

_ABSENT = object()

#: Features that this torch lacks, name -> what nbcompile does without it.
MISSING: dict[str, str] = {}

TRACE_LOGGER_NAME = "torch.__trace"
#: The installed torch's version ("2.13.0+cpu").
TORCH_VERSION: str = str(torch.__version__)


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
#: ``NBCOMPILE_NO_CACHE_REGIONS=1``: nbcompile acts as on a torch without cache regions (2.11, 2.12), so their
#: way of keeping configurations apart is tested on any torch.
_NO_REGIONS = os.environ.get("NBCOMPILE_NO_CACHE_REGIONS", "") == "1"
ISOLATE_RECOMPILES = "isolate_recompiles" in _COMPILE_PARAMS and not _NO_REGIONS
if not ISOLATE_RECOMPILES:
    MISSING["isolate_recompiles"] = (
        "torch.compile has no isolate_recompiles: frames that nbcompile.inspect compiles "
        "separately share the default cache bucket of their code"
    )


def _region_getter() -> Callable[[], int] | None:
    getter = getattr(torch._C._dynamo.eval_frame, "get_eval_frame_isolate_recompiles_id", None)
    return getter if ISOLATE_RECOMPILES and callable(getter) else None


_CURRENT_REGION = _region_getter()
if _CURRENT_REGION is None:
    MISSING["cache regions"] = (
        "torch has no readable cache region: nbcompile keeps each configuration's compiled code on copies of the "
        "cell's functions instead (a code object of their own per configuration), so toggling back compiles "
        "nothing and a toggle compiles the entries that reach what it changes; but the cell's functions are bound "
        "by name, one copy for all entries, so an entry that shares a function with those compiles anew too, and "
        "a module entry's forward keeps the configurations' code on its class's own code object until half of "
        "Dynamo's recompile limit, then every entry compiles anew")
#: Whether a toggle can keep the compiled code of entries it does not reach, and of configurations seen before.
CACHE_REGIONS = _CURRENT_REGION is not None
#: Without cache regions, each configuration compiles copies of the cell's functions (fresh code objects, whose
#: Dynamo caches are their own), so the code of configurations seen before is kept apart all the same.
CONFIG_COPIES = not CACHE_REGIONS


def current_region() -> int | None:
    """The cache region (``isolate_recompiles`` id) of the compiled call running now; None outside one, or
    where torch has none."""
    if _CURRENT_REGION is None:
        return None
    region = _CURRENT_REGION()
    return region if region >= 0 else None


def region_of(compiled: Any) -> int | None:
    """The cache region a ``torch.compile`` wrapper (a function, or a compiled module) compiles into."""
    region = getattr(compiled, "_isolate_recompiles_id", None)
    if region is None:
        region = getattr(getattr(compiled, "dynamo_ctx", None), "_isolate_recompiles_id", None)
    return region if isinstance(region, int) and region >= 0 else None


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


def _wrapper_code() -> types.CodeType | None:
    """The code object of that frame, one for every callable torch.compile wraps (``wrap_inline``'s ``inner``):
    a compile of it that fails and falls back (``suppress_errors``) marks it skipped for the whole process, so
    every later ``torch.compile`` of a torch module or a decorated function runs eagerly until it is dropped."""
    try:
        from torch._dynamo import external_utils

        return external_utils.wrap_inline(lambda: None).__code__
    except (ImportError, AttributeError):  # pragma: no cover - older torch
        return None


WRAPPER_CODE = _wrapper_code()


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
    """Resume functions Dynamo generated for ``code`` (its graph-break continuations), each once. Dynamo
    shares a resume function between the paths that reach the same break (a loop's breaks resume into the
    same code from every iteration's path): walked without a visited set, those paths multiply (a
    VitsModel search spent 10 minutes and 5 GB here)."""
    from torch._dynamo.resume_execution import ContinueExecutionCache

    found: list[types.CodeType] = []
    seen = {id(code)}
    stack = [code]
    while stack:
        current = stack.pop()
        try:
            generated = ContinueExecutionCache.cache[current]
        except KeyError:
            continue
        for resumed in generated.values():
            if id(resumed) not in seen:
                seen.add(id(resumed))
                found.append(resumed)
                stack.append(resumed)
    return found


def drop_compiled_code(code: types.CodeType) -> None:
    """Drop the compiled code of one code object and of its resume functions.

    Only that code's cache entries go; every other function keeps its own.
    """
    for each in [code, *resume_codes(code)]:
        torch._dynamo.eval_frame.reset_code(each)  # type: ignore[attr-defined]  # private, not re-exported


def dynamo_frame(frame: types.FrameType) -> tuple[str, Any] | None:
    """What a frame of another thread says about Dynamo: ``("compiling", None)`` for a frame of Dynamo's
    frame conversion (a compile in progress), ``("calling", fn)`` for ``torch.compile``'s wrapper about to
    run ``fn`` (``fn`` is None when it cannot be read), None otherwise."""
    import os

    code = frame.f_code
    folder = os.path.dirname(torch._dynamo.__file__)
    if not code.co_filename.startswith(folder):
        return None
    name = os.path.basename(code.co_filename)
    if name == "convert_frame.py":
        return ("compiling", None)
    if name == "eval_frame.py" and code.co_name in ("compile_wrapper", "_fn"):
        try:
            return ("calling", frame.f_locals.get("fn"))
        except Exception:  # a frame's locals read while it runs: never fail the drop on it
            return ("calling", None)
    return None


def detach_cleanup_hooks(scope: dict[str, Any]) -> int:
    """Before ``scope`` (a notebook namespace) is cleared: torch deletes the globals it put there for a
    compiled code (``__compiled_fn_...``) when that code dies, by ``del scope[name]``, which raises
    ``KeyError`` once the namespace was cleared. Each such deletion is pointed at a dict of its own
    holding the name, so it finds it whenever it comes. Returns how many were pointed away."""
    manager = getattr(getattr(torch._dynamo, "utils", None), "CleanupManager", None)
    entries = getattr(getattr(manager, "instance", None), "values", None)
    if not isinstance(entries, dict):
        return 0
    moved = 0
    for hooks in list(entries.values()):
        for hook in list(hooks) if isinstance(hooks, list) else []:
            if getattr(hook, "scope", None) is scope and isinstance(getattr(hook, "name", None), str):
                hook.scope = {hook.name: scope.get(hook.name)}
                moved += 1
    return moved


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


#: The stances ``%nbcompile stance`` sets for a session's calls (``torch.compiler.set_stance``).
STANCES = ("default", "fail_on_recompile", "eager_on_recompile", "eager_then_compile")
#: How torch's error for a recompile that ``fail_on_recompile`` refuses starts.
RECOMPILE_REFUSED = "Detected recompile when torch.compile stance is 'fail_on_recompile'"


def current_stance() -> str | None:
    """The stance ``torch.compiler.set_stance`` set now (``default``, ``force_eager``, ...); None where torch
    has none."""
    if "stance" in MISSING:  # pragma: no cover - torch < 2.6
        return None
    return str(torch._dynamo.eval_frame._stance.stance)


def stance(name: str) -> Any:
    """The context of ``torch.compiler.set_stance(name)`` (the stance before is restored after). Only ever
    entered at once: torch sets the stance when this is called, not when the context is entered."""
    if "stance" in MISSING:  # pragma: no cover - torch < 2.6
        raise NbcompileError(f"torch {torch.__version__} has no torch.compiler.set_stance (torch 2.6 or later)")
    return torch.compiler.set_stance(name)


def inductor_fallback_random() -> bool:
    """Whether Inductor draws random numbers with eager's generator (``torch._inductor.config.fallback_random``):
    then a compiled run's random values match an eager run's from the same seed."""
    config = getattr(getattr(torch, "_inductor", None), "config", None)
    return bool(getattr(config, "fallback_random", False))


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
        "skip reasons": lambda: torch._dynamo.eval_frame.dynamo_tls.skip_reasons,
        "stance": lambda: (torch.compiler.set_stance, torch._dynamo.eval_frame._stance.stance),
        "mode stacks": lambda: (torch.overrides._get_current_function_mode_stack,
                                __import__("torch.utils._python_dispatch",
                                           fromlist=["x"])._get_current_dispatch_mode_stack),
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

#: Whether torch lists the frames Dynamo skips (``dynamo_tls.skip_reasons``, after torch 2.11): without it
#: ``Report.skipped`` stays empty.
SKIP_REASONS = "skip reasons" not in MISSING


# --- the global state a compile is guarded on ------------------------------------------------

def mode_stacks() -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The class names of the torch function modes and the dispatch modes active now, outermost first; None
    where torch has no readable stack."""
    if "mode stacks" in MISSING:  # pragma: no cover - older torch
        return None
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    try:
        function = torch.overrides._get_current_function_mode_stack()  # type: ignore[no-untyped-call]
        dispatch = _get_current_dispatch_mode_stack()
    except Exception:  # pragma: no cover - a torch whose stacks read otherwise
        return None
    return tuple(type(m).__name__ for m in function), tuple(type(m).__name__ for m in dispatch)


def autocast_states() -> tuple[tuple[str, bool, str], ...]:
    """(device type, enabled, dtype) of autocast for the CPU and, where present, CUDA."""
    out = []
    for device in ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",):
        try:
            enabled = bool(torch.is_autocast_enabled(device))
            dtype = torch.get_autocast_dtype(device)
        except (AttributeError, TypeError, RuntimeError):  # pragma: no cover - torch < 2.4
            continue
        out.append((device, enabled, str(dtype)))
    return tuple(out)


# --- frames Dynamo skips --------------------------------------------------------------------

#: torch's record of a skipped frame: "fn (file.py:42): reason".
_SKIP = re.compile(r"^(?P<function>.*?) \((?P<filename>.*):(?P<lineno>\d+)\): (?P<reason>.*)$", re.S)


@contextlib.contextmanager
def skips_collected() -> Iterator[list[tuple[str, str, int, str]]]:
    """The frames Dynamo skips inside the context, as (function, filename, first line, torch's reason): read
    from the list Dynamo keeps for a ``fullgraph`` compile (``dynamo_tls.skip_reasons``), set for the context
    and given back after. Empty where torch keeps no such list."""
    found: list[tuple[str, str, int, str]] = []
    if "skip reasons" in MISSING:  # pragma: no cover - older torch
        yield found
        return
    tls = torch._dynamo.eval_frame.dynamo_tls
    before = tls.skip_reasons
    mine: list[str] = []
    tls.skip_reasons = mine
    try:
        yield found
    finally:
        now = tls.skip_reasons  # a fullgraph compile inside starts a list of its own (and ends it with None)
        texts = mine + (now if now is not None and now is not mine else [])
        tls.skip_reasons = before
        for text in texts:
            m = _SKIP.match(str(text))
            if m is not None:
                found.append((m["function"], m["filename"], int(m["lineno"]), m["reason"]))


# --- namespaces Dynamo changes behind the reader's back ---------------------------------------

def namespace_items(space: dict[str, Any]) -> list[tuple[str, Any]]:
    """``list(space.items())``, safe from Dynamo's own edits of the namespace: Dynamo puts
    ``__builtins_dict___N`` into the globals of the code it compiles and a weak-reference callback deletes it
    when the compiled code is collected; a collection that runs while the items are copied (any allocation
    may start one) then changes the dict mid-copy ("dictionary changed size during iteration": a trial
    failed with it now and then, raised from nbcompile's audit). The copy runs with the collector paused."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return list(space.items())
    finally:
        if paused:
            gc.enable()


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


def graph_break_counter() -> int | None:
    """torch's own count of graph breaks so far in this process (the sum of
    ``torch._dynamo.utils.counters["graph_break"]``), or None where this torch does not keep it."""
    try:
        from torch._dynamo.utils import counters

        return int(sum(counters["graph_break"].values()))
    except Exception:  # a torch without the counter: nothing to compare with
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


# --- torch.compile's cache artifacts (torch.compiler.save_cache_artifacts' format) ---------------
# The policy (manifest, hash, which keys are safe, the listing) is nbcompile/engine/cachefile.py; the
# bytes are read in core/cache_artifacts.py (pure Python); here is only what asks torch: its format
# version, where it writes each entry, its own writer.

def _cache_api() -> tuple[Callable[..., Any], Callable[..., Any]]:
    save = getattr(torch.compiler, "save_cache_artifacts", None)
    load = getattr(torch.compiler, "load_cache_artifacts", None)
    if not callable(save) or not callable(load):
        raise NbcompileError(f"torch {torch.__version__} has no torch.compiler.save_cache_artifacts (torch >= 2.7)")
    return save, load


def compile_cache_payload() -> bytes:
    """``torch.compiler.save_cache_artifacts()``: the bytes of every artifact this process has seen."""
    save, _ = _cache_api()
    artifacts = save()
    if artifacts is None:
        raise NbcompileError("nothing to save: no compile in this process has left cache artifacts yet (run the "
                             "compiled code first; artifacts come from Inductor and AOTAutograd, not backend eager)")
    return bytes(artifacts[0])


def _artifact_version() -> int:
    """The version of torch's artifact format this torch reads."""
    try:
        from torch.utils import _appending_byte_serializer as serializer
        return int(serializer._ENCODING_VERSION)
    except (ImportError, AttributeError):
        return 1


def compile_cache_head_problem(head: bytes) -> str | None:
    """Why a file whose first bytes are ``head`` cannot be this torch's artifact format, or None
    (``cache_artifacts.head_problem``)."""
    return cache_artifacts.head_problem(head, _artifact_version())


def decode_compile_cache(data: bytes, max_entries: int | None = None) -> list[CacheEntry]:
    """The entries of this torch's artifact bytes, read without applying anything (``cache_artifacts.decode``)."""
    return cache_artifacts.decode(data, _artifact_version(), max_entries)


def compile_cache_dir() -> str:
    """torch's local compile cache directory (``TORCHINDUCTOR_CACHE_DIR``, else its default)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except ImportError:  # torch before cache_dir_utils
        from torch._inductor.runtime.runtime_utils import cache_dir  # type: ignore[attr-defined]
    return str(cache_dir())


def compile_cache_layout(kind: str) -> CacheLayout:
    """Where torch writes entries of type ``kind``, asked of torch's own path functions once (not once per
    key: a file of 100,000 entries is judged in a blink). Where torch's function for a type is the plain
    join nbcompile knows (checked on ``cache_artifacts.LAYOUT_PROBES``), ``place`` repeats that join; else
    it asks torch for each key. Raises NbcompileError ("not judged, because ...") for a type nbcompile does not know."""
    with cache_artifacts.cache_dir_env_kept():
        return _compile_cache_layout(kind)


def _compile_cache_layout(kind: str) -> CacheLayout:
    import os

    root = compile_cache_dir()
    try:
        if kind == "inductor":
            from torch._inductor.codecache import FxGraphCache
            fx_base = str(FxGraphCache._get_tmp_dir())
            return CacheLayout(root, cache_artifacts.joined(FxGraphCache._get_tmp_dir_for_key,
                                             lambda key: os.path.join(fx_base, key[1:3], key)))
        if kind == "aot_autograd":
            from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
            aot_base = str(AOTAutogradCache._get_tmp_dir())
            return CacheLayout(root, cache_artifacts.joined(AOTAutogradCache._get_tmp_dir_for_key,
                                             lambda key: os.path.join(aot_base, key)))
        if kind == "autotune":  # torch writes os.path.join(cache_dir(), key): an absolute key goes anywhere
            return CacheLayout(root, lambda key: os.path.join(root, key))
        if kind == "pgo":
            from torch._dynamo import pgo
            rewrite, path_of = pgo.PGOCacheArtifact._rewrite_cache_key_for_mega_cache, pgo.code_state_path
            return CacheLayout(root, cache_artifacts.asked(lambda key: path_of(rewrite(key))))
        if kind == "precompile":
            from torch._dynamo.package import DynamoCache
            prefix = DynamoCache.path_prefix()
            return CacheLayout(prefix or os.getcwd(), lambda key: os.path.join(prefix, key) if prefix else key)
    except (ImportError, AttributeError) as exc:
        raise NbcompileError(f"not judged, because this torch ({torch.__version__}) does not say where it writes a "
                             f"{kind!r} entry ({type(exc).__name__}: {exc})") from None
    raise NbcompileError(f"not judged, because nbcompile does not know where torch writes a {kind!r} entry (known: "
                         "inductor, aot_autograd, autotune, pgo, precompile)")


def write_compile_cache_entries(entries: list[CacheEntry]) -> int:
    """Hand each entry to torch's own ``populate_cache`` (what ``torch.compiler.load_cache_artifacts``
    does), in order; the caller has checked every key. Torch's bundled Triton kernels are not
    unpickled here (torch unpacks them on a cache hit), so loading writes bytes and runs nothing
    from the file. Returns how many were written; raises NbcompileError naming the entry that failed."""
    try:
        from torch.compiler._cache import CacheArtifactFactory, CacheArtifactManager
        CacheArtifactManager._ensure_cache_artifacts_registered()
        import torch._inductor.config as inductor_config
    except (ImportError, AttributeError) as exc:
        raise NbcompileError(f"not tried, because torch {torch.__version__} has no cache artifact factory "
                             f"({type(exc).__name__}: {exc})") from None
    patch = (inductor_config.patch(bundle_triton_into_fx_graph_cache=False)
             if hasattr(inductor_config, "bundle_triton_into_fx_graph_cache") else _nothing())
    written = 0
    with patch, cache_artifacts.cache_dir_env_kept():
        for index, (kind, key, content) in enumerate(entries, 1):
            try:
                CacheArtifactFactory.create(kind, key, content).populate_cache()
            except Exception as exc:
                raise NbcompileError(f"entry {index} ({kind} {key[:80]!r}) could not be written ({type(exc).__name__}: "
                                     f"{str(exc).splitlines()[0][:120] if str(exc) else ''}); {written} of "
                                     f"{len(entries)} entries were written") from None
            written += 1
    return written


def _nothing() -> Any:
    import contextlib
    return contextlib.nullcontext()


# --- small private-API seams the engine uses (kept here so a torch upgrade touches one file) -----

def disallow_in_graph(obj: Any) -> None:
    """``torch._dynamo.disallow_in_graph`` (public in spirit, private by path)."""
    torch._dynamo.disallow_in_graph(obj)


def dynamo_config() -> Any:
    """``torch._dynamo.config`` (a ConfigModule: ``patch``, ``_config``)."""
    return torch._dynamo.config


def compile_config_fingerprint() -> str:
    """What the compiled code of a configuration depends on beyond its toggles and options and that Dynamo does
    not guard: every value of ``torch._dynamo.config``, ``torch._inductor.config`` and
    ``torch._functorch.config`` as text (``fallback_random``, ``capture_scalar_outputs``...). A kept
    configuration whose fingerprint differs is compiled anew. Empty where a config module lacks
    ``get_config_copy``."""
    parts = []
    for name in ("torch._dynamo.config", "torch._inductor.config", "torch._functorch.config"):
        module = sys.modules.get(name)
        copy_of = getattr(module, "get_config_copy", None)
        if copy_of is None:
            continue
        try:
            values = copy_of()
        except Exception:  # noqa: BLE001  a config torch cannot copy: it is not part of the key
            continue
        parts.append(f"{name}:" + repr(sorted(values.items(), key=lambda kv: kv[0])))
    return "\n".join(parts)


def dynamo_config_patch(**changes: Any) -> Any:
    """A context manager setting ``torch._dynamo.config`` values for its duration, restored after."""
    return torch._dynamo.config.patch(**changes)


@contextlib.contextmanager
def torch_saves_reported(report: Callable[[str], None]) -> Iterator[None]:
    """``torch.save`` to a path writes through torch's C++ file writer, which raises no Python audit event
    (``open``): for the duration, such a save calls ``report(path)`` first, which may raise to stop it. A
    save to a buffer is not reported. Put back exactly on the way out; without the writer this torch uses
    (``torch.serialization._open_zipfile_writer``), nothing is patched and saves are not seen."""
    module = torch.serialization
    original = getattr(module, "_open_zipfile_writer", None)
    if original is None:
        yield
        return

    def reported(name_or_buffer: Any) -> Any:
        if isinstance(name_or_buffer, (str, bytes, os.PathLike)):
            report(str(os.fsdecode(name_or_buffer)))
        return original(name_or_buffer)

    module._open_zipfile_writer = reported
    try:
        yield
    finally:
        if module._open_zipfile_writer is reported:
            module._open_zipfile_writer = original


@contextlib.contextmanager
def trace_records_through_disable() -> Iterator[None]:
    """Torch's structured trace records (``torch.__trace``) still reach their handlers while
    ``logging.disable`` silences every other logger: torch 2.13 hands them on regardless, torch 2.11 and
    older drop them (``Logger.debug`` asks ``isEnabledFor``, which reads the global disable level), so a
    compile under a quiet run would go unrecorded there. The trace logger answers for itself for the
    duration (an instance attribute over ``Logger.isEnabledFor``), then is as it was."""
    trace = logging.getLogger("torch.__trace")
    held = trace.__dict__.get("isEnabledFor", _ABSENT)
    trace.isEnabledFor = lambda level: level >= trace.getEffectiveLevel()  # type: ignore[method-assign]
    try:
        yield
    finally:
        if held is _ABSENT:
            del trace.isEnabledFor
        else:
            trace.isEnabledFor = held  # type: ignore[method-assign]


@contextlib.contextmanager
def no_guard_latency_profile() -> Iterator[None]:
    """Dynamo times every new guard set once after building it (``profile_guard_manager``, a cache flush
    and a check, for a compile metric): 17 ms a frame on this CPU, 4% of a fix-search trial on a small
    BERT. A scratch run reads no such metric, so for its duration the profile answers 0 at once; put back
    exactly on the way out. Where this torch has no such function, nothing is patched."""
    try:
        from torch._dynamo import guards
    except ImportError:
        yield
        return
    module: Any = guards
    original = module.__dict__.get("profile_guard_manager")
    if not callable(original):
        yield
        return

    def unprofiled(*args: Any, **kwargs: Any) -> float:
        return 0.0

    module.profile_guard_manager = unprofiled
    try:
        yield
    finally:
        if module.__dict__.get("profile_guard_manager") is unprofiled:
            module.profile_guard_manager = original
