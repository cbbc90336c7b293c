"""The Report: plain, JSON-serialisable data about what torch.compile did.

Capture fills a Report; views (text, HTML, the mime bundle, the panel, the
JupyterLab extension) only read it. The JSON schema shipped in
``schema/report.schema.json`` is generated from these dataclasses
(``model/schema.py``, ``make schema``).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.text import plural
from .diff import ReportDiff as ReportDiff
from .diff import diff_reports
from .render import MIME_TYPE as MIME_TYPE
from .render import compile_id_text as compile_id_text
from .render import guard_text, mimebundle, summary_line, to_text
from .report_index import ItemIndexes
from .report_index import PartCounts as PartCounts
from .status import CheckKind, CheckRule

SCHEMA_VERSION = 1
SCHEMA_PATH = pathlib.Path(__file__).parent.parent / "schema" / "report.schema.json"

#: Most items of one kind a report keeps; the counts go on past it.
MAX_ITEMS = 500
#: Most characters of generated kernel code a report keeps.
MAX_KERNEL_CHARS = 2_000_000


@dataclass
class Graph:
    """One FX graph handed to the backend."""

    compile_id: str
    op_count: int
    ops: list[str]
    function: str = ""
    #: Public dotted names of the torch functions it calls (what disallow_in_graph takes).
    torch_callables: list[str] = field(default_factory=list)


@dataclass
class GraphBreak:
    """One graph break as Dynamo reports it."""

    function: str
    filename: str
    lineno: int
    cell_line: int | None
    source_line: str
    reason: str
    gb_type: str
    gb_id: str | None
    explanation: str
    hints: list[str]
    doc_url: str | None
    compile_id: str = ""
    #: Toggles or code changes that would remove this break, best first.
    fixes: list[Fix] = field(default_factory=list)


@dataclass
class Cause:
    """One break site: the graph-break events Dynamo reported there, counted (``count``), said once.

    ``Report.breaks`` keeps every event (its length agrees with torch's own events); ``Report.causes``
    groups them by site, so a view shows one row per cause with its count instead of one per event.
    """

    #: How many break events came from this site (past MAX_ITEMS too: ``Report.add`` counts them).
    count: int
    cell_line: int | None
    filename: str
    lineno: int
    gb_type: str
    reason: str
    #: The first event's fixes (the same list: proofs written on the event show here).
    fixes: list[Fix] = field(default_factory=list)
    function: str = ""
    source_line: str = ""
    explanation: str = ""
    hints: list[str] = field(default_factory=list)
    gb_id: str | None = None
    doc_url: str | None = None
    #: The compiles its events came from (torch's compile ids, each once, in order; kept up to MAX_ITEMS).
    compile_ids: list[str] = field(default_factory=list)
    #: What ``count`` counts, said for a tooltip or a summary ("x2: 2 break events at this line, one in each
    #: of 2 compiles that traced it (0/0, 0/1) ..."); kept in step with ``count`` by ``counted``.
    count_text: str = ""

    @classmethod
    def of(cls, brk: GraphBreak) -> Cause:
        cause = cls(1, brk.cell_line, brk.filename, brk.lineno, brk.gb_type, brk.reason, brk.fixes,
                    function=brk.function, source_line=brk.source_line, explanation=brk.explanation,
                    hints=list(brk.hints), gb_id=brk.gb_id, doc_url=brk.doc_url,
                    compile_ids=[brk.compile_id] if brk.compile_id else [])
        cause.count_text = count_text(cause.count, cause.compile_ids)
        return cause

    def counted(self, brk: GraphBreak) -> None:
        """One more event at this site: the count, the compiles it came from and the text that says so."""
        self.count += 1
        if brk.compile_id and brk.compile_id not in self.compile_ids and len(self.compile_ids) < MAX_ITEMS:
            self.compile_ids.append(brk.compile_id)
        if not self.fixes and brk.fixes:
            self.fixes = brk.fixes
        self.count_text = count_text(self.count, self.compile_ids)


def count_text(count: int, compile_ids: list[str]) -> str:
    """What a cause's ``xN`` counts: the break events Dynamo reported at the line, and why there are N (the
    code was compiled N times: called with new inputs, recompiled, or reached from N compiled frames; or
    the line ran more than once in one compile)."""
    events = f"x{count}: {count} break event{'s' if count != 1 else ''} at this line"
    if count == 1:
        return f"{events} (compile {compile_ids[0]})" if compile_ids else events
    ids = ", ".join(compile_ids[:6]) + (", ..." if len(compile_ids) > 6 else "")
    if not compile_ids:
        return f"{events}: Dynamo met the line {count} times as it compiled"
    if len(compile_ids) == count:
        return (f"{events}, one in each of {count} compiles that traced it ({ids}): the code around it was "
                f"compiled {count} times (called again with inputs that failed its guards, a recompile, or "
                "reached from more than one compiled frame); one cause, one fix")
    return (f"{events}, from {len(compile_ids)} compile{'s' if len(compile_ids) != 1 else ''} ({ids}): the line "
            "ran more than once in one compile (a loop, or a helper called from more than one place); one cause, "
            "one fix")


def cause_key(brk: GraphBreak | Cause) -> tuple[Any, ...]:
    """The site a break event belongs to: its file and line (function and type when it has no file)."""
    if brk.filename:
        return (brk.filename, brk.lineno)
    return ("", brk.function, brk.gb_type, brk.reason)


_RESUMED = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_\d+$")
_RESUMED_LABEL = re.compile(r"^(?P<fn>.+) \((?:after|resumed at) line \d+\)$")


def entry_of(function: str) -> tuple[str, bool]:
    """``torch_dynamo_resume_in_f_at_5`` (or its label ``f (after line 5)``) -> ``("f", True)``; nested
    resume functions resolve to their entry too; ``f`` -> ``("f", False)``."""
    name, resumed = function, False
    while True:
        m = _RESUMED.match(name) or _RESUMED_LABEL.match(name)
        if not m:
            return name, resumed
        name, resumed = m.group("fn"), True


def _frame_id(compile_id: str) -> int | None:
    """``"3/1"`` (or compiled autograd's ``"!0/3/1"``, an attempt's ``"3/1_1"``) -> 3, the frame: one code's
    compiles share it; None when it is not a compile id."""
    parts = compile_id.split("/")
    return int(parts[-2]) if len(parts) >= 2 and parts[-2].isdigit() else None


@dataclass
class Frame:
    """One compiled frame (a function or a resume function) and its guards."""

    compile_id: str
    function: str
    guards: list[str]
    guard_count: int
    compile_time_s: float
    filename: str = ""
    #: The compiled code's first line (a resume function's: the line it resumes at).
    firstlineno: int = 0
    graph_count: int = 0
    #: Of compile_time_s, what torch spent building trace records for capture.
    trace_overhead_s: float = 0.0
    #: Torch's guard latency figure (one check after a cache flush), microseconds.
    guard_latency_us: float | None = None
    #: The guards checked again and again on the compile's own inputs (warm median), microseconds.
    guard_check_us: float | None = None
    #: Of compile_time_s: the backend's part (AOTAutograd and Inductor), and Inductor's own, when torch says.
    backend_time_s: float | None = None
    inductor_time_s: float | None = None
    #: The collective kernels Inductor scheduled in the frame's graphs, in order (a traced job's ranks compare).
    collectives: list[str] = field(default_factory=list)
    #: The frame's FX graph / AOTAutograd cache lookups: "hit", "miss" or "bypass", in order.
    cache: list[str] = field(default_factory=list)
    #: The sizes of its graphs' inputs as a trace lists them (``x`` -> ``[8]``): read from logs only.
    inputs: dict[str, str] = field(default_factory=dict)


@dataclass
class GuardChange:
    """One failed guard, as the user would say it: ``x.shape[0]``: ``3`` -> ``5``."""

    #: The guarded expression (``x.shape[0]``, ``SCALE``, ``type(cfg)``, ``self.drop.training``).
    subject: str
    #: The value (or range) the cached code was compiled for.
    before: str
    #: The value that failed it ("?" when it could not be read without running user code).
    after: str


@dataclass
class Recompile:
    """A frame compiled again because a guard failed."""

    function: str
    compile_id: str
    reason: str
    #: The failed guards with their values, newest cache entry first.
    changes: list[GuardChange] = field(default_factory=list)
    #: Where the guarded name comes from in the cell (the parameter's or the global's line).
    cell_line: int | None = None
    #: Changes that would remove the recompile.
    fixes: list[Fix] = field(default_factory=list)


@dataclass
class Fallback:
    """Code that silently runs slower than the user thinks."""

    function: str
    #: recompile_limit (the frame runs eagerly now), compile_error (compilation failed and fell back),
    #: cudagraph_skip (reduce-overhead could not use CUDA graphs)
    kind: str
    reason: str
    fixes: list[Fix] = field(default_factory=list)


@dataclass
class Skip:
    """A frame Dynamo skipped or ran eagerly without a graph break the user would see: ``reason`` says why
    in a line (its skip rules, no tensor in the frame, a dispatch mode, a generator resumed, ...)."""

    function: str
    reason: str
    filename: str = ""
    lineno: int = 0


@dataclass
class CacheStats:
    """The FX graph and AOTAutograd cache lookups of the session's compiles: ``reasons``, one line per miss
    saying what differed in its key from the nearest key seen before, as far as torch exposes it."""

    hits: int = 0
    misses: int = 0
    reasons: list[str] = field(default_factory=list)


@dataclass
class Kernel:
    """One kernel of Inductor's generated code."""

    name: str
    language: str
    code: str
    compile_id: str = ""


@dataclass
class Check:
    """Compiled result compared with an eager run of the original code.

    ``ok`` is False only for a real difference (or an eager run that
    raised); ``compared`` is False when the run could not be replayed, and
    ``message`` says why.
    """

    ok: bool
    max_abs_diff: float | None
    message: str
    compared: bool = True
    #: Which rule judged: ``"fp64"`` (against a float64 eager reference, as PyTorch's accuracy harness
    #: does) or ``"tolerance"`` (dtype tolerances only; ``message`` says why fp64 could not run).
    rule: str = CheckRule.TOLERANCE
    #: The compiled run's and eager float32 run's error against the float64 reference (``rule == "fp64"``).
    compiled_error: float | None = None
    eager_error: float | None = None
    #: The run its figures come from: ``"cell"`` (the cell's or ``Session.run()``'s run, compiled on the
    #: user's objects), ``"copies"`` (a toggle's or an option's re-run on copies), ``"trial"`` (a trial of
    #: its own, on copies); ``""`` when not said.
    run: str = ""
    #: The run in the words every view shows beside the verdict ("re-run on copies after log_metrics ->
    #: disable"); ``""``: the words of ``run`` (``render.RUN_SOURCES``). Set once, where the run is known, so the
    #: header, the panel, the status, the saved notebook and the extension name the same run.
    source: str = ""

    def __post_init__(self) -> None:
        # Not fields: the report's JSON says these in ``message``; ``engine.check`` sets them where it says it.
        #: What it found when more than ``ok`` and ``compared`` tell (the eager reference run raised; the eager
        #: run reached outside its copies), else None: ``kind`` says what it found either way.
        self.found: CheckKind | None = None
        #: What the run did outside its copies ("the run writes to a file (...)"), with ``OUTSIDE_EFFECT``.
        self.effect = ""

    @property
    def kind(self) -> CheckKind:
        """What the check found (``status.CheckKind``): matches, differs, not compared, eager raised or outside
        effect."""
        if self.found is not None:
            return self.found
        return CheckKind.NOT_COMPARED if not self.compared else CheckKind.MATCHES if self.ok else CheckKind.DIFFERS


@dataclass
class CompileError:
    """A compilation that failed: what failed and where."""

    function: str
    compile_id: str
    fail_type: str
    message: str


@dataclass
class LintWarning:
    """Something that breaks a promise ``allow_in_graph`` asks for (seeds 000 and 003)."""

    function: str
    #: captured-tensor, captured-state, mutation, module-call, data-dependent, not-proxyable, side-effect,
    #: no-source
    rule: str
    variable: str
    lineno: int
    cell_line: int | None
    message: str


#: What a ``FixAction`` does; ``rewrite`` is reserved for source rewrites of the cell.
ActionKind = Literal["toggle", "config", "dynamic", "mark", "as_tensor", "rewrite"]
#: How a ``mark`` action marks a dimension (the ``torch._dynamo`` function of that name).
MarkKind = Literal["maybe_mark_dynamic", "mark_static", "mark_unbacked"]


#: What a ``Rewrite`` does: ``where`` (a tensor-valued if/else assignment to ``torch.where``), ``check``
#: (``if cond: raise ...`` to ``torch._check``), ``defer`` (a print or logger call moved out of the traced
#: code), ``item`` (``.item()`` kept as a tensor where it only feeds tensor math).
RewriteRule = Literal["where", "check", "defer", "item"]


@dataclass
class Rewrite:
    """A source rewrite of the cell: lines ``cell_line`` .. ``cell_line + before.count("\\n")`` (1-based,
    in the cell as run) read ``before`` and would read ``after``. Never applied to a cell until the
    user accepts it (``Session.accept``)."""

    cell_line: int
    before: str
    after: str
    rule: RewriteRule
    #: The function of the cell it changes (its name in the cell), or "". For a library rewrite, the library
    #: function (``module:Class.method``).
    function: str = ""
    #: A library rewrite: the library file whose lines (``cell_line`` is then a line of that file) it rewrites,
    #: in a rewritten copy of ``function`` bound in the library's class or module, never in the file; "" for the
    #: cell's own lines.
    file: str = ""

    @property
    def in_library(self) -> bool:
        return bool(self.file)

    def place(self) -> str:
        """``cell line 7``, or ``modeling_grounding_dino.py:608`` for a library rewrite."""
        if self.file:
            return f"{self.file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{self.cell_line}"
        return f"cell line {self.cell_line}"

    def diff(self) -> str:
        """The rewrite as a unified diff of the lines it changes."""
        import difflib

        old, new = self.before.splitlines(keepends=True), self.after.splitlines(keepends=True)
        lines = difflib.unified_diff(old, new, self.place(), self.place(), lineterm="", n=0)
        return "\n".join(line.rstrip("\n") for line in lines)


@dataclass
class FixAction:
    """The change a fix makes, as data: what a trial runs (``Fix.command`` is only how it is shown).

    Only the fields of its ``kind`` are set:

    - ``toggle``: ``toggles`` (name -> mode) set on the session (or passed to ``inspect``);
    - ``config``: ``torch._dynamo.config.<config> = <value>`` around the compiles;
    - ``dynamic``: ``torch.compile(dynamic=True)``;
    - ``mark``: ``torch._dynamo.<mark>(<param>, <dim>)`` on the recompiling function's parameter
      before each call (the function is the one the fix's recompile or fallback names);
    - ``as_tensor``: ``subject`` (a global ``SCALE`` or a module's ``self.k``) held as a 0-dim tensor;
    - ``rewrite``: line ``cell_line`` of the cell, ``before`` -> ``after``, by ``rule``.
    """

    kind: ActionKind
    toggles: dict[str, str] = field(default_factory=dict)
    config: str = ""
    value: bool | int | float | str | None = None
    mark: MarkKind | None = None
    param: str = ""
    dim: int | None = None
    subject: str = ""
    cell_line: int | None = None
    before: str = ""
    after: str = ""
    #: where, check, defer, item
    rule: str = ""


@dataclass
class Fix:
    """One way to remove a graph break or a recompile: ``command`` to show, ``action`` to run."""

    #: The exact line to run (``%nbcompile set helper disable``); empty for a code change.
    command: str
    why: str
    #: Lint warnings the toggle would bring (allow_in_graph), by ``rule: variable``.
    warnings: list[str] = field(default_factory=list)
    #: True: applied on a scratch run and seen to help; False: tried and it did not help (never the
    #: first fix offered); None: not tried (a code change, no run to try it on, over the budget).
    verified: bool | None = None
    #: What the trial showed ("breaks 2 -> 1, graphs 3 -> 2, check ok"), or why it was not tried.
    effect: str = ""
    #: The structured change (toggle, config, mark, rewrite, ...); None for advice no run can try
    #: (a change to make to the code by hand).
    action: FixAction | None = None

    @property
    def toggles(self) -> dict[str, str]:
        """The toggles the fix sets (name -> mode), from its action; empty for any other fix."""
        return self.action.toggles if self.action is not None and self.action.kind == "toggle" else {}


@dataclass
class Report(ItemIndexes):
    """What torch.compile did for one session or one ``nbcompile.inspect`` call."""

    title: str = ""
    backend: str = "inductor"
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None
    #: The ``torch._dynamo.config`` values the session sets around its compiles (name -> value as code).
    dynamo_config: dict[str, str] = field(default_factory=dict)
    graphs: list[Graph] = field(default_factory=list)
    breaks: list[GraphBreak] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    #: Code that silently runs slower than the user thinks (a frame past recompile_limit, ...).
    fallbacks: list[Fallback] = field(default_factory=list)
    errors: list[CompileError] = field(default_factory=list)
    #: allow_in_graph lint warnings, for the functions under allow_in_graph.
    warnings: list[LintWarning] = field(default_factory=list)
    check: Check | None = None
    #: The toggles as an annotation snippet (``calls`` style), for frontends' copy command.
    snippet: str = ""
    #: Items past MAX_ITEMS that were counted but not kept, by list name.
    dropped: dict[str, int] = field(default_factory=dict)
    #: torch's own count of the run's graph breaks (what ``torch._dynamo.utils.counters["graph_break"]`` grew
    #: by during the runs this report records), beside ``break_count``; None when it was not counted.
    torch_breaks: int | None = None
    #: Set on the kept report when a later change failed: that change, why, and what was kept.
    notice: str = ""
    #: The records torch's own loggers emitted while nbcompile compiled (kept here, not printed into the cell).
    torch_log: list[str] = field(default_factory=list)
    #: The breaks grouped by site, one per cause with its event count (``Report.add`` keeps it in step
    #: with ``breaks``, dropped events included: the counts add up to ``break_count``).
    causes: list[Cause] = field(default_factory=list)
    #: ``"dynamo"`` while only Dynamo's view is in (graphs, breaks, guards, recompiles: a pass on copies with no
    #: code generation, shown first); ``"complete"`` once kernels, timings and the check are in.
    stage: Literal["dynamo", "complete"] = "complete"
    #: The run was interrupted (a KeyboardInterrupt) before its report was complete: after Dynamo's first view,
    #: the report is that view (``stage == "dynamo"``: its graphs, breaks and guards, no kernels, timings or
    #: check), never the backend's stage cut short; without one, what was compiled before it. ``notice`` says
    #: where ("interrupted during Inductor's compile: ...").
    interrupted: bool = False
    #: Why a configuration seen before compiled again on a toggle back to it ("compiled again: ... compiled on
    #: other objects than this run's copies ..."), or ``""``: going back compiles nothing where it can.
    compiled_again: str = ""
    #: Frames of the cell's code (and the library code it reaches) Dynamo skipped without a visible break.
    skipped: list[Skip] = field(default_factory=list)
    #: FX graph and AOTAutograd cache hits and misses of the session's compiles, with what differed per miss.
    cache: CacheStats = field(default_factory=CacheStats)
    #: The value of the run (the --run expression, or the inspected call). Not in JSON as is.
    result: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.breaks and not self.causes:  # built with its breaks (a test, a copy): group them now
            self.causes = group_causes(self.breaks)

    # -- counts (they go on past the kept items) --------------------------------
    @property
    def graph_count(self) -> int:
        return len(self.graphs) + self.dropped.get("graphs", 0)

    @property
    def break_count(self) -> int:
        return len(self.breaks) + self.dropped.get("breaks", 0)

    def causes_in_order(self) -> list[Cause]:
        """The causes as views list them: the cell's lines in order, then library sites by file and line."""
        return sorted(self.causes, key=lambda c: (c.cell_line is None, c.cell_line or 0, c.filename, c.lineno))

    @property
    def splits(self) -> int:
        """Graph splits as GraphMend, the PT2 corpora and ``torch._dynamo.explain`` count them: the graphs
        less one per call of the outermost entry, where a call is counted by its compile (a call served by
        compiled code adds no graph either).

        What is counted, exactly: the compiles of the code Dynamo compiled first in this report (the first
        frame of the report that is not a resume function, all its recompiles included) are the entry calls. A
        call of an entry starts that frame before any frame Dynamo starts inside it, so the frames of functions
        it calls (``forward`` of a module it calls, however compiled; ``Optimizer.step`` and its wrapper; a
        helper with a break in it), its resume functions, and recompiles of those count as splits of that
        call, as ``explain`` counts them (its ``graph_break_count`` is its graphs less one). The first frame is
        taken in the report's order, not by the lowest frame id: torch numbers codes in the order the process
        first compiled them, so an optimizer an earlier cell compiled keeps an id lower than the entry's. A
        ``--run`` that calls two entries one after the other (not one inside the other) counts the second
        one's graphs as splits of the first: the report does not record which frames the ``--run``
        expression itself started."""
        if not self.graph_count:
            return 0
        ids = [_frame_id(f.compile_id) for f in self.frames if not entry_of(f.function)[1]]
        first = next((i for i in ids if i is not None), None)
        calls = sum(1 for i in ids if i is not None and i == first)
        return max(0, self.graph_count - max(calls, 1))

    @property
    def counts_said(self) -> str:
        """Why this report's counts are not what a plain ``torch.compile`` of one call or torch's own counter
        give, in one line (``breaks_said``, then ``splits_said``); "" when nothing differs."""
        return "; ".join(said for said in (self.breaks_said, self.splits_said) if said)

    @property
    def splits_said(self) -> str:
        """How many of the splits are graphs of frames the run compiled again (recompiles: a later call of the
        run, the check's run), which one call of a plain ``torch.compile`` never makes; "" when none are."""
        again = {r.compile_id for r in self.recompiles}
        if not self.splits or not again:
            return ""
        ids = [_frame_id(f.compile_id) for f in self.frames if not entry_of(f.function)[1]]
        first = next((i for i in ids if i is not None), None)
        graphs = sum(f.graph_count for f in self.frames
                     if f.compile_id in again and _frame_id(f.compile_id) != first)
        if not graphs:
            return ""
        return (f"{min(graphs, self.splits)} of the {plural(self.splits, 'split')} are graphs of frames compiled "
                f"again during the run ({plural(len(again), 'recompile')}); one call of a plain torch.compile "
                "makes none of those")

    @property
    def breaks_said(self) -> str:
        """Why this report's break count is not torch's own (``counters["graph_break"]``), in one line; "" when
        they agree or torch's was not counted."""
        theirs, ours = self.torch_breaks, self.break_count
        if theirs is None or theirs == ours:
            return ""
        head = f"{plural(ours, 'break event')} here, {theirs} in torch's counters['graph_break']"
        if ours > theirs:
            return (f"{head}: a break event is one per frame a break cuts (a break inside an inlined call cuts its "
                    "caller's graph too, one event each), and torch's counter leaves out a data-dependent jump "
                    "in the compiled frame itself")
        return (f"{head}: torch's counter also counts breaks it met while tracing code it then traced again from "
                "the start (a restart of its analysis) or ran eagerly, which cut no graph")

    @property
    def recompile_count(self) -> int:
        return len(self.recompiles) + self.dropped.get("recompiles", 0)

    @property
    def frame_count(self) -> int:
        return len(self.frames) + self.dropped.get("frames", 0)

    @property
    def compile_time_s(self) -> float:
        return sum(f.compile_time_s for f in self.frames)

    # -- filling ------------------------------------------------------------------
    def add(self, kind: str, item: Any) -> None:
        """Append ``item`` to the list ``kind``, keeping memory bounded."""
        items = getattr(self, kind)
        if kind == "breaks":
            self._count_cause(item)
        if len(items) >= MAX_ITEMS:
            self.dropped[kind] = self.dropped.get(kind, 0) + 1
            return
        if kind == "kernels":
            used = sum(len(k.code) for k in self.kernels)
            if used + len(item.code) > MAX_KERNEL_CHARS:
                self.dropped[kind] = self.dropped.get(kind, 0) + 1
                return
        items.append(item)

    def carry(self, old: Report, compile_ids: set[str], rank: Any) -> None:
        """Take over ``old``'s items of the compiles ``compile_ids`` (the entries a change did not recompile:
        their compiled code was kept, so they compile nothing now), each list then in ``rank(compile_id)``
        order (the entries' order; stable within one)."""
        for kind in ("frames", "graphs", "breaks", "recompiles", "kernels", "errors"):
            kept = [item for item in getattr(old, kind) if item.compile_id in compile_ids]
            if kept:
                setattr(self, kind, sorted([*kept, *getattr(self, kind)], key=lambda item: rank(item.compile_id)))
        functions = {f.function for f in self.frames}
        self.fallbacks += [f for f in old.fallbacks if f.function in functions and f not in self.fallbacks]
        self.causes = group_causes(self.breaks)

    def _count_cause(self, brk: GraphBreak) -> None:
        """``brk`` counted on its site's cause (a new cause past the last). The sites are found through an index
        kept beside ``causes`` (not a field: not compared, not shown), made again whenever the list is another
        one or of another length than the index knew: a load of 1,000 breaks at 300 sites was quadratic."""
        key = cause_key(brk)
        causes = self.causes
        index = self.__dict__.get("_cause_index")
        sites: dict[tuple[Any, ...], int]
        if index is None or index[0] is not causes or index[1] != len(causes):
            sites = _cause_sites(causes)
        else:
            sites = index[2]
        at = sites.get(key)
        if at is not None and cause_key(causes[at]) != key:  # reordered in place (sorted): the index made again
            sites = _cause_sites(causes)
            at = sites.get(key)
        if at is not None:
            causes[at].counted(brk)
        elif len(causes) < MAX_ITEMS:
            sites[key] = len(causes)
            causes.append(Cause.of(brk))
        elif causes:  # past MAX_ITEMS sites: counted on the last kept one, so the sum stays right
            causes[-1].counted(brk)
        self.__dict__["_cause_index"] = (causes, len(causes), sites)

    def for_function(self, name: str, span: Any = None) -> Report:
        """The part of this report about one function (its frames, resumed frames included).

        With ``span`` (filename, first line, last line of the function's code;
        or a list of them) items join by code identity: two methods named
        ``forward`` in one cell are told apart. Without it, by the function's
        short name.
        """
        short = name.split(".")[-1]
        if span is not None:
            spans = span if isinstance(span, list) else [span]
            frames = self._within("frames", "firstlineno", spans)
            ids = {f.compile_id for f in frames}
            breaks = self._within("breaks", "lineno", spans)
            causes = self._within("causes", "lineno", spans)

            graphs, recompiles = self._of_ids("graphs", ids), self._of_ids("recompiles", ids)
            kernels, errors = self._of_ids("kernels", ids), self._of_ids("errors", ids)
        else:
            def named(function: str) -> bool:
                return function == short or function.startswith(f"torch_dynamo_resume_in_{short}_at_")

            frames = [f for f in self.frames if named(f.function)]
            ids = {f.compile_id for f in frames}
            breaks = [b for b in self.breaks if b.function == short]
            causes = [c for c in self.causes if c.function == short]

            graphs = [g for g in self.graphs if named(g.function)]
            recompiles = [r for r in self.recompiles if named(r.function)]
            kernels = [k for k in self.kernels if k.compile_id in ids]
            errors = [e for e in self.errors if named(e.function)]
        return dataclasses.replace(
            self,
            title=f"{self.title} [{name}]",
            graphs=graphs,
            breaks=breaks,
            causes=causes,
            frames=frames,
            recompiles=recompiles,
            kernels=kernels,
            errors=errors,
            warnings=[w for w in self.warnings if w.function == name],
            dropped={},
        )

    def part_counts(self, name: str, span: Any = None) -> PartCounts:
        """``len`` of the frames, breaks, causes and recompiles of ``for_function(name, span)``, without making
        that part (a panel of 500 functions asks for each row's counts at every redraw)."""
        if span is None:
            return PartCounts.of(self.for_function(name))
        spans = span if isinstance(span, list) else [span]
        if not self.recompiles:  # the common case: counted by the indexes alone, no part made
            return PartCounts(self._count_within("frames", "firstlineno", spans),
                              self._count_within("breaks", "lineno", spans),
                              self._count_within("causes", "lineno", spans), 0)
        frames = self._within("frames", "firstlineno", spans)
        return PartCounts(len(frames), self._count_within("breaks", "lineno", spans),
                          self._count_within("causes", "lineno", spans),
                          len(self._of_ids("recompiles", {f.compile_id for f in frames})))

    def to_json(self) -> dict[str, Any]:
        # asdict deep-copies every field: never the run's value (a tensor with autograd history, a
        # lock, a large output), which is described below instead.
        data = dataclasses.asdict(dataclasses.replace(self, result=None))
        data.pop("result")
        data["schema_version"] = SCHEMA_VERSION
        data["result"] = _describe_result(self.result)
        data["graph_count"] = self.graph_count
        data["break_count"] = self.break_count
        data["splits"] = self.splits
        data["counts_said"] = self.counts_said
        data["recompile_count"] = self.recompile_count
        data["frame_count"] = self.frame_count
        data["compile_time_s"] = sum(t for f in self.frames if _finite_seconds(t := f.compile_time_s))
        # each frame's guards as the views say them (the names the user wrote), beside torch's own text
        for said, frame in zip(data["frames"], self.frames, strict=True):
            said["guards_said"] = [guard_text(g) for g in frame.guards]
        safe: dict[str, Any] = json_safe(data)
        return safe

    def summary(self) -> str:
        return summary_line(self)

    def diff(self, other: Report, *, speed: tuple[float | None, float | None] = (None, None)) -> ReportDiff:
        """What changed from this report to ``other`` (a later one: after a toggle or an option):
        graphs, breaks, recompiles and guards added and removed, and the speedup change when both were
        benched (``speed``: this report's and the other's speedup over eager)."""
        return diff_reports(self, other, speed=speed)

    def __str__(self) -> str:
        return to_text(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return mimebundle(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def _cause_sites(causes: list[Cause]) -> dict[tuple[Any, ...], int]:
    """Each site's place in ``causes`` (the first, where two share one)."""
    sites: dict[tuple[Any, ...], int] = {}
    for i, cause in enumerate(causes):
        sites.setdefault(cause_key(cause), i)
    return sites


def group_causes(breaks: list[GraphBreak]) -> list[Cause]:
    """Break events grouped by site, in the order each site first broke."""
    causes: dict[tuple[Any, ...], Cause] = {}
    for brk in breaks:
        key = cause_key(brk)
        if key in causes:
            causes[key].counted(brk)
        else:
            causes[key] = Cause.of(brk)
    return list(causes.values())


def _finite_seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value >= 0


def json_safe(value: Any) -> Any:
    """``value`` with every NaN or infinite float made None: JSON has no NaN, and a frontend's strict
    parser (JupyterLab's) throws on one. The edge where reports leave Python; the capture edge reads such
    times as unknown already (``capture.records``), this keeps any other source honest."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_safe(item) for item in value]
    if isinstance(value, tuple):
        return tuple(json_safe(item) for item in value)
    return value


def _describe_result(value: Any) -> str | None:
    """A short, JSON-safe description of a run's value (tensors by shape and dtype)."""
    if value is None:
        return None
    try:
        import torch

        if isinstance(value, torch.Tensor):
            return f"Tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device})"
    except ImportError:  # pragma: no cover
        pass
    try:
        text = repr(value)
    except Exception as exc:  # the user's __repr__ raised: the report still shows
        text = f"<repr failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}>"
    if not isinstance(text, str):
        text = f"<repr failed: __repr__ returned {type(text).__name__}>"
    return text if len(text) <= 300 else text[:297] + "..."
