"""What a user saw in a real JupyterLab on a training cell (docs/training_*.png), fixed: a status line never
cut inside a number, installed files named from their package (never the venv's absolute path), causes in
the cell's line order, torch's "remove the call" hint never offered for installed code, op names ending in
an ellipsis."""

from __future__ import annotations

import textwrap

import nbcompile
from nbcompile.model.render import short, to_html, to_text
from nbcompile.model.report import GraphBreak, Report
from nbcompile.views.panel_rows import row_label as _label

from nbhelpers import run_compile_cell

VENV_FILE = "/home/me/project/.venv/lib/python3.11/site-packages/torch/optim/optimizer.py"


def _break(line: int | None, filename: str = "<ipython-input-2-abc>", lineno: int = 0) -> GraphBreak:
    return GraphBreak(function="train_step", filename=filename, lineno=lineno or (line or 79), cell_line=line,
                      source_line="opt.step()", reason="r", gb_type="Call to graph_break", gb_id=None,
                      explanation="e", hints=[], doc_url=None)


def test_a_status_line_is_cut_between_clauses_never_inside_a_number():
    message = ("matches eager (71 values compared) (against a float64 reference: compiled error 1.52e-05, "
               "eager error 1.61e-05, ratio 0.949; max abs diff 9.43e-05)")
    line = short(message)
    assert line.endswith("…") and len(line) <= 140
    kept = line[:-1]
    assert message.startswith(kept) and message[len(kept)] in " ;:,(", line  # cut at a boundary, not in "9.43e-05"
    assert line.startswith("matches eager (71 values compared)")


def test_installed_files_are_named_from_their_package_and_causes_come_in_line_order():
    report = Report(breaks=[_break(25), _break(None, VENV_FILE, 79), _break(22)])
    assert [c.cell_line for c in report.causes_in_order()] == [22, 25, None]
    for text in (to_text(report), to_html(report)):
        assert "site-packages" not in text and ".venv" not in text
        assert "torch/optim/optimizer.py:79" in text
    text = to_text(report)
    assert text.index("line 22") < text.index("line 25"), text


def test_torch_hint_to_remove_a_call_is_not_offered_for_installed_code(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "train_step()"', textwrap.dedent("""\
        import torch
        net = torch.nn.Linear(4, 1)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        X = torch.randn(8, 4)
        def train_step():
            opt.zero_grad()
            loss = net(X).pow(2).mean()
            loss.backward()
            opt.step()
            return loss.detach()
        """))
    report = nbcompile.last().report
    installed = [b for b in report.breaks if "site-packages" in b.filename]
    assert installed, [(b.filename, b.reason) for b in report.breaks]
    for brk in installed:
        assert not any(h.lstrip().startswith("Remove") for h in brk.hints), brk.hints
        assert brk.fixes, "a break inside torch still gets what the user can do"


def test_a_long_op_name_ends_in_an_ellipsis_within_its_column():
    html = _label("torch.nn.functional.multi_head_attention_forward").value
    assert "text-overflow:ellipsis" in html and "max-width:" in html
    assert "title='torch.nn.functional.multi_head_attention_forward'" in html
