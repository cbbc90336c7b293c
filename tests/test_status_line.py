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
    report = Report(torch_log=[f"W1123 12:00:00.123000 5990 torch/x.py:1] record {i}" for i in range(30)])
    (line,) = status_lines(report)
    assert line.severity == "info" and "30 records" in line.text and "record 29" in line.detail
    html = to_html(report)
    assert "<details class='nbcompile-torch-log'>" in html and "record 0" in html
    text = str(report)  # the text view cannot fold: it counts them and prints none of torch's log lines
    assert "W1123" not in text and "record 0" not in text and "torch log: 30 records, kept out of the cell" in text


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


#: A narrow notebook (a side panel, a split view): no part of a row may need more than this.
NARROW_PX = 200


def _px(value: str | None) -> int:
    return int((value or "0px").removesuffix("px"))


def test_full_op_names_with_an_ellipsis_and_rows_that_wrap_never_overflow(panel):
    row = next(r for r in panel.ops_box.children if panel.op_rows["torch.cos"] in r.children)
    label = row.children[0]
    assert "title='torch.cos'" in label.value and "text-overflow:ellipsis" in label.value
    assert label.layout.width == panel_view.LABEL_WIDTH  # a column of its own while there is room
    rows = [*panel.functions_box.children, *panel.ops_box.children]
    assert rows and all(r.layout.flex_flow == "row wrap" and r.layout.max_width == "100%" for r in rows)
    for r in rows:  # every part of a row wraps to a line of its own and fits a narrow notebook there
        for part in r.children:
            assert _px(part.layout.min_width) <= NARROW_PX, (part, part.layout.min_width)
            assert part.layout.max_width == "100%" and part.layout.flex.split()[1] == "1", part.layout  # shrinks
    for toggle, width in [(panel.function_rows["helper"], panel_view.FUNCTION_BUTTON_WIDTH),
                          (panel.op_rows["torch.cos"], panel_view.TORCH_BUTTON_WIDTH)]:
        every = len(toggle.options) * _px(width)
        assert _px(toggle.layout.width) >= every  # all its buttons on one line while the panel has room
        assert _px(width) <= _px(toggle.layout.min_width) <= NARROW_PX  # at least one whole button, never cut
    assert panel.controls.layout.flex_flow == "row wrap"


def test_a_long_function_name_wraps_its_row_instead_of_pushing_the_buttons_out(ip):
    name = "a_helper_with_a_very_long_name_that_a_user_wrote_for_a_training_loop"
    body = f"import torch\ndef {name}(x):\n    return x * 2\ndef top(x):\n    return {name}(x) + 1\n"
    run_compile_cell(ip, '--backend eager --no-panel --run "top(torch.ones(2))"', body)
    panel = nbcompile.last().panel()
    row = next(r for r in panel.functions_box.children if panel.function_rows[name] in r.children)
    label = row.children[0]
    assert f"title='{name}'" in label.value and "max-width:100%" in label.value
    assert _px(label.layout.min_width) + _px(panel.function_rows[name].layout.min_width) <= 2 * NARROW_PX
    assert row.layout.flex_flow == "row wrap" and row.layout.overflow in (None, "")  # wraps, no scrollbar


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
