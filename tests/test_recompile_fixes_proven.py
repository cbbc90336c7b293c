"""Recompiles a training loop makes, each with what changed, the user's line and a fix (issue 34, point 8): a
plain tensor one call and an ``nn.Parameter`` the next; a value read with ``.item()`` inside the compiled code;
a Python float learning rate from a scheduler passed in each step. Where a fix can be tried, nbcompile tries it
on copies of the user's objects and says what it did: recompiles N -> 0 with the check ok."""

from __future__ import annotations

import textwrap

import nbcompile

from nbhelpers import run_compile_cell


def _row(report, function: str):
    rows = [r for r in report.recompiles if r.function.startswith(function)]
    assert rows, (report.summary(), [(r.function, r.reason) for r in report.recompiles])
    return rows[0]


PARAMETER_CELL = textwrap.dedent(
    """\
    import torch
    def scale(x):
        return x * 2
    w = torch.ones(3)
    p = torch.nn.Parameter(torch.ones(3))
    """
)


def test_a_tensor_then_a_parameter_names_the_change_the_line_and_a_fix(ip):
    run_compile_cell(ip, '--backend eager --no-panel --entry scale --run "scale(w), scale(p)"', PARAMETER_CELL)
    row = _row(nbcompile.last().report, "scale")
    assert [(c.subject, c.before, c.after) for c in row.changes] == [("x", "Tensor", "Parameter")]
    assert row.cell_line == 3  # the parameter x
    assert "x is a Parameter" in row.reason and "' but found" not in row.reason, row.reason
    (fix,) = row.fixes  # advice: no trial can change how the user calls it
    assert "a Parameter's .detach()" in fix.why and "once each (not once per call)" in fix.why, fix.why
    # and the other way round
    run_compile_cell(ip, '--backend eager --no-panel --entry scale --run "scale(p), scale(w)"', PARAMETER_CELL)
    row = _row(nbcompile.last().report, "scale")
    assert [(c.subject, c.before, c.after) for c in row.changes] == [("x", "Parameter", "Tensor")]
    assert row.fixes and row.cell_line == 3


ITEM_CELL = textwrap.dedent(
    """\
    import torch
    def step(x, w):
        s = w.sum().item()
        return x * s
    def train():
        return [step(torch.ones(3), torch.full((2,), float(i + 1))) for i in range(4)]
    """
)


def test_an_item_value_recompile_gets_capture_scalar_outputs_proven(ip):
    run_compile_cell(ip, '--backend eager --no-panel --entry step --run "train()"', ITEM_CELL)
    report = nbcompile.last().report
    row = _row(report, "torch_dynamo_resume_in_step")
    assert row.changes[0].subject == "w.sum().item()" and row.changes[0].before == "2.0", row.changes
    assert row.cell_line == 4  # the line that reads the value
    fix = next(f for f in row.fixes if f.command == "torch._dynamo.config.capture_scalar_outputs = True")
    assert fix.verified is True, fix.effect
    assert fix.effect.startswith(f"recompiles {report.recompile_count} -> 0,") and "check ok" in fix.effect, fix.effect
    assert row.fixes[0] is fix
    assert "proven: recompiles" in str(report)


LR_CELL = textwrap.dedent(
    """\
    import torch
    model = torch.nn.Linear(3, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 1.0 / (epoch + 1))
    def step(x, lr):
        return x * lr
    def train():
        out = []
        for _ in range(4):
            out.append(step(torch.ones(3), sched.get_last_lr()[0]))
            opt.step()
            sched.step()
        return out
    """
)


def test_a_scheduler_learning_rate_recompile_gets_a_proven_fix(ip):
    for flags, recompiles in (("", 1), ("--no-dynamic ", 3)):
        run_compile_cell(ip, f'--backend eager {flags}--no-panel --entry step --run "train()"', LR_CELL)
        report = nbcompile.last().report
        assert report.recompile_count == recompiles, report.summary()
        row = _row(report, "step")
        assert (row.changes[0].subject, row.changes[0].before) == ("lr", "0.1") and row.cell_line == 6
        proven = [f for f in row.fixes if f.verified is True]
        assert proven and proven[0] is row.fixes[0], [(f.command, f.verified, f.effect) for f in row.fixes]
        assert proven[0].effect.startswith(f"recompiles {recompiles} -> 0,") and "check ok" in proven[0].effect
        # passing the rate as a 0-dim tensor is said too, as code to change
        assert any("torch.tensor(lr)" in f.why for f in row.fixes), [f.why for f in row.fixes]
        assert ip.user_ns["sched"].last_epoch == 4  # the trials ran on copies: the user's scheduler stepped 4 times
