"""What an entry that is not a function of the cell stands for: an ``nn.Module`` instance (``net``) is its
class's ``forward``; its own counts are that forward's, never the whole session's (issue 22, point 10)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, TypeVar

from ..core.lazy import lazy_module
from ..model.render import is_cell_file
from ..model.report import PartCounts, Report
from .protocols import PanelSession

if TYPE_CHECKING:
    from ..core import torch_compat
else:  # loaded at its first use: `%load_ext nbcompile` loads no Dynamo
    torch_compat = lazy_module("nbcompile.core.torch_compat", globals(), "torch_compat")

T = TypeVar("T")


def module_class(source: str, name: str) -> str | None:
    """The class a cell's top-level ``name = Class(...)`` makes (``net = Net()`` -> ``Net``, ``nn.Linear(4, 1)``
    -> ``Linear``), from the source alone; None when the cell does not say."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    found = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and any(
                isinstance(target, ast.Name) and target.id == name for target in node.targets):
            func = node.value.func
            found = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return found


def entry_part(session: PanelSession, name: str) -> Report:
    """The part of the session's report that is ``name``'s own: a tracked function's (``function_report``);
    an ``nn.Module`` entry's, its class's ``forward`` (a call of the module runs it, with what it inlines and
    its resumed parts); a module of a class from elsewhere (``nn.Linear``), the ``forward`` frames outside the
    cell; a function from elsewhere, its frames by name."""
    return _entry(session, name, session.function_report, session.report.for_function)


def entry_counts(session: PanelSession, name: str, functions: Collection[str] | None = None,
                 entries: Collection[str] | None = None) -> PartCounts:
    """``entry_part``'s frames, breaks, causes and recompiles, counted without making the part (a row's counts;
    ``functions`` and ``entries``: the session's, as sets, when every row asks)."""
    return _entry(session, name, session.function_counts, session.report.part_counts, functions, entries)


def _entry(session: PanelSession, name: str, of_function: Callable[[str], T], of_report: Callable[..., T],
           functions: Collection[str] | None = None, entries: Collection[str] | None = None) -> T:
    functions = session.functions if functions is None else functions
    if name in functions or name not in (session.entries if entries is None else entries):
        return of_function(name)
    report = session.report
    if "." in name:
        return of_report(name)
    cls = module_class(session.source, name)
    if cls is not None and f"{cls}.forward" in functions:
        return of_function(f"{cls}.forward")
    # a module of an installed class: torch.compile of it compiles torch's wrapper around its call, and its
    # forward's frames when a break splits it (from their first line on; the cell's own classes aside)
    spans = [(f.filename, f.firstlineno, 10**9) for f in report.frames
             if f.function == "forward" and f.filename and not is_cell_file(f.filename)]
    return of_report("forward", [*spans, torch_compat.WRAPPER_FRAME_SPAN])
