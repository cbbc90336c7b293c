"""Issue 24, the many-function cell: what a toggle does for each function of the cell is done by an index, a
cache or a shortcut, and each gives what the long way gives (the figures are in benchmarks/toggle_latency.py)."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import sys
import types

import pytest
import torch

import nbcompile
from nbcompile.engine import check, usercode
from nbcompile.views.entries import entry_counts, entry_part

CELL = """
import torch
import torch.nn as nn
def helper(x):
    print("helper", x.shape)
    return torch.sin(x) * 2
def f(x, n):
    y = helper(x)
    return y * n
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
    def forward(self, x):
        y = self.lin(x)
        print("in forward")
        return y.relu()
net = Net()
def g(x):
    return torch.cos(x) + 1
"""


def _run(ip, line: str, cell: str):
    with contextlib.redirect_stdout(io.StringIO()):
        ip.run_cell_magic("compile", line, cell)
    return nbcompile.last()


def _said(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html)


def test_each_rows_counts_are_its_parts_counts_after_toggles_and_recompiles(ip):
    """The panel's rows count without making each function's part of the report: the same counts as
    the part, for a function, a module entry, its class's forward and another entry, through toggles."""
    ip.user_ns["x"] = torch.randn(4)
    session = _run(ip, '--backend eager --entry f --entry net --entry g '
                       '--run "f(x, 1), f(x, 2), f(x, 3), net(x), g(x)"', CELL)
    panel = session.panel()
    assert session.report.recompile_count >= 1 and session.report.break_count >= 2
    for mode in ("disable", "compile"):
        panel.function_rows["helper"].value = mode
        assert panel.last_error is None, panel.last_error
        functions, entries = set(session.functions), set(session.entries)
        for name in panel.function_counts:
            part = entry_part(session, name)
            counts = entry_counts(session, name, functions, entries)
            assert counts == (len(part.frames), len(part.breaks), len(part.causes), len(part.recompiles)), name
            assert counts == entry_counts(session, name), name  # the sets are only the session's, read once
            said = _said(panel.function_counts[name].value)
            assert said.startswith(f"{counts.frames} frame"), (name, said)
            assert f"{counts.recompiles} recompile" in said, (name, said)
    assert entry_counts(session, "f").recompiles >= 1


def test_a_row_counts_a_redefined_functions_new_code(ip):
    """The spans a row counts by are kept per function object: a function the session tracks anew (the cell
    run again) is counted by its new lines."""
    ip.user_ns["x"] = torch.randn(4)
    first = _run(ip, '--backend eager --run "f(x, 2)" --no-panel', CELL)
    assert first.function_counts("f").frames >= 1
    second = _run(ip, '--backend eager --run "f(x, 2)" --no-panel', "\n\n\n" + CELL)  # every line moved by 3
    part = second.function_report("f")
    assert second.function_counts("f") == (len(part.frames), len(part.breaks), len(part.causes),
                                           len(part.recompiles))
    assert part.frames and all(fr.firstlineno > 3 for fr in part.frames)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool])
def test_equal_values_are_judged_as_the_long_way_judges_them(dtype):
    """A compiled value equal to eager's bit for bit skips the steps that would find so: the same
    problems, differences, errors against the float64 reference and values without one."""
    base = torch.randn(257)
    a = (base * 4).to(dtype) if dtype != torch.bool else base > 0
    ref = a.to(torch.float64) + 1e-3 if a.is_floating_point() else None
    short = check.Comparison(fp64_reason="")
    check.compare(a, a.clone(), into=short, reference=ref if ref is not None else check._NOREF)
    # the long way, on the same values: what _compare_tensors did before the shortcut
    long = check.Comparison(fp64_reason="")
    long.compared = 1
    if a.is_floating_point():
        long.diffs.append(0.0)
        assert check._against_reference(a, a.clone(), ref, "result", long, True) == ""
    elif a.numel():
        long.diffs.append(0.0)
    assert short.problems == long.problems == []
    assert short.diffs == long.diffs and short.compared == long.compared
    assert [e[0] for e in short.errors] == [e[0] for e in long.errors]
    assert [e[1:] for e in short.errors] == [pytest.approx(e[1:]) for e in long.errors]
    assert short.unreferenced == long.unreferenced
    unreferenced = check.Comparison(fp64_reason="")
    check.compare(a, a.clone(), into=unreferenced)
    assert unreferenced.unreferenced == (1 if a.is_floating_point() else 0)


def test_nans_and_a_reference_with_nans_still_take_the_long_way():
    a = torch.tensor([1.0, float("nan"), 3.0])
    out = check.compare(a, a.clone(), reference=torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    assert out.problems == [] and out.compared == 1  # equal NaNs: torch.equal says no, assert_close says yes
    b = torch.tensor([1.0, 2.0, 3.0])
    out = check.compare(b, b.clone(), reference=torch.tensor([1.0, float("nan"), 3.0], dtype=torch.float64))
    assert out.problems == [] and out.errors == [], "a reference with NaNs where the runs have none cannot judge"
    c = torch.tensor([1.0, 2.0, 3.5])
    out = check.compare(c, b, reference=b.to(torch.float64))
    assert out.problems and "float64" in out.problems[0], "values that differ are judged as before"


def test_user_modules_judges_a_module_again_when_another_object_takes_its_name(tmp_path, monkeypatch):
    """``user_modules`` judges each module once, by name and object: a module replaced in ``sys.modules``
    (reloaded, or the user's own ``types.ModuleType``) is judged again."""
    (tmp_path / "nbc_many_mod.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("nbc_many_mod")
    try:
        assert any(m is module for m in usercode.user_modules())
        made = types.ModuleType("nbc_many_mod")  # no file: made at run time, the user's too
        sys.modules["nbc_many_mod"] = made
        found = usercode.user_modules()
        assert any(m is made for m in found) and not any(m is module for m in found)
        sys.modules["nbc_many_mod"] = torch  # an installed package's module under that name: not the user's
        assert not any(m is torch for m in usercode.user_modules())
    finally:
        sys.modules.pop("nbc_many_mod", None)
    assert not any(getattr(m, "__name__", "") == "nbc_many_mod" for m in usercode.user_modules())


def test_imported_modules_reads_each_code_once_and_sees_modules_loaded_since(tmp_path, monkeypatch):
    def uses():
        import nbc_many_late  # noqa: F401

        return 1

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "nbc_many_late.py").write_text("CALLS = 0\n")
    assert usercode.imported_modules(uses.__code__) == []  # not loaded yet: nothing to watch
    late = importlib.import_module("nbc_many_late")
    try:
        assert usercode.imported_modules(uses.__code__) == [late]  # the names are kept, the modules looked up now
        assert usercode.import_names(uses.__code__) == frozenset({"nbc_many_late"})
    finally:
        sys.modules.pop("nbc_many_late", None)


def test_a_changes_reference_copy_reaches_what_its_copies_reached_and_no_later_change_does(ip):
    """A change reaches the state its --run reads once, for its copies and its reference copy; the next change
    reaches it anew: a global the user rebinds between two clicks is what both runs of the next change read."""
    ip.user_ns["x"] = torch.ones(4)
    ip.run_cell("SCALE = 2.0")
    cell = "import torch\ndef h(x):\n    return x * 3\ndef f(x):\n    return h(x) * SCALE\n"
    session = _run(ip, '--backend eager --run "f(x)" --no-panel', cell)
    report = session.set("h", "disable")
    assert report.check.ok and report.check.compared, report.check.message
    assert session.workload._roots_once is None, "the change is over: what it reached is forgotten"
    assert torch.equal(report.result, torch.full((4,), 6.0))
    ip.run_cell("SCALE = 5.0")
    report = session.set("h", "compile")
    assert report.check.ok and report.check.compared, report.check.message
    assert torch.equal(report.result, torch.full((4,), 15.0)), "the copies and the reference read SCALE anew"


def test_a_cell_run_again_unchanged_counts_its_own_frames(ip):
    """Code objects compare equal across files (the same function at the same line of two cells): a row's span
    is its own cell's, never a cached span of the first run's cell."""
    ip.user_ns["x"] = torch.randn(4)
    first = _run(ip, '--backend eager --run "f(x, 2)" --no-panel', CELL)
    assert first.function_counts("f").frames >= 1
    ip.run_cell("pass", store_history=True)  # the next cell's number, so its file's name, differs
    second = _run(ip, '--backend eager --run "f(x, 2)" --no-panel', CELL)  # the same text: another cell file
    files = {s.workload.tracked["f"].__code__.co_filename for s in (first, second)}
    assert len(files) == 2 and first.workload.tracked["f"].__code__ == second.workload.tracked["f"].__code__
    part = second.function_report("f")
    assert part.frames, "f's part of the new session's report is found by the new cell's file"
    assert second.function_counts("f") == (len(part.frames), len(part.breaks), len(part.causes),
                                           len(part.recompiles))
