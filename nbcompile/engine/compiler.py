"""The one recipe for a fresh compiled copy: ``torch.compile`` of a callable whose code Dynamo has
never seen (its own cache, gone with the copy), in a cache region of its own where torch has them
(``isolate_recompiles``), behind a recording backend or a plain one. Sessions, ``inspect``, trials
and the bench all compile through :func:`compiled_copy`; the toggles ``inspect`` and ``bench`` take
are applied through :func:`toggle_engine` and :func:`applied`. Compiled code is dropped through
:func:`drop_compiled`, which never drops the code another thread is running."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import types
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from ..capture.hub import Recording, RecordingBackend
from ..core import dynconfig, torch_compat
from ..core.errors import NbcompileError
from ..core.names import copy_function, is_torch_name, torch_name
from ..core.options import CompileOptions
from .replay import Replay
from .state import reach
from .toggles import Binding, Toggles


def compiled_copy(obj: Any, options: CompileOptions, *, recording: Recording | None = None,
                  backend: str | None = None, copy: bool = True, **overrides: Any) -> Any:
    """``torch.compile(obj)`` with ``options`` (``overrides`` win: ``dynamic=True``), in a cache region of
    its own: frames of library code it calls get entries in that region only, so a re-run or a toggle,
    which compiles anew, neither recompiles against an older copy's entries nor fills their recompile
    limit. The options' ``dynamo_config`` is applied around each call (and nowhere else). ``copy``: compile
    a fresh copy of ``obj``'s code (its own Dynamo cache); ``recording``: behind a backend that reports each
    graph to it (``backend``, default the options' backend, is the one it hands the graph on to)."""
    name = backend or options.backend
    kwargs: dict[str, Any] = {**options.torch_compile_kwargs(), **overrides}
    if torch_compat.ISOLATE_RECOMPILES:
        kwargs["isolate_recompiles"] = True
    target = fresh_copy(obj) if copy else obj
    if recording is not None:
        compiled = torch.compile(target, backend=RecordingBackend(name, options.mode, kwargs.get("dynamic"), recording),
                                 **kwargs)
    else:
        compiled = torch.compile(target, backend=name, mode=options.mode, **kwargs)
    return dynconfig.around(compiled, options.dynamo_config)  # Dynamo reads its config when it traces: at the call


#: Codes whose drop waits for the other threads that were running them (tried again at every drop), by
#: identity: code objects compare equal by content, and a copy (``copy_function``) equals its original.
_PENDING: dict[int, types.CodeType] = {}
_DROP_LOCK = threading.Lock()
#: How long a drop waits for other threads where torch has no cache regions (it must drop to be right).
DROP_WAIT_S = 10.0


def _spans(code: types.CodeType) -> set[tuple[str, int]]:
    """(file, first line) of ``code`` and of its resume functions: what a frame running their compiled
    code shows (Dynamo's code keeps the original's file, name and first line)."""
    return {(c.co_filename, c.co_firstlineno) for c in [code, *torch_compat.resume_codes(code)]}


def _target_spans(fn: Any) -> set[tuple[str, int]] | None:
    """(file, first line) of the code a ``torch.compile``'d call of ``fn`` runs first; None if unknown."""
    target = torch_compat.unwrap_compiled(fn)
    owner = getattr(target, "__self__", None)
    if isinstance(owner, torch.nn.Module):  # a module's __call__: its forward runs
        target = type(torch_compat.unwrap_compiled(owner)).forward
    if isinstance(target, torch.nn.Module):
        target = type(target).forward
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    return {(code.co_filename, code.co_firstlineno)} if isinstance(code, types.CodeType) else None


def _running_elsewhere(spans: set[tuple[str, int]]) -> set[tuple[str, int]]:
    """The spans some other thread may be running now: a frame of their code on its stack, a
    ``torch.compile``'d call of one of them about to start (or of something nbcompile cannot read), or a
    compile in progress (which may be compiling any of them: all spans)."""
    me = threading.get_ident()
    busy: set[tuple[str, int]] = set()
    for ident, frame in sys._current_frames().items():  # noqa: SLF001  # documented in sys; no public form
        if ident == me:
            continue
        each: types.FrameType | None = frame
        while each is not None:
            key = (each.f_code.co_filename, each.f_code.co_firstlineno)
            if key in spans:
                busy.add(key)
            seen = torch_compat.dynamo_frame(each)
            if seen is not None:
                targets = _target_spans(seen[1]) if seen[0] == "calling" else None
                busy.update(spans if targets is None else targets & spans)
            each = each.f_back
    return busy


def drop_compiled(codes: Iterable[types.CodeType]) -> list[types.CodeType]:
    """Drop the compiled code of ``codes`` (and their resume functions), except code another thread is
    running: torch frees a cache entry's code under the thread running it (a crash in ``eval_frame``).
    Such a drop is put off: tried again at every later drop. Where torch has cache regions
    (``isolate_recompiles``) that is enough (the fresh compiled copy never reads the old entries);
    without them a drop waits up to ``DROP_WAIT_S`` for the other thread to leave the code. Returns the
    codes whose drop was put off."""
    with _DROP_LOCK:
        wanted = list({id(code): code for code in [*_PENDING.values(), *codes]}.values())
        _PENDING.clear()
        deadline = time.monotonic() + (0.0 if torch_compat.ISOLATE_RECOMPILES else DROP_WAIT_S)
        while True:
            interval = sys.getswitchinterval()
            # The check and the drops with no forced thread switch between them (Python code only: no
            # other thread runs unless this one waits), so no thread enters the code in between.
            sys.setswitchinterval(max(interval, 1.0))
            try:
                busy = _running_elsewhere({s for code in wanted for s in _spans(code)})
                later = [code for code in wanted if _spans(code) & busy]
                put_off = {id(code) for code in later}
                for code in wanted:
                    if id(code) not in put_off:
                        torch_compat.drop_compiled_code(code)
            finally:
                sys.setswitchinterval(interval)
            if not later or time.monotonic() >= deadline:
                break
            wanted = later
            time.sleep(0.001)
        _PENDING.update({id(code): code for code in later})
        return later


def fresh_copy(fn: Any) -> Any:
    """A callable equal to ``fn`` whose code object Dynamo has never seen."""
    fn = torch_compat.unwrap_compiled(fn)
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        return types.MethodType(copy_function(fn.__func__), fn.__self__)
    return copy_function(fn)  # nn.Module instances and other callables come back as they are


def own_forward(module: Any) -> None:
    """Where torch has no cache regions (``torch_compat.CACHE_REGIONS``): a scratch copy of a module runs its
    forward from a code object of its own (a copy of its class's, bound on the copy), so what a trial compiles
    for it sits in a cache of its own. Else it would land on the class's forward, beside the session's entries
    and every earlier trial's, whose count a new compile meets (a trial started as a recompile, and a later one
    ran past ``recompile_limit`` to eager). Only for nbcompile's own copies: the user's module is not touched."""
    if torch_compat.CACHE_REGIONS or not isinstance(module, torch.nn.Module) or "forward" in vars(module):
        return
    forward = getattr(type(module), "forward", None)
    if isinstance(forward, types.FunctionType):
        module.forward = types.MethodType(copy_function(forward), module)


def namespace_of(fn: Any) -> dict[str, Any]:
    target = torch_compat.unwrap_compiled(fn)
    if isinstance(target, torch.nn.Module):
        target = type(target).forward
    return getattr(getattr(target, "__func__", target), "__globals__", {})


def module_functions(fn: Any) -> dict[str, Any]:
    """The functions defined in the same file as ``fn``: what its toggles and suggestions name."""
    namespace = namespace_of(fn)
    target = getattr(torch_compat.unwrap_compiled(fn), "__func__", torch_compat.unwrap_compiled(fn))
    filename = getattr(getattr(target, "__code__", None), "co_filename", None)
    return {n: v for n, v in torch_compat.namespace_items(namespace)
            if isinstance(v, types.FunctionType) and v.__code__.co_filename == filename}


def toggle_engine(fn: Any, toggles: dict[Any, str]) -> tuple[Toggles, dict[str, str]]:
    """The engine for ``inspect``/``bench`` toggles on ``fn``'s globals, and the toggles by name.

    Keys are names in ``fn.__globals__``, the objects bound there, or dotted torch
    names (or torch callables). Nothing is applied yet.
    """
    if not isinstance(toggles, dict):
        raise NbcompileError(f"toggles must be a dict of name or object -> mode, not {type(toggles).__name__} "
                             "(e.g. toggles={'helper': 'disable', 'torch.sub': 'disallow_in_graph'})")
    namespace = namespace_of(fn)
    label = getattr(fn, "__name__", type(fn).__name__)
    named: dict[str, str] = {}
    for key, mode in toggles.items():
        if isinstance(key, str):
            if not is_torch_name(key) and key not in namespace:
                raise NbcompileError(f"toggle {key!r}: no such name in {label}'s globals; give a name defined "
                                     "there, the function object, or a torch callable by dotted name (torch.sub)")
            named[key] = mode
            continue
        names = [n for n, v in torch_compat.namespace_items(namespace) if v is key]
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
    namespace = namespace_of(fn)
    original = torch_compat.unwrap_compiled(fn)
    slots = reach(namespace, None, [original])
    return Replay.capture({label: (slot, slot.get()) for label, slot in slots.items()}, (original, args, kwargs),
                          modules=slots.modules, imports=slots.imports)


def call_with(extra: tuple[Any, tuple[Any, ...], dict[str, Any]]) -> Any:
    target, args, kwargs = extra
    return target(*args, **kwargs)
