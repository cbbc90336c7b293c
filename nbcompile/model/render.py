"""Views of a Report: plain text, HTML and the Jupyter mime bundle.

They only read the Report. Every piece of user or torch text that reaches
HTML goes through ``html.escape``.
"""

from __future__ import annotations

import functools
import re
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.text import _e, _table, function_label, plain_text, plural, short_path, user_function

if TYPE_CHECKING:  # types only: the Report imports this module to show itself
    from .report import Check, CompileError, Fix, Graph, Report

MIME_TYPE = "application/vnd.nbcompile.report+json"

#: Ops of one graph shown before the rest is folded ("... 528 more").
SHOWN_OPS = 12
#: Characters of a status line's short text; the whole text is folded under it.
STATUS_CHARS = 140


#: Why a report with breaks has no splits (``Report.splits``: graphs less one per call of an entry, so 0
#: means no call made more than one graph): said beside the figure, or "0 splits" reads as a contradiction.
NO_SPLITS_WHY = "no call's graph was cut in two: torch compiled the code around the breaks as separate frames"


def splits_text(report: Report) -> str:
    """``2 splits``; with breaks and no split, why: ``0 splits (no call's graph was cut in two: ...)``."""
    said = plural(report.splits, "split")
    return f"{said} ({NO_SPLITS_WHY})" if report.break_count and not report.splits else said


def cause_counts(report: Report) -> list[str]:
    """``2 splits, 3 causes`` for the summary, beside the break count (nothing without breaks)."""
    if not report.break_count:
        return []
    return [splits_text(report), plural(len(report.causes), "cause")]


def compile_errors(report: Report) -> list[CompileError]:
    """The report's errors but the check's (a failed check is in ``errors`` too, as the contract says; its own
    line shows it, so no view counts it twice or calls it a compile error)."""
    return [e for e in report.errors if e.fail_type != "check"]


def summary_line(report: Report) -> str:
    parts = [
        plural(report.frame_count, "frame"),
        plural(report.graph_count, "graph"),
        plural(report.break_count, "graph break"),
        *cause_counts(report),
        plural(report.recompile_count, "recompile"),
        f"compile {report.compile_time_s:.2f} s",
    ]
    if compile_errors(report):
        parts.append(plural(len(compile_errors(report)), "error"))
    if report.fallbacks:
        parts.append(f"{plural(len(report.fallbacks), 'FALLBACK')} to eager")
    if report.check is not None:
        parts.append("check not compared" if not report.check.compared else "check ok" if report.check.ok
                     else "CHECK FAILED")
    return ", ".join(parts)


def _options(report: Report) -> str:
    opts = [f"backend={report.backend}"]
    if report.mode:
        opts.append(f"mode={report.mode}")
    if report.fullgraph:
        opts.append("fullgraph")
    if report.dynamic is not None:
        opts.append(f"dynamic={report.dynamic}")
    opts += [f"{name}={value}" for name, value in sorted(report.dynamo_config.items())]
    return ", ".join(opts)


#: An operator overload's name in a graph (``fma.default``, ``add.Tensor``: ``OpOverload.__name__``); no other
#: op name has a dot (functions, tensor methods and module classes do not).
_OVERLOAD = re.compile(r"^(?P<op>[A-Za-z_]\w*)\.(?P<overload>[A-Za-z_]\w*)$")
#: A notebook cell's file, as capture/cell.py's ``is_cell_filename`` says it (the model cannot import capture).
_CELL_FILE = re.compile(r"^<ipython-input-\d+-[0-9a-f]+>$|[/\\]ipykernel_\d+[/\\]-?\d+\.py$")


def op_label(name: str) -> str:
    """An op as a user reads it: an operator overload Dynamo put in the graph (``fma.default``, which
    ``addcmul_`` becomes) without its overload suffix (``fma``); every other name as it is."""
    m = _OVERLOAD.match(name)
    return m["op"] if m else name


def op_labels(ops: list[str]) -> list[str]:
    return [op_label(op) for op in ops]


def ops_text(graph: Graph, shown: int = SHOWN_OPS) -> str:
    """``add, mul, ... (528 more)``: a graph's first ops, the rest counted."""
    more = len(graph.ops) - shown
    return ", ".join(op_labels(graph.ops[:shown])) + (f", ... {more} more" if more > 0 else "")


def ops_html(graph: Graph, shown: int = SHOWN_OPS) -> str:
    """A graph's first ops, the rest folded in a ``<details>`` ("... 528 more")."""
    first = _e(", ".join(op_labels(graph.ops[:shown])))
    rest = graph.ops[shown:]
    if not rest:
        return first
    return (f"{first}, <details class='nbcompile-ops-more' style='display:inline'><summary>... {len(rest)} more"
            f"</summary>{_e(', '.join(op_labels(rest)))}</details>")


# --- torch's text as the user reads it ------------------------------------------------------------------

#: torch's own log lines (glog's ``W1123 12:00:00.123000 5990 torch/_logging/_internal.py:1345] ...``): they
#: belong in ``Report.torch_log``, folded, never among a view's lines.
_LOG_LINE = re.compile(r"^[IWEFD]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]\n]{1,300}\].*$")
#: An installed package's path inside a text, up to the package (``/work/.venv/lib/python3.11/site-packages/``);
#: bounded, so a long token costs a bounded scan per start.
_INSTALLED_IN_TEXT = re.compile(r"(?<![^\s\"'`(\[{=,])(?:[A-Za-z]:)?[^\s\"'`<>()\[\]{},;=]{0,400}"
                                r"[/\\](?:site|dist)-packages[/\\]")
#: A Python repr with an address or a binding in it, as the user would name the thing instead.
_REPR_NAME = r"(?P<name>(?:\w|\.|<locals>|<lambda>|<genexpr>){1,100})"
_FUNCTION_REPR = re.compile(rf"<(?:function|built-in function|built-in method|method-wrapper) {_REPR_NAME}"
                            r"(?: of [^<>\n]{0,300}?)?(?: at 0x[0-9a-fA-F]{1,16})?>")
_BOUND_REPR = re.compile(rf"<bound method {_REPR_NAME} of (?:<[^<>\n]{{0,300}}>|[^<>\n]{{0,300}}?)>")
_OBJECT_REPR = re.compile(r"<(?P<cls>[\w.]{1,300}) object at 0x[0-9a-fA-F]{1,16}>")
#: torch's guard helpers, as what they check.
_OBJ_ID = re.compile(r"___check_obj_id\((?P<expr>[^,()\n]{1,300}(?:\([^()\n]{0,300}\))?[^,()\n]{0,300}), -?\d+\)")
_TYPE_ID = re.compile(r"___check_type_id\((?P<expr>[^,()\n]{1,300}(?:\([^()\n]{0,300}\))?[^,()\n]{0,300}), -?\d+\)")


def _repr_name(name: str) -> str:
    """``Net.forward.<locals>.inner`` -> ``inner``; ``Net.forward`` as it is."""
    return name.rsplit("<locals>.", 1)[-1]


def is_log_line(line: str) -> bool:
    """Whether ``line`` is one of torch's own log records (``W1123 12:00:00.123 ...``)."""
    return bool(_LOG_LINE.match(line.strip()))


def plain(text: str, stack: Mapping[str, str] | None = None) -> str:
    """torch's text as a view shows it: no internal names (``plain_text``: ``L['x']`` -> ``x``, stack slots,
    resume functions, the cell's temporary file), installed files from the package down
    (``torch/optim/adamw.py:88``, never the virtual environment's path), ``<function foo at 0x7f..>`` as
    ``foo``, and none of torch's own log lines (they are in ``Report.torch_log``, folded)."""
    if not text:
        return text or ""
    text = plain_text(text, stack)
    if "] " in text and "\n" in text or _LOG_LINE.match(text.strip()):
        text = "\n".join(line for line in text.splitlines() if not is_log_line(line))
    if "-packages" in text:
        text = _INSTALLED_IN_TEXT.sub("", text)
    if "<" in text:
        text = _FUNCTION_REPR.sub(lambda m: _repr_name(m["name"]), text)
        text = _BOUND_REPR.sub(lambda m: _repr_name(m["name"]), text)
        text = _OBJECT_REPR.sub(lambda m: f"a {m['cls'].rsplit('.', 1)[-1]} object", text)
    return text


def guard_text(guard: str, stack: Mapping[str, str] | None = None) -> str:
    """A guard as the user reads it: ``EQUALS_MATCH: G['SCALE'] == 2`` -> ``EQUALS_MATCH: SCALE == 2``,
    ``___check_obj_id(G['helper'].__code__, 1396...)`` -> ``helper.__code__ is the same object``."""
    return _guard_text(guard, tuple(sorted(stack.items())) if stack else ())


@functools.lru_cache(maxsize=16384)
def _guard_text(guard: str, stack: tuple[tuple[str, str], ...]) -> str:  # a panel of 500 frames asks each redraw
    text = plain(guard, dict(stack) if stack else None)
    if "___check_" in text:
        text = _OBJ_ID.sub(lambda m: f"{m['expr']} is the same object", text)
        text = _TYPE_ID.sub(lambda m: f"type({m['expr']}) is the same type", text)
    return text


def cause_line(cause: Any, source: str | None = None) -> int | None:
    """The cell line a view marks for ``cause``: its own line, else (a break inside installed code, in
    torch's optimizer step) the cell line whose call reaches it, as its fix names it (``call `opt.step()`
    (line 20)``); given the cell's ``source``, only where that line holds that call."""
    if cause.cell_line is not None:
        return int(cause.cell_line)
    lines = source.splitlines() if source is not None else None
    for fix in cause.fixes:
        for m in _CALL_AT.finditer(fix.why or ""):
            line, code = int(m["line"]), m["code"].rstrip("…").strip()
            if lines is None or (1 <= line <= len(lines) and code and code in lines[line - 1]):
                return line
    return None


#: Where a fix says the user's call into installed code is: "`opt.step()` (line 20)".
_CALL_AT = re.compile(r"`(?P<code>[^`\n]{1,200})` \(line (?P<line>\d{1,6})\)")


def where_cause(cause: Any) -> str:
    """``cell line 17``; a break in installed code by its file, and the cell line that reaches it:
    ``torch/optim/optimizer.py:79 (reached from cell line 20)``."""
    if cause.cell_line is not None:
        return f"cell line {cause.cell_line}"
    said = f"{short_path(cause.filename)}:{cause.lineno}"
    line = cause_line(cause)
    return f"{said} (reached from cell line {line})" if line is not None else said


def is_cell_file(filename: str) -> bool:
    """True for IPython's (``<ipython-input-N-hash>``) and ipykernel's cell files."""
    return bool(_CELL_FILE.search(filename))


def graph_places(report: Report, spans: Mapping[str, tuple[int, int]] | None = None) -> list[str]:
    """Where each graph's code is (in ``report.graphs``' order), as the user wrote it: ``forward (cell line
    14)``, ``train_step (after line 25)``, ``step (torch/optim/adam.py:214)``. With ``spans`` (the cell's
    functions and their first and last lines) a function is named as the cell names it, with its lines:
    ``Net.forward (cell lines 14-15)``; a graph that a break in the function ends stops at the break's line."""
    frames: dict[str, Any] = {}
    for f in report.frames:
        frames.setdefault(f.compile_id, f)
    stops: dict[str, list[tuple[str, int]]] = {}
    for b in report.breaks:
        stops.setdefault(b.compile_id, []).append((b.filename, b.lineno))
    by_short: dict[str, list[tuple[str, tuple[int, int]]]] = {}  # a cell of 500 functions: not 500 x 500 looks
    for tracked, span in (spans or {}).items():
        by_short.setdefault(tracked.rsplit(".", 1)[-1], []).append((tracked, span))
    return [_place(g, frames.get(g.compile_id), stops.get(g.compile_id, []), by_short) for g in report.graphs]


def _place(graph: Graph, frame: Any, stops: list[tuple[str, int]],
           spans: Mapping[str, list[tuple[str, tuple[int, int]]]]) -> str:
    name = function_label(graph.function)
    if frame is None or not frame.filename or not frame.firstlineno:
        return name
    if not is_cell_file(frame.filename):
        return f"{name} ({short_path(frame.filename)}:{frame.firstlineno})"
    first, short = frame.firstlineno, user_function(graph.function)
    for tracked, (start, end) in spans.get(short, ()):
        if start <= first <= end:
            last = min((line for file, line in stops if file == frame.filename and first <= line <= end), default=end)
            lines = f"cell line {first}" if last <= first else f"cell lines {first}\u2013{last}"
            resumed_at = name[len(short):].strip()[1:-1]  # "after line 25", from "f (after line 25)"
            return f"{tracked} ({resumed_at}: {lines})" if resumed_at else f"{tracked} ({lines})"
    resumed = name != graph.function  # "f (after line 5)": the label says where it starts
    return name if resumed else f"{name} (cell line {first})"


def fix_line(fix: Fix) -> str:
    proof = f" [{fix_proof(fix)}]" if fix_proof(fix) else ""
    return f"{fix.command}  # {plain(fix.why)}{proof}" if fix.command else f"{plain(fix.why)}{proof}"


def to_text(report: Report) -> str:
    lines = [f"{report.title or 'nbcompile report'} [{_options(report)}]", summary_line(report)]
    for status in status_lines(report):  # the others have their own lines below
        if status.kind in ("notice", "recompile limit", "counts"):
            lines.append(f"  {status.head}: {plain(status.detail or status.text)}")
    for i, (g, place) in enumerate(zip(report.graphs, graph_places(report), strict=True)):
        lines.append(f"  graph {i + 1}, {place} [compile id {g.compile_id}]: {g.op_count} ops: {ops_text(g)}")
    for c in report.causes_in_order():
        lines.append(f"  break x{c.count} in {function_label(c.function)} at {where_cause(c)}: {c.source_line}")
        if c.count > 1 and c.count_text:
            lines.append(f"    {c.count_text}")
        lines.append(f"    {c.gb_type}{f' ({c.gb_id})' if c.gb_id else ''}: {plain(c.explanation or c.reason)}")
        for hint in c.hints:
            lines.append(f"    hint: {plain(hint)}")
        for fix in c.fixes:
            lines.append(f"    fix: {fix_line(fix)}")
    for r in report.recompiles:
        what = change_text(r) or plain(r.reason)
        where = f" (line {r.cell_line})" if r.cell_line is not None else ""
        lines.append(f"  recompile {function_label(r.function)} [{r.compile_id}]: {what}{where}")
        for fix in r.fixes[:3]:
            lines.append(f"    fix: {fix_line(fix)}")
    for sk in report.skipped:
        lines.append(f"  skipped {function_label(sk.function)} ({skip_where(sk)}): {sk.reason}")
    if report.cache.hits or report.cache.misses:
        lines.append(f"  {cache_text(report)}")
        lines.extend(f"    miss: {reason}" for reason in report.cache.reasons)
    for fb in report.fallbacks:
        lines.append(f"  FALLBACK {fb.kind}, {function_label(fb.function)}: {plain(fb.reason)}")
        for fix in fb.fixes:
            lines.append(f"    fix: {fix.command}  # {plain(fix.why)}" if fix.command else f"    fix: {plain(fix.why)}")
    for e in compile_errors(report):
        lines.append(f"  error in {function_label(e.function)} [{e.compile_id}] {e.fail_type}: {plain(e.message)}")
    if report.check is not None:
        lines.append(f"  {check_head(report.check)} ({check_source(report.check)}): {plain(report.check.message)}")
    for w in report.warnings:
        lines.append(f"  allow_in_graph lint, {w.function}: {w.rule} {w.variable}: {w.message}")
    if report.kernels:
        lines.append(f"  {len(report.kernels)} kernels: {', '.join(k.name for k in report.kernels)}")
    if report.torch_log:  # counted, never printed: torch's log lines are what the cell must not show
        lines.append(f"  torch log: {plural(len(report.torch_log), 'record')}, kept out of the cell "
                     "(report.torch_log; folded in the HTML view)")
    dropped = {k: v for k, v in report.dropped.items() if v}
    if dropped:
        lines.append(f"  (not kept, counted: {dropped})")
    return "\n".join(lines)


# --- the status: one short line per kind, coloured by severity, details folded -----------------

#: Severity -> colour of its status line.
SEVERITY_COLORS = {"ok": "#2a7", "info": "#555", "warn": "#b60", "error": "#b00"}


@dataclass
class StatusLine:
    """One line of a status: a kind (check, errors, notice...), how bad, a short text, the rest folded."""

    kind: str
    #: ok, info, warn, error
    severity: str
    text: str
    detail: str = ""
    #: The bold words that open the line (the kind, unless said otherwise: ``check ok``, ``Check failed``).
    label: str = ""

    @property
    def head(self) -> str:
        return self.label or self.kind


def short(text: str, limit: int = STATUS_CHARS) -> str:
    """The first line of ``text`` within ``limit`` characters, with an ellipsis when cut. A cut falls
    between clauses (before `` (``, after ``;`` or ``:``) or, failing that, between words: never
    inside a number ("max abs diff 9…")."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    cut = len(first) > limit or len(text.strip().splitlines()) > 1
    if len(first) <= limit:
        return first + ("…" if cut else "")
    head = first[:limit - 1]
    clause = max(head.rfind(" ("), head.rfind("; ") + 1, head.rfind(": ") + 1)
    word = head.rfind(" ")
    at = clause if clause >= limit * 0.4 else word if word >= limit * 0.4 else len(head)
    return head[:at].rstrip(" ;:,") + "…"


def _folded(kind: str, severity: str, text: str, detail: str = "", label: str = "") -> StatusLine:
    text, detail = plain(text), plain(detail)
    brief = short(text)
    whole = detail or text
    return StatusLine(kind, severity, brief, "" if whole.strip() == brief.strip() else whole, label)


#: Where a report's check figures come from, unless a view knows better (the panel names the toggle whose
#: re-run on copies it shows): the session's latest run of --run.
SESSION_RUN = "the session's run"
#: What "the session's run" means, folded under the check line: the Fix tab's trials have figures of their own.
SESSION_RUN_DETAIL = ("Figures from the session's latest run of --run: the cell's own run (compiled on your objects), "
                      "or, after a toggle or an option change, its re-run on copies of your objects. The eager "
                      "reference always runs on copies. The Fix tab's trials are judged on copies of their own.")


#: What each ``Check.run`` says in a check line.
RUN_SOURCES = {"cell": SESSION_RUN, "copies": "re-run on copies after a toggle", "trial": "a trial on copies"}


def check_source(check: Check) -> str:
    """The run ``check``'s figures come from, as its line says it: the words set where the run was known
    (``Check.source``), else those of its kind (``Check.run``)."""
    return check.source or RUN_SOURCES.get(check.run, SESSION_RUN)


def check_head(check: Check) -> str:
    """``check ok``, ``Check failed`` or ``check not compared``."""
    return "check not compared" if not check.compared else "check ok" if check.ok else "Check failed"


def check_line(check: Check, source: str | None = None) -> StatusLine:
    """The check in one line: ``check ok`` (green), ``Check failed`` (red), ``check not compared`` (grey), each
    with the run its figures come from (``source``: the session's run, a re-run on copies after a toggle)."""
    source = source or check_source(check)
    message = plain(check.message)
    detail = f"{message}\n{SESSION_RUN_DETAIL}"
    if not check.compared:
        head, severity = "check not compared", "info"
    elif check.ok:
        head, severity = "check ok", "ok"
    else:
        head, severity = "Check failed", "error"
    return StatusLine("check", severity, short(message), detail, label=f"{head} ({source})")


#: What a report at its first stage says (``Report.stage == "dynamo"``).
STAGE_DYNAMO = "graphs, breaks, guards and recompiles from Dynamo's trace; kernels, timings and the check follow"


def status_lines(report: Report, source: str | None = None) -> list[StatusLine]:
    """What the report's header says beyond its counts, one line per kind, worst first within none: the
    check (with the run its figures come from, ``source``, else the check's own ``run``), compile errors,
    the notice (a change that failed and was rolled back), fallbacks to eager, recompile-limit warnings,
    lint warnings, torch's own log (folded)."""
    lines = []
    if report.stage == "dynamo" and not report.interrupted:
        lines.append(StatusLine("stage", "info", STAGE_DYNAMO, label="Dynamo's view"))
    if report.compiled_again:
        lines.append(StatusLine("compiled again", "info", report.compiled_again.removeprefix("compiled again: "),
                                label="compiled again"))
    if report.check is not None:
        lines.append(check_line(report.check, source))
    if report.counts_said:  # the break count beside torch's own, and why they differ
        lines.append(StatusLine("counts", "info", report.counts_said, label="counts"))
    errors = compile_errors(report)
    if errors:
        last = errors[-1]
        lines.append(_folded(
            "errors", "error", f"{plural(len(errors), 'compile error')}; last: {function_label(last.function)} "
            f"{last.fail_type}: {last.message}",
            "\n".join(f"{function_label(e.function)} [{e.compile_id}] {e.fail_type}: {e.message}"
                      for e in errors)))
    if report.notice:
        lines.append(_folded("notice", "warn", report.notice))
    if report.fallbacks:
        lines.append(_folded(
            "fallback", "error", f"{plural(len(report.fallbacks), 'function')} running eagerly: "
            + ", ".join(f"{function_label(f.function)} ({f.kind})" for f in report.fallbacks),
            "\n".join(f"{function_label(f.function)} {f.kind}: {f.reason}" for f in report.fallbacks)))
    warnings = limit_warnings(report)
    if warnings:
        lines.append(_folded("recompile limit", "warn", "; ".join(warnings), "\n".join(warnings)))
    if report.skipped:
        lines.append(_folded(
            "skipped", "info", f"{plural(len(report.skipped), 'frame')} run eagerly without a graph break: "
            + ", ".join(function_label(sk.function) for sk in report.skipped[:4])
            + (", ..." if len(report.skipped) > 4 else ""),
            "\n".join(f"{function_label(sk.function)} ({skip_where(sk)}): {sk.reason}" for sk in report.skipped)))
    if report.cache.hits or report.cache.misses:
        lines.append(StatusLine("cache", "info", cache_text(report), "\n".join(report.cache.reasons)))
    if report.warnings:
        lines.append(_folded("lint", "warn", f"{len(report.warnings)} lint warnings (allow_in_graph)",
                             "\n".join(f"{w.function}: {w.message}" for w in report.warnings)))
    if report.torch_log:
        lines.append(StatusLine("torch log", "info", f"{plural(len(report.torch_log), 'record')}, kept out of the cell",
                                "\n".join(report.torch_log)))
    return lines


def skip_where(skip: Any) -> str:
    """Where a skipped frame is: its cell line, or its file (from the package down) and line."""
    if is_cell_file(skip.filename):
        return f"cell line {skip.lineno}"
    return f"{short_path(skip.filename)}:{skip.lineno}" if skip.filename else "?"


def cache_text(report: Report) -> str:
    """``FX graph / AOTAutograd cache: 3 hits, 1 miss``."""
    return (f"FX graph / AOTAutograd cache: {plural(report.cache.hits, 'hit')}, "
            f"{report.cache.misses} miss{'' if report.cache.misses == 1 else 'es'}")


def status_html(lines: list[StatusLine]) -> str:
    """Each status line as a div of its severity's colour, its detail folded in a ``<details>``."""
    out = []
    for line in lines:
        kind_class = line.kind.replace(" ", "-")
        extra = " nbcompile-notice" if line.kind == "notice" else ""
        detail = "" if not line.detail else (
            " <details class='nbcompile-status-detail' style='display:inline'><summary>details</summary>"
            f"<pre style='white-space:pre-wrap;margin:0'>{_e(line.detail)}</pre></details>")
        out.append(f"<div class='nbcompile-status nbcompile-status-{kind_class} nbcompile-{line.severity}{extra}' "
                   f"style='color:{SEVERITY_COLORS[line.severity]}'><b>{_e(line.head)}</b>"
                   + (f": {_e(line.text)}" if line.text else "") + f"{detail}</div>")
    return "".join(out)


_PROOF_CLASS = {True: "proven", False: "unhelpful", None: "untried"}


def fix_proof(fix: Fix) -> str:
    """What trying the fix showed: ``proven: breaks 2 -> 1, graphs 3 -> 2, check ok``."""
    if fix.verified is True:
        return f"proven: {plain(fix.effect)}"
    if fix.verified is False:
        return f"tried, did not help: {plain(fix.effect)}"
    return plain(fix.effect)


def fixes_html(fixes: list[Fix]) -> str:
    """Fixes as list items, each with its proof, classed by it (proven, unhelpful, untried)."""
    return "".join(
        f"<li class='nbcompile-fix-{_PROOF_CLASS[f.verified]}'><code>{_e(f.command)}</code> {_e(plain(f.why))}"
        + (f" <span class='nbcompile-proof'>[{_e(fix_proof(f))}]</span>" if fix_proof(f) else "") + "</li>"
        if f.command else f"<li class='nbcompile-fix-{_PROOF_CLASS[f.verified]}'>{_e(plain(f.why))}"
        + (f" <span class='nbcompile-proof'>[{_e(fix_proof(f))}]</span>" if fix_proof(f) else "") + "</li>"
        for f in fixes
    )


def _break_detail(b: Any) -> str:
    hints = "".join(f"<li>{_e(plain(h))}</li>" for h in b.hints)
    link = (
        f" <a href='{_e(b.doc_url)}' target='_blank' rel='noopener'>{_e(b.gb_id or 'docs')}</a>"
        if b.doc_url and b.doc_url.startswith(("https://", "http://"))
        else ""
    )
    fixes = fixes_html(b.fixes)
    return (
        f"<b>{_e(b.gb_type)}</b>{link}<br>{_e(plain(b.explanation or b.reason))}"
        + (f"<ul>{hints}</ul>" if hints else "")
        + (f"<div class='nbcompile-fixes'>To remove it:<ul>{fixes}</ul></div>" if fixes else "")
    )


def split_bar(report: Report) -> str:
    """The graph splits as plain HTML (no script, so it shows offline and in a saved notebook): each
    graph a segment sized by its op count, each break a red mark between them, reasons on hover."""
    frames: dict[str, tuple[list[Any], list[Any]]] = {}
    for g in report.graphs:
        frames.setdefault(g.compile_id, ([], []))[0].append(g)
    for b in report.breaks:
        frames.setdefault(b.compile_id, ([], []))[1].append(b)
    cells: list[str] = []
    places = {id(g): place for g, place in zip(report.graphs, graph_places(report), strict=True)}
    for graphs, breaks in frames.values():
        for g in graphs:
            ops = ", ".join(op_labels(g.ops[:12])) + (", ..." if len(g.ops) > 12 else "")
            color = "#4C78A8" if len(cells) % 2 == 0 else "#72B7B2"
            cells.append(f"<div title='{_e(places[id(g)])}: {g.op_count} ops: {_e(ops)}' style='flex:"
                         f"{max(g.op_count, 1)} 1 0;background:{color};color:#fff;font-size:11px;padding:2px 4px;"
                         f"overflow:hidden;white-space:nowrap'>{g.op_count} ops</div>")
        for b in breaks:
            where = f"line {b.cell_line}" if b.cell_line is not None else f"{short_path(b.filename)}:{b.lineno}"
            cells.append(f"<div title='break at {_e(where)}: {_e(b.gb_type or b.reason)}' "
                         "style='flex:0 0 6px;background:#d62728'></div>")
    if not cells:
        return ""
    return ("<div class='nbcompile-splits' style='display:flex;gap:2px;width:100%;max-width:720px;margin:4px 0'>"
            + "".join(cells) + "</div>")


def to_html(report: Report) -> str:
    parts = [
        "<div class='nbcompile-report'>",
        f"<h4>{_e(report.title or 'nbcompile report')} <small>[{_e(_options(report))}]</small></h4>",
        f"<p>{_e(summary_line(report))}</p>",
        status_html(status_lines(report)),
        split_bar(report),
    ]
    if report.warnings:
        parts.append("<h5>allow_in_graph lint</h5>")
        parts.append(_table(["function", "rule", "variable", "line", "warning"],
                            [(w.function, w.rule, w.variable, w.cell_line if w.cell_line is not None else w.lineno,
                              w.message) for w in report.warnings]))
    if compile_errors(report):
        parts.append("<details><summary>Compile errors</summary>")
        parts.append(_table(["function", "compile id", "error", "message"],
                            [(function_label(e.function), e.compile_id, e.fail_type, plain(e.message))
                             for e in compile_errors(report)]))
        parts.append("</details>")
    if report.graphs:
        parts.append("<h5>Graphs</h5>")
        parts.append(graphs_table(report))
    if report.causes:
        parts.append(f"<h5>Graph breaks: {plural(report.break_count, 'event')} from "
                     f"{plural(len(report.causes), 'cause')}, {_e(splits_text(report))}</h5>")
        parts.append(_table(["count", "function", "line", "source", "reason"],
                            [(f"<span title=\"{_e(c.count_text)}\">x{c.count}</span>", function_label(c.function),
                              c.cell_line if c.cell_line is not None else where_cause(c),
                              c.source_line, _break_detail(c)) for c in report.causes_in_order()], raw_cols=(0, 4)))
    for warning in limit_warnings(report):
        parts.append(f"<p class='nbcompile-limit-warning' style='color:#b60'><b>{_e(warning)}</b></p>")
    if report.fallbacks:
        parts.append("<h5 style='color:#b00'>Running slower than you think</h5>")
        parts.append(_table(["function", "kind", "what happened", "fix"],
                            [(function_label(f.function), f.kind, plain(f.reason),
                              "; ".join(x.command or plain(x.why) for x in f.fixes)) for f in report.fallbacks]))
    if report.skipped:
        parts.append("<h5>Run eagerly without a graph break</h5>")
        parts.append(_table(["function", "where", "why"],
                            [(function_label(sk.function), skip_where(sk), sk.reason) for sk in report.skipped]))
    if report.recompiles:
        parts.append("<h5>Recompiles</h5>")
        parts.append(_table(["function", "compile id", "what changed", "line", "fix", "reason"],
                            [(function_label(r.function), _compile_id_html(r.compile_id, report), change_text(r),
                              "" if r.cell_line is None else r.cell_line,
                              f"<ul class='nbcompile-recompile-fixes'>{fixes_html(r.fixes[:3])}</ul>"
                              if r.fixes else "",
                              _e(plain(r.reason))) for r in report.recompiles], raw_cols=(1, 4, 5)))
    if report.frames:
        parts.append("<details><summary>Frames and guards</summary>")
        parts.append(_table(["compile id", "function", "guards", "guard cost", "compile s"],
                            [(f.compile_id, function_label(f.function), f.guard_count, guard_cost_text(f),
                              f"{f.compile_time_s:.3f}") for f in report.frames]))
        for f in report.frames:
            if f.guards:
                parts.append(f"<p><b>{_e(f.compile_id)} {_e(function_label(f.function))}</b></p>"
                             f"<pre>{_e(chr(10).join(guard_text(g) for g in f.guards))}</pre>")
        parts.append("</details>")
    if report.torch_log:
        count = plural(len(report.torch_log), "record")
        parts.append(f"<details class='nbcompile-torch-log'><summary>torch log ({count},"
                     f" kept out of the cell)</summary><pre>{_e(chr(10).join(report.torch_log))}</pre></details>")
    if report.kernels:
        parts.append("<details><summary>Generated kernels</summary>")
        for k in report.kernels:
            parts.append(f"<p><b>{_e(k.name)}</b> ({_e(k.language)})</p><pre>{_e(k.code)}</pre>")
        parts.append("</details>")
    parts.append("</div>")
    return "".join(parts)


_TOP = "text-align:left;vertical-align:top"


def compile_id_text(compile_id: str, report: Report | None = None) -> str:
    """What torch's compile id ``"4/6"`` counts, for a tooltip beside it: frame 4 (one code), its 7th compile
    in this Python process. Earlier ones (a trial's scratch copy, a report before a toggle, another session)
    share the code's numbering, so they are not recompiles of this report, which counts its own."""
    parts = compile_id.split("/")
    frame, nth = (parts[-2], parts[-1]) if len(parts) >= 2 else ("?", "?")
    nth = nth.split("_")[0]
    ordinal = f"compile {int(nth) + 1}" if nth.isdigit() else "a compile"
    text = (f"compile id {compile_id}: torch's number for this compile: frame {frame} (one code), its {ordinal} "
            "in this Python process")
    if nth.isdigit() and int(nth) > 0:
        text += (f"; the {int(nth)} before it (trials on scratch copies, reports before a toggle, other sessions, "
                 "or this report) share the code's numbering, so they are not recompiles of this report")
    if report is not None:
        text += f"; {plural(report.recompile_count, 'recompile')} in this report"
    return text


def _compile_id_html(compile_id: str, report: Report) -> str:
    """torch's compile id, with what its numbers count on hover ("4/6" beside "0 recompiles")."""
    return f"<span title=\"{_e(compile_id_text(compile_id, report))}\">{_e(compile_id)}</span>"


def graphs_table(report: Report, spans: Mapping[str, tuple[int, int]] | None = None) -> str:
    """The graphs, each led by where its code is (function and lines) and its ops; torch's compile id in a
    small last column, for TORCH_TRACE and tlparse."""
    rows = "".join(
        f"<tr><td style='{_TOP}'>{i + 1}</td><td style='{_TOP}' class='nbcompile-graph-place'>{_e(place)}</td>"
        f"<td style='{_TOP}'>{g.op_count}</td><td style='{_TOP}'>{ops_html(g)}</td>"
        f"<td style='{_TOP};color:#888;font-size:smaller' class='nbcompile-compile-id' title=\""
        f"{_e(compile_id_text(g.compile_id, report))} (TORCH_TRACE and tlparse name it so)\">"
        f"{_e(g.compile_id)}</td></tr>"
        for i, (g, place) in enumerate(zip(report.graphs, graph_places(report, spans), strict=True)))
    head = "".join(f"<th style='{_TOP}'>{h}</th>" for h in ("#", "where", "ops", "op names", "id"))
    return (f"<table class='nbcompile-table nbcompile-graphs'><thead><tr>{head}</tr></thead>"
            f"<tbody>{rows}</tbody></table>")


def mimebundle(report: Report) -> dict[str, Any]:
    return {
        MIME_TYPE: report.to_json(),
        "text/html": to_html(report),
        "text/plain": to_text(report),
    }


def set_effect(name: str, mode: str, before: Any, after: Any) -> str:
    """One line on what a toggle did: ``helper -> allow_in_graph: breaks 2 -> 2, graphs 4 -> 4 (it removed
    no break); the allow_in_graph lint warns: ...``, then the new summary. A change that did not help
    is never applied silently."""
    change = f"breaks {before.break_count} -> {after.break_count}, graphs {before.graph_count} -> {after.graph_count}"
    if mode in ("disable", "allow_in_graph", "disallow_in_graph") and after.break_count >= before.break_count \
            and after.graph_count >= before.graph_count:
        change += " (it removed no break and fused no graph)"
    if after.graph_count == 0 and before.graph_count > 0:
        change += " (nothing is compiled any more)"
    warned = [w for w in after.warnings if w.function == name]
    lint = f"; the allow_in_graph lint warns: {'; '.join(w.message for w in warned[:2])}" if warned else ""
    return f"{name} -> {mode}: {change}{lint}. Now: {after.summary()}"


def change_text(recompile: Any) -> str:
    """``x.shape[0]: 3 -> 5`` (the newest cache entry's failed guard, and how many more)."""
    if not recompile.changes:
        return ""
    first = recompile.changes[0]
    more = len(recompile.changes) - 1
    return f"{first.subject}: {first.before} -> {first.after}" + (f" (+{more} more)" if more else "")


#: Guard checks above this share of the compiled call are flagged.
GUARD_SHARE_FLAG = 0.10


def guard_kinds(frame: Any, top: int = 3) -> str:
    """Which guards dominate: ``TENSOR_MATCH x50, ID_MATCH x3``."""
    kinds = Counter(g.split(":", 1)[0].strip() for g in frame.guards if ":" in g)
    return ", ".join(f"{k} x{n}" for k, n in kinds.most_common(top))


def guard_cost_text(frame: Any, call_s: float | None = None) -> str:
    """``guards checked in 7.8 us (torch: 198 us cold); 4% of the call; mostly TENSOR_MATCH x50``."""
    if frame.guard_check_us is None and frame.guard_latency_us is None:
        return ""
    parts = []
    if frame.guard_check_us is not None:
        parts.append(f"guards checked in {frame.guard_check_us:.1f} us")
    if frame.guard_latency_us is not None:
        parts.append(f"torch's figure: {frame.guard_latency_us:.0f} us, cold")
    if call_s and frame.guard_check_us is not None:
        share = frame.guard_check_us * 1e-6 / call_s
        parts.append(f"{share:.0%} of the call" + (" (over 10%: guards cost more than they should)"
                                                   if share > GUARD_SHARE_FLAG else ""))
    kinds = guard_kinds(frame)
    if kinds:
        parts.append(f"mostly {kinds}")
    return "; ".join(parts)


def _recompile_limit() -> int:
    """The running torch's ``recompile_limit``; where torch is not loaded (a trace log read from disk, whose job's
    limit the log does not say), torch's default, 8: reading a log never loads torch."""
    if "torch" not in sys.modules:
        return 8
    from ..core import torch_compat

    return torch_compat.recompile_limit()


def limit_warnings(report: Report, limit: int | None = None) -> list[str]:
    """Functions that used half of ``recompile_limit`` or more: warned before they fall back to eager."""

    limit = limit or _recompile_limit()
    fallen = {f.function for f in report.fallbacks if f.kind == "recompile_limit"}
    entries = Counter(r.function for r in report.recompiles)
    out = []
    for function, recompiles in entries.items():
        used = recompiles + 1  # the first compile's cache entry too
        if function not in fallen and limit and used * 2 >= limit:
            out.append(f"{function_label(function)} has {used} of {limit} cache entries (recompile_limit): at "
                       f"{limit} it runs eagerly from then on")
    return out

