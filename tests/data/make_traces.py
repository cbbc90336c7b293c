"""Writes the recorded TORCH_TRACE corpus the trace tests read (tests/data/traces/), from real runs:

- ``single``: one process; a helper with a print (a graph break) called with a new size (a recompile);
- ``torchrun2``: ``torchrun`` with 2 ranks on gloo (CPU), where only rank 1 recompiles.

Each log is gzipped; ``expected.json`` holds the counts read off the logs' own events (not through
nbcompile) and the torch version that wrote them. Run it again after a torch upgrade and the diff
shows what changed: python tests/data/make_traces.py
"""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = HERE / "traces"

SINGLE = """\
import torch
def f(x):
    y = x.sin()
    print("break")
    return y.cos()
g = torch.compile(f, backend="eager", dynamic=False)
g(torch.ones(3))
g(torch.ones(5))
"""

#: A 2-rank job: every rank compiles ``step`` (one graph break), only rank 1 calls it with a new size.
TORCHRUN = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()


def step(x):
    y = x.sin()
    print("logging from step")
    return y.cos().sum()


g = torch.compile(step, backend="eager", dynamic=False)
total = g(torch.ones(4))
if rank == 1:
    total = total + g(torch.ones(7))
dist.all_reduce(total)
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_single(out: pathlib.Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script = pathlib.Path(tmp) / "job.py"
        script.write_text(SINGLE)
        subprocess.run([sys.executable, str(script)], check=True, capture_output=True, timeout=300,
                       env={**os.environ, "TORCH_TRACE": str(out)})


def run_torchrun(out: pathlib.Path, script_text: str = TORCHRUN, nproc: int = 2) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script = pathlib.Path(tmp) / "job.py"
        script.write_text(script_text)
        subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
                        f"--master_port={free_port()}", str(script)], check=True, capture_output=True,
                       timeout=600, env={**os.environ, "TORCH_TRACE": str(out), "OMP_NUM_THREADS": "1"})


def event_counts(path: pathlib.Path) -> dict[str, int]:
    """Counts read off a log's own envelopes, independently of nbcompile's parser."""
    opener = gzip.open if path.suffix == ".gz" else open
    counts = {"graphs": 0, "breaks": 0, "recompiles": 0, "frames": 0}
    with opener(path, "rt") as handle:
        for line in handle:
            if line.startswith("\t") or "] {" not in line:
                continue
            envelope = json.loads(line.split("] ", 1)[1])
            if "dynamo_output_graph" in envelope:
                counts["graphs"] += 1
            elif envelope.get("artifact", {}).get("name") == "dynamo_graph_break_reason":
                counts["breaks"] += 1
            elif envelope.get("artifact", {}).get("name") == "recompile_reasons":
                counts["recompiles"] += 1
            elif "compilation_metrics" in envelope:
                counts["frames"] += 1
    return counts


def main() -> None:
    import torch

    if CORPUS.exists():
        shutil.rmtree(CORPUS)
    expected: dict[str, dict] = {"torch": torch.__version__}
    for name, make in (("single", run_single), ("torchrun2", run_torchrun)):
        with tempfile.TemporaryDirectory() as tmp:
            logs = pathlib.Path(tmp)
            make(logs)
            target = CORPUS / name
            target.mkdir(parents=True)
            expected[name] = {}
            for i, log in enumerate(sorted(logs.glob("*.log"))):
                rank = log.name.split("rank_")[1].split("_")[0] if "rank_" in log.name else "0"
                short = f"dedicated_log_torch_trace_rank_{rank}.log.gz" if "rank_" in log.name else \
                    f"dedicated_log_torch_trace_{i}.log.gz"
                (target / short).write_bytes(gzip.compress(log.read_bytes(), mtime=0))
                expected[name][rank] = event_counts(target / short)
    (CORPUS / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    print(json.dumps(expected, indent=2))


if __name__ == "__main__":
    main()
