"""The demo notebooks run headless (nbclient, a real kernel) and assert what they show.

Each notebook's own assert cells fail the run if a count changes; here the summary read back
from the executed outputs is checked too, and the kernel's peak memory stays within Binder's 2 GB.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from nbcompile import runner

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
BINDER_MEMORY_MIB = 2048


def _run(name: str) -> tuple[dict, dict]:
    nb, facts = runner.execute(NOTEBOOKS / name, timeout=600)
    assert facts["peak_rss_mib"] is not None and facts["peak_rss_mib"] < BINDER_MEMORY_MIB
    return runner.summary(nb), facts


@pytest.mark.kernel
@pytest.mark.slow
def test_quickstart():
    summary, _ = _run("01_quickstart.ipynb")
    (cell,) = summary["compile_cells"]
    # the displayed report is the latest one: after `%nbcompile set log_stats disable`
    assert (cell["graphs"], cell["breaks"], cell["check"]) == (2, 1, True)
    assert {s["config"] for s in summary["speedups"]} == {"session", "all toggles compile"}


@pytest.mark.kernel
def test_fine_grained_apis():
    summary, _ = _run("02_fine_grained_apis.ipynb")
    cells = summary["compile_cells"]
    assert [(c["graphs"], c["breaks"]) for c in cells[:3]] == [(1, 1), (1, 0), (1, 0)]  # after each toggle
    assert [c["recompiles"] for c in cells if "scale" in c["title"]] == [0, 1]
    assert any(c["graphs"] == 0 for c in cells)  # the fullgraph error


@pytest.mark.kernel
def test_torch_func():
    summary, _ = _run("03_torch_func.ipynb")
    assert [c["check"] for c in summary["compile_cells"]] == [True, False, True]


@pytest.mark.kernel
@pytest.mark.slow
def test_gpu_speedups_fall_back_to_cpu():
    summary, _ = _run("04_gpu_speedups.ipynb")
    assert {s["config"] for s in summary["speedups"]} == {"default", "max-autotune"}


@pytest.mark.kernel
def test_the_run_command_writes_html_with_the_widget_state(tmp_path):
    out = tmp_path / "fine.html"
    done = subprocess.run([sys.executable, "-m", "nbcompile", "run", str(NOTEBOOKS / "03_torch_func.ipynb"),
                           "--html", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "CHECK FAILED" in done.stdout and "kernel peak RSS" in done.stdout
    html = out.read_text()
    assert "application/vnd.jupyter.widget-state+json" in html and "nbcompile-report" in html
    bad = subprocess.run([sys.executable, "-m", "nbcompile", "run", str(tmp_path / "missing.ipynb")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "no such notebook" in bad.stderr


def test_the_notebooks_are_what_build_py_writes(tmp_path):
    """The committed notebooks are generated: edit notebooks/build.py, not the .ipynb files."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("nb_build", NOTEBOOKS / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    build.HERE = tmp_path
    for name, cells in [("01_quickstart.ipynb", build.QUICKSTART), ("02_fine_grained_apis.ipynb", build.FINE_GRAINED),
                        ("03_torch_func.ipynb", build.TORCH_FUNC), ("04_gpu_speedups.ipynb", build.GPU)]:
        build.write(name, cells)
        fresh = (tmp_path / name).read_text()
        assert fresh.replace("\r", "") == (NOTEBOOKS / name).read_text().replace("\r", ""), name
