"""One frame compilation, from its trace events (``Pending``) to the owner's report items
(``apply_compilation``).

The events are kept until the compilation closes; then they become recompiles with their reasons and
fixes, cache lookups, graph breaks with their advice, graphs, kernels, fallbacks, errors and the
frame, named as the user wrote them rather than as Dynamo calls them.
"""

from __future__ import annotations

import contextvars
import linecache
import math
import re
import weakref
from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.lazy import lazy_module
from ..core.text import function_label, plain_text, user_function
from ..model.report import CompileError, Fallback, Fix, Frame, Graph, GraphBreak, GuardChange, Kernel, Recompile, Report
from . import guards as guard_ops
from .global_state import GlobalState
from .records import CompilationMetrics, Reasons
from .trace_parse import parse_graph_break, parse_guards, parse_kernels

if TYPE_CHECKING:
    from ..core import torch_compat
else:  # at its first use: a trace log read from disk never loads torch
    torch_compat = lazy_module("nbcompile.core.torch_compat", globals(), "torch_compat")

if TYPE_CHECKING:
    from .hub import Recording

#: The user-code frames (file, line, function) of the graph break being advised, innermost last: what a
#: ``Recording.advise`` reads to find the user's own caller of a break inside installed code.
BREAK_FRAMES: contextvars.ContextVar[tuple[tuple[str, int, str], ...]] = contextvars.ContextVar(
    "nbcompile_break_frames", default=())
_TB_FRAME = re.compile(r'^[ \t]*File "(?P<file>[^"\n]+)", line (?P<line>\d{1,9}), in (?P<fn>[^\n]+)$', re.M)


@dataclass
class Pending:
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
    #: Where torch has no cache regions: (file, code name, first line) of the Python frames below the compile,
    #: innermost first.
    callers: tuple[tuple[str, str, int], ...] = ()


#: The most collective kernels (and cache lookups) a frame keeps.
MAX_COLLECTIVES = 200
#: The most cache-miss reasons a report keeps (the counts go on).
MAX_CACHE_REASONS = 50


def graph_input_name(name: str) -> str:
    """A graph input as the user wrote it: ``l_x_`` -> ``x``, ``l_self_modules_lin_parameters_weight_`` ->
    ``self_modules_lin_parameters_weight`` (Dynamo's flattening kept)."""
    return name[2:].removesuffix("_") if name[:2] in ("l_", "L_") else name


def previous_compile(compile_id: str) -> str:
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


def no_values(_name: str) -> Any:
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


def _wrapper_fell_back(report: Report) -> bool:
    """Whether the newest compile was of the frame torch.compile adds around a callable
    (``external_utils.wrap_inline``: a decorated function, a module of torch's, and on torch 2.11 a function
    with no source file, exec'd) and it fell back: Dynamo then compiles the callable's own frame, and a failure
    there is the same fallback, said of the user's function."""
    if not report.fallbacks or not report.frames:
        return False
    last, fallback = report.frames[-1], report.fallbacks[-1]
    return (fallback.kind == "compile_error" and fallback.function == last.function
            and (last.filename, last.firstlineno) == torch_compat.WRAPPER_FRAME_SPAN[:2])


class _Causes:
    """The (function, cause) of the recompiles of the report read last: a trace's thousand recompiles are looked
    up, not scanned one by one. Read again for another report, or when its recompiles changed otherwise."""

    report: weakref.ref[Report] | None = None
    seen: set[tuple[str, Any]] = set()
    count = -1

    @classmethod
    def of(cls, report: Report) -> set[tuple[str, Any]]:
        if cls.report is None or cls.report() is not report or cls.count != len(report.recompiles):
            cls.report, cls.count = weakref.ref(report), len(report.recompiles)
            cls.seen = {(r.function, _cause(r)) for r in report.recompiles}
        return cls.seen


def apply_compilation(owner: Recording, pending: Pending, metrics: CompilationMetrics) -> None:
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
            recompile.changes = guard_ops.changes(reasons.guards, no_values)
        recompile.changes = _plain_changes(recompile.changes, stack, where)
        recompile.cell_line = _origin(owner, filename, user_function(function), recompile)
        cause = (function, _cause(recompile))
        if cause not in _Causes.of(report):  # the first recompile of a cause carries its fixes, once
            recompile.fixes = guard_ops.recompile_fixes(recompile.changes, reasons.global_names)
        count = len(report.recompiles)
        report.add("recompiles", recompile)
        known = _Causes.report() if _Causes.report is not None else None
        if known is report and _Causes.count == count:  # nothing changed them since the look-up: it joins the set
            _Causes.seen.add(cause)
            _Causes.count = len(report.recompiles)

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
        fallback = Fallback(function, "compile_error", f"{function_label(function)} failed to compile "
                            f"and runs eagerly (torch._dynamo.config.suppress_errors): {fail_type}: "
                            f"{plain_text(fail_reason.splitlines()[0], stack) if fail_reason else ''}")
        if _wrapper_fell_back(report):  # the callable torch's wrapper frame runs, compiled on its own: one fallback
            report.fallbacks[-1] = fallback
        else:
            report.add("fallbacks", fallback)
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
