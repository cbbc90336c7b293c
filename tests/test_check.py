"""The eager check: real compiled runs compared with eager runs of the original functions."""

from __future__ import annotations

import textwrap

import pytest
import torch

import nbcompile
from nbcompile.engine import check as check_ops
from nbcompile.engine.replay import Replay
from nbcompile.engine.state import Slot

from nbhelpers import run_compile_cell

# seed 003: the allow_in_graph workaround for torch.func transforms
OUTSIDE = textwrap.dedent(
    """\
    import torch
    batched_sum = torch._dynamo.allow_in_graph(torch.vmap(torch.sum))
    def f(x):
        return batched_sum(x)
    """
)
INSIDE = textwrap.dedent(
    """\
    import torch
    def f(x):
        return torch._dynamo.allow_in_graph(torch.vmap(torch.sum))(x)
    """
)


def test_seed_003_wrong_shape_under_eager_is_caught(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.randn(2, 3))"', OUTSIDE)
    report = nbcompile.last().report
    assert tuple(report.result.shape) == ()  # what the compiled function silently returned
    assert report.check is not None and report.check.ok is False
    assert "shape () compiled, (2,) eager" in report.check.message
    assert any(e.fail_type == "check" for e in report.errors)
    assert "CHECK FAILED" in report.summary() and "Check failed" in report._repr_mimebundle_()["text/html"]


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_seed_003_outside_workaround_is_right_on_aot_backends(ip, backend):
    run_compile_cell(ip, f'--backend {backend} --no-panel --run "f(torch.randn(2, 3))"', OUTSIDE)
    report = nbcompile.last().report
    assert tuple(report.result.shape) == (2,)
    assert report.check.ok and report.check.compared
    assert report.check.max_abs_diff is not None and report.check.max_abs_diff < 1e-5


@pytest.mark.parametrize("backend", ["eager", "aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_seed_003_inside_workaround_on_each_backend(ip, backend):
    """What today's torch does with the workaround written inside the compiled function."""
    line = f'--backend {backend} --no-panel --run "f(torch.randn(2, 3))"'
    result = run_compile_cell(ip, line, INSIDE)
    report = nbcompile.last().report
    if result.error_in_exec is not None:  # torch 2.13 with backend eager: AttributeError
        assert backend == "eager"
        assert report.errors and report.errors[-1].function == "--run"
        return
    assert tuple(report.result.shape) == (2,)
    assert report.check.ok
    assert report.break_count >= 1


def test_random_inputs_are_replayed_and_the_stream_advances_once(ip):
    run_compile_cell(ip, "--backend eager --no-panel", "import torch\ndef g(x):\n    return x.sin() * 2\n")
    nbcompile.last().options.run = "g(torch.randn(5))"
    torch.manual_seed(0)
    out = nbcompile.last().run()
    after = torch.randn(3)
    torch.manual_seed(0)
    expected_input = torch.randn(5)
    expected_next = torch.randn(3)
    assert torch.allclose(out, expected_input.sin() * 2)
    assert torch.equal(after, expected_next)
    assert nbcompile.last().report.check.ok


def test_in_place_mutation_happens_once_and_is_compared(ip):
    ip.run_cell("import torch\nstate = torch.ones(3)")
    body = "def bump(x):\n    x.add_(1)\n    return x * 2\n"
    run_compile_cell(ip, '--backend aot_eager --no-panel --run "bump(state)"', body)
    report = nbcompile.last().report
    assert torch.equal(ip.user_ns["state"], torch.full((3,), 2.0))  # one run's worth, not two
    assert report.check.ok and report.check.compared


def test_module_buffers_updated_by_the_run_are_compared_and_kept_once(ip):
    ip.run_cell("import torch\ntorch.manual_seed(0)\nx = torch.randn(8, 4)")
    body = textwrap.dedent(
        """\
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bn = torch.nn.BatchNorm1d(4)
            def forward(self, x):
                return self.bn(x).relu()
        net = Net()
        """
    )
    run_compile_cell(ip, '--backend aot_eager --no-panel --run "net(x)"', body)
    report = nbcompile.last().report
    assert report.check.ok, report.check.message
    net = ip.user_ns["net"]
    assert int(net.bn.num_batches_tracked) == 1
    expected = torch.nn.BatchNorm1d(4)
    expected(ip.user_ns["x"])
    assert torch.allclose(net.bn.running_mean, expected.running_mean)


def test_enum_members_the_run_reads_are_not_state(ip):
    """An Enum's members are constants (EnumType refuses to reassign them): the check copies around
    them instead of failing its eager run (transformers' Qwen2 reads such a class)."""
    body = textwrap.dedent(
        """\
        import enum
        import torch
        class Mode(enum.Enum):
            NONE = 0
            DOUBLE = 1
        MODE = Mode.DOUBLE
        def scaled(x):
            return x * 2 if MODE is Mode.DOUBLE else x if MODE is Mode.NONE else -x
        """
    )
    run_compile_cell(ip, '--backend aot_eager --no-panel --run "scaled(torch.ones(3))"', body)
    report = nbcompile.last().report
    assert report.check.compared and report.check.ok, report.check.message
    assert ip.user_ns["Mode"].NONE.value == 0


def test_the_eager_run_prints_nothing(ip, capsys):
    body = "import torch\ndef loud(x):\n    print('ran once')\n    return x + 1\n"
    run_compile_cell(ip, '--backend eager --no-panel --run "loud(torch.ones(2))"', body)
    assert capsys.readouterr().out.splitlines().count("ran once") == 1
    assert nbcompile.last().report.check.ok


def test_no_check_skips_it(ip):
    run_compile_cell(ip, '--backend eager --no-check --no-panel --run "f(torch.randn(2, 3))"', OUTSIDE)
    assert nbcompile.last().report.check is None


def test_check_survives_toggles_and_uses_the_original_functions(ip):
    body = "import torch\ndef helper(x):\n    return x.cos()\ndef caller(x):\n    return helper(x) + 1\n"
    run_compile_cell(ip, '--backend eager --no-panel --run "caller(torch.ones(3))"', body)
    session = nbcompile.last()
    for mode in ("disable", "allow_in_graph", "compile"):
        session.set("helper", mode)
        assert session.report.check.ok, (mode, session.report.check.message)


def test_inspect_check_catches_the_seed_case_and_a_lost_mutation():
    batched_sum = torch._dynamo.allow_in_graph(torch.vmap(torch.sum))

    def f(x):
        return batched_sum(x)

    report = nbcompile.inspect(f, torch.randn(2, 3), backend="eager")
    assert not report.check.ok and "shape ()" in report.check.message
    assert nbcompile.inspect(f, torch.randn(2, 3), backend="aot_eager").check.ok
    assert nbcompile.inspect(f, torch.randn(2, 3), backend="eager", check=False).check is None


def test_against_eager_reports_a_mutation_only_one_side_made():
    namespace = {"x": torch.ones(3)}
    x = namespace["x"]
    state = Replay.capture({"x": (Slot(namespace, "x", "x"), x)})
    rng = check_ops.RngState()
    result = x * 2  # the "compiled" run: forgot the in-place update
    check = check_ops.against_eager(result, lambda _: namespace["x"].add_(1).mul(0).add(2), state, rng)
    assert not check.ok
    assert "x (changed in place)" in check.message
    assert torch.equal(x, torch.ones(3))  # left as the compiled run left it


def test_against_eager_reports_an_eager_failure():
    state = Replay.capture({})
    check = check_ops.against_eager(1, lambda _: 1 / 0, state, check_ops.RngState())
    assert not check.ok and "ZeroDivisionError" in check.message


def test_compare_walks_nested_values_with_dtype_tolerances():
    a = {"y": (torch.ones(3), [torch.tensor([1, 2])]), "n": 1.0}
    same = check_ops.compare(a, {"y": (torch.ones(3) + 1e-7, [torch.tensor([1, 2])]), "n": 1.0 + 1e-9})
    assert not same.problems and same.max_abs_diff == pytest.approx(1.1920929e-07, rel=0.2)
    ints = check_ops.compare(a, {"y": (torch.ones(3), [torch.tensor([1, 3])]), "n": 1.0})
    assert ints.problems and "result['y'][1][0]" in ints.problems[0]
    half = torch.ones(4, dtype=torch.float16)
    assert not check_ops.compare(half, half + 5e-4).problems  # within float16's rtol 1e-3
    assert check_ops.compare(half.float(), half.float() + 5e-4).problems  # not within float32's
    nan = torch.tensor([float("nan"), 1.0])
    assert not check_ops.compare(nan, nan.clone()).problems
    assert check_ops.compare((1, 2), [1, 2]).problems
    assert "keys" in check_ops.compare({"a": 1}, {"b": 1}).problems[0]


def test_the_same_infinity_in_python_numbers_agrees_and_opposite_ones_do_not():
    """A config holding ``time_step_limit=(0.0, inf)`` (NemotronH's) made every check FAIL: "compiled gives inf,
    eager gives inf (abs diff nan)"."""
    inf = float("inf")
    assert not check_ops.compare((0.0, inf), (0.0, inf)).problems
    assert not check_ops.compare(-inf, -inf).problems
    assert check_ops.compare(inf, -inf).problems and check_ops.compare(inf, 1e308).problems
    assert check_ops.compare(torch.tensor([inf, 1.0]), torch.tensor([inf, 1.0])).problems == []


def test_random_ops_under_inductor_are_not_judged_never_a_false_failure():
    comparison = check_ops.Comparison(problems=["result: values differ"], diffs=[1.0])
    check = check_ops.verdict(comparison, ["dropout", "mul"], "inductor")
    assert check.ok and not check.compared, check  # the values differ by design: "not compared", never red
    assert check.message.startswith("not compared") and "fallback_random" in check.message and "dropout" in \
        check.message
    same = check_ops.verdict(comparison, ["dropout", "mul"], "aot_eager")  # eager's generator: a real failure
    assert not same.ok and same.compared


def test_a_logger_the_run_uses_is_not_state_to_copy_or_compare(ip):
    body = ('import logging\nimport torch\nlog = logging.getLogger("nbcheck_train")\n'
            'w = torch.ones(4, requires_grad=True)\ndef step():\n    loss = (w * 2).sum()\n'
            '    log.info("loss %.4f", loss)\n    return loss.detach()\n')
    run_compile_cell(ip, '--backend eager --no-panel --run "step()"', body)
    check = nbcompile.last().report.check
    assert check.ok and check.compared, check
    assert "loggerDict" not in check.message and "(1 values compared)" in check.message, check.message


def test_complex_infinities_agree_when_the_same():
    inf = float("inf")
    assert not check_ops.compare(complex(inf, 0), complex(inf, 0)).problems
    assert check_ops.compare(complex(inf, 0), complex(-inf, 0)).problems
