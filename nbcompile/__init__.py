"""nbcompile: see what torch.compile does to a notebook's functions, live.

Public names: ``inspect``, ``last``, ``sessions``, ``Report`` and its parts,
and the IPython extension hooks (``%load_ext nbcompile``).
"""

from __future__ import annotations

from .api import inspect
from .magics import load_ipython_extension, unload_ipython_extension
from .options import NbcompileError
from .report import Check, CompileError, Frame, Graph, GraphBreak, Kernel, Recompile, Report
from .session import Session, last, sessions

__version__ = "0.1.0"

__all__ = [
    "Check",
    "CompileError",
    "Frame",
    "Graph",
    "GraphBreak",
    "Kernel",
    "NbcompileError",
    "Recompile",
    "Report",
    "Session",
    "inspect",
    "last",
    "load_ipython_extension",
    "sessions",
    "unload_ipython_extension",
]
