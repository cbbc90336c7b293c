"""One process-wide listener on torch's structured trace (``HUB``), routing each compilation's events
to the ``Recording`` that owns them; ``RecordingBackend`` hands it the graphs.

``Recording`` is what owns events: a session's or an ``inspect`` call's. The
hub holds one ``logging.Handler`` on ``torch.__trace`` while any recording is
alive and removes it when the last one is closed, so nbcompile leaves the
logger as it found it.

Events of one frame compilation share a compile id ('frame/compile'). They
are buffered per compile id and applied when its ``compilation_metrics``
event closes the compilation, to the first owner found of:

1. the recording whose backend received the compilation's graphs (exact);
2. the recording active in this thread (``Hub.active``), for ``inspect`` and
   session runs;
3. the recording that owns the frame's code by file and line (a cell's file),
   which catches calls from any later cell.

Graphs come from ``RecordingBackend``, a thin wrapper around the real
backend that reads each FX graph it is handed and passes it on unchanged.

A closed compilation becomes report items in ``compilation.py``; torch's
own log records are kept by ``torch_log.py``.

While a thread compiles for a recording (``Hub.active``), what torch's own
loggers print (Dynamo's ``W1123 ...`` warnings) goes to that recording's
``Report.torch_log`` instead of the cell: the printing handlers of the
``torch`` loggers are stood in for, and put back exactly when the last
compile ends. Records from other threads pass through unchanged.

What the user reads names what they wrote: a guard on ``___stack0`` names
the expression on that line, ``G['SCALE']`` is ``SCALE``, a resume
function is ``f (after line 5)`` and a cell's temporary file is its line.
Raw names stay where the data is matched on (``Frame.function``).
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import logging
import os
import threading
import time
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..core.lazy import lazy_module
from ..core.names import torch_name
from ..model.report import Fix, Graph, GraphBreak, GuardChange, Report, entry_of
from . import guards as guard_ops
from .cache_keys import KeyBook
from .cell import cell_line_of
from .compilation import MAX_COLLECTIVES, Pending, apply_compilation, graph_input_name, no_values, previous_compile
from .global_state import GlobalState, is_internal
from .records import (
    CacheLookup,
    CollectiveSchedule,
    CompilationMetrics,
    CppGuards,
    DynamoStart,
    GraphBreakReason,
    InductorOutputCode,
    OutputGraph,
    RecompileReasons,
    Record,
    RecordError,
    StrEntry,
    parse_record,
)
from .torch_log import TorchLogCatcher, printing
from .trace_parse import parse_graph_ops

if TYPE_CHECKING:
    from ..core import torch_compat
else:  # loaded at its first use: an offline hub (a trace log read from disk) never loads torch
    torch_compat = lazy_module("nbcompile.core.torch_compat", globals(), "torch_compat")

#: Compilations still open at once before the oldest is dropped (a failed
#: compile that never closed, say); keeps memory bounded.
MAX_PENDING = 64


class Recording:
    """Owner of captured events: one report at a time, plus the code it owns."""

    def __init__(self, report: Report, *, cell_files: tuple[str, ...] = ()) -> None:
        #: Dynamo's first view (``Report.stage == "dynamo"``) while the backend's stage that replaced it with a
        #: fresh report runs: what the report falls back to if that stage is interrupted (``interrupted``).
        self.first_view: Report | None = None
        self._report = report
        #: The notice ``interrupted`` set last (``run_ended`` takes it back once a run completes the report).
        self._said = ""
        self.cell_files: set[str] = set(cell_files)
        self.spans: list[tuple[str, int, int]] = []
        #: Bumped by every change; views compare it with the version they drew (they never draw here).
        self.version = 0
        #: Every code compiled for this recording, (filename, first line, name): whose automatic-dynamic
        #: memory nbcompile gives back (``torch_compat.restore_code_state``).
        self.codes: set[tuple[str, int, str]] = set()
        #: Suggests fixes for each break as it is recorded (set by the session or inspect).
        self.advise: Callable[[GraphBreak], list[Fix]] | None = None
        #: A ``time.perf_counter()`` time after which a compile for this recording is cut at its next graph
        #: (``OverDeadline`` raised from the backend): a scratch run's budget (the fix search's trials).
        self.deadline: float | None = None
        #: Whether a compile was cut at the deadline.
        self.cut = False
        #: Cache region (``torch_compat.region_of``) -> the entry whose compiled wrapper compiles into it.
        self.regions: dict[int, str] = {}
        #: compile id -> the entry whose call compiled it ("" when none of ``regions`` was running, or torch has
        #: none): every compile of the session is there, and what a
        #: toggle that recompiles some entries only carries over from the previous report (``carried``).
        self.entry_of: dict[str, str] = {}
        #: Where torch has no cache regions: (file, code name) of each entry's function -> (its first and last
        #: line, the entry; "" when two entries share it); a compile belongs to the innermost entry on the stack.
        self.entry_codes: dict[tuple[str, str], list[tuple[int, int, str]]] = {}
        #: Called with the report after each frame compiled for it (a view's progress line); never raises.
        self.progress: Callable[[Report], None] | None = None

    @property
    def report(self) -> Report:
        return self._report

    @report.setter
    def report(self, report: Report) -> None:
        old = self._report
        if old is not report:  # a fresh report of the backend's stage in place of Dynamo's first view: keep the view
            fresh = report.stage == "complete" and not (report.frames or report.graphs or report.check)
            self.first_view = old if old.stage == "dynamo" and fresh else None
        self._report = report

    def interrupted(self, error: BaseException) -> None:
        """A run for this recording was interrupted (``error``, a KeyboardInterrupt): the report is marked so,
        never left to read as complete. After Dynamo's first view the report is that view again (its graphs,
        breaks and guards), not the backend's stage cut short; ``notice`` says where it stopped."""
        report = self._report
        if report.interrupted:
            return
        where = _where_interrupted(error, report.backend)
        view = self.first_view
        if view is not None and report.stage == "complete":
            self._report, self.first_view, report = view, None, view
            report.notice = (f"interrupted during {where}: this is Dynamo's first view (its graphs, breaks and "
                             "guards), without kernels, timings or the check; run the cell again to compile it whole")
        elif report.stage == "dynamo":  # Dynamo's first view itself (no code generated in its pass)
            report.notice = ("interrupted during Dynamo's first view: it holds the graphs and breaks Dynamo saw before "
                             "it; run the cell again for the whole report")
        else:
            report.notice = (f"interrupted during {where}: the report holds what was compiled before it; run it "
                             "again for the whole report")
        report.interrupted = True
        self._said = report.notice
        self.notify()

    def torch_counted(self, breaks: int) -> None:
        """A run for this recording ended in which torch's own counter (``counters["graph_break"]``) grew by
        ``breaks``: kept on the report beside its own count (``Report.torch_breaks``)."""
        report = self._report
        report.torch_breaks = (report.torch_breaks or 0) + breaks

    def run_ended(self) -> None:
        """A run for this recording ended, not interrupted: the first view is no longer stood by, and a report a
        run interrupted before and this one took on (no first view: the same report) is no longer cut short."""
        self.first_view = None
        report = self._report
        if report.interrupted and report.stage == "complete":
            report.interrupted = False
            if report.notice == self._said:  # what ``interrupted`` said, not a notice set since
                report.notice = ""

    def own_span(self, filename: str, first: int, last: int) -> None:
        self.spans.append((filename, first, last))

    def entry_code(self, code: types.CodeType, entry: str) -> None:
        """Where torch has no cache regions: ``code`` (an entry's function) compiles for ``entry``."""
        last = max((line for _, _, line in code.co_lines() if line), default=code.co_firstlineno)
        spans = self.entry_codes.setdefault((code.co_filename, code.co_name), [])
        for i, (first, end, known) in enumerate(spans):
            if first <= last and code.co_firstlineno <= end:  # one code, or two that overlap: "" if two entries
                spans[i] = (min(first, code.co_firstlineno), max(end, last), known if known == entry else "")
                return
        spans.append((code.co_firstlineno, last, entry))

    def entry_on_stack(self, frames: Iterable[tuple[str, str, int]]) -> str:
        """The entry whose function (or one of its resume functions) is innermost among ``frames`` ((file, code
        name, first line), innermost first), or "" (none, or one two entries share)."""
        for filename, name, first in frames:
            for start, end, entry in self.entry_codes.get((filename, entry_of(name)[0]), ()):
                if start <= first <= end:
                    return entry
        return ""

    def owns(self, filename: str, lineno: int) -> bool:
        if filename in self.cell_files:
            return True
        return any(f == filename and a <= lineno <= b for f, a, b in self.spans)

    def cell_line(self, filename: str, lineno: int) -> int | None:
        # Cell bodies are compiled with the magic line kept as a blank first
        # line, so a line number in a cell file is the line as displayed.
        if filename in self.cell_files:
            return lineno
        return cell_line_of(filename, lineno)

    def notify(self) -> None:
        """Mark the report changed. Redraws happen later, outside torch's trace handler."""
        self.version += 1

    def compiled(self) -> None:
        """One frame compiled for the report: the progress hook hears of it (a failing hook is ignored:
        it must never raise into torch's compile)."""
        if self.progress is not None:
            try:
                self.progress(self.report)
            except Exception:  # noqa: BLE001, S110  a view's progress line is never worth a compile
                pass


class _TraceHandler(logging.Handler):
    def __init__(self, hub: Hub) -> None:
        super().__init__(level=logging.DEBUG)
        self._hub = hub

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._hub.on_record(record)
        except Exception:  # capture must never break the user's compile
            logging.getLogger(__name__).exception("nbcompile capture failed on a trace event")


class Hub:
    """The process-wide router from trace events to recordings. ``offline``: a hub fed from a trace
    file (``logs.py``): the same parsing, without what only a live process has (the recompiling
    frame's values, timing its guards), and graphs read from ``dynamo_output_graph`` events.

    Records arrive typed (``records.parse_record``) and go to one handler per kind, in ``_handlers``."""

    def __init__(self, offline: bool = False) -> None:
        self.offline = offline
        self._lock = threading.RLock()
        self._handler = _TraceHandler(self)
        self._users = 0
        self._strings: dict[int, str] = {}
        #: Dynamo's frame id -> (function, file, first line) of its compiles (a log's ids: per process).
        self._frames_named: dict[str, tuple[str, str, int]] = {}
        self._pending: dict[str, Pending] = {}
        #: compile id -> the global state it compiled under, the newest ``MAX_STATES`` (a recompile's reason
        #: names the state that changed, never its values: they are compared with these).
        self._states: collections.OrderedDict[str, GlobalState] = collections.OrderedDict()
        self._owners: list[weakref.ref[Recording]] = []
        self._local = threading.local()
        #: The damaged records skipped live, newest last (``RecordError`` messages).
        self.damaged: collections.deque[str] = collections.deque(maxlen=20)
        self._warned: set[tuple[str, str]] = set()
        #: Threads compiling for a recording now, and the torch loggers' handlers stood in for meanwhile.
        self._compiling = 0
        self._catchers: list[tuple[logging.Logger, TorchLogCatcher, list[logging.Handler], list[logging.Handler]]] = []
        #: One handler per record kind: register a new kind's here, beside ``records.REGISTRY``.
        self._handlers: dict[type[Record], Callable[[Any], None]] = {
            StrEntry: self._on_string,
            DynamoStart: self._on_start,
            GraphBreakReason: self._on_break,
            RecompileReasons: self._on_recompile,
            CppGuards: self._on_guards,
            OutputGraph: self._on_output_graph,
            InductorOutputCode: self._on_output_code,
            CompilationMetrics: self._on_metrics,
            CacheLookup: self._on_cache,
            CollectiveSchedule: self._on_collectives,
        }
        #: The FX graph cache keys looked up in this process (a log: in it), to say what differed on a miss.
        self.keys = KeyBook("in this rank's log" if offline else "in this process")

    # -- lifetime --------------------------------------------------------------------
    @property
    def installed(self) -> bool:
        return self._handler in torch_compat.trace_logger().handlers

    def acquire(self) -> None:
        with self._lock:
            self._users += 1
            if self._users == 1:
                torch_compat.trace_logger().addHandler(self._handler)

    def release(self) -> None:
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users == 0:
                torch_compat.trace_logger().removeHandler(self._handler)
                self._pending.clear()

    def register(self, recording: Recording) -> None:
        with self._lock:
            self._owners = [r for r in self._owners if r() is not None]
            self._owners.append(weakref.ref(recording))

    def unregister(self, recording: Recording) -> None:
        with self._lock:
            self._owners = [r for r in self._owners if r() not in (None, recording)]

    @contextlib.contextmanager
    def active(self, recording: Recording) -> Iterator[None]:
        """Attribute compilations started in this thread to ``recording``. An interrupt marks its report
        (``Recording.interrupted``); any other end of the run is ``Recording.run_ended``."""
        stack = self._stack()
        stack.append(recording)
        self._catch_torch_logs()
        # torch's own count of breaks, beside ours (an offline hub reads a log: no torch ran, none loaded)
        counted = torch_compat.graph_break_counter() if len(stack) == 1 and not self.offline else None
        try:
            yield
        except KeyboardInterrupt as exc:
            recording.interrupted(exc)
            raise
        except BaseException:
            recording.run_ended()
            raise
        else:
            recording.run_ended()
        finally:
            stack.pop()
            self._release_torch_logs()
            after = torch_compat.graph_break_counter() if counted is not None else None
            if counted is not None and after is not None:  # torch's own count of this run's breaks, beside ours
                recording.torch_counted(after - counted)

    def _catch_torch_logs(self) -> None:
        """While anything compiles for a recording, torch's loggers print into reports, not the cell."""
        with self._lock:
            self._compiling += 1
            if self._compiling > 1:
                return
            loggers = [logging.getLogger("torch")] + [
                logger for name, logger in list(logging.root.manager.loggerDict.items())
                if name.startswith("torch.") and not name.startswith("torch.__trace")
                and isinstance(logger, logging.Logger)]
            for logger in loggers:
                replaced = [h for h in logger.handlers if printing(h)]
                if not replaced:
                    continue
                catcher = TorchLogCatcher(self, replaced)
                original = list(logger.handlers)
                installed = [catcher, *(h for h in original if h not in replaced)]
                logger.handlers = installed
                self._catchers.append((logger, catcher, original, list(installed)))

    def _release_torch_logs(self) -> None:
        """Put every stood-in handler back where it was; handlers added meanwhile stay."""
        with self._lock:
            self._compiling = max(0, self._compiling - 1)
            if self._compiling:
                return
            for logger, catcher, original, installed in self._catchers:
                if logger.handlers == installed:  # untouched meanwhile: exactly as found
                    logger.handlers = original
                    continue
                if catcher not in logger.handlers:  # reconfigured meanwhile (torch._logging.set_logs): theirs stand
                    continue
                handlers: list[logging.Handler] = []
                for handler in logger.handlers:
                    handlers.extend(catcher.replaced if handler is catcher else [handler])
                logger.handlers = handlers
            self._catchers.clear()

    def compiling(self) -> list[Pending]:
        """The compiles started (a ``dynamo_start`` read) and not closed yet (no ``compilation_metrics``): what a
        followed rank compiles now (``capture.live``)."""
        return [pending for pending in list(self._pending.values()) if pending.function]

    def compiling_for(self) -> list[Recording]:
        """The recordings this thread compiles for now, innermost last."""
        return self._stack()

    def _stack(self) -> list[Recording]:
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        stack: list[Recording] = self._local.stack
        return stack

    # -- events ----------------------------------------------------------------------
    def on_graph(self, compile_id: str | None, graph: Graph, owner: Recording | None) -> None:
        if compile_id is None:
            return
        with self._lock:
            pending = self._get_pending(compile_id)
            pending.graphs.append(graph)
            if owner is not None:
                pending.backend_owner = weakref.ref(owner)

    def on_record(self, record: logging.LogRecord) -> None:
        """A live record from ``torch.__trace``: typed, then handled. A damaged one is skipped with a
        warning (once per kind and field; each is kept in ``damaged``): it must never raise into torch's
        compile."""
        md = getattr(record, "metadata", None)
        if not isinstance(md, dict):
            return
        try:
            typed = parse_record(md, getattr(record, "payload", None))
        except RecordError as exc:
            self.damaged.append(str(exc))
            if (exc.kind, exc.field) not in self._warned:
                self._warned.add((exc.kind, exc.field))
                logging.getLogger(__name__).warning("nbcompile skipped a damaged trace record: %s", exc)
            return
        if isinstance(typed, Record):
            self.dispatch(typed)

    def dispatch(self, record: Record) -> None:
        """Hand one typed record to the handler of its kind (offline logs come in here too)."""
        handler = self._handlers.get(type(record))
        if handler is not None:
            with self._lock:
                handler(record)

    def _on_string(self, record: StrEntry) -> None:
        self._strings[record.index] = record.path

    def _on_break(self, record: GraphBreakReason) -> None:
        self._get_pending(record.envelope.compile_id).breaks.append(record.text)

    def _on_recompile(self, record: RecompileReasons) -> None:
        pending = self._get_pending(record.envelope.compile_id)
        pending.recompile_reasons = record.reasons
        frame = None if self.offline else torch_compat.recompiling_frame()
        lookup = guard_ops.frame_lookup(frame[1], frame[2]) if frame else no_values
        guards = record.reasons.guards
        stated = self._state_changes(record.envelope.compile_id, record.reasons.entries, guards)
        if stated is None:
            pending.guard_changes = guard_ops.changes(guards, lookup)
        else:  # the state's values, then the user's values the other guards name
            rest = guard_ops.changes([g for g in guards if not is_internal(g)], lookup)
            pending.guard_changes = (stated + rest)[:guard_ops.MAX_CHANGES]
            pending.stated = len(stated)
        if frame is not None and not pending.filename:  # no dynamo_start: the recompile limit
            pending.filename, pending.lineno = frame[0].co_filename, frame[0].co_firstlineno
            pending.function = frame[0].co_name
        if pending.active is None and self._stack():
            pending.active = weakref.ref(self._stack()[-1])

    def _state_changes(self, compile_id: str, entries: tuple[str, ...],
                       guards: tuple[str, ...]) -> list[GuardChange] | None:
        """The global state's changes from the compile whose guards failed (the newest entry the reason names;
        else the frame's previous compile) to this call, when the reason is internal or empty; None when it
        names only the user's values, offline, or when the earlier state was not recorded."""
        if self.offline or (guards and not any(is_internal(g) for g in guards)):
            return None
        failed = guard_ops.entry_ids(entries) or [previous_compile(compile_id)]
        now = GlobalState.now()
        # against each cache entry that failed, the nearest first: a call under a mode, after a call under
        # no_grad, differs from the first compile by the mode alone (and from the no_grad one by both)
        found = [before.changes(now) for each in failed if (before := self._states.get(each)) is not None]
        found = [changed for changed in found if changed]
        return min(found, key=len) if found else None

    def refused_changes(self, message: str, globals_: Mapping[str, Any]) -> list[GuardChange]:
        """What changed for a recompile that ``fail_on_recompile`` refused, from torch's error (the failed guards
        of each cache entry): the global state's values against the states recorded, the user's values as the
        guards give them (a global's new value read from ``globals_``, the function's)."""
        lines = tuple(message.splitlines())
        guards = tuple(guard_ops.failed_guards(lines))
        stated = self._state_changes("", lines, guards) or []
        lookup = guard_ops.frame_lookup({}, globals_)
        rest = guard_ops.changes([g for g in guards if not is_internal(g)] if stated else list(guards), lookup)
        return (stated + rest)[:guard_ops.MAX_CHANGES]

    def _on_guards(self, record: CppGuards) -> None:
        pending = self._get_pending(record.envelope.compile_id)
        pending.guards = record.tree
        pending.guard_check_us = None if self.offline else torch_compat.time_new_guards()

    def _on_output_graph(self, record: OutputGraph) -> None:
        if self.offline:  # live: the graph the recording backend was handed
            ops = parse_graph_ops(record.code)
            compile_id = record.envelope.compile_id
            pending = self._get_pending(compile_id)
            pending.graphs.append(Graph(compile_id, len(ops), ops))
            for name, size in record.inputs:
                pending.inputs.setdefault(graph_input_name(name), size)

    def _on_cache(self, record: CacheLookup) -> None:
        compile_id = record.envelope.compile_id
        pending = self._get_pending(compile_id)
        if len(pending.lookups) < MAX_COLLECTIVES:
            pending.lookups.append((record.state, self.keys.note(record, compile_id)))

    def _on_collectives(self, record: CollectiveSchedule) -> None:
        pending = self._get_pending(record.envelope.compile_id)
        room = MAX_COLLECTIVES - len(pending.collectives)
        pending.collectives.extend(k[:200] for k in record.kernels[:max(0, room)])

    def _on_output_code(self, record: InductorOutputCode) -> None:
        self._get_pending(record.envelope.compile_id).output_code.append(record.code)

    def _get_pending(self, compile_id: str) -> Pending:
        pending = self._pending.get(compile_id)
        if pending is None:
            while len(self._pending) >= MAX_PENDING:
                self._pending.pop(next(iter(self._pending)))
            pending = self._pending[compile_id] = Pending(compile_id)
        return pending

    def _on_start(self, record: DynamoStart) -> None:
        pending = self._get_pending(record.envelope.compile_id)
        if record.stack:
            top = record.stack[-1]
            name = top.filename
            pending.filename = self._strings.get(name, str(name)) if isinstance(name, int) else str(name)
            pending.lineno = top.line
            pending.function = top.name
        active = self._stack()
        if active:
            pending.active = weakref.ref(active[-1])
        if not self.offline:
            pending.state = GlobalState.now()
            if torch_compat.CONFIG_COPIES:  # which entry it compiles for is read from the stack (no regions)
                pending.callers = _callers()

    def _owner_for(self, pending: Pending, metrics: CompilationMetrics) -> Recording | None:
        for ref in (pending.backend_owner, pending.active):
            owner = ref() if ref is not None else None
            if owner is not None:
                return owner
        filename = metrics.co_filename or pending.filename
        lineno = metrics.co_firstlineno or pending.lineno
        for ref in reversed(self._owners):  # the newest session of a cell wins
            owner = ref()
            if owner is not None and owner.owns(filename, lineno):
                return owner
        return None

    def _on_metrics(self, metrics: CompilationMetrics) -> None:
        compile_id = metrics.envelope.compile_id
        pending = self._pending.pop(compile_id, None) or Pending(compile_id)
        frame_id = compile_id.split("/")[0] if compile_id else ""
        if pending.function or metrics.co_name:  # the frame's code, for a later compile of it that names none
            self._frames_named[frame_id] = (metrics.co_name or pending.function,
                                            metrics.co_filename or pending.filename,
                                            metrics.co_firstlineno or pending.lineno)
            while len(self._frames_named) > MAX_STATES:
                self._frames_named.pop(next(iter(self._frames_named)))
        elif frame_id in self._frames_named:  # the recompile limit hit: torch's metrics name no code, the log's
            pending.function, pending.filename, pending.lineno = self._frames_named[frame_id]  # frame id does
        if pending.state is not None:  # any compile's, a session's or not: a later one may recompile against it
            self._states[compile_id] = pending.state
            while len(self._states) > MAX_STATES:
                self._states.popitem(last=False)
        owner = self._owner_for(pending, metrics)
        if owner is None:
            return
        compile_id = metrics.compile_id or pending.compile_id
        # every compile counted (a kept configuration whose code did not serve is told by it); the entry it
        # compiled for is known where torch has cache regions
        region = torch_compat.current_region() if owner.regions else None
        if region is not None:
            owner.entry_of[compile_id] = owner.regions.get(region, "")
        elif owner.entry_codes:  # no regions: the innermost entry on the stack that compiled it
            frames = ((metrics.co_filename or "", metrics.co_name or "", metrics.co_firstlineno or 0),
                      *pending.callers)
            owner.entry_of[compile_id] = owner.entry_on_stack(frames)
        else:
            owner.entry_of[compile_id] = ""
        apply_compilation(owner, pending, metrics)
        owner.notify()
        owner.compiled()


def _callers() -> tuple[tuple[str, str, int], ...]:
    """(file, code name, first line) of the Python frames below a compile starting now, innermost first (torch's
    own left out): the frames of the entry whose call compiles are among them."""
    out: list[tuple[str, str, int]] = []
    frame = inspect.currentframe()
    while frame is not None and len(out) < MAX_CALLERS:
        code = frame.f_code
        if _TORCH_DIR not in code.co_filename:
            out.append((code.co_filename, code.co_name, code.co_firstlineno))
        frame = frame.f_back
    return tuple(out)


#: The most frames ``_callers`` keeps; where torch lives.
MAX_CALLERS = 200
_TORCH_DIR = f"{os.sep}torch{os.sep}"

#: The most compiles whose global state is remembered.
MAX_STATES = 4096

#: Where Inductor's code lives: a frame there compiles (a training graph's backward compiles at its first
#: backward call, outside the backend's call).
_INDUCTOR_DIR = f"{os.sep}torch{os.sep}_inductor{os.sep}"


def _where_interrupted(error: BaseException, backend: str) -> str:
    """Where a run was interrupted, for its report: in the backend's compile (the recording backend's call, or
    Inductor's code, on the interrupt's traceback), else in the run."""
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code is RecordingBackend.__call__.__code__ or _INDUCTOR_DIR in code.co_filename:
            return "Inductor's compile" if backend == "inductor" else f"the {backend} backend's compile"
        tb = tb.tb_next
    return "the run"


HUB = Hub()


# --- the recording backend ------------------------------------------------------------

def graph_ops(gm: Any) -> list[str]:
    """Short names of an FX graph's call nodes, in order."""
    ops: list[str] = []
    for node in gm.graph.nodes:
        if node.op == "call_function":
            target = node.target
            name = getattr(target, "__name__", None) or repr(target)
            ops.append(name)
        elif node.op == "call_method":
            ops.append(str(node.target))
        elif node.op == "call_module":
            try:
                ops.append(type(gm.get_submodule(node.target)).__name__)
            except AttributeError:
                ops.append(str(node.target))
    return ops


_TORCH_NAMES: dict[int, str | None] = {}


def torch_callables(gm: Any) -> list[str]:
    """Public dotted names of the torch functions a graph calls (``torch.sub``), once each, in order.

    These are what ``disallow_in_graph`` can take; operators (``x * y``) and
    tensor methods are not.
    """

    names: list[str] = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        key = id(node.target)
        if key not in _TORCH_NAMES:
            module = getattr(node.target, "__module__", None) or ""
            try:
                _TORCH_NAMES[key] = torch_name(node.target) if module.startswith("torch") else None
            except ValueError:
                _TORCH_NAMES[key] = None
        name = _TORCH_NAMES[key]
        if name is not None and name not in names:
            names.append(name)
    return names


class OverDeadline(RuntimeError):
    """Raised from a recording's backend after its deadline: the scratch run is cut, its copies dropped."""


class RecordingBackend:
    """A torch.compile backend that reports each graph, then hands it on unchanged.

    ``inner`` is the backend torch.compile would have built for the same
    name and mode, so graphs, kernels and run time are those of plain
    ``torch.compile``; only the compile path gains one pass over the nodes.
    """

    def __init__(self, name: str, mode: str | None, dynamic: bool | None, owner: Recording):
        self.name = name
        self.inner = torch_compat.make_backend(name, mode, dynamic)
        self.compiler_name = name
        self.__name__ = name
        self._owner = weakref.ref(owner)

    def __call__(self, gm: Any, example_inputs: Any) -> Any:
        owner = self._owner()
        if owner is not None and owner.deadline is not None and time.perf_counter() > owner.deadline:
            owner.cut = True
            raise OverDeadline("the scratch run's time ran out: cut at its next graph")
        ops = graph_ops(gm)
        compile_id = torch_compat.current_compile_id()
        graph = Graph(compile_id or "", len(ops), ops, torch_callables=torch_callables(gm))
        HUB.on_graph(compile_id, graph, self._owner())
        return self.inner(gm, example_inputs)

    def reset(self) -> None:
        if hasattr(self.inner, "reset"):
            self.inner.reset()

    def get_compiler_config(self) -> Any:
        getter = getattr(self.inner, "get_compiler_config", None)
        return getter() if getter is not None else None
