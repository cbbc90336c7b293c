"""What a change can alter (``engine/entry_reach.py``): the fast loop recompiles the entries that reach a changed
function and keeps the others' code, so a wrong "does not reach" would show a stale report. Read on real
functions, modules, hooks and containers; every way of reaching is answered yes, and what cannot be read
through answers None (every entry)."""

from __future__ import annotations

import torch

from nbcompile.engine.entry_reach import EntryReach

CELL = '''
import torch
def helper(x):
    return x.sin()
def other(x):
    return x.cos()
def via_list(x):
    return TABLE[0](x)
TABLE = [helper]
class Plain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
    def forward(self, x):
        return self.lin(x)
class Calls(torch.nn.Module):
    def forward(self, x):
        return helper(x)
class Holder:
    def __call__(self, x):
        return x
def lone(x):
    return x + 1
def calls_object(x):
    return OBJ(x)
OBJ = Holder()
'''


def _space() -> dict:
    space: dict = {"__name__": "__main__"}  # as a notebook's namespace: its classes' module is __main__
    exec(compile(CELL, "<entry-reach-cell>", "exec"), space)  # noqa: S102  a cell's own definitions
    return space


def test_functions_containers_and_objects():
    space = _space()
    reach = EntryReach(space, {n: space[n] for n in ("helper", "other", "via_list", "lone", "calls_object")})
    entries = {n: space[n] for n in ("via_list", "lone", "calls_object", "other")}
    # via_list reaches helper through a list; an object of a class the user wrote may call anything
    assert reach.affected({"helper"}, entries) == {"via_list", "calls_object"}
    assert reach.affected({"other"}, entries) == {"other", "calls_object"}
    assert reach.affected({"torch.sin"}, entries) is None  # a torch callable: every entry
    assert reach.reached([space["via_list"]], ["helper", "other"]) == {"helper"}
    assert reach.reached([space["lone"]], ["helper", "other"]) == set()
    assert reach.reached([object()], ["helper", "other"]) == {"helper", "other"}  # cannot be read: all


def test_modules_through_their_methods_submodules_attributes_and_hooks():
    space = _space()
    reach = EntryReach(space, {"helper": space["helper"]})
    plain, calls = space["Plain"](), space["Calls"]()
    assert reach.affected({"helper"}, {"plain": plain, "calls": calls}) == {"calls"}
    nested = torch.nn.Sequential(space["Plain"](), space["Calls"]())  # a library container of the user's modules
    assert reach.affected({"helper"}, {"nested": nested}) == {"nested"}
    kept = space["Plain"]()
    kept.act = space["helper"]  # a function kept on the module
    assert reach.affected({"helper"}, {"kept": kept}) == {"kept"}
    hooked = space["Plain"]()
    hooked.lin.register_forward_hook(lambda _m, _i, out, f=space["helper"]: f(out))  # a hook holding it
    assert reach.affected({"helper"}, {"hooked": hooked}) == {"hooked"}
    made = _closure_over(space["helper"])  # an entry made by a factory: helper is in its closure, not named
    assert reach.affected({"helper"}, {"made": made}) == {"made"}
    assert reach.reached([made], ["helper", "other"]) == {"helper"}
    assert reach.affected({"helper"}, {"plain": space["Plain"]()}) == set()


def _closure_over(fn):
    def step(x):
        return fn(x) * 2
    return step


def test_an_entrys_reach_read_once_answers_as_reading_it_for_each_change():
    """``names_reached`` (read once, kept across clicks) says yes for a change exactly when ``_function_reaches``
    does, for every function of the cell and every change of one or two of its names."""
    import itertools

    space = _space()
    space["made"] = _closure_over(space["helper"])
    space["alias"] = space["helper"]
    space["by_default"] = eval("lambda x, f=other: f(x)", space)  # noqa: S307  a default holding a function
    names = ("helper", "other", "via_list", "lone", "calls_object", "made", "by_default", "alias")
    reach = EntryReach(space, {n: space[n] for n in names})
    changes = [{n} for n in names] + [set(p) for p in itertools.combinations(names, 2)] + [{"untracked"}]
    for fn in names:
        said = reach.names_reached(space[fn])
        for changed in changes:
            targets = {n: reach.tracked.get(n) for n in changed}
            expected = reach._function_reaches(space[fn], targets, set())
            assert (said is None or not said.isdisjoint(changed)) == expected, (fn, changed)


def test_kept_reach_is_let_go_when_a_cell_runs_and_when_a_global_is_rebound():
    """Across clicks the entries' reach is kept; a cell starting (the user's code may run) or a global rebound
    between two clicks (a widget's callback) makes it read again, so a new way of reaching is seen."""
    from nbcompile.core import user_runs

    space = _space()
    space["indirect"] = eval("lambda x: LATER(x)", space)  # noqa: S307  calls what LATER names when it runs
    space["LATER"] = space["other"]
    reach = EntryReach(space, {n: space[n] for n in ("helper", "other", "indirect")})
    entries = {"indirect": space["indirect"]}
    user_runs.watch(True)
    try:
        assert reach.affected({"helper"}, entries) == set()
        assert reach._known_reach()  # kept
        space["LATER"] = space["helper"]  # rebound between two clicks
        assert reach.affected({"helper"}, entries) == {"indirect"}
        assert reach.affected({"other"}, entries) == set()
        space["TABLE"].append(space["other"])  # a mutation the namespace check cannot see ...
        space["LATER"] = space["via_list"]
        user_runs.cell_started()  # ... and a cell: read again
        assert reach._known_reach() is None  # nothing kept while a cell runs
        user_runs.cell_ended()
        assert reach.affected({"other"}, entries) == {"indirect"}  # via_list -> TABLE -> other
    finally:
        user_runs.watch(False)


def test_a_cell_function_rebound_between_clicks_and_deep_containers_are_read_as_before():
    from nbcompile.core import user_runs

    space = _space()
    space["g"] = eval("lambda x: other(x)", space)  # noqa: S307  a function of the cell that is not an entry
    space["f"] = eval("lambda x: g(x)", space)  # noqa: S307
    reach = EntryReach(space, {n: space[n] for n in ("f", "g", "helper", "other")}, bound=lambda: ("f",))
    entries = {"f": space["f"]}
    user_runs.watch(True)
    try:
        assert reach.affected({"helper"}, entries) == set()
        space["g"] = eval("lambda x: helper(x)", space)  # noqa: S307  rebound between two clicks: seen
        assert reach.affected({"helper"}, entries) == {"f"}
    finally:
        user_runs.watch(False)
    # a container three deep holding an object of a user-written list subclass: as _may_call reads it
    space["Reg"] = type("Reg", (list,), {"__module__": "__main__", "run": lambda self: None})
    space["DEEP"] = [[[space["Reg"]()]]]
    deep = eval("lambda x: DEEP", space)  # noqa: S307
    targets = {"helper": space["helper"]}
    said = reach.names_reached(deep)
    assert (said is None or not said.isdisjoint(targets)) == reach._function_reaches(deep, targets, set())


def test_nested_executions_keep_nothing_until_the_outer_one_ends():
    from nbcompile.core import user_runs

    watched = user_runs._watched  # (a shell of another test may watch too)
    user_runs.watch(True)
    try:
        user_runs.cell_started()
        user_runs.cell_started()  # a cell running another (run_cell, %rerun)
        user_runs.cell_ended()
        assert user_runs.epoch() is None  # the outer one still runs
        user_runs.cell_ended()
        assert user_runs.epoch() is not None
    finally:
        user_runs.watch(False)
    assert user_runs._watched == watched
    if not watched:
        assert user_runs.epoch() is None  # no shell watched: nothing kept


def test_the_kept_index_answers_as_reading_every_entry_for_each_change():
    """``affected`` through the index kept across clicks (entries by the names they reach) gives, for every
    change of one or two names, what reading every entry anew gives (nothing kept: no shell watched); modules
    and entries that cannot be read through included."""
    import itertools

    from nbcompile.core import user_runs

    space = _space()
    space["made"] = _closure_over(space["helper"])
    space["by_default"] = eval("lambda x, f=other: f(x)", space)  # noqa: S307
    names = ("helper", "other", "via_list", "lone", "calls_object", "made", "by_default")
    tracked = {n: space[n] for n in names}
    entries = {**tracked, "plain": space["Plain"](), "calls": space["Calls"]()}
    changes = [{n} for n in names] + [set(p) for p in itertools.combinations(names, 2)] + [{"untracked"}]
    fresh = EntryReach(space, tracked)
    watched = user_runs._watched
    if watched:  # another test's shell watches: read anew here by a reach whose epoch is always None
        user_runs.watch(False)
    expected = [fresh.affected(c, entries) for c in changes]
    assert fresh._known_reach() is None  # nothing kept: each answer read every entry
    kept = EntryReach(space, tracked)
    user_runs.watch(True)
    try:
        for changed, want in zip(changes, expected, strict=True):
            assert kept.affected(changed, entries) == want, changed
        assert kept._index is not None
        opaque = {**entries, "held": space["OBJ"]}  # an object: cannot be read through
        assert kept.affected({"helper"}, opaque) is None
        assert kept.affected({"held"}, opaque) is not None  # ... unless it is what changed
        space["LATER"] = 1  # a global rebound between clicks: the index is made again
        assert kept.affected({"helper"}, entries) == expected[0]
    finally:
        user_runs.watch(False)
        if watched:
            user_runs.watch(True)
