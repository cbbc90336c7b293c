"""Traces from any run: ``TORCH_TRACE`` logs (a script, ``torchrun`` on many ranks, a job elsewhere)
read into the same ``Report`` a live session builds, one per rank.

``load(path)`` reads a directory (``dedicated_log_torch_trace_rank_N_*.log``, one per rank) or one
file; ``follow(path)`` tails a directory a running job writes, in a thread, and the panel redraws as
compiles land; a followed log written anew under it (truncated, or another file renamed over it) is
read again from its start, what its old content counted dropped, and said once (``RankTrace.start_over``).
Reading the logs (records typed at the edge, fed to an offline hub) is ``capture.logs``; the panel is
``views.traces_panel``. A truncated or corrupt log keeps what was read
and says which file and line broke; every string ends up escaped by the views like any other. The
problems kept are bounded (``MAX_ERRORS`` over all logs, ``logs.MAX_PROBLEMS`` per log, then a count),
and so is what a ``.log.gz`` makes a load read (``logs.MAX_DECOMPRESSED_BYTES``, ``logs.MAX_RECORD_LINES``:
past them the rest of that log is skipped, named by file and line).
A rank with several logs (a restarted job) is read as one history, its logs in the order written.
"""

from __future__ import annotations

import math
import os
import pathlib
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..capture import ranks as ranks_ops
from ..capture.compilation import Pending
from ..capture.divergence import compile_seconds, divergences, time_breakdown
from ..capture.live import Doctor, RankView, first_divergence
from ..capture.logs import (
    LogSet,
    RankTrace,
    TraceError,
    bounded,
    log_names,
    rank_files,
)
from ..capture.ranks import RankResult
from ..capture.records import clean_text
from ..core.text import _e, plural
from ..model.alarms import Alarm
from ..model.report import Report
from ..views.env import widgets_supported
from ..views.traces_panel import TracesPanel

__all__ = ["Follower", "TraceError", "Traces", "follow", "load", "watch"]

#: Lines of ``Traces.errors`` at most (over every log), then one line counting the rest.
MAX_ERRORS = 50


@dataclass
class Traces:
    """Reports of a traced run, one per rank, and how the ranks differ."""

    path: str
    ranks: dict[int, Report] = field(default_factory=dict)
    #: Each rank's first log.
    files: dict[int, str] = field(default_factory=dict)
    #: Each rank's logs, in the order read (more than one: a restarted job).
    logs: dict[int, list[str]] = field(default_factory=dict)
    #: What could not be read: "file:line: why" (what came before was kept), at most ``MAX_ERRORS``
    #: lines, the last counting the rest; paths skipped (a directory named like a log) first.
    errors: list[str] = field(default_factory=list)
    #: Paths under the directory skipped, with why (a directory named like a log).
    skipped: list[str] = field(default_factory=list)
    #: Seconds to read and parse, and the bytes read.
    seconds: float = 0.0
    bytes: int = 0
    #: The process group's timeout the skew alarms compare against (None: not known).
    timeout_s: float | None = None
    #: The job ``launch`` started (a ``subprocess.Popen``), or None.
    job: Any = field(default=None, repr=False)
    _rank_traces: dict[int, RankTrace | RankResult] = field(default_factory=dict, repr=False)
    _follower: Follower | None = field(default=None, repr=False)
    _panel: TracesPanel | None = field(default=None, repr=False)
    #: The cross-rank doctor of a followed job (``watch``): its alarms accumulate as the logs grow.
    _doctor: Doctor | None = field(default=None, repr=False)
    #: A loaded job's alarms, read once (the ranks' reports they were read from, by identity).
    _read_alarms: tuple[list[Report], list[Alarm]] | None = field(default=None, repr=False)
    #: ``first_divergence`` with what it was read from (the ranks' counts, the compiles open).
    _first_kept: tuple[Any, Alarm | None] | None = field(default=None, repr=False)

    @property
    def divergences(self) -> list[str]:
        return divergences(self.ranks, min(self.ranks) if self.ranks else 0)

    @property
    def alarms(self) -> list[Alarm]:
        """What drifts between the ranks (``capture.live``): raised live while a watched job runs, read at
        once from finished logs."""
        if self._doctor is not None:
            return list(self._doctor.alarms)
        reports = [self.ranks[r] for r in sorted(self.ranks)]
        kept = self._read_alarms
        if kept is None or len(kept[0]) != len(reports) or any(a is not b for a, b in zip(kept[0], reports,
                                                                                           strict=True)):
            alarms = Doctor(self.timeout_s, live=False).check(dict(self.ranks), {}, final=True)
            kept = self._read_alarms = (reports, alarms)
        return list(kept[1])

    @property
    def first_divergence(self) -> Alarm | None:
        """The first point where the ranks' compiles differ (``capture.live.first_divergence``), or None; read
        again only when a rank's compiles changed (a view redraws it at every poll of a watched job)."""
        compiling = self.compiling()
        key = (tuple((r, id(rep), len(rep.frames), len(rep.recompiles), len(rep.breaks))
                     for r, rep in sorted(self.ranks.items())),
               tuple((r, tuple(p.compile_id for p in ps)) for r, ps in sorted(compiling.items())))
        kept = self._first_kept
        if kept is None or kept[0] != key:
            kept = self._first_kept = (key, first_divergence(dict(self.ranks), compiling))
        return kept[1]

    @property
    def first_compile_s(self) -> float | None:
        """A watched job: seconds from the watch's start to the first compile seen on any rank (None: none yet,
        or not watched). A fault cannot begin before it."""
        return self._doctor.first_compile_s if self._doctor is not None else None

    def compiling(self) -> dict[int, list[Pending]]:
        """Each watched rank's compiles open now (started, not ended); none for logs read at once (a log that
        ends mid-compile is read the same however it was loaded: in this process or by workers)."""
        out: dict[int, list[Pending]] = {}
        if self._doctor is None:
            return out
        for rank, trace in list(self._rank_traces.items()):  # (the follower may add a rank meanwhile)
            if isinstance(trace, RankTrace):
                out[rank] = [p for log in list(trace.logs) if log.hub is not None for p in log.hub.compiling()]
        return out

    def check_alarms(self, *, changed: bool = True, final: bool = False) -> list[Alarm]:
        """A watched job's doctor run over the ranks as they are now (the follower calls it at every poll)."""
        if self._doctor is None:
            return []
        return self._doctor.check(dict(self.ranks), self.compiling(), changed=changed, final=final)

    def compiling_now(self) -> bool:
        """Whether a watched rank compiles now (its row's time grows: the view is redrawn at each poll)."""
        return self._doctor is not None and any(self.compiling().values())

    def live_rows(self) -> list[RankView]:
        """Each rank's live row (compiling now, counts, cache, collectives); empty when not watched."""
        if self._doctor is None:
            return []
        return self._doctor.views(dict(self.ranks), self.compiling())

    def summary(self) -> str:
        parts = [f"rank {r}: {plural(rep.graph_count, 'graph')}, {plural(rep.break_count, 'break')}, "
                 f"{plural(rep.recompile_count, 'recompile')}, compile {compile_seconds(rep):.2f} s"
                 f"{time_breakdown(rep)}"
                 for r, rep in sorted(self.ranks.items())]
        head = f"{plural(len(self.ranks), 'rank')} from {self.path}"
        return clean_text("\n".join([head, *parts, *self._live_lines(), *(f"  {d}" for d in self.divergences),
                                     *(f"  could not read: {e}" for e in self.errors)]))

    def _live_lines(self) -> list[str]:
        """A watched job's rows (what each rank compiles now), its alarms with their remedies, and the first
        divergence: the text form of the live view."""
        lines = []
        for row in self.live_rows():
            now = "; ".join(f"compiling {fn} ({where}) for {s:.1f} s" for fn, where, s in row.compiling) or "idle"
            lines.append(f"  rank {row.rank} now: {now}; {plural(row.compiles, 'compile')}, "
                         f"{plural(row.recompiles, 'recompile')}, cache {row.cache_hits} hit / {row.cache_misses} "
                         f"miss, collectives {', '.join(row.collectives) or 'none'}")
        for alarm in self.alarms:
            lines.append(f"  ALARM {alarm}")
            if alarm.remedy:
                lines.append(f"    remedy: {alarm.remedy}")
        first = self.first_divergence
        if first is not None:
            lines.append(f"  first divergence: rank {first.rank}, {first.frame} ({first.where}): {first.detail}")
        return lines

    def _live_html(self) -> str:
        def now(row: RankView) -> str:
            return _e("; ".join(f"{fn} ({where}) {s:.1f} s" for fn, where, s in row.compiling)) or "idle"

        rows = "".join(
            f"<tr><td>{row.rank}</td><td>{now(row)}</td>"
            f"<td>{row.compiles}</td><td>{row.recompiles}</td><td>{row.cache_hits} / {row.cache_misses}</td>"
            f"<td><code>{_e(', '.join(row.collectives)) or '-'}</code></td></tr>"
            for row in self.live_rows())
        table = (f"<table class='nbcompile-live'><tr><th>rank</th><th>compiling now</th><th>compiles</th>"
                 f"<th>recompiles</th><th>cache hit / miss</th><th>collectives (latest)</th></tr>{rows}</table>"
                 if rows else "")
        job = ""
        if self.job is not None:
            code = self.job.poll()
            job = (f"<p>job (pid {self.job.pid}): " + ("running" if code is None else f"ended, exit code {code}")
                   + f"; its output: <code>{_e(os.path.join(self.path, 'job.out'))}</code></p>")
            if code is not None:  # what was open then never finished
                table = table.replace("<th>compiling now</th>", "<th>compiling when the job ended</th>")
        timeout = (f" against a {self.timeout_s:.0f} s process group timeout" if self.timeout_s else
                   " (the job's timeout not known: 600 s assumed; pass timeout_s)") if self._doctor else ""
        alarms = "".join(
            f"<li style='color:#b00'><b>{_e(a.kind)}</b> rank {a.rank}, <code>{_e(a.frame)}</code> ({_e(a.where)})"
            f"{f', {a.seconds:.1f} s' if a.seconds else ''}: {_e(a.detail)}"
            f"{f'<br><span style=color:#555>remedy: {_e(a.remedy)}</span>' if a.remedy else ''}</li>"
            for a in self.alarms)
        first = self.first_divergence
        said = (f"<p><b>first divergence</b>: rank {first.rank}, <code>{_e(first.frame)}</code> ({_e(first.where)}): "
                f"{_e(first.detail)}</p>") if first is not None else ""
        head = f"<p><b>{plural(len(self.alarms), 'alarm')}</b>{_e(timeout)}</p>" if self._doctor or alarms else ""
        return (f"{job}{table}{head}<ul class='nbcompile-alarms'>{alarms}</ul>{said}"
                if table or alarms or said or job else "")

    def __repr__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{r}</td><td>{rep.graph_count}</td><td>{rep.break_count}</td><td>{rep.recompile_count}</td>"
            f"<td>{compile_seconds(rep):.2f}{_e(time_breakdown(rep))}</td>"
            f"<td><code>{_e(log_names(self.logs.get(r, [])))}</code></td></tr>"
            for r, rep in sorted(self.ranks.items()))
        notes = "".join(f"<li>{_e(d)}</li>" for d in self.divergences)
        errors = "".join(f"<li style='color:#b00'>{_e(e)}</li>" for e in self.errors)
        return clean_text(f"<div class='nbcompile-traces'><b>{_e(plural(len(self.ranks), 'rank'))} from "
                          f"<code>{_e(self.path)}</code></b><table><tr><th>rank</th><th>graphs</th><th>breaks</th>"
                          f"<th>recompiles</th><th>compile s</th><th>log</th></tr>{rows}</table>"
                          f"{self._live_html()}<ul>{notes}{errors}</ul></div>")

    def _ipython_display_(self) -> None:
        """In a frontend with widgets: the panel (it follows a followed job); elsewhere HTML and text."""
        from IPython.display import display


        if widgets_supported():
            display(self.panel().widget)
        else:
            display({"text/html": self._repr_html_(), "text/plain": self.summary()}, raw=True)

    def figure_dict(self) -> dict[str, Any]:
        """Per rank: compile time and the counts, side by side (a plotly figure as a dict)."""
        ranks = sorted(self.ranks)
        labels = [f"rank {r}" for r in ranks]
        data = [{"type": "bar", "name": name, "x": labels, "y": [_finite(getter(self.ranks[r])) for r in ranks],
                 **({"yaxis": "y2"} if name == "compile s" else {})}
                for name, getter in (("graphs", lambda rep: rep.graph_count), ("breaks", lambda rep: rep.break_count),
                                     ("recompiles", lambda rep: rep.recompile_count),
                                     ("compile s", compile_seconds))]
        return {"data": data, "layout": {
            "title": {"text": "per rank: counts and compile time"}, "barmode": "group", "height": 320,
            "yaxis": {"title": {"text": "count"}},
            "yaxis2": {"title": {"text": "compile s"}, "overlaying": "y", "side": "right"},
            "margin": {"l": 50, "r": 50, "t": 40, "b": 40}}}

    def figure(self) -> Any:
        import plotly.graph_objects as go

        return go.Figure(self.figure_dict())

    def panel(self) -> TracesPanel:
        """A rank selector, the selected rank's report, the divergences and the per-rank plot."""
        if self._panel is None:
            self._panel = TracesPanel(self)
        return self._panel

    def refresh(self) -> None:
        """Pick up what the followed logs gained (the follower thread calls it)."""
        for rank, trace in sorted(self._rank_traces.items()):
            self.ranks[rank] = trace.report
        problems = [found for _, t in sorted(self._rank_traces.items()) for found in t.problems]
        self.errors = self.skipped[:MAX_ERRORS] + bounded(problems, MAX_ERRORS)
        if self._panel is not None:
            self._panel.refresh()

    def stop(self) -> None:
        """Stop following (the last records are read first); a launched job runs on (``job.terminate()``)."""
        if self._follower is not None:
            self._follower.stop()

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Wait for a launched job to end and its last records to be read and checked; its exit code (None: no
        job, or still running at ``timeout_s``)."""
        code = None
        if self.job is not None:
            import subprocess

            try:
                code = self.job.wait(timeout_s)
            except subprocess.TimeoutExpired:
                return None
        if self._follower is not None:
            self._follower.join(timeout_s if timeout_s is not None else 30.0)
        return code

    def add(self, trace: RankTrace | RankResult) -> None:
        """Take in one rank's log (its report shows at the next ``refresh``)."""
        self._rank_traces[trace.rank] = trace
        self.files[trace.rank] = trace.path
        self.logs[trace.rank] = trace.paths

    def rank_trace(self, rank: int) -> RankTrace | RankResult | None:
        return self._rank_traces.get(rank)

    def tally(self) -> None:
        """The bytes read so far, over every rank."""
        self.bytes = sum(t.bytes for t in self._rank_traces.values())

    def follow_from(self, root: pathlib.Path) -> None:
        """Start the thread that reads what the job appends under ``root``."""
        self._follower = Follower(self, root)
        self._follower.start()


def _logs_below(root: pathlib.Path, depth: int = 3) -> str:
    """Where under ``root`` the logs are when ``root`` itself holds none (a job's ``node0/``, ``node1/``): the
    folders, said so the user can load each."""
    if not root.is_dir():
        return ""
    folders: dict[pathlib.Path, int] = {}
    pending = [(root, 0)]
    while pending and len(folders) < 50:
        here, level = pending.pop()
        try:
            entries = sorted(here.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir() and level < depth:
                pending.append((entry, level + 1))
            elif here != root and entry.suffix == ".log" and entry.is_file():
                folders[here] = folders.get(here, 0) + 1
    if not folders:
        return ""
    named = sorted(folders)
    listed = ", ".join(f"{p.relative_to(root)}/ ({folders[p]})" for p in named[:4]) + \
        (f" and {len(named) - 4} more" if len(named) > 4 else "")
    return (f"; its folders hold them: {listed}: load each, e.g. nbcompile.load({str(named[0])!r})")


def _finite(value: float) -> float | None:
    """A figure's value, or None (a gap) where it is not finite: the figure stays strict JSON."""
    return value if math.isfinite(value) else None


def load(path: str | os.PathLike[str], *, follow: bool = False, workers: int | None = None,
         client: Any = None, timeout_s: float | None = None) -> Traces:
    """Read a ``TORCH_TRACE`` directory or log file into one report per rank. ``follow``: keep reading
    what a running job appends (a background thread; ``Traces.stop()`` ends it). Several ranks are read in
    parallel: by ``workers`` processes on this machine (None: the usable cores, once the logs are large enough
    to be worth it; 1: in this process), or on an existing cluster: ``client``, a Dask ``distributed`` client
    whose workers can read the logs' paths. ``timeout_s``: the job's process group timeout, which the skew
    alarms compare against (``Traces.alarms``); a followed job is watched by the cross-rank doctor."""
    if timeout_s is not None and (isinstance(timeout_s, bool) or not (
            isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0)):
        raise TraceError(f"timeout_s={timeout_s!r}: give the process group's timeout in seconds, a number above 0")
    start = time.perf_counter()
    root = pathlib.Path(path).expanduser()
    found = rank_files(root) if root.exists() or not follow else LogSet()
    if not found.ranks and not follow:
        skipped = f"; {'; '.join(found.skipped[:3])}" if found.skipped else ""
        raise TraceError(f"{root}: no .log files (TORCH_TRACE writes dedicated_log_torch_trace_rank_N_*.log)"
                         f"{_logs_below(root)}{skipped}")
    traces = Traces(str(root), skipped=found.skipped, timeout_s=timeout_s,
                    _doctor=Doctor(timeout_s) if follow else None)
    jobs = [(rank, [str(p) for p in paths]) for rank, paths in sorted(found.ranks.items())]
    if not follow and (client is not None or ranks_ops.parallel_wanted(jobs, workers)):
        lost: list[str] = []
        if client is not None:
            results = ranks_ops.read_on_client(jobs, client)
        else:
            results, lost = ranks_ops.read_in_processes(jobs, workers)
        for result in results:
            traces.add(result)
        traces.skipped += lost
    else:
        for rank, paths in jobs:
            trace = RankTrace(rank, paths[0])
            for later in paths[1:]:
                trace.add_file(later)
            trace.read_more(final=not follow)
            trace.finish_notice()
            traces.add(trace)
    traces.refresh()
    traces.tally()
    traces.seconds = time.perf_counter() - start
    if traces.errors and not follow:
        warnings.warn("nbcompile.load: " + "; ".join(traces.errors[:3]), stacklevel=2)
    if follow:
        traces.follow_from(root)
    return traces


def follow(path: str | os.PathLike[str]) -> Traces:
    """``load(path, follow=True)``: the reports grow as the job writes; the kernel is not blocked."""
    return load(path, follow=True)


def watch(path: str | os.PathLike[str], timeout_s: float | None = None) -> Traces:
    """Follow a job started elsewhere with ``TORCH_TRACE=path`` and watch its ranks live: what each compiles
    now and for how long, and ``Traces.alarms`` raised before the watchdog (``timeout_s``: the job's process
    group timeout; None: 600 s assumed, said in the view). ``Traces.stop()`` ends the watch."""
    return load(path, follow=True, timeout_s=timeout_s)


class Follower:
    """Tails a TORCH_TRACE directory (new rank files included) in a daemon thread."""

    def __init__(self, traces: Traces, root: pathlib.Path, interval_s: float = 0.25) -> None:
        self.traces = traces
        self.root = root
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nbcompile-follow", daemon=True)
        self.on_change: Callable[[], None] | None = None
        #: When the view was last redrawn (a rank compiling: once a second, for its time).
        self._drawn_at = float("-inf")

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def join(self, timeout: float) -> None:
        """Wait for the thread to end by itself (a launched job's end stops it)."""
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            job = self.traces.job
            if job is not None and job.poll() is not None:  # the job ended: its last records, then stop
                break
            self._stop.wait(self.interval_s)
        self.poll(final=True)

    def poll(self, final: bool = False) -> bool:
        traces = self.traces
        changed = False
        try:
            found = rank_files(self.root) if self.root.exists() else LogSet()
        except (OSError, TraceError):
            found = LogSet()
        if found.skipped != traces.skipped:
            traces.skipped, changed = found.skipped, True
        for rank, paths in found.ranks.items():
            known = traces.rank_trace(rank)
            trace = known if isinstance(known, RankTrace) else None  # (a followed load reads in process)
            for path in paths:  # a log that appears later (a restart) is read after those read before
                if trace is None:
                    trace = RankTrace(rank, str(path))
                elif not trace.has_file(str(path)):
                    trace.add_file(str(path))
            if trace is None:
                continue
            traces.add(trace)
            changed |= trace.read_more(final=final)
            trace.finish_notice()
        try:  # the doctor looks at every poll: a rank compiling on is skew though its log stays the same
            alarmed = bool(traces.check_alarms(changed=changed, final=final))
        except Exception:  # a check must never kill the follower
            import logging

            logging.getLogger(__name__).exception("nbcompile watch: the cross-rank check failed")
            alarmed = False
        try:
            ticking = traces.compiling_now() and time.monotonic() - self._drawn_at >= 1.0  # its seconds grow
            if changed or final or alarmed or ticking:
                self._drawn_at = time.monotonic()
                traces.tally()
                traces.refresh()
                if self.on_change is not None:
                    self.on_change()
        except Exception:  # a view must never kill the follower
            import logging

            logging.getLogger(__name__).exception("nbcompile follow: redraw failed")
        return changed


def launch(script: str, args: list[str] | tuple[str, ...] = (), *, nproc: int = 2, timeout_s: float | None = None,
           trace_dir: str | os.PathLike[str] | None = None, python: str | None = None) -> Traces:
    """Start ``script`` as a local ``torchrun`` job of ``nproc`` ranks with ``TORCH_TRACE`` set (nothing else
    of the job changes) and watch it (``watch``): the returned ``Traces`` follows every rank's log until the
    job ends. ``timeout_s``: the job's process group timeout (the skew alarms compare against it). The job's
    output goes to ``job.out`` beside the logs (not a ``.log``: never read as one) in ``trace_dir`` (None: a new
    folder under ``.nbcompile/launch/``)."""
    import shlex
    import subprocess
    import sys
    import tempfile

    if not isinstance(nproc, int) or isinstance(nproc, bool) or not 1 <= nproc <= 1024:
        raise TraceError(f"--nproc {nproc!r}: give the number of ranks to start, 1 to 1024")
    if timeout_s is not None and (isinstance(timeout_s, bool) or not (
            isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0)):
        raise TraceError(f"timeout_s={timeout_s!r}: give the process group's timeout in seconds, a number above 0")
    target = pathlib.Path(script).expanduser()
    if not target.is_file():
        raise TraceError(f"{script}: no such script; give the path of the training script torchrun runs")
    if isinstance(args, str):
        args = shlex.split(args)
    runner = python or sys.executable
    if not (os.path.isfile(runner) and os.access(runner, os.X_OK)):
        raise TraceError(f"python={runner!r}: no such executable; give the Python that runs the job (default: "
                         "this one)")
    if trace_dir is None:
        base = pathlib.Path(".nbcompile") / "launch"
        base.mkdir(parents=True, exist_ok=True)
        where = pathlib.Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=base))
    else:
        where = pathlib.Path(trace_dir).expanduser()
        if where.exists() and not where.is_dir():
            raise TraceError(f"trace_dir={str(where)!r} is a file; give a folder for the job's logs (new or empty)")
        if where.is_dir() and any(where.iterdir()):  # another run's logs would be read as this job's
            raise TraceError(f"trace_dir={str(where)!r} is not empty; give a new or empty folder (another run's "
                             "logs would be read as this job's)")
        where.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TORCH_TRACE": str(where.resolve())}
    output = open(where / "job.out", "ab")  # noqa: SIM115  held by the job's process, closed when it ends
    try:
        job = subprocess.Popen([runner, "-m", "torch.distributed.run", "--nproc_per_node",
                                str(nproc), str(target), *args], env=env, stdout=output, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
    finally:
        output.close()
    traces = load(where, follow=True, timeout_s=timeout_s)
    traces.job = job
    return traces
