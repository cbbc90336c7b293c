"""The audit of the user's modules sees changes in place at any depth, modules built at run time, and
the ways a traced-once helper reads a value by a computed name (issue 21, points 2 and 3, from the
second adversarial pass): a search never repeats a side effect on objects no copy holds, and a
configuration that would freeze a value it cannot vary is "not judged"."""

from __future__ import annotations

import logging
import sys
import textwrap
import types

import numpy as np
import pytest
import torch

import nbcompile
from nbcompile.engine import fingerprint, usercode
from nbcompile.engine import frozen as frozen_ops
from nbcompile.engine import search as search_ops

from nbhelpers import run_compile_cell

MODULE = """\
    import numpy as np
    import torch
    far = [0] * 64
    stats = {"a": {"n": 0}}
    class Counter:
        n = 0
    class State:
        def __init__(self):
            self.n = 0
    state = State()
    buf = torch.zeros(3)
    arr = np.zeros(3)
    def remember(x, seen=[]):
        seen.append(1)
    """

#: variant -> (the helper's change through importlib, how the test reads the count)
DEEP = {
    "list_past_item_32": ("m.far[40] += 1", lambda m: m.far[40]),
    "nested_dict": ('m.stats["a"]["n"] += 1', lambda m: m.stats["a"]["n"]),
    "instance_attribute": ("m.state.n += 1", lambda m: m.state.n),
    "class_attribute": ("m.Counter.n += 1", lambda m: m.Counter.n),
    "tensor_in_place": ("m.buf.add_(1)", lambda m: int(m.buf[0])),
    "ndarray_item": ("m.arr[1] = m.arr[1] + 1", lambda m: int(m.arr[1])),
    "mutable_default": ("m.remember(x)", lambda m: len(m.remember.__defaults__[0])),
}


def _cell(effect: str) -> str:
    return textwrap.dedent(f"""\
        import importlib
        import torch
        def helper(x):
            m = importlib.import_module("nbdeep_mod")
            {effect}
            torch._dynamo.graph_break()
            return x * 2
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """)


@pytest.mark.parametrize("variant", sorted(DEEP))
def test_a_change_in_place_deep_in_a_user_module_is_caught_and_never_repeated(ip, make_module, variant):
    module = make_module("nbdeep_mod", textwrap.dedent(MODULE))
    effect, count = DEEP[variant]
    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(x)"', _cell(effect))
    session = nbcompile.last()
    check = session.report.check
    # the cell's run, and the check's eager run, caught: nothing more (no proof re-runs it)
    assert count(module) == 2, count(module)
    assert not check.compared and "nbdeep_mod." in check.message and "in place" in check.message, check.message
    assert "check not compared" in session.report.summary() and "check ok" not in session.report.summary()
    fixes = [fx for b in session.report.breaks for fx in b.fixes if fx.toggles]
    assert fixes and all(fx.verified is None and "nbdeep_mod." in fx.effect for fx in fixes), \
        [(fx.verified, fx.effect) for fx in fixes]
    # the check saw it: no trial runs it again
    result = search_ops.Searcher(session.workload, 15, report=session.report).run()
    assert result.trials == [] and result.start is not None and "nbdeep_mod." in (result.start.error or "")
    assert count(module) == 2


@pytest.mark.parametrize("reach", ["global", "sys.modules"])
def test_a_module_built_at_run_time_is_audited(ip, reach):
    name = f"nbdeep_synth_{reach.replace('.', '_')}"
    body = textwrap.dedent(f"""\
        import sys, types
        import torch
        synth = types.ModuleType("{name}")
        synth.calls = 0
        sys.modules["{name}"] = synth
        def helper(x):
            {'synth' if reach == 'global' else f'sys.modules["{name}"]'}.calls += 1
            torch._dynamo.graph_break()
            return x * 2
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """)
    try:
        run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(x)"', body)
        module = sys.modules[name]
        assert usercode.made_at_run_time(module)
        assert module.calls == 1  # copied (a global) or caught and put back (sys.modules)
        search_ops.Searcher(nbcompile.last().workload, 15, report=nbcompile.last().report).run()
        assert module.calls == 1
    finally:
        sys.modules.pop(name, None)


def test_modules_without_a_file_that_an_import_system_made_are_not_the_users():
    assert not usercode.made_at_run_time(sys)  # builtin
    assert not usercode.made_at_run_time(torch._C._nn)  # an extension's submodule
    assert not usercode.made_at_run_time(sys.modules["pyexpat"])
    assert usercode.made_at_run_time(types.ModuleType("nbdeep_free"))


def test_the_fingerprint_sees_changes_at_any_depth_and_is_bounded():
    walk = fingerprint.Walk()
    obj = types.SimpleNamespace(items=[{"k": [1.0, float("nan")]}], t=torch.zeros(2), a=np.zeros(2))
    before = walk.of(obj)
    assert walk.of(obj) == before  # NaN equals itself in a fingerprint: no false alarm
    for change in (lambda: obj.items[0]["k"].append(2), lambda: obj.t.add_(1), lambda: obj.a.__setitem__(0, 3)):
        change()
        now = fingerprint.Walk().of(obj)
        assert now != before
        before = now
    small = fingerprint.Walk(max_nodes=10)
    small.of(list(range(100)) + [[i] for i in range(100)])
    assert not small.complete


def test_a_module_the_run_reaches_too_large_to_watch_is_not_vouched_for(ip, make_module, monkeypatch):
    make_module("nbdeep_big", "rows = [[i] for i in range(5000)]\nn = 0\ndef bump():\n    global n\n    n += 1\n")
    monkeypatch.setattr(fingerprint, "MAX_NODES", 1000)
    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(x)"', textwrap.dedent("""\
        import torch
        import nbdeep_big
        def f(x):
            nbdeep_big.bump()
            return x.sin()
        x = torch.ones(4)
        """))
    check = nbcompile.last().report.check
    assert not check.compared and "nbdeep_big" in check.message and "more state than nbcompile watches" \
        in check.message, check.message


def test_a_large_module_the_run_never_names_costs_no_verdict(ip, make_module, monkeypatch):
    make_module("nbdeep_data", "rows = [(i, i % 7) for i in range(5000)]\n")
    monkeypatch.setattr(fingerprint, "OTHER_NODES", 1000)  # a data set in a module the cell imports, unused
    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(x)"', textwrap.dedent("""\
        import torch
        import nbdeep_data
        def f(x):
            return x.sin()
        x = torch.ones(4)
        """))
    check = nbcompile.last().report.check
    assert check.ok and check.compared, check.message
    assert nbcompile.last().fix(budget_s=10).trials  # and the search runs


def test_a_toggle_of_a_method_of_a_class_in_a_user_module_is_not_an_outside_effect(ip, make_module):
    make_module("nbdeep_model", textwrap.dedent("""\
        import torch
        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 4)
            def forward(self, x):
                torch._dynamo.graph_break()
                return self.lin(x).relu()
        """))
    run_compile_cell(ip, '--backend eager --no-panel --entry f --track nbdeep_model:Block.forward --run "f(x)"',
                     textwrap.dedent("""\
        import torch
        import nbdeep_model
        blk = nbdeep_model.Block()
        def f(x):
            return blk(x.sin()).cos()
        x = torch.ones(2, 4)
        """))
    result = nbcompile.last().fix(budget_s=600)
    toggled = [t for t in result.trials if t.toggles.get("nbdeep_model:Block.forward", "compile") != "compile"]
    assert toggled, [t.toggles for t in result.trials]
    assert not any("in place" in (t.error or "") for t in toggled), [(t.toggles, t.error) for t in toggled]


def test_changes_in_place_the_audit_sees_past_containers():
    def bump():
        return None
    bump.calls = 0
    queue_ = __import__("queue").Queue()
    counter = __import__("itertools").count()
    buf = __import__("array").array("d", [0.0])
    t = torch.zeros(3)

    class Tagged(dict):
        pass
    tagged = Tagged()
    tagged.note = 0
    for target, change in ((bump, lambda: setattr(bump, "calls", 1)), (queue_, lambda: queue_.put(1)),
                           (counter, lambda: next(counter)), (buf, lambda: buf.__setitem__(0, 1.0)),
                           (t, lambda: t.data.add_(1)), (tagged, lambda: setattr(tagged, "note", 1))):
        before = fingerprint.Walk().of(target)
        change()
        assert fingerprint.Walk().of(target) != before, target


# --- a traced-once helper reading a value by a name computed at run time -----------------------------------

READS = {  # setup, the helper's read: each either varied (then proven stale) or "not judged"
    "getattr_module": ("import nbdeep_cfg", "getattr(nbdeep_cfg, 'SCALE')"),
    "getattr_class": ("class Cfg:\n    scale = 2.0", "getattr(Cfg, 'scale')"),
    "getattr_computed": ("import nbdeep_cfg\nKEY = 'SCA' + 'LE'", "getattr(nbdeep_cfg, KEY)"),
    "globals_item": ("SCALE = 2.0", "globals()['SCALE']"),
    "sys_modules": ("import sys, nbdeep_cfg", "sys.modules['nbdeep_cfg'].SCALE"),
    "import_module": ("import importlib, nbdeep_cfg", "importlib.import_module('nbdeep_cfg').SCALE"),
    "callable_instance": ("class Scaler:\n    def __init__(self):\n        self.k = 2.0\n"
                          "    def __call__(self, v):\n        return v * self.k\nscaler = Scaler()", "scaler(1.0)"),
    "partial": ("import functools, operator\nMUL = functools.partial(operator.mul, 2.0)", "MUL(1.0)"),
    "lambda": ("GET = lambda: 2.0", "GET()"),
}


@pytest.mark.parametrize("variant", sorted(READS))
def test_every_computed_read_is_varied_or_not_judged(ip, make_module, variant):
    make_module("nbdeep_cfg", "SCALE = 2.0\n")
    setup, read = READS[variant]
    ip.run_cell(f"import torch\n{setup}\ndef helper(x):\n    return x * {read}\n")
    frozen = frozen_ops.frozen_globals({"helper": ip.user_ns["helper"]})
    varied = [slot.label for slot, _, _ in frozen]
    assert varied or frozen.unjudged, variant
    if variant.startswith("getattr_") and variant != "getattr_computed":
        assert varied, (variant, frozen.unjudged)  # a constant name: varied like a plain attribute


def test_a_computed_read_is_never_frozen_by_the_search(ip):
    body = textwrap.dedent("""\
        import torch
        SCALE = 2.0
        def helper(x):
            torch._dynamo.graph_break()
            return x * globals()["SCALE"]
        def f(x):
            return helper(x.sin()).cos()
        x = torch.randn(4, generator=torch.Generator().manual_seed(0))
        """)
    run_compile_cell(ip, '--backend aot_eager --no-panel --entry f --run "f(x)"', body)
    result = nbcompile.last().fix(budget_s=600)
    for t in result.trials:
        if t.toggles.get("helper") in ("allow_in_graph", "nonstrict_trace") and not t.options:
            assert not t.admissible and "not judged" in t.rejected and "globals()" in t.rejected, t.rejected
    ip.run_cell("SCALE = 5.0")
    ns = ip.user_ns
    assert torch.allclose(ns["f"](ns["x"]), (ns["x"].sin() * 5.0).cos())


def test_what_only_logs_or_calls_library_code_is_judged(ip):
    ip.run_cell(textwrap.dedent("""\
        import logging, math
        import numpy as np
        import torch
        import torch.nn.functional as F
        log = logging.getLogger("nbdeep")
        def helper(x):
            log.debug("scaling")
            return F.gelu(x) * math.pi + np.float32(0).item()
        """))
    frozen = frozen_ops.frozen_globals({"helper": ip.user_ns["helper"]})
    assert frozen.unjudged == [] and isinstance(ip.user_ns["log"], logging.Logger)


def test_a_container_a_closure_holds_is_varied_a_number_it_holds_is_not(ip):
    ip.run_cell(textwrap.dedent("""\
        CFG = {"scale": 2.0}
        def make(cfg, k):
            def helper(x):
                return x * cfg["scale"] * k
            return helper
        helper = make(CFG, 3.0)
        """))
    frozen = frozen_ops.frozen_globals({"helper": ip.user_ns["helper"]})
    labels = [slot.label for slot, _, _ in frozen]
    assert labels == ["cfg (in helper's closure)"], (labels, frozen.unjudged)
