"""What ``python -m nbcompile run`` (``make demo``) prints of a notebook's benchmarks (issue 34, point 8): a
speedup its own page marks as noise (the bench row's ``noisy`` verdict: "noisy, not shown" in the HTML bars,
"noisy: not plotted" in the figure) is printed as "within noise", never as a figure; a trusted one is printed
as the page shows it. The verdict is the bench's own field, read, not judged again."""

from __future__ import annotations

import pytest

pytest.importorskip("nbformat")

import nbformat  # noqa: E402

from nbcompile import runner  # noqa: E402
from nbcompile.engine.timing import BenchResult, BenchRow  # noqa: E402

SPREAD = "IQR 80% of the median after a second, longer measurement"


def _bench(noisy_row: str = "", eager_noisy: str = "") -> BenchResult:
    return BenchResult(
        rows=[BenchRow("eager", 1e-3, 1e-4, 1.0, None, noisy=eager_noisy),
              BenchRow("session", 5e-4, 5e-5, 2.0, 0.4, noisy=noisy_row),
              BenchRow("max-autotune", 2.5e-4, 2e-5, 4.0, 3.0)],
        device="cpu", timer="torch.utils.benchmark", peak_gbps=None, bytes_per_call=0, flops_per_call=0)


def _notebook(result: BenchResult):
    """A notebook whose one cell displayed ``result`` as a kernel stores it: its whole mime bundle."""
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("%nbcompile bench")
    bundle = result._repr_mimebundle_()
    cell.outputs = [nbformat.v4.new_output("display_data", data=bundle)]
    nb.cells = [cell]
    return nb


def _printed(capsys, result: BenchResult) -> list[str]:
    data = runner.summary(_notebook(result))
    runner.print_summary("demo.ipynb", {"seconds": 1.0, "peak_rss_mib": None}, data)
    return [line for line in capsys.readouterr().out.splitlines() if "speedup" in line]


def test_a_speedup_the_page_marks_as_noise_is_printed_as_within_noise(capsys):
    result = _bench(noisy_row=SPREAD)
    assert "noisy, not shown" in result.html_bars()  # the page's verdict on the session row
    lines = _printed(capsys, result)
    session = [line for line in lines if "speedup session" in line]
    assert session and "within noise" in session[0] and "2.00x" not in session[0], lines
    trusted = [line for line in lines if "speedup max-autotune" in line]
    assert trusted and "4.00x over eager" in trusted[0], lines


def test_a_noisy_eager_reference_makes_every_ratio_within_noise(capsys):
    # the bench marks the compiled rows too when eager was noisy ("the eager reference is noisy (...)")
    result = _bench(noisy_row=f"the eager reference is noisy ({SPREAD})", eager_noisy=SPREAD)
    result.rows[2].noisy = f"the eager reference is noisy ({SPREAD})"
    lines = _printed(capsys, result)
    assert lines and all("within noise" in line and "x over eager" not in line for line in lines), lines


def test_the_json_summary_keeps_the_verdict_beside_the_figure():
    data = runner.summary(_notebook(_bench(noisy_row=SPREAD)))
    by_config = {s["config"]: s for s in data["speedups"]}
    assert by_config["session"]["noisy"] == SPREAD and by_config["max-autotune"]["noisy"] == ""


def test_a_trusted_speedup_is_printed_as_before(capsys):
    lines = _printed(capsys, _bench())
    assert any("speedup session: 2.00x over eager" in line for line in lines), lines


def test_the_json_summary_names_functions_as_the_user_wrote_them():
    """Issue 34, point 8: `--json` says `f (after line 12)`, never Dynamo's `torch_dynamo_resume_in_f_at_12`."""
    report = {"title": "t", "frame_count": 2, "graph_count": 2, "break_count": 1, "recompile_count": 0,
              "check": None, "graphs": [{"function": "f"}, {"function": "torch_dynamo_resume_in_f_at_12"}],
              "frames": [{"function": "torch_dynamo_resume_in_f_at_12"}]}
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("%%compile\ndef f(x): ...", outputs=[
        nbformat.v4.new_output("display_data", data={runner.MIME_TYPE: report, "text/plain": "r"})]))
    assert runner.summary(nb)["compile_cells"][0]["functions"] == ["f", "f (after line 12)"]
