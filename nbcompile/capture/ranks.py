"""Many ranks' logs read in parallel: in worker processes on this machine, or on a cluster the user already has
(a Dask ``distributed`` client). Each worker reads whole ranks (``RankTrace``, exactly as a load in process does)
and sends back each rank's result: its report, its problems and its figures, small beside its logs. What the
ranks share (divergences, the tally) is computed from those results by ``Traces``.

The workers are plain ``python -m nbcompile.capture.ranks`` processes handed a pickled list of ranks (not
``multiprocessing``, which would run a script's top level again in each worker), ranks balanced by bytes. A
worker that fails has its ranks read in this process instead: a load never loses a rank to a worker.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, cast

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
    order and what went wrong with a worker (the ranks it did not return then read in this process). Each worker
    writes its results to a file of its own, one rank at a time, each framed by its length: none waits on this
    process to read a pipe, and this process takes each rank's result as soon as it is written, while the
    workers read on (the results unpickled meanwhile, not after the last worker ends)."""
    parts = shares(jobs, workers or usable_cores())
    # the workers import this very nbcompile, wherever it was imported from (a checkout on sys.path too)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)}
    results: list[RankResult] = []
    problems: list[str] = []
    seen: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="nbcompile-ranks-") as tmp, contextlib.ExitStack() as files:
        running: list[_Worker] = []
        try:
            for i, part in enumerate(parts):  # each worker's ranks in a file of its own: all start at once
                share, out, err = (os.path.join(tmp, f"{what}{i}") for what in ("share", "out", "err"))
                with open(share, "wb") as handle:
                    pickle.dump(part, handle)
                open(out, "wb").close()  # made here, so that it can be followed from the start
                worker = _Worker(part, files.enter_context(open(out, "rb")), err)
                try:
                    with open(err, "wb") as errors:
                        worker.proc = subprocess.Popen(
                            [sys.executable, "-m", "nbcompile.capture.ranks", share, out], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=errors, env=env)
                except OSError as exc:  # no interpreter to start (an embedded Python): read here
                    worker.failed = f"it could not start: {exc}"
                running.append(worker)
            files.enter_context(gc_paused())  # (for the whole collection: re-enabled per result, it ran each time)
            while any(w.proc is not None and w.proc.poll() is None for w in running):
                taken = [r for w in running for r in w.take(seen)]
                for worker in running:  # one that sent what it should not: its other ranks are read here
                    if worker.failed and worker.proc is not None and worker.proc.poll() is None:
                        worker.proc.kill()
                        worker.proc.wait()
                if taken:
                    results += taken
                else:
                    time.sleep(POLL_S)
            for worker in running:  # what each wrote last, and how it ended
                results += worker.take(seen)
        finally:  # interrupted: no worker left running
            for worker in running:
                if worker.proc is not None and worker.proc.poll() is None:
                    worker.proc.kill()
                    worker.proc.wait()
        lost = [(worker.lost(), worker.why()) for worker in running if worker.lost()]
    for jobs_lost, why in lost:  # a worker lost: the ranks it did not return read here
        ranks = [rank for rank, _ in jobs_lost]
        named = ", ".join(map(str, ranks[:5])) + (f" and {len(ranks) - 5} more" if len(ranks) > 5 else "")
        problems.append(f"a worker reading rank(s) {named} failed ({why}); read in this process instead")
        results += shared(read_ranks(jobs_lost), seen)
    return sorted(results, key=lambda r: r.rank), problems


#: How long the reader of the workers' results sleeps when none has written a whole one since it last looked.
POLL_S = 0.02
#: A result's frame in a worker's file: its length in 8 bytes, then its pickle.
_HEAD = 8


class _Worker:
    """One worker process, its share of ranks and its results file, followed as it is written."""

    def __init__(self, part: list[Job], out: IO[bytes], err: str) -> None:
        self.part = part
        self.out = out
        self.err = err
        self.proc: subprocess.Popen[bytes] | None = None
        self.failed = ""
        self.returned: set[int] = set()
        self.given = {rank for rank, _ in part}
        #: The guards' texts the worker sent so far, in its table's order (``encode_guards``).
        self.texts: list[str] = []

    def take(self, seen: dict[str, str]) -> list[RankResult]:
        """The results written whole since the last look (a frame not written whole is left for the next), their
        guards' texts taken from the worker's table (``encode_guards``), each held once with those in ``seen``."""
        got: list[RankResult] = []
        while not self.failed:
            at = self.out.tell()
            head = self.out.read(_HEAD)
            size = int.from_bytes(head, "little") if len(head) == _HEAD else -1
            if size < 0 or os.fstat(self.out.fileno()).st_size < at + _HEAD + size:  # not written whole yet
                self.out.seek(at)
                break
            try:
                body = self.out.read(size)
                new, result = pickle.loads(body)  # noqa: S301  (our own worker's output)
                if not isinstance(result, RankResult) or result.rank not in self.given or result.rank in self.returned:
                    self.failed = "it returned other ranks than it was given"
                    break
                self.texts += [seen.setdefault(text, text) for text in new]
                texts = self.texts
                for frame in result.report.frames:
                    numbers = cast(list[int], frame.guards)
                    if any(not 0 <= i < len(texts) for i in numbers):
                        raise ValueError("a guard's number outside the texts sent")
                    frame.guards = [texts[i] for i in numbers]
            except Exception as exc:  # noqa: BLE001  a result that does not read: the rest of the worker's ranks here
                self.failed = f"its result after rank(s) {sorted(self.returned)[-1:]} did not read: {exc}"
                break
            self.returned.add(result.rank)
            got.append(result)
        return got

    def lost(self) -> list[Job]:
        """The ranks it was given and did not return."""
        return [job for job in self.part if job[0] not in self.returned]

    def why(self) -> str:
        if self.failed:
            return self.failed
        code = self.proc.returncode if self.proc is not None else None
        if code:
            with open(self.err, "rb") as handle:
                said = handle.read().decode(errors="replace").strip().splitlines() or ["no output"]
            return f"exit {code}: {said[-1][:200]}"
        return "it ended without returning them"


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off meanwhile (as it was after): a rank's report unpickles into thousands
    of containers, and collections run as they are made took 86% of the time (7 ms of 8 per rank of 10 MB) while
    finding nothing to free (a result holds no cycle that is garbage). Paused once for all the results: resumed
    after each, it collected the growing heap again each time. What was made meanwhile is then moved to the
    oldest generation (``gc.freeze()`` and at once ``gc.unfreeze()``: nothing stays frozen), so that the first
    collection after does not walk a thousand reports at once (0.9 s); not where objects were frozen before
    (someone's own ``gc.freeze()`` is left as it is)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


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
    gathered = client.gather(futures)  # (the collector is not paused: a cluster in this process parses meanwhile)
    return shared(sorted((r for part in gathered for r in part), key=lambda r: r.rank))


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
    table: dict[str, int] = {}
    with open(sys.argv[2], "wb") as out:
        for rank, paths in jobs:  # each result framed by its length, written whole at once
            result = ranks.read_rank(rank, paths)
            new = ranks.encode_guards(result, table)
            data = pickle.dumps((new, result), protocol=pickle.HIGHEST_PROTOCOL)
            out.write(len(data).to_bytes(_HEAD, "little") + data)
            out.flush()


def encode_guards(result: RankResult, table: dict[str, int]) -> list[str]:
    """``result``'s frames' guards as numbers in a worker's ``table`` of the texts it sent (ranks running the same
    code guard on the same lines: each text crosses once, and the results pickle in half the bytes); returns the
    texts new to the table, in its order, to be sent with it."""
    new: list[str] = []
    for frame in result.report.frames:
        numbers: list[Any] = []
        for text in frame.guards:
            number = table.get(text)
            if number is None:
                number = table[text] = len(table)
                new.append(text)
            numbers.append(number)
        frame.guards = numbers
    return new


if __name__ == "__main__":
    main()
