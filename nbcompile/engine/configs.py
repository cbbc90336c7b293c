"""The fast loop's book of kept configurations: the compiled code (each entry's wrapper, a cache region of
its own) and the report of the configurations (toggles and options) a session compiled lately, so a toggle
back to one of them rebinds its code and compiles nothing. ``Workload`` owns one ``KeptConfigs`` and
delegates to it (``keep``, ``recall``, ``room_for``, ``kept_count``).

Only the book lives here: what a configuration is kept from (the workload's current wrappers), whether its
code is still valid, and the rebinding are the workload's.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..model.report import Report

#: How many configurations (toggles and options) a session keeps the compiled code of: a toggle back to one
#: of them rebinds it and compiles nothing. Past it the oldest is forgotten; its entries' compiled code stays
#: on their code objects (torch frees a code's cache regions only all at once) until, with as many such regions
#: as this many configurations of every entry, a new configuration drops all compiled code first (what every
#: toggle did before any was kept). So the compiled code held stays within about twice this many
#: configurations of every entry.
KEEP_CONFIGS = int(os.environ.get("NBCOMPILE_KEEP_CONFIGS", "4"))


@dataclass
class Kept:
    """One configuration's compiled code (its entries' wrappers, each a cache region of its own) and the
    report its compile made."""

    wrappers: dict[tuple[str, int, str], tuple[Any, Any]]
    report: Report
    #: The generation of the toggle copies its code was compiled on (``Workload.copies``).
    generation: int
    #: Where torch has no cache regions (``torch_compat.CONFIG_COPIES``): name -> (the cell's function, the copy
    #: of it this configuration compiled), bound again when it is recalled.
    functions: dict[str, tuple[Any, Any]] = field(default_factory=dict)


class KeptConfigs:
    """Configurations already compiled, oldest first, at most ``KEEP_CONFIGS`` of them, and a count of the
    compiled wrappers of those forgotten (orphans: their code stays on the code objects until a full drop)."""

    def __init__(self, *, orphans: bool = True) -> None:
        self._kept: OrderedDict[Any, Kept] = OrderedDict()
        self._orphans = 0
        #: Whether a forgotten configuration's code stays behind (on shared code objects, in cache regions);
        #: False where each configuration compiled copies of its own, freed with it.
        self._leaves_orphans = orphans

    def __contains__(self, key: Any) -> bool:
        return key in self._kept

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def orphans(self) -> int:
        """Compiled wrappers of configurations forgotten (``keep``), whose code stays until a full drop."""
        return self._orphans

    def get(self, key: Any) -> Kept | None:
        """The kept configuration ``key`` as it is (not made the most recent), or None."""
        return self._kept.get(key)

    def recall(self, key: Any, valid: Callable[[Kept], bool]) -> Kept | None:
        """The kept configuration ``key``, made the most recent, or None when it is not kept; one that is
        not ``valid`` (compiled on copies no longer valid) is forgotten."""
        kept = self._kept.get(key)
        if kept is None:
            return None
        if not valid(kept):
            del self._kept[key]
            return None
        self._kept.move_to_end(key)
        return kept

    def keep(self, key: Any, kept: Kept) -> None:
        """Keep ``kept`` as configuration ``key``; past ``KEEP_CONFIGS`` the oldest is forgotten, and the
        wrappers only it used are counted as orphans."""
        self._kept[key] = kept
        self._kept.move_to_end(key)
        while len(self._kept) > KEEP_CONFIGS:
            _, gone = self._kept.popitem(last=False)
            if not self._leaves_orphans:
                continue
            used = {id(w[1]) for other in self._kept.values() for w in other.wrappers.values()}
            self._orphans += sum(1 for w in gone.wrappers.values() if id(w[1]) not in used)

    def room_for_another(self, entries: int, *, replacing: bool = False) -> bool:
        """Whether one more configuration (``replacing`` one kept) can be kept with none forgotten, nor all
        compiled code dropped."""
        return (len(self._kept) - replacing < KEEP_CONFIGS and KEEP_CONFIGS >= 2
                and self._orphans < KEEP_CONFIGS * max(1, entries))

    def room_for(self, key: Any, entries: int) -> bool:
        """Whether a new configuration ``key`` may compile beside the code kept, for a workload of ``entries``
        entries (else: drop it all first)."""
        return key in self._kept or self._orphans < KEEP_CONFIGS * max(1, entries)

    def all(self) -> list[Kept]:
        """The kept configurations, oldest first."""
        return list(self._kept.values())

    def clear(self) -> None:
        """Every configuration forgotten, and no orphans: all compiled code was dropped."""
        self._kept.clear()
        self._orphans = 0


def identity_free_value(value: Any) -> bool:
    """Whether compiled code guards ``value`` by its contents only (a tensor, a container, a plain value)."""
    return (isinstance(value, (torch.Tensor, torch.UntypedStorage, torch.TypedStorage, list, tuple, dict, set,
                               frozenset, str, bytes, int, float, bool, type(None)))
            and not isinstance(value, torch.nn.Parameter))


def identity_free(copies: Any) -> bool:
    """Whether the copies hold nothing whose identity compiled code guards: only tensors, containers and
    plain values (a module, an optimizer or an object of the user's would be guarded by its id)."""
    return all(isinstance(c, (torch.Tensor, torch.UntypedStorage, torch.TypedStorage, list, tuple, dict, set,
                              frozenset, str, bytes, int, float, bool, type(None)))
               and not isinstance(c, torch.nn.Parameter) for c in copies.memo.values())
