"""nbcompile: see what torch.compile does to a notebook's functions, live.

Public names: ``inspect``, ``export``, ``last``, ``sessions``, ``Report`` and its parts,
and the IPython extension hooks (``%load_ext nbcompile``).

The package is a house in layers (subpackages), imports pointing down only: this module and
``magics``, ``runner`` and ``__main__`` are the front doors; ``facades`` (Session, inspect,
Traces) -> ``views`` (panel, widgets) -> ``engine`` (toggles, trials, timing, the search) and
``analysis`` (lint, suggestions) -> ``capture`` (the hub, trace records, guards) -> ``model`` (the
Report, rendering) -> ``core`` (errors, names, options, ``torch_compat``). ``tests/test_layers.py``
and ``lint-imports`` check the rule.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core.errors import NbcompileError, RecompileRefused
    from .engine.snippet import export
    from .engine.timing import BenchConfig, BenchResult, BenchRow, bench
    from .engine.toggles import available_function_modes
    from .facades.api import inspect, torch_support
    from .facades.rewrites import rewrite_library
    from .facades.session import Session, last, sessions
    from .facades.traces import Traces, follow, launch, load, watch
    from .magics import load_ipython_extension, unload_ipython_extension
    from .model.alarms import Alarm
    from .model.fixsearch import FixSearch, Trial
    from .model.render import MIME_TYPE
    from .model.report import (
        SCHEMA_PATH,
        Check,
        CompileError,
        Fallback,
        Fix,
        Frame,
        Graph,
        GraphBreak,
        GuardChange,
        Kernel,
        LintWarning,
        Recompile,
        Report,
    )

__version__ = "0.1.0"

__all__ = [
    "MIME_TYPE",
    "SCHEMA_PATH",
    "available_function_modes",
    "BenchConfig",
    "BenchResult",
    "BenchRow",
    "bench",
    "Check",
    "CompileError",
    "Fallback",
    "Fix",
    "FixSearch",
    "Frame",
    "Graph",
    "GraphBreak",
    "GuardChange",
    "Kernel",
    "LintWarning",
    "NbcompileError",
    "RecompileRefused",
    "Recompile",
    "Report",
    "Session",
    "Trial",
    "export",
    "follow",
    "launch",
    "load",
    "watch",
    "Alarm",
    "Traces",
    "inspect",
    "last",
    "torch_support",
    "rewrite_library",
    "load_ipython_extension",
    "sessions",
    "unload_ipython_extension",
]

#: Each public name and the module it lives in: loaded when first used (``__getattr__``), so
#: ``import nbcompile`` loads no torch, and ``nbcompile.load`` (a trace log) never does.
_EXPORTS = {
    "NbcompileError": ".core.errors",
    "RecompileRefused": ".core.errors",
    "export": ".engine.snippet",
    "BenchConfig": ".engine.timing",
    "BenchResult": ".engine.timing",
    "BenchRow": ".engine.timing",
    "bench": ".engine.timing",
    "available_function_modes": ".engine.toggles",
    "inspect": ".facades.api",
    "torch_support": ".facades.api",
    "rewrite_library": ".facades.rewrites",
    "Session": ".facades.session",
    "last": ".facades.session",
    "sessions": ".facades.session",
    "Traces": ".facades.traces",
    "follow": ".facades.traces",
    "load": ".facades.traces",
    "launch": ".facades.traces",
    "watch": ".facades.traces",
    "Alarm": ".model.alarms",
    "load_ipython_extension": ".magics",
    "unload_ipython_extension": ".magics",
    "FixSearch": ".model.fixsearch",
    "Trial": ".model.fixsearch",
    "MIME_TYPE": ".model.render",
    "SCHEMA_PATH": ".model.report",
    "Check": ".model.report",
    "CompileError": ".model.report",
    "Fallback": ".model.report",
    "Fix": ".model.report",
    "Frame": ".model.report",
    "Graph": ".model.report",
    "GraphBreak": ".model.report",
    "GuardChange": ".model.report",
    "Kernel": ".model.report",
    "LintWarning": ".model.report",
    "Recompile": ".model.report",
    "Report": ".model.report",
}


#: Submodules ``nbcompile.<name>`` reaches without an import of its own, as when the package loaded them all.
_SUBMODULES = frozenset({"analysis", "capture", "core", "engine", "facades", "magics", "model", "runner", "views"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nbcompile' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next use is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
