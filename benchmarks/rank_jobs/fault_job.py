"""One rank of a small compiled gloo job on CPU, with one injected fault (``NBC_FAULT``) or none, for the
cross-rank doctor's fault library (``benchmarks/rank_faults.py``, ``tests/test_rank_faults.py``).

Run by ``torchrun``; only ``TORCH_TRACE`` is set from outside. ``NBC_FIX=1`` runs the fault's remedy instead
(the divergence must be gone). ``NBC_PG_TIMEOUT``: the process group's timeout in seconds (60). The job prints
``step_ms <median>`` at the end (its own steady step time). The faulty rank is rank 1 unless said.
"""

import datetime
import os
import shutil
import statistics
import sys
import time

FAULT = os.environ.get("NBC_FAULT", "healthy")
FIX = os.environ.get("NBC_FIX") == "1"
TIMEOUT_S = float(os.environ.get("NBC_PG_TIMEOUT", "60"))
RANK_ENV = int(os.environ.get("RANK", "0"))
#: cold_cache: the cache artifacts one rank saved (``torch.compiler.save_cache_artifacts``, what ``%nbcompile cache
#: save`` writes): rank 0 loads them and starts warm, rank 1 starts cold; the remedy loads them on every rank.
ARTIFACTS = os.environ.get("NBC_WARM_CACHE", "")
if FAULT == "cold_cache":  # each rank an empty Inductor cache of its own
    mine = f"{ARTIFACTS}.cache-rank{RANK_ENV}"
    shutil.rmtree(mine, ignore_errors=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = mine

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=TIMEOUT_S))
rank, world = dist.get_rank(), dist.get_world_size()
if FAULT == "cold_cache" and os.path.exists(ARTIFACTS) and (rank == 0 or FIX):
    with open(ARTIFACTS, "rb") as saved:
        torch.compiler.load_cache_artifacts(saved.read())
RANK = rank  # a Python int each rank holds its own value of
DEBUG = rank == 1
STEPS = int(os.environ.get("NBC_STEPS", "6"))
#: A step of real work (the step-time benchmark): inputs WORK x WORK through four matmuls.
WORK = int(os.environ.get("NBC_WORK", "0"))
WEIGHT = torch.randn(WORK, WORK) / max(WORK, 1) ** 0.5 if WORK else None
SLOW_S = 1.5 * TIMEOUT_S


def _slow_backend(gm, example_inputs):
    """Compiles like ``eager``; on rank 1 the first compile (or, for ``slow_recompile``, the second) takes
    longer than the process group's timeout."""
    _slow_backend.calls += 1
    wanted = 2 if FAULT == "slow_recompile" else 1
    if rank == 1 and _slow_backend.calls == wanted and not FIX:
        time.sleep(SLOW_S)
    return gm.forward


_slow_backend.calls = 0


def _backend():
    if FAULT in ("slow_compile", "slow_recompile"):
        return _slow_backend
    if FAULT == "cold_cache":
        return "inductor"
    return "eager"


def total(y):
    """A fixed-size reduction across ranks (the collective every step waits in)."""
    s = y.sum().reshape(1)
    dist.all_reduce(s)
    return s


def step(x, r):
    y = torch.sin(x) * 2.0
    for _ in range(4 if WORK else 0):
        y = torch.tanh(y @ WEIGHT)
    if FAULT == "rank_constant" and not FIX:
        y = y * RANK  # rank's Python int baked into the graph
    if FAULT == "rank_constant" and FIX:
        y = y * r  # the rank as a tensor: one graph for every rank
    if FAULT == "break_one_rank" and not FIX and DEBUG:
        print("debug", float(y.sum()))  # a graph break, on rank 1 only
    if FAULT == "collective_order":
        a, b = y[:4].clone(), y[4:8].clone()
        gathered = torch.empty(4 * world)
        if not FIX and rank == 1:  # the same two collectives, the other way round (the remedy reads no rank)
            dist.all_gather_into_tensor(gathered, b)
            dist.all_reduce(a)
        else:
            dist.all_reduce(a)
            dist.all_gather_into_tensor(gathered, b)
        y = torch.cat([a, gathered[:4]])
    return total(y).cos()


def log_metrics(x):
    return (x * x).mean()


compiled = torch.compile(step, backend=_backend(), dynamic=False if FAULT == "recompile_limit" and not FIX else None)
compiled_log = torch.compile(log_metrics, backend="eager")
if FAULT == "recompile_limit":
    torch._dynamo.config.recompile_limit = 2

times = []
for i in range(STEPS):
    n = 8
    if FAULT == "rank_shape" and rank == 1 and i >= 2:
        n = 10
    if FAULT == "recompile_limit" and rank == 1:
        n = 8 + i  # a new size each step, under dynamic=False: the limit is hit
    if FAULT == "slow_recompile" and rank == 1 and i >= 2:
        n = 10
    if FAULT == "healthy_recompile" and i >= 2:
        n = 10  # every rank: a recompile they all make
    x = torch.randn(WORK, WORK) if WORK else torch.randn(n)
    if FIX and FAULT in ("rank_shape", "recompile_limit", "rank_dynamic"):
        torch._dynamo.mark_dynamic(x, 0)  # the remedy: one dynamic graph on every rank
    if FAULT == "rank_dynamic" and rank == 1 and not FIX:
        torch._dynamo.mark_dynamic(x, 0)  # only rank 1 compiles a dynamic graph
    r = torch.tensor(float(rank))
    began = time.perf_counter()
    if FAULT == "grad_mode" and rank == 1 and i >= 2 and not FIX:
        with torch.no_grad():
            out = compiled(x, r)
    else:
        out = compiled(x, r)
    if FAULT == "only_rank_frame" and (rank == 0 or FIX):
        compiled_log(x)
    if FAULT == "break_one_rank" and FIX and DEBUG:
        print("debug", float(out))  # the remedy: the rank-dependent print outside the compiled step
    times.append(time.perf_counter() - began)
    dist.barrier()

if FAULT == "cold_cache" and rank == 0 and not os.path.exists(ARTIFACTS):  # the warm-up run: rank 0 saves them
    artifacts = torch.compiler.save_cache_artifacts()
    if artifacts is not None:
        with open(ARTIFACTS, "wb") as out:
            out.write(artifacts[0])
dist.destroy_process_group()
sys.stdout.write(f"rank {rank} step_ms {statistics.median(times[2:] or times) * 1e3:.3f}\n")  # one write: ranks share
sys.stdout.flush()
sys.exit(0)
