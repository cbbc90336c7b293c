"""Advice that can be followed: nothing asks to edit installed code, allow_in_graph is never offered for a
function that mutates its inputs or state, and a quoted line carries no comment (a cut one ends with "…")."""

from __future__ import annotations

import inspect

import torch

import nbcompile
from nbcompile.analysis.lint import lint_allow_in_graph

from nbhelpers import run_compile_cell

#: The most common cell: a training step with AdamW. zero_grad is skipped by Dynamo, and AdamW.step breaks
#: inside torch/optim/optimizer.py (a torch._dynamo.graph_break() in installed code).
TRAIN_CELL = """\
import torch
model = torch.nn.Linear(4, 2)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
def train_step():
    opt.zero_grad()  # reset the gradients before backward
    loss = model(torch.ones(3, 4)).pow(2).mean()
    loss.backward()
    opt.step()
    return loss.detach()
"""


def _all_advice(report):
    return [(f.command, f.why) for b in report.breaks for f in b.fixes]


def test_a_break_inside_torch_gets_advice_from_the_users_own_cell(ip):
    from nbcompile.analysis.suggest import is_installed  # new here: the other tests also run on older code

    run_compile_cell(ip, '--backend eager --no-panel --run "train_step()"', TRAIN_CELL)
    report = nbcompile.last().report
    inside = [b for b in report.breaks if is_installed(b.filename)]
    assert inside and all(b.filename.endswith("torch/optim/optimizer.py") for b in inside), report.breaks
    for brk in inside:
        whys = [f.why for f in brk.fixes]
        assert brk.fixes and not any("remove the torch._dynamo.graph_break()" in w for w in whys), whys
        assert not any("site-packages" in w or "dont_skip_tracing" in w for w in whys), whys
        # the user's own call into the library, at its cell line, and how to keep it out of the compiled code
        assert any("call `opt.step()` (line 9) outside train_step" in w for w in whys), whys


def test_zero_grad_is_never_offered_to_allow_in_graph_and_its_comment_is_not_quoted(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "train_step()"', TRAIN_CELL)
    report = nbcompile.last().report
    zero = next(b for b in report.breaks if b.cell_line == 6)
    texts = [f"{f.command} {f.why}" for f in zero.fixes]
    assert not any("allow_in_graph" in t for t in texts), texts
    assert any("call `opt.zero_grad()` outside train_step (line 6)" in t for t in texts), texts
    assert not any("reset the gradients" in t for b in report.breaks for t in (f.why for f in b.fixes))


def test_the_lint_reads_optimizer_zero_grad_as_mutating_its_state():
    warnings = lint_allow_in_graph(torch.optim.Optimizer.zero_grad, "Optimizer.zero_grad", torch.optim.Optimizer)
    assert any(w.rule == "mutation" and w.variable == "p.grad" for w in warnings), warnings


def test_allow_in_graph_is_not_offered_for_a_helper_that_mutates_its_input(ip):
    body = ("import torch\ndef bump(x):\n    x.add_(1)\n    torch._dynamo.graph_break()\n    return x * 2\n"
            "def fn(a):\n    return bump(a.clone()) + 1\n")
    run_compile_cell(ip, '--backend eager --no-panel --run "fn(torch.ones(3))"', body)
    fixes = [f for b in nbcompile.last().report.breaks for f in b.fixes]
    assert any(f.command == "%nbcompile set bump disable" for f in fixes)
    assert not any("allow_in_graph" in f.command or "allow_in_graph" in f.why for f in fixes), fixes


def test_a_long_line_is_cut_with_an_ellipsis_and_never_quotes_its_comment(ip):
    long_print = 'print("a rather long message about the step", "and more words to go past the limit")  # why'
    body = (f"import torch\ndef helper(x):\n    {long_print}\n    return x * 2\n"
            "def outer(a):\n    return helper(a) + 1\n")
    run_compile_cell(ip, '--backend eager --no-panel --run "outer(torch.ones(3))"', body)
    whys = [f.why for b in nbcompile.last().report.breaks for f in b.fixes]
    quoted = [w for w in whys if 'print("a rather long' in w]
    assert quoted and all("…" in w for w in quoted), whys
    assert not any("# why" in w for w in whys), whys


def test_library_functions_are_named_as_track_takes_them():
    from nbcompile.analysis.suggest import is_installed, library_name  # new here, as above

    fn = inspect.unwrap(torch.optim.Optimizer.zero_grad)
    line = inspect.getsourcelines(fn)[1] + 20
    assert library_name(fn.__code__.co_filename, line, "zero_grad") == "torch.optim.optimizer:Optimizer.zero_grad"
    assert is_installed(fn.__code__.co_filename)
    assert not is_installed("<ipython-input-3-0123abcd>") and not is_installed("/tmp/ipykernel_77/123.py")


def test_lint_messages_cut_long_code_with_an_ellipsis(tmp_path, monkeypatch):
    source = ("def gate(x):\n"
              "    if x.sum() + x.mean() + x.max() + x.min() + x.std() + x.var() > 0:  # a long test\n"
              "        return x\n"
              "    return -x\n")
    path = tmp_path / "gate_module.py"
    path.write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    import gate_module

    messages = [w.message for w in lint_allow_in_graph(gate_module.gate) if w.rule == "data-dependent"]
    assert messages and all("…" in m and "a long test" not in m for m in messages), messages
