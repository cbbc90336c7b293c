"""Toggles: apply disable / allow_in_graph / disallow_in_graph, and undo them exactly.

A tracked function's toggle is applied by rebinding its name (or class
attribute) to a toggled object: ``torch.compiler.disable(fn)``, or a copy of
``fn`` registered with ``torch.compiler.allow_in_graph`` (a copy, so undoing
never touches a registration the user made on the original). A torch
callable's ``disallow_in_graph`` is a registration on the callable itself;
its undo puts its id back in Dynamo's registries exactly as it was.
"""

from __future__ import annotations

import functools
import importlib
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from . import torch_compat
from .options import NbcompileError

FUNCTION_MODES = ("compile", "disable", "allow_in_graph")
TORCH_MODES = ("compile", "disallow_in_graph")


def copy_function(fn: Any) -> Any:
    """A function equal to ``fn`` with its own identity and code object."""
    fn = torch_compat.unwrap_compiled(fn)
    if not isinstance(fn, types.FunctionType):
        return fn
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    functools.update_wrapper(copy, fn)
    del copy.__wrapped__
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


def toggled_function(original: Any, mode: str, keepalive: list[Any]) -> Any:
    """The object a tracked function's name is bound to under ``mode``."""
    if mode == "compile":
        return original
    if mode == "disable":
        return torch.compiler.disable(original)
    if mode == "allow_in_graph":
        copy = copy_function(original)
        torch.compiler.allow_in_graph(copy)
        keepalive.append(copy)  # its id stays registered, and unique, while we hold it
        return copy
    raise NbcompileError(f"unknown mode {mode!r} for a function; valid: {', '.join(FUNCTION_MODES)}")


@dataclass
class Registration:
    """One registration on a torch callable (or an allow_in_graph copy), undone exactly."""

    obj: Any
    before: dict[str, bool] = field(default_factory=dict)

    @classmethod
    def disallow(cls, obj: Any, name: str) -> "Registration":
        before = torch_compat.registry_membership(obj)
        try:
            torch._dynamo.disallow_in_graph(obj)
        except RuntimeError as exc:
            torch_compat.restore_registry_membership(obj, before)
            raise NbcompileError(
                f"disallow_in_graph({name}) refused: {str(exc).splitlines()[0]} "
                "It applies to torch ops; for your own function use disable"
            ) from None
        return cls(obj, before)

    def undo(self) -> None:
        torch_compat.restore_registry_membership(self.obj, self.before)


def undo_allow(copy: Any) -> None:
    """Remove an allow_in_graph copy's id from the registries (it was never there before)."""
    torch_compat.restore_registry_membership(copy, {k: False for k in torch_compat.registry_membership(copy)})


def validate(name: str, mode: str, tracked: Callable[[str], bool]) -> None:
    if tracked(name):
        if mode not in FUNCTION_MODES:
            hint = " (disallow_in_graph is for torch ops; for your own function use disable)" if mode == "disallow_in_graph" else ""
            raise NbcompileError(f"unknown mode {mode!r} for {name}; valid: {', '.join(FUNCTION_MODES)}{hint}")
        return
    if mode not in TORCH_MODES:
        raise NbcompileError(f"unknown mode {mode!r} for {name}; valid for torch callables: {', '.join(TORCH_MODES)}")
