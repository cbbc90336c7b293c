"""Many ranks in parallel (issue 37): a synthetic job of 1,000 ranks x 10 MB loaded by worker processes.

Each rank's log is the first 10 MB (whole records) of the real trace ``load_big.py`` writes (torch compiling
functions with data-dependent breaks, aot_eager); rank 7 alone gets 12 MB of it (more compiles: a divergence to
find). Measured side by side in one run: three ranks' logs loaded in process (the one-core speed), then the whole
job by worker processes on every usable core, three times: its median wall time against the ideal (total
bytes / cores / the one-core speed, the median of three ranks' logs loaded in process), the parent's peak
memory and the largest worker's, and the divergences found.

Targets: wall <= 1.2x the ideal; peak memory <= 1 GB.

Usage: python benchmarks/load_ranks.py [--ranks 1000] [--mb 10] [--runs 3]
Writes benchmarks/results/load_ranks.json.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import write  # noqa: E402

BIG = pathlib.Path(tempfile.gettempdir()) / "nbcompile_load_big"
JOB = pathlib.Path(tempfile.gettempdir()) / "nbcompile_load_ranks"


def _head(data: bytes, size: int) -> bytes:
    """The first ``size`` bytes of a log, cut before the record that crosses them."""
    cut = data.rfind(b"\nV", 0, size)
    return data[: cut + 1]


def _make(ranks: int, mb: float) -> int:
    if not any(BIG.glob("*.log")):
        subprocess.run([sys.executable, str(HERE / "load_big.py"), "--reps", "1", "--gb", "0.1"], check=True)
    data = next(BIG.glob("*.log")).read_bytes()
    base, odd = _head(data, int(mb * 1e6)), _head(data, int(mb * 1.2e6))
    shutil.rmtree(JOB, ignore_errors=True)
    JOB.mkdir(parents=True)
    for rank in range(ranks):
        (JOB / f"dedicated_log_torch_trace_rank_{rank}_job.log").write_bytes(odd if rank == 7 else base)
    return sum(p.stat().st_size for p in JOB.glob("*.log"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1000)
    parser.add_argument("--mb", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3, help="loads of the whole job (the median is kept)")
    args = parser.parse_args()
    total = _make(args.ranks, args.mb)
    print(f"wrote {args.ranks} ranks, {total / 1e9:.2f} GB: {JOB}", flush=True)
    import nbcompile
    from nbcompile.capture import ranks as ranks_ops

    # the one-core speed: three ranks' logs (not rank 7's) loaded in process, each once before; the median
    speeds = []
    for rank in (0, 500, 999):
        one = JOB / f"dedicated_log_torch_trace_rank_{rank}_job.log"
        nbcompile.load(one)
        start = time.process_time()
        nbcompile.load(one)
        speeds.append(one.stat().st_size / 1e6 / (time.process_time() - start))
    one_core_mb_s = sorted(speeds)[1]
    cores = ranks_ops.usable_cores()
    walls = []
    for run in range(args.runs):  # the whole job by worker processes, again: the median wall
        began = time.perf_counter()
        traces = nbcompile.load(JOB, workers=cores)
        walls.append(time.perf_counter() - began)
        print(f"  whole job: {walls[-1]:.1f} s", flush=True)
        if run == 0:  # the peaks of the first load (later ones start while the first one's reports are held)
            parent_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
            worker_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e3
            first = traces
        del traces
    wall = sorted(walls)[len(walls) // 2]
    divergences = first.divergences
    ideal = total / 1e6 / cores / one_core_mb_s
    result = {
        "job": f"{args.ranks} ranks x {args.mb:g} MB (rank 7: 1.2x), cut from the real trace of load_big.py ({JOB})",
        "total_gb": round(total / 1e9, 2),
        "cores": cores,
        "one_core_mb_per_s": round(one_core_mb_s, 1),
        "one_core_mb_per_s_each": [round(v, 1) for v in speeds],
        "wall_s_each": [round(v, 1) for v in walls],
        "wall_s": round(wall, 1),
        "ideal_s": round(ideal, 1),
        "wall_over_ideal": round(wall / ideal, 3),
        "target_wall_over_ideal": 1.2,
        "parent_peak_rss_mb": round(parent_mb, 1),
        "largest_worker_peak_rss_mb": round(worker_mb, 1),
        "target_peak_mb": 1000,
        "ranks_read": len(first.ranks),
        "errors": first.errors[:5],
        "divergences_found": len(divergences),
        "divergences_first": divergences[:4],
        "rank_7_named": any(d.startswith("rank 7:") for d in divergences),
    }
    result["meets_targets"] = (result["wall_over_ideal"] <= 1.2 and parent_mb <= 1000 and worker_mb <= 1000
                               and result["ranks_read"] == args.ranks and result["rank_7_named"])
    print(json.dumps(result, indent=2))
    write("load_ranks", result)


if __name__ == "__main__":
    main()
