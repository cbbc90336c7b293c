"""Library functions a session may toggle: ``module:function`` or ``module:Class.method``.

Most graph breaks in real models are in library code (transformers' attention, a logger call in a
model's ``forward``); a toggle on the cell's own functions cannot reach them. A session can track
such a function by its import path (``%%compile --track``, ``Session.track``, and the fix search on
the functions that hold its breaks): the toggle rebinds the module's or the class's attribute, and
the binding writes only while the attribute holds what it put there; ``reset`` puts the original
back. A library function's compiled code is never dropped by nbcompile (other models may use it).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from ..core.errors import NbcompileError
from .toggles import Binding

SEP = ":"
_EXAMPLE = "transformers.models.gpt2.modeling_gpt2:GPT2Attention.forward"


def is_library_name(name: str) -> bool:
    return SEP in name


def resolve(name: str) -> tuple[Binding, types.FunctionType]:
    """The binding and the function for ``module:function`` or ``module:Class.method``."""
    module_name, _, qual = name.partition(SEP)
    parts = qual.split(".")
    if not module_name or not qual or len(parts) > 2 or not all(p.isidentifier() for p in parts):
        raise NbcompileError(f"{name!r}: give a library function as module:function or module:Class.method "
                             f"({_EXAMPLE})")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise NbcompileError(f"{name!r}: module {module_name} does not import ({type(exc).__name__}: {exc})") from None
    space = vars(module)
    if len(parts) == 1:
        fn = space.get(parts[0])
        binding = Binding(name, space, parts[0])
    else:
        cls = space.get(parts[0])
        if not isinstance(cls, type):
            raise NbcompileError(f"{name!r}: {module_name} has no class {parts[0]}")
        fn = vars(cls).get(parts[1])
        binding = Binding(name, cls, parts[1], holder=(space, parts[0], cls))
    if not isinstance(fn, types.FunctionType):
        what = "nothing" if fn is None else f"a {type(fn).__name__}"
        raise NbcompileError(f"{name!r} is {what}, not a Python function defined there; nbcompile toggles plain "
                             "functions and methods")
    return binding, fn


def holder_of(filename: str, lineno: int) -> str | None:
    """The library function (``module:Class.method``) whose code holds ``filename:lineno``, or None."""
    module = next((m for m in list(sys.modules.values())
                   if isinstance(getattr(m, "__file__", None), str) and m.__file__ == filename), None)
    if module is None or module.__name__.split(".")[0] in ("torch", "functorch"):
        return None  # torch's own internals (hooks, nn.Module.__call__) are not nbcompile's to rebind
    for attr, value in list(vars(module).items()):
        if isinstance(value, types.FunctionType) and _holds(value, filename, lineno):
            return f"{module.__name__}{SEP}{attr}"
        if isinstance(value, type) and value.__module__ == module.__name__:
            for method, fn in list(vars(value).items()):
                if isinstance(fn, types.FunctionType) and _holds(fn, filename, lineno):
                    return f"{module.__name__}{SEP}{attr}.{method}"
    return None


def _holds(fn: Any, filename: str, lineno: int) -> bool:
    code = fn.__code__
    if code.co_filename != filename:
        return False
    lines = [line for _, _, line in code.co_lines() if line]
    return bool(lines) and min(code.co_firstlineno, *lines) <= lineno <= max(lines)


def short(name: str) -> str:
    """``GPT2Attention.forward`` for ``transformers....modeling_gpt2:GPT2Attention.forward``."""
    return name.partition(SEP)[2] or name


def export_target(name: str) -> tuple[str, str]:
    """(the import line, the dotted expression) that reach a library function in the user's code."""
    module_name, _, qual = name.partition(SEP)
    return f"import {module_name}", f"{module_name}.{qual}"
