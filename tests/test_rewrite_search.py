"""Proven source rewrites (issue 23, point 2): the fix search tries the rewrites of the cell's break lines
as trials (they count only with fewer breaks and the check ok), lists the ones the best configuration
needs as ``FixSearch.best.rewrites``, and never changes the cell or the user's objects until the user
accepts one (``Session.accept``: the rewritten cell becomes the next input). Real IPython shell, backend
eager."""

from __future__ import annotations

import textwrap

import pytest
import torch

import nbcompile
from nbcompile.model.report import Rewrite

from nbhelpers import run_compile_cell

#: ``helper`` takes a dict, which no custom_op schema has: a source rewrite is what removes its break (with a
#: plain tensor argument, ``helper -> custom_op`` removes it as well, with one change the user need not accept).
BRANCH_CELL = textwrap.dedent("""\
    import torch
    def helper(h, cfg):
        if h.sum() > 0:
            y = h * cfg["up"]
        else:
            y = h - 1
        return y
    def f(x):
        return helper(x.sin(), {"up": 2.0}).cos()
    x = torch.randn(8, generator=torch.Generator().manual_seed(0))
    """)

GUARD_CELL = textwrap.dedent("""\
    import torch
    def f(x):
        h = x.sin()
        if torch.isnan(h).any():
            raise ValueError("NaN in the activations")
        return h.cos() * 2
    x = torch.randn(8, generator=torch.Generator().manual_seed(0))
    """)


def _run(ip, cell, entry="f", run="f(x)"):
    result = run_compile_cell(ip, f'--backend eager --no-panel --entry {entry} --run "{run}" '
                                  '--dynamo-config nested_graph_breaks=False', cell)
    assert result.success, result.error_in_exec
    return nbcompile.last()


def test_a_branch_on_a_tensor_becomes_torch_where_proven_not_applied(ip):
    session = _run(ip, BRANCH_CELL)
    helper_before = ip.user_ns["helper"]
    before = session.report.break_count
    assert before >= 1
    result = session.fix(budget_s=600)
    best = result.best
    assert best is not None and best.breaks == 0 and best.check_ok, result
    assert [r.rule for r in best.rewrites] == ["where"]
    rewrite = best.rewrites[0]
    assert rewrite.function == "helper" and rewrite.cell_line == 4  # the %%compile line is line 1
    assert "torch.where(" in rewrite.after and rewrite.before.strip().startswith("if h.sum() > 0:")
    assert "-    if h.sum() > 0:" in rewrite.diff() and "+    y = torch.where(" in rewrite.diff()
    assert "to accept" in repr(result)
    # not applied: the user's function and the session's report are the code as written
    assert ip.user_ns["helper"] is helper_before
    assert session.report.break_count == before
    # every trial that used it was judged by the check like any other
    assert all(t.check_ok for t in result.trials if t.rewrites and t.tried)


def test_accept_puts_the_rewritten_cell_in_the_next_input_and_runs_nothing(ip):
    session = _run(ip, BRANCH_CELL)
    result = session.fix(budget_s=600)
    rewrite = result.best.rewrites[0]
    before_ns = dict(ip.user_ns)
    text = session.accept(rewrite)
    assert text.startswith("%%compile --backend eager") and "if h.sum() > 0" not in text
    assert "y = torch.where(" in text
    assert ip.user_ns["helper"] is before_ns["helper"] and session.accepted == [rewrite]
    assert ip.rl_next_input == text if hasattr(ip, "rl_next_input") else True
    # running the accepted cell: the session's own compile has no break left, the results are eager's
    run = run_compile_cell(ip, text.split("\n", 1)[0].removeprefix("%%compile "), text.split("\n", 1)[1])
    assert run.success, run.error_in_exec
    new = nbcompile.last()
    assert new.report.break_count == 0 and new.report.check.ok
    with pytest.raises(nbcompile.NbcompileError, match="cell line 4"):
        new.accept(rewrite)  # the new cell no longer reads as the rewrite expects
    with pytest.raises(nbcompile.NbcompileError, match="takes a Rewrite"):
        new.accept("y = torch.where(...)")


def test_a_raise_guard_on_a_tensor_becomes_an_async_assert(ip):
    session = _run(ip, GUARD_CELL)
    assert session.report.break_count >= 1
    result = session.fix(budget_s=600)
    best = result.best
    assert best is not None and best.breaks < session.report.break_count and best.check_ok, result
    assert [r.rule for r in best.rewrites] == ["check"]
    assert "torch._assert_async(" in best.rewrites[0].after


def test_a_rewrite_that_breaks_the_results_is_never_chosen(ip):
    # ``scale`` reaches a Python-level ``range``: the item rewrite is not proposed; the branch picks between
    # values of different shapes, which torch.where would broadcast: the trial fails (or is not proposed)
    cell = textwrap.dedent("""\
        import torch
        def helper(h):
            if h.sum() > 0:
                y = h[:2]
            else:
                y = h
            return y
        def f(x):
            return helper(x.sin()).cos()
        x = torch.randn(8, generator=torch.Generator().manual_seed(0))
        """)
    session = _run(ip, cell)
    result = session.fix(budget_s=600)
    assert all(not t.rewrites for t in result.trials if t.admissible and t.breaks == 0) or \
        all(t.check_ok for t in result.trials if t.rewrites and t.admissible)
    chosen = result.best.rewrites if result.best else []
    assert not [r for r in chosen if r.rule == "where"]


def test_a_library_break_shows_the_rewrite_the_library_would_need(ip, tmp_path, monkeypatch):
    (tmp_path / "nbbranchlib.py").write_text(textwrap.dedent("""\
        import torch
        def pick(h):
            if h.sum() > 0:
                y = h * 2
            else:
                y = h - 1
            return y
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    cell = "import torch\nimport nbbranchlib\ndef f(x):\n    return nbbranchlib.pick(x.sin()).cos()\n" \
           "x = torch.randn(8)\n"
    session = _run(ip, cell)
    result = session.fix(budget_s=600)
    assert not (result.best and result.best.rewrites)  # a module of the user's own (not installed): theirs to edit
    text = "\n".join(result.unremovable)
    if result.best is not None and result.best.breaks:
        assert "a rewrite (where)" in text and "torch.where(" in text


def test_rewrite_is_exported_from_the_package():
    assert Rewrite(3, "a", "b", "where").diff().startswith("--- cell line 3")
    assert torch is not None


def test_the_panel_shows_the_proven_rewrite_and_its_accept_button(ip):
    session = _run(ip, BRANCH_CELL)
    panel = session.panel()
    panel.start_fix()  # no running event loop here: the search runs to its end now
    rows = panel.rewrites_box.children
    assert len(rows) == 1
    diff, controls = rows[0].children
    assert "torch.where(" in diff.value and "source rewrite (where)" in diff.value
    button, said = controls.children
    helper_before = ip.user_ns["helper"]
    button.click()
    assert button.disabled and "accepted" in said.value and "torch.where(" in said.value
    assert session.accepted and ip.user_ns["helper"] is helper_before


def test_a_choice_that_needs_rewrites_is_not_applied_and_accept_carries_its_config(ip):
    cell = textwrap.dedent("""\
        import torch
        def f(x):
            h = x.sin()
            s = h.abs().max().item()
            if h.sum() > 0:
                y = h * 2
            else:
                y = h - 1
            return (y / s).cos()
        x = torch.randn(8, generator=torch.Generator().manual_seed(0))
        """)  # in the entry itself: no toggle reaches it, only config values and rewrites
    session = _run(ip, cell)
    before = session.report.break_count
    result = session.fix(budget_s=600)
    best = result.best
    assert best is not None and best.breaks == 0 and best.rewrites, result
    assert not result.applied and "needs its source rewrites" in result.applied_note
    assert session.report.break_count == before and session.toggles == {n: "compile" for n in session.toggles}
    text = session.accept(best.rewrites[0])
    for name in best.options.get("_config", {}):
        assert f"--dynamo-config {name}=" in text.split("\n", 1)[0]
    run = run_compile_cell(ip, text.split("\n", 1)[0].removeprefix("%%compile "), text.split("\n", 1)[1])
    assert run.success, run.error_in_exec
    assert nbcompile.last().report.break_count == best.breaks and nbcompile.last().report.check.ok


def test_a_custom_op_of_a_rewritten_function_does_not_stand_for_the_original(ip, monkeypatch):
    """The operator spec custom_op derives is the code's it was derived from: one derived from the where
    rewrite (which runs on meta tensors) once stood for the original helper too, whose fake implementation
    then branched on a tensor and broke the graph (1 break where the original's own spec has none)."""
    monkeypatch.setenv("NBCOMPILE_TRIAL_PROCESSES", "1")  # one process: specs are kept from trial to trial
    cell = BRANCH_CELL.replace("def helper(h, cfg):", "def helper(h):").replace('cfg["up"]', "2.0") \
        .replace('helper(x.sin(), {"up": 2.0})', "helper(x.sin())")
    session = _run(ip, cell)
    result = session.fix(budget_s=600)
    ops = [t for t in result.trials if t.toggles.get("helper") == "custom_op" and t.tried]
    assert any(t.rewrites for t in ops) and any(not t.rewrites for t in ops), [t.label for t in ops]
    assert all(t.breaks == 0 for t in ops), [(t.label, t.breaks) for t in ops]
    best = result.best
    assert best is not None and best.breaks == 0 and not best.rewrites, best  # one change, nothing to accept


def test_a_logger_call_deferred_past_the_return_s_work_joins_two_graphs(ip):
    cell = textwrap.dedent("""\
        import logging
        import torch
        logger = logging.getLogger("nbcompile.tests.defer")
        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1 = torch.nn.Linear(8, 16)
                self.fc2 = torch.nn.Linear(16, 8)
            def forward(self, x):
                h = torch.relu(self.fc1(x))
                logger.info("hidden shape %s", h.shape)
                return x + self.fc2(h)
        model = torch.nn.Sequential(Block(), Block()).eval()
        x = torch.randn(4, 8)
        """)
    session = _run(ip, cell, entry="model", run="model(x)")
    splits = session.report.splits
    assert splits >= 1
    result = session.fix(budget_s=600)
    best = result.best
    assert best is not None and [r.rule for r in best.rewrites] == ["defer"], best
    assert best.splits < splits and best.check_ok  # the break stays; the graphs around it become one
    assert best.breaks == result.start.breaks
    assert any("defer rewrite" in why and "logger's methods" in why for why in result.unremovable), \
        result.unremovable
