"""What ``--run`` and the cell's functions reach (``state.reach``), kept from one click to the next while the user's
code cannot have run (``KeptReach``, a base of ``Workload``)."""

from __future__ import annotations

import types
from typing import Any

from ..core import user_runs
from .state import Reached, reach
from .toggles import Binding


class KeptReach:
    """``_reach`` for a class holding ``namespace``, ``bindings`` and ``_reach_kept``."""

    @property
    def bindings(self) -> dict[str, Binding]:
        raise NotImplementedError

    namespace: dict[str, Any]
    _reach_kept: tuple[int, types.CodeType, list[Any], list[tuple[str, Any]], Reached] | None

    def _reach(self, code: types.CodeType) -> Reached:
        """``reach`` of ``code`` and the cell's functions, kept from one click to the next while the user's code
        cannot have run (``user_runs.epoch``) and the namespace holds the same values under the same names (its
        entries' bindings aside: those are nbcompile's, and the originals they stand for are compared instead).
        A click reads a 500-function cell's reach in 14 ms; kept, it reads nothing."""
        originals = [b.original for b in self.bindings.values()]
        epoch = user_runs.epoch()
        if epoch is None:
            return reach(self.namespace, code, originals)
        values = user_runs.namespace_values(self.namespace, self.bindings)
        kept = self._reach_kept
        if kept is not None and kept[0] == epoch and kept[1] is code and user_runs.same_values(kept[2], originals) \
                and user_runs.same_values(kept[3], values):
            return kept[4]
        reached = reach(self.namespace, code, originals)
        user_runs.keep(self)
        self._reach_kept = (epoch, code, originals, values, reached)
        return reached

    def forget_user_reads(self) -> None:
        """The user's code may run now (a cell starts or ends): what was read off their objects is let go."""
        self._reach_kept = None
