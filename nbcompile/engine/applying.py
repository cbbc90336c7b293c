"""Applying the fix search's choice to a session (``apply_best``): one restart, the library functions the
choice sets tracked first and untracked again if applying fails."""

from __future__ import annotations

from typing import Any, Protocol

from ..core.names import is_torch_name
from ..core.options import CellOptions
from ..model.fixsearch import FixSearch
from ..model.report import Report, Rewrite
from . import library


class ConfigTarget(Protocol):
    """What the chosen configuration is applied to (a ``Session``: the facade applies it, once)."""

    @property
    def functions(self) -> list[str]: ...

    @property
    def options(self) -> CellOptions: ...

    def track(self, name: str) -> None: ...

    def untrack(self, name: str) -> None: ...

    def apply_config(self, toggles: dict[str, str], *, prove_by: float | None = None, said: str = "",
                     everything: bool = False, **options: Any) -> Report: ...

    def set_library_rewrites(self, rewrites: list[Rewrite]) -> library.RewriteSwap: ...

    @property
    def library_rewrites(self) -> list[Rewrite]: ...


def apply_best(target: ConfigTarget, result: FixSearch, *, prove_by: float | None = None) -> None:
    """Put the chosen configuration on ``target`` (one restart); the search's record says so. The
    library functions the choice sets are tracked first; if applying fails they are untracked again.
    ``prove_by``: the ``time.perf_counter()`` time no proof of the new report's fixes starts after (the
    search's end: the search kept time for the restart, the proofs get what is left)."""
    best = result.best
    if best is None or best is result.start:
        return
    if not best.proven:  # stopped or interrupted before its proof: nothing unproven is applied
        result.applied_note = (f"not applied: {best.describe()} was not proven on the session's backend (the search "
                               "stopped first)")
        return
    if best.cell_rewrites:  # proven with rewrites of the cell, which only the user applies (Session.accept)
        result.applied_note = (f"not applied: {best.describe()} needs its source rewrites; accept them "
                               "(Session.accept), and run the cell they make")
        return
    # the search's trials ran on the rewrites the session binds already (their base): the choice adds its own
    rewritten = [*target.library_rewrites, *(r for r in best.rewrites if r.in_library
                                             and r not in target.library_rewrites)]
    clash = sorted({r.function for r in rewritten
                    if best.toggles.get(r.function, "compile") != "compile" or r.function in target.functions})
    if clash:
        result.applied_note = (f"not applied: {best.describe()} rewrites {clash[0]}, which it or the session also "
                               "toggles; a session binds a library function's rewrite or its toggle, not both")
        return
    try:  # the library rewrites first (a layer of the function's slot each), undone below if applying fails
        swap = target.set_library_rewrites(rewritten)
    except ValueError as exc:
        result.applied_note = f"not applied: {exc}"
        return
    added = [n for n, m in best.toggles.items() if m != "compile" and n not in target.functions
             and library.is_library_name(n)]
    options = {k: v for k, v in best.options.items() if not k.startswith("_")}
    if best.options.get("_config"):
        options["dynamo_config"] = {**target.options.dynamo_config, **best.options["_config"]}
    try:
        for name in added:
            target.track(name)
        target.apply_config({n: m for n, m in best.toggles.items() if n in target.functions or is_torch_name(n)},
                            prove_by=prove_by, said="the fix search applied its best configuration",
                            everything=swap.changed, **options)
        result.applied = True
    finally:
        if not result.applied:
            for name in added:
                if name in target.functions:
                    target.untrack(name)
            swap.undo()
