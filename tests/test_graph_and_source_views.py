"""Issue 22, the views a real JupyterLab tour of a training cell found wanting (docs/training_*.png): graphs
led by where their code is (not a compile id) with readable op names, "0 splits" beside breaks said why,
check figures named by the run they come from, a source view that never wraps, a chosen toggle that
stands out, and a module entry named by the forward a call of it runs."""

from __future__ import annotations

import html as htmllib
import re
import textwrap

import ipywidgets as widgets

import nbcompile
from nbcompile.core.text import plural
from nbcompile.model.fixsearch import FixSearch
from nbcompile.model.render import graph_places, status_lines, to_html, to_text
from nbcompile.model.report import Check, CompileError, Frame, Graph, GraphBreak, Report
from nbcompile.views.panel_html import source_view
from nbcompile.views.panel_rows import PANEL_CSS, SELECTED_BACKGROUND, SELECTED_COLOR
from nbcompile.views.status import status_table

from nbhelpers import run_compile_cell

CELL_FILE = "<ipython-input-2-58c94ad9c669>"
ADAM = "/home/me/project/.venv/lib/python3.11/site-packages/torch/optim/adam.py"

#: The tour's training cell, smaller: a module, AdamW, a helper that prints the loss with `.item()`.
TRAINING_CELL = textwrap.dedent("""\
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

        def forward(self, x):
            return self.body(x).mean()

    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    X = torch.randn(4, 8)

    def log_loss(loss):
        print(f"loss {loss.item():.4f}")

    def train_step():
        opt.zero_grad()
        loss = (net(X) - 1.0) ** 2
        log_loss(loss)
        loss.backward()
        opt.step()
        return loss.detach()
    """)
FORWARD_LINES = (12, 13)  # `def forward` and its return, as the cell shows them (the magic is line 1)


def _text(html: str) -> str:
    return htmllib.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def _tour_report(**extra) -> Report:
    """The tour's report: train_step skipped at line 25 (no graph), forward and AdamW's step compiled apart."""
    breaks = [
        GraphBreak("train_step", CELL_FILE, 25, 25, "opt.zero_grad()", "r", "Attempted to inline function marked as "
                   "skipped", "GB0008", "skipped", [], None, compile_id="0/0"),
        GraphBreak("log_loss", CELL_FILE, 22, 22, "print(loss.item())", "r", "Unsupported Tensor.item() call",
                   "GB0124", "no item", [], None, compile_id="2/0"),
    ]
    frames = [Frame("0/0", "train_step", [], 0, 0.1, CELL_FILE, 24), Frame("1/0", "forward", [], 0, 0.1, CELL_FILE, 14),
              Frame("2/0", "log_loss", [], 0, 0.1, CELL_FILE, 21), Frame("4/0", "step", [], 0, 0.1, ADAM, 214)]
    graphs = [Graph("1/0", 3, ["linear", "relu", "mean"], "forward"),
              Graph("4/0", 4, ["iadd", "mul_", "fma.default", "add.Tensor"], "step")]
    report = Report(title="%%compile [2]: train_step, net", backend="eager", graphs=graphs, breaks=breaks,
                    frames=frames, check=Check(True, 1e-7, "matches eager (71 values compared)", rule="fp64"))
    for name, value in extra.items():
        setattr(report, name, value)
    return report


def _graph_rows(html: str) -> list[list[str]]:
    table = re.search(r"<table class='nbcompile-table nbcompile-graphs'>(.*?)</table>", html, re.S)
    assert table, html
    return [[_text(cell).strip() for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)]


# -- a. graphs: where their code is, readable ops; the compile id kept, small --------------------------

def test_the_graphs_table_leads_with_where_each_graph_is_and_reads_its_ops():
    report = _tour_report()
    html = to_html(report)
    rows = _graph_rows(html)
    assert rows[0] == ["#", "where", "ops", "op names", "id"]
    assert rows[1][:2] == ["1", "forward (cell line 14)"] and rows[1][-1] == "1/0"
    assert rows[2][:2] == ["2", "step (torch/optim/adam.py:214)"] and rows[2][-1] == "4/0"
    assert rows[2][3] == "iadd, mul_, fma, add"  # the overloads `fma.default`, `add.Tensor` read as their ops
    assert "fma.default" not in html and "class='nbcompile-compile-id'" in html
    text = to_text(report)
    assert "graph 1, forward (cell line 14) [compile id 1/0]: 3 ops" in text
    resumed = Report(graphs=[Graph("5/0", 2, ["mul", "sum"], "torch_dynamo_resume_in_train_step_at_25"),
                             Graph("1/0", 3, ["linear"], "forward")],
                     breaks=[GraphBreak("forward", CELL_FILE, 15, 15, "print(x)", "r", "print", None, "", [], None,
                                        compile_id="1/0")],
                     frames=[Frame("5/0", "torch_dynamo_resume_in_train_step_at_25", [], 0, 0.1, CELL_FILE, 25),
                             Frame("1/0", "forward", [], 0, 0.1, CELL_FILE, 14)])
    spans = {"train_step": (24, 30), "Net.forward": (14, 17)}
    assert graph_places(resumed) == ["train_step (after line 25)", "forward (cell line 14)"]
    assert graph_places(resumed, spans) == ["train_step (after line 25: cell lines 25\u201330)",
                                            "Net.forward (cell lines 14\u201315)"]  # up to the break that ends it
    assert "graph 2, step (torch/optim/adam.py:214) [compile id 4/0]: 4 ops: iadd, mul_, fma, add" in text


def test_the_panel_names_each_graph_by_the_cells_function_and_its_lines(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "train_step()"', TRAINING_CELL)
    session = nbcompile.last()
    panel = session.panel()
    rows = _graph_rows(panel.causes_html.value)
    places = [row[1] for row in rows[1:]]
    first, last = FORWARD_LINES
    assert f"Net.forward (cell lines {first}\u2013{last})" in places, places
    assert any(p.startswith("step (torch/optim/") for p in places), places  # AdamW's step, in installed code
    assert not any(re.fullmatch(r"\d+/\d+", p) for p in places)
    ids = {g.compile_id for g in session.report.graphs}
    assert {row[-1] for row in rows[1:]} == ids  # the compile id is still there, in the last column
    hover = panel.figure_dict["data"][0]["hovertext"]
    assert any(h.startswith(f"graph 1: Net.forward (cell lines {first}\u2013{last})") for h in hover[:1]), hover
    assert not any(".default" in h for h in hover)


# -- b. "0 splits" beside breaks says why --------------------------------------------------------------

def test_zero_splits_beside_breaks_says_why_where_the_count_is():
    why = "0 splits (no call's graph was cut in two: torch compiled the code around the breaks as separate frames)"
    tour = _tour_report()  # forward's graph and AdamW's step's graph in one call of train_step: one split, as
    assert tour.break_count == 2 and tour.splits == 1  # torch._dynamo.explain counts it (graphs - 1)
    assert "2 graph breaks, 1 split, 2 causes" in tour.summary() and "cut in two" not in tour.summary()
    report = _tour_report(graphs=tour.graphs[:1])  # the step not compiled: one graph, two breaks
    assert report.break_count == 2 and report.splits == 0
    assert f"2 graph breaks, {why}, 2 causes" in report.summary()
    assert f"Graph breaks: 2 events from 2 causes, {why}" in _text(to_html(report))
    brk = GraphBreak("f", CELL_FILE, 3, 3, "print(x)", "r", "print", None, "", [], None, compile_id="0/0")
    split = Report(graphs=[Graph("0/0", 1, ["sin"], "f"), Graph("1/0", 1, ["cos"], "torch_dynamo_resume_in_f_at_3")],
                   breaks=[brk],
                   frames=[Frame("0/0", "f", [], 0, 0.1, CELL_FILE, 2),
                           Frame("1/0", "torch_dynamo_resume_in_f_at_3", [], 0, 0.1, CELL_FILE, 3)])
    assert split.splits == 1 and "1 graph break, 1 split, 1 cause" in split.summary()
    assert "cut in two" not in split.summary()  # a split is said as it is


#: A break before any tensor op: the code after it is the only graph, so no call's graph is cut in two.
GREETING_CELL = """\
import torch
def f(x):
    print("step")
    return x.sin().cos()
x = torch.randn(4)
"""


def test_the_panel_says_why_there_are_breaks_and_no_split(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "f(x)"', GREETING_CELL)
    session = nbcompile.last()
    assert session.report.break_count and session.report.splits == 0
    panel = session.panel()
    counts = _text(re.search(r"<div class='nbcompile-status nbcompile-counts'[^>]*>(.*?)</div>",
                             panel.status.value, re.S).group(1))
    assert "0 splits (no call's graph was cut in two" in counts, counts
    assert "0 splits (no call's graph was cut in two" in _text(panel.causes_html.value)


# -- c. the check's figures name their run -------------------------------------------------------------

def test_the_report_names_the_run_its_check_figures_come_from():
    report = _tour_report()
    check = status_lines(report)[0]
    assert check.head == "check ok (the session's run)"
    assert "re-run on copies" in check.detail and "Fix tab's trials are judged on copies" in check.detail
    assert "check ok (the session's run)" in _text(to_html(report))
    assert "check ok (the session's run): matches eager (71 values compared)" in to_text(report)


def test_the_panel_names_a_toggles_rerun_on_copies_and_the_fix_tabs_trials(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "train_step()"', TRAINING_CELL)
    session = nbcompile.last()
    panel = session.panel()
    assert "check ok (the session's run)" in _text(panel.status.value)
    panel.function_rows["log_loss"].value = "disable"
    assert session.toggles["log_loss"] == "disable"
    status = _text(panel.status.value)
    assert "check ok (re-run on copies after log_loss -> disable)" in status, status
    panel.refresh()
    assert "check ok (re-run on copies after log_loss -> disable)" in _text(panel.status.value)  # redraws keep it
    # the status names the same run, in the same words (the check carries them: issue 34's one verdict)
    assert "check ok (re-run on copies after log_loss -> disable): matches eager" in repr(status_table(session))
    session.run()  # the user's own run: its check is the session's run again
    panel.refresh()
    assert "check ok (the session's run)" in _text(panel.status.value)
    panel.show_fix(FixSearch(state="done"))
    assert "each trial runs and is checked on copies of your objects" in panel.fix_label.value


# -- d. the source view keeps each cell line on one numbered row -----------------------------------------

def test_the_source_view_numbers_every_cell_line_and_never_wraps():
    long = "    self.layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, " \
           "batch_first=True)"
    source = "\nimport torch\n" + long + "\nprint(x)\n"
    report = Report(breaks=[GraphBreak("f", CELL_FILE, 4, 4, "print(x)", "r", "print", None, "", [], None)])
    html = source_view(source, report, {})
    pre = re.search(r"<pre style='([^']*)'", html).group(1)
    assert "white-space:pre;" in pre and "word-break:normal" in pre  # rows inherit: a long line is never wrapped
    assert re.search(r"<div class='nbcompile-source' style='[^']*overflow-x:auto", html)  # it scrolls sideways
    rows = re.findall(r"<div class='nbcompile-line' data-line='(\d+)'[^>]*><span class='nbcompile-lineno'[^>]*>"
                      r"\s*(\d+) (.) </span>", html)
    assert [(int(a), int(b)) for a, b, _ in rows] == [(n, n) for n in range(1, 5)]  # every line, its own number
    assert [mark for *_, mark in rows] == [" ", " ", " ", "●"]  # the break marked on its own line
    assert _text(long).strip() in _text(html)


# -- e. the chosen mode stands out -------------------------------------------------------------------

def _luminance(color: str) -> float:
    channels = [int(color.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_the_chosen_mode_of_each_toggle_is_clearly_marked(ip):
    run_compile_cell(ip, "--backend eager --no-panel", "import torch\ndef f(x):\n    return torch.add(x, 1)\n")
    panel = nbcompile.last().panel()
    assert f"<style>{PANEL_CSS}</style>" in panel.style_html.value and panel.style_html in panel.children
    assert ".nbcompile-panel .nbcompile-modes .jupyter-button.mod-active" in PANEL_CSS
    assert "nbcompile-panel" in panel._dom_classes
    toggles = [*panel.function_rows.values(), *panel.op_rows.values()]
    assert toggles and all("nbcompile-modes" in t._dom_classes for t in toggles)
    assert f"background-color:{SELECTED_BACKGROUND};color:{SELECTED_COLOR}" in PANEL_CSS
    assert _contrast(SELECTED_BACKGROUND, SELECTED_COLOR) >= 4.5  # WCAG AA for its text
    assert _contrast(SELECTED_BACKGROUND, "#eeeeee") >= 3  # against the buttons not chosen (JupyterLab's light theme)


# -- g. a module entry is named by what a call of it runs ----------------------------------------------

def test_a_module_entry_row_names_the_forward_a_call_runs(ip):
    run_compile_cell(ip, "--backend eager --no-panel --entry net", textwrap.dedent("""\
        import torch
        from torch import nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.head = nn.Linear(4, 1)
            def forward(self, x):
                return self.head(x)
        net = Net()
        """))
    panel = nbcompile.last().panel()
    row = panel.functions_box.children[0]
    said = [_text(c.value) for c in row.children if isinstance(c, widgets.HTML)]
    assert said[0].split() == ["net", "(Net.forward)"], said
    assert "a call of it runs Net.forward" in row.children[0].value  # on hover
    assert "the module you call: Net.forward, compiled whole" in said[1], said
    assert "entry, nn.Module" not in " ".join(said)


# -- points 10 to 13 of the tour's second pass ----------------------------------------------------------

#: The tour's AdamW step with the module as an entry: `net (Net.forward)` beside train_step and AdamW's step.
MODULE_ENTRY_LINE = '--backend eager --no-panel --entry net,train_step --run "train_step()"'


def test_a_module_entry_row_shows_its_own_counts_not_the_sessions(ip):
    from nbhelpers import ADAMW_CELL

    run_compile_cell(ip, MODULE_ENTRY_LINE, ADAMW_CELL)
    session = nbcompile.last()
    report = session.report
    assert report.break_count >= 2 and len(report.frames) > 2  # train_step's break and the one inside AdamW.step
    forward = session.function_report("Net.forward")
    panel = session.panel()
    said = _text(panel.function_counts["net"].value).strip()
    assert said == _text(panel.function_counts["Net.forward"].value).strip(), said
    assert said.startswith(f"{plural(len(forward.frames), 'frame')}, {plural(len(forward.breaks), 'break')}")
    assert f"{len(report.frames)} frames" not in said  # not the whole session's
    rows = {row[0]: row for row in status_table(session).rows}
    assert rows["net"][3:] == (len(forward.frames), len(forward.graphs), len(forward.breaks),
                               len(forward.recompiles)) == rows["Net.forward"][3:]


def test_a_break_inside_installed_code_is_marked_on_the_cell_line_that_calls_it(ip):
    from nbcompile.model.render import cause_line  # new here: the other tests also run on the code before

    from nbhelpers import ADAMW_CELL

    run_compile_cell(ip, MODULE_ENTRY_LINE, ADAMW_CELL)
    session = nbcompile.last()
    inside = next(c for c in session.report.causes if c.cell_line is None)
    step_line = 1 + ADAMW_CELL.splitlines().index("    opt.step()") + 1  # the %%compile line is line 1
    assert cause_line(inside, session.source) == step_line
    html = session.panel().source_html.value
    marked = re.search(rf"<div class='nbcompile-line' data-line='{step_line}' style='background:#fde2e1' "
                       r"title='([^']*)'", html)
    assert marked, html
    assert "torch/optim/optimizer.py" in htmllib.unescape(marked.group(1))
    assert f"reached from cell line {step_line}" in to_text(session.report)
    assert f"reached from line {step_line}" in repr(status_table(session))
    # a fix that names a line which does not hold its call marks nothing there
    assert cause_line(inside, "\n".join(["x = 1"] * 40)) is None


VENV_ADAMW = "/work/main/.venv/lib/python3.11/site-packages/torch/optim/adamw.py"
LOG_LINE = "W1123 12:00:00.123000 5990 torch/_logging/_internal.py:1345] [2/0] Profiler record function ignored"


def _raw_report() -> Report:
    brk = GraphBreak("helper", CELL_FILE, 4, 4, "print(x)", "r", "Unsupported builtin print", "GB0059",
                     f"Graph break in user code at {VENV_ADAMW}:88: calling <function helper at 0x7f3a2b1c0d60>",
                     [f"see {VENV_ADAMW}:88"], None, compile_id="0/0")
    frame = Frame("1/0", "torch_dynamo_resume_in_f_at_5", ["EQUALS_MATCH: G['SCALE'] == 2",
                                                           "TYPE_MATCH: ___check_type_id(L['___stack0'], 9412), "
                                                           "type=<class 'int'>",
                                                           "ID_MATCH: ___check_obj_id(G['helper'].__code__, 1396)"],
                  3, 0.1, CELL_FILE, 5)
    return Report(breaks=[brk], frames=[frame], torch_log=[LOG_LINE],
                  errors=[CompileError("f", "0/0", "Unsupported", f"boom\n{LOG_LINE}\nat {VENV_ADAMW}:3")])


def test_views_show_no_venv_paths_function_reprs_log_lines_or_raw_guards():
    report = _raw_report()
    text, html = to_text(report), to_html(report)
    for shown in (text, _text(html)):
        assert "site-packages" not in shown and "0x7f3a2b1c0d60" not in shown, shown
        assert "torch/optim/adamw.py:88" in shown and "calling helper" in shown
        assert "L['" not in shown and "G['" not in shown and "___stack" not in shown and "___check" not in shown
    assert "W1123" not in text and "torch log: 1 record, kept out of the cell" in text  # counted, not printed
    folded = re.search(r"<details class='nbcompile-torch-log'>.*?</details>", html, re.S).group(0)
    assert "W1123" in folded and "W1123" not in html.replace(folded, "").split("nbcompile-status-torch-log")[0]
    guards = re.search(r"<details><summary>Frames and guards</summary>.*?</details>", html, re.S).group(0)
    assert "SCALE == 2" in guards and "helper.__code__ is the same object" in guards


def test_the_panel_guards_tab_reads_as_written(ip):
    from test_plain_names import STACK_CELL

    run_compile_cell(ip, "--backend eager --no-panel", STACK_CELL)
    ip.run_cell("for i in (1, 2, 3): log_stats(torch.ones(5), i)")
    session = nbcompile.last()
    assert any("___stack0" in g for f in session.report.frames for g in f.guards)  # torch's raw text is kept
    panel = session.panel()
    shown = _text(panel.guards_html.value)
    assert "___stack" not in shown and "L['" not in shown and "G['" not in shown, shown
    assert "step * 2 == 2" in shown and "SCALE == 2" in shown
    panel.guard_filter.value = "SCALE =="  # the filter reads what is shown
    assert "SCALE == 2" in _text(panel.guards_html.value)


def test_the_status_table_html_is_one_coloured_line_per_kind_with_details_folded(ip):
    from nbhelpers import ADAMW_CELL

    run_compile_cell(ip, MODULE_ENTRY_LINE, ADAMW_CELL)
    session = nbcompile.last()
    session.report.check = Check(False, 7e-5, "compiled error 7.02e-05, eager error 1e-07, ratio 702\n" + "x " * 300)
    html = status_table(session)._repr_html_()
    divs = re.findall(r"<div class='nbcompile-status [^']*' style='color:(#\w+)'><b>([^<]*)</b>", html)
    kinds = {label.split(" (")[0]: color for color, label in divs}
    assert kinds["Check failed"] == "#b00" and kinds["break x1"] == "#b60", kinds
    check = re.search(r"<div class='nbcompile-status nbcompile-status-check.*?</div>", html, re.S).group(0)
    assert "<details class='nbcompile-status-detail'" in check and "x x x" not in check.split("<details")[0]
