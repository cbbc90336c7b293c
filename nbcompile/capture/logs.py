"""``TORCH_TRACE`` logs read into reports: one log per rank, record by record, through an offline hub.

A log is a sequence of records: an envelope line (a glog prefix, then a JSON object whose first key
names the event, plus ``frame_id``, ``frame_compile_id``, ``attempt``), followed by the payload lines,
each indented by a tab. ``LogReader`` cuts a log into raw records (incrementally, for a job still
writing); ``RankTrace`` types each one (``records.parse_record``) and hands it to an offline
``Hub``: the very code that turns live trace events into report items, so a loaded trace and a live
session cannot disagree on how an event reads. A line that is not a record, a truncated record, a
damaged one (a field of the wrong type, a value that cannot be true) and an empty log are each named
by file and line; the rest is kept. So is a record whose payload is over ``MAX_PAYLOAD_CHARS`` (a
small ``.log.gz`` can hold gigabytes of payload lines): its lines are not kept past the bound, so memory
stays bounded, and it is skipped, named. A compressed log is read to ``MAX_DECOMPRESSED_BYTES``
decompressed and ``MAX_RECORD_LINES`` lines outside payloads at most, so a load's time is bounded too:
the rest is skipped, named by the line it stopped at (a plain log's size on disk is what it holds, and
a followed job's log keeps growing: both are read whole). The problems kept per log are bounded
(``MAX_PROBLEMS``, then a count), so a garbage file cannot flood a notebook; what they say is UTF-8
(``clean_text``: a path with an undecodable byte too). Nothing in a trace is executed.

A rank with several logs (an elastic job restarted: one ``..._rank_N_<random>.log`` per process) is
read as one history: each log in the order it was written, judged by the time of its first record
(the glog prefix: month, day and time, which survives copying the logs where file times do not; a
log without one goes after those with one, by modification time), each through its own hub (a
restarted process numbers its frames and file names afresh), into the rank's one report.
"""

from __future__ import annotations

import builtins
import codecs
import json
import os
import pathlib
import re
import stat
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import NbcompileError
from ..model.report import Report
from .hub import Hub, Recording
from .records import (
    Record,
    RecordError,
    clean_text,
    kind_of,
    loads,
    maybe_inexact,
    parse_record,
    read_by_nbcompile,
)

_orjson_loads: Callable[[str], Any] | None
try:
    from orjson import loads as _orjson_loads
except ImportError:  # pragma: no cover - orjson is a dependency; without it every line takes ``_take``'s way
    _orjson_loads = None

_ENVELOPE = re.compile(r"^[VIWEC]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]]*\] (?P<json>\{.*)$")
#: An envelope's glog prefix, matched in place in a chunk (its JSON starts where the match ends): no copy of
#: the line is made to read it.
_PREFIX = re.compile(r"[VIWEC]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]\n]*\] (?=\{)")
_STAMP = re.compile(rb"^[VIWEC](?P<month>\d\d)(?P<day>\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)\.(?P<us>\d+) ")
_RANK_FILE = re.compile(r"rank_(?P<rank>\d+)")
#: Where a run of payload lines ends: a newline not followed by a tab (found in C, not line by line).
_RUN_END = re.compile(r"\n[^\t]")
#: How long a follower waits for more of a record whose file stopped growing before it reads it.
SETTLE_S = 0.5
#: Problems kept (and shown) per log; past it they are counted: "... and 22,903 more".
MAX_PROBLEMS = 20
#: Bytes read (or decompressed) at a time.
CHUNK = 1 << 22
#: Longest line read; a longer one (a gzip bomb of one line) is skipped to its end, named.
MAX_LINE_CHARS = 64 << 20
#: Most payload characters of one record kept (torch's largest, Inductor's output code of a big model,
#: is a few MB); a record with more is skipped, named, and its lines are dropped as they come.
MAX_PAYLOAD_CHARS = 32 << 20
#: Most bytes one compressed log is decompressed to: a small ``.log.gz`` can hold gigabytes of records each
#: under ``MAX_PAYLOAD_CHARS`` (a load's time grows with them); past it the rest of the log is skipped, named,
#: the record cut there dropped and every record before it kept.
MAX_DECOMPRESSED_BYTES = 256 << 20
#: Most lines outside payloads (a record's first line, a blank or a garbage line) read from one compressed
#: log: each costs a record's parse, so 256 MB of tiny records would take minutes. A real log has one such
#: line per 2 kB or so (well under the bound at ``MAX_DECOMPRESSED_BYTES``); past it the rest is skipped, named.
MAX_RECORD_LINES = 1 << 18


class TraceError(NbcompileError):
    """A log that cannot be read; the message names the file and the line."""


class Problems:
    """What could not be read in one log, "file:line: why" each: the first ``limit`` kept, the rest
    counted (a 3 MB random file is 20 lines and a count, not 22,923 lines)."""

    def __init__(self, path: str, limit: int = MAX_PROBLEMS) -> None:
        self.path = path
        self.limit = limit
        self.kept: list[str] = []
        #: Problems past ``limit``: counted, not kept.
        self.more = 0

    def append(self, text: str) -> None:
        if len(self.kept) < self.limit:
            self.kept.append(clean_text(text))
        else:
            self.more += 1

    def __len__(self) -> int:
        return len(self.kept) + self.more

    @property
    def full(self) -> bool:
        """No more are kept: a caller may count one (``more += 1``) without wording it."""
        return len(self.kept) >= self.limit

    def lines(self) -> list[str]:
        """The kept problems, then one line with the count of the rest."""
        tail = [f"{clean_text(self.path)}: ... and {self.more:,} more {'problem' if self.more == 1 else 'problems'} "
                f"(the first {self.limit} are listed)"] if self.more else []
        return self.kept + tail


def bounded(problems: Iterable[Problems], limit: int) -> list[str]:
    """Several logs' problems as at most ``limit`` lines and one line counting the rest."""
    lines: list[str] = []
    rest = 0
    for found in problems:
        for line in found.kept:
            if len(lines) < limit:
                lines.append(line)
            else:
                rest += 1
        if found.more:
            if len(lines) < limit:
                lines.append(found.lines()[-1])
            else:
                rest += found.more
    if rest:
        lines.append(f"... and {rest:,} more {'problem' if rest == 1 else 'problems'}")
    return lines


class RawRecord:
    """One record as the log has it: the envelope decoded, its payload, its first line. The payload's lines are
    joined when it is first read (``payload``): a record of a kind nbcompile does not read never pays it."""

    __slots__ = ("_payload", "_pieces", "escapes", "line", "metadata", "wanted")

    def __init__(self, metadata: dict[str, Any], payload: str | None, line: int,
                 pieces: list[str] | None = None, escapes: bool = True, wanted: bool | None = None) -> None:
        self.metadata = metadata
        self.line = line
        #: Of a kind nbcompile reads (``read_by_nbcompile``), as the reader found; None: not looked at yet.
        self.wanted = wanted
        #: Whether its envelope's JSON may hold a surrogate's escape (``\\udXXX``): False only when it was read and
        #: holds none (a log's text is decoded with errors replaced, so a lone surrogate can come only from one).
        self.escapes = escapes
        self._payload = payload
        #: The payload as the log has it, not joined yet: runs of lines, each a tab, the text and a newline.
        self._pieces = pieces

    @property
    def payload(self) -> str | None:
        if self._pieces is not None:  # "\tA\n\tB\n" -> "A\nB": each line's tab dropped, the newlines between kept
            self._payload, self._pieces = "".join(self._pieces).replace("\n\t", "\n")[1:-1], None
        return self._payload

    @payload.setter
    def payload(self, value: str | None) -> None:
        self._payload, self._pieces = value, None

    def __repr__(self) -> str:
        return f"RawRecord({self.metadata!r}, {self.payload!r}, {self.line})"


@dataclass(slots=True)
class _Pending:
    """The record being read: its envelope, its payload lines so far (runs of whole lines as the log has
    them, each a tab, the text and a newline; none kept past the bound) and their length, its first line."""

    metadata: dict[str, Any]
    line: int
    payload: list[str] = field(default_factory=list)
    chars: int = 0
    #: Its envelope's JSON holds a surrogate's escape (``RawRecord.escapes``).
    escapes: bool = True
    #: Of a kind nbcompile reads (``RawRecord.wanted``).
    wanted: bool | None = None
    #: Its payload went over the bound: its lines are dropped, the record skipped.
    over: bool = False
    #: Returned when complete (with its payload's lines); False: a record passed over, only counted.
    kept: bool = True


class LogReader:
    """Reads one log incrementally: ``feed(text)`` returns the complete records so far (a record is
    complete when the next envelope starts, or at ``flush``); errors name the file and the line. At
    most ``max_line`` characters of a line and ``max_payload`` of a record's payload are held (by
    default ``MAX_LINE_CHARS`` and ``MAX_PAYLOAD_CHARS``, read when the reader is made). Payload lines
    are taken in runs (a record's payload is one piece of the log); the other lines one by one, at most
    ``max_lines`` of them (None: no bound), then the rest is skipped, named (``cut``). Not ``keep_passed``: a
    record of a kind nbcompile never reads (``read_by_nbcompile``) is only counted in ``passed``, its payload's
    lines neither copied nor returned (a loader's way: 85% of a real trace's records are such)."""

    def __init__(self, path: str, max_line: int = MAX_LINE_CHARS, max_payload: int | None = None,
                 max_lines: int | None = None, keep_passed: bool = True) -> None:
        self.path = path
        self.keep_passed = keep_passed
        #: Records passed over, counted, not returned (not ``keep_passed``); the caller may take and zero it.
        self.passed = 0
        self.max_lines = max_lines
        #: Lines taken one by one so far (records' first lines, blank and garbage lines).
        self.taken = 0
        self.problems = Problems(path)
        self.max_line = max_line
        self.max_payload = MAX_PAYLOAD_CHARS if max_payload is None else max_payload
        self._line = 0
        self._rest = ""
        #: Inside a line over ``max_line``: dropped up to its end.
        self._skipping = False
        self._current: _Pending | None = None
        #: Records skipped whole (a payload over ``max_payload``).
        self.skipped = 0
        #: Reading stopped (``cut``): the rest of the log is skipped.
        self.stopped = False

    @property
    def errors(self) -> list[str]:
        """The problems met so far, bounded (``Problems.lines``)."""
        return self.problems.lines()

    def feed(self, text: str) -> list[RawRecord]:
        out: list[RawRecord] = []
        if self.stopped:
            return out
        if self._skipping:
            end = text.find("\n")
            if end < 0:
                return out
            text, self._skipping = text[end + 1:], False
        data = self._rest + text
        whole = data.rfind("\n") + 1
        prefix_at = _PREFIX.match
        self._rest = data[whole:]  # an unfinished last line waits for the rest
        at = 0
        while at < whole:
            if data.startswith("\t", at):  # a run of payload lines: one piece, no work per line
                run = _RUN_END.search(data, at, whole)
                end = whole if run is None else run.start() + 1
                lines = data.count("\n", at, end)
                self._line += lines
                self._add_payload(data, at, end, lines)
            else:
                end = data.index("\n", at) + 1
                if self.max_lines is not None and self.taken >= self.max_lines:
                    self.cut(f"over {self.max_lines:,} records (or other lines outside payloads)")
                    return out
                self.taken += 1
                self._line += 1
                prefix = prefix_at(data, at, end)
                if prefix is None or not self._begin(data[prefix.end():end - 1], out):
                    self._take(data[at:end - 1], out)
            at = end
        if len(self._rest) > self.max_line:
            self._line += 1
            self.problems.append(f"{self.path}:{self._line}: a line of over {self.max_line:,} characters, not a "
                                 "trace record; skipped")
            self._rest, self._skipping = "", True
        return out

    def flush(self, final: bool = True) -> list[RawRecord]:
        """The last record too (the file is complete, or stopped growing). Not ``final`` (a writer may
        only have paused): nothing is read while the last line is unfinished."""
        out: list[RawRecord] = []
        if self._rest and not final:
            return out
        self._skipping = False
        if self._rest:
            self._line += 1
            rest, self._rest = self._rest, ""
            self._take(rest, out, last=True)
        self._finish(out)
        return out

    def cut(self, why: str) -> None:
        """Stop reading here: the record whose end was not read is dropped, and the problem is named at
        the first line not read whole; the records before it were returned by ``feed``."""
        line = self._line + 1
        dropped = self._current
        self._current, self._rest, self._skipping, self.stopped = None, "", False, True
        record = f" (the record at line {dropped.line}, cut there, dropped)" if dropped is not None else ""
        self.problems.append(f"{self.path}:{line}: {why}; the rest skipped{record}; kept what came before")

    def _add_payload(self, data: str, start: int, end: int, lines: int) -> None:
        """Payload lines ``data[start:end]`` (each a tab, its text, a newline) to the record being read:
        kept as one piece while its payload is within the bound, dropped once it is over."""
        current = self._current
        if current is None or current.over:
            return
        current.chars += end - start - lines  # each line's tab stands for the newline joining it
        if current.chars > self.max_payload + 1:
            current.over = True
            current.payload.clear()
        elif current.kept:
            current.payload.append(data[start:end])

    def _begin(self, text: str, out: list[RawRecord]) -> bool:
        """The common case of ``_take``, its result the same: a record whose envelope's JSON ``text`` orjson
        reads as a dict. False (nothing done): any other line, for ``_take`` to read and name."""
        if _orjson_loads is None:
            return False
        try:
            metadata = _orjson_loads(text)
        except ValueError:
            return False
        if type(metadata) is not dict:
            return False
        wanted = read_by_nbcompile(metadata)
        if wanted and maybe_inexact(metadata):
            try:
                metadata = json.loads(text)  # an integer past 64 bits: as json reads it, not a float
            except (ValueError, RecursionError):
                return False
        self._finish(out)
        escapes = wanted and "\\u" in text and ("\\ud" in text or "\\uD" in text)  # (a record passed over: moot)
        self._current = _Pending(metadata, self._line, escapes=escapes, wanted=wanted,
                                 kept=wanted or self.keep_passed)
        return True

    def _take(self, line: str, out: list[RawRecord], last: bool = False) -> None:
        if line.startswith("\t"):  # the last line of a log, without its newline
            self._add_payload(line + "\n", 0, len(line) + 1, 1)
            return
        if not line or line.isspace():  # (no copy of a long line made to learn it is blank)
            return
        match = _ENVELOPE.match(line)
        metadata: Any = None
        text, wanted = line, False
        if match is not None:
            try:
                text = match["json"]
                metadata = loads(text, exact=False)  # what a record passed over holds is never read: only its kind
                wanted = isinstance(metadata, dict) and read_by_nbcompile(metadata)
                if wanted and maybe_inexact(metadata):
                    metadata = json.loads(text)  # an integer past 64 bits: as json reads it, not a float
            except json.JSONDecodeError as exc:
                kind = "truncated" if last else "corrupt"
                self.problems.append(f"{self.path}:{self._line}: {kind} record ({exc.msg} at column "
                                     f"{exc.pos + match.start('json') + 1}); kept what came before")
                self._finish(out)
                return
            except (ValueError, RecursionError) as exc:  # a number of 5,000 digits, [[[[... 100,000 deep
                why = "nested too deeply" if isinstance(exc, RecursionError) else _one_line(exc)
                self.problems.append(f"{self.path}:{self._line}: corrupt record ({why}); kept what came before")
                self._finish(out)
                return
        if not isinstance(metadata, dict):
            if self.problems.full:  # a flood of garbage lines: counted, not worded
                self.problems.more += 1
                return
            self.problems.append(f"{self.path}:{self._line}: not a trace record (a TORCH_TRACE line starts like "
                                 f"'V1123 04:36:34.203000 123 file.py:28] {{...}}'): {line[:80]!r}")
            return
        self._finish(out)
        escapes = wanted and "\\u" in text and ("\\ud" in text or "\\uD" in text)  # (a record passed over: moot)
        self._current = _Pending(metadata, self._line, escapes=escapes, wanted=wanted,
                                 kept=wanted or self.keep_passed)

    def _finish(self, out: list[RawRecord]) -> None:
        """The record being read, if any, to ``out``; one whose payload went over the bound is named instead."""
        current, self._current = self._current, None
        if current is None:
            return
        if current.over:
            self.skipped += 1
            self.problems.append(f"{self.path}:{current.line}: record at line {current.line} "
                                 f"({kind_of(current.metadata)[:60] or 'no kind'}): payload over "
                                 f"{self.max_payload / (1 << 20):g} MB, skipped; read the others")
            return
        if not current.kept:
            self.passed += 1
            return
        out.append(RawRecord(current.metadata, None, current.line, current.payload or None, current.escapes,
                             current.wanted))


#: Logs of one rank named in its title (and the panel's row): the first ones and the last, then a count.
NAMED_LOGS = 3


def log_names(paths: list[str], most: int = NAMED_LOGS) -> str:
    """``a.log, then b.log``: the file names of a rank's logs in order; past ``most``, the first ``most - 1``,
    how many more, and the last (a restarted job's rank of 1,000 logs is one short line)."""
    if len(paths) <= most:
        return ", then ".join(os.path.basename(p) for p in paths)
    first = ", then ".join(os.path.basename(p) for p in paths[:most - 1])
    return f"{first}, then {len(paths) - most:,} more, then {os.path.basename(paths[-1])}"


def _one_line(exc: BaseException, most: int = 120) -> str:
    """An exception as one short line: ``ValueError: Exceeds the limit (4300 digits) ...``."""
    text = (str(exc).splitlines() or [""])[0]
    text = text if len(text) <= most else text[: most - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass
class LogFile:
    """One log of a rank: its reader and its own offline hub (a restarted process numbers its frames
    and interns its file names afresh, so two logs never share a hub's state)."""

    path: str
    reader: LogReader
    #: Made at its first record (``RankTrace.hub_of``): an empty log costs no hub.
    hub: Hub | None = None
    offset: int = 0
    bytes: int = 0
    #: Records read from it.
    events: int = 0
    grown_at: float = field(default_factory=time.monotonic)
    decoder: Any = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace"))
    #: A compressed log is read whole, once: it was.
    done: bool = False
    #: An empty log is named once.
    empty_named: bool = False
    #: The file read: (device, inode) when it was first opened (another file renamed over it is another log).
    identity: tuple[int, int] | None = None
    #: Its first bytes as read (a log truncated and written again past the offset read starts otherwise).
    head: builtins.bytes = b""  # ``bytes`` is the field above here

    def restart(self) -> None:
        """Back to before the first read: a new reader (its problems too), decoder and hub, nothing counted."""
        self.reader = reader_for(self.path)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.hub, self.offset, self.bytes, self.events = None, 0, 0, 0
        self.done = self.empty_named = False
        self.identity, self.head = None, b""
        self.grown_at = time.monotonic()


def reader_for(path: str) -> LogReader:
    """A reader of the log ``path``; a compressed one, a small file that may hold gigabytes, read to the bounds."""
    return LogReader(path, max_lines=MAX_RECORD_LINES if path.endswith(".gz") else None, keep_passed=False)


#: The bytes of a log's start kept to tell the same log grown from one written anew.
HEAD_BYTES = 256


class RankTrace:
    """One rank's log (or logs, in the order they were written), read into one report through offline hubs."""

    def __init__(self, rank: int, path: str) -> None:
        self.rank = rank
        self.logs: list[LogFile] = []
        #: The paths of ``logs``, in order and as a set (a follower asks at every poll whether a log is new).
        self._order: list[str] = []
        self._paths: set[str] = set()
        self.recording = Recording(Report(title=clean_text(f"rank {rank}: {os.path.basename(path)}"),
                                          backend="(from the trace)"))
        self.add_file(path)

    def add_file(self, path: str) -> None:
        """Read ``path`` after the logs this rank already has (a restarted process's log). Constant work per
        log: a rank of 1,000 logs is named by its first and last (``log_names``), not all of them each time."""
        self.logs.append(LogFile(path, reader_for(path)))
        self._order.append(path)
        self._paths.add(path)
        if len(self.logs) > 1:
            self.report.title = clean_text(f"rank {self.rank}: {log_names(self._order)} ({len(self.logs):,} logs "
                                           "of one rank, read in order)")

    def hub_of(self, log: LogFile) -> Hub:
        """The log's own offline hub, made at its first record."""
        if log.hub is None:
            log.hub = Hub(offline=True)
            log.hub.register(self.recording)
        return log.hub

    def has_file(self, path: str) -> bool:
        """Whether ``path`` is one of this rank's logs already."""
        return path in self._paths

    @property
    def path(self) -> str:
        """The rank's first log."""
        return self.logs[0].path

    @property
    def paths(self) -> list[str]:
        return list(self._order)

    @property
    def report(self) -> Report:
        return self.recording.report

    @property
    def events(self) -> int:
        return sum(log.events for log in self.logs)

    @property
    def bytes(self) -> int:
        return sum(log.bytes for log in self.logs)

    @property
    def problems(self) -> list[Problems]:
        return [log.reader.problems for log in self.logs]

    @property
    def errors(self) -> list[str]:
        """Every log's problems, each log's bounded."""
        return [line for log in self.logs for line in log.reader.errors]

    @property
    def reader(self) -> LogReader:
        """The reader of the rank's newest log."""
        return self.logs[-1].reader

    def feed(self, records: Iterable[RawRecord], log: LogFile | None = None) -> None:
        """Type each record and hand it to the hub; a damaged one is named by file and line and skipped.
        Nothing a record holds can raise out of here: what the typed edge misses, the hub's handler
        raising included, is named the same way. No records, no work: the hub is not entered (entering
        it takes torch's loggers over and back, milliseconds, which 1,000 empty logs paid twice each)."""
        records = list(records)
        log = log if log is not None else self.logs[-1]
        log.events += log.reader.passed  # the records its reader passed over: counted, never typed
        log.reader.passed = 0
        if not records:
            return
        problems = log.reader.problems
        hub = self.hub_of(log)
        with hub.active(self.recording):
            for raw in records:
                log.events += 1
                wanted = raw.wanted if raw.wanted is not None else read_by_nbcompile(raw.metadata)
                if not wanted:  # chromium events, tensor descriptions: nothing to type
                    continue
                where = f"{log.path}:{raw.line}"
                try:
                    typed = parse_record(raw.metadata, raw.payload, escapes=raw.escapes)
                except RecordError as exc:
                    problems.append(f"{where}: damaged record ({exc}); read the others")
                    continue
                except (ValueError, TypeError, LookupError, AttributeError, RecursionError) as exc:
                    problems.append(f"{where}: damaged record ({_one_line(exc)}); read the others")
                    continue
                for problem in getattr(typed, "problems", ()):
                    problems.append(f"{where}: {problem}")
                if isinstance(typed, Record):
                    try:
                        hub.dispatch(typed)
                    except Exception as exc:  # a record the hub cannot take must not end the load  # noqa: BLE001
                        problems.append(f"{where}: a record nbcompile could not read ({_one_line(exc)}); "
                                        "read the others")
        self.recording.notify()

    def read_more(self, final: bool = False) -> bool:
        """Read what the logs gained since the last call; True when anything was read. A log written anew
        since (truncated, or another file renamed over it) starts the rank over (``start_over``)."""
        rewritten = [(log, why) for log in self.logs if (why := self._rewritten(log)) is not None]
        if rewritten:
            self.start_over(rewritten)
        changed = bool(rewritten)
        for log in self.logs:
            changed |= self._read_log(log, final)
        return changed

    def _rewritten(self, log: LogFile) -> str | None:
        """How ``log`` was written anew since it was read (None: it was not, or nothing was read yet): shorter
        than the offset read, another file under its name, or other bytes at its start."""
        if log.path.endswith(".gz") or log.identity is None:
            return None  # a compressed log is read whole, once
        try:
            info = os.stat(log.path)
        except OSError:
            return None
        if (info.st_dev, info.st_ino) != log.identity:
            return "replaced by another file"
        if info.st_size < log.offset:
            return f"truncated ({info.st_size:,} bytes; {log.offset:,} had been read)"
        if info.st_size > log.offset and log.head:  # it grew: the same log, or one written anew past the offset
            try:
                with open(log.path, "rb") as handle:
                    head = handle.read(len(log.head))
            except OSError:
                return None
            if head != log.head:
                return "truncated and written anew"
        return None

    def start_over(self, rewritten: list[tuple[LogFile, str]]) -> None:
        """Logs written anew: the rank's report starts over (what their old content counted is dropped, and
        its other logs are read again into it), each such log named once, in its own problems."""
        self.recording = Recording(Report(title=self.report.title, backend=self.report.backend))
        for log in self.logs:
            log.restart()
        for log, why in rewritten:
            log.reader.problems.append(f"{log.path}: the log was {why} while it was followed; read again from its "
                                       "start (the counts of its old content dropped)")

    def _read_log(self, log: LogFile, final: bool) -> bool:
        problems = log.reader.problems
        if log.path.endswith(".gz"):  # a compressed log (CI artifacts): read whole, once
            if log.done:
                return False
            log.done = True
            self._read_gzip(log)
            self._note_empty(log)
            return True
        try:
            size = os.path.getsize(log.path)
        except OSError:
            return False
        grew = size > log.offset
        if grew:
            try:
                with open(log.path, "rb") as handle:
                    if log.identity is None:  # the file this log is: another one under its name is read anew
                        info = os.fstat(handle.fileno())
                        log.identity = (info.st_dev, info.st_ino)
                    if len(log.head) < HEAD_BYTES:
                        log.head = handle.read(HEAD_BYTES)
                    handle.seek(log.offset)
                    while chunk := handle.read(CHUNK):
                        log.offset += len(chunk)
                        self.feed(log.reader.feed(log.decoder.decode(chunk)), log)
            except OSError as exc:
                problems.append(f"{log.path}: cannot be read ({exc.strerror or exc})")
            log.bytes = log.offset
            log.grown_at = time.monotonic()
        if final or (not grew and time.monotonic() - log.grown_at > SETTLE_S):
            text = log.decoder.decode(b"", final=final) if final else ""
            last = log.reader.feed(text) + log.reader.flush(final=final) if text else log.reader.flush(final=final)
            if last or log.reader.passed:  # (a record passed over, finished here, is counted too)
                self.feed(last, log)
                grew = True
        if final:
            self._note_empty(log)
        return grew

    def _read_gzip(self, log: LogFile) -> None:
        """Decompress a chunk at a time (a small file may hold gigabytes) and read as far as it goes."""
        problems = log.reader.problems
        stream = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip
        decoded = 0
        limit = MAX_DECOMPRESSED_BYTES
        try:
            with open(log.path, "rb") as handle:
                while not log.reader.stopped and (chunk := handle.read(CHUNK)):
                    log.bytes += len(chunk)
                    while chunk and not stream.eof:
                        data = stream.decompress(chunk, CHUNK)
                        chunk = stream.unconsumed_tail
                        over = decoded + len(data) > limit
                        data = data[:limit - decoded] if over else data
                        decoded += len(data)
                        self.feed(log.reader.feed(log.decoder.decode(data)), log)
                        if over and not log.reader.stopped:
                            log.reader.cut(f"over {limit / (1 << 20):g} MB decompressed")
                        if log.reader.stopped:
                            break
                    if stream.eof:
                        break
        except OSError as exc:
            problems.append(f"{log.path}: cannot be read ({exc.strerror or exc})")
        except zlib.error as exc:
            what = "not a gzip file" if not decoded else "a damaged gzip file; read the " \
                f"{decoded:,} bytes before the damage"
            problems.append(f"{log.path}: {what} ({exc})")
        else:
            if not stream.eof and log.bytes and not log.reader.stopped:
                problems.append(f"{log.path}: a truncated or damaged gzip file; read the {decoded:,} bytes before "
                                "the damage")
        log.offset = log.bytes
        if log.reader.stopped:
            return
        self.feed(log.reader.feed(log.decoder.decode(b"", final=True)), log)
        self.feed(log.reader.flush(), log)

    def _note_empty(self, log: LogFile) -> None:
        """A log with no record in it is named, once (an empty ``.log.gz`` is not a rank that compiled nothing)."""
        if log.events or log.reader.skipped or log.reader.stopped or log.empty_named:
            return
        log.empty_named = True
        what = "an empty file (0 bytes)" if not log.bytes else "no trace records in it"
        log.reader.problems.append(f"{log.path}: {what}; this rank shows nothing from it")

    def finish_notice(self) -> None:
        errors = [line for found in self.problems for line in found.kept]
        total = sum(len(found) for found in self.problems)
        if errors:
            self.report.notice = "; ".join(errors[:3]) + (f" (and {total - 3:,} more)" if total > 3 else "")


@dataclass
class LogSet:
    """The logs under a path, by rank, each rank's in the order they were written; and what was
    skipped (a directory named like a log), one line each."""

    ranks: dict[int, list[pathlib.Path]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def first_record_time(path: pathlib.Path) -> tuple[int, ...] | None:
    """(month, day, hour, minute, second, microsecond) of a log's first line's glog prefix; None when
    it has none (or cannot be read)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(256)
        if path.name.endswith(".gz"):
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 256)
    except (OSError, zlib.error):
        return None
    match = _STAMP.match(head)
    if match is None:
        return None
    us = match["us"][:6].ljust(6, b"0")
    return (int(match["month"]), int(match["day"]), int(match["h"]), int(match["m"]), int(match["s"]), int(us))


def _written_order(path: pathlib.Path) -> tuple[Any, ...]:
    """How the logs of one rank sort: by their first record's time; those without one after, by mtime."""
    stamp = first_record_time(path)
    try:
        mtime = path.stat().st_mtime
    except OSError:
        mtime = 0.0
    return (stamp is None, stamp or (), mtime, path.name)


def rank_files(path: pathlib.Path) -> LogSet:
    """The logs of a TORCH_TRACE directory (or the one log given), by rank. ``..._rank_N_...`` names
    the rank; logs without one are one "rank" each (one process after another). Several logs of one
    rank (a restarted job) are kept, in the order they were written (``_written_order``). What is not
    a regular file (a directory named ``x.log``, a FIFO) is skipped with a note: never opened."""
    if path.is_file():
        match = _RANK_FILE.search(path.name)
        return LogSet({int(match["rank"]) if match else 0: [path]})
    if not path.exists():
        raise TraceError(f"{path}: no such file or directory; give a TORCH_TRACE directory or one of its .log files")
    if not path.is_dir():
        raise TraceError(f"{path}: not a directory or a regular file; give a TORCH_TRACE directory or one of its "
                         ".log files")
    found = LogSet()
    unranked: list[pathlib.Path] = []
    logs = sorted([*path.glob("*.log"), *path.glob("*.log.gz")], key=lambda p: p.name)
    for log in logs:
        try:
            mode = log.stat().st_mode
        except OSError as exc:
            found.skipped.append(f"{log}: skipped, it cannot be read ({exc.strerror or exc})")
            continue
        if not stat.S_ISREG(mode):
            what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            found.skipped.append(f"{log}: skipped, {what} named like a log")
            continue
        match = _RANK_FILE.search(log.name)
        if match is None:
            unranked.append(log)
        else:
            found.ranks.setdefault(int(match["rank"]), []).append(log)
    for files in found.ranks.values():
        if len(files) > 1:
            files.sort(key=_written_order)
    following = max(found.ranks) + 1 if found.ranks else 0  # counted on: never max() again per log (quadratic)
    for log in unranked:  # several unranked logs (one process after another): one "rank" each
        rank = 0 if 0 not in found.ranks else following
        found.ranks[rank] = [log]
        following = max(following, rank + 1)
    return found
