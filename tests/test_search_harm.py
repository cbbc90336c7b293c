"""The fix search and its trials never do harm (issue 21, points 2-6): a configuration that freezes a
global the user can change is never chosen; a trial repeats no side effect on a module the functions
import; every phase stops at the budget; timing noise does not change the answer; a start that could
not be tried says so instead of reading as zero."""

from __future__ import annotations

import textwrap
import time

import pytest
import torch

import nbcompile
from nbcompile.engine import search as search_ops

from nbhelpers import run_compile_cell


def _session(ip, body: str, run: str, entry: str = "f", backend: str = "eager"):
    run_compile_cell(ip, f'--backend {backend} --no-panel --entry {entry} --run "{run}"', textwrap.dedent(body))
    return nbcompile.last()


# --- 2: a global the user can change is never frozen ------------------------------------------------

SCALE_CELL = """\
    import torch
    SCALE = 2.0
    MODE = "mul"
    def helper(x):
        torch._dynamo.graph_break()
        y = x * SCALE
        return y if MODE == "mul" else y + 1
    def f(x):
        return helper(x.sin()).cos()
    x = torch.randn(4, generator=torch.Generator().manual_seed(0))
    """


def test_a_configuration_that_freezes_a_changing_global_is_never_chosen(ip):
    session = _session(ip, SCALE_CELL, "f(x)", backend="aot_eager")  # AOT traces helper once: SCALE baked in
    assert session.report.break_count >= 1
    result = session.fix(budget_s=600)
    frozen = [t for t in result.trials if t.toggles.get("helper") in ("allow_in_graph", "nonstrict_trace")
              and not t.options]
    assert frozen, [t.describe() for t in result.trials]
    for t in frozen:  # each proven stale by a run where the globals differ, and the trial says why
        assert not t.admissible and "SCALE" in t.rejected and "stale" in t.rejected, t.rejected
    assert result.best is None or result.best.toggles.get("helper") not in ("allow_in_graph", "nonstrict_trace")
    # whatever was applied follows the user's change of the global
    ns = ip.user_ns
    ns["SCALE"] = 5.0
    x = ns["x"]
    assert torch.allclose(ns["f"](x), (x.sin() * 5.0).cos())
    assert "stale" in repr(result)


def test_a_candidate_that_reads_no_changing_global_is_still_chosen(ip):
    session = _session(ip, """\
        import torch
        def helper(x):
            torch._dynamo.graph_break()
            return x * 2.0
        def f(x):
            return helper(x.sin()).cos()
        x = torch.randn(4)
        """, "f(x)")
    result = session.fix(budget_s=600)
    assert result.best is not None and result.best.breaks == 0
    assert not any("stale" in t.rejected for t in result.trials)


# --- 3: side effects on a module the function imports ----------------------------------------------

def test_a_module_imported_inside_a_function_is_copied_for_trials(ip, make_module):
    metrics_module = make_module("nbharm_metrics", "calls = 0\nseen = []\n")
    session = _session(ip, """\
        import torch
        def helper(x):
            import nbharm_metrics
            nbharm_metrics.calls += 1
            nbharm_metrics.seen.append(1)
            torch._dynamo.graph_break()
            return x * 2
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """, "f(x)")
    # the cell's own run once; its eager check ran on copies
    assert metrics_module.calls == 1 and metrics_module.seen == [1]
    assert session.report.check.compared and session.report.check.ok
    # every trial, the timing: none on the real module
    result = search_ops.Searcher(session.workload, 30, report=session.report).run()
    assert len(result.trials) > 3
    assert metrics_module.calls == 1 and metrics_module.seen == [1]


def test_a_write_to_a_module_attribute_the_copies_do_not_hold_is_caught_and_undone(ip, make_module):
    metrics_module = make_module("nbharm_metrics2", "calls = 0\n")
    session = _session(ip, """\
        import torch
        def helper(x):
            import nbharm_metrics2
            vars(nbharm_metrics2)["cal" + "ls"] += 1   # not named in the code: no copy holds it
            torch._dynamo.graph_break()
            return x * 2
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """, "f(x)")
    assert metrics_module.calls == 1  # the cell's own run; the check's eager run was caught and put back
    check = session.report.check
    assert not check.compared and "nbharm_metrics2.calls" in check.message
    result = search_ops.Searcher(session.workload, 30, report=session.report).run()
    assert metrics_module.calls == 1
    assert result.start.error is not None and "nbharm_metrics2.calls" in result.start.error


# --- 4: the budget bounds every phase -------------------------------------------------------------

LOG_CELL = """\
    import torch
    LOG = []
    def helper(x):
        LOG.extend([float(x.sum())] * 20)
        helper.lens.append(len(LOG))   # a function's attribute: no copy holds it, so the test sees each run
        return x * 2
    helper.lens = []
    def f(x):
        return helper(x.sin()).cos()
    x = torch.randn(8)
    """


#: The reported hang: a helper appending to a global list (Dynamo guards its length: each timed call of
#: a copy that keeps growing recompiles, over a list of thousands of constants).
BUDGET_CELL = """\
    import torch
    LOG = []
    def helper(x):
        LOG.extend([float(x.sum())] * 20)
        return x * 2
    def f(x):
        return helper(x.sin()).cos()
    x = torch.randn(8)
    """


def test_the_budget_bounds_the_search_timing_included(ip):
    import _thread
    import threading

    session = _session(ip, BUDGET_CELL, "f(x)")
    log = ip.user_ns["LOG"]
    before = list(log)
    budget = 15
    bound = budget * 3 + 20  # a bound, not a speed figure
    watchdog = threading.Timer(bound + 30, _thread.interrupt_main)  # the search itself stops at KeyboardInterrupt
    watchdog.start()
    began = time.perf_counter()
    try:
        result = search_ops.Searcher(session.workload, budget, report=session.report).run()
    finally:
        watchdog.cancel()
    elapsed = time.perf_counter() - began
    assert elapsed < bound, (elapsed, result.lines())
    assert result.state != "stopped"
    assert log == before and ip.user_ns["LOG"] is log  # no trial, no timing appended to the user's list
    # Session.fix: the same bound, and the applied configuration's one re-run is all the list gets
    began = time.perf_counter()
    result = session.fix(budget_s=5)
    assert time.perf_counter() - began < 5 * 3 + 20
    assert len(log) - len(before) in (0, 20)


def test_timing_runs_on_fresh_copies_so_appends_never_accumulate(ip):
    from nbcompile.engine import timing

    session = _session(ip, LOG_CELL, "f(x)")
    workload = session.workload
    lens, log = ip.user_ns["helper"].lens, ip.user_ns["LOG"]
    before, seen = list(log), len(lens)
    rows = timing.time_search(workload, [("helper disabled", {**workload.toggles, "helper": "disable"}, {})],
                              deadline=time.perf_counter() + 20, min_run_time=0.2)
    assert rows[0].timed and rows[0].samples >= 3, rows
    runs = lens[seen:]
    assert len(runs) > 10 and max(runs) == len(before) + 20, runs[:5]  # every timed run began from the copy
    assert log == before
    began = time.perf_counter()  # and it stops at its deadline, whatever it has
    rows = timing.time_search(workload, [("start", dict(workload.toggles), {})], deadline=time.perf_counter() + 0.5,
                              min_run_time=5)
    assert time.perf_counter() - began < 10
    assert not rows[0].timed or rows[0].samples < 200


# --- 5: noise and the budget do not silently change the answer --------------------------------------

CELL5 = """\
    import torch
    def helper(x):
        s = x.sum().item()
        return x * (2.0 if s > 0 else 3.0)
    def f(x):
        return helper(x.sin()).cos()
    x = torch.randn(4)
    """


def test_timing_rejects_only_beyond_the_measured_spread(ip):
    session = _session(ip, CELL5, "f(x)")
    searcher = search_ops.Searcher(session.workload, 60, report=session.report)
    result = searcher.run()
    best, start = result.best, result.start
    assert best is not None and best is not start
    best.rejected = ""
    # the start measured 1 ms median, but ranging 0.8 to 3 ms (a loaded machine); the candidate 1.6 ms, 1.2 to 2
    start.median_s, start.min_s, start.max_s, start.iqr_s = 0.001, 0.0008, 0.003, 0.0015
    best.median_s, best.min_s, best.max_s, best.iqr_s = 0.0016, 0.0012, 0.002, 0.0004
    result.best = best
    assert not searcher._reject_slower([best], start)  # within the noise: kept
    assert best.admissible and result.best is best
    assert result.noise_bound  # but the result says the times could not tell them apart
    # beyond the spread: rejected, as before
    best.median_s, best.min_s, best.max_s = 0.01, 0.009, 0.012
    assert searcher._reject_slower([best], start)
    assert best.rejected.startswith("10.0x slower than the start")


def test_a_burst_of_load_on_one_round_of_timing_rejects_nothing(ip, monkeypatch):
    """CI once rejected BERT's fix as "35x slower than the start" (176 ms at best against 5 ms): a burst of load
    on the other worker fell on the finalist's block of samples. A finalist timed slower beyond the spread is
    timed again, it first and the start after; it is rejected only when that round says so too."""
    from nbcompile.engine import finalists as finalist_ops
    from nbcompile.engine import timing

    real = timing.time_search
    calls: list[list[str]] = []

    def one_burst(workload, configs, **kw):  # the real timer; the first round's finalist as if under a burst
        rows = real(workload, configs, **kw)
        calls.append([name for name, _, _ in configs])
        if len(calls) == 1:
            for row in rows:
                if row.timed and row.config != "all compile":  # every finalist but the start
                    row.min_s, row.median_s, row.max_s = 0.2, 0.2, 0.25
        return rows

    monkeypatch.setattr(finalist_ops.timing, "time_search", one_burst)
    session = _session(ip, CELL5, "f(x)")
    result = search_ops.Searcher(session.workload, 120, report=session.report).run()
    best = result.best
    assert best is not None and best is not result.start and not best.rejected, (result.summary(), result.plan)
    assert len(calls) >= 2, calls
    # the second round timed the suspect first and the start after it
    assert calls[1][0] == best.describe() and calls[1][-1] == result.start.describe(), calls
    assert best.min_s is not None and best.min_s < 0.2, best

    # slower in both rounds: rejected, as before
    calls.clear()

    def always_slow(workload, configs, **kw):
        rows = real(workload, configs, **kw)
        calls.append([name for name, _, _ in configs])
        for row in rows:
            if row.timed and row.config == best.describe():
                row.min_s, row.median_s, row.max_s = 0.2, 0.2, 0.25
        return rows

    monkeypatch.setattr(finalist_ops.timing, "time_search", always_slow)
    result = search_ops.Searcher(session.workload, 120, report=session.report).run()
    slowed = [t for t in result.trials if t.rejected.endswith("ms)") and "slower than the start" in t.rejected]
    assert slowed and result.best is not slowed[0], (result.summary(), [t.rejected for t in result.trials])
    assert any(names[0] == slowed[0].describe() and len(names) >= 2 for names in calls[1:]), calls


def test_a_result_cut_short_by_the_budget_says_so(ip):
    session = _session(ip, CELL5, "f(x)")
    result = search_ops.Searcher(session.workload, 0.01, report=session.report).run()
    assert result.state == "budget" and result.budget_bound
    assert "budget" in result.budget_bound and any("budget" in line for line in result.lines()[1:])
    done = search_ops.Searcher(session.workload, 120, report=session.report).run()
    assert done.state == "done" and not done.budget_bound


# --- 6: a start that could not be tried reads "not tried" ----------------------------------------------

def test_a_refused_start_reads_not_tried_not_zero(ip):
    session = _session(ip, """\
        import torch
        STATE = {"steps": (i for i in range(3)), "w": torch.ones(4)}  # a generator: no copy of it can be made
        def helper(x):
            torch._dynamo.graph_break()
            return x * STATE["w"]
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """, "f(x)")
    assert session.report.break_count >= 1
    result = session.fix(budget_s=20)
    start = result.start
    assert start.breaks is None and start.recompiles is None and not start.tried
    assert start.error.startswith("not tried")
    text = repr(result)
    assert "not tried" in text and "breaks 0" not in text
    assert "not tried" in result._repr_html_()
    assert not result.applied and session.toggles["helper"] == "compile"



def test_a_search_cut_short_never_says_untried_modes_failed(ip):
    session = _session(ip, """\
        import torch
        def helper(x):
            torch._dynamo.graph_break()
            return x * 2
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """, "f(x)")
    result = search_ops.Searcher(session.workload, 0.01, report=session.report).run()
    assert result.state == "budget" and len(result.trials) <= 2, [t.describe() for t in result.trials]
    assert result.unremovable
    for line in result.unremovable:
        assert "failed to compile or failed the check" not in line, line
        assert "was tried" in line or "did not try" in line, line
        assert "budget ran out" in line, line
        assert line.startswith("helper (cell line 4)"), line  # as the user wrote it, never <ipython-input-...>


# --- found by the adversarial pass: other ways to reach a global or a module ----------------------------

VARIANTS = {  # setup line(s), the helper's read, the user's later change
    "numpy_float": ("import numpy as np\nSCALE = np.float64(2.0)", "x * SCALE", "SCALE = np.float64(5.0)"),
    "dict_with_none": ('CFG = {"scale": 2.0, "note": None}', 'x * CFG["scale"]', 'CFG["scale"] = 5.0'),
    "class_attribute": ("class Cfg:\n    scale = 2.0", "x * Cfg.scale", "Cfg.scale = 5.0"),
    "module_imported_inside": ("", "x * __import__('nbharm_cfg').SCALE", "import nbharm_cfg\nnbharm_cfg.SCALE = 5.0"),
    "long_list": ("SCALES = [2.0] * 100", "x * SCALES[0]", "SCALES[0] = 5.0"),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_kind_of_changing_global_is_proven_or_not_judged(ip, make_module, variant):
    make_module("nbharm_cfg", "SCALE = 2.0\n")
    setup, read, change = VARIANTS[variant]
    if variant == "module_imported_inside":  # an import statement inside the helper
        helper = "    import nbharm_cfg\n    y = x * nbharm_cfg.SCALE\n"
    else:
        helper = f"    y = {read}\n"
    body = (f"import torch\n{setup}\ndef helper(x):\n    torch._dynamo.graph_break()\n{helper}    return y\n"
            "def f(x):\n    return helper(x.sin()).cos()\n"
            "x = torch.randn(4, generator=torch.Generator().manual_seed(0))\n")
    run_compile_cell(ip, '--backend aot_eager --no-panel --entry f --run "f(x)"', body)
    session = nbcompile.last()
    result = session.fix(budget_s=600)
    for t in result.trials:
        if t.toggles.get("helper") in ("allow_in_graph", "nonstrict_trace") and not t.options:
            assert not t.admissible and ("stale" in t.rejected or "not judged" in t.rejected), t.rejected
    ip.run_cell(change)
    ns = ip.user_ns
    assert torch.allclose(ns["f"](ns["x"]), (ns["x"].sin() * 5.0).cos()), (variant, session.toggles)


@pytest.mark.parametrize("reach", ["importlib.import_module", "sys.modules", "__import__"])
def test_a_module_reached_without_an_import_statement_sees_one_run(ip, make_module, reach):
    module = make_module("nbharm_counted", "calls = 0\n")
    get = {"importlib.import_module": 'importlib.import_module("nbharm_counted")',
           "sys.modules": 'sys.modules["nbharm_counted"]', "__import__": '__import__("nbharm_counted")'}[reach]
    session = _session(ip, f"""\
        import importlib, sys
        import torch
        def helper(x):
            m = {get}
            m.calls += 1
            torch._dynamo.graph_break()
            return x * 2
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """, "f(x)")
    assert module.calls == 1  # the cell's own run; the check's eager run was caught and put back
    assert not session.report.check.compared and "nbharm_counted.calls" in session.report.check.message
    search_ops.Searcher(session.workload, 15, report=session.report).run()
    assert module.calls == 1



def _file_cell(log: object, sink: str) -> str:
    return textwrap.dedent(f"""\
        import torch, logging
        lg = logging.getLogger("nbc_search_harm_file")
        lg.propagate = False
        lg.handlers[:] = [logging.FileHandler({str(log)!r})]
        lg.setLevel(logging.INFO)
        {sink}
        def helper(x):
            lg.info("helper called")
            print("helper printed")
            {"print('helper wrote', file=sink)" if sink else ""}
            return x * 2
        def f(x):
            y = helper(x.sin())
            torch._dynamo.graph_break()
            return y.cos()
        x = torch.randn(4)
        """)


def test_a_log_file_gets_the_cells_lines_only_never_the_searchs_or_a_toggles(ip, tmp_path, capsys):
    """A helper that logs to a FileHandler and prints: the cell's run writes its line once; the search (its
    trials, proofs, timing and the re-run of the configuration it applies, on copies) and toggles write
    nothing there and print nothing into the notebook (before: thousands of lines from one 30 s search)."""
    log = tmp_path / "train.log"
    run_compile_cell(ip, '--backend aot_eager --no-panel --entry f --run "f(x)"', _file_cell(log, ""))
    assert len(log.read_text().splitlines()) == 1
    capsys.readouterr()
    result = nbcompile.last().fix(budget_s=600)
    assert len([t for t in result.trials if t.error is None]) >= 2, result  # the search did run
    ip.run_cell("%nbcompile set helper disable")
    ip.run_cell("%nbcompile set helper compile")
    assert len(log.read_text().splitlines()) == 1  # the cell's line, never the search's thousands
    assert "helper printed" not in capsys.readouterr().out.splitlines()


def test_a_run_that_writes_to_an_open_file_is_not_tried_on_copies(ip, tmp_path):
    out = tmp_path / "out.txt"
    body = _file_cell(tmp_path / "train.log", f"sink = open({str(out)!r}, 'w', buffering=1)")
    run_compile_cell(ip, '--backend aot_eager --no-panel --entry f --run "f(x)"', body)
    result = nbcompile.last().fix(budget_s=600)
    assert "`sink` cannot be copied" in str(result), result
    assert len(out.read_text().splitlines()) == 1


# --- adversarial pass 24: custom_op staleness, the whole of Session.fix in its budget, errored starts ---

def test_a_custom_op_whose_shape_follows_a_global_is_proven_stale_and_never_chosen(ip):
    session = _session(ip, """\
        import torch
        N = 3
        def helper(x):
            torch._dynamo.graph_break()
            return x[:N] * 2
        def f(x):
            y = helper(x.sin())
            return y.cos() * y.shape[0]
        x = torch.ones(6)
        """, "f(x)")
    result = session.fix(budget_s=600)
    custom = [t for t in result.trials if t.toggles.get("helper") == "custom_op"]
    assert custom and all(t.stale.startswith("stale: with N 3 -> 4") and "custom_op" in t.stale for t in custom)
    assert all(t.rejected for t in custom)
    assert session.toggles["helper"] != "custom_op"
    ns = ip.user_ns
    ns["N"] = 5  # the user changes the global: the compiled function follows it
    x = ns["x"]
    assert torch.allclose(ns["f"](x), (x.sin()[:5] * 2).cos() * 5)


SLOW_CELL = """\
    import torch, time
    def helper(x):
        torch._dynamo.graph_break()
        return x * 2
    def other(x):
        torch._dynamo.graph_break()
        return x + 1
    def f(x):
        time.sleep(0.4)
        return other(helper(x.sin())).cos()
    x = torch.ones(4)
    """


def test_session_fix_counts_applying_and_proving_in_its_budget(ip):
    session = _session(ip, SLOW_CELL, "f(x)")
    budget = 5.0
    began = time.perf_counter()
    result = session.fix(budget_s=budget)
    took = time.perf_counter() - began
    longest = max(t.seconds for t in result.trials)
    # everything it did is in elapsed_s (the apply's re-run and the new report's proofs included) ...
    assert took - result.elapsed_s < 0.5, (took, result.elapsed_s)
    # ... and it ends within the budget plus one trial (and the apply's difference from the start's trial)
    assert took < budget + longest + 1.5, (took, [(t.describe(), t.at_s, t.seconds) for t in result.trials])
    if result.applied:  # the proofs the apply started got what was left: none, here
        fixes = [f for b in session.report.breaks for f in b.fixes if f.toggles]
        assert all(f.verified is not None or "budget" in f.effect for f in fixes), [f.effect for f in fixes]


def test_proofs_after_applying_a_choice_stop_at_the_searchs_end(ip):
    from nbcompile.engine import trial

    session = _session(ip, SLOW_CELL.replace("time.sleep(0.4)", "pass"), "f(x)")
    session._trials.clear()
    session.apply_config({"helper": "disable"}, prove_by=time.perf_counter())  # the search's end: now
    fixes = [f for b in session.report.breaks for f in b.fixes if f.toggles]
    assert fixes and all(f.verified is None and f.effect == trial.OVER_SEARCH_BUDGET for f in fixes)
    session.apply_config({"helper": "compile"})  # no end given: the proofs get their own budget, as before
    fixes = [f for b in session.report.breaks for f in b.fixes if f.toggles]
    assert any(f.verified is not None for f in fixes)


def test_a_start_whose_run_raised_reads_failed_never_zero_breaks_or_check_ok(ip):
    session = _session(ip, """\
        import torch
        def helper(x):
            torch._dynamo.graph_break()
            return x * 2
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        SEEN = id(x)
        """, "f(x) if id(x) == SEEN else undefined_name")  # on copies the run raises
    assert session.report.break_count >= 1
    result = session.fix(budget_s=20)
    start = result.start
    assert start.error.startswith("the run raised NameError")
    assert start.breaks is None and start.recompiles is None and not start.check_ok and not start.tried
    assert start.status() == "failed"
    html = result._repr_html_().replace(" ", "")
    assert ">ok<" not in html and "<td>allcompile</td><td>failed</td><td>failed</td><td>failed</td>" in html
    assert "own run failed" in result.summary() and "breaks 0" not in repr(result)
    assert not result.applied and session.toggles["helper"] == "compile"


def test_a_run_that_takes_a_librarys_lock_is_tried_with_the_same_lock(ip, make_module):
    """A library's module-level lock (huggingface_hub's tree-cache lock, read by transformers 5.24 models'
    forward) cannot be deep-copied: every trial of such a model was refused ("cannot be copied"). A lock holds
    no data: the copies share it, the run takes and releases it, and the search runs."""
    make_module("locked_cache", textwrap.dedent("""\
        import threading
        LOCK = threading.RLock()
        CACHE = {}
        def cached_scale(key):
            with LOCK:
                return CACHE.setdefault(key, 2.0)
        """))
    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(x)"', textwrap.dedent("""\
        import torch
        import locked_cache
        def f(x):
            y = x.sin() * locked_cache.cached_scale("s")
            print("y", y)
            return y.cos()
        x = torch.randn(4)
        """))
    import locked_cache

    lock = locked_cache.LOCK
    result = nbcompile.last().fix(budget_s=600)
    assert "cannot be copied" not in str(result), result
    assert len([t for t in result.trials if t.error is None]) >= 2, result  # the search did run
    assert result.best is not None and result.best.breaks < result.start.breaks, result  # the print's break
    assert locked_cache.LOCK is lock and lock.acquire(blocking=False)  # the same lock, not left held
    lock.release()
