"""Benchmarks measured right: real timers, the check before timing, figures from the measurements."""

from __future__ import annotations

import textwrap

import plotly.graph_objects as go
import pytest
import torch
from IPython.core.error import UsageError

import nbcompile
from nbcompile.core import torch_compat

from nbhelpers import run_compile_cell


def softmax_scale(x):
    return torch.softmax(x, -1) * 2


def matmuls(a):
    return (a @ a) @ a


@pytest.mark.slow
def test_bench_times_eager_and_inductor_with_cold_and_warm_compiles():
    result = nbcompile.bench(softmax_scale, torch.randn(64, 256), configs=["default"], min_run_time=0.1)
    eager, default = result.rows
    assert [r.config for r in result.rows] == ["eager", "default"] and all(r.timed for r in result.rows)
    assert result.timer == "torch.utils.benchmark" and result.device == "cpu"
    assert default.speedup == pytest.approx(eager.median_s / default.median_s)
    assert default.iqr_s >= 0 and default.median_s > 0
    assert default.compile_s > default.compile_warm_s  # Inductor from scratch vs. from its caches
    assert "matches eager" in default.check
    assert result.memory_bound and result.flops_per_call == 0
    assert result.bytes_per_call == 2 * 64 * 256 * 4  # the input read once, the output written once
    assert 0 < default.peak_fraction and result.peak_gbps > 0
    fig = result.figure()
    assert isinstance(fig, go.Figure)
    speed = fig.data[0]
    # A noisy timing is marked and not plotted (issue 12); a steady one is a bar.
    assert list(speed.y) == [1.0] + ([] if default.noisy else [default.speedup]) and speed.error_y.array is not None
    assert [t.name for t in fig.data[1:3]] == ["cold cache", "warm cache"]
    assert fig.data[3].name == "of peak"


def test_a_config_that_differs_from_eager_is_not_timed():
    batched_sum = torch._dynamo.allow_in_graph(torch.vmap(torch.sum))

    def f(x):
        return batched_sum(x)

    result = nbcompile.bench(f, torch.randn(4, 3), configs=[{"name": "eager backend", "backend": "eager"},
                                                            {"name": "aot", "backend": "aot_eager"}],
                             min_run_time=0.05)
    wrong, right = result.rows[1:]
    assert not wrong.timed and wrong.median_s is None and "differs from eager" in wrong.check
    assert right.timed and right.speedup is not None
    assert "not timed (differ from eager): eager backend" in result.figure().layout.title.text


def test_compute_bound_work_has_no_bandwidth_panel():
    result = nbcompile.bench(matmuls, torch.randn(64, 64), configs=[{"name": "aot", "backend": "aot_eager"}],
                             min_run_time=0.05)
    assert result.flops_per_call == 2 * 2 * 64 ** 3 and not result.memory_bound
    assert len(result.figure().data) == 3


def test_bad_configs_are_one_line_errors():
    with pytest.raises(nbcompile.NbcompileError, match="valid names: default, reduce-overhead"):
        nbcompile.bench(matmuls, torch.randn(2, 2), configs=["fastest"])
    with pytest.raises(nbcompile.NbcompileError, match="unknown backend"):
        nbcompile.bench(matmuls, torch.randn(2, 2), configs=[{"backend": "nope"}])


CELL = textwrap.dedent(
    """\
    import torch
    x = torch.randn(64, 64)
    def helper(x):
        print("helper")
        return torch.softmax(x, -1)
    def f(x):
        return helper(x * 2) + 1
    """
)


def test_the_bench_flag_times_the_session_against_eager_and_all_default_toggles(ip, capsys):
    before = torch_compat.registries_snapshot()
    run_compile_cell(ip, '--backend aot_eager --disable helper --no-panel --bench --run "f(x)"', CELL)
    session = nbcompile.last()
    result = session.last_bench
    assert [r.config for r in result.rows] == ["eager", "session", "all toggles compile"]
    assert all(r.timed for r in result.rows)
    assert session.toggles["helper"] == "disable" and session.report.check.ok  # as it was, report afresh
    assert session.report.break_count == 1
    assert torch_compat.registries_snapshot() == before
    out = capsys.readouterr().out
    assert "bench on cpu" in out and out.count("\nhelper\n") <= 2  # the timed calls' prints are not shown


def test_bench_magic_needs_an_expression(ip):
    run_compile_cell(ip, "--backend eager --no-panel", "import torch\ndef g(x):\n    return x + 1\n")
    with pytest.raises(UsageError, match="nothing to time") as info:
        ip.run_line_magic("nbcompile", "bench")
    assert "\n" not in str(info.value)
    ip.run_line_magic("nbcompile", "bench g(torch.ones(8))")
    assert [r.config for r in nbcompile.last().last_bench.rows] == ["eager", "session"]


def test_the_panel_speedup_tab_runs_and_plots_the_bench(ip):
    run_compile_cell(ip, '--backend aot_eager --no-panel --run "f(x)"', CELL)
    panel = nbcompile.last().panel()
    assert "no benchmark yet" in panel.bench_html.value
    panel.bench_button.click()
    assert "session" in panel.bench_html.value and "eager" in panel.bench_html.value
    (output,) = panel.bench_output.outputs
    assert output["data"]["application/vnd.plotly.v1+json"]["data"][0]["type"] == "bar"


@pytest.mark.gpu
@pytest.mark.slow
def test_bench_on_cuda_uses_events_and_triton():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.randn(4096, 4096, device="cuda")
    result = nbcompile.bench(softmax_scale, x, configs=["default"])
    assert result.timer.startswith("CUDA events") and result.rows[1].end_to_end_s > 0
    assert result.memory_bound and 0 < result.rows[1].peak_fraction < 1.5
    report = nbcompile.inspect(softmax_scale, x)
    assert report.kernels and all(k.language == "triton" for k in report.kernels)
