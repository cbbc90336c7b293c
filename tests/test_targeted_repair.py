"""Issue 35: targeted repair. The remedies a report's breaks call for run together in the first trial after the
start; a set that does not help is bisected (delta debugging); a remedy the chosen set does not need is dropped;
a search cut by its budget says how many seconds to give (``FixSearch.advice_s``), and the panel's Fix tab offers
to search again with them. Real IPython shell, real Dynamo (backend eager)."""

from __future__ import annotations

import math

import pytest

import nbcompile
from nbcompile.engine import repair as repair_ops
from nbcompile.engine import search as search_ops

from nbhelpers import ITEM_PRINT_CELL, run_compile_cell

LINE = '--backend eager --no-panel --run "f(x)"'


def _session(ip):
    result = run_compile_cell(ip, LINE, ITEM_PRINT_CELL)
    assert result.success, result.error_in_exec
    session = nbcompile.last()
    assert session.report.break_count == 3
    return session


def test_the_remedies_run_together_first_and_the_ones_not_needed_are_dropped(ip):
    session = _session(ip)
    searcher = search_ops.Searcher(session.workload, 600, report=session.report)
    remedies = searcher.space.remedies()
    assert len(remedies) >= 2, remedies
    result = searcher.run()
    assert result.plan and result.plan[0].startswith("targeted repair"), result.plan
    first = result.trials[1]  # the first trial after the start: every remedy at once
    assert "remedies together" in first.label, [t.label for t in result.trials]
    assert first.breaks == 0 and first.check_ok
    best = result.best
    assert best is not None and best.breaks == 0 and best.check_ok and best.proven
    config = best.options.get("_config", {})
    # the two remedies it needs, and nothing it does not: each was tried without, and a break came back
    assert config.get("capture_scalar_outputs") is True and print in config.get("reorderable_logging_functions", ())
    without = {t.label: t for t in result.trials if t.label.startswith("without ")}
    assert without and all(t.breaks > 0 or not t.admissible for label, t in without.items()
                           if "capture_scalar_outputs" in label or "reorderable" in label), without
    needless = set(config) - {"capture_scalar_outputs", "reorderable_logging_functions"}
    assert not needless, (needless, result.plan)
    assert result.state == "done" and result.advice_s is None and "give the search" not in result.summary()


def test_a_set_that_does_not_help_is_bisected_to_the_remedies_that_do(ip, monkeypatch):
    session = _session(ip)
    bad = "config capture_scalar_outputs=True"  # declared harmful here: the search must find the rest without it
    real = repair_ops.helps

    def helps(t, start):
        return real(t, start) and "capture_scalar_outputs" not in t.options.get("_config", {})

    monkeypatch.setattr(repair_ops, "helps", helps)
    searcher = search_ops.Searcher(session.workload, 600, report=session.report)
    k = len([r for r in searcher.space.remedies() if not (r[0] and set(r[0].values()) == {"disable"})])
    result = searcher.run()
    assert any("bisected" in line for line in result.plan), result.plan
    assert any(line.strip().startswith(bad) and "alone did not help" in line for line in result.plan), result.plan
    repair = [t for t in result.trials[1:] if "(from" not in t.label and not t.label.startswith("without ")
              and not t.label.startswith("%nbcompile set")]  # the toggles' seeds follow the repair
    # delta debugging: about 2 log2(k) sets, not every subset (the seeds the repair covered are not tried again)
    assert len(repair) <= 1 + 2 * math.ceil(math.log2(k)) + 1, [t.label for t in repair]
    helped = [line for line in result.plan if "helped" in line]
    assert helped, result.plan


def test_a_search_cut_by_its_budget_says_what_to_give_and_the_tab_searches_again_with_it(ip, monkeypatch):
    from nbcompile.engine import forked

    session = _session(ip)
    panel = session.panel()
    monkeypatch.setenv(forked.ENV, "1")  # the start alone (beside it, the repair's first set would fix it all)

    def estimate(self, spec):  # every trial after the start looks too long for the budget
        return 0.0 if self.result.start is None else 100.0

    monkeypatch.setattr(search_ops.Searcher, "_estimate", estimate)
    panel.fix_budget.value = 60
    panel.start_fix()  # no event loop here: runs to its end now
    result = session.last_fix
    assert result.state == "budget" and result.advice_s is not None and result.advice_s > 60
    assert f"give the search {result.advice_s:.0f} s" in result.summary()
    assert panel.fix_again.layout.display != "none"
    assert panel.fix_again.description == f"Search again with {result.advice_s:.0f} s"
    advised = result.advice_s
    monkeypatch.setattr(search_ops.Searcher, "_estimate", lambda self, spec: 0.0)
    panel.fix_again.click()
    again = session.last_fix
    assert again is not result and again.budget_s == min(advised, panel.fix_budget.max)
    assert panel.fix_budget.value == again.budget_s
    assert again.state == "done" and again.advice_s is None
    assert again.taken == 1 and again.start.at_s == result.start.at_s  # it went on from the last search's start
    assert panel.fix_again.layout.display == "none"


def test_the_first_set_runs_beside_the_start_where_a_second_core_is_free(ip, monkeypatch):
    from nbcompile.engine import forked

    session = _session(ip)
    monkeypatch.setenv(forked.ENV, "2")
    monkeypatch.setattr(forked.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    if forked.why_not():
        import pytest
        pytest.skip(f"no forked trials here: {forked.why_not()}")
    result = search_ops.Searcher(session.workload, 600, report=session.report).run()
    start, first = result.trials[0], result.trials[1]
    assert start is result.start and "remedies together" in first.label, [t.label for t in result.trials]
    # it began with the start (in a child): recorded after it, sooner than it took; one after the other, the
    # gap would be at least its own run
    assert first.at_s - start.at_s < first.seconds, (start.at_s, first.at_s, first.seconds)
    assert first.breaks == 0 and result.best is not None and result.best.breaks == 0
    # the same search with trials one at a time: the same answer
    monkeypatch.setenv(forked.ENV, "1")
    again = search_ops.Searcher(session.workload, 600, report=session.report).run()
    assert again.trials[1].at_s - again.trials[0].at_s >= again.trials[1].seconds * 0.9
    assert again.best is not None and again.best.options == result.best.options


def test_a_search_again_on_the_same_report_goes_on_from_the_last_ones_trials(ip, monkeypatch):
    from nbcompile.engine import forked

    session = _session(ip)
    monkeypatch.setenv(forked.ENV, "1")  # every trial in this process, where the wrapper below sees it
    first = session.fix(budget_s=600, progress=lambda r: r.stop() if r.trials else None)  # stopped after one
    assert first.state == "stopped" and not first.applied and [t.label for t in first.trials] == ["start"]
    ran: list[tuple] = []
    real = search_ops.trial.run

    def counted(spec, toggles, options=None, **kw):
        ran.append((dict(toggles), dict(options or {})))
        return real(spec, toggles, options, **kw)

    monkeypatch.setattr(search_ops.trial, "run", counted)
    again = session.fix(budget_s=600)
    # the same trial, not run again (a copy: the last search's record keeps its own)
    assert again.taken == 1 and again.start is not None and again.start.at_s == first.start.at_s, again.summary()
    assert "1 taken from the last search" in again.summary()
    assert (dict(session.workload.toggles), {}) not in ran, ran
    assert again.applied and session.report.break_count == 0, again.summary()
    # a search after that one applied its find starts anew: the report it ran on is not the session's now
    third = session.fix(budget_s=600)
    assert third.taken == 0


def test_a_search_again_after_the_state_changed_starts_anew(ip, monkeypatch):
    from nbcompile.engine import forked

    session = _session(ip)
    monkeypatch.setenv(forked.ENV, "1")
    first = session.fix(budget_s=600, progress=lambda r: r.stop() if r.trials else None)
    assert not first.applied and len(first.trials) == 1
    ip.run_cell("x.mul_(2)")  # another cell changed the input in place: that search's trials ran on other values
    again = session.fix(budget_s=600)
    assert again.taken == 0 and "taken from the last search" not in again.summary()


@pytest.mark.parametrize("at_once", ["1", "2"])
def test_a_set_one_remedy_slows_is_cut_and_bisected_rather_than_left_to_the_budget(ip, monkeypatch, at_once):
    """GroundingDino's first set (``--dynamic`` among its remedies) was still compiling at 2-3x its start when
    the 60 s budget ended: nothing learnt, the search ended on its start. A set that runs past
    ``CUT_FACTOR`` times a trial is cut and split; the remedy that slows it is found alone, the rest kept."""
    import time

    from nbcompile.engine import forked

    session = _session(ip)
    # one at a time, every trial here; two, the first set runs beside the start in a forked child (which the
    # slowing below reaches too) and its limit is set once the start has taken its time
    monkeypatch.setenv(forked.ENV, at_once)
    if at_once == "2":
        monkeypatch.setattr(forked.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
        if forked.why_not():
            pytest.skip(f"no forked trials here: {forked.why_not()}")
    monkeypatch.setattr(repair_ops, "CUT_MIN_S", 1.0)
    slow = "nested_graph_breaks"
    real = search_ops.trial.run

    took: list[float] = []  # what a trial without the slow remedy takes here (the start's, the first one)

    def slowed(spec, toggles, options=None, **kw):  # this remedy makes every trace it is in take far longer
        if slow in (options or {}).get("_config", {}):
            time.sleep(max(4.0, 6 * max(took, default=1.0)))  # past 2x a trial on a loaded machine too
            return real(spec, toggles, options, **kw)
        began = time.perf_counter()
        try:
            return real(spec, toggles, options, **kw)
        finally:
            took.append(time.perf_counter() - began)

    monkeypatch.setattr(search_ops.trial, "run", slowed)
    searcher = search_ops.Searcher(session.workload, 600, report=session.report)
    labels = [label for _, _, label in searcher.repair.group(session.workload.toggles)]
    assert len(labels) >= 3 and any(slow in label for label in labels), labels
    result = searcher.run()
    first = result.trials[1]
    assert "remedies together" in first.label and first.kind.name == "NOT_FINISHED", first
    assert "slows the trace" in first.error and "budget" not in first.error, first.error
    assert any("bisected" in line and "slows the trace" in line for line in result.plan), result.plan
    # the search went on well within its budget and found the fix without the slow remedy
    best = result.best
    assert best is not None and best.breaks == 0 and best.check_ok and best.proven, result.plan
    assert slow not in best.options.get("_config", {}), best.options
    assert result.state == "done" and result.elapsed_s < 120, (result.state, result.elapsed_s)
