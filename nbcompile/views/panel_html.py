"""What the panel's tabs show, as pure functions of a report (no widget): the graph-splits figure, the
cell source with its breaks marked, and the causes, recompiles and kernels as HTML.

Also the guard lines a recompile failed, the torch ops a report's graphs call, and a proven source
rewrite as a diff of the cell (``rewrite_diff``). Every string is escaped (``escape``).
"""

from __future__ import annotations

import difflib
import functools
import html
import re
from typing import Any

from ..capture.guards import subject_of
from ..core.text import function_label, plural, short_path
from ..engine.snippet import commented
from ..model.render import (
    cause_line,
    change_text,
    fixes_html,
    graph_places,
    graphs_table,
    op_labels,
    plain,
    splits_text,
    where_cause,
)
from ..model.report import Report, Rewrite

#: Unchanged lines of the cell shown around a rewrite in its diff.
DIFF_CONTEXT = 2
#: Most characters of kernel code shown per kernel in the Kernels tab.
KERNEL_CHARS = 20_000


def escape(value: Any) -> str:
    """``value`` as HTML text (None as nothing), quotes escaped: safe inside an attribute too."""
    return html.escape("" if value is None else str(value), quote=True)


def _fix_list(fixes: list[Any]) -> str:
    return f"<ul class='nbcompile-recompile-fixes'>{fixes_html(fixes)}</ul>" if fixes else ""


def torch_op_names(report: Report, toggles: dict[str, str]) -> list[str]:
    """Dotted names of torch callables the graphs call, plus the torch toggles set now."""
    names: list[str] = [n for n in toggles if n.startswith("torch.")]
    for graph in report.graphs:
        names.extend(n for n in graph.torch_callables if n not in names)
    return names


def split_figure(report: Report, spans: dict[str, tuple[int, int]] | None = None) -> dict[str, Any]:
    """The graph-splits figure as a plotly dict: graphs in call order as segments sized by op count (where
    each graph's code is, its ops and its compile id on hover), breaks as markers between them (reason and
    cell line on hover)."""
    places = {id(g): place for g, place in zip(report.graphs, graph_places(report, spans), strict=True)}
    by_frame: dict[str, tuple[list[Any], list[Any]]] = {}
    order: list[str] = []
    for graph in report.graphs:
        if graph.compile_id not in by_frame:
            order.append(graph.compile_id)
        by_frame.setdefault(graph.compile_id, ([], []))[0].append(graph)
    for brk in report.breaks:
        if brk.compile_id not in by_frame:
            order.append(brk.compile_id)
        by_frame.setdefault(brk.compile_id, ([], []))[1].append(brk)
    x, base, hover, colors = [], [], [], []
    bx, bhover = [], []
    position = 0
    for compile_id in order:
        graphs, breaks = by_frame[compile_id]
        for graph in graphs:
            size = max(graph.op_count, 1)
            x.append(size)
            base.append(position)
            ops = ", ".join(op_labels(graph.ops[:12])) + (", ..." if len(graph.ops) > 12 else "")
            hover.append(f"graph {len(x)}: {escape(places[id(graph)])}<br>{graph.op_count} ops: {escape(ops)}"
                         f"<br>compile id {escape(graph.compile_id)}")
            colors.append("#4C78A8" if len(x) % 2 else "#72B7B2")
            position += size
        for brk in breaks:
            where = (f"cell line {brk.cell_line}" if brk.cell_line is not None
                     else f"{short_path(brk.filename)}:{brk.lineno}")
            bx.append(position)
            bhover.append(f"break in {escape(function_label(brk.function))} at {where}<br>{escape(brk.source_line)}"
                          f"<br>{escape(brk.gb_type)}")
    return {
        "data": [
            {"type": "bar", "orientation": "h", "y": ["graphs"] * len(x), "x": x, "base": base,
             "marker": {"color": colors, "line": {"color": "white", "width": 1}},
             "hovertext": hover, "hoverinfo": "text", "name": "graphs"},
            {"type": "scatter", "mode": "markers", "y": ["graphs"] * len(bx), "x": bx,
             "marker": {"symbol": "line-ns-open", "size": 28, "color": "#E45756", "line": {"width": 3}},
             "hovertext": bhover, "hoverinfo": "text", "name": "breaks"},
        ],
        "layout": {
            "height": 170, "margin": {"l": 60, "r": 10, "t": 30, "b": 30}, "showlegend": False,
            "title": {"text": f"{plural(report.graph_count, 'graph')}, {plural(report.break_count, 'break')} "
                              "(width: ops)",
                      "font": {"size": 13}},
            "xaxis": {"title": {"text": "ops, in call order"}}, "barmode": "overlay",
        },
    }


#: A source line as the cell shows it: never wrapped nor broken inside a word.
_NO_WRAP = "white-space:pre;overflow-wrap:normal;word-break:normal;"
#: The cell line's number and mark: grey, not selected with the code.
_LINENO = "color:#999;user-select:none"


def _row(number: int, text: str, style: str = "", mark: str = " ", title: str = "") -> str:
    return (f"<div class='nbcompile-line' data-line='{number}' style='{style}' "
            f"title='{escape(title)}'><span class='nbcompile-lineno' style='{_LINENO}'>"
            f"{number:>3} {mark} </span>"
            f"{escape(text) or '&nbsp;'}</div>")


@functools.lru_cache(maxsize=8)
def _plain_rows(source: str) -> tuple[str, ...]:
    """Every line of ``source`` as an unmarked row (a cell of 1,000 lines is escaped once, not at each click)."""
    return tuple(_row(number, text) for number, text in enumerate(source.splitlines(), start=1))


def source_view(source: str, report: Report, spans: dict[str, tuple[int, int]]) -> str:
    """The cell source as HTML with break lines (red) and recompiled functions' lines (orange) marked."""
    breaks: dict[int, list[str]] = {}
    for cause in report.causes:
        line = cause_line(cause, source)  # a break inside installed code: the cell line whose call reaches it
        if line is not None:
            inside = "" if cause.cell_line is not None else f" (in {where_cause(cause).split(' (')[0]})"
            breaks.setdefault(line, []).append(
                f"x{cause.count} {cause.gb_type}{inside}: {plain(cause.explanation or cause.reason)}")
    recompiled: dict[int, list[str]] = {}
    for rec in report.recompiles:
        name = function_label(rec.function).split(" ")[0]
        for tracked, (first, _) in spans.items():
            if tracked.split(".")[-1] == name:
                recompiled.setdefault(first, []).append(change_text(rec) or rec.reason)
    lines = source.splitlines()
    rows = list(_plain_rows(source))  # the unmarked lines, as each redraw of the same cell shows them
    for number in {*breaks, *recompiled}:
        if not 1 <= number <= len(lines):
            continue
        if number in breaks:
            style, mark, title = "background:#fde2e1", "●", "; ".join(breaks[number])
        else:
            style, mark, title = "background:#fff1d6", "↻", "recompiled: " + "; ".join(recompiled[number])
        rows[number - 1] = _row(number, lines[number - 1], style, mark, title)
    # One row per cell line, never wrapped (a long line scrolls sideways): the numbers and the marks stay
    # on the cell's lines. Inline (the rows inherit it), so the notebook's own ``pre { white-space: pre-wrap }``
    # loses.
    return (f"<div class='nbcompile-source' style='overflow-x:auto;max-width:100%'><pre style='{_NO_WRAP}"
            "font-size:12px;line-height:1.35;margin:0;display:inline-block;min-width:100%'>" + "".join(rows)
            + "</pre></div>")


def failed_guard(guard: str, subjects: list[str]) -> bool:
    """Whether a guard line checks one of the expressions a recompile named (``x.shape[0]``, ``SCALE``)."""

    if not subjects:
        return False
    text = subject_of(guard)
    for subject in subjects:
        root = re.split(r"[.\[(]", subject.removeprefix("type(").removeprefix("len("), maxsplit=1)[0]
        if root and re.search(rf"(?<![\w.']){re.escape(root)}(?![\w'])", text):
            return True
    return False


def recompiles_html(report: Report) -> str:
    if not report.recompiles:
        return "<i>no recompiles</i>"
    rows = "".join(f"<tr><td>{escape(function_label(r.function))}</td><td>{escape(r.compile_id)}</td>"
                   f"<td><b>{escape(change_text(r))}</b></td>"
                   f"<td>{_fix_list(r.fixes)}</td>"
                   f"<td><code>{escape(plain(r.reason))}</code></td></tr>"
                   for r in report.recompiles)
    return ("<table><tr><th>function</th><th>compile id</th><th>what changed</th><th>fix (and its proof)</th>"
            f"<th>failed guard</th></tr>{rows}</table>")

def causes_html(report: Report, spans: dict[str, tuple[int, int]] | None = None) -> str:
    """One row per break cause, with its count, its fixes and their proofs; then the graphs, each led by
    where its code is, their long op lists folded."""
    parts = []
    if report.causes:
        rows = "".join(
            f"<tr><td title=\"{escape(c.count_text)}\"><b>x{c.count}</b></td>"
            f"<td>{escape(function_label(c.function))}</td>"
            f"<td>{escape(c.cell_line if c.cell_line is not None else where_cause(c))}</td>"
            f"<td><code>{escape(c.source_line)}</code></td><td><b>{escape(c.gb_type)}</b>: "
            f"{escape(plain(c.explanation or c.reason))}"
            + (f"<ul>{fixes_html(c.fixes)}</ul>" if c.fixes else "") + "</td></tr>"
            for c in report.causes_in_order())
        parts.append(f"<p><b>Break causes</b>: {plural(report.break_count, 'event')} from "
                     f"{plural(len(report.causes), 'cause')}, {escape(splits_text(report))}</p>"
                     "<table class='nbcompile-causes'><tr><th>count</th><th>function</th><th>line</th>"
                     f"<th>source</th><th>reason and fixes</th></tr>{rows}</table>")
    if report.graphs:
        parts.append("<details class='nbcompile-graph-ops'><summary>Graphs and their ops</summary>"
                     f"{graphs_table(report, spans)}</details>")
    return "".join(parts)

def kernels_html(report: Report) -> str:
    if not report.kernels:
        return f"<i>no generated kernels (backend {escape(report.backend)})</i>"
    blocks = []
    for k in report.kernels:
        code = k.code if len(k.code) <= KERNEL_CHARS else k.code[:KERNEL_CHARS] + "\n# ... (cut)"
        blocks.append(f"<details><summary>[{escape(k.compile_id)}] {escape(k.name)} ({escape(k.language)})</summary>"
                      f"<pre>{escape(code)}</pre></details>")
    return "".join(blocks)


def rewrite_diff(source: str, rewrite: Rewrite, context: int = DIFF_CONTEXT) -> str:
    """``rewrite`` as a unified diff of the cell ``source`` (line 1 the magic's line, as ``cell_line``
    counts), with the user's comments and blank lines kept (``commented``: the text accept gives) and
    ``context`` unchanged lines of the cell around it, as written. Where the cell no longer reads as the
    rewrite expects (it changed since), the rewrite's own lines alone."""
    kept = commented(rewrite)
    lines = [line.rstrip("\r") for line in source.split("\n")]
    first, count = rewrite.cell_line - 1, rewrite.before.count("\n") + 1
    if first < 0 or lines[first:first + count] != rewrite.before.split("\n"):
        return kept.diff()
    new = lines[:first] + kept.after.split("\n") + lines[first + count:]
    return "\n".join(difflib.unified_diff(lines, new, "cell", "cell, rewritten", lineterm="", n=context))
