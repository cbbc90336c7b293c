"""Honest views (issue 12): the last good view kept after a failure, reports of real modules render,
objects compared by what they hold, and the panel's rough edges."""

from __future__ import annotations

import dataclasses
import textwrap

import torch

import nbcompile
from nbcompile.engine.check import compare

from nbhelpers import run_compile_cell

FAILING_ALLOW = textwrap.dedent(
    """\
    import torch
    W = torch.full((3,), 2.0)
    def scale(x):
        if type(x).__name__ == "FakeTensor":
            raise ValueError("boom")
        return x * W
    def model(x):
        y = scale(x.sin())
        print("break")
        return y + 1
    """
)


def test_a_failed_toggle_keeps_the_last_good_view_everywhere(ip):
    result = run_compile_cell(ip, '--backend eager --no-panel --run "model(torch.ones(3))"', FAILING_ALLOW)
    assert result.success, result.error_in_exec
    session = nbcompile.last()
    panel = session.panel()
    report, figure = session.report, panel.figure_dict
    counts = {name: html.value for name, html in panel.function_counts.items()}
    status = panel.status.value
    panel.function_rows["scale"].value = "allow_in_graph"
    assert panel.function_rows["scale"].value == "compile"  # the widget went back
    assert session.report is report and session.toggles["scale"] == "compile"
    assert panel.figure_dict == figure
    assert {name: html.value for name, html in panel.function_counts.items()} == counts
    assert "ValueError: boom" in panel.status.value  # the error beside the kept view
    assert status.split("</div>")[0] in panel.status.value  # the same counts as before (the status's first line)
    # the report (and so the gutter, which reads it) is the last good one, saying what failed
    assert report.notice.startswith("The last change failed and was rolled back: scale -> allow_in_graph failed")
    bundle = report._repr_mimebundle_()
    assert "ValueError: boom" in bundle["text/html"] and bundle["application/vnd.nbcompile.report+json"]["notice"]
    assert bundle["application/vnd.nbcompile.report+json"]["breaks"] == report.to_json()["breaks"] != []
    ip.run_cell("%nbcompile set scale disable")  # the next good change: a fresh report, no notice
    assert nbcompile.last().report is not report and nbcompile.last().report.notice == ""


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    cache: object


class Cache:  # like Hugging Face's DynamicCache: no == of its own
    def __init__(self, k):
        self.key_cache = [k]


def test_objects_without_eq_are_compared_by_what_they_hold():
    a = Output(torch.ones(2), Cache(torch.ones(3)))
    same = compare(a, Output(torch.ones(2), Cache(torch.ones(3))))
    assert not same.problems and same.compared == 2
    differs = compare(a, Output(torch.ones(2), Cache(torch.zeros(3))))
    assert differs.problems and "result.cache.key_cache[0]" in differs.problems[0]


def test_a_module_outside_no_grad_renders():
    report = nbcompile.inspect(torch.nn.Linear(4, 2), torch.randn(3, 4), backend="eager")
    bundle = report._repr_mimebundle_()
    assert {"application/vnd.nbcompile.report+json", "text/html", "text/plain"} <= set(bundle)
    assert report.check.ok and report.check.compared


def test_panel_rough_edges(ip):
    body = textwrap.dedent(
        """\
        import torch
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(2, 2)
            def forward(self, x):
                return self.lin(x).relu()
        net = Net()
        """
    )
    assert run_compile_cell(ip, '--backend eager --no-panel --run "net(torch.ones(2))"', body).success
    panel = nbcompile.last().panel()
    assert "Net.__init__" not in panel.function_rows and "Net.forward" in panel.function_rows
    assert "1 frame," in panel.function_counts["Net.forward"].value
    assert "1 graph," in panel.status.value
    testing_only = set(nbcompile.core.torch_compat.list_backends()) - set(panel.backend.options)
    assert "inductor" in panel.backend.options and testing_only


def test_a_timing_that_is_not_steady_is_marked_noisy_and_not_plotted():
    from nbcompile.engine.timing import BenchResult, BenchRow, steady_time

    asked = []

    def wild_timer(call, device, min_run_time):  # what a loaded machine gave: IQR as large as the median
        asked.append(min_run_time)
        return (1e-3, 1.2e-3, 1e-3)

    median, iqr, _, noisy = steady_time(lambda: None, torch.device("cpu"), 0.05, timer=wild_timer)
    assert asked == [0.05, 0.1]  # measured again, for longer, before giving up
    assert noisy and "IQR 120%" in noisy
    steady = steady_time(lambda: None, torch.device("cpu"), 0.05, timer=lambda *a: (1e-3, 1e-5, 1e-3))
    assert steady[3] == ""
    rows = [BenchRow("eager", 1e-3, 1e-5, 1.0, None), BenchRow("default", 2e-6, 1e-6, 500.0, 1.0, noisy=noisy)]
    result = BenchResult(rows, "cpu", "torch.utils.benchmark", None, 0, 0)
    figure = result.figure()
    bars = [t for t in figure.data if t.type == "bar" and t.name == "speedup"]
    assert list(bars[0].x) == ["eager"]  # the 500x that cannot be defended is not a bar
    assert any("noisy" in a.text for a in figure.layout.annotations)
    assert "noisy" in str(result)


def test_when_eager_itself_moves_during_the_bench_every_row_is_noisy():
    import contextlib
    import time

    from nbcompile.engine.timing import run_plans

    slow = [False]

    def eager():
        time.sleep(0.004 if slow[0] else 0.0005)

    @contextlib.contextmanager
    def plan():
        def first_call():
            slow[0] = True  # something else on the machine starts here
            return 0.0, 0.0, None
        yield first_call, lambda: None

    result = run_plans(eager, [("p", plan)], torch.device("cpu"), 0.05, lambda out: 0)
    assert all("eager's own time moved" in row.noisy for row in result.rows)


def test_exported_html_needs_no_network_for_the_figures():
    from nbcompile.engine.timing import BenchResult, BenchRow
    from nbcompile.runner import inline_plotly

    rows = [BenchRow("eager", 1e-3, 1e-5, 1.0, None), BenchRow("default", 5e-4, 1e-5, 2.0, 1.0, 0.5)]
    bundle = BenchResult(rows, "cpu", "torch.utils.benchmark", None, 0, 0)._repr_mimebundle_()
    html = bundle["text/html"]
    assert "nbcompile-bench" in html and "2.00x" in html  # the bars, no script needed
    page = inline_plotly(f"<html><body>{html}{html}</body></html>")
    assert 'src="https://cdn.plot.ly' not in page and page.count("<script>") >= 1 and len(page) > 1_000_000


def test_the_report_html_draws_the_splits_without_script():
    def split(x):
        y = x.sin()
        print("break")
        return y.cos()

    html = nbcompile.inspect(split, torch.ones(3), backend="eager")._repr_mimebundle_()["text/html"]
    assert "nbcompile-splits" in html and "<script" not in html
    assert html.count("ops</div>") == 2 and "background:#d62728" in html


def skips_itself(x):
    torch._dynamo.skip_frame()
    return x + 1


def resumes(x):
    y = x.sin()
    print("break")
    return y.cos()


def test_a_deliberate_skip_frame_is_not_an_error_and_resume_frames_read_as_their_function():
    assert nbcompile.inspect(skips_itself, torch.ones(2), backend="eager").errors == []
    text = str(nbcompile.inspect(resumes, torch.ones(2), backend="eager"))
    assert "resumes (after line" in text or "resumes (resumed at line" in text
    assert "torch_dynamo_resume_in" not in text


def test_a_module_entry_has_a_row_in_the_panel(ip):
    ip.run_cell("import torch\nlin = torch.nn.Linear(2, 2)")
    result = run_compile_cell(ip, '--backend eager --no-panel --entry lin --run "lin(torch.ones(2))"', "import torch\n")
    assert result.success, result.error_in_exec
    panel = nbcompile.last().panel()
    assert "1 frame," in panel.function_counts["lin"].value


def test_rows_never_cut_a_mode_nor_run_a_long_name_under_the_buttons(ip):
    from nbcompile.views import panel as panel_ops

    body = "import torch\ndef f(x):\n    return torch.nn.functional.scaled_dot_product_attention(x, x, x) + 1\n"
    run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(1, 2, 4))"', body)
    panel = nbcompile.last().panel()
    assert panel.function_rows["f"].style.button_width == panel_ops.FUNCTION_BUTTON_WIDTH
    # 14 and 17 characters at 7.5 px in the 13 px UI font, plus 2 x 12 px of padding
    assert int(panel_ops.FUNCTION_BUTTON_WIDTH[:-2]) >= 14 * 7.5 + 24
    assert int(panel_ops.TORCH_BUTTON_WIDTH[:-2]) >= 17 * 7.5 + 24
    (name,) = [n for n in panel.op_rows if "scaled_dot_product_attention" in n]
    row = next(r for r in panel.ops_box.children if panel.op_rows[name] in r.children)
    html = row.children[0].value
    assert "text-overflow:ellipsis" in html and f"title='{name}'" in html
    assert row.children[0].layout.width == panel_ops.LABEL_WIDTH


SUBMODULE_DISABLED = textwrap.dedent(
    """\
    import torch
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pre = torch.nn.Linear(4, 4)
            self.layer0 = torch.nn.Linear(4, 4)
            self.layer1 = torch.nn.Linear(4, 4)
        def forward(self, x):
            x = torch.relu(self.pre(x))
            x = self.layer0(x)
            return self.layer1(x) * 2
    model = Net()
    model.layer0 = torch._dynamo.disable(model.layer0)
    """
)


def test_a_module_entry_leaves_the_submodules_the_user_disabled_eager(ip):
    from torch._dynamo.testing import CompileCounter

    run_compile_cell(ip, '--backend eager --entry model --no-panel --run "model(torch.ones(3, 4))"', SUBMODULE_DISABLED)
    session = nbcompile.last()
    ns: dict = {}
    exec(SUBMODULE_DISABLED, ns)
    counter = CompileCounter()
    torch.compile(ns["model"], backend=counter)(torch.ones(3, 4))
    assert counter.frame_count == 2  # plain torch.compile(model): before and after the disabled layer
    assert (session.report.graph_count, session.report.break_count) == (counter.frame_count, 1)
    assert not any("layer0" in g.function or "Linear" in g.function for g in session.report.graphs)
    exec(SUBMODULE_DISABLED, ns)
    assert nbcompile.inspect(ns["model"], torch.ones(3, 4), backend="eager").graph_count == counter.frame_count


def test_the_run_summary_numbers_cells_as_a_user_counts_them(capsys):
    import nbformat

    from nbcompile import runner
    from nbcompile.model.report import MIME_TYPE, Report

    data = Report(title="%%compile [3]: f").to_json()
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# title"),
        nbformat.v4.new_code_cell("import torch", execution_count=1),
        nbformat.v4.new_code_cell("%%compile\ndef f(x):\n    return x", execution_count=3, outputs=[
            nbformat.v4.new_output("display_data", data={MIME_TYPE: data})]),
    ])
    summary = runner.summary(nb)
    (cell,) = summary["compile_cells"]
    assert (cell["cell"], cell["execution_count"]) == (3, 3)  # the third cell of the notebook, In [3]
    runner.print_summary("nb.ipynb", {"seconds": 1.0, "peak_rss_mib": None}, summary)
    assert "cell 3 (In [3]): %%compile [3]: f" in capsys.readouterr().out


def test_run_without_the_nbconvert_stack_says_what_to_install(tmp_path):
    import subprocess
    import sys

    (tmp_path / "nb.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    code = ("import sys; sys.modules['nbclient'] = None; from nbcompile.runner import main; "
            f"sys.exit(main(['run', {str(tmp_path / 'nb.ipynb')!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "`run` needs nbclient: pip install 'nbcompile[run]'" in done.stderr


def test_classes_of_c_code_are_never_state_a_check_would_write_back():
    """timm's modules import functools.partial and read `.func`: a C type's descriptor is not state."""
    from nbcompile.engine.state import reach

    ns: dict = {"__name__": "__main__"}
    exec(textwrap.dedent(
        """\
        from functools import partial
        import torch
        class Counter:
            calls = 0
        def act(x):
            fn = partial(torch.add, alpha=1)
            Counter.calls += 1
            return fn.func(x, 1)
        """), ns)
    slots = reach(ns, None, [ns["act"]])
    assert "partial.func" not in slots and "Counter.calls" in slots
    report = nbcompile.inspect(ns["act"], torch.ones(2), backend="eager")
    assert report.check.ok and report.check.compared, report.check.message


def test_a_rerun_compiles_as_a_fresh_process_does(ip):
    """Dynamo remembers which dimensions changed (automatic dynamic) per code, past compiled code and
    cache regions: nbcompile gives that memory back, so a re-run, a toggle and inspect see the first
    run's graphs and recompiles again."""
    body = "import torch\ndef f(x):\n    return x.sin() * 2\n"
    line = '--backend eager --no-panel --run "[f(torch.ones(n)) for n in (3, 5, 7)]"'
    counts = []
    for _ in range(2):
        run_compile_cell(ip, line, body)
        report = nbcompile.last().report
        counts.append((report.graph_count, report.recompile_count))
    ip.run_cell("%nbcompile set f disable")
    ip.run_cell("%nbcompile set f compile")
    report = nbcompile.last().report
    counts.append((report.graph_count, report.recompile_count))
    assert counts == [(2, 1)] * 3
    ns: dict = {}
    exec("import torch\ndef g(x):\n    return x.cos() + 1\n", ns)
    for _ in range(2):
        assert nbcompile.inspect(ns["g"], torch.ones(3), backend="eager").graph_count == 1
        second = nbcompile.inspect(ns["g"], torch.ones(5), backend="eager")
        assert (second.graph_count, second.recompile_count) == (1, 0)  # a fresh copy: static again
