"""Honest views (issue 12): the last good view kept after a failure, reports of real modules render,
objects compared by what they hold, and the panel's rough edges."""

from __future__ import annotations

import dataclasses
import textwrap

import torch

import nbcompile
from nbcompile.check import compare

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
    assert status.split(" · ")[0] in panel.status.value  # the same counts as before


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
    testing_only = set(nbcompile.torch_compat.list_backends()) - set(panel.backend.options)
    assert "inductor" in panel.backend.options and testing_only
