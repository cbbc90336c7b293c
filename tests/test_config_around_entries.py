"""A ``--dynamo-config`` value is applied around the session's calls, outside the compiled region (issue 34,
"accept gives what the search promised"): a module entry called from a compiled entry is traced in place,
with no break inside nbcompile's own code (the config patch, or ``OptimizedModule.__call__``), and the
counts equal a plain ``torch.compile`` of the same call under the same config."""

from __future__ import annotations

import torch

import nbcompile

from nbhelpers import run_compile_cell

SETUP = "import torch\ntorch.manual_seed(0)\nnet = torch.nn.Linear(3, 3)"
CELL = """\
def step(x):
    y = net(x)
    return y * y.sum().item()
"""


def test_a_module_entry_under_a_config_is_traced_in_place(ip):
    ip.run_cell(SETUP)
    line = ('--backend eager --no-panel --entry net,step --dynamo-config capture_scalar_outputs=True '
            '--run "step(torch.ones(2, 3))"')
    assert run_compile_cell(ip, line, CELL).success
    report = nbcompile.last().report
    assert not [b for b in report.breaks if "nbcompile" in (b.filename or "")], [b.filename for b in report.breaks]
    assert report.check.ok, report.check.message

    counts = {"graphs": 0}

    def backend(gm, _inputs):
        counts["graphs"] += 1
        return gm.forward

    plain_ns: dict = {}
    exec(SETUP + "\n" + CELL, plain_ns)  # noqa: S102  the same cell, fresh code objects, no nbcompile
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        torch.compile(plain_ns["step"], backend=backend)(torch.ones(2, 3))
    assert report.graph_count == counts["graphs"] and report.break_count == 0
