"""nbcompile: see what torch.compile does to a notebook's functions, live.

Public names: ``inspect``, ``export``, ``last``, ``sessions``, ``Report`` and its parts,
and the IPython extension hooks (``%load_ext nbcompile``).
"""

from __future__ import annotations

from .api import inspect
from .magics import load_ipython_extension, unload_ipython_extension
from .options import NbcompileError
from .report import (
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
from .search import FixSearch, Trial
from .session import Session, last, sessions
from .snippet import export
from .timing import BenchConfig, BenchResult, BenchRow, bench
from .traces import Traces, follow, load

__version__ = "0.1.0"

__all__ = [
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
    "Recompile",
    "Report",
    "Session",
    "Trial",
    "export",
    "follow",
    "load",
    "Traces",
    "inspect",
    "last",
    "load_ipython_extension",
    "sessions",
    "unload_ipython_extension",
]
