"""The recompile doctor's cost: its view of a function recompiled 8 times, against the recompiles.

In one process, in alternating rounds, a fresh copy of ``f`` (its own code object, static shapes,
backend ``eager``) is called with 9 sizes, so it compiles once and recompiles 8 times:

- *raw*: plain ``torch.compile``;
- *doctor*: the same calls with nbcompile's capture on (the recording backend, the trace handler
  reading each failed guard's values), then the doctor's view built: the report's text and HTML, the
  guard changes, the fallbacks and the recompile fixes.

Target: median(doctor) / median(raw) <= 1.1.

Then, in fresh processes (alternating), the same 9 calls with ``TORCH_LOGS=recompiles_verbose``
writing torch's own text, against nbcompile producing its view: the wall time of each process.
Writes benchmarks/results/recompiles.json.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import time
import types

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _common import median, write  # noqa: E402

SIZES = list(range(2, 11))  # 9 calls: 1 compile + 8 recompiles
SOURCE = "def f(x):\n    return (x.sin() * 2 + x.cos()).sum()\n"

FRESH_LOGS = f"""
import torch
{SOURCE}
torch._dynamo.config.recompile_limit = 16
g = torch.compile(f, backend="eager", dynamic=False)
for n in {SIZES}:
    g(torch.ones(n))
"""

FRESH_DOCTOR = f"""
import torch, nbcompile
from nbcompile.capture import HUB, Recording, RecordingBackend
from nbcompile.model.report import Report
{SOURCE}
torch._dynamo.config.recompile_limit = 16
rec = Recording(Report(title="f"))
HUB.acquire()
g = torch.compile(f, backend=RecordingBackend("eager", None, False, rec), dynamic=False)
with HUB.active(rec):
    for n in {SIZES}:
        g(torch.ones(n))
HUB.release()
view = str(rec.report) + rec.report._repr_mimebundle_()["text/html"]
assert rec.report.recompile_count == {len(SIZES) - 1}, rec.report.summary()
assert all(r.changes for r in rec.report.recompiles)
"""


def _fresh_f() -> types.FunctionType:
    namespace: dict = {}
    exec(compile(SOURCE, f"<bench-{time.perf_counter_ns()}>", "exec"), namespace)
    return namespace["f"]


def _raw() -> float:
    import torch

    g = torch.compile(_fresh_f(), backend="eager", dynamic=False)
    start = time.perf_counter()
    for n in SIZES:
        g(torch.ones(n))
    return time.perf_counter() - start


def _doctor() -> tuple[float, int, str]:
    import torch

    from nbcompile.capture import HUB, Recording, RecordingBackend
    from nbcompile.model.render import change_text
    from nbcompile.model.report import Report

    rec = Recording(Report(title="f"))
    HUB.acquire()
    try:
        start = time.perf_counter()
        g = torch.compile(_fresh_f(), backend=RecordingBackend("eager", None, False, rec), dynamic=False)
        with HUB.active(rec):
            for n in SIZES:
                g(torch.ones(n))
        view = str(rec.report) + rec.report._repr_mimebundle_()["text/html"]
        view += "".join(change_text(r) for r in rec.report.recompiles)
        elapsed = time.perf_counter() - start
    finally:
        HUB.release()
    assert len(view) > 0
    return elapsed, rec.report.recompile_count, change_text(rec.report.recompiles[-1])


def _process(code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-2000:]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--process-rounds", type=int, default=3)
    parser.add_argument("--out", type=pathlib.Path, default=None)
    args = parser.parse_args()

    import torch

    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = 16
    try:
        _raw(), _doctor()  # warm-up: imports, Dynamo's own first-use costs
        raw, doctor = [], []
        recompiles, last = 0, ""
        for _ in range(args.rounds):
            raw.append(_raw())
            elapsed, recompiles, last = _doctor()
            doctor.append(elapsed)
    finally:
        torch._dynamo.config.recompile_limit = limit

    env = {k: v for k, v in os.environ.items() if k != "TORCH_LOGS"}
    logs, view = [], []
    for _ in range(args.process_rounds):
        logs.append(_process(FRESH_LOGS, {**env, "TORCH_LOGS": "recompiles_verbose"}))
        view.append(_process(FRESH_DOCTOR, env))

    ratio = median(doctor) / median(raw)
    result = {
        "recompiles": recompiles,
        "last_change": last,
        "rounds": args.rounds,
        "median_s_raw": median(raw),
        "median_s_doctor": median(doctor),
        "ratio_doctor_over_raw": ratio,
        "target": 1.1,
        "meets_target": ratio <= 1.1,
        "raw_s": raw,
        "doctor_s": doctor,
        "fresh_process_median_s_torch_logs_recompiles_verbose": median(logs),
        "fresh_process_median_s_nbcompile_view": median(view),
        "fresh_process_ratio_nbcompile_over_torch_logs": median(view) / median(logs),
        "fresh_process_s_torch_logs": logs,
        "fresh_process_s_nbcompile": view,
    }
    print(f"{recompiles} recompiles (last: {last}): raw {median(raw) * 1e3:.1f} ms, with the doctor's view "
          f"{median(doctor) * 1e3:.1f} ms, ratio {ratio:.3f} (target <= 1.1); fresh processes: "
          f"TORCH_LOGS=recompiles_verbose {median(logs):.2f} s, nbcompile's view {median(view):.2f} s "
          f"(ratio {median(view) / median(logs):.2f})", flush=True)
    write("recompiles", result, args.out)


if __name__ == "__main__":
    main()
