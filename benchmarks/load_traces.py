"""Reading a real multi-rank TORCH_TRACE log set: nbcompile.load against tlparse 0.4.3, side by side.

The log set: ``torchrun`` with 4 ranks (gloo, CPU) training a tiny GPT-2 from transformers for a few
steps under ``torch.compile`` (backend aot_eager); rank 3 changes its sequence length at step 2, so it
alone recompiles. Then, alternating in one run: ``nbcompile.load(dir)`` in this process, and
``tlparse DIR --all-ranks-html`` (its own process, as users run it). Per rank, the counts of graphs,
breaks, recompiles and frames from nbcompile, from tlparse's ``compile_directory.json`` and from the
logs' own events; the time per load, the log size and the cost per MB. Target: under 2 s.

Usage: python benchmarks/load_traces.py [--regen] [--reps 5]
Writes benchmarks/results/load_traces.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "data"))
from make_traces import event_counts, run_torchrun  # noqa: E402

from _common import write  # noqa: E402

LOGS = pathlib.Path(tempfile.gettempdir()) / "nbcompile_load_traces_gpt2x4"
JOB = f"""\
import sys
sys.path.insert(0, {str(HERE.parent / "tests")!r})
from real_models_oracle import import_torchvision
import_torchvision()
import torch
import torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=99, n_positions=64)
model = GPT2LMHeadModel(config)
compiled = torch.compile(model, backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(3):
    length = 12 if (rank == 3 and step == 2) else 8  # rank 3 alone changes its sequence length
    ids = torch.randint(0, 99, (2, length))
    loss = compiled(input_ids=ids, labels=ids).loss
    loss.backward()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
"""


def tlparse_counts(out: pathlib.Path) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for rank_dir in sorted(out.glob("rank_*")):
        directory = json.loads((rank_dir / "compile_directory.json").read_text())
        c = {"graphs": 0, "breaks": 0, "recompiles": 0, "frames": 0}
        for entry in directory.values():
            for artifact in entry.get("artifacts", []):
                name = artifact["name"]
                if name.startswith("dynamo_output_graph"):
                    c["graphs"] += 1
                elif name.startswith("dynamo_graph_break_reason"):
                    c["breaks"] += 1
                elif name.startswith("recompile_reasons"):
                    c["recompiles"] += 1
                elif name.startswith("compilation_metrics"):
                    c["frames"] += 1
        counts[rank_dir.name.removeprefix("rank_")] = c
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regen", action="store_true")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    if args.regen or not any(LOGS.glob("*.log")):
        shutil.rmtree(LOGS, ignore_errors=True)
        LOGS.mkdir(parents=True)
        began = time.perf_counter()
        run_torchrun(LOGS, JOB, nproc=4)
        print(f"wrote the 4-rank log set in {time.perf_counter() - began:.0f} s: {LOGS}")
    import nbcompile

    tlparse = shutil.which("tlparse") or str(pathlib.Path(sys.executable).parent / "tlparse")
    version = subprocess.run([tlparse, "--version"], capture_output=True, text=True).stdout.strip()
    size_mb = sum(p.stat().st_size for p in LOGS.glob("*.log")) / 1e6
    ours, theirs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "tl_out"
        for _ in range(args.reps):  # alternating: the machine's state changes both alike
            start = time.perf_counter()
            traces = nbcompile.load(LOGS)
            ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            subprocess.run([tlparse, str(LOGS), "--all-ranks-html", "-o", str(out), "--overwrite", "--no-browser"],
                           check=True, capture_output=True)
            theirs.append(time.perf_counter() - start)
        tl = tlparse_counts(out)
    events = {str(r): event_counts(pathlib.Path(p)) for r, p in traces.files.items()}
    mine = {str(r): {"graphs": rep.graph_count, "breaks": rep.break_count, "recompiles": rep.recompile_count,
                     "frames": len(rep.frames)} for r, rep in traces.ranks.items()}
    result = {
        "log_set": f"torchrun 4 ranks, tiny GPT-2 training 3 steps, aot_eager; rank 3 recompiles ({LOGS})",
        "size_mb": round(size_mb, 2),
        "nbcompile_load_s": round(statistics.median(ours), 3),
        "nbcompile_s_per_mb": round(statistics.median(ours) / size_mb, 3),
        "tlparse_s": round(statistics.median(theirs), 3),
        "tlparse_version": version,
        "ratio_nbcompile_over_tlparse": round(statistics.median(ours) / statistics.median(theirs), 3),
        "target_s": 2.0,
        "counts": {"nbcompile": mine, "tlparse": tl, "log_events": events},
        "counts_agree": mine == events and all(tl.get(r) == c for r, c in events.items()),
        "divergences": traces.divergences,
        "reps": args.reps,
    }
    print(json.dumps(result, indent=2))
    write("load_traces", result)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
