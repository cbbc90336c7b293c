"""One process-wide listener on torch's structured trace, routing to recordings.

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
import contextvars
import linecache
import logging
import math
import re
import threading
import time
import weakref
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core import torch_compat
from ..core.names import torch_name
from ..core.text import cut, function_label, plain_text, user_function
from ..model.report import CompileError, Fallback, Fix, Frame, Graph, GraphBreak, GuardChange, Kernel, Recompile, Report
from . import guards as guard_ops
from .cache_keys import KeyBook
from .cell import cell_line_of
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
    Reasons,
    RecompileReasons,
    Record,
    RecordError,
    StrEntry,
    parse_record,
)
from .trace_parse import parse_graph_break, parse_graph_ops, parse_guards, parse_kernels

#: Compilations still open at once before the oldest is dropped (a failed
#: compile that never closed, say); keeps memory bounded.
MAX_PENDING = 64
#: Most torch log records a report keeps; the rest are counted in ``Report.dropped["torch_log"]``.
MAX_TORCH_LOG = 200
#: Most characters of one kept torch log record.
MAX_LOG_CHARS = 2000
#: The user-code frames (file, line, function) of the graph break being advised, innermost last: what a
#: ``Recording.advise`` reads to find the user's own caller of a break inside installed code.
BREAK_FRAMES: contextvars.ContextVar[tuple[tuple[str, int, str], ...]] = contextvars.ContextVar(
    "nbcompile_break_frames", default=())
_TB_FRAME = re.compile(r'^[ \t]*File "(?P<file>[^"\n]+)", line (?P<line>\d{1,9}), in (?P<fn>[^\n]+)$', re.M)


class Recording:
    """Owner of captured events: one report at a time, plus the code it owns."""

    def __init__(self, report: Report, *, cell_files: tuple[str, ...] = ()) -> None:
        self.report = report
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
        #: compile id -> the entry whose call compiled it ("" when none of ``regions`` was running): what a
        #: toggle that recompiles some entries only carries over from the previous report (``carried``).
        self.entry_of: dict[str, str] = {}
        #: Called with the report after each frame compiled for it (a view's progress line); never raises.
        self.progress: Callable[[Report], None] | None = None

    def own_span(self, filename: str, first: int, last: int) -> None:
        self.spans.append((filename, first, last))

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


@dataclass
class _Pending:
    """Events of one frame compilation, kept until it closes."""

    compile_id: str
    filename: str = ""
    lineno: int = 0
    function: str = ""
    active: weakref.ref[Recording] | None = None
    backend_owner: weakref.ref[Recording] | None = None
    graphs: list[Graph] = field(default_factory=list)
    breaks: list[str] = field(default_factory=list)
    guards: str = ""
    #: The new guards' check timed on the compile's own inputs (microseconds), or None.
    guard_check_us: float | None = None
    #: The ``recompile_reasons`` artifact, decoded once by its record.
    recompile_reasons: Reasons | None = None
    #: The failed guards with their values, read while Dynamo logs the reasons (the call's arguments are
    #: only there then).
    guard_changes: list[GuardChange] = field(default_factory=list)
    output_code: list[str] = field(default_factory=list)
    #: The global state the compile ran under (read at ``dynamo_start``, inside the call that compiles).
    state: GlobalState | None = None
    #: How many of ``guard_changes`` (the first) are the global state's, read from the states recorded.
    stated: int = 0
    #: The compile's cache lookups: (hit or miss or bypass, the miss's reason or None).
    lookups: list[tuple[str, str | None]] = field(default_factory=list)
    #: The collective kernels Inductor scheduled in the compile's graphs.
    collectives: list[str] = field(default_factory=list)
    #: Its graphs' inputs and their sizes, as a log lists them.
    inputs: dict[str, str] = field(default_factory=dict)


class _TraceHandler(logging.Handler):
    def __init__(self, hub: Hub) -> None:
        super().__init__(level=logging.DEBUG)
        self._hub = hub

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._hub.on_record(record)
        except Exception:  # capture must never break the user's compile
            logging.getLogger(__name__).exception("nbcompile capture failed on a trace event")


class _TorchLogCatcher(logging.Handler):
    """Stands in for the printing handlers of one torch logger while nbcompile compiles: a record from a
    thread compiling for a recording goes to its report, one from any other thread to the handlers it
    stands in for, as before."""

    def __init__(self, hub: Hub, replaced: list[logging.Handler]) -> None:
        super().__init__(level=min((h.level for h in replaced), default=logging.NOTSET))
        self._hub = hub
        self.replaced = replaced

    def emit(self, record: logging.LogRecord) -> None:
        stack = self._hub.compiling_for()
        if not stack:
            for handler in self.replaced:
                if record.levelno >= handler.level:
                    handler.handle(record)
            return
        try:
            keep_torch_log(stack[-1].report, log_line(record, next(
                (h.formatter for h in self.replaced if h.formatter is not None), None)))
            stack[-1].notify()
        except Exception:  # capture must never break the user's compile
            self.handleError(record)


def log_line(record: logging.LogRecord, formatter: logging.Formatter | None) -> str:
    """One torch log record on one line, as torch would print it: torch repeats its prefix
    (``W1123 12:00:00.123 77 torch/_dynamo/convert_frame.py:1994] [0/2]``) on each line; kept once."""
    try:
        text = formatter.format(record) if formatter is not None else record.getMessage()
    except Exception:
        text = str(record.msg)
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    prefix = lines[0]
    for line in lines[1:]:
        while not line.startswith(prefix):
            prefix = prefix[:-1]
    prefix = prefix[: prefix.rfind("] ") + 2] if "] " in prefix else ""
    parts = [lines[0], *(line[len(prefix):].strip() for line in lines[1:])]
    return cut(" | ".join(p for p in parts if p), MAX_LOG_CHARS)


def keep_torch_log(report: Report, line: str) -> None:
    """Keep one torch log line in ``report``, at most ``MAX_TORCH_LOG`` (the rest counted)."""
    if len(report.torch_log) >= MAX_TORCH_LOG:
        report.dropped["torch_log"] = report.dropped.get("torch_log", 0) + 1
    else:
        report.torch_log.append(line)


def _printing(handler: logging.Handler) -> bool:
    """A handler that prints (torch's own stream handlers): not a file, not the structured trace."""
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)


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
        self._pending: dict[str, _Pending] = {}
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
        self._catchers: list[tuple[logging.Logger, _TorchLogCatcher, list[logging.Handler], list[logging.Handler]]] = []
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
        """Attribute compilations started in this thread to ``recording``."""
        stack = self._stack()
        stack.append(recording)
        self._catch_torch_logs()
        try:
            yield
        finally:
            stack.pop()
            self._release_torch_logs()

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
                replaced = [h for h in logger.handlers if _printing(h)]
                if not replaced:
                    continue
                catcher = _TorchLogCatcher(self, replaced)
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
        lookup = guard_ops.frame_lookup(frame[1], frame[2]) if frame else _missing
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
        failed = guard_ops.entry_ids(entries) or [_previous_compile(compile_id)]
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
                pending.inputs.setdefault(_input_name(name), size)

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

    def _get_pending(self, compile_id: str) -> _Pending:
        pending = self._pending.get(compile_id)
        if pending is None:
            while len(self._pending) >= MAX_PENDING:
                self._pending.pop(next(iter(self._pending)))
            pending = self._pending[compile_id] = _Pending(compile_id)
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

    def _owner_for(self, pending: _Pending, metrics: CompilationMetrics) -> Recording | None:
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
        pending = self._pending.pop(compile_id, None) or _Pending(compile_id)
        if pending.state is not None:  # any compile's, a session's or not: a later one may recompile against it
            self._states[compile_id] = pending.state
            while len(self._states) > MAX_STATES:
                self._states.popitem(last=False)
        owner = self._owner_for(pending, metrics)
        if owner is None:
            return
        compile_id = metrics.compile_id or pending.compile_id
        if owner.regions:
            region = torch_compat.current_region()
            owner.entry_of[compile_id] = owner.regions.get(region, "") if region is not None else ""
        _apply(owner, pending, metrics)
        owner.notify()
        owner.compiled()


#: The most collective kernels (and cache lookups) a frame keeps.
MAX_COLLECTIVES = 200
#: The most cache-miss reasons a report keeps (the counts go on).
MAX_CACHE_REASONS = 50
#: The most compiles whose global state is remembered.
MAX_STATES = 4096


def _input_name(name: str) -> str:
    """A graph input as the user wrote it: ``l_x_`` -> ``x``, ``l_self_modules_lin_parameters_weight_`` ->
    ``self_modules_lin_parameters_weight`` (Dynamo's flattening kept)."""
    return name[2:].removesuffix("_") if name[:2] in ("l_", "L_") else name


def _previous_compile(compile_id: str) -> str:
    """``3/2`` -> ``3/1``: the frame's compile before this one ("" for a first compile)."""
    frame, _, count = compile_id.partition("/")
    count = count.split("_", 1)[0]
    return f"{frame}/{int(count) - 1}" if count.isdigit() and int(count) > 0 else ""


_LIMIT_HIT = "recompile limit exceeded"
_GUARD_LATENCY = re.compile(r"Guard latency = ([0-9.]+) us\s*$")


def _guard_latency(text: str) -> float | None:
    """Torch's own figure at the end of the guard tree text (one check after a cache flush)."""
    match = _GUARD_LATENCY.search(text or "")
    try:
        latency = float(match[1]) if match else None
    except ValueError:  # "1.2.3" from a damaged log
        return None
    return latency if latency is None or math.isfinite(latency) else None


def _missing(_name: str) -> Any:
    """The lookup where no frame's values are at hand (offline, or after the call)."""
    return guard_ops.MISSING



def limit_fallback(function: str, fail_reason: str, changes: list[GuardChange],
                   globals_: Container[str] = ()) -> Fallback:
    """A frame past ``recompile_limit``: from now on new inputs run it eagerly, silently."""
    limit = re.search(r"currently set to (\d+)", fail_reason)
    said = f" ({limit[1]})" if limit else ""
    last = f"; the change that hit it: {guard_ops.describe(changes[:1])}" if changes else ""
    fixes = guard_ops.limit_fixes(changes, globals_)
    return Fallback(function, "recompile_limit",
                    f"{function_label(function)} hit recompile_limit{said}: calls that fail its guards now run "
                    f"eagerly, without a word from torch{last}", fixes)


_CUDAGRAPH_FIXES = (
    ("mutated input", "keep the compiled function from changing its inputs in place (x.add_(...) -> x + ...), or "
                      "set torch._inductor.config.triton.cudagraph_support_input_mutation = True"),
    ("cpu device", "move every input and the module to CUDA: a CPU tensor in the graph rules out CUDA graphs"),
    ("non gpu", "move every input and the module to CUDA: a CPU tensor in the graph rules out CUDA graphs"),
    ("dynamic shape", "mark the sizes static or pad to a few sizes: CUDA graphs record one shape each"),
    ("incompatible op", "the graph calls an op CUDA graphs cannot record (a CPU sync such as .item()): move it out "
                        "of the compiled function"),
)


def cudagraph_fallback(function: str, reason: str) -> Fallback:
    """``mode="reduce-overhead"`` that silently ran without CUDA graphs, with what to change."""
    said = reason.removeprefix("skipping cudagraphs due to ").strip()
    fixes = [Fix("", why) for key, why in _CUDAGRAPH_FIXES if key in said.lower()]
    return Fallback(function, "cudagraph_skip", f"{function_label(function)} runs without CUDA graphs "
                    f"(reduce-overhead): {plain_text(said)}",
                    fixes or [Fix("", "see torch's reason; mode='max-autotune-no-cudagraphs' says so up front")])


def _origin(owner: Recording, filename: str, function: str, recompile: Recompile) -> int | None:
    """The cell line the newest guard change's name comes from (its parameter, its global)."""
    if not recompile.changes or filename not in owner.cell_files:
        return None
    import linecache

    source = "".join(linecache.getlines(filename))
    for change in recompile.changes:
        line = guard_ops.origin_line(source, function, change.subject)
        if line is not None:
            return owner.cell_line(filename, line)
    return None


def _cause(recompile: Recompile) -> tuple[str, bool] | None:
    """What a recompile's fixes depend on: the newest change's expression, and whether it is a dynamic
    size specialised (``>= 2 -> 1``: fixed otherwise than a size that changed)."""
    if not recompile.changes:
        return None
    change = recompile.changes[0]
    return change.subject, change.before.startswith(">=")


_RESUME_AT = re.compile(r"^torch_dynamo_resume_in_\w+_at_(?P<line>\d{1,9})$")


def _stack_names(owner: Recording, filename: str, function: str) -> tuple[dict[str, str], str]:
    """For a resume function (``torch_dynamo_resume_in_f_at_9``): its stack slots named by the expressions
    of line 9 (``guards.stack_expressions``), and where that line is ("cell line 9")."""
    match = _RESUME_AT.match(function)
    if match is None:
        return {}, ""
    line = int(match["line"])
    cell = owner.cell_line(filename, line)
    where = f"cell line {cell}" if cell is not None else f"line {line}"
    source = "".join(linecache.getlines(filename)) if filename else ""
    return (guard_ops.stack_expressions(source, line) if source else {}), where


def _plain_changes(changes: list[GuardChange], stack: Mapping[str, str], where: str) -> list[GuardChange]:
    return [GuardChange(guard_ops.plain_subject(c.subject, stack, where), c.before, c.after) for c in changes]


def _user_frames(text: str) -> tuple[tuple[str, int, str], ...]:
    """The user-code traceback of a graph break's text, innermost last."""
    tb = text.split("\nTraceback (most recent call last):", 1)[0].split("User code traceback:", 1)
    if len(tb) < 2:
        return ()
    return tuple((m["file"], int(m["line"]), m["fn"].strip()) for m in _TB_FRAME.finditer(tb[1]))


def _apply(owner: Recording, pending: _Pending, metrics: CompilationMetrics) -> None:
    """Turn one closed compilation into report items."""
    report = owner.report
    function = metrics.co_name or pending.function
    filename = metrics.co_filename or pending.filename
    compile_id = metrics.compile_id or pending.compile_id
    fail_reason = metrics.fail_reason or ""
    artifact = pending.recompile_reasons
    stack, where = _stack_names(owner, filename, function)
    if metrics.fail_type and _LIMIT_HIT in fail_reason:  # no new code: the frame runs eagerly from now on
        if not any(f.function == function and f.kind == "recompile_limit" for f in report.fallbacks):
            report.add("fallbacks", limit_fallback(function, fail_reason,
                                                   _plain_changes(pending.guard_changes, stack, where),
                                                   artifact.global_names if artifact is not None else ()))
        return

    if artifact is not None or metrics.recompile_reason is not None:
        # The artifact lists every failed cache entry; the metrics only the newest (torch 2.13 writes both).
        reasons = artifact if artifact is not None and artifact.entries else metrics.recompile_reason or Reasons(())
        reason = guard_ops.plain_reason(reasons.summary, stack)
        if pending.stated:  # torch names the state that changed, never its values ("GLOBAL_STATE changed: ...")
            reason = guard_ops.stated_reason(pending.guard_changes[:pending.stated], reasons.summary)
        recompile = Recompile(function, compile_id, reason, list(pending.guard_changes))
        if not recompile.changes:
            recompile.changes = guard_ops.changes(reasons.guards, _missing)
        recompile.changes = _plain_changes(recompile.changes, stack, where)
        recompile.cell_line = _origin(owner, filename, user_function(function), recompile)
        cause = _cause(recompile)
        if not any(r.function == function and _cause(r) == cause
                   for r in report.recompiles):  # the first recompile of a cause carries its fixes, once
            recompile.fixes = guard_ops.recompile_fixes(recompile.changes, reasons.global_names)
        report.add("recompiles", recompile)

    for looked, why in pending.lookups:
        report.cache.hits += looked == "hit"
        report.cache.misses += looked == "miss"
        if why is not None and len(report.cache.reasons) < MAX_CACHE_REASONS:
            report.cache.reasons.append(why)

    for text in pending.breaks:
        parsed = parse_graph_break(text)
        brk = GraphBreak(
            function=parsed.function or function,  # raw, as Frame.function: views label it
            filename=parsed.filename,
            lineno=parsed.lineno,
            cell_line=owner.cell_line(parsed.filename, parsed.lineno) if parsed.filename else None,
            source_line=parsed.source_line,
            reason=plain_text(parsed.reason, stack),
            gb_type=plain_text(parsed.gb_type, stack),
            gb_id=parsed.gb_id,
            explanation=plain_text(parsed.explanation, stack),
            hints=[plain_text(h, stack) for h in parsed.hints],
            doc_url=parsed.doc_url,
            compile_id=compile_id,
        )
        if owner.advise is not None:
            token = BREAK_FRAMES.set(_user_frames(text))
            try:
                brk.fixes = owner.advise(brk)
            finally:
                BREAK_FRAMES.reset(token)
        report.add("breaks", brk)

    for graph in pending.graphs:
        graph.function = function
        report.add("graphs", graph)

    for code in pending.output_code:
        for name, language, kernel_code in parse_kernels(code):
            report.add("kernels", Kernel(name, language, kernel_code, compile_id))

    skip = metrics.cudagraph_skip_reason
    if skip:  # mode="reduce-overhead" could not use CUDA graphs for this frame's graph
        report.add("fallbacks", cudagraph_fallback(function, skip))
    fail_type = metrics.fail_type
    deliberate = "skip_frame()" in fail_reason  # torch._dynamo.skip_frame(): asked for
    if fail_type and not deliberate and torch_compat.errors_suppressed():
        report.add("fallbacks", Fallback(function, "compile_error", f"{function_label(function)} failed to compile "
                                         f"and runs eagerly (torch._dynamo.config.suppress_errors): {fail_type}: "
                                         f"{plain_text(fail_reason.splitlines()[0], stack) if fail_reason else ''}"))
    if fail_type and not deliberate:
        report.add(
            "errors",
            CompileError(function, compile_id, fail_type, plain_text(fail_reason, stack)),
        )

    firstlineno = metrics.co_firstlineno or pending.lineno or 0
    owner.codes.add((filename, firstlineno, metrics.co_name or function))
    report.add(
        "frames",
        Frame(
            compile_id=compile_id,
            function=function,
            guards=parse_guards(pending.guards),
            guard_count=metrics.guard_count or 0,
            guard_latency_us=_guard_latency(pending.guards),
            guard_check_us=pending.guard_check_us,
            compile_time_s=metrics.entire_frame_compile_time_s or 0.0,
            filename=filename,
            firstlineno=firstlineno,
            graph_count=len(pending.graphs),
            trace_overhead_s=metrics.structured_logging_overhead_s or 0.0,
            backend_time_s=metrics.backend_compile_time_s,
            inductor_time_s=metrics.inductor_compile_time_s,
            collectives=list(pending.collectives[:MAX_COLLECTIVES]),
            inputs=dict(pending.inputs),
            cache=[looked for looked, _ in pending.lookups[:MAX_COLLECTIVES]],
        ),
    )


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
