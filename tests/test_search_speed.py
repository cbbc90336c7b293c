"""The fix search's reach per second (issue 23, point 4): trials count Dynamo's view (backend eager, no
AOT trace), configurations the lint rules out are not run, ``--dynamic`` is tried only where the
session recompiles on a size, and the chosen configuration is proven on the session's own trial backend before
it is applied. Counted, never timed."""

from __future__ import annotations

import re
import textwrap

import nbcompile
from nbcompile.engine import search as search_ops

from nbhelpers import run_compile_cell

#: allow_in_graph on ``helper`` holds on backend eager (the function runs at each call) but not under
#: AOTAutograd, which traces it with fake tensors: its ``.item()`` branch cannot be traced there.
CELL = textwrap.dedent("""\
    import torch
    def helper(x):
        s = x.sum().item()
        return x * (2.0 if s > 0 else 3.0)
    def f(x):
        return helper(x.sin()).cos()
    xs = [torch.randn(4, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    """)


def test_trials_count_on_eager_and_the_choice_is_proven_on_the_sessions_backend(ip):
    run_compile_cell(ip, '--backend aot_eager --no-panel --entry f --run "[f(x) for x in xs]" '
                         '--dynamo-config capture_scalar_outputs=False', CELL)
    session = nbcompile.last()
    searcher = search_ops.Searcher(session.workload, 60, report=session.report)
    assert searcher.spec.backend == "eager" and searcher.verify_spec.backend == "aot_eager"
    result = searcher.run()
    best = result.best
    assert best is not None and best.proven and best.breaks == 0 and best.check_ok
    # what held on eager only was proven on aot_eager and rejected there, never chosen
    failed_proof = [t for t in result.trials if t.rejected.startswith("on aot_eager")]
    for t in failed_proof:
        assert t is not best and not t.admissible
    assert not any(t.toggles.get("helper") == "allow_in_graph" and t is best for t in result.trials)


def test_a_configuration_the_lint_rules_out_is_not_run(ip):
    cell = textwrap.dedent("""\
        import torch
        CALLS = [0]
        def counter(x):
            CALLS[0] += 1
            print("calls", CALLS[0])
            return x + 1
        def f(x):
            return counter(x.sin()).cos()
        x = torch.randn(4)
        """)
    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(x)"', cell)
    result = nbcompile.last().fix(budget_s=600)
    ruled = [t for t in result.trials if t.status() == "ruled out"]
    assert ruled and all(t.seconds == 0.0 and t.breaks is None for t in ruled)
    assert {t.toggles["counter"] for t in ruled} <= {"allow_in_graph", "nonstrict_trace"}
    assert all("lint warns" in t.rejected for t in ruled)
    assert result.best is None or result.best not in ruled
    # no --dynamic trial: the session does not recompile
    assert nbcompile.last().report.recompile_count == 0 and not any(t.options.get("dynamic") for t in result.trials)


def test_a_trial_past_its_deadline_is_cut_at_its_next_graph_and_counts_nothing(ip):
    import time

    from nbcompile.engine import trial

    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "[f(x) for x in xs]"', CELL)
    session = nbcompile.last()
    spec = session.workload.spec(session.workload.run_code)
    cut = trial.run(spec, session.toggles, deadline=time.perf_counter() - 1.0)
    assert cut.error is not None and cut.error.startswith(trial.NOT_FINISHED), cut.error
    assert cut.check is None and cut.graphs == 0 and cut.breaks == 0
    whole = trial.run(spec, session.toggles, deadline=time.perf_counter() + 3600)
    assert whole.error is None and whole.graphs > 0 and whole.check is not None and whole.check.ok


def test_a_search_whose_start_cannot_end_in_its_budget_says_so_and_applies_nothing(ip):
    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "[f(x) for x in xs]"', CELL)
    session = nbcompile.last()
    # over before the start's first graph compiles
    searcher = search_ops.Searcher(session.workload, 1e-6, report=session.report)
    result = searcher.run()
    assert result.state == "budget" and result.budget_bound, (result.state, result.budget_bound)
    assert result.best is None or result.best is result.start
    assert len(result.trials) <= 1


def test_dynamic_is_tried_for_a_recompile_on_sizes_and_not_for_one_on_dtypes(ip):
    cell = textwrap.dedent("""\
        import torch
        def f(x):
            print("shape", x.shape[0])
            return x.sin() + 1
        xs = [torch.randn(4), torch.randn(4, dtype=torch.float64)]
        ys = [torch.randn(4), torch.randn(7)]
        """)
    run_compile_cell(ip, '--backend eager --no-panel --no-dynamic --entry f --run "[f(x) for x in xs]"', cell)
    session = nbcompile.last()
    assert session.report.recompile_count >= 1
    dtypes = search_ops.Searcher(session.workload, 60, report=session.report).run()
    assert not any(t.options.get("dynamic") for t in dtypes.trials), [t.label for t in dtypes.trials]
    run_compile_cell(ip, '--backend eager --no-panel --no-dynamic --entry f --run "[f(y) for y in ys]"', cell)
    session = nbcompile.last()
    assert session.report.recompile_count >= 1
    sizes = search_ops.Searcher(session.workload, 60, report=session.report).run()
    assert any(t.options.get("dynamic") and t.label == "--dynamic" for t in sizes.trials), \
        [t.label for t in sizes.trials]


def test_a_trial_puts_back_dynamos_guard_latency_profile():
    import torch
    import torch._dynamo.guards as guards

    from nbcompile.core import torch_compat

    original = guards.profile_guard_manager

    @torch.compile(backend="eager")
    def f(x):
        return x + 1

    with torch_compat.no_guard_latency_profile():
        assert guards.profile_guard_manager is not original
        f(torch.ones(2))
    assert guards.profile_guard_manager is original


def test_a_budget_that_leaves_no_trial_besides_the_start_says_how_much_to_give(ip, monkeypatch):
    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "[f(x) for x in xs]"', CELL)
    session = nbcompile.last()
    monkeypatch.setattr(search_ops.Searcher, "_estimate", lambda self, spec: 100.0)  # every trial looks too long
    # one trial at a time (a second core runs the repair's first set beside the start, for no time of its own)
    monkeypatch.setenv(search_ops.forked.ENV, "1")
    result = search_ops.Searcher(session.workload, 60, report=session.report).run()
    assert result.start is not None and result.start.tried
    assert [t.label for t in result.trials if t.tried] == ["start"]
    advised = re.search(r"give the search at least (\d+) s", result.budget_bound)
    # the trials it asks time for run side by side where this machine has the cores
    assert advised is not None and int(advised[1]) >= search_ops.SEARCH_AT_LEAST * 100 / search_ops.forked.at_once(), \
        result.budget_bound
    assert "0 trials besides the start" in result.budget_bound
    assert result.advice_s == int(advised[1]) and f"give the search {int(advised[1])} s" in result.summary()


def test_a_search_cut_with_configurations_untried_says_how_much_budget_would_try_them(ip, monkeypatch):
    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "[f(x) for x in xs]"', CELL)
    session = nbcompile.last()

    def estimate(self, spec):  # the first trials fit the budget, every later one looks too long
        return 0.0 if sum(1 for t in self.result.trials if t.tried) < 3 else 100.0

    monkeypatch.setattr(search_ops.Searcher, "_estimate", estimate)
    result = search_ops.Searcher(session.workload, 60, report=session.report).run()
    assert result.state == "budget"
    advised = re.search(r"with (\d+) configurations? untried .* give the search at least (\d+) s to try them",
                        result.budget_bound)
    assert advised is not None, result.budget_bound
    untried, seconds = int(advised[1]), int(advised[2])
    assert untried >= 1 and seconds >= untried * 100 / search_ops.forked.at_once()
    assert result.advice_s == seconds and result.untried == untried


def test_a_trace_that_does_not_end_is_interrupted_past_its_deadline(ip, monkeypatch):
    """A remedy can make one frame's trace run for minutes and gigabytes (VitsModel's search at 180 s: a trial
    grew past 11 GB and ran 14 minutes): no graph reaches the backend, whose cut never comes. Past its deadline
    (and ``HARD_GRACE_S``) the run is interrupted from outside, inside Dynamo's trace, and counts nothing; the
    process goes on as before (no interrupt left pending, Dynamo compiles the next call)."""
    import time

    import torch

    from nbcompile.engine import trial

    cell = textwrap.dedent("""\
        import torch
        def f(x):
            n = 0
            for i in range(5_000_000):  # Dynamo unrolls it: one trace of minutes, no graph until it ends
                n = n + i
            return x * n
        x = torch.ones(3)
        """)
    run_compile_cell(ip, "--backend eager --no-panel --entry f", cell)
    session = nbcompile.last()
    spec = session.workload.spec(compile("f(x)", "<trial>", "eval"))
    monkeypatch.setattr(trial, "HARD_GRACE_S", 0.5)
    cut = trial.run(spec, session.toggles, deadline=time.perf_counter() + 0.5)
    assert cut.error is not None and cut.error.startswith(trial.NOT_FINISHED), cut.error
    assert cut.check is None and cut.graphs == 0
    time.sleep(0.5)  # an interrupt left pending would land here
    assert torch.compile(lambda t: t + 1, backend="eager")(torch.ones(2)).sum().item() == 4.0
