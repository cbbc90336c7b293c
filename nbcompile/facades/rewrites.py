"""The cell's source rewrites as the fix search tries them and the user accepts them.

The analysis layer proposes rewrites of the lines where the session's breaks are (``analysis.rewrite``)
and builds the rewritten functions without running the cell; the engine's search tries each like a
toggle (its break count and check decide). Nothing here changes the user's cell or objects: a rewrite
reaches the cell only through ``Session.accept``, which puts the rewritten cell in the next input.
"""

from __future__ import annotations

import linecache
import types
from typing import Any

from ..analysis import rewrite as rewrite_ops
from ..engine.workload import Workload
from ..model.report import Report, Rewrite


class CellRewrites:
    """The rewrites of one session's cell for its current report (``Searcher(rewrites=...)``)."""

    def __init__(self, workload: Workload, report: Report) -> None:
        self.workload = workload
        #: The cell as compiled (IPython syntax transformed, line 1 the magic's line): break lines are its lines.
        self.source = "".join(linecache.getlines(workload.filename))
        lines = {b.lineno for b in report.breaks if b.filename == workload.filename}
        names = set(workload.tracked)  # top-level defs and Class.method, as Rewrite.function names them
        self.proposals: list[Rewrite] = [r for r in rewrite_ops.propose(self.source, lines) if r.function in names] \
            if self.source and lines else []

    def functions(self, rewrites: list[Rewrite]) -> dict[str, Any]:
        """name -> the cell's function with ``rewrites`` applied (ValueError when one cannot be built)."""
        out: dict[str, Any] = {}
        for name, fn in self.workload.tracked.items():
            mine = [r for r in rewrites if r.function == name]
            if not mine:
                continue
            target = getattr(fn, "__func__", fn)
            if not isinstance(target, types.FunctionType):
                raise ValueError(f"{name} is not a plain function of the cell")
            out[name] = rewrite_ops.rewritten_function(target, self.source, mine, self.workload.filename)
        missing = {r.function for r in rewrites} - set(out)
        if missing:
            raise ValueError(f"{', '.join(sorted(missing))}: not a function the session tracks")
        return out


    def elsewhere(self, filename: str, lineno: int) -> Rewrite | None:
        """The rewrite a break in a library file would need (information only: nbcompile never edits a
        library), or None."""
        source = "".join(linecache.getlines(filename))
        found = rewrite_ops.propose(source, {lineno}) if source else []
        return found[0] if found else None


def accepted_cell(cell: str, rewrites: list[Rewrite]) -> str:
    """The cell body (as the user wrote it, without the magic's line) with ``rewrites`` applied; a
    ValueError (the cell changed since) says which line no longer reads as the rewrite expects."""
    return rewrite_ops.apply("\n" + cell, rewrites)[1:]
