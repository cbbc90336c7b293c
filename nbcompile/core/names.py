"""torch callables by dotted name, and function copies with an identity of their own (a leaf)."""

from __future__ import annotations

import functools
import importlib
import types
from typing import TYPE_CHECKING, Any

from .errors import NbcompileError
from .lazy import lazy_module

if TYPE_CHECKING:
    from . import torch_compat
else:  # at its first use: a trace log read from disk never loads torch
    torch_compat = lazy_module("nbcompile.core.torch_compat", globals(), "torch_compat")


def copy_function(fn: Any) -> Any:
    """A function equal to ``fn`` with its own identity and code object."""
    fn = torch_compat.unwrap_compiled(fn)
    if not isinstance(fn, types.FunctionType):
        return fn
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    functools.update_wrapper(copy, fn)
    del copy.__wrapped__  # type: ignore[attr-defined]  # set by update_wrapper; typeshed does not declare it
    return copy


def resolve_torch_callable(name: str) -> Any:
    """``"torch.nn.functional.gelu"`` -> the callable; a one-line error otherwise."""
    if not (name == "torch" or name.startswith("torch.")):
        raise NbcompileError(f"{name!r} is not a torch callable; give a dotted name such as torch.sub")
    parts = name.split(".")
    obj: Any = importlib.import_module("torch")
    for i, part in enumerate(parts[1:], start=1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            try:
                obj = importlib.import_module(".".join(parts[: i + 1]))
            except ImportError:
                raise NbcompileError(f"{name!r} not found: torch has no {'.'.join(parts[: i + 1])}") from None
    if not callable(obj):
        raise NbcompileError(f"{name!r} is not callable")
    return obj


_PUBLIC_TORCH_MODULES = (
    "torch", "torch.nn.functional", "torch.linalg", "torch.special", "torch.fft", "torch.func", "torch.Tensor",
)


def torch_name(obj: Any) -> str:
    """The public dotted name of a torch callable (``torch.sub``, ``torch.nn.functional.gelu``)."""
    import torch

    name = getattr(obj, "__name__", None)
    if name:
        for module_name in _PUBLIC_TORCH_MODULES:
            owner: Any = torch
            for part in module_name.split(".")[1:]:
                owner = getattr(owner, part, None)
            if owner is not None and getattr(owner, name, None) is obj:
                return f"{module_name}.{name}"
        module = getattr(obj, "__module__", "") or ""
        if module.startswith("torch") and not any(p.startswith("_") for p in module.split(".")):
            return f"{module}.{name}"
    raise NbcompileError(f"{obj!r} is not a torch callable with a public dotted name; give one such as torch.sub")


def is_torch_name(name: str) -> bool:
    """A torch callable by dotted name (``torch.sub``); ``module:Class.method`` names a library function."""
    return name.startswith("torch.") and ":" not in name
