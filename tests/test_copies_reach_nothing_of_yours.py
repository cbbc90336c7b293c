"""What a hostile pass found reaching the user's objects from runs on copies (issue 34), each now kept off
them: a forward hook's lambda appending to a global, a ``functools.partial`` over a closure, a class attribute
reached through an instance method, a bound ``list.append`` assigned to a global, an object whose
``__deepcopy__`` returns itself, and an optimizer's step hook (dropped by ``Optimizer.__getstate__``: the copy
ran without it and the check said "differs from eager")."""

from __future__ import annotations

import pytest

import nbcompile

from nbhelpers import run_compile_cell

HELPER = "def helper(y):\n    return y * 2\n"

CASES = {
    "forward_hook": ("import torch\nacts = []\nmodel = torch.nn.Linear(2, 2)\n"
                     "model.register_forward_hook(lambda m, i, o: acts.append(1))",
                     "def step():\n    return helper(model(torch.ones(1, 2)))\n", "len(acts)"),
    "partial_over_a_closure": ("import functools, torch\ndef mk(box):\n    return lambda tag, v: box.append(v)\n"
                               "hist = []\nrecord = functools.partial(mk(hist), 'loss')",
                               "def step():\n    record(1)\n    return helper(torch.ones(2))\n", "len(hist)"),
    "class_attribute": ("import torch\nclass T:\n    history = []\n    def log(self, v): self.history.append(v)\n"
                        "t = T()", "def step():\n    t.log(1)\n    return helper(torch.ones(2))\n", "len(T.history)"),
    "bound_builtin_method": ("import torch\nhist = []\npush = hist.append",
                             "def step():\n    push(1)\n    return helper(torch.ones(2))\n", "len(hist)"),
    "deepcopy_returns_self": ("import torch\nclass Board:\n    def __init__(self): self.h = []\n"
                              "    def __deepcopy__(self, memo): return self\nboard = Board()",
                              "def step():\n    board.h.append(1)\n    return helper(torch.ones(2))\n", "len(board.h)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_runs_on_copies_leave_the_users_objects_alone(ip, case):
    setup, step, probe = CASES[case]
    ip.run_cell(setup)
    assert run_compile_cell(ip, '--backend eager --no-panel --run "step()"', HELPER + step).success
    assert ip.ev(probe) == 1  # the cell's own run, once; its check's reference runs never reach it
    session = nbcompile.last()
    for mode in ("disable", "compile"):
        ip.run_line_magic("nbcompile", f"set helper {mode}")
        assert ip.ev(probe) == 1, mode
    check = session.report.check
    assert not check.compared or check.ok, check.message  # said as not compared, never a false verdict


def test_an_optimizers_step_hook_runs_on_the_copies_too(ip):
    ip.run_cell("import torch\ntorch.manual_seed(0)\nm = torch.nn.Linear(2, 1)\n"
                "opt = torch.optim.SGD(m.parameters(), lr=0.5)\n"
                "def freeze(o, a, k):\n    for p in o.param_groups[0]['params']: p.grad.zero_()\n"
                "opt.register_step_pre_hook(freeze)")
    step = ("def step():\n    opt.zero_grad()\n    helper(m(torch.ones(3, 2))).pow(2).mean().backward()\n"
            "    opt.step()\n")
    assert run_compile_cell(ip, '--backend eager --no-panel --run "step()"', HELPER + step).success
    session = nbcompile.last()
    weight = ip.ev("m.weight.tolist()")
    for mode in ("disable", "compile", "disable"):
        ip.run_line_magic("nbcompile", f"set helper {mode}")
        check = session.report.check
        assert check.ok and check.compared, (mode, check.message)
        assert ip.ev("m.weight.tolist()") == weight
