"""What ``--run`` and the cell's functions reach (``state.reach``), kept from one click to the next while the user's
code cannot have run (``KeptReach``, a base of ``Workload``); what the namespace holds (``state_marks``) and the
slots the session rebound (``originals``), read off the same names."""

from __future__ import annotations

import types
from typing import Any

import torch

from ..core import torch_compat, user_runs
from .state import Reached, Slot, reach
from .toggles import Binding


class KeptReach:
    """``_reach`` for a class holding ``namespace``, ``bindings`` and ``_reach_kept``."""

    @property
    def bindings(self) -> dict[str, Binding]:
        raise NotImplementedError

    namespace: dict[str, Any]
    #: ``_slot``: name -> (its binding, the binding's slot).
    _slots: dict[str, tuple[Binding, Slot]]
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

    def state_marks(self) -> tuple[Any, ...]:
        """What the notebook's names hold, cheaply: each name's object, and the version counters of its tensors
        and of its modules' parameters and buffers (a cell that rebinds an input or trains a model changes
        them). A search again whose marks differ from the last one's starts anew: that search's trials ran on
        other state."""
        marks: list[Any] = []
        for name, value in torch_compat.namespace_items(self.namespace):
            if name.startswith("_"):
                continue
            version: Any = None
            if isinstance(value, torch.Tensor):
                version = torch_compat.tensor_version(value)
            elif isinstance(value, torch.nn.Module):
                version = sum(torch_compat.tensor_version(t) for t in (*value.parameters(), *value.buffers()))
            marks.append((name, id(value), version))
        return tuple(marks)

    def originals(self) -> dict[Slot, Any]:
        """Names this session rebound (their slots) -> their originals (for the eager run)."""
        return {self._slot(b): b.original for b in self.bindings.values() if b.expected is not b.original and b.owned()}

    def _slot(self, binding: Binding) -> Slot:
        """``binding``'s slot, made once (each click asks for every entry's, twice)."""
        known = self._slots.get(binding.name)
        if known is None or known[0] is not binding:
            known = self._slots[binding.name] = (binding, Slot(binding.owner, binding.attr, binding.name))
        return known[1]
