"""Issue 35, point 3: counts users can compare. ``Report.splits`` is graphs - 1 of a plain ``torch.compile`` of
the same call (what the PT2 corpus and GraphMend count), ``Report.torch_breaks`` is what torch's own
``counters["graph_break"]`` counted during the session's run, and where that differs from the report's break
count each view says why in one line (``Report.counts_said``: the text, the HTML, the JSON the JupyterLab
extension renders, the panel's status). Real IPython shell, real Dynamo (backend eager)."""

from __future__ import annotations

import linecache
import textwrap

import pytest
import torch

import nbcompile
from nbcompile.model.render import status_lines

from nbhelpers import run_compile_cell

CELLS = {
    # a print: one break, torch counts it too
    "print": """\
        import torch
        def f(x):
            y = x.sin()
            print("y")
            return y.cos()
        x = torch.randn(4)
        """,
    # a break two calls deep: the entry's graph is cut as well as the callees'
    "inlined": """\
        import torch
        def inner(x):
            y = x.sin()
            torch._dynamo.graph_break()
            return y.cos()
        def middle(x):
            return inner(x) * 2
        def f(x):
            return middle(x + 1) - 1
        x = torch.randn(4)
        """,
    # a branch on a tensor in the compiled frame itself: a break torch's counter leaves out
    "branch": """\
        import torch
        def f(x):
            if x.sum() > 0:
                return x.sin()
            return x.cos()
        x = torch.randn(4, generator=torch.Generator().manual_seed(0))
        """,
}


def _plain(cell: str) -> tuple[int, int]:
    """(graphs - 1, counters["graph_break"]) of a plain torch.compile of the same call."""
    namespace: dict = {}
    # The cell's source is registered, as IPython registers a cell's: a function with no source file is one torch
    # 2.11 compiles inside a frame of its own (external_utils.wrap_inline), which counts every break of the
    # function once more in its counter; a notebook's function has its cell's source, and neither torch wraps it.
    filename = f"<plain {hash(cell) & 0xFFFFFFFF:08x}>"
    linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
    exec(compile(cell, filename, "exec"), namespace)
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.utils.counters.clear()
    torch.compile(namespace["f"], backend=counting)(namespace["x"])
    return len(graphs) - 1, int(sum(torch._dynamo.utils.counters["graph_break"].values()))


@pytest.mark.parametrize("name", list(CELLS))
def test_the_counts_are_a_plain_compiles_and_a_difference_is_said(ip, name):
    cell = textwrap.dedent(CELLS[name])
    result = run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(x)"', cell)
    assert result.success, result.error_in_exec
    report = nbcompile.last().report
    splits, counted = _plain(cell)
    assert report.splits == splits, (report.splits, splits)
    assert report.torch_breaks == counted, (report.torch_breaks, counted)
    said = report.breaks_said
    assert bool(said) == (counted != report.break_count), said
    assert not report.splits_said, report.splits_said  # one call: no recompile's graphs among the splits
    said = report.counts_said
    if said:  # every view says it in one line
        assert "\n" not in said and f"{counted} in torch's counters['graph_break']" in said
        assert said in str(report)
        assert any(line.kind == "counts" and line.text == said for line in status_lines(report))
        assert report.to_json()["counts_said"] == said
        assert said.replace("'", "&#x27;") in report._repr_mimebundle_()["text/html"] or said in \
            report._repr_mimebundle_()["text/html"]
    else:
        assert report.to_json()["counts_said"] == ""


def test_the_branch_in_the_compiled_frame_is_the_case_that_differs(ip):
    cell = textwrap.dedent(CELLS["branch"])
    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(x)"', cell)
    report = nbcompile.last().report
    assert report.break_count == 1 and report.torch_breaks == 0
    assert "data-dependent jump" in report.counts_said


def test_splits_that_are_recompiles_graphs_are_said(ip):
    """A run that calls twice with another Python number: the resumed part after the break compiles again, and
    its graph counts as a split of the session's report, which one call of a plain torch.compile never makes:
    each view says how many of the splits are such graphs."""
    cell = textwrap.dedent("""\
        import torch
        def f(x, n):
            y = x.sin()
            torch._dynamo.graph_break()
            return y * n
        x = torch.randn(8)
        """)
    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(x, 2) + f(x, 3)"', cell)
    report = nbcompile.last().report
    assert report.recompile_count >= 1, str(report)
    said = report.splits_said
    assert said.startswith("1 of the ") and "compiled again during the run" in said, (said, str(report))
    assert said in report.counts_said and report.to_json()["counts_said"] == report.counts_said
    assert any(line.kind == "counts" and line.text == report.counts_said for line in status_lines(report))
