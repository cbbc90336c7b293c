"""The fix search's workloads are data: ``benchmarks/workloads/`` holds one cell a file (``<name>.ipy``)
and ``index.json`` (order, needs, entry, run, grad, note); ``benchmarks/fix_workloads.py`` reads them for
the benchmark. The folder and its index agree, every cell is plain Python that defines what it compiles
and runs, and (where its ``needs`` is installed) every workload graph-breaks in a real ``%%compile`` cell
made the way ``benchmarks/fix_search.py`` makes it."""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib.util
import io
import json
import pathlib
import sys

import pytest
import torch

import nbcompile

from nbhelpers import run_compile_cell
from real_models_oracle import import_torchvision

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from fix_workloads import WORKLOADS, WORKLOADS_DIR, entries, load_workloads  # noqa: E402

FIELDS = {"name", "needs", "entry", "run", "grad", "note"}


def _defined(cell: str) -> set[str]:
    """The names a cell binds at its top level."""
    names: set[str] = set()
    for node in ast.parse(cell).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def test_the_index_and_the_cell_files_agree():
    index = json.loads((WORKLOADS_DIR / "index.json").read_text(encoding="utf-8"))
    assert all(set(item) == FIELDS for item in index), "every workload names all its fields"
    names = [item["name"] for item in index]
    assert len(names) == len(set(names)) == 22
    assert sorted(path.stem for path in WORKLOADS_DIR.glob("*.ipy")) == sorted(names)  # no cell left out
    assert [w.name for w in WORKLOADS] == names and load_workloads() == WORKLOADS
    for w in WORKLOADS:
        assert w.cell == (WORKLOADS_DIR / f"{w.name}.ipy").read_text(encoding="utf-8") and w.cell.endswith("\n")


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.name)
def test_each_cell_defines_what_it_compiles_and_runs(workload):
    defined = _defined(workload.cell)
    imported = {(n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]
                for n in ast.parse(workload.cell).body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    assert workload.needs in imported, f"the cell imports {workload.needs}"
    assert entries(workload) and set(entries(workload)) <= defined
    called = {n.id for n in ast.walk(ast.parse(workload.run, mode="eval")) if isinstance(n, ast.Name)}
    assert called <= defined | set(dir(builtins)), called - defined
    assert isinstance(workload.grad, bool) and workload.note


@pytest.mark.models
@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.name)
def test_each_workload_graph_breaks_in_a_compile_cell(ip, workload):
    if importlib.util.find_spec(workload.needs) is None:
        pytest.skip(f"{workload.needs} is not installed")
    import_torchvision()  # transformers imports torchvision when it is installed
    line = f'--backend eager --no-panel --entry {workload.entry} --run "{workload.run}"'
    with torch.set_grad_enabled(workload.grad), contextlib.redirect_stdout(io.StringIO()):
        result = run_compile_cell(ip, line, workload.cell)
    assert result.success, result.error_in_exec
    report = nbcompile.last().report
    assert report.graph_count >= 1 and report.break_count >= 1
