"""The rewrites of library lines a session holds bound: each a rewritten copy of its library function, bound as a
layer of the function's slot (the installed file is never written), undone exactly when the session lets it go.

``Session.set_library_rewrites`` swaps the set bound (the fix search's proven rewrites, applied with its
configuration); the workload is told what is bound (``Workload.library_rewrites``, ``library_copies``: the base
every later trial binds, and part of the configuration's key).
"""

from __future__ import annotations

import contextlib
from typing import Any

from ..engine import library
from ..engine.workload import Workload
from ..model.report import Rewrite
from . import rewrites


class BoundRewrites:
    """name (``module:Class.method``) -> (its rewrites, the layer binding the rewritten copy)."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self._bound: dict[str, tuple[list[Rewrite], library.LibraryRewrite]] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._bound

    @property
    def rewrites(self) -> list[Rewrite]:
        """The rewrites bound now."""
        return [r for mine, _ in self._bound.values() for r in mine]

    def swap(self, wanted: list[Rewrite]) -> library.RewriteSwap:
        """Bind exactly ``wanted``; those bound before and not wanted are undone. Every copy is built before
        anything is bound: a ValueError (the installed library no longer reads as a rewrite expects) binds
        nothing, and a failure while binding puts back what was bound before. Returns what changed and its undo.
        Nothing compiles here."""
        names = dict.fromkeys(r.function for r in wanted)
        by_name = {name: [r for r in wanted if r.function == name] for name in names}
        previous = dict(self._bound)

        def same(a: list[Rewrite], b: list[Rewrite]) -> bool:  # the same rewrites, in any order
            return len(a) == len(b) and all(r in b for r in a)

        built = {name: rewrites.library_function(mine) for name, mine in by_name.items()
                 if name not in previous or not same(previous[name][0], mine)}
        gone = [name for name in previous if name not in by_name or name in built]
        if not built and not gone:
            return library.RewriteSwap(False, lambda: None)
        before = {name: (mine, handle.fn) for name, (mine, handle) in previous.items()}
        after = {**{n: v for n, v in before.items() if n not in gone},
                 **{n: (by_name[n], fn) for n, fn in built.items()}}
        try:
            self._put(after)
        except BaseException:
            self._put(before)
            raise
        return library.RewriteSwap(True, lambda: self._put(before))

    def _put(self, layers: dict[str, tuple[list[Rewrite], Any]]) -> None:
        """Bind ``layers`` (name -> (rewrites, a copy)) in place of what is bound now, each step apart: one that
        fails does not keep the others from being undone or bound."""
        problems: list[BaseException] = []
        for name in list(self._bound):
            if self._bound[name][1].fn is not layers.get(name, (None, None))[1]:
                try:
                    self._bound.pop(name)[1].undo()
                except BaseException as exc:  # noqa: BLE001  (the rest are undone all the same)
                    problems.append(exc)
        for name, (mine, fn) in layers.items():
            if name not in self._bound:
                try:
                    self._bound[name] = (mine, library.LibraryRewrite(name, fn))
                except BaseException as exc:  # noqa: BLE001
                    problems.append(exc)
        self._tell()
        if problems:
            raise problems[0]

    def undo_all(self) -> None:
        """Every layer undone, each apart (one that fails keeps no other bound)."""
        for _, handle in self._bound.values():
            with contextlib.suppress(Exception):
                handle.undo()
        self._bound.clear()
        self._tell()

    def _tell(self) -> None:
        self.workload.library_rewrites = self.rewrites
        self.workload.library_copies = {n: handle.fn for n, (_, handle) in self._bound.items()}
