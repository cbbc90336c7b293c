"""Traces from any run: ``TORCH_TRACE`` logs (a script, ``torchrun`` on many ranks, a job elsewhere)
read into the same ``Report`` a live session builds, one per rank.

A log is a sequence of records: an envelope line (a glog prefix, then a JSON object whose one key
names the event, plus ``frame_id``, ``frame_compile_id``, ``attempt``), followed by the payload lines,
each indented by a tab. Records are fed to an offline ``capture.Hub``: the very code that turns live
trace events into report items, so a loaded trace and a live session cannot disagree on how an event
reads. Nothing in a trace is executed; every string ends up escaped by the views like any other.

``load(path)`` reads a directory (``dedicated_log_torch_trace_rank_N_*.log``, one per rank) or one
file; ``follow(path)`` tails a directory a running job writes, in a thread, and the panel redraws as
compiles land. A truncated or corrupt log keeps what was read and says which file and line broke.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..capture import guards as guard_ops
from ..core.errors import NbcompileError
from ..core.text import _e, plural
from ..model.report import Report

_ENVELOPE = re.compile(r"^[VIWEC]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]]*\] (?P<json>\{.*)$")
_RANK_FILE = re.compile(r"rank_(?P<rank>\d+)")
#: How long a follower waits for more of a record whose file stopped growing before it reads it.
SETTLE_S = 0.5


class TraceError(NbcompileError):
    """A log that cannot be read; the message names the file and the line."""


@dataclass
class _Record:
    metadata: dict[str, Any]
    payload: str | None
    line: int


class LogReader:
    """Reads one log incrementally: ``feed(text)`` returns the complete records so far (a record is
    complete when the next envelope starts, or at ``flush``); errors name the file and the line."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.errors: list[str] = []
        self._line = 0
        self._rest = ""
        self._current: tuple[dict[str, Any], list[str], int] | None = None

    def feed(self, text: str) -> list[_Record]:
        lines = (self._rest + text).split("\n")
        self._rest = lines.pop()  # an unfinished last line waits for the rest
        out: list[_Record] = []
        for line in lines:
            self._line += 1
            self._take(line, out)
        return out

    def flush(self, final: bool = True) -> list[_Record]:
        """The last record too (the file is complete, or stopped growing). Not ``final`` (a writer may
        only have paused): nothing is read while the last line is unfinished."""
        out: list[_Record] = []
        if self._rest and not final:
            return out
        if self._rest:
            self._line += 1
            rest, self._rest = self._rest, ""
            self._take(rest, out, last=True)
        if self._current is not None:
            out.append(self._finish())
        return out

    def _take(self, line: str, out: list[_Record], last: bool = False) -> None:
        if line.startswith("\t"):
            if self._current is not None:
                self._current[1].append(line[1:])
            return
        if not line.strip():
            return
        match = _ENVELOPE.match(line)
        metadata: Any = None
        if match is not None:
            try:
                metadata = json.loads(match["json"])
            except json.JSONDecodeError as exc:
                kind = "truncated" if last else "corrupt"
                self.errors.append(f"{self.path}:{self._line}: {kind} record ({exc.msg} at column "
                                   f"{exc.pos + match.start('json') + 1}); kept what came before")
                if self._current is not None:
                    out.append(self._finish())
                return
        if not isinstance(metadata, dict):
            self.errors.append(f"{self.path}:{self._line}: not a trace record (a TORCH_TRACE line starts like "
                               f"'V1123 04:36:34.203000 123 file.py:28] {{...}}'): {line[:80]!r}")
            return
        if self._current is not None:
            out.append(self._finish())
        self._current = (metadata, [], self._line)

    def _finish(self) -> _Record:
        assert self._current is not None
        metadata, payload, line = self._current
        self._current = None
        return _Record(metadata, "\n".join(payload) if payload else None, line)


class RankTrace:
    """One rank's log, read into a report through an offline hub."""

    def __init__(self, rank: int, path: str) -> None:
        from ..capture.hub import Hub, Recording

        self.rank = rank
        self.path = path
        self.reader = LogReader(path)
        self.recording = Recording(Report(title=f"rank {rank}: {os.path.basename(path)}", backend="(from the trace)"))
        self.hub = Hub(offline=True)
        self.hub.register(self.recording)
        self.offset = 0
        self.events = 0
        self.bytes = 0
        self._grown_at = time.monotonic()

    @property
    def report(self) -> Report:
        return self.recording.report

    def feed(self, records: Iterable[_Record]) -> None:
        with self.hub.active(self.recording):
            for record in records:
                self.events += 1
                self.hub.on_record(record)  # type: ignore[arg-type]  # what the hub reads of a LogRecord
        self.recording.notify()

    def read_more(self, final: bool = False) -> bool:
        """Read what the file gained since the last call; True when anything was read."""
        if self.path.endswith(".gz"):  # a compressed log (CI artifacts): read whole, once
            if self.offset:
                return False
            import zlib

            try:
                raw = pathlib.Path(self.path).read_bytes()
            except OSError as exc:
                self.reader.errors.append(f"{self.path}: {exc.strerror}")
                return False
            stream = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip, read as far as it goes
            try:
                data = stream.decompress(raw)
                complete = stream.eof
            except zlib.error as exc:
                data, complete = b"", False
                self.reader.errors.append(f"{self.path}: not a gzip file ({exc})")
            if not complete and data:
                self.reader.errors.append(f"{self.path}: a truncated or damaged gzip file; read the "
                                          f"{len(data)} bytes before the damage")
            chunks = [data.decode("utf-8", errors="replace")]
            text = "".join(chunks)
            self.offset = self.bytes = len(text.encode())
            self.feed(self.reader.feed(text))
            self.feed(self.reader.flush())
            return True
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return False
        grew = size > self.offset
        if grew:
            with open(self.path, encoding="utf-8", errors="replace") as handle:
                handle.seek(self.offset)
                text = handle.read()
            self.offset = size
            self.bytes = size
            self._grown_at = time.monotonic()
            self.feed(self.reader.feed(text))
        if final or (not grew and time.monotonic() - self._grown_at > SETTLE_S):
            last = self.reader.flush(final=final)
            if last:
                self.feed(last)
                return True
        return grew

    def finish_notice(self) -> None:
        if self.reader.errors:
            self.report.notice = "; ".join(self.reader.errors[:3]) + (
                f" (and {len(self.reader.errors) - 3} more)" if len(self.reader.errors) > 3 else "")


@dataclass
class Traces:
    """Reports of a traced run, one per rank, and how the ranks differ."""

    path: str
    ranks: dict[int, Report] = field(default_factory=dict)
    files: dict[int, str] = field(default_factory=dict)
    #: What could not be read: "file:line: why" (what came before was kept).
    errors: list[str] = field(default_factory=list)
    #: Seconds to read and parse, and the bytes read.
    seconds: float = 0.0
    bytes: int = 0
    _rank_traces: dict[int, RankTrace] = field(default_factory=dict, repr=False)
    _follower: Any = field(default=None, repr=False)
    _panel: Any = field(default=None, repr=False)

    @property
    def divergences(self) -> list[str]:
        return divergences(self.ranks, min(self.ranks) if self.ranks else 0)

    def summary(self) -> str:
        parts = [f"rank {r}: {plural(rep.graph_count, 'graph')}, {plural(rep.break_count, 'break')}, "
                 f"{plural(rep.recompile_count, 'recompile')}, compile {_compile_s(rep):.2f} s{_breakdown(rep)}"
                 for r, rep in sorted(self.ranks.items())]
        head = f"{plural(len(self.ranks), 'rank')} from {self.path}"
        return "\n".join([head, *parts, *(f"  {d}" for d in self.divergences),
                          *(f"  could not read: {e}" for e in self.errors)])

    def __repr__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{r}</td><td>{rep.graph_count}</td><td>{rep.break_count}</td><td>{rep.recompile_count}</td>"
            f"<td>{_compile_s(rep):.2f}{_e(_breakdown(rep))}</td>"
            f"<td><code>{_e(os.path.basename(self.files.get(r, '')))}</code></td></tr>"
            for r, rep in sorted(self.ranks.items()))
        notes = "".join(f"<li>{_e(d)}</li>" for d in self.divergences)
        errors = "".join(f"<li style='color:#b00'>{_e(e)}</li>" for e in self.errors)
        return (f"<div class='nbcompile-traces'><b>{_e(plural(len(self.ranks), 'rank'))} from "
                f"<code>{_e(self.path)}</code></b><table><tr><th>rank</th><th>graphs</th><th>breaks</th>"
                f"<th>recompiles</th><th>compile s</th><th>log</th></tr>{rows}</table>"
                f"<ul>{notes}{errors}</ul></div>")

    def _ipython_display_(self) -> None:
        """In a frontend with widgets: the panel (it follows a followed job); elsewhere HTML and text."""
        from IPython.display import display

        from ..views.env import widgets_supported

        if widgets_supported():
            display(self.panel().widget)
        else:
            display({"text/html": self._repr_html_(), "text/plain": self.summary()}, raw=True)

    def figure_dict(self) -> dict[str, Any]:
        """Per rank: compile time and the counts, side by side (a plotly figure as a dict)."""
        ranks = sorted(self.ranks)
        labels = [f"rank {r}" for r in ranks]
        data = [{"type": "bar", "name": name, "x": labels, "y": [getter(self.ranks[r]) for r in ranks],
                 **({"yaxis": "y2"} if name == "compile s" else {})}
                for name, getter in (("graphs", lambda rep: rep.graph_count), ("breaks", lambda rep: rep.break_count),
                                     ("recompiles", lambda rep: rep.recompile_count),
                                     ("compile s", _compile_s))]
        return {"data": data, "layout": {
            "title": {"text": "per rank: counts and compile time"}, "barmode": "group", "height": 320,
            "yaxis": {"title": {"text": "count"}},
            "yaxis2": {"title": {"text": "compile s"}, "overlaying": "y", "side": "right"},
            "margin": {"l": 50, "r": 50, "t": 40, "b": 40}}}

    def figure(self) -> Any:
        import plotly.graph_objects as go

        return go.Figure(self.figure_dict())

    def panel(self) -> Any:
        """A rank selector, the selected rank's report, the divergences and the per-rank plot."""
        if self._panel is None:
            self._panel = TracesPanel(self)
        return self._panel

    def refresh(self) -> None:
        """Pick up what the followed logs gained (the follower thread calls it)."""
        for rank, trace in sorted(self._rank_traces.items()):
            self.ranks[rank] = trace.report
        self.errors = [e for t in self._rank_traces.values() for e in t.reader.errors]
        if self._panel is not None:
            self._panel.refresh()

    def stop(self) -> None:
        """Stop following (the last records are read first)."""
        if self._follower is not None:
            self._follower.stop()


def _compile_s(report: Report) -> float:
    return sum(f.compile_time_s for f in report.frames)


def _breakdown(report: Report) -> str:
    """`` (backend 1.20 s, inductor 0.90 s)``: where the compile time went, as far as torch says."""
    backend = [f.backend_time_s for f in report.frames if f.backend_time_s is not None]
    inductor = [f.inductor_time_s for f in report.frames if f.inductor_time_s is not None]
    parts = ([f"backend {sum(backend):.2f} s"] if backend else []) + (
        [f"inductor {sum(inductor):.2f} s"] if inductor else [])
    return f" ({', '.join(parts)})" if parts else ""


def divergences(ranks: dict[int, Report], base: int = 0) -> list[str]:
    """One line per way a rank differs from ``base`` (``Traces`` uses its lowest rank): graphs, breaks,
    recompiles (with what changed),
    compile time (over twice or under half, and more than 1 s apart)."""
    if base not in ranks:
        return []
    reference = ranks[base]
    lines: list[str] = []
    for rank in sorted(r for r in ranks if r != base):
        report = ranks[rank]
        lines += _recompile_lines(rank, base, report, reference)
        lines += _break_lines(rank, base, report, reference)
        if report.graph_count != reference.graph_count:
            lines.append(f"rank {rank}: {plural(report.graph_count, 'graph')} against rank {base}'s "
                         f"{reference.graph_count}")
        mine, theirs = _compile_s(report), _compile_s(reference)
        if abs(mine - theirs) > 1.0 and (mine > 2 * theirs or theirs > 2 * mine):
            lines.append(f"rank {rank}: compile time {mine:.1f} s against rank {base}'s {theirs:.1f} s")
    return lines


def _recompile_lines(rank: int, base: int, report: Report, reference: Report) -> list[str]:
    def key(rec: Any) -> tuple[str, str]:
        return rec.function, guard_ops.describe(rec.changes) or rec.reason[:80]

    theirs: dict[tuple[str, str], int] = {}
    for rec in reference.recompiles:
        theirs[key(rec)] = theirs.get(key(rec), 0) + 1
    extra: dict[tuple[str, str], int] = {}
    for rec in report.recompiles:
        k = key(rec)
        if theirs.get(k, 0) > 0:
            theirs[k] -= 1
        else:
            extra[k] = extra.get(k, 0) + 1
    lines = [f"rank {rank}: {plural(n, 'recompile')} of {fn} ({what}) that rank {base} did not have"
             for (fn, what), n in extra.items()]
    lines += [f"rank {rank}: no recompile of {fn} ({what}), which rank {base} had {plural(n, 'time')}"
              for (fn, what), n in theirs.items() if n > 0]
    return lines


def _break_lines(rank: int, base: int, report: Report, reference: Report) -> list[str]:
    def sites(rep: Report) -> dict[tuple[str, int, str], int]:
        out: dict[tuple[str, int, str], int] = {}
        for b in rep.breaks:
            k = (b.function, b.lineno, b.gb_type)
            out[k] = out.get(k, 0) + 1
        return out

    mine, theirs = sites(report), sites(reference)
    lines = [f"rank {rank}: {plural(n - theirs.get(k, 0), 'graph break')} in {k[0]} line {k[1]} ({k[2]}) that "
             f"rank {base} did not have" for k, n in mine.items() if n > theirs.get(k, 0)]
    lines += [f"rank {rank}: no graph break in {k[0]} line {k[1]} ({k[2]}), which rank {base} had"
              for k, n in theirs.items() if k not in mine]
    return lines


def _rank_files(path: pathlib.Path) -> dict[int, pathlib.Path]:
    if path.is_file():
        match = _RANK_FILE.search(path.name)
        return {int(match["rank"]) if match else 0: path}
    if not path.exists():
        raise TraceError(f"{path}: no such file or directory; give a TORCH_TRACE directory or one of its .log files")
    if not path.is_dir():
        raise TraceError(f"{path}: not a directory or a regular file; give a TORCH_TRACE directory or one of its "
                         ".log files")
    files: dict[int, pathlib.Path] = {}
    logs = sorted([*path.glob("*.log"), *path.glob("*.log.gz")], key=lambda p: p.name)
    for log in logs:
        match = _RANK_FILE.search(log.name)
        rank = int(match["rank"]) if match else 0
        if rank in files and match is None:
            rank = max(files) + 1  # several unranked logs (one process after another): one "rank" each
        files[rank] = log
    return files


def load(path: str | os.PathLike[str], *, follow: bool = False) -> Traces:
    """Read a ``TORCH_TRACE`` directory or log file into one report per rank. ``follow``: keep reading
    what a running job appends (a background thread; ``Traces.stop()`` ends it)."""
    start = time.perf_counter()
    root = pathlib.Path(path).expanduser()
    files = _rank_files(root) if root.exists() or not follow else {}
    if not files and not follow:
        raise TraceError(f"{root}: no .log files (TORCH_TRACE writes dedicated_log_torch_trace_rank_N_*.log)")
    traces = Traces(str(root))
    for rank, file in sorted(files.items()):
        trace = RankTrace(rank, str(file))
        trace.read_more(final=not follow)
        trace.finish_notice()
        traces._rank_traces[rank] = trace
        traces.files[rank] = str(file)
    traces.refresh()
    traces.bytes = sum(t.bytes for t in traces._rank_traces.values())
    traces.seconds = time.perf_counter() - start
    if traces.errors and not follow:
        warnings.warn("nbcompile.load: " + "; ".join(traces.errors[:3]), stacklevel=2)
    if follow:
        traces._follower = Follower(traces, root)
        traces._follower.start()
    return traces


def follow(path: str | os.PathLike[str]) -> Traces:
    """``load(path, follow=True)``: the reports grow as the job writes; the kernel is not blocked."""
    return load(path, follow=True)


class Follower:
    """Tails a TORCH_TRACE directory (new rank files included) in a daemon thread."""

    def __init__(self, traces: Traces, root: pathlib.Path, interval_s: float = 0.25) -> None:
        self.traces = traces
        self.root = root
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nbcompile-follow", daemon=True)
        self.on_change: Callable[[], None] | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.interval_s)
        self.poll(final=True)

    def poll(self, final: bool = False) -> bool:
        traces = self.traces
        changed = False
        try:
            files = _rank_files(self.root) if self.root.exists() else {}
        except (OSError, TraceError):
            files = {}
        for rank, file in files.items():
            trace = traces._rank_traces.get(rank)
            if trace is None or trace.path != str(file):
                trace = traces._rank_traces[rank] = RankTrace(rank, str(file))
                traces.files[rank] = str(file)
            changed |= trace.read_more(final=final)
            trace.finish_notice()
        if changed:
            traces.bytes = sum(t.bytes for t in traces._rank_traces.values())
            try:
                traces.refresh()
            except Exception:  # a view must never kill the follower
                import logging

                logging.getLogger(__name__).exception("nbcompile follow: redraw failed")
            if self.on_change is not None:
                self.on_change()
        return changed


class TracesPanel:
    """The panel of a loaded trace: a rank selector, its report, the divergences, the per-rank plot."""

    def __init__(self, traces: Traces) -> None:
        import ipywidgets as widgets

        self.traces = traces
        self.rank = widgets.Dropdown(options=self._options(), description="rank")
        self.rank.observe(lambda _: self.refresh(), names="value")
        self.summary = widgets.HTML()
        self.report_html = widgets.HTML()
        self.plot = widgets.Output()
        self.widget = widgets.VBox([self.rank, self.summary, self.plot, self.report_html],
                                   layout=widgets.Layout(border="1px solid #ddd", padding="6px"))
        self.refresh()

    def _options(self) -> list[tuple[str, int]]:
        return [(f"rank {r}", r) for r in sorted(self.traces.ranks)]

    def refresh(self) -> None:
        options = self._options()
        if list(self.rank.options) != options:
            value = self.rank.value
            self.rank.options = options
            if value in dict(options).values():
                self.rank.value = value
        self.summary.value = self.traces._repr_html_()
        self.plot.outputs = ({"output_type": "display_data", "metadata": {},
                              "data": {"application/vnd.plotly.v1+json": self.traces.figure_dict(),
                                       "text/plain": "per-rank counts"}},)
        report = self.traces.ranks.get(self.rank.value) if self.rank.value is not None else None
        from ..model.render import to_html

        self.report_html.value = to_html(report) if report is not None else "<i>no rank yet</i>"

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
