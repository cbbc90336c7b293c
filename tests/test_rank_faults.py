"""The cross-rank doctor, live (issue 39): real ``torchrun`` gloo jobs on CPU with one injected fault each
(``benchmarks/rank_jobs/fault_job.py``), watched by ``nbcompile.launch`` as a user would, with a short process
group timeout (20 s) so a hang dies fast. Each fault kind is caught before the timeout with its cause named
(rank, frame, line, values), its remedy run again shows the divergence gone, and healthy jobs raise nothing.
The doctor's own rules (who waits, for how long, what is in flux) are checked on reports made by hand."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 20.0  # short enough that a hang dies fast, long enough for a loaded 2-core CI machine


def _faults():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module("rank_faults")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


FAULTS = _faults()
CHEAP = [f for f in FAULTS.FAULTS if f.name not in ("cold_cache", "rank_shape_4")]


@pytest.mark.parametrize("fault", CHEAP, ids=[f.name for f in CHEAP])
def test_each_fault_is_caught_before_the_timeout_and_its_remedy_removes_it(fault, tmp_path):
    run = FAULTS._run(fault.env.get("NBC_FAULT", fault.name), fault.ranks, TIMEOUT, dict(fault.env), False, tmp_path)
    judged = FAULTS._judge(fault, run, TIMEOUT)
    assert judged["caught_before_timeout"], run["alarms"]
    assert judged["cause_named"], run["alarms"]
    if fault.hangs:  # the job really died at the watchdog, after the alarm
        assert run["exit"] != 0 and judged["first_alarm_at_s"] < run["ended_s"]
    assert run["first_divergence"] is not None or fault.name.startswith("slow")
    if fault.fix:
        fixed = FAULTS._run(fault.env.get("NBC_FAULT", fault.name), fault.ranks, TIMEOUT, dict(fault.env), True,
                            tmp_path)
        # every rank ran its steps (torchrun's own teardown may still exit 1 now and then: a closed store)
        assert len(fixed["step_ms"]) == fault.ranks and fixed["alarms"] == [] and fixed["first_divergence"] is None, \
            fixed


@pytest.mark.parametrize(("name", "ranks"), [("healthy", 2), ("healthy_recompile", 2), ("healthy", 4)])
def test_healthy_jobs_raise_no_alarm(name, ranks, tmp_path):
    run = FAULTS._run(name, ranks, TIMEOUT, {}, False, tmp_path)
    assert len(run["step_ms"]) == ranks and run["alarms"] == [] and run["first_divergence"] is None, run


def test_a_cold_cache_on_one_rank_is_named_and_warming_it_from_another_rank_removes_it(tmp_path):
    """Inductor: rank 0's FX graph cache warm, rank 1's cold: the miss is named on rank 1; rank 1's cache warmed
    from rank 0's (the remedy) serves both."""
    fault = next(f for f in FAULTS.FAULTS if f.name == "cold_cache")
    env = FAULTS._cold_cache_env(tmp_path, 60.0)
    run = FAULTS._run("cold_cache", 2, 60.0, env, False, tmp_path)
    judged = FAULTS._judge(fault, run, 60.0)
    assert judged["caught_before_timeout"] and judged["cause_named"], run["alarms"]
    fixed = FAULTS._run("cold_cache", 2, 60.0, env, True, tmp_path)
    assert fixed["alarms"] == [] and fixed["first_divergence"] is None, fixed


def test_watch_follows_a_job_started_elsewhere(tmp_path):
    """``nbcompile.watch(DIR)`` on a torchrun job the user started with TORCH_TRACE: the alarm comes while the
    job runs or at its end, and the live rows say what each rank compiled."""
    import nbcompile

    env = {**os.environ, "TORCH_TRACE": str(tmp_path), "NBC_FAULT": "rank_shape", "NBC_PG_TIMEOUT": str(TIMEOUT),
           "NBC_STEPS": "12"}
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                            str(FAULTS.JOB)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    traces = nbcompile.watch(tmp_path, timeout_s=TIMEOUT)
    try:
        job.wait(120)  # (its exit code: torchrun may exit 1 at teardown after every rank finished)
        deadline = time.monotonic() + 30
        while not traces.alarms and time.monotonic() < deadline:
            time.sleep(0.25)
    finally:
        traces.stop()
    recompiles = [a for a in traces.alarms if a.kind == "recompile"]
    assert recompiles and recompiles[0].rank == 1 and "8 -> 10" in recompiles[0].detail
    rows = {row.rank: row for row in traces.live_rows()}
    assert rows[1].recompiles == 1 and rows[0].recompiles == 0 and rows[0].collectives == ["all_reduce"]
    text = traces.summary()
    assert "ALARM recompile: rank 1" in text and "remedy:" in text and "first divergence" in text
    html = traces._repr_html_()
    assert "nbcompile-alarms" in html and "<script" not in html


def test_launch_refuses_bad_input_in_one_line(ip, tmp_path):
    from IPython.core.error import UsageError

    for line, said in [("launch", "usage"), ("launch --nproc two job.py", "--nproc"),
                       (f"launch --nproc 2 {tmp_path / 'missing.py'}", "no such script"),
                       ("launch --timeout -3 x.py", "timeout_s"), ("launch --gpus 2 x.py", "unknown option")]:
        with pytest.raises(UsageError, match=said) as caught:
            ip.run_line_magic("nbcompile", line)
        assert "\n" not in str(caught.value)
    script = tmp_path / "job.py"
    script.write_text("print('hi')\n")
    with pytest.raises(UsageError, match="timeout_s"):
        ip.run_line_magic("nbcompile", f"launch --timeout -3 {script}")
    import nbcompile
    from nbcompile.facades.traces import TraceError

    used = tmp_path / "used"
    used.mkdir()
    (used / "dedicated_log_torch_trace_rank_0_old.log").write_text("")
    for call, said in [(lambda: nbcompile.launch(script, trace_dir=used), "not empty"),
                       (lambda: nbcompile.launch(script, trace_dir=script), "is a file"),
                       (lambda: nbcompile.launch(script, python=str(tmp_path / "nopython")), "no such executable"),
                       (lambda: nbcompile.launch(script, nproc=True), "--nproc"),
                       (lambda: nbcompile.watch(tmp_path, timeout_s=True), "timeout_s")]:
        with pytest.raises(TraceError, match=said) as caught:
            call()
        assert "\n" not in str(caught.value)
    assert sorted(p.name for p in used.iterdir()) == ["dedicated_log_torch_trace_rank_0_old.log"]  # nothing ran


# -- the doctor's rules, on reports made by hand --------------------------------------------------------------

class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _report(*frames):
    from nbcompile.model.report import Frame, Report

    report = Report(title="r")
    for compile_id, function, seconds in frames:
        report.frames.append(Frame(compile_id, function, [], 0, seconds, filename="/job.py", firstlineno=4))
    return report


def _pending(compile_id, function="step"):
    from nbcompile.capture.compilation import Pending

    return Pending(compile_id, filename="/job.py", lineno=4, function=function)


def test_skew_counts_only_ranks_past_their_own_compiles_and_the_time_they_waited():
    from nbcompile.capture.live import Doctor

    clock = _Clock()
    doctor = Doctor(60.0, clock=clock)
    starting = {0: _report(), 1: _report()}  # rank 0 still starts up (nothing compiled): not waiting
    assert doctor.check(starting, {1: [_pending("0/0")]}) == []
    clock.now += 30
    assert doctor.check(starting, {1: [_pending("0/0")]}) == []
    reports = {0: _report(("0/0", "step", 0.3)), 1: _report()}
    assert doctor.check(reports, {1: [_pending("0/0")]}) == []  # rank 0 finished just now: it waited 0 s
    clock.now += 14
    assert doctor.check(reports, {1: [_pending("0/0")]}) == []  # 14 s < 25% of 60 s
    clock.now += 2
    [alarm] = doctor.check(reports, {1: [_pending("0/0")]})
    assert (alarm.kind, alarm.rank, alarm.frame, alarm.where, alarm.cause) == ("skew", 1, "step", "job.py:4",
                                                                              "slow_compile")
    assert "rank 0 has compiled nothing for 16 s" in alarm.detail and alarm.seconds == pytest.approx(46)
    clock.now += 5
    assert doctor.check(reports, {1: [_pending("0/0")]}) == []  # raised once


def test_ranks_compiling_together_are_no_skew_and_a_frame_in_flux_waits():
    from nbcompile.capture.live import Doctor

    clock = _Clock()
    doctor = Doctor(20.0, clock=clock)
    both = {0: _report(("0/0", "step", 1.0)), 1: _report(("0/0", "step", 1.0))}
    for _ in range(5):  # both compile the next frame for long: no one waits
        clock.now += 10
        assert doctor.check(both, {0: [_pending("1/0", "other")], 1: [_pending("1/0", "other")]}) == []
    # rank 0 compiled `other`, rank 1 compiles it now: not "a frame rank 1 never compiled"
    ahead = {0: _report(("0/0", "step", 1.0), ("1/0", "other", 1.0)), 1: both[1]}
    clock.now += 10
    assert doctor.check(ahead, {1: [_pending("1/0", "other")]}) == []
    clock.now += 1
    assert doctor.check(ahead, {}, final=True)[0].cause == "only_frame"  # the job ended with it missing


def test_findings_wait_for_the_grace_and_drop_when_the_other_rank_catches_up():
    from nbcompile.capture.live import Doctor
    from nbcompile.model.report import GuardChange, Recompile

    clock = _Clock()
    doctor = Doctor(60.0, clock=clock)
    assert doctor.grace_s == 15.0  # a quarter of the timeout: a rank a few seconds behind is no alarm
    one = _report(("0/0", "step", 0.1), ("0/1", "step", 0.1))
    one.recompiles.append(Recompile("step", "0/1", "size", [GuardChange("x.shape[0]", "8", "10")]))
    other = _report(("0/0", "step", 0.1))
    assert doctor.check({0: other, 1: one}, {}) == []
    clock.now += 10
    assert doctor.check({0: other, 1: one}, {}) == []
    other.frames.append(one.frames[1])  # rank 0 recompiles the same 10 s later: a healthy job
    other.recompiles.append(Recompile("step", "0/1", "size", [GuardChange("x.shape[0]", "8", "13")]))  # its size
    clock.now += 20
    assert doctor.check({0: other, 1: one}, {}) == [] and doctor.check({0: other, 1: one}, {}, final=True) == []
    late = Doctor(60.0, clock=clock)  # the other never catches up: raised once the grace is over
    alone = _report(("0/0", "step", 0.1))
    assert late.check({0: alone, 1: one}, {}) == []
    clock.now += 16
    [alarm] = late.check({0: alone, 1: one}, {})
    assert (alarm.kind, alarm.rank, alarm.at) == ("recompile", 1, 16.0) and "8 -> 10" in alarm.detail


def _guarded(*guards):
    report = _report(("0/0", "step", 0.1))
    report.frames[0].guards = list(guards)
    return report


def test_per_rank_values_by_design_pipeline_stages_and_ranks_behind_are_no_alarm():
    from nbcompile.capture.live import Doctor
    from nbcompile.model.report import Graph

    def alarms(reports):
        return Doctor(60.0, live=False).check(reports, {}, final=True)

    # a rank's device and process group differ by design; its RANK baked into the graph does not
    by_design = {r: _guarded(f"EQUALS_MATCH: L['self'].device_index == {r}",
                             f"EQUALS_MATCH: G['pg'].group_name == 'group_{r}'", "EQUALS_MATCH: G['RANK'] == 0")
                 for r in range(4)}
    assert alarms(by_design) == []
    by_design[3].frames[0].guards[2] = "EQUALS_MATCH: G['RANK'] == 3"
    [alarm] = alarms(by_design)
    assert (alarm.rank, alarm.cause) == (3, "rank_value") and "RANK == 3" in alarm.detail
    # pipeline stages: ranks 0-1 compile f, ranks 2-3 g
    stages = {r: _report(("0/0", "f" if r < 2 else "g", 0.1)) for r in range(4)}
    assert alarms(stages) == []
    # a rank behind: its collectives a prefix of the others' is no other order
    ahead, behind = _report(("0/0", "step", 0.1), ("1/0", "tail", 0.1)), _report(("0/0", "step", 0.1))
    ahead.graphs += [Graph("0/0", 1, ["all_reduce"]), Graph("1/0", 1, ["all_gather_into_tensor"])]
    behind.graphs += [Graph("0/0", 1, ["all_reduce"])]
    assert not [a for a in Doctor(60.0).check({0: ahead, 1: behind}, {}) if a.kind == "collective_order"]
    behind.frames.append(ahead.frames[1])
    behind.graphs.append(Graph("1/0", 1, ["broadcast"]))
    assert [a.rank for a in alarms({0: ahead, 1: behind}) if a.kind == "collective_order"] == [1]


def test_alarms_of_finished_logs_and_the_first_divergence(tmp_path):
    """``nbcompile.load`` of a finished job: the same alarms, read at once (no live watch)."""
    import nbcompile

    run = FAULTS._run("rank_constant", 2, TIMEOUT, {}, False, tmp_path)
    assert run["alarms"]
    traces = nbcompile.load(next(tmp_path.iterdir()), timeout_s=TIMEOUT)
    [alarm] = traces.alarms
    assert (alarm.kind, alarm.rank, alarm.cause, alarm.at) == ("only_rank", 1, "rank_value", None)
    assert "RANK == 1 (rank 0: 0)" in alarm.detail and "tensor" in alarm.remedy
    first = traces.first_divergence
    assert first is not None and first.rank == 1 and "RANK: 1 against 0" in first.detail
    shutil.rmtree(tmp_path, ignore_errors=True)
