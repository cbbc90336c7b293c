"""Workflow edges (issue 22, point 9): `%nbcompile` reaches every live session, the export runs on its own,
the runner keeps going past a failing cell, and `make lab` does not reinstall when nothing changed."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from IPython.core.error import UsageError

import nbcompile

from nbhelpers import HELPER_CELL, run_compile_cell

#: The checkout whose nbcompile runs here (its Makefile and pyproject.toml are the ones under test).
ROOT = pathlib.Path(nbcompile.__file__).resolve().parents[1]
TESTS = pathlib.Path(__file__).resolve().parent

BREAK_CELL = textwrap.dedent(
    """\
    import torch
    def f(x):
        y = x.sin()
        print("break here")
        return y.cos()
    """
)


def _number(session) -> int:
    return int(session.label.strip("[]"))


@pytest.fixture()
def two_cells(ip):
    """Two live sessions: `helper`/`caller` in the older cell, `f` in the newer one."""
    run_compile_cell(ip, '--backend eager --no-panel --run "caller(torch.ones(3))"', HELPER_CELL)
    run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(3))"', BREAK_CELL)
    older, newer = nbcompile.sessions()
    assert nbcompile.last() is newer
    return older, newer


# --- a. subcommands reach the session that owns the name ------------------------------------------------

def test_set_reaches_the_older_session_that_owns_the_name(ip, two_cells, capsys):
    older, newer = two_cells
    ip.run_line_magic("nbcompile", "set helper disable")
    assert older.toggles["helper"] == "disable"
    assert "helper" not in newer.toggles
    assert "helper -> disable" in capsys.readouterr().out
    ip.run_line_magic("nbcompile", "set f disable")  # and the newer one still gets its own names
    assert newer.toggles["f"] == "disable"


def test_report_status_export_and_panel_reach_the_owner(ip, two_cells, capsys):
    older, newer = two_cells
    assert ip.run_line_magic("nbcompile", "report helper").title.endswith("[helper]")
    assert ip.run_line_magic("nbcompile", "report f").break_count == newer.report.break_count == 1
    rows = repr(ip.run_line_magic("nbcompile", "status helper")).splitlines()
    assert [r.split()[0] for r in rows[1:3]] == ["helper", "caller"]
    assert f"cell {_number(older)}; other %%compile cells: {_number(newer)}" in rows[-1]
    older.set("helper", "disable")
    capsys.readouterr()
    ip.run_line_magic("nbcompile", "export caller")
    assert "helper = torch.compiler.disable(helper)" in capsys.readouterr().out
    ip.run_line_magic("nbcompile", "export --style decorators helper")
    assert "@torch.compiler.disable\ndef helper(x):" in capsys.readouterr().out


def test_bench_times_the_session_its_expression_calls(ip, two_cells):
    older, newer = two_cells
    ip.run_line_magic("nbcompile", "bench caller(torch.ones(3))")
    assert older.last_bench is not None and newer.last_bench is None


def test_cell_flag_chooses_a_session_by_its_number(ip, two_cells):
    older, newer = two_cells
    status = repr(ip.run_line_magic("nbcompile", f"status --cell {_number(older)}"))
    assert status.splitlines()[1].split()[0] == "helper"
    assert ip.run_line_magic("nbcompile", f"report --cell={_number(older)}") is older.report
    ip.run_line_magic("nbcompile", f"set torch.sin disallow_in_graph --cell {_number(older)}")
    assert older.toggles.get("torch.sin") == "disallow_in_graph" and "torch.sin" not in newer.toggles
    ip.run_line_magic("nbcompile", f"reset --cell {_number(older)}")
    assert older.closed and not newer.closed
    assert nbcompile.sessions() == [newer]


def test_unknown_names_and_cells_are_one_line_errors_that_list_what_is_valid(ip, two_cells):
    older, newer = two_cells
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("nbcompile", "set nope disable")
    text = str(info.value)
    assert "\n" not in text
    assert f"valid: helper, caller (cell {_number(older)}); f (cell {_number(newer)})" in text
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("nbcompile", "status --cell 999")
    text = str(info.value)
    assert "\n" not in text and "no live %%compile session of cell 999" in text
    assert f"{_number(older)} (helper, caller)" in text and f"{_number(newer)} (f)" in text
    with pytest.raises(UsageError, match="--cell takes a cell number"):
        ip.run_line_magic("nbcompile", "status --cell x")


def test_a_name_taken_over_by_a_newer_cell_goes_to_the_newer_session(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(3))"', BREAK_CELL)
    run_compile_cell(ip, '--backend eager --no-panel --run "caller(torch.ones(3))"', HELPER_CELL)
    another = BREAK_CELL + "def g(x):\n    return x\n"  # f again, in another cell
    run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(2))"', another)
    stale, middle, owner = nbcompile.sessions()
    assert stale.stale is not None and owner.stale is None
    ip.run_line_magic("nbcompile", "set f disable")
    assert owner.toggles["f"] == "disable"


# --- b. the export runs on its own ------------------------------------------------------------------------

IMPORTS_CELL = "import torch\nfrom torch import nn\nimport torch.nn.functional as F\n"

#: A transformer-like cell: the imports came from an earlier cell, the model is made of blocks.
BLOCKS_CELL = textwrap.dedent(
    """\
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
        def forward(self, x):
            return F.relu(self.lin(x))
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Block() for _ in range(2)])
        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            log(x)
            return x.softmax(-1)
    def log(x):
        print("logits", x.shape)
    torch.manual_seed(0)
    model = Net()
    """
)
BLOCKS_RUN = "model(torch.ones(2, 4))"


def _fresh(code: str, run: str) -> dict:
    """Graphs, breaks and the result of ``code`` then ``run`` in a fresh interpreter."""
    out = subprocess.run([sys.executable, str(TESTS / "export_oracle.py")],
                         input=json.dumps({"code": code, "run": run}), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture()
def blocks(ip):
    ip.run_cell(IMPORTS_CELL, store_history=True)
    run_compile_cell(ip, f'--backend eager --no-panel --run "{BLOCKS_RUN}"', BLOCKS_CELL)
    session = nbcompile.last()
    assert "model" in session.entries and "Block.forward" in session.entries  # Block has no instance of its own
    session.set("log", "disable")
    return session


def test_decorators_export_carries_the_imports_of_earlier_cells_and_runs_alone(blocks):
    code = blocks.export(style="decorators")
    assert code.startswith("import torch\nfrom torch import nn\nimport torch.nn.functional as F\n")
    assert "@torch.compiler.disable\ndef log(x):" in code
    fresh = _fresh(code, BLOCKS_RUN)
    report = blocks.report
    assert (fresh["graphs"], fresh["breaks"]) == (report.graph_count, report.break_count)
    torch.testing.assert_close(torch.tensor(fresh["result"]), report.result)


def test_export_does_not_compile_a_method_its_compiled_module_already_reaches(blocks):
    calls = blocks.export()
    assert "model = torch.compile(model, backend='eager')" in calls
    assert "Block.forward" not in calls
    assert "Block.forward" not in blocks.export(style="decorators")
    fresh = _fresh(IMPORTS_CELL + BLOCKS_CELL + calls, BLOCKS_RUN)
    assert (fresh["graphs"], fresh["breaks"]) == (blocks.report.graph_count, blocks.report.break_count)


def test_a_method_of_a_class_no_compiled_instance_holds_is_still_compiled():
    source = "import torch\nclass A(torch.nn.Module):\n    def forward(self, x):\n        return x\n" \
             "class B(torch.nn.Module):\n    def forward(self, x):\n        return x\nb = B()\n"
    text = nbcompile.export({}, source=source, entries=["b", "A.forward", "B.forward"], options={"backend": "eager"})
    assert "A.forward = torch.compile(A.forward, backend='eager')" in text
    assert "B.forward" not in text and "b = torch.compile(b, backend='eager')" in text


def test_names_no_import_gives_are_named_above_the_code():
    text = nbcompile.export({"f": "disable"}, source="def f(x):\n    return x * SCALE + math.pi\n",
                            style="decorators")
    assert text.splitlines()[:3] == ["import torch", "import math", "# defined elsewhere in the notebook: SCALE"]


# --- c. the runner with --allow-errors ---------------------------------------------------------------------

def _notebook(path: pathlib.Path) -> pathlib.Path:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 41"),
                nbformat.v4.new_code_cell("raise ValueError('boom in cell two')"),
                nbformat.v4.new_code_cell("print('after the failure', x + 1)")]
    nbformat.write(nb, str(path))
    return path


def _run(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    """``python -m nbcompile run ...`` of the nbcompile this test imported (not the one the folder holds)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "nbcompile", "run", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)


@pytest.mark.kernel
def test_run_allow_errors_writes_the_page_with_the_failing_cell_shown(tmp_path):
    nb = _notebook(tmp_path / "fails.ipynb")
    page = tmp_path / "fails.html"
    out = _run(str(nb), "--html", str(page), "--allow-errors", "--json", str(tmp_path / "fails.json"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    html = re.sub(r"<[^>]+>", "", page.read_text())  # the traceback's text, without its colour spans
    assert "ValueError" in html and "boom in cell two" in html and "Traceback" in html
    assert "after the failure 42" in html  # the cells after it ran too
    assert "cell 2 (In [2]) FAILED: ValueError: boom in cell two" in out.stdout
    facts = json.loads((tmp_path / "fails.json").read_text())
    assert facts["failed_cells"] == [{"cell": 2, "execution_count": 2, "error": "ValueError: boom in cell two"}]


@pytest.mark.kernel
def test_run_without_allow_errors_stops_at_the_failing_cell_and_writes_no_page(tmp_path):
    nb = _notebook(tmp_path / "fails.ipynb")
    page = tmp_path / "fails.html"
    out = _run(str(nb), "--html", str(page), cwd=tmp_path)
    assert out.returncode == 1
    assert "boom in cell two" in out.stderr and "--allow-errors" in out.stderr
    assert not page.exists()


# --- e. `make lab` without reinstalling, numpy with `[run]` --------------------------------------------------

def _make_lab(venv: pathlib.Path, *extra: str) -> str:
    out = subprocess.run(["make", "-n", "lab", f"VENV={venv}", *extra], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_make_lab_installs_nothing_when_nothing_changed(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    first = _make_lab(venv)
    assert 'install -e ".[run]"' in first and "jupyterlab" in first  # a fresh venv: everything
    for stamp in (".nbcompile-installed", ".jupyterlab-installed"):
        (venv / stamp).touch()
    again = _make_lab(venv)
    assert [line for line in again.splitlines() if "-m pip" in line] == []
    assert f"{venv}/bin/jupyter lab notebooks/" in again
    changed = _make_lab(venv, "-W", "pyproject.toml")  # the dependencies changed: pip runs again
    assert 'install -e ".[run]"' in changed


def test_the_run_extra_brings_numpy():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(re.match(r"numpy\b", dep) for dep in extras["run"])
