"""The cross-rank doctor's fault library (issue 39): injected faults on a local gloo job on CPU, and healthy runs.

Each run is a real ``torchrun`` job (``rank_jobs/fault_job.py``) started by ``nbcompile.launch`` with a process
group timeout of ``--timeout`` seconds (60), watched live. A fault is *caught before the timeout* when an alarm
of the fault's kind, on the faulty rank, was raised less than the timeout after the first compile seen on any
rank (the fault cannot begin before), and, for a job that hangs, before the job died; its *cause is named* when
that alarm
names the rank, the frame, a line and what differs. Healthy runs must raise no alarm. Each fault with a remedy
runs again with it (``NBC_FIX=1``): the divergence must be gone (no alarm). Then the job's own steady step time
with the watch on against without it (no ``TORCH_TRACE``, nothing watching), side by side.

    python benchmarks/rank_faults.py [--timeout 60] [--only NAME,...] [--pairs 3]

Writes ``benchmarks/results/rank_faults.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import write

JOB = Path(__file__).resolve().parent / "rank_jobs" / "fault_job.py"


@dataclass(frozen=True)
class Fault:
    name: str
    #: The alarm kinds that name it (any of them, on ``rank``).
    kinds: tuple[str, ...]
    rank: int
    frame: str
    #: What the alarm's detail must hold (a value), besides the frame and a line.
    detail: str = ""
    ranks: int = 2
    #: The job hangs (a rank compiles past the timeout): caught only if before the job died.
    hangs: bool = False
    #: A remedy variant exists (``NBC_FIX=1``).
    fix: bool = True
    env: dict[str, str] = field(default_factory=dict)
    what: str = ""


FAULTS = [
    Fault("slow_compile", ("skew",), 1, "step", hangs=True, fix=False,
          what="rank 1's compile takes 1.5x the timeout; rank 0 waits in all_reduce"),
    Fault("slow_recompile", ("skew", "recompile"), 1, "step", detail="10", hangs=True, fix=False,
          what="rank 1 recompiles for a new size (8 -> 10) and that compile takes 1.5x the timeout"),
    Fault("cold_cache", ("cache_miss", "skew"), 1, "step", detail="miss",
          what="Inductor: rank 0 loads the cache artifacts a warm-up saved, rank 1 starts cold; remedy: every rank "
               "loads them"),
    Fault("rank_shape", ("recompile",), 1, "step", detail="10",
          what="rank 1's input size changes at step 3 (8 -> 10); remedy: mark_dynamic on every rank"),
    Fault("rank_shape_4", ("recompile",), 1, "step", detail="10", ranks=4, env={"NBC_FAULT": "rank_shape"},
          what="the same on 4 ranks: rank 1 of 4 named"),
    Fault("rank_constant", ("only_rank",), 1, "step", detail="RANK",
          what="the rank's Python int baked into the graph (y * RANK); remedy: the rank as a tensor"),
    Fault("break_one_rank", ("only_rank",), 1, "step", detail="break",
          what="a print in the compiled step on rank 1 only (graph break); remedy: the print outside it"),
    Fault("recompile_limit", ("recompile",), 1, "step", detail="limit",
          what="rank 1 sees a new size every step under dynamic=False and hits the recompile limit"),
    Fault("only_rank_frame", ("only_rank",), 0, "log_metrics",
          what="rank 0 alone calls a second compiled function; remedy: every rank calls it"),
    Fault("collective_order", ("collective_order",), 1, "step", detail="all_gather", hangs=True,
          what="rank 1 issues all_gather then all_reduce, rank 0 the other way round"),
    Fault("rank_dynamic", ("only_rank",), 1, "step", detail="s",
          what="rank 1 alone marks the input dynamic: another graph; remedy: marked on every rank"),
    Fault("grad_mode", ("recompile",), 1, "step", detail="grad",
          what="rank 1 runs step 3 under no_grad: a recompile on the grad mode"),
]
HEALTHY = [
    ("healthy", 2, {}),
    ("healthy_recompile", 2, {}),  # every rank's size changes at step 3: a recompile they all make
    ("healthy", 4, {}),
]


def _run(name: str, ranks: int, timeout: float, env: dict[str, str], fix: bool, out: Path) -> dict[str, Any]:
    """One watched job: its alarms, when each was raised, how the job ended."""
    import nbcompile

    settings = {"NBC_FAULT": name, "NBC_PG_TIMEOUT": str(timeout), "NBC_FIX": "1" if fix else "0", **env}
    saved = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    try:
        began = time.monotonic()
        traces = nbcompile.launch(str(JOB), nproc=ranks, timeout_s=timeout,
                                  trace_dir=out / f"{env.get('NBC_FAULT', name)}-{ranks}-{'fix' if fix else 'run'}")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    code = traces.wait(timeout * 3 + 120)
    ended = time.monotonic() - began
    if code is None:
        traces.job.kill()
        traces.wait(30)
    alarms = traces.alarms
    first = traces.first_divergence
    log = (Path(traces.path) / "job.out").read_text(errors="replace")
    steps = [float(m) for m in re.findall(r"step_ms ([0-9]+\.[0-9]+)", log)]
    return {"exit": code, "ended_s": round(ended, 2), "step_ms": steps, "first_compile_s": traces.first_compile_s,
            "alarms": [{"kind": a.kind, "cause": a.cause, "rank": a.rank, "frame": a.frame, "where": a.where,
                        "seconds": round(a.seconds, 2), "at_s": a.at, "detail": a.detail[:400]} for a in alarms],
            "first_divergence": str(first)[:400] if first is not None else None}


def _judge(fault: Fault, run: dict[str, Any], timeout: float) -> dict[str, Any]:
    mine = [a for a in run["alarms"] if a["kind"] in fault.kinds and a["rank"] == fault.rank]
    # the fault cannot begin before the job's first compile: counted from there (a loaded machine starts a job's
    # ranks in seconds), and for a job that hangs, before it died at the watchdog
    began = run.get("first_compile_s") or 0.0
    before = [a for a in mine if a["at_s"] is not None and a["at_s"] - began < timeout
              and (not fault.hangs or a["at_s"] < run["ended_s"] - 0.5)]
    named = [a for a in before if a["frame"] == fault.frame and re.search(r":\d+|cell line \d+", a["where"])
             and fault.detail.lower() in a["detail"].lower()]
    return {"caught_before_timeout": bool(before), "cause_named": bool(named),
            "first_alarm_at_s": min((a["at_s"] for a in mine), default=None)}


def _cold_cache_env(root: Path, timeout: float) -> dict[str, str]:
    """For ``cold_cache``: one run of the job with every rank cold, after which rank 0 saves its cache artifacts
    (``torch.compiler.save_cache_artifacts``, as ``%nbcompile cache save`` does) for the runs that follow."""
    artifacts = root / "warm.artifacts"
    artifacts.unlink(missing_ok=True)
    env = {"NBC_WARM_CACHE": str(artifacts)}
    _run("cold_cache", 2, timeout, env, True, root / "warm-up")
    if not artifacts.exists():
        raise SystemExit("cold_cache: the warm-up run saved no cache artifacts")
    return env


#: The overhead job's step: 256 x 256 inputs through four matmuls and an all_reduce (milliseconds, as a
#: training step is, not the fault jobs' microseconds).
WORK = 256


def _overhead(pairs: int, steps: int, root: Path) -> dict[str, Any]:
    """The job's own steady step time (median over ranks of each rank's median) watched (TORCH_TRACE and the
    doctor following) against plain (no TORCH_TRACE, nothing watching), in alternating pairs."""
    plain_ms, watched_ms = [], []
    env = {**os.environ, "NBC_FAULT": "healthy", "NBC_STEPS": str(steps), "NBC_PG_TIMEOUT": "60",
           "NBC_WORK": str(WORK)}
    env.pop("TORCH_TRACE", None)
    for i in range(pairs):
        for watched in (i % 2 == 1, i % 2 == 0):
            if watched:
                got = _run("healthy", 2, 60, {"NBC_STEPS": str(steps), "NBC_WORK": str(WORK)}, False,
                           root / f"overhead-{i}")
                watched_ms.append(statistics.median(got["step_ms"]))
            else:
                done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                                       str(JOB)], env=env, capture_output=True, text=True, timeout=600, check=False)
                said = re.findall(r"step_ms ([0-9]+\.[0-9]+)", done.stdout)
                plain_ms.append(statistics.median(float(m) for m in said))
    ratios = [w / p for w, p in zip(watched_ms, plain_ms, strict=True)]
    return {"steps": steps, "work": f"{WORK}x{WORK} through 4 matmuls and an all_reduce", "pairs": pairs,
            "plain_step_ms": plain_ms, "watched_step_ms": watched_ms,
            "ratios": ratios, "ratio": statistics.median(ratios), "target": 1.05,
            "meets_target": statistics.median(ratios) <= 1.05}


def fault_table(faults: dict[str, Any], healthy: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per run, scalars only (the table docs/benchmarks.md shows)."""
    rows = []
    for name, r in faults.items():
        first = min((a for a in r["alarms"] if a["kind"] in r["kinds"] and a["rank"] == r["rank"]),
                    key=lambda a: a["at_s"] if a["at_s"] is not None else 1e9, default=None)
        rows.append({"run": name, "ranks": r["ranks"], "fault": r["what"], "expected": "/".join(r["kinds"]),
                     "caught_before_timeout": r["caught_before_timeout"], "cause_named": r["cause_named"],
                     "alarm_at_s": r["first_alarm_at_s"], "job_ended_s": r["ended_s"], "job_exit": r["exit"],
                     "alarm": f"{first['kind']} on rank {first['rank']}, {first['frame']} ({first['where']}): "
                              f"{first['detail'][:160]}" if first else "none",
                     "remedy_divergence_gone": r["remedy"]["divergence_gone"] if "remedy" in r else "no remedy run"})
    for name, r in healthy.items():
        rows.append({"run": name, "ranks": int(name.rsplit("-", 1)[1]), "fault": "none (healthy)", "expected": "none",
                     "caught_before_timeout": "-", "cause_named": "-", "alarm_at_s": None,
                     "job_ended_s": r["ended_s"], "job_exit": r["exit"], "alarm": f"{len(r['alarms'])} alarms",
                     "remedy_divergence_gone": "-"})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0, help="the process group's timeout, seconds")
    parser.add_argument("--only", default="", help="faults to run (comma-separated names); healthy runs too")
    parser.add_argument("--pairs", type=int, default=5, help="side-by-side pairs for the step-time overhead")
    parser.add_argument("--steps", type=int, default=200, help="steps of the overhead job")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--only-overhead", action="store_true",
                        help="measure the step-time overhead again, into the results file's other figures")
    args = parser.parse_args()
    if args.only_overhead:
        import json

        from _common import RESULTS

        path = args.out or RESULTS / "rank_faults.json"
        old = json.loads(path.read_text())
        root = Path(tempfile.mkdtemp(prefix="nbcompile-rank-faults-"))
        try:
            overhead = _overhead(args.pairs, args.steps, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(f"step time watched / plain: {overhead['ratio']:.3f} ({overhead['ratios']})", flush=True)
        old["overhead"] = overhead
        old["summary"]["step_time_ratio"] = overhead["ratio"]
        summary = old["summary"]
        summary["meets_targets"] = summary["caught_rate"] >= 0.9 and summary["named_rate"] >= 0.9 \
            and summary["false_alarms"] == 0 and overhead["meets_target"]
        old.pop("benchmark", None)
        write("rank_faults", old, args.out)
        return
    chosen = [f for f in FAULTS if not args.only or f.name in args.only.split(",")]
    root = Path(tempfile.mkdtemp(prefix="nbcompile-rank-faults-"))
    faults: dict[str, Any] = {}
    try:
        for fault in chosen:
            env = {**fault.env}
            if (fault.env.get("NBC_FAULT") or fault.name) == "cold_cache":
                env.update(_cold_cache_env(root, args.timeout))
            name = fault.env.get("NBC_FAULT", fault.name)
            run = _run(name, fault.ranks, args.timeout, env, False, root)
            result = {"what": fault.what, "ranks": fault.ranks, "kinds": list(fault.kinds), "rank": fault.rank,
                      "hangs": fault.hangs, **run, **_judge(fault, run, args.timeout)}
            if fault.fix:
                fixed = _run(name, fault.ranks, args.timeout, env, True, root)
                result["remedy"] = {"alarms": fixed["alarms"], "exit": fixed["exit"],
                                    "divergence_gone": not fixed["alarms"] and fixed["first_divergence"] is None}
            faults[fault.name] = result
            print(f"{fault.name}: caught {result['caught_before_timeout']} named {result['cause_named']} at "
                  f"{result['first_alarm_at_s']} s (job ended {run['ended_s']} s, exit {run['exit']})"
                  + (f"; remedy: divergence gone {result['remedy']['divergence_gone']}" if fault.fix else ""),
                  flush=True)
        healthy = {}
        for name, ranks, env in HEALTHY:
            run = _run(name, ranks, args.timeout, env, False, root)
            healthy[f"{name}-{ranks}"] = run
            print(f"healthy {name} x{ranks}: {len(run['alarms'])} alarms (exit {run['exit']})", flush=True)
        overhead = _overhead(args.pairs, args.steps, root) if args.pairs else None
        if overhead:
            print(f"step time watched / plain: {overhead['ratio']:.3f} ({overhead['ratios']})", flush=True)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(root)
    caught = sum(r["caught_before_timeout"] for r in faults.values())
    named = sum(r["cause_named"] for r in faults.values())
    fixable = [r for r in faults.values() if "remedy" in r]
    false_alarms = sum(len(r["alarms"]) for r in healthy.values())
    summary = {
        "faults": len(faults), "caught_before_timeout": caught, "cause_named": named,
        "caught_rate": caught / len(faults) if faults else None, "named_rate": named / len(faults) if faults else None,
        "healthy_runs": len(healthy), "false_alarms": false_alarms,
        "remedies_tried": len(fixable),
        "remedies_divergence_gone": sum(r["remedy"]["divergence_gone"] for r in fixable),
        "step_time_ratio": overhead["ratio"] if overhead else None,
        "targets": {"caught_rate": 0.9, "named_rate": 0.9, "false_alarms": 0, "step_time_ratio": 1.05},
    }
    summary["meets_targets"] = bool(faults) and summary["caught_rate"] >= 0.9 and summary["named_rate"] >= 0.9 \
        and false_alarms == 0 and (overhead is None or overhead["meets_target"])
    print(f"caught {caught}/{len(faults)}, named {named}/{len(faults)}, false alarms {false_alarms}, remedies "
          f"{summary['remedies_divergence_gone']}/{len(fixable)}", flush=True)
    write("rank_faults", {"timeout_s": args.timeout, "cores": os.cpu_count(), "job": str(JOB.name),
                          "summary": summary, "table": fault_table(faults, healthy), "faults": faults,
                          "healthy": healthy, "overhead": overhead}, args.out)


if __name__ == "__main__":
    main()
