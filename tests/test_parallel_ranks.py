"""Ranks read in parallel (issue 37): by worker processes, or on a Dask cluster, a load gives what a load in
process gives (the same reports, problems, divergences and bytes); a worker that fails loses no rank."""

from __future__ import annotations

import gzip
import pathlib
import shutil
import warnings

import pytest

import nbcompile
from nbcompile.capture import ranks as ranks_ops

TRACES = pathlib.Path(__file__).parent / "data" / "traces"


def _job(tmp_path: pathlib.Path, copies: int = 3) -> pathlib.Path:
    """A job of ``2 * copies`` ranks from the recorded 2-rank run (rank 1 recompiles), one log damaged."""
    out = tmp_path / "job"
    out.mkdir()
    for c in range(copies):
        for rank in (0, 1):
            text = gzip.decompress((TRACES / "torchrun2" / f"dedicated_log_torch_trace_rank_{rank}.log.gz")
                                   .read_bytes())
            (out / f"dedicated_log_torch_trace_rank_{2 * c + rank}_x.log").write_bytes(text)
    damaged = out / f"dedicated_log_torch_trace_rank_{2 * copies - 1}_x.log"
    damaged.write_bytes(damaged.read_bytes()[: len(damaged.read_bytes()) * 2 // 3])  # cut mid-record
    return out


def _load(path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return nbcompile.load(path, **kwargs)


def _same(a, b) -> None:
    assert sorted(a.ranks) == sorted(b.ranks)
    for rank in a.ranks:
        assert a.ranks[rank] == b.ranks[rank], rank
    assert a.errors == b.errors and a.divergences == b.divergences and a.bytes == b.bytes
    assert a.files == b.files and a.logs == b.logs and a.summary() == b.summary()


def test_worker_processes_give_what_a_load_in_process_gives(tmp_path):
    job = _job(tmp_path)
    here = _load(job, workers=1)
    assert len(here.ranks) == 6 and any("rank_5_x.log:" in e for e in here.errors)  # the cut log is named
    assert any("rank 1" in d for d in here.divergences)
    apart = _load(job, workers=2)
    _same(here, apart)
    assert ranks_ops.parallel_wanted([(r, [p]) for r, p in here.files.items()], 2)
    assert not ranks_ops.parallel_wanted([(r, [p]) for r, p in here.files.items()], 1)


@pytest.mark.parametrize("python", ["false", "/nonexistent/python"])  # exits with 1; cannot start at all
def test_a_worker_that_fails_loses_no_rank(tmp_path, monkeypatch, python):
    job = _job(tmp_path, copies=1)
    here = _load(job, workers=1)
    monkeypatch.setattr(ranks_ops.sys, "executable", shutil.which(python) or python)
    apart = _load(job, workers=2)
    assert sorted(apart.ranks) == sorted(here.ranks)
    assert all(apart.ranks[r] == here.ranks[r] for r in here.ranks)
    assert any("a worker reading rank(s)" in s and "read in this process instead" in s for s in apart.errors)


def test_shares_balance_bytes_and_keep_every_rank(tmp_path):
    sizes = [50, 10, 10, 10, 10, 10, 1]
    jobs = []
    for rank, size in enumerate(sizes):
        path = tmp_path / f"r{rank}.log"
        path.write_bytes(b"x" * size)
        jobs.append((rank, [str(path)]))
    parts = ranks_ops.shares(jobs, 2)
    assert sorted(job for part in parts for job in part) == jobs
    loads = sorted(sum(sizes[rank] for rank, _ in part) for part in parts)
    assert loads == [50, 51]
    assert ranks_ops.shares(jobs[:1], 8) == [jobs[:1]]


def test_a_dask_client_reads_the_ranks(tmp_path):
    distributed = pytest.importorskip("distributed")
    job = _job(tmp_path, copies=1)
    here = _load(job, workers=1)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as \
            cluster, distributed.Client(cluster) as client:
        apart = _load(job, client=client)
    _same(here, apart)



def test_ranks_with_the_same_compiles_do_not_diverge():
    """A long job's recompile of ``f16`` made its resume function anew, under a frame id of its own: one code is
    ``33/0``, then ``34/0`` and ``34/1`` (as a real 300-function trace has it). The ranks' compiles are matched by
    their order per code, never by the compile id's second number, which once compared one rank's ``34/0``
    with the other's ``33/0`` and said that identical ranks traced other sizes."""
    import copy

    from nbcompile.capture.divergence import divergences
    from nbcompile.model.report import Frame, Report

    report = Report(title="rank 0", backend="(from the trace)")
    resume = "torch_dynamo_resume_in_f16_at_117"
    for cid, function, line, size in [("32/0", "f16", 114, 4), ("33/0", resume, 117, 4), ("32/1", "f16", 114, 6),
                                      ("34/0", resume, 117, 6), ("32/2", "f16", 114, 8), ("34/1", resume, 117, 8)]:
        name = "x" if function == "f16" else "y"
        report.frames.append(Frame(cid, function, [], 0, 0.1, "big_cell.py", line, 1, cache=["miss"],
                                   collectives=["all_reduce"], inputs={name: f"[{size}, 16]"}))
    other = copy.deepcopy(report)
    assert divergences({0: report, 1: other}) == []
    other.frames[3].inputs = {"y": "[7, 16]"}  # one rank really traced another size: said, with both sizes
    said = divergences({0: report, 1: other})
    assert len(said) == 1 and "compile 34/0" in said[0] and "[7, 16] against [6, 16]" in said[0], said


def test_a_worker_that_dies_midway_keeps_what_it_returned_and_the_rest_is_read_here(tmp_path, monkeypatch):
    """Each worker returns its first rank, then exits 3 (a crash midway): the ranks it returned are taken from it
    as it wrote them, only the others are read in this process, and the load equals a load in process."""
    import sys

    job = _job(tmp_path, copies=2)
    here = _load(job, workers=1)
    script = tmp_path / "python"
    script.write_text(
        "#!/bin/sh\nshift 2\nexec " + sys.executable + " -c '\n"
        "from nbcompile.capture import ranks\n"
        "real, done = ranks.read_rank, []\n"
        "def once(rank, paths):\n"
        "    if done:\n"
        "        raise SystemExit(3)\n"
        "    done.append(rank)\n"
        "    return real(rank, paths)\n"
        "ranks.read_rank = once\n"
        "ranks.main()\n' \"$@\"\n")
    script.chmod(0o755)
    monkeypatch.setattr(ranks_ops.sys, "executable", str(script))
    apart = _load(job, workers=2)
    assert sorted(apart.ranks) == sorted(here.ranks)
    assert all(apart.ranks[r] == here.ranks[r] for r in here.ranks)
    failed = [s for s in apart.errors if "a worker reading rank(s)" in s]
    assert len(failed) == 2 and all("exit 3" in s for s in failed), apart.errors
    named = sorted(int(r) for s in failed for r in s.split("rank(s) ")[1].split(" failed")[0].split(", "))
    assert len(named) == 2  # of 4 ranks, each worker returned one: only the 2 others were read here


def test_results_cross_with_their_guards_numbered_once_per_worker(tmp_path):
    """A worker numbers the guard texts it sends (each text crosses once); the reports read back are the same."""
    job = _job(tmp_path, copies=1)
    result = ranks_ops.read_rank(0, [str(job / "dedicated_log_torch_trace_rank_0_x.log")])
    again = ranks_ops.read_rank(0, [str(job / "dedicated_log_torch_trace_rank_0_x.log")])
    guards = [list(f.guards) for f in result.report.frames]
    assert any(guards)
    table: dict[str, int] = {}
    new = ranks_ops.encode_guards(result, table)
    assert len(new) == len(set(new)) == len(table) and set(new) == {g for gs in guards for g in gs}
    assert ranks_ops.encode_guards(again, table) == []  # the same rank again: nothing new to send
    assert [[new[i] for i in f.guards] for f in again.report.frames] == guards


def test_the_collector_pause_leaves_the_collector_as_it_was():
    import gc

    with ranks_ops.gc_paused():
        assert not gc.isenabled()
        made = [[i] for i in range(1000)]
    assert gc.isenabled() and gc.get_freeze_count() == 0 and made[999] == [999]
    gc.disable()
    try:
        with ranks_ops.gc_paused():
            pass
        assert not gc.isenabled()  # off before: off after
    finally:
        gc.enable()
    kept = [[1]]
    gc.freeze()  # someone's own frozen objects stay frozen
    try:
        frozen = gc.get_freeze_count()
        with ranks_ops.gc_paused():
            kept.append([2])
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
