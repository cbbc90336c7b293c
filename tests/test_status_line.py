"""Issue 22, point 8 (a status that reads at a glance: one short line per kind, coloured by severity, details
folded) and the panel's part of point 9 (full op names, buttons on one row, only backends that work here,
bench figures as text, the note that toggles run on copies)."""

from __future__ import annotations

import re

import pytest
import torch

import nbcompile
from nbcompile.engine.timing import BenchResult, BenchRow
from nbcompile.model.plots import bench_figure
from nbcompile.model.render import status_lines, to_html
from nbcompile.model.report import Check, CompileError, Report
from nbcompile.views import panel as panel_view
from nbcompile.views.status import status_table

from nbhelpers import PRINTING_HELPER_CELL, run_compile_cell

LONG = "compiled error 7.02e-05, eager error 1e-07, ratio 702 on in_proj_bias.grad\n" + "detail " * 200


def _status_divs(html: str) -> list[str]:
    return re.findall(r"<div class='nbcompile-status [^']*'[^>]*>.*?</div>", html, flags=re.S)


def test_the_report_header_has_one_short_line_per_kind_coloured_by_severity():
    report = Report(check=Check(False, 7e-5, LONG), errors=[CompileError("f", "0/0", "Unsupported", "boom")],
                    notice="helper -> allow_in_graph failed (ValueError); kept the last good report")
    assert [(s.kind, s.severity) for s in status_lines(report)] == [
        ("check", "error"), ("errors", "error"), ("notice", "warn")]
    divs = _status_divs(to_html(report))
    assert len(divs) == 3
    check, errors, notice = divs
    assert "nbcompile-status-check nbcompile-error" in check and "color:#b00" in check
    assert "boom" not in check and "kept the last good report" not in check  # not one line mixing everything
    assert "nbcompile-notice" in notice and "color:#b60" in notice and "boom" not in notice
    assert "boom" in errors and "nbcompile-status-errors" in errors
    shown = re.sub(r"<details.*?</details>", "", check, flags=re.S)  # what reads at a glance
    assert "ratio 702" in shown and "detail detail" not in shown and len(re.sub("<[^>]+>", "", shown)) < 200
    assert "<details class='nbcompile-status-detail'" in check and "detail detail" in check  # folded, kept
    ok = _status_divs(to_html(Report(check=Check(True, 0.0, "matches eager"))))
    assert len(ok) == 1 and "check ok" in ok[0] and "color:#2a7" in ok[0]


def test_torch_log_records_are_a_folded_status_line():
    report = Report(torch_log=[f"W1123 record {i}" for i in range(30)])
    (line,) = status_lines(report)
    assert line.severity == "info" and "30 records" in line.text and "record 29" in line.detail
    html = to_html(report)
    assert "<details class='nbcompile-torch-log'>" in html and "W1123 record 0" in html
    assert "W1123 record 5" not in str(report)  # the text view shows the first few, counts the rest
    assert "... 25 more" in str(report)


@pytest.fixture()
def panel(ip):
    run_compile_cell(ip, '--backend eager --no-dynamic --no-panel --run "caller(torch.ones(3))"', PRINTING_HELPER_CELL)
    return nbcompile.last().panel()


def test_the_panel_status_is_one_line_per_kind(panel):
    divs = _status_divs(panel.status.value)
    assert "nbcompile-counts" in divs[0] and "3 graphs, 2 breaks" in divs[0]
    check = next(d for d in divs if "nbcompile-status-check" in d)
    assert "check ok" in check and "color:#2a7" in check
    panel.fullgraph.value = True  # a failing change: the error gets its own red line, the check keeps its green one
    divs = _status_divs(panel.status.value)
    error = next(d for d in divs if "last error" in d)
    assert "color:#b00" in error and "check ok" not in error
    assert any("check ok" in d and "color:#2a7" in d for d in divs)


def test_the_panel_says_toggles_run_on_copies(panel):
    assert panel.copies_note in panel.children
    assert "Toggles re-run --run on copies: your objects change only when you run a cell." in panel.copies_note.value


def test_full_op_names_with_an_ellipsis_and_buttons_on_one_row(panel):
    row = next(r for r in panel.ops_box.children if panel.op_rows["torch.cos"] in r.children)
    label = row.children[0]
    assert "title='torch.cos'" in label.value and "text-overflow:ellipsis" in label.value
    assert label.layout.width == panel_view.LABEL_WIDTH and label.layout.flex == "0 0 auto"  # never squeezed
    assert row.layout.flex_flow == "row nowrap"
    toggle = panel.function_rows["helper"]
    width = int(panel_view.FUNCTION_BUTTON_WIDTH.removesuffix("px"))
    assert int(toggle.layout.min_width.removesuffix("px")) >= len(toggle.options) * width
    assert toggle.layout.flex == "0 0 auto"


def test_only_backends_that_work_here_are_offered(panel, monkeypatch):
    offered = list(panel.backend.options)
    assert offered == panel_view.working_backends("eager")
    assert "eager" in offered and "aot_eager" in offered
    if not torch.cuda.is_available():
        assert "cudagraphs" not in offered
    assert "openxla" not in offered or panel_view.backend_problem("openxla") is None
    assert "tvm" not in offered or panel_view.backend_problem("tvm") is None
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("CXX", raising=False)
    if not torch.cuda.is_available():
        assert "C++ compiler" in (panel_view.backend_problem("inductor") or "")
        assert "inductor" not in panel_view.working_backends("eager")
        assert "inductor" in panel_view.working_backends("inductor")  # the session's own is always shown


def test_the_bench_figure_shows_its_figures_as_text():
    result = BenchResult([BenchRow("eager", 1e-4, 1e-6, 1.0, None),
                          BenchRow("session", 5e-5, 1e-6, 2.0, 1.5, compile_warm_s=0.25)],
                         "cpu", "torch.utils.benchmark", None, 0, 0)
    fig = bench_figure(result)
    speed = fig.data[0]
    assert list(speed.text) == ["1.00x (100.0 us)", "2.00x (50.0 us)"] and speed.textposition == "outside"
    assert list(fig.data[1].text) == ["1.50 s"] and list(fig.data[2].text) == ["0.25 s"]


def test_a_failed_check_is_one_red_line_never_also_a_compile_error(ip):
    report = Report(check=Check(False, 7e-5, LONG), errors=[CompileError("--run", "", "check", LONG)])
    assert [s.kind for s in status_lines(report)] == ["check"]  # the contract keeps it in errors; shown once
    assert "error" not in report.summary().replace("CHECK FAILED", ""), report.summary()
    assert "Compile errors" not in to_html(report)


def test_the_status_shows_the_check_in_one_short_line(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "f(x)"',
                     "import torch\ndef f(x):\n    return x.sin()\nx = torch.ones(3)\n")
    session = nbcompile.last()
    session.report.check = Check(False, 7e-5, LONG)
    text = repr(status_table(session))
    line = next(piece for piece in text.splitlines() if "heck failed" in piece)
    assert len(line) < 300 and line.rstrip().endswith("\u2026"), line
