"""Graph and break counts agree with an independent oracle run in a fresh process."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import torch

import nbcompile

from oracle_cases import CASES

HERE = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def oracle() -> dict[str, list[int]]:
    out = subprocess.run(
        [sys.executable, str(HERE / "oracle.py"), str(HERE)],
        check=True, capture_output=True, text=True, timeout=300,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(CASES))
def test_counts_match_the_oracle(oracle, name):
    report = nbcompile.inspect(CASES[name], torch.ones(4), backend="eager")
    assert [report.graph_count, report.break_count] == oracle[name]


def test_oracle_is_not_trivial(oracle):
    assert oracle["straight"] == [1, 0]
    assert oracle["forced"][1] == 2
    assert len({tuple(v) for v in oracle.values()}) >= 3
