"""A notebook (or a user module) that imports torch's own state by name, as tutorials do
(``from torch._dynamo.utils import counters``): compiling changes it by design, so toggles, trials and the
fix search neither refuse their runs for it nor put its contents back (which would corrupt torch's counts)."""

from __future__ import annotations

import nbcompile

from nbhelpers import run_compile_cell

CELL = """\
import torch
import mystats  # the user's own module, which imports torch's counters by name
from torch._dynamo.utils import counters
def helper(x):
    print("in helper")
    return x * 2
def caller(x):
    return helper(x.sin()).cos()
"""


def test_counters_imported_by_name_leave_toggles_and_trials_judged(ip, tmp_path, monkeypatch):
    (tmp_path / "mystats.py").write_text("from torch._dynamo.utils import counters\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = run_compile_cell(ip, '--backend eager --no-panel --run "caller(torch.ones(3))"', CELL)
    assert result.success, result.error_in_exec
    session = nbcompile.last()
    counters = ip.user_ns["counters"]
    session.set("helper", "disable")
    check = session.report.check
    assert check is not None and check.compared and check.ok, check.message
    frames_after_toggle = sum(counters["frames"].values())
    assert frames_after_toggle > 0  # torch's counts stand as torch made them, never put back
    fix = session.fix(budget_s=600)
    assert "counters" not in fix.state and all("counters" not in (t.error or "") for t in fix.trials), fix.state
    assert any(t.breaks is not None for t in fix.trials), [t.error for t in fix.trials]
    import mystats

    assert mystats.counters is counters  # the user's module keeps its name (never taken for one the run set)
