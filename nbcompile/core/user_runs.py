"""When the user's code may have run: the one sound moment to forget what was read off the user's objects.

What a click reads off the namespace (what ``--run`` and the cell's functions reach: globals, closures, class
and module attributes) can change only when the user's code runs. In a shell whose cells nbcompile watches
(``%load_ext nbcompile`` registers ``pre_execute``/``post_execute`` hooks, which IPython fires for every
execution, silent ones too: a frontend's variable inspector), each counts once as it starts and once as it
ends, and while one runs (nested ones counted) nothing read is kept (its code may change the namespace between
two clicks it makes itself). ``epoch()`` is the count, or None where nothing may be kept: no shell watched (a
script driving a session: user code runs unseen), or a cell running now.

A callback of the user's own widget runs user code without a cell: a keeper (``Workload``) also compares the
namespace's names and values (a global rebound by such a callback is seen); a mutation of a closure or a class
attribute by one is not seen until the next cell (said in docs/usage.md).
"""

from __future__ import annotations

import weakref
from collections.abc import Collection
from typing import Any, Protocol

from . import torch_compat


class Keeper(Protocol):
    def forget_user_reads(self) -> None: ...


_count = 0
_watched = 0
#: Executions running now (a cell may run another: ``get_ipython().run_cell(...)``, ``%rerun``).
_running = 0
#: What keeps reads of the user's objects: told to forget them at each moment (the references they hold to the
#: user's objects are let go as a cell starts: a ``del`` in it frees its object).
_keepers: weakref.WeakSet[Keeper] = weakref.WeakSet()


def keep(keeper: Keeper) -> None:
    _keepers.add(keeper)


def _moment() -> None:
    global _count
    _count += 1
    for keeper in list(_keepers):
        keeper.forget_user_reads()


def watch(on: bool) -> None:
    """A shell's hooks start (``on``) or stop counting the user's cells (one count per shell watching)."""
    global _watched
    _watched = max(0, _watched + (1 if on else -1))
    _moment()


def cell_started(*_args: object) -> None:
    global _running
    _running += 1
    _moment()


def cell_ended(*_args: object) -> None:
    global _running
    _running = max(0, _running - 1)
    _moment()


def namespace_values(namespace: dict[str, Any], skip: Collection[str]) -> list[tuple[str, Any]]:
    """The namespace's names and values, the names ``skip`` aside (those nbcompile binds): what a keeper compares
    (``same_values``) to see a global rebound between two clicks."""
    # copied whole first, with the collector paused (``torch_compat.namespace_items``): a collection that runs
    # mid-copy may delete a global Dynamo put there ("dictionary changed size during iteration")
    return [(name, value) for name, value in torch_compat.namespace_items(namespace) if name not in skip]


def same_values(kept: list[Any], now: list[Any]) -> bool:
    """Whether two lists hold the same objects (``namespace_values``'s pairs: the same names, the same values)."""
    return len(kept) == len(now) and all(
        (a is b) or (type(a) is tuple and type(b) is tuple and a[0] == b[0] and a[1] is b[1])
        for a, b in zip(kept, now, strict=True))


def epoch() -> int | None:
    """The number of the user-code moments so far, or None: nothing read off the user's objects may be kept
    (no watched shell, or a cell running now)."""
    if not _watched or _running:
        return None
    return _count


class KeptRead:
    """One value read off the user's objects (a snippet that reads how the notebook imported its names), kept for
    a key while the user's code cannot have run (``epoch``) and the namespace holds the same values (the names
    ``skip`` aside: those nbcompile binds). Outside a watched shell nothing is kept."""

    def __init__(self) -> None:
        self._kept: tuple[int, Any, list[tuple[str, Any]], Any] | None = None

    def get(self, key: Any, namespace: dict[str, Any], skip: Collection[str]) -> tuple[bool, Any]:
        """(True, the value kept for ``key``) or (False, None)."""
        now, kept = epoch(), self._kept
        if now is None or kept is None or kept[0] != now or kept[1] != key:
            return False, None
        if not same_values(kept[2], namespace_values(namespace, skip)):
            return False, None
        return True, kept[3]

    def keep(self, key: Any, namespace: dict[str, Any], skip: Collection[str], value: Any) -> None:
        now = epoch()
        if now is None:
            return
        keep(self)
        self._kept = (now, key, namespace_values(namespace, skip), value)

    def forget_user_reads(self) -> None:
        self._kept = None
