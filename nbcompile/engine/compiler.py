"""The one recipe for a fresh compiled copy: ``torch.compile`` of a callable whose code Dynamo has
never seen (its own cache, gone with the copy), in a cache region of its own where torch has them
(``isolate_recompiles``), behind a recording backend or a plain one. Sessions, ``inspect``, trials
and the bench all compile through :func:`compiled_copy`; the toggles ``inspect`` and ``bench`` take
are applied through :func:`toggle_engine` and :func:`applied`."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch

from ..capture.hub import Recording, RecordingBackend
from ..core import torch_compat
from ..core.errors import NbcompileError
from ..core.names import copy_function, is_torch_name, torch_name
from ..core.options import CompileOptions
from .state import Replay, reach
from .toggles import Binding, Toggles


def compiled_copy(obj: Any, options: CompileOptions, *, recording: Recording | None = None,
                  backend: str | None = None, copy: bool = True, **overrides: Any) -> Any:
    """``torch.compile(obj)`` with ``options`` (``overrides`` win: ``dynamic=True``), in a cache region of
    its own: frames of library code it calls get entries in that region only, so a re-run or a toggle,
    which compiles anew, neither recompiles against an older copy's entries nor fills their recompile
    limit. ``copy``: compile a fresh copy of ``obj``'s code (its own Dynamo cache); ``recording``: behind
    a backend that reports each graph to it (``backend``, default the options' backend, is the one it
    hands the graph on to)."""
    name = backend or options.backend
    kwargs: dict[str, Any] = {**options.torch_compile_kwargs(), **overrides}
    if torch_compat.ISOLATE_RECOMPILES:
        kwargs["isolate_recompiles"] = True
    target = fresh_copy(obj) if copy else obj
    if recording is not None:
        return torch.compile(target, backend=RecordingBackend(name, options.mode, kwargs.get("dynamic"), recording),
                             **kwargs)
    return torch.compile(target, backend=name, mode=options.mode, **kwargs)


def fresh_copy(fn: Any) -> Any:
    """A callable equal to ``fn`` whose code object Dynamo has never seen."""
    fn = torch_compat.unwrap_compiled(fn)
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        return types.MethodType(copy_function(fn.__func__), fn.__self__)
    return copy_function(fn)  # nn.Module instances and other callables come back as they are


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
    return {n: v for n, v in list(namespace.items())
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
    namespace = namespace_of(fn)
    original = torch_compat.unwrap_compiled(fn)
    slots = reach(namespace, None, [original])
    return Replay.capture({label: (slot, slot.get()) for label, slot in slots.items()}, (original, args, kwargs))


def call_with(extra: tuple[Any, tuple[Any, ...], dict[str, Any]]) -> Any:
    target, args, kwargs = extra
    return target(*args, **kwargs)
