"""The check judges against a float64 reference, as PyTorch's accuracy harness does (issue 22, point 1):
float noise is not a mismatch, a real miscompile still is, and trials judge by the session's rule."""

from __future__ import annotations

import pytest
import torch

import nbcompile
from nbcompile.engine import check as check_ops
from nbcompile.engine import trial

from nbhelpers import ADAMW_CELL, run_compile_cell


def test_float_noise_within_eager_own_error_is_not_a_mismatch():
    torch.manual_seed(0)
    ref = torch.randn(200, dtype=torch.float64)
    eager = (ref + 1e-4 * torch.randn(200, dtype=torch.float64)).float()
    compiled = (ref + 1e-4 * torch.randn(200, dtype=torch.float64)).float()
    assert check_ops.compare(compiled, eager).problems  # beyond float32's tolerances...
    judged = check_ops.compare(compiled, eager, reference=ref)
    assert not judged.problems, judged.problems  # ...but no worse than eager's own error against float64
    (path, compiled_error, eager_error, allowed), = judged.errors
    assert path == "result" and 0 < compiled_error <= allowed and eager_error > 0


def test_a_real_difference_still_fails_against_the_reference():
    torch.manual_seed(0)
    ref = torch.randn(200, dtype=torch.float64)
    eager = ref.float()
    judged = check_ops.compare(eager + 1e-2, eager, reference=ref)
    assert judged.problems and "compiled error" in judged.problems[0]
    big = torch.randn(1 << 16, dtype=torch.float64)
    flipped = big.float().clone()
    flipped[: len(flipped) // 2] *= -1  # half the values' signs: the cosine similarity drops to about 0
    assert check_ops.compare(flipped, big.float(), reference=big).problems
    # Python floats (loss.item()) are judged the same way
    assert not check_ops.compare(1.0 + 3e-5, 1.0 - 3e-5, reference=1.0).problems
    assert check_ops.compare(1.5, 1.0, reference=1.0).problems


def test_the_session_judges_with_the_fp64_rule_and_reports_the_figures(ip):
    run_compile_cell(ip, '--backend aot_eager --no-panel --run "step(X)"', """\
import torch
lin = torch.nn.Linear(8, 4)
X = torch.randn(16, 8)
def step(x):
    return lin(x).relu().sum(dim=1)
""")
    check = nbcompile.last().report.check
    assert check.ok and check.compared and check.rule == "fp64", check
    assert check.compiled_error is not None and check.eager_error is not None
    assert "compiled error" in check.message and "eager error" in check.message and "ratio" in check.message
    # a trial judges with the same rule (the Fix tab and the report never disagree)
    s = nbcompile.last()
    outcome = trial.run(s.workload.spec(s.workload.run_code), s.toggles)
    assert outcome.check is not None and outcome.check.ok and outcome.check.rule == "fp64", outcome.check


def test_code_that_insists_on_its_dtype_falls_back_to_tolerances_and_says_why(ip):
    run_compile_cell(ip, '--backend aot_eager --no-panel --run "f(X)"', """\
import torch
X = torch.randn(6)
def f(x):
    assert x.dtype == torch.float32, "float32 only"
    return x.sin() * 2
""")
    check = nbcompile.last().report.check
    assert check.ok and check.compared and check.rule == "tolerance", check
    assert "float64 run raised AssertionError" in check.message and check.compiled_error is None


def test_allow_in_graph_helper_reading_a_global_tensor_the_user_changes_fails(ip):
    run_compile_cell(ip, '--backend aot_eager --no-panel --allow helper --run "f(X)"', """\
import torch
W = torch.ones(4)
X = torch.arange(4.0)
def helper(x):
    return x * W.numel()  # read from the global tensor when the helper is traced, once
def f(x):
    return helper(x) + 1
""")
    s = nbcompile.last()
    assert s.report.check.ok, s.report.check
    ip.run_cell("W = torch.ones(7)")  # the traced-once helper baked the old W's size in
    s.run()
    check = s.report.check
    assert not check.ok and check.rule == "fp64", check
    assert check.compiled_error is not None and check.eager_error is not None
    assert check.compiled_error > 100 * max(check.eager_error, 1e-12)


def test_a_training_step_whose_loss_really_differs_fails(ip):
    run_compile_cell(ip, '--backend aot_eager --no-panel --allow scale --run "train_step()"', """\
import torch
torch.manual_seed(0)
SCALE = torch.ones(1)
def scale(h):
    return h * SCALE.numel()  # traced once under allow_in_graph: the size is baked in
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
    def forward(self, x):
        return scale(self.lin(x))
net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
X, Y = torch.randn(16, 4), torch.randn(16, 1)
def train_step():
    opt.zero_grad()
    loss = (net(X) - Y).pow(2).mean()
    loss.backward()
    opt.step()
    return loss.item()
""")
    s = nbcompile.last()
    assert s.report.check.ok, s.report.check
    ip.run_cell("SCALE = torch.ones(3)")
    s.run()
    check = s.report.check
    assert not check.ok and check.compared and check.rule == "fp64", check
    assert "result" in check.message and check.compiled_error > 100 * max(check.eager_error, 1e-12)


@pytest.mark.slow
def test_adamw_transformer_under_inductor_is_not_a_false_mismatch(ip):
    run_compile_cell(ip, '--backend inductor --no-panel --run "train_step()"', ADAMW_CELL)
    check = nbcompile.last().report.check
    assert check.ok and check.compared and check.rule == "fp64", check.message
    assert check.compiled_error is not None and check.eager_error is not None
    assert check.compiled_error <= 3 * check.eager_error + check_ops.FP64_TOL / 10
