"""A toggle's re-run never trains the user's model (issue 34): the newcomer's own cell (a CNN with BatchNorm,
AdamW, a cosine LR schedule, an `.item()` branch and a logging helper), clicked disable / compile / disable,
leaves weights, buffers, the optimizer's and the scheduler's state as the cell's run left them, with the
check ok after each click. The copies a run on copies uses hold nothing that reaches the user's objects:
``LRScheduler`` patches ``optimizer.step`` with a closure over a weak reference to the real optimizer,
and a refresh of the copies used to graft that closure into the copied optimizer, so every run on copies
stepped the user's optimizer. Anything else that reaches them is caught, put back and said."""

from __future__ import annotations

import json

import pytest
import torch
from click_harness import BY_NAME

import nbcompile

from nbhelpers import run_compile_cell

NEWCOMER = BY_NAME["adamw_cosine_bn"]  # the newcomer's cell, shared with the click invariants
SETUP, CELL = NEWCOMER.setup, NEWCOMER.body

RUN = '--run "train_step(model, opt, sched, xb, yb)"'


def _state(ns) -> dict:
    """Everything the user's own run changes, as plain numbers."""
    opt = ns["opt"]
    return {
        "params": [p.detach().double().sum().item() for p in ns["model"].parameters()],
        "buffers": [b.detach().double().sum().item() for b in ns["model"].buffers()],
        "steps": [float(s["step"]) for s in opt.state_dict()["state"].values()],
        "moments": [s["exp_avg"].double().sum().item() for s in opt.state_dict()["state"].values()],
        "lr": [g["lr"] for g in opt.param_groups],
        "sched": ns["sched"].last_epoch,
    }


@pytest.mark.parametrize("backend", ["aot_eager", "eager"])
def test_the_newcomers_training_cell_is_never_trained_by_a_click(ip, backend):
    ip.run_cell(SETUP)
    result = run_compile_cell(ip, f"--backend {backend} --no-panel {RUN}", CELL)
    assert result.error_in_exec is None
    session = nbcompile.last()
    first = _state(ip.user_ns)
    assert first["steps"] and all(step == 1.0 for step in first["steps"])
    assert session.report.check.ok and session.report.check.compared, session.report.check.message
    for mode in ("disable", "compile", "disable", "compile"):
        ip.run_line_magic("nbcompile", f"set log_metrics {mode}")
        assert _state(ip.user_ns) == first, f"the click log_metrics -> {mode} changed the user's state"
        check = session.report.check
        assert check.ok and check.compared and check.run == "copies", (mode, check.message)
    # the user's own next run is one step, from where the cell's run left it
    session.run()
    assert all(step == 2.0 for step in _state(ip.user_ns)["steps"])


@pytest.mark.slow
def test_the_newcomers_training_cell_with_the_default_backend(ip):
    """Inductor, with the first view shown (as a panel shows it): Dynamo's view and the complete view agree
    on graphs, breaks and frames, and going back to a configuration seen before compiles nothing."""
    ip.run_cell(SETUP)
    result = run_compile_cell(ip, f"--no-panel {RUN}", CELL)
    assert result.error_in_exec is None
    session = nbcompile.last()
    assert session.options.backend == "inductor"
    views: list[tuple] = []

    def counts() -> tuple:
        report = session.report
        return report.graph_count, report.break_count, report.splits, report.frame_count

    session.show_stage = lambda: views.append(("dynamo", session.report.stage, *counts()))
    session.display_id, session.update_display = "probe", lambda: None  # a replaceable output: first views
    first = _state(ip.user_ns)
    compiled: list[int] = []
    for mode in ("disable", "compile", "disable", "compile"):
        before = len(session.recording.entry_of)
        ip.run_line_magic("nbcompile", f"set log_metrics {mode}")
        compiled.append(len(session.recording.entry_of) - before)
        views.append(("complete", session.report.stage, *counts()))
        assert _state(ip.user_ns) == first, mode
        assert session.report.check.ok and session.report.check.compared, (mode, session.report.check.message)
    for i, view in enumerate(views[:-1]):
        if view[0] == "dynamo":  # the complete view right after it says the same counts
            assert view[1] == "dynamo" and views[i + 1][2:] == view[2:], views
    assert compiled[2] == 0 and compiled[3] == 0, compiled  # both configurations were seen: nothing compiles


HOLDERS = """\
import torch
class History:
    def __init__(self):
        self.values = []
        self.record = lambda v: self.values.append(v)    # a closure over the real object
        self.push = self.values.append                    # a builtin method bound to the real list
        self.bump = self.count_up                         # a method bound to the real object
        self.calls = 0
    def count_up(self):
        self.calls += 1
def make_counter(box):
    def add(t, box=box):                                  # a default that is the real object
        box.append(float(t.sum()))
    return add
hist = History()
seen = []
count = make_counter(seen)
w = torch.ones(3)
"""

HOLDERS_CELL = """\
def helper(x):
    return x * 2

def f(x):
    y = helper(x) + w
    hist.record(1)
    hist.push(2)
    hist.bump()
    count(y)
    return y
"""


def test_functions_held_by_the_copies_reach_the_copies_not_the_users_objects(ip):
    ip.run_cell(HOLDERS)
    result = run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(3))"', HOLDERS_CELL)
    assert result.error_in_exec is None
    hist, seen = ip.user_ns["hist"], ip.user_ns["seen"]
    after_cell = (list(hist.values), hist.calls, list(seen))
    assert after_cell == ([1, 2], 1, [9.0])
    session = nbcompile.last()
    for mode in ("disable", "compile", "disable"):
        ip.run_line_magic("nbcompile", f"set helper {mode}")
        assert (list(hist.values), hist.calls, list(seen)) == after_cell, mode
        assert session.report.check.compared, session.report.check.message


LEAK = """\
import json, torch
w = torch.zeros(3)
json._nbcompile_test_holder = w     # the user's tensor, held by a library module no copy holds
"""

LEAK_CELL = """\
def helper(x):
    return x + 1

def f(x):
    json._nbcompile_test_holder.add_(1)
    return helper(x) * 2 + w.sum()
"""


def test_a_run_on_copies_that_still_reaches_the_users_tensor_is_put_back_said_and_not_repeated(ip):
    import json as json_module

    ip.run_cell(LEAK)
    try:
        result = run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(3))"', LEAK_CELL)
        assert result.error_in_exec is None
        session = nbcompile.last()
        w = ip.user_ns["w"]
        check = session.report.check
        # the eager reference run reached the user's tensor too: the check says so, it does not compare
        assert not check.compared and "changed your w" in check.message, check.message
        before = w.clone()
        ip.run_line_magic("nbcompile", "set helper disable")
        assert torch.equal(w, before), "a toggle's run on copies changed the user's tensor and left it changed"
        check = session.report.check
        assert not check.compared and "w" in check.message and "run the cell" in check.message, check.message
        ip.run_line_magic("nbcompile", "set helper compile")
        assert torch.equal(w, before)
        # the user's own run is the user's: it runs, and runs on copies may try again after it
        session.run()
        assert float(w[0]) > float(before[0])
        assert session.workload.copies_refused is None
    finally:
        del json_module._nbcompile_test_holder


def test_the_report_of_the_newcomers_cell_serialises_after_clicks(ip):
    ip.run_cell(SETUP)
    run_compile_cell(ip, f"--backend eager --no-panel {RUN}", CELL)
    session = nbcompile.last()
    ip.run_line_magic("nbcompile", "set log_metrics disable")
    data = json.loads(json.dumps(session.report.to_json()))
    assert data["check"]["ok"] is True and data["check"]["compared"] is True
