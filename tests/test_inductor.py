"""Inductor: generated kernels captured per graph (C++ on CPU, Triton on a GPU)."""

from __future__ import annotations

import pytest
import torch

import nbcompile

from nbhelpers import run_compile_cell

pytestmark = pytest.mark.slow


def fused(x):
    y = x.sin() * 2
    print("split")
    return y.cos() + 1


def test_inductor_kernels_are_captured_on_cpu():
    report = nbcompile.inspect(fused, torch.ones(16), backend="inductor")
    assert report.graph_count == 2 and report.break_count == 1
    assert report.kernels, "Inductor's output code gives kernels"
    assert {k.language for k in report.kernels} == {"cpp"}
    names = " ".join(k.name for k in report.kernels)
    assert "sin" in names and "cos" in names
    assert all("kernel" in k.code for k in report.kernels)
    assert torch.allclose(report.result, (torch.ones(16).sin() * 2).cos() + 1)


def test_mode_reaches_inductor(ip):
    body = "import torch\ndef m(x):\n    return (x * 3).tanh()\n"
    run_compile_cell(ip, '--mode max-autotune-no-cudagraphs --no-panel --run "m(torch.ones(8))"', body)
    report = nbcompile.last().report
    assert report.mode == "max-autotune-no-cudagraphs"
    assert report.graph_count == 1 and report.kernels
    assert torch.allclose(ip.user_ns["m"](torch.ones(8)), torch.full((8,), 3.0).tanh())


def test_dropout_under_inductor_is_not_judged_and_is_no_error(ip):
    body = ("import torch\ndef m(x):\n    return torch.nn.functional.dropout(x, 0.5, training=True) * 2\n"
            "x = torch.ones(64)\n")
    run_compile_cell(ip, '--no-panel --run "m(x)"', body)  # the default backend: Inductor
    report = nbcompile.last().report
    assert report.check is not None and report.check.ok and not report.check.compared, report.check
    assert "random numbers" in report.check.message and "fallback_random" in report.check.message
    assert not report.errors and "CHECK FAILED" not in report.summary(), report.summary()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_triton_kernels_on_gpu():
    report = nbcompile.inspect(fused, torch.ones(1024, device="cuda"), backend="inductor")
    assert report.kernels and {k.language for k in report.kernels} == {"triton"}
    assert all("@triton.jit" in k.code for k in report.kernels)
