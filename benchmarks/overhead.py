"""What nbcompile costs: per-call time and compile time, side by side in one run.

1. Per call: a `%%compile`d entry (real IPython shell, Inductor) against plain
   ``torch.compile`` of the same function, timed in interleaved rounds; the
   figure is the median of the per-round ratios. Target: <= 1.02.
2. Compile time: the same function compiled with Inductor on a cold cache,
   with nbcompile's capture against without, each in a fresh process with a
   fresh ``TORCHINDUCTOR_CACHE_DIR`` (after an unrelated warm-up compile, so
   Inductor's one-off ISA probe is not counted). Runs alternate; the figure is
   the median ratio. Target: <= 1.05.

Writes benchmarks/results/overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import types

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "results"

CELL = '''\
import torch
def block(x):
    y = torch.nn.functional.gelu(x @ x.T) * 0.5
    return (y.softmax(-1) + x.sum()).tanh()
def head(x):
    return block(x).mean(0) + block(x * 2).std(0)
'''


def _per_call(rounds: int, calls: int) -> dict[str, object]:
    import torch
    from IPython.core.interactiveshell import InteractiveShell

    import nbcompile

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nbcompile")
    shell.run_cell_magic("compile", "--no-panel", CELL)
    session = nbcompile.last()
    ours = shell.user_ns["head"]
    original = session.workload.tracked["head"]
    # Plain torch.compile of the same function, on its own code object so the two
    # wrappers do not share (and evict) one code's cache entries.
    twin = types.FunctionType(original.__code__.replace(), original.__globals__, "head")
    plain = torch.compile(twin)
    x = torch.randn(64, 64)
    for fn in (ours, plain):  # compile both, then warm up
        for _ in range(20):
            fn(x)

    def timed(fn) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            fn(x)
        return (time.perf_counter() - start) / calls

    ratios, ours_t, plain_t = [], [], []
    for i in range(rounds):
        if i % 2:
            a = timed(ours)
            b = timed(plain)
        else:
            b = timed(plain)
            a = timed(ours)
        ours_t.append(a)
        plain_t.append(b)
        ratios.append(a / b)
    graphs = session.report.graph_count
    session.reset()
    return {
        "rounds": rounds,
        "calls_per_round": calls,
        "median_s_nbcompile": statistics.median(ours_t),
        "median_s_plain": statistics.median(plain_t),
        "median_ratio": statistics.median(ratios),
        "graphs_captured": graphs,
        "target": 1.02,
    }


CHILD = r'''
import sys, time, torch
mode = sys.argv[1]
def warm(x):
    return x.cos() - 3
torch.compile(warm)(torch.ones(3))  # Inductor's one-off set-up, not counted
exec(compile(sys.argv[2], "<bench>", "exec"))
x = torch.randn(64, 64)
if mode == "capture":
    import nbcompile
    start = time.perf_counter()
    report = nbcompile.inspect(head, x, backend="inductor")
    elapsed = time.perf_counter() - start
    assert report.graph_count >= 1 and report.kernels
    print("trace_overhead", sum(f.trace_overhead_s for f in report.frames))
else:
    if mode == "handler":  # torch building its trace records for a no-op handler, nothing else
        import logging
        logging.getLogger("torch.__trace").addHandler(logging.NullHandler())
    fn = torch.compile(head)
    start = time.perf_counter()
    fn(x)
    elapsed = time.perf_counter() - start
print(elapsed)
'''


def _compile_time(reps: int) -> dict[str, object]:
    times: dict[str, list[float]] = {"capture": [], "plain": [], "handler": []}
    ratios: list[float] = []
    trace_share: list[float] = []
    handler_ratios: list[float] = []
    for i in range(reps):
        # each mode takes each position in turn: no mode always runs first, or always in the middle
        order = [("capture", "plain", "handler"), ("plain", "handler", "capture"),
                 ("handler", "capture", "plain")][i % 3]
        got = {}
        for mode in order:
            with tempfile.TemporaryDirectory() as cache:
                env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, mode, CELL],
                    env=env, capture_output=True, text=True, check=True, timeout=600,
                ).stdout
            lines = out.strip().splitlines()
            got[mode] = float(lines[-1])
            times[mode].append(got[mode])
            for line in lines:
                if line.startswith("trace_overhead"):
                    trace_share.append(float(line.split()[1]) / got[mode])
        ratios.append(got["capture"] / got["plain"])
        handler_ratios.append(got["handler"] / got["plain"])
        print(f"  compile rep {i + 1}: capture {got['capture']:.2f} s, plain {got['plain']:.2f} s, "
              f"no-op handler {got['handler']:.2f} s", flush=True)
    return {
        "reps": reps,
        "median_s_capture": statistics.median(times["capture"]),
        "median_s_plain": statistics.median(times["plain"]),
        "median_ratio": statistics.median(ratios),
        "ratios": ratios,
        "median_s_noop_handler": statistics.median(times["handler"]),
        "median_ratio_noop_handler": statistics.median(handler_ratios),
        "median_trace_overhead_share": statistics.median(trace_share),
        "target": 1.05,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--compile-reps", type=int, default=5)
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS / "overhead.json")
    args = parser.parse_args()

    import torch

    per_call = _per_call(args.rounds, args.calls)
    print(f"per call: nbcompile {per_call['median_s_nbcompile'] * 1e6:.1f} us, "
          f"plain {per_call['median_s_plain'] * 1e6:.1f} us, median ratio {per_call['median_ratio']:.4f} "
          f"(target <= 1.02)", flush=True)
    compile_time = _compile_time(args.compile_reps)
    print(f"compile (Inductor, cold cache): capture {compile_time['median_s_capture']:.2f} s, "
          f"plain {compile_time['median_s_plain']:.2f} s, median ratio {compile_time['median_ratio']:.4f} "
          f"(target <= 1.05); torch's own record-building share of the capture compile: "
          f"{compile_time['median_trace_overhead_share'] * 100:.1f}%; plain compile with only a no-op trace "
          f"handler: median ratio {compile_time['median_ratio_noop_handler']:.4f}")
    result = {
        "benchmark": "overhead",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else f"cpu ({os.cpu_count()} cores)",
        "per_call": per_call,
        "compile_time": compile_time,
        "meets_targets": per_call["median_ratio"] <= 1.02 and compile_time["median_ratio"] <= 1.05,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
