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
