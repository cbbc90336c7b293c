"""Warm starts shared: the quickstart's Inductor cell, cold against warm, each in a fresh process with
an empty Inductor cache directory (a colleague's machine, a Binder launch).

- cold: the cell compiles from nothing, then ``%nbcompile cache save`` writes the artifacts;
- warm: ``%nbcompile cache load`` of that file, then the same cell.

Rounds alternate cold and warm; each figure is the cell's wall time and the report's compile time.
Usage: python benchmarks/warm_start.py [--rounds 3]. Writes benchmarks/results/warm_start.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import write  # noqa: E402

CELL = '''%%compile --no-panel --run "model_step(torch.randn(64, 128))"
import torch
def log_stats(x):
    print(f"mean {x.mean():.3f}")
    return x
def model_step(x):
    h = torch.nn.functional.gelu(x @ x.T)
    h = log_stats(h)
    return h.softmax(-1).sum(0)
'''

CHILD = '''
import json, sys, time, contextlib, io
from IPython.testing.globalipapp import get_ipython
ip = get_ipython()
ip.run_line_magic("load_ext", "nbcompile")
import nbcompile
mode, artifacts = sys.argv[1], sys.argv[2]
if mode == "warm":
    with contextlib.redirect_stdout(io.StringIO()):
        ip.run_line_magic("nbcompile", f"cache load {artifacts}")
cell = open(sys.argv[3]).read()
start = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    ip.run_cell(cell, store_history=True)
wall = time.perf_counter() - start
report = nbcompile.last().report
compile_s = sum(f.compile_time_s for f in report.frames)
if mode == "cold":
    with contextlib.redirect_stdout(io.StringIO()):
        ip.run_line_magic("nbcompile", f"cache save {artifacts}")
print("RESULT " + json.dumps({"wall_s": wall, "compile_s": compile_s, "breaks": report.break_count,
                              "check": bool(report.check and report.check.ok)}))
'''


def run(mode: str, artifacts: pathlib.Path, cell: pathlib.Path, script: pathlib.Path) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        done = subprocess.run([sys.executable, str(script), mode, str(artifacts), str(cell)], capture_output=True,
                              text=True, timeout=900, env=env)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[7:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cold, warm = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = pathlib.Path(tmp)
        script, cell = tmp_path / "child.py", tmp_path / "cell.ipy"
        script.write_text(CHILD)
        cell.write_text(CELL)
        for i in range(args.rounds):
            artifacts = tmp_path / f"cache_{i}.bin"
            cold.append(run("cold", artifacts, cell, script))
            warm.append(run("warm", artifacts, cell, script))
            print(f"round {i}: cold {cold[-1]['wall_s']:.2f} s (compile {cold[-1]['compile_s']:.2f} s), warm "
                  f"{warm[-1]['wall_s']:.2f} s (compile {warm[-1]['compile_s']:.2f} s)", flush=True)
        size = (tmp_path / "cache_0.bin").stat().st_size
    result = {
        "cell": "notebooks/01_quickstart.ipynb, the %%compile cell (backend inductor)",
        "cold_wall_s": round(statistics.median(r["wall_s"] for r in cold), 3),
        "warm_wall_s": round(statistics.median(r["wall_s"] for r in warm), 3),
        "cold_compile_s": round(statistics.median(r["compile_s"] for r in cold), 3),
        "warm_compile_s": round(statistics.median(r["compile_s"] for r in warm), 3),
        "artifacts_bytes": size,
        "same_report": all(c["breaks"] == w["breaks"] and c["check"] and w["check"]
                           for c, w in zip(cold, warm, strict=True)),
        "rounds": args.rounds,
    }
    result["warm_over_cold_compile"] = round(result["warm_compile_s"] / result["cold_compile_s"], 3)
    print(json.dumps(result, indent=2))
    write("warm_start", result)


if __name__ == "__main__":
    main()
