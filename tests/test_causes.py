"""Issue 22, point 3 and 7: one row per cause (with its count) in every view, graph splits beside the
event count, long op lists folded; recompile fixes, with their proofs, in the panel and `%nbcompile status`."""

from __future__ import annotations

import json
import re

import nbcompile
from nbcompile.model.render import to_html, to_text
from nbcompile.model.report import MAX_ITEMS, Graph, GraphBreak, Report

from nbhelpers import run_compile_cell

#: One printing helper called three times: three break events at one site (the print), one cause.
THRICE_CELL = """\
import torch
def helper(x):
    print("in helper")
    return torch.cos(x) * 2
def caller(x):
    x = helper(x.sin())
    x = helper(x + 1)
    return helper(x * 3)
"""


def _brk(line: int) -> GraphBreak:
    return GraphBreak("f", "<ipython-input-1>", line, line, f"line {line}", "r", "print", None, "print here", [], None)


def test_break_events_at_one_site_are_one_cause_with_its_count(ip):
    result = run_compile_cell(ip, '--backend eager --no-dynamic --no-panel --run "caller(torch.ones(3))"', THRICE_CELL)
    assert result.success, result.error_in_exec
    report = nbcompile.last().report
    assert report.break_count >= 3  # every event kept: as many as torch reported
    at_print = [c for c in report.causes if c.cell_line == 4]
    assert len(at_print) == 1 and at_print[0].count == sum(b.cell_line == 4 for b in report.breaks) >= 3
    assert sum(c.count for c in report.causes) == report.break_count
    assert len(report.causes) < report.break_count
    assert at_print[0].gb_type and at_print[0].fixes  # said once, with its fixes
    data = report.to_json()
    assert [c["count"] for c in data["causes"]] == [c.count for c in report.causes]
    assert data["splits"] == report.splits and json.dumps(data)
    text = to_text(report)
    assert text.count("  break x") == len(report.causes) and f"break x{at_print[0].count} in helper" in text
    html = to_html(report)
    counts = re.findall(r"vertical-align:top'><span title=\"x\d+: [^\"]*\">x\d+</span>", html)
    assert len(counts) == len(report.causes)  # each count says what it counts on hover
    assert f"from {len(report.causes)} cause" in html


def test_the_cause_counts_add_up_past_max_items():
    report = Report()
    for i in range(MAX_ITEMS + 100):
        report.add("breaks", _brk(4 if i % 2 else 5))
    assert len(report.breaks) == MAX_ITEMS and report.break_count == MAX_ITEMS + 100
    assert [(c.lineno, c.count) for c in report.causes] == [(5, 300), (4, 300)]
    assert sum(c.count for c in report.causes) == report.break_count


def test_a_report_built_with_its_breaks_groups_them_and_a_function_part_keeps_its_causes():
    report = Report(breaks=[_brk(4), _brk(4), _brk(6)])
    assert [(c.lineno, c.count) for c in report.causes] == [(4, 2), (6, 1)]
    assert sum(c.count for c in report.for_function("f").causes) == 3
    assert report.for_function("g").causes == []


def test_splits_count_graphs_less_one_per_entry_compile(ip):
    """GraphMend's count: one call of the entry that runs as 4 graphs is 3 splits, beside the events (4 here:
    Dynamo also compiles the helper on its own after the first break inside it)."""
    run_compile_cell(ip, '--backend eager --no-dynamic --no-panel --run "caller(torch.ones(3))"', THRICE_CELL)
    report = nbcompile.last().report
    assert report.graph_count == 4 and report.splits == 3
    run_compile_cell(ip, '--backend eager --no-dynamic --no-panel --run "[caller(torch.ones(3)) for _ in range(3)]"',
                     THRICE_CELL)
    assert nbcompile.last().report.splits == 3  # called three times, compiled once: still 3 splits
    assert f"{report.break_count} graph breaks, {report.splits} splits, {len(report.causes)} cause" in report.summary()


def test_long_op_lists_are_folded():
    ops = [f"op{i}" for i in range(540)]
    report = Report(graphs=[Graph("0/0", 540, ops, "f")])
    text = to_text(report)
    assert "op11, ... 528 more" in text and "op12" not in text
    html = to_html(report)
    assert "<summary>... 528 more</summary>" in html and "nbcompile-ops-more" in html


def test_the_panel_and_status_show_causes_with_their_count(ip):
    run_compile_cell(ip, '--backend eager --no-dynamic --no-panel --run "caller(torch.ones(3))"', THRICE_CELL)
    session = nbcompile.last()
    report = session.report
    (cause,) = [c for c in report.causes if c.cell_line == 4]
    panel = session.panel()
    assert len(re.findall(r"<tr><td title=\"x\d+: [^\"]*\"><b>x", panel.causes_html.value)) == len(report.causes)
    assert f"<b>x{cause.count}</b>" in panel.causes_html.value
    assert f"x{cause.count} " in panel.source_html.value  # the marked line's title says how often
    notes = ip.run_line_magic("nbcompile", "status").notes
    breaks = [n for n in notes if n.startswith("break at")]
    assert len(breaks) == len(report.causes) and any(n.startswith("break at line 4") and n.endswith(f"[x{cause.count}]")
                                                      for n in breaks)


def test_recompile_fixes_show_with_their_proof_in_the_panel_and_status(ip):
    run_compile_cell(ip, '--backend eager --no-dynamic --no-panel --run "[f(torch.ones(n)) for n in (3, 5, 7)]"',
                     "import torch\ndef f(x):\n    return x.sin() * 2\n")
    session = nbcompile.last()
    fix = session.report.recompiles[0].fixes[0]
    if fix.verified is None:  # a slow machine ran past the proofs' budget: prove with room (the views are the point)
        session.verify_fixes(budget_s=600)
        fix = session.report.recompiles[0].fixes[0]
    assert fix.verified is True, fix.effect
    tab = session.panel().recompiles_html.value
    assert "fix (and its proof)" in tab and "proven: recompiles 2 -&gt; 0" in tab and "nbcompile-fix-proven" in tab
    notes = ip.run_line_magic("nbcompile", "status").notes
    assert any(n.startswith("recompile of f (") and "--dynamic (proven: recompiles 2 -> 0" in n for n in notes)
    html = session.report._repr_mimebundle_()["text/html"]
    assert "nbcompile-recompile-fixes" in html and "proven: recompiles 2 -&gt; 0" in html
