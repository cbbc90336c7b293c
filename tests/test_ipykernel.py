"""A real ipykernel, driven through jupyter_client: cell filenames and displayed reports."""

from __future__ import annotations

import json
import sys

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from nbhelpers import real_kernel, run_in_kernel  # noqa: E402 (after the skips above)

pytestmark = pytest.mark.kernel

MIME = "application/vnd.nbcompile.report+json"


@pytest.fixture(scope="module")
def kernel():
    with real_kernel() as (_, kc):
        out, _, _ = run_in_kernel(kc, "import sys; print(sys.prefix)")
        assert "".join(out).strip() == sys.prefix  # the kernel runs on this very interpreter
        yield kc


def test_cell_lines_under_ipykernel_filenames(kernel):
    _, _, reply = run_in_kernel(kernel, "%load_ext nbcompile")
    assert reply["status"] == "ok"
    cell = (
        '%%compile --backend eager --no-panel --run "f(torch.ones(3))"\n'
        "import torch\n"
        "def f(x):\n"
        "    y = x.sin()\n"
        "    print('break here')\n"
        "    return y.cos()\n"
    )
    _, displays, reply = run_in_kernel(kernel, cell)
    assert reply["status"] == "ok", reply
    assert any(MIME in d for d in displays), "the report is displayed with its mime type"
    shown = next(d[MIME] for d in displays if MIME in d)
    assert shown["break_count"] == 1 and shown["breaks"][0]["cell_line"] == 5

    out, _, _ = run_in_kernel(
        kernel,
        "import json, nbcompile\n"
        "b = nbcompile.last().report.breaks[0]\n"
        "print(json.dumps([b.cell_line, b.filename, b.source_line]))",
    )
    cell_line, filename, source = json.loads("".join(out).strip().splitlines()[-1])
    assert cell_line == 5
    assert "ipykernel_" in filename and filename.endswith(".py")
    assert source == "print('break here')"


def test_plain_cell_function_under_ipykernel(kernel):
    code = (
        "import json, torch, nbcompile\n"
        "def plain(x):\n"
        "    y = x + 1\n"
        "    print('p')\n"
        "    return y\n"
        "r = nbcompile.inspect(plain, torch.ones(2), backend='eager')\n"
        "print(json.dumps([r.breaks[0].cell_line, r.breaks[0].filename]))\n"
    )
    out, _, reply = run_in_kernel(kernel, code)
    assert reply["status"] == "ok", reply
    cell_line, filename = json.loads("".join(out).strip().splitlines()[-1])
    assert cell_line == 4 and "ipykernel_" in filename


def test_calls_from_a_later_cell_reach_the_session(kernel):
    cell = '%%compile --backend eager --no-dynamic --no-panel\nimport torch\ndef g(x):\n    return x * 2\n'
    run_in_kernel(kernel, cell)
    run_in_kernel(kernel, "g(torch.ones(2)); g(torch.ones(6))")
    out, _, _ = run_in_kernel(kernel, "r = nbcompile.last().report\nprint(r.graph_count, r.recompile_count)")
    assert "".join(out).split() == ["2", "1"]


def test_compile_shows_the_panel_in_a_kernel_and_it_follows_later_cells(kernel):
    run_in_kernel(kernel, "%load_ext nbcompile")
    cell = (
        '%%compile --backend eager --no-dynamic --run "h(torch.ones(2))"\n'
        "import torch\n"
        "def h(x):\n"
        "    return torch.sin(x) * 2\n"
    )
    _, displays, reply = run_in_kernel(kernel, cell)
    assert reply["status"] == "ok", reply
    assert any("application/vnd.jupyter.widget-view+json" in d for d in displays), displays
    run_in_kernel(kernel, "h(torch.ones(7))")  # a recompile, from another cell
    out, _, _ = run_in_kernel(
        kernel,
        "p = nbcompile.last().panel()\n"
        "print('1 recompile,' in p.status.value, len(p.figure_output.outputs))",
    )
    assert "".join(out).split() == ["True", "1"]
    _, displays, _ = run_in_kernel(kernel, "%nbcompile panel")
    assert any("application/vnd.jupyter.widget-view+json" in d for d in displays)
