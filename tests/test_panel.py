"""The panel, driven as a user would without a browser: set values, read the state it shows."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

import nbcompile

from nbhelpers import PRINTING_HELPER_CELL, run_compile_cell


@pytest.fixture()
def panel(ip):
    run_compile_cell(ip, '--backend eager --no-dynamic --no-panel --run "caller(torch.ones(3))"', PRINTING_HELPER_CELL)
    return nbcompile.last().panel()


def test_rows_counts_status_and_figure(panel):
    session = nbcompile.last()
    assert list(panel.function_rows) == ["helper", "caller"]
    assert panel.function_rows["helper"].value == "compile"
    assert set(panel.op_rows) == {"torch.add", "torch.sub", "torch.cos"}
    assert "2 breaks" in panel.function_counts["helper"].value
    assert "3 graphs, 2 breaks" in panel.status.value and "check ok" in panel.status.value
    figure = panel.figure
    assert isinstance(figure, go.Figure)
    assert list(figure.data[0].x) == [g.op_count for g in session.report.graphs]
    assert len(figure.data[1].x) == 2 and all("cell line 4" in h for h in figure.data[1].hovertext)
    assert "data-line='4' style='background:#fde2e1'" in panel.source_html.value
    assert panel is session.panel()  # one panel per session, shown again


def test_a_function_toggle_reruns_and_redraws(panel):
    session = nbcompile.last()
    before = panel.figure_dict
    panel.function_rows["helper"].value = "disable"
    assert session.toggles["helper"] == "disable"
    assert session.report.break_count == 1
    assert "1 break," in panel.status.value
    assert panel.figure_dict != before and len(panel.figure.data[1].x) == 1
    assert "helper = torch.compiler.disable(helper)" in panel.snippet
    panel.function_rows["helper"].value = "allow_in_graph"
    assert session.report.break_count == 0 and "1 lint warnings" in panel.status.value
    assert "torch.compiler.allow_in_graph(helper)" in panel.snippet


def test_an_op_toggle_disallows_the_torch_callable(panel):
    session = nbcompile.last()
    graphs = session.report.graph_count
    panel.op_rows["torch.sub"].value = "disallow_in_graph"
    assert session.toggles["torch.sub"] == "disallow_in_graph"
    assert session.report.graph_count == graphs + 1
    assert "torch._dynamo.disallow_in_graph(torch.sub)" in panel.snippet
    panel.op_rows["torch.sub"].value = "compile"
    assert session.report.graph_count == graphs and "torch.sub" not in session.toggles


def test_controls_change_the_options_and_a_failure_keeps_the_last_good_view(panel):
    session = nbcompile.last()
    panel.backend.value = "aot_eager"
    assert session.options.backend == "aot_eager" and session.report.backend == "aot_eager"
    assert "backend='aot_eager'" in panel.snippet
    report, figure = session.report, panel.figure_dict
    panel.fullgraph.value = True  # the print cannot be traced in one graph
    assert panel.fullgraph.value is False and session.options.fullgraph is False
    assert session.report is report and panel.figure_dict == figure
    assert "last error" in panel.status.value and "fullgraph=True failed" in panel.status.value
    panel.dynamic.value = "True"
    assert session.options.dynamic is True and "last error" not in panel.status.value


def test_a_failed_toggle_reverts_the_widget(ip):
    body = "import torch\ndef noisy(x):\n    print('x')\n    return x + 1\ndef top(x):\n    return noisy(x) * 2\n"
    run_compile_cell(ip, '--backend eager --fullgraph --allow noisy --no-panel --run "top(torch.ones(2))"', body)
    panel = nbcompile.last().panel()
    panel.function_rows["noisy"].value = "compile"
    assert panel.function_rows["noisy"].value == "allow_in_graph"
    assert nbcompile.last().toggles["noisy"] == "allow_in_graph"
    assert "kept noisy -&gt; allow_in_graph" in panel.status.value


def test_calls_from_other_cells_update_the_panel(panel, ip):
    ip.run_cell("caller(torch.ones(5))")  # --no-dynamic: a new shape recompiles
    session = nbcompile.last()
    assert session.report.recompile_count >= 1
    assert f"{session.report.recompile_count} recompiles" in panel.status.value
    assert "size mismatch" in panel.recompiles_html.value or "5" in panel.recompiles_html.value
    assert "↻" in panel.source_html.value  # the recompiled function's line is marked


def test_guards_filter_and_kernels_and_export_style(panel):
    all_guards = panel.guards_html.value
    panel.guard_filter.value = "TENSOR_MATCH"
    filtered = panel.guards_html.value
    assert "TENSOR_MATCH" in filtered and len(filtered) < len(all_guards)
    panel.guard_filter.value = "no guard has this text"
    assert "no guards match" in panel.guards_html.value
    assert "no generated kernels (backend eager)" in panel.kernels_html.value
    panel.export_style.value = "decorators"
    assert panel.snippet.startswith("import torch\n") and "def helper(x):" in panel.snippet
    assert "data-snippet=" in panel.export_html.value and "Copy</button>" in panel.export_html.value


def test_reset_detaches_the_panel(panel, ip):
    ip.run_line_magic("nbcompile", "reset")
    assert panel.function_rows["helper"].disabled and panel.backend.disabled
    assert "session reset" in panel.status.value


def test_the_panel_magic_in_a_terminal_falls_back_to_the_report(ip, capsys):
    run_compile_cell(ip, '--backend eager --run "caller(torch.ones(3))"', PRINTING_HELPER_CELL)
    capsys.readouterr()
    ip.run_line_magic("nbcompile", "panel")
    out = capsys.readouterr().out
    assert "shows no widgets" in out and "graph breaks" in out
