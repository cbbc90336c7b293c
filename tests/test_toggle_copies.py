"""A toggle never trains the user's model (issue 22, point 2): toggles and option changes re-run
--run on copies of the state; the user's objects change only when the user runs a cell."""

from __future__ import annotations

import torch

import nbcompile
from nbcompile.model.render import to_text

from nbhelpers import run_compile_cell

TRAIN_CELL = """\
import torch
torch.manual_seed(0)
def features(x):
    return torch.relu(x)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 1)
    def forward(self, x):
        return self.lin(features(x))
net = Net()
opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
history = []
def train_step():
    opt.zero_grad()
    x = torch.randn(8, 6)
    loss = net(x).pow(2).mean()
    loss.backward()
    opt.step()
    history.append(loss.item())
    return loss.item()
"""


def _snapshot(ns):
    params = [p.detach().clone() for p in ns["net"].parameters()]
    steps = [float(s["step"]) for s in ns["opt"].state_dict()["state"].values()]
    return params, steps, list(ns["history"]), torch.get_rng_state().clone()


def _same(a, b):
    (pa, sa, ha, ra), (pb, sb, hb, rb) = a, b
    return all(torch.equal(x, y) for x, y in zip(pa, pb, strict=True)) and sa == sb and ha == hb and torch.equal(ra, rb)


def test_toggles_run_on_copies_and_leave_the_model_and_optimizer_as_they_were(ip):
    run_compile_cell(ip, '--backend aot_eager --no-panel --run "train_step()"', TRAIN_CELL)
    s = nbcompile.last()
    ns = ip.user_ns
    assert s.report.check.ok and s.report.check.compared, s.report.check
    before = _snapshot(ns)
    assert before[1] == [1.0, 1.0] and len(before[2]) == 1  # the cell's own run trained once
    for mode in ("disable", "compile", "disable"):
        s.set("features", mode)
        assert _same(before, _snapshot(ns)), f"the toggle features -> {mode} changed the user's state"
        check = s.report.check
        assert check.ok and check.compared and check.rule == "fp64", check
        assert s.report.graph_count >= 1
    ip.run_line_magic("nbcompile", "set features compile")
    s.configure(backend="eager")
    assert _same(before, _snapshot(ns))
    assert s.report.check.ok and s.report.check.compared, s.report.check
    # the user's own run still trains
    s.run()
    after = _snapshot(ns)
    assert after[1] == [2.0, 2.0] and len(after[2]) == 2
    assert not torch.equal(after[0][0], before[0][0])


def test_a_toggle_on_a_module_entry_runs_the_compiled_copy(ip):
    run_compile_cell(ip, '--backend aot_eager --no-panel --entry net --run "train_step()"', TRAIN_CELL)
    s = nbcompile.last()
    ns = ip.user_ns
    before = _snapshot(ns)
    s.set("features", "disable")
    assert _same(before, _snapshot(ns))
    assert s.report.graph_count >= 1 and s.report.check.ok and s.report.check.compared, s.report.check


def test_the_first_real_call_after_a_toggle_says_why_it_compiles_again(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "train_step()"', TRAIN_CELL)
    session = nbcompile.last()
    session.set("features", "disable")
    session.set("features", "compile")
    ip.run_cell("train_step()")  # the user's own call: the toggles' compiles were guarded on copies
    reasons = [r.reason for r in session.report.recompiles]
    assert reasons, "the copies' compiles are gone: torch compiles again for the user's objects"
    assert not any("Cache line invalidated" in r for r in reasons), reasons
    assert not any("___check_obj_id" in r for r in reasons), reasons
    assert any(("opt of the previous compile is gone" in r or "opt is another object than the one" in r)
               and "re-run --run on copies" in r for r in reasons), reasons


def test_the_check_says_which_run_its_figures_come_from(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "train_step()"', TRAIN_CELL)
    session = nbcompile.last()
    assert session.report.check.run == "cell" and "check ok (the session's run)" in to_text(session.report)
    ip.run_line_magic("nbcompile", "set features disable")  # from another cell: no panel knows of it
    assert session.report.check.run == "copies"
    assert "check ok (re-run on copies after features -> disable)" in to_text(session.report)
    session.run()
    assert session.report.check.run == "cell"
