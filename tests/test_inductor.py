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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_triton_kernels_on_gpu():
    report = nbcompile.inspect(fused, torch.ones(1024, device="cuda"), backend="inductor")
    assert report.kernels and {k.language for k in report.kernels} == {"triton"}
    assert all("@triton.jit" in k.code for k in report.kernels)
