"""Many ranks' logs read in parallel: in worker processes on this machine, or on a cluster the user already has
(a Dask ``distributed`` client). Each worker reads whole ranks (``RankTrace``, exactly as a load in process does)
and sends back each rank's result: its report, its problems and its figures, small beside its logs. What the
ranks share (divergences, the tally) is computed from those results by ``Traces``.

The workers are plain ``python -m nbcompile.capture.ranks`` processes handed a pickled list of ranks (not
``multiprocessing``, which would run a script's top level again in each worker), ranks balanced by bytes. A
worker that fails has its ranks read in this process instead: a load never loses a rank to a worker.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..model.report import Report
from .logs import Problems, RankTrace

#: Below this many bytes over all ranks a load stays in process: a worker takes about 0.2 s to start, which reading
#: under 100 MB on two cores does not win back.
PARALLEL_BYTES = 96 << 20

Job = tuple[int, list[str]]


@dataclass
class RankResult:
    """One rank read elsewhere: what ``Traces`` takes from a ``RankTrace``."""

    rank: int
    path: str
    paths: list[str]
    report: Report
    problems: list[Problems]
    bytes: int
    events: int


def read_rank(rank: int, paths: list[str]) -> RankResult:
    """One rank's logs read in order, as ``nbcompile.load`` reads them in process."""
    trace = RankTrace(rank, paths[0])
    for later in paths[1:]:
        trace.add_file(later)
    trace.read_more(final=True)
    trace.finish_notice()
    return RankResult(rank, trace.path, trace.paths, trace.report, trace.problems, trace.bytes, trace.events)


def read_ranks(jobs: list[Job]) -> list[RankResult]:
    """Several ranks, one after another (a worker's share)."""
    return [read_rank(rank, paths) for rank, paths in jobs]


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def shares(jobs: list[Job], n: int) -> list[list[Job]]:
    """``jobs`` split into at most ``n`` shares of about equal bytes (the largest rank first to the lightest share),
    each share in rank order."""
    sized = sorted(jobs, key=lambda job: -sum(_size(p) for p in job[1]))
    out: list[list[Job]] = [[] for _ in range(max(1, min(n, len(jobs))))]
    load = [0] * len(out)
    for job in sized:
        i = load.index(min(load))
        out[i].append(job)
        load[i] += sum(_size(p) for p in job[1])
    return [sorted(share) for share in out if share]


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def parallel_wanted(jobs: list[Job], workers: int | None) -> bool:
    """Whether a load reads its ranks in worker processes: asked for (``workers`` > 1), or by default when there
    are several ranks, cores to spare and enough bytes to be worth the workers' start."""
    if len(jobs) < 2 or workers == 1:
        return False
    if workers is not None:
        return workers > 1
    return usable_cores() > 1 and sum(_size(p) for _, paths in jobs for p in paths) >= PARALLEL_BYTES


def read_in_processes(jobs: list[Job], workers: int | None = None) -> tuple[list[RankResult], list[str]]:
    """Every rank read by worker processes (``workers``, default the usable cores); returns the results in rank
    order and what went wrong with a worker (its ranks then read in this process). Each worker writes its
    results to a file of its own, one rank at a time: none waits on this process to read a pipe, and the
    results are taken back one rank at a time."""
    parts = shares(jobs, workers or usable_cores())
    # the workers import this very nbcompile, wherever it was imported from (a checkout on sys.path too)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)}
    with tempfile.TemporaryDirectory(prefix="nbcompile-ranks-") as tmp:
        running: list[tuple[list[Job], subprocess.Popen[bytes] | OSError, str, str]] = []
        try:
            for i, part in enumerate(parts):  # each worker's ranks in a file of its own: all start at once
                share, out, err = (os.path.join(tmp, f"{what}{i}") for what in ("share", "out", "err"))
                with open(share, "wb") as handle:
                    pickle.dump(part, handle)
                try:
                    with open(err, "wb") as errors:
                        proc: subprocess.Popen[bytes] | OSError = subprocess.Popen(
                            [sys.executable, "-m", "nbcompile.capture.ranks", share, out], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=errors, env=env)
                except OSError as exc:  # no interpreter to start (an embedded Python): read here
                    proc = exc
                running.append((part, proc, out, err))
            for _, proc, _, _ in running:
                if not isinstance(proc, OSError):
                    proc.wait()
        finally:  # interrupted: no worker left running
            for _, proc, _, _ in running:
                if not isinstance(proc, OSError) and proc.poll() is None:
                    proc.kill()
                    proc.wait()
        results: list[RankResult] = []
        problems: list[str] = []
        seen: dict[str, str] = {}
        for part, proc, out, err in running:
            try:
                if isinstance(proc, OSError):
                    raise RuntimeError(f"it could not start: {proc}")
                if proc.returncode != 0:
                    with open(err, "rb") as handle:
                        said = handle.read().decode(errors="replace").strip().splitlines() or ["no output"]
                    raise RuntimeError(f"exit {proc.returncode}: {said[-1][:200]}")
                got = list(_results_in(out))
                if sorted(r.rank for r in got) != sorted(rank for rank, _ in part):
                    raise RuntimeError("it returned other ranks than it was given")
                results += got
            except Exception as exc:  # noqa: BLE001  a worker lost: its ranks read here
                ranks = [rank for rank, _ in part]
                named = ", ".join(map(str, ranks[:5])) + (f" and {len(ranks) - 5} more" if len(ranks) > 5 else "")
                problems.append(f"a worker reading rank(s) {named} failed ({exc}); read in this process instead")
                results += read_ranks(part)
            shared(results[-len(part):], seen)
    return sorted(results, key=lambda r: r.rank), problems


def _results_in(path: str) -> Iterator[RankResult]:
    """The results a worker wrote, one rank at a time."""
    with open(path, "rb") as handle:
        while True:
            try:
                yield pickle.load(handle)  # noqa: S301  (our own worker's output)
            except EOFError:
                return


def shared(results: list[RankResult], seen: dict[str, str] | None = None) -> list[RankResult]:
    """The results with the guard texts their frames repeat held once (``seen``: those met so far): ranks running
    the same code guard on the same lines, and a thousand ranks' copies of them would be most of a load's
    memory (strings are immutable: each frame keeps its own list)."""
    seen = {} if seen is None else seen
    for result in results:
        for frame in result.report.frames:
            frame.guards = [seen.setdefault(g, g) for g in frame.guards]
    return results


def read_on_client(jobs: list[Job], client: Any) -> list[RankResult]:
    """Every rank read on a Dask ``distributed`` client's workers (one task per share; the logs' paths must be
    readable there), the results gathered here in rank order."""
    parts = shares(jobs, max(1, _client_cores(client)))
    futures = client.map(read_ranks, parts, pure=False)
    return shared(sorted((r for part in client.gather(futures) for r in part), key=lambda r: r.rank))


def _client_cores(client: Any) -> int:
    try:
        return sum(int(n) for n in client.ncores().values())
    except Exception:  # noqa: BLE001  a client without ncores: one share per rank
        return 1 << 30


def main() -> None:
    """A worker: a pickled list of (rank, paths) in the first file named; the results, pickled one rank at a time,
    written to the second."""
    from nbcompile.capture import ranks  # (run as __main__: the results must be this module's classes)

    with open(sys.argv[1], "rb") as handle:
        jobs = pickle.load(handle)  # noqa: S301  (written by the process that started this one)
    with open(sys.argv[2], "wb") as out:
        for rank, paths in jobs:
            pickle.dump(ranks.read_rank(rank, paths), out, protocol=pickle.HIGHEST_PROTOCOL)


if __name__ == "__main__":
    main()
