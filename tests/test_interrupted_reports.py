"""An interrupted run leaves its report marked so (issue 34, point 6), never read as complete: ``Report.interrupted``
and a notice that says where it stopped. After Dynamo's first view the report is that view again (the real-kernel
test in test_kernel_reruns_and_interrupts.py interrupts Inductor's compile); without one (this shell shows no first
view) it is what was compiled before the interrupt, and a later run that completes takes the mark back."""

from __future__ import annotations

import pytest

import nbcompile

from nbhelpers import run_compile_cell

CELL = """\
import torch
STOP = [False]
def helper(x):
    return x.cos() * 2
def caller(x):
    return helper(x.sin()) + 1
def run_once(x):
    y = caller(x)
    if STOP[0]:
        raise KeyboardInterrupt  # as Ctrl-C (a kernel's interrupt) lands in the user's code
    return y
"""


def test_an_interrupted_run_is_marked_and_the_next_whole_run_takes_the_mark_back(ip):
    result = run_compile_cell(ip, '--backend eager --no-panel --entry caller --run "run_once(torch.ones(3))"', CELL)
    assert result.error_in_exec is None
    session = nbcompile.last()
    report = session.report
    assert not report.interrupted and report.notice == "" and report.check.ok
    ip.user_ns["STOP"][0] = True
    with pytest.raises(KeyboardInterrupt):
        session.run()
    report = session.report
    assert report.interrupted and report.stage == "complete" and report.to_json()["interrupted"] is True
    assert report.notice.startswith("interrupted during the run: the report holds what was compiled before it")
    assert report.graph_count >= 1  # what was compiled before the interrupt is kept
    assert "interrupted during the run" in str(report)  # the notice line every view shows
    ip.user_ns["STOP"][0] = False
    session.run()
    assert not session.report.interrupted and session.report.notice == "" and session.report.check.ok
