"""The allow_in_graph lint: each rule of the seed documents, named by variable and line."""

from __future__ import annotations

import logging
import textwrap

import torch

import nbcompile
from nbcompile.analysis.lint import lint_allow_in_graph

from nbhelpers import run_compile_cell

WEIGHT = torch.randn(3)
MODEL = torch.nn.Linear(3, 3)
SEEN: list = []
LOG = logging.getLogger("nbcompile.tests")


def _rules(fn, **kw):
    return {(w.rule, w.variable) for w in lint_allow_in_graph(fn, **kw)}


def _line(fn, text):
    """The file line of the first source line of ``fn`` that contains ``text``."""
    import inspect

    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def pure(x, y, n: int = 2):
    z = x * y
    if x.shape[0] > n and y is not None and len(x) == x.size(0):
        z = z + 1
    for _ in range(n):
        z = z.sin()
    return z, x.dim()


def make_closure():
    bias = torch.ones(3)

    def closed(x):
        return x + bias

    return closed


def captures(x):
    return x * WEIGHT + MODEL.weight.sum()


def mutates(x, y):
    view = x[0]
    view.add_(1)
    y += 1
    SEEN.append(x)
    torch.add(x, 1, out=x)
    return x


def calls_module(x):
    return MODEL(x) + torch.nn.ReLU()(x)


def data_dependent(x):
    if x.sum() > 0:
        x = x + 1
    scale = x.max().item()
    while x.norm() > 1:
        x = x / 2
    return x * scale


def unproxyable(x, cfg: dict, name="sum"):
    LOG.info("tracing")
    print("side effect")
    return {"out": x}


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def helper(self, x):
        return x * 2

    def forward(self, x):
        self.calls = 1
        return self.lin(self.helper(x))


def test_a_pure_function_has_no_warnings():
    assert lint_allow_in_graph(pure) == []


def test_captured_tensors_closures_and_globals():
    assert _rules(make_closure()) == {("captured-tensor", "bias")}
    assert _rules(captures) == {("captured-tensor", "WEIGHT"), ("captured-tensor", "MODEL")}
    w = next(w for w in lint_allow_in_graph(captures) if w.variable == "WEIGHT")
    assert w.lineno == _line(captures, "WEIGHT") and "global" in w.message


def test_mutation_of_inputs_views_and_globals():
    warnings = lint_allow_in_graph(mutates)
    got = {(w.variable, w.lineno) for w in warnings if w.rule == "mutation"}
    assert got == {
        ("x", _line(mutates, "view.add_")),  # through a view of x
        ("y", _line(mutates, "y += 1")),
        ("SEEN", _line(mutates, "SEEN.append")),
        ("x", _line(mutates, "out=x")),
    }
    assert any("a view of x" in w.message for w in warnings)


def test_module_calls_suggest_functional_call():
    warnings = [w for w in lint_allow_in_graph(calls_module) if w.rule == "module-call"]
    assert {w.variable for w in warnings} == {"MODEL", "torch.nn.ReLU"}
    assert any("functional_call" in w.message for w in warnings)


def test_data_dependent_control_flow():
    warnings = [w for w in lint_allow_in_graph(data_dependent) if w.rule == "data-dependent"]
    assert [w.lineno for w in warnings] == [
        _line(data_dependent, "if x.sum()"), _line(data_dependent, ".item()"), _line(data_dependent, "while"),
    ]


def test_inputs_and_outputs_that_cannot_be_proxied_and_side_effects():
    rules = _rules(unproxyable)
    assert {("not-proxyable", "cfg"), ("not-proxyable", "name"), ("not-proxyable", "return")} <= rules
    assert {("side-effect", "print"), ("side-effect", "LOG.info")} <= rules


def test_module_methods_name_self_state_and_submodules():
    rules = _rules(Net.forward, name="Net.forward", owner=Net)
    assert rules == {("not-proxyable", "self"), ("mutation", "self.calls"), ("module-call", "self.lin")}


def test_allow_in_graph_in_a_session_reports_the_lint_in_the_report_and_status(ip):
    body = textwrap.dedent(
        """\
        import torch
        scale = torch.full((3,), 2.0)
        def helper(x):
            if x.sum() > 0:
                return x * scale
            return x
        def caller(x):
            return helper(x.sin()) + 1
        """
    )
    run_compile_cell(ip, '--backend eager --no-panel --run "caller(torch.ones(3))"', body)
    session = nbcompile.last()
    assert session.report.warnings == []
    session.set("helper", "allow_in_graph")
    found = {(w.rule, w.variable, w.cell_line) for w in session.report.warnings}
    assert found == {("data-dependent", "x", 5), ("captured-tensor", "scale", 6)}
    status = repr(ip.run_line_magic("nbcompile", "status"))
    assert "cell line 6: scale is a tensor captured" in status and "cell line 5: if on the values of x" in status
    session.set("helper", "compile")
    assert session.report.warnings == []


def test_inspect_lints_its_allow_in_graph_toggles():
    def top(x):
        return data_dependent(x) + 1

    report = nbcompile.inspect(top, torch.ones(3), backend="eager", toggles={data_dependent: "allow_in_graph"})
    assert {w.rule for w in report.warnings} == {"data-dependent"}


def test_a_nonlocal_rebinding_is_named_as_the_enclosing_functions_not_a_global():
    def make():
        scale = 2.0

        def bump(x):
            nonlocal scale
            scale = scale + 1.0
            return x * scale
        return bump

    (warning,) = [w for w in lint_allow_in_graph(make()) if w.rule == "mutation"]
    assert "rebinds the enclosing function's scale" in warning.message, warning.message
