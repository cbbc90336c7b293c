"""A kept configuration is recalled only under the torch config it was compiled with (issue 34): after the
user sets ``torch._dynamo.config.capture_scalar_outputs = True`` (Dynamo does not guard it), toggling back
to a configuration seen before compiles anew and shows what a fresh run shows (0 breaks at the `.item()`),
not the kept report's stale break."""

from __future__ import annotations

import torch

import nbcompile

from nbhelpers import run_compile_cell

CELL = """\
import torch
def helper(x):
    return x * 2
def f(x):
    n = x.sum().item()
    return helper(x) * n
"""
LINE = '--backend eager --no-panel --run "f(torch.ones(3))"'


def test_a_config_the_user_sets_is_part_of_a_kept_configurations_key(ip):
    config = torch._dynamo.config
    before = config.capture_scalar_outputs
    try:
        assert run_compile_cell(ip, LINE, CELL).success
        session = nbcompile.last()
        ip.run_line_magic("nbcompile", "set helper disable")
        ip.run_line_magic("nbcompile", "set helper compile")
        old_key = session.workload.config_key()
        assert session.report.break_count >= 1  # the .item() break, capture_scalar_outputs off
        config.capture_scalar_outputs = True
        assert session.workload.config_key() != old_key
        ip.run_line_magic("nbcompile", "set helper disable")
        ip.run_line_magic("nbcompile", "set helper compile")
        recalled = session.report.break_count
        assert run_compile_cell(ip, LINE, CELL).success  # a fresh run under the same config
        assert recalled == nbcompile.last().report.break_count
    finally:
        config.capture_scalar_outputs = before
