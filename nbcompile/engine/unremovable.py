"""Why the breaks the chosen configuration still has were left (``FixSearch.unremovable``): each with
what stood in the way (a holder not searched, a mode not tried for want of budget, a break torch makes on
purpose, one the search moved to a disabled function's call, one only the session's first run had)."""

from __future__ import annotations

import os
import re

import torch

from ..core.text import cut, function_label
from ..model.fixsearch import FixSearch, Trial
from . import library
from .candidates import MAX_HOLDERS, SearchSpace, cell_holder

#: Where torch's own code lives: a break there that torch makes on purpose is not a fault of the user's code.
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def by_design(gb_type: str, filename: str, explanation: str = "") -> str | None:
    """Why a break is one torch makes on purpose, which nothing the search can do removes (and nothing should):
    ``.backward()``, a ``torch._dynamo.graph_break()`` in torch's own code (the optimizers' step), a torch
    function Dynamo's developers marked not to trace (``Optimizer.zero_grad``); None for any other break."""
    if gb_type == "Unsupported Tensor.backward() call":
        return ("torch breaks the graph at .backward() by design: the forward and the backward each run as a "
                "compiled graph of their own (AOTAutograd), so no toggle, config or rewrite removes it")
    if filename.startswith(_TORCH_DIR) and "graph_break()" in gb_type:
        where = filename[len(_TORCH_DIR):]
        return (f"torch's own code breaks the graph here on purpose (torch._dynamo.graph_break() in torch/{where}"
                + (": the optimizer's step compiles as a graph of its own, pytorch#104053" if "optim" in where else "")
                + "), so it is left as torch wants it")
    if "marked as skipped" in gb_type and "developers have intentionally marked" in explanation:
        named = re.search(r"function `([^`]+)`", explanation)
        return (f"torch marks {named[1] if named else 'the function it calls'} not to be traced, on purpose: it runs "
                "between the graphs by design, so it is left as torch wants it")
    return None


def _all_modes_tried(result: FixSearch, space: SearchSpace, name: str) -> bool:
    """Every mode of ``name`` ran in some trial (a trial not run, its state refused, does not count)."""
    modes = space.function_modes().get(name, ())
    tried = {t.toggles.get(name, "compile") for t in result.trials
             if not t.kind.untried}  # a mode the lint ruled out counts as tried
    return bool(modes) and all(m in tried for m in modes)


def _why_short(result: FixSearch) -> str:
    return "stopped" if result.stopped else f"the {result.budget_s:g} s budget ran out"


def explain_left(result: FixSearch, space: SearchSpace) -> None:
    """Each break the best configuration still has, with why no toggle removed it."""
    best = result.best or result.start
    if best is None:
        return
    if best.breaks == 0:
        _first_run_only(result, space, best)
        return
    tracked = set(space.functions)
    seen: set[tuple[str, int]] = set()
    left = {(f, n) for f, n, _ in best.sites}
    for brk in space.report.breaks:
        if (brk.filename, brk.lineno) in seen or len(seen) >= 20 or (left and (brk.filename, brk.lineno)
                                                                     not in left):
            continue
        seen.add((brk.filename, brk.lineno))
        place = (f"cell line {brk.cell_line}" if brk.cell_line is not None
                 else f"{brk.filename.rsplit('/', 1)[-1]} line {brk.lineno}")
        where = f"{function_label(brk.function)} ({place})"
        in_cell = brk.filename == space.workload.filename
        holder = library.holder_of(brk.filename, brk.lineno) if not in_cell else None
        own, enclosing = cell_holder(space.workload.tracked, brk.filename, brk.lineno) if in_cell else (None, None)
        searched = space.function_modes()
        design = by_design(brk.gb_type, brk.filename, brk.explanation)
        if design is not None:
            why = design
        elif holder is not None and holder not in tracked:
            why = (f"its holder {library.short(holder)} was not searched (only the {MAX_HOLDERS} library "
                   "functions with the most breaks are)")
        elif holder is None and not in_cell:
            why = "no Python function nbcompile can rebind holds it (a property, a lambda, a C function)"
        elif holder is not None and not _all_modes_tried(result, space, holder):
            why = f"not every mode of its holder {library.short(holder)} was tried: {_why_short(result)}"
        elif in_cell and own is None and enclosing is None:
            why = "no function of the cell holds it, so no toggle reaches it"
        elif in_cell and own is None and enclosing not in searched:
            why = (f"it is in a function made by {enclosing} at run time and held by no name of the cell, so no "
                   f"toggle reaches it (bind it to a name of the cell to have it searched)")
        elif in_cell and own is None and enclosing is not None and not _all_modes_tried(result, space, enclosing):
            why = (f"it is in a function made by {enclosing} at run time and held by no name of the cell, and "
                   f"not every mode of {enclosing} was tried: {_why_short(result)}")
        elif in_cell and own is None:
            why = (f"it is in a function made by {enclosing} at run time and held by no name of the cell, and "
                   f"no mode of {enclosing} removed it with the check ok (a toggle of {enclosing} reaches it only "
                   "where it calls it itself; bind it to a name of the cell to have it searched)")
        elif in_cell and own not in searched:
            why = (f"it is in {own}, an entry, which the search compiles as it is and does not toggle (move "
                   "the line into a helper of the cell to have that helper searched)")
        elif in_cell and own is not None and not _all_modes_tried(result, space, own):
            why = f"not every mode of {own}, which holds it, was tried: {_why_short(result)}"
        elif result.stopped or result.budget_bound:
            why = f"the search did not try every configuration: {_why_short(result)}"
        else:
            who = f"{own}, which holds it" if own is not None else f"its holder {library.short(holder or '')}"
            why = (f"no mode of {who} removed it with the check ok (disable moves the break to the call; "
                   "allow_in_graph, nonstrict_trace or custom_op failed to compile, failed the check or was "
                   "ruled out)")
        if not in_cell and space.rewrites is not None:
            needed = space.rewrites.elsewhere(brk.filename, brk.lineno)
            tried = needed is not None and any(r.in_library and r.file == brk.filename
                                               and r.cell_line == needed.cell_line for r in space.proposals())
            if tried and needed is not None:
                why += f"; the rewrite of its line ({needed.rule}) was tried and did not remove it with the check ok"
            elif needed is not None:
                why += (f"; the library's code would need a rewrite ({needed.rule}): "
                        f"{cut(' '.join(needed.before.split()), 80)} -> {cut(' '.join(needed.after.split()), 100)}")
        withheld = space.withheld.get((brk.filename, brk.lineno))
        if withheld:  # torch could run the call after the graph, but it would show values changed since
            why += f"; reorderable_logging_functions was not tried for it: {withheld}"
        result.unremovable.append(f"{where}: {cut(brk.reason, 100)}: {why}")
    _moved(result, space, best, seen)


def _first_run_only(result: FixSearch, space: SearchSpace, best: Trial) -> None:
    """Breaks of the session's run that no trial on copies has: one-time work of the first call (hooks a
    library installs, a cache it fills, a warning it logs once), which the copies, made after it, do not
    repeat; in the report, but not a break later calls meet."""
    start = result.start
    if start is None or not start.tried or start.breaks != 0:
        return
    seen: set[tuple[str, int]] = set()
    for brk in space.report.breaks:
        if (brk.filename, brk.lineno) in seen or len(seen) >= 20:
            continue
        seen.add((brk.filename, brk.lineno))
        place = (f"cell line {brk.cell_line}" if brk.cell_line is not None
                 else f"{brk.filename.rsplit('/', 1)[-1]} line {brk.lineno}")
        result.unremovable.append(
            f"{function_label(brk.function)} ({place}): {cut(brk.reason, 100)}: the session's first run only: a run "
            "on copies of the state it left (what every later call meets) has no break here, so there was "
            "nothing to search (one-time work of the first call, such as hooks a library installs, a cache it "
            "fills or a warning it logs once)")


def _moved(result: FixSearch, space: SearchSpace, best: Trial, seen: set[tuple[str, int]]) -> None:
    """The breaks the best configuration has where the start had none: the call of a function it runs
    eagerly (``disable``), where the breaks inside that function moved to; with the rewrite the
    function's own breaks would need to compile (information: the library's file is never edited)."""
    disabled = [n for n, m in best.toggles.items() if m == "disable"]
    for filename, lineno, gb_type in best.sites:
        if (filename, lineno) in seen or len(seen) >= 20:
            continue
        seen.add((filename, lineno))
        place = (f"cell line {lineno}" if filename == space.workload.filename
                 else f"{filename.rsplit('/', 1)[-1]} line {lineno}")
        design = by_design(gb_type, filename)
        deferred = [r for r in best.rewrites if r.rule == "defer" and filename == space.workload.filename
                    and r.cell_line <= lineno < r.cell_line + len(r.after.splitlines())]
        if design is not None:
            why = design
        elif deferred:
            why = (f"the call the defer rewrite of cell line {deferred[0].cell_line} moves after the function's "
                   "work: the break stays (torch reorders print, warnings.warn and logging's module functions, "
                   "not a logger's methods), at the end, where it splits no graph")
        elif disabled:
            names = ", ".join(library.short(n) if ":" in n else n for n in disabled)
            why = (f"the call of {names}, which this configuration runs eagerly (disable): the breaks inside "
                   "moved here, one per call, and the rest of the caller compiles")
            needed = _needed_inside(space, disabled)
            if needed:
                why += f"; to compile it instead, its code would need {needed}"
        else:
            why = "a break this configuration has where the session's run had none (it still has the fewest)"
        result.unremovable.append(f"{place} ({gb_type}): {why}")


def _needed_inside(space: SearchSpace, disabled: list[str]) -> str:
    """The rewrite the first break inside the disabled functions would need, as text, or ""."""
    if space.rewrites is None:
        return ""
    for brk in space.report.breaks:
        holder = library.holder_of(brk.filename, brk.lineno) if brk.filename != space.workload.filename else \
            cell_holder(space.workload.tracked, brk.filename, brk.lineno)[0]
        if holder in disabled:
            needed = space.rewrites.elsewhere(brk.filename, brk.lineno)
            if needed is not None:
                before, after = " ".join(needed.before.split())[:80], " ".join(needed.after.split())[:100]
                return f"a rewrite ({needed.rule}) of line {brk.lineno}: {before} -> {after}"
    return ""
