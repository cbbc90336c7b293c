"""Fix-search trials side by side in forked processes (``engine/forked.py``): a child answers with its
trial's outcome, a child that hangs is killed at its limit and reaped, and a search run with forks tries
the same configurations, in the same order, with the same counts as one run in a single process."""

from __future__ import annotations

import os
import textwrap
import time

import pytest
import torch

import nbcompile
from nbcompile.engine import forked

from nbhelpers import run_compile_cell

pytestmark = pytest.mark.skipif(forked.why_not() != "", reason=f"no forked trials here: {forked.why_not()}")


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_a_child_answers_runs_torch_ops_on_one_thread_and_is_reaped():
    big = torch.randn(256, 256)
    (big @ big).sum()  # the parent's OpenMP pool is up: a child that used it would hang

    def work():
        return os.getpid(), torch.get_num_threads(), float((big @ big).sum())

    child = forked.start(work, time.perf_counter() + 60)
    assert child is not None
    pid = child.pid
    kind, (child_pid, threads, total) = child.answer()
    assert kind == "ok" and child_pid == pid != os.getpid() and threads == 1
    assert abs(total - float((big @ big).sum())) <= 1e-3 * max(1.0, abs(total))
    assert _reaped(pid)


def test_a_child_that_raises_says_why_and_one_that_hangs_is_killed_at_its_limit():
    def fails():
        raise ValueError("no such thing")

    child = forked.start(fails, time.perf_counter() + 60)
    assert child is not None and child.answer() == ("error", "ValueError: no such thing")
    child = forked.start(lambda: time.sleep(600), time.perf_counter() + 1.0)
    assert child is not None
    pid = child.pid
    began = time.perf_counter()
    assert child.answer() == ("timeout", "")
    assert time.perf_counter() - began < 10 and _reaped(pid)


CELL = textwrap.dedent("""\
    import torch
    def helper(x):
        s = x.sum().item()
        return x * (2.0 if s > 0 else 3.0)
    def gate(h):
        if h.mean() > 0:
            h = h * 2
        else:
            h = h - 1
        return h
    def f(x):
        return gate(helper(x.sin())).cos()
    xs = [torch.randn(4, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    """)


@pytest.mark.xfail(strict=False, reason="known race, not fixed yet: in 2 of 3 clean-clone CI runs one custom_op "
                   "trial in a forked child raised 'RuntimeError: dictionary changed size during iteration' "
                   "that the same trial in one process does not")
def test_a_search_with_forked_trials_tries_what_one_process_tries(ip, monkeypatch):
    def search(processes: str):
        monkeypatch.setenv(forked.ENV, processes)
        run_compile_cell(ip, '--backend eager --no-panel --entry f --run "[f(x) for x in xs]"', CELL)
        session = nbcompile.last()
        xs = [x.clone() for x in ip.user_ns["xs"]]
        result = session.fix(budget_s=600)
        assert all(torch.equal(a, b) for a, b in zip(xs, ip.user_ns["xs"], strict=True))
        assert result.state == "done", result.state
        return [(t.label, t.breaks, t.splits, t.check_ok, t.rejected[:40]) for t in result.trials], \
            result.best.describe()

    monkeypatch.setattr(forked, "MAX_AT_ONCE", 2)
    alone, best_alone = search("1")
    side_by_side, best_side = search("2")
    assert forked.at_once() == 2 or len(os.sched_getaffinity(0)) < 2
    assert sorted(side_by_side) == sorted(alone) and best_side == best_alone
    assert [t[0] for t in side_by_side] == [t[0] for t in alone]  # the same order too


def test_an_interrupted_search_leaves_no_child_running(ip, monkeypatch):
    monkeypatch.setenv(forked.ENV, "2")
    monkeypatch.setattr(forked, "MAX_AT_ONCE", 2)
    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "[f(x) for x in xs]"', CELL)
    session = nbcompile.last()
    started: list[tuple[int, forked.Child]] = []
    real_start = forked.start

    def start(work, limit):
        child = real_start(work, limit)
        if child is not None:
            started.append((child.pid, child))
        return child

    monkeypatch.setattr(forked, "start", start)
    calls = []

    def progress(result):  # the user interrupts the kernel while a child still runs its trial
        calls.append(1)
        if started:
            raise KeyboardInterrupt

    from nbcompile.engine import search as search_ops

    # stopped: the best found so far is kept
    result = search_ops.Searcher(session.workload, 60, progress, report=session.report).run()
    assert started and result.state == "stopped", result.state
    for pid, child in started:
        assert child.pid == 0 and child.fd == -1
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
