"""A namespace read while the garbage collector runs a weak-reference callback that edits it (what Dynamo's
``__builtins_dict___N`` clean-up does to compiled code's globals): ``list(d.items())`` fails with
"dictionary changed size during iteration" (a trial failed with it now and then, raised from nbcompile's
audit); ``torch_compat.namespace_items`` does not."""

from __future__ import annotations

import gc
import weakref

from nbcompile.core.torch_compat import namespace_items


def _doomed_entries(space: dict, left: list[int]) -> None:
    """An entry of ``space`` that the next collection deletes, and puts another in its place (``left[0]``
    times): a collection during a copy of the items then always finds one to delete."""
    if left[0] <= 0:
        return
    left[0] -= 1
    name = f"__builtins_dict___{left[0]}"

    class Node:
        pass

    node = Node()
    node.me = node  # a cycle: only the collector frees it, whenever an allocation starts a collection
    space[name] = {}

    def gone(_ref: object) -> None:
        space.pop(name, None)
        _doomed_entries(space, left)

    keep.append(weakref.ref(node, gone))


keep: list[weakref.ref] = []


def test_a_collection_that_edits_the_namespace_mid_copy_is_held_off():
    threshold = gc.get_threshold()
    gc.collect()
    try:
        # the copy's item tuples come from the allocator, not the free list, so each may start a collection
        drained = [(i, -i) for i in range(5000)]
        plain = {f"k{i}": i for i in range(200)}
        _doomed_entries(plain, [100])
        gc.set_threshold(1)  # every allocation collects: the race, made certain
        try:
            list(plain.items())
            raced = ""
        except RuntimeError as exc:
            raced = str(exc)
        assert "changed" in raced and "during iteration" in raced  # the hazard is real on this Python
        gc.set_threshold(*threshold)
        drained += [(i, -i) for i in range(5000)]
        space = {f"k{i}": i for i in range(200)}
        _doomed_entries(space, [100])
        gc.set_threshold(1)
        assert len(namespace_items(space)) == 201  # a whole copy, the doomed entry in it
    finally:
        gc.set_threshold(*threshold)
        keep.clear()
    assert gc.isenabled() and len(drained) == 10000
