"""Views of a Report: plain text, HTML and the Jupyter mime bundle.

They only read the Report. Every piece of user or torch text that reaches
HTML goes through ``html.escape``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core import torch_compat
from ..core.text import _e, _table, function_label, plural

if TYPE_CHECKING:  # types only: the Report imports this module to show itself
    from .report import Fix, Report

MIME_TYPE = "application/vnd.nbcompile.report+json"

def summary_line(report: Report) -> str:
    parts = [
        plural(report.frame_count, "frame"),
        plural(report.graph_count, "graph"),
        plural(report.break_count, "graph break"),
        plural(report.recompile_count, "recompile"),
        f"compile {report.compile_time_s:.2f} s",
    ]
    if report.errors:
        parts.append(plural(len(report.errors), "error"))
    if report.fallbacks:
        parts.append(f"{plural(len(report.fallbacks), 'FALLBACK')} to eager")
    if report.check is not None:
        parts.append("check ok" if report.check.ok else "CHECK FAILED")
    return ", ".join(parts)


def _options(report: Report) -> str:
    opts = [f"backend={report.backend}"]
    if report.mode:
        opts.append(f"mode={report.mode}")
    if report.fullgraph:
        opts.append("fullgraph")
    if report.dynamic is not None:
        opts.append(f"dynamic={report.dynamic}")
    return ", ".join(opts)


def to_text(report: Report) -> str:
    lines = [f"{report.title or 'nbcompile report'} [{_options(report)}]", summary_line(report)]
    if report.notice:
        lines.insert(1, f"  {report.notice}")
    for i, g in enumerate(report.graphs):
        lines.append(
            f"  graph {i + 1} [{g.compile_id}] {function_label(g.function)}: {g.op_count} ops: {', '.join(g.ops)}"
        )
    for b in report.breaks:
        where = f"cell line {b.cell_line}" if b.cell_line is not None else f"{b.filename}:{b.lineno}"
        lines.append(f"  break in {function_label(b.function)} at {where}: {b.source_line}")
        lines.append(f"    {b.gb_type}{f' ({b.gb_id})' if b.gb_id else ''}: {b.explanation or b.reason}")
        for hint in b.hints:
            lines.append(f"    hint: {hint}")
        for fix in b.fixes:
            proof = f" [{fix_proof(fix)}]" if fix_proof(fix) else ""
            lines.append(f"    fix: {fix.command}  # {fix.why}{proof}" if fix.command else f"    fix: {fix.why}")
    for r in report.recompiles:
        what = change_text(r) or r.reason
        where = f" (line {r.cell_line})" if r.cell_line is not None else ""
        lines.append(f"  recompile {function_label(r.function)} [{r.compile_id}]: {what}{where}")
        for fix in r.fixes[:3]:
            proof = f" [{fix_proof(fix)}]" if fix_proof(fix) else ""
            lines.append(f"    fix: {fix.command}  # {fix.why}{proof}" if fix.command else f"    fix: {fix.why}")
    for warning in limit_warnings(report):
        lines.append(f"  WARNING: {warning}")
    for fb in report.fallbacks:
        lines.append(f"  FALLBACK {fb.kind}, {function_label(fb.function)}: {fb.reason}")
        for fix in fb.fixes:
            lines.append(f"    fix: {fix.command}  # {fix.why}" if fix.command else f"    fix: {fix.why}")
    for e in report.errors:
        lines.append(f"  error in {function_label(e.function)} [{e.compile_id}] {e.fail_type}: {e.message}")
    if report.check is not None:
        lines.append(f"  check {'ok' if report.check.ok else 'FAILED'}: {report.check.message}")
    for w in report.warnings:
        lines.append(f"  allow_in_graph lint, {w.function}: {w.rule} {w.variable}: {w.message}")
    if report.kernels:
        lines.append(f"  {len(report.kernels)} kernels: {', '.join(k.name for k in report.kernels)}")
    dropped = {k: v for k, v in report.dropped.items() if v}
    if dropped:
        lines.append(f"  (not kept, counted: {dropped})")
    return "\n".join(lines)


_PROOF_CLASS = {True: "proven", False: "unhelpful", None: "untried"}


def fix_proof(fix: Fix) -> str:
    """What trying the fix showed: ``proven: breaks 2 -> 1, graphs 3 -> 2, check ok``."""
    if fix.verified is True:
        return f"proven: {fix.effect}"
    if fix.verified is False:
        return f"tried, did not help: {fix.effect}"
    return fix.effect


def _break_detail(b: Any) -> str:
    hints = "".join(f"<li>{_e(h)}</li>" for h in b.hints)
    link = (
        f" <a href='{_e(b.doc_url)}' target='_blank' rel='noopener'>{_e(b.gb_id or 'docs')}</a>"
        if b.doc_url and b.doc_url.startswith(("https://", "http://"))
        else ""
    )
    fixes = "".join(
        f"<li class='nbcompile-fix-{_PROOF_CLASS[f.verified]}'><code>{_e(f.command)}</code> {_e(f.why)}"
        + (f" <span class='nbcompile-proof'>[{_e(fix_proof(f))}]</span>" if fix_proof(f) else "") + "</li>"
        if f.command else f"<li>{_e(f.why)}</li>" for f in b.fixes
    )
    return (
        f"<b>{_e(b.gb_type)}</b>{link}<br>{_e(b.explanation or b.reason)}"
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
    for graphs, breaks in frames.values():
        for g in graphs:
            ops = ", ".join(g.ops[:12]) + (", ..." if len(g.ops) > 12 else "")
            color = "#4C78A8" if len(cells) % 2 == 0 else "#72B7B2"
            cells.append(f"<div title='{_e(function_label(g.function))}: {g.op_count} ops: {_e(ops)}' style='flex:"
                         f"{max(g.op_count, 1)} 1 0;background:{color};color:#fff;font-size:11px;padding:2px 4px;"
                         f"overflow:hidden;white-space:nowrap'>{g.op_count} ops</div>")
        for b in breaks:
            where = f"line {b.cell_line}" if b.cell_line is not None else f"{b.filename}:{b.lineno}"
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
        split_bar(report),
    ]
    if report.notice:
        parts.insert(2, f"<p class='nbcompile-notice' style='color:#b00'><b>{_e(report.notice)}</b></p>")
    if report.check is not None and not report.check.ok:
        parts.append(f"<p style='color:#b00'><b>Check failed:</b> {_e(report.check.message)}</p>")
    elif report.check is not None:
        parts.append(f"<p>Check: {_e(report.check.message)}</p>")
    if report.warnings:
        parts.append("<h5>allow_in_graph lint</h5>")
        parts.append(_table(["function", "rule", "variable", "line", "warning"],
                            [(w.function, w.rule, w.variable, w.cell_line if w.cell_line is not None else w.lineno,
                              w.message) for w in report.warnings]))
    if report.errors:
        parts.append(_table(["function", "compile id", "error", "message"],
                            [(function_label(e.function), e.compile_id, e.fail_type, e.message)
                             for e in report.errors]))
    if report.graphs:
        parts.append("<h5>Graphs</h5>")
        parts.append(_table(["#", "compile id", "function", "ops", "op names"],
                            [(i + 1, g.compile_id, function_label(g.function), g.op_count, ", ".join(g.ops))
                             for i, g in enumerate(report.graphs)]))
    if report.breaks:
        parts.append("<h5>Graph breaks</h5>")
        parts.append(_table(["function", "line", "source", "reason"],
                            [(function_label(b.function),
                              b.cell_line if b.cell_line is not None else f"{b.filename}:{b.lineno}",
                              b.source_line, _break_detail(b)) for b in report.breaks], raw_cols=(3,)))
    for warning in limit_warnings(report):
        parts.append(f"<p class='nbcompile-limit-warning' style='color:#b60'><b>{_e(warning)}</b></p>")
    if report.fallbacks:
        parts.append("<h5 style='color:#b00'>Running slower than you think</h5>")
        parts.append(_table(["function", "kind", "what happened", "fix"],
                            [(function_label(f.function), f.kind, f.reason,
                              "; ".join(x.command or x.why for x in f.fixes)) for f in report.fallbacks]))
    if report.recompiles:
        parts.append("<h5>Recompiles</h5>")
        parts.append(_table(["function", "compile id", "what changed", "line", "fix", "reason"],
                            [(function_label(r.function), r.compile_id, change_text(r),
                              "" if r.cell_line is None else r.cell_line,
                              "; ".join((f.command or f.why) + (f" [{fix_proof(f)}]" if fix_proof(f) else "")
                                        for f in r.fixes[:2]), r.reason) for r in report.recompiles]))
    if report.frames:
        parts.append("<details><summary>Frames and guards</summary>")
        parts.append(_table(["compile id", "function", "guards", "guard cost", "compile s"],
                            [(f.compile_id, function_label(f.function), f.guard_count, guard_cost_text(f),
                              f"{f.compile_time_s:.3f}") for f in report.frames]))
        for f in report.frames:
            if f.guards:
                parts.append(f"<p><b>{_e(f.compile_id)} {_e(function_label(f.function))}</b></p>"
                             f"<pre>{_e(chr(10).join(f.guards))}</pre>")
        parts.append("</details>")
    if report.kernels:
        parts.append("<details><summary>Generated kernels</summary>")
        for k in report.kernels:
            parts.append(f"<p><b>{_e(k.name)}</b> ({_e(k.language)})</p><pre>{_e(k.code)}</pre>")
        parts.append("</details>")
    parts.append("</div>")
    return "".join(parts)


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
    from collections import Counter

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


def limit_warnings(report: Report, limit: int | None = None) -> list[str]:
    """Functions that used half of ``recompile_limit`` or more: warned before they fall back to eager."""
    from collections import Counter


    limit = limit or torch_compat.recompile_limit()
    fallen = {f.function for f in report.fallbacks if f.kind == "recompile_limit"}
    entries = Counter(r.function for r in report.recompiles)
    out = []
    for function, recompiles in entries.items():
        used = recompiles + 1  # the first compile's cache entry too
        if function not in fallen and limit and used * 2 >= limit:
            out.append(f"{function_label(function)} has {used} of {limit} cache entries (recompile_limit): at "
                       f"{limit} it runs eagerly from then on")
    return out

