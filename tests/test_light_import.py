"""Issue 37: ``import nbcompile`` loads nothing heavy, and a script that reads trace logs never loads torch."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
TRACES = ROOT / "tests" / "data" / "traces"

#: What a script that only reads logs does: load them, show them every way a notebook or a terminal shows them.
READ_LOGS = f"""
import json, sys
import nbcompile
shown = []
for folder in ("torchrun2", "single"):
    traces = nbcompile.load({str(TRACES)!r} + "/" + folder)
    shown += [repr(traces), traces.summary(), traces._repr_html_(), json.dumps(traces.figure_dict())]
    shown += list(traces.divergences)
    for report in traces.reports if hasattr(traces, "reports") else []:
        shown += [report.summary() if hasattr(report, "summary") else repr(report), report._repr_html_()]
print(sum(len(s) for s in shown))
print(",".join(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "triton", "sympy", "numpy"))))
"""


def _imported(code: str) -> tuple[list[str], str]:
    """The modules ``code`` imports in a fresh interpreter (``python -X importtime``), and its stdout."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    modules = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
               if line.startswith("import time:") and "|" in line]
    return modules, done.stdout


def test_reading_trace_logs_never_imports_torch() -> None:
    modules, out = _imported(READ_LOGS)
    shown, loaded = (out.splitlines() + [""])[:2]
    assert int(shown) > 1000  # the logs were read and shown
    assert "nbcompile.capture.logs" in modules
    heavy = [m for m in modules if m.split(".")[0] in ("torch", "triton", "sympy", "numpy")]
    assert heavy == [] and loaded == "", f"reading a trace log imported {(heavy or loaded.split(','))[:8]}"


def test_import_nbcompile_loads_no_torch_and_names_load_when_used() -> None:
    modules, out = _imported("import sys, nbcompile; print('torch' in sys.modules); "
                             "print(nbcompile.Report.__name__, nbcompile.inspect.__name__, 'torch' in sys.modules)")
    assert out.split() == ["False", "Report", "inspect", "True"]
    assert not any(m.split(".")[0] == "torch" for m in modules[:modules.index("nbcompile") + 1])


def test_every_public_name_resolves_and_a_wrong_one_says_so() -> None:
    import nbcompile

    for name in nbcompile.__all__:
        assert getattr(nbcompile, name) is not None, name
    assert set(nbcompile.__all__) <= set(dir(nbcompile))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        nbcompile.nope  # noqa: B018
