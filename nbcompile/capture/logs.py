"""``TORCH_TRACE`` logs read into reports: one log per rank, record by record, through an offline hub.

A log is a sequence of records: an envelope line (a glog prefix, then a JSON object whose first key
names the event, plus ``frame_id``, ``frame_compile_id``, ``attempt``), followed by the payload lines,
each indented by a tab. ``LogReader`` cuts a log into raw records (incrementally, for a job still
writing); ``RankTrace`` types each one (``records.parse_record``) and hands it to an offline
``Hub``: the very code that turns live trace events into report items, so a loaded trace and a live
session cannot disagree on how an event reads. A line that is not a record, a truncated record and a
damaged one (a field of the wrong type) are each named by file and line; the rest is kept. Nothing
in a trace is executed.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..core.errors import NbcompileError
from ..core.text import plural
from ..model.report import Report
from . import guards as guard_ops
from .hub import Hub, Recording
from .records import Record, RecordError, parse_record

_ENVELOPE = re.compile(r"^[VIWEC]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]]*\] (?P<json>\{.*)$")
_RANK_FILE = re.compile(r"rank_(?P<rank>\d+)")
#: How long a follower waits for more of a record whose file stopped growing before it reads it.
SETTLE_S = 0.5


class TraceError(NbcompileError):
    """A log that cannot be read; the message names the file and the line."""


@dataclass
class RawRecord:
    """One record as the log has it: the envelope decoded, the payload lines joined, its first line."""

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

    def feed(self, text: str) -> list[RawRecord]:
        lines = (self._rest + text).split("\n")
        self._rest = lines.pop()  # an unfinished last line waits for the rest
        out: list[RawRecord] = []
        for line in lines:
            self._line += 1
            self._take(line, out)
        return out

    def flush(self, final: bool = True) -> list[RawRecord]:
        """The last record too (the file is complete, or stopped growing). Not ``final`` (a writer may
        only have paused): nothing is read while the last line is unfinished."""
        out: list[RawRecord] = []
        if self._rest and not final:
            return out
        if self._rest:
            self._line += 1
            rest, self._rest = self._rest, ""
            self._take(rest, out, last=True)
        if self._current is not None:
            out.append(self._finish())
        return out

    def _take(self, line: str, out: list[RawRecord], last: bool = False) -> None:
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

    def _finish(self) -> RawRecord:
        assert self._current is not None
        metadata, payload, line = self._current
        self._current = None
        return RawRecord(metadata, "\n".join(payload) if payload else None, line)


class RankTrace:
    """One rank's log, read into a report through an offline hub."""

    def __init__(self, rank: int, path: str) -> None:
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

    def feed(self, records: Iterable[RawRecord]) -> None:
        """Type each record and hand it to the hub; a damaged one is named by file and line and skipped."""
        with self.hub.active(self.recording):
            for raw in records:
                self.events += 1
                try:
                    typed = parse_record(raw.metadata, raw.payload)
                except RecordError as exc:
                    self.reader.errors.append(f"{self.path}:{raw.line}: damaged record ({exc}); read the others")
                    continue
                if isinstance(typed, Record):
                    self.hub.dispatch(typed)
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


def compile_seconds(report: Report) -> float:
    """The seconds torch spent compiling a report's frames."""
    return sum(f.compile_time_s for f in report.frames)


def time_breakdown(report: Report) -> str:
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
        mine, theirs = compile_seconds(report), compile_seconds(reference)
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


def rank_files(path: pathlib.Path) -> dict[int, pathlib.Path]:
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


