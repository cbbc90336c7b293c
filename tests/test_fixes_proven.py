"""Every suggested toggle is tried on a scratch run before it is offered (``Fix.verified``, ``effect``).

A trial runs the workload on copies of its state with fresh compiled copies of the entries: the
user's objects, the random-number state, torch's registrations and the session's compiled code and
report are as before. A fix that did not help is never offered first, and what a trial says is what
applying the fix does.
"""

from __future__ import annotations

import textwrap

import torch

import nbcompile
from nbcompile.core import torch_compat
from nbcompile.engine import trial

from nbhelpers import CLAMP_CELL, GRAPH_BREAK_HELPER_CELL, run_compile_cell

MODULE_CELL = textwrap.dedent(
    """\
    import torch
    class TinyMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 4)
        def forward(self, x):
            x = self.a(x)
            if x.sum() > 0:
                x = x * 2
            return self.b(x)
    model = TinyMLP()
    """
)


def _fix(report, mode: str, name: str):
    return next(f for b in report.breaks for f in b.fixes if f.toggles == {name: mode})


def test_disabling_the_forward_of_the_entry_module_is_tried_and_never_offered_first(ip):
    ip.run_cell("import torch\nx = torch.randn(3, 4)")
    run_compile_cell(ip, '--backend eager --no-panel --run "model(x)"', MODULE_CELL)
    report = nbcompile.last().report
    (brk,) = report.breaks
    disable = _fix(report, "disable", "TinyMLP.forward")
    # it removes the break by compiling nothing at all: not a fix
    assert disable.verified is False and "graphs 2 -> 0, nothing left compiled" in disable.effect
    allow = _fix(report, "allow_in_graph", "TinyMLP.forward")
    assert allow.verified is False and allow.effect.startswith("breaks 1 -> 1")
    assert brk.fixes[0] not in (disable, allow)
    assert "tried, did not help" in str(report) and "tried, did not help" in report._repr_mimebundle_()["text/html"]
    status = repr(ip.run_line_magic("nbcompile", "status"))
    assert "TinyMLP.forward disable" not in status  # the one-line hints under the table skip what did not help


def test_a_training_step_is_tried_on_copies_the_user_state_and_torch_unchanged(ip):
    ip.run_cell(textwrap.dedent(
        """\
        import copy, torch
        torch.manual_seed(0)
        net = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        data = torch.randn(8, 4)
        log = []
        twin = copy.deepcopy(net)
        """))
    body = textwrap.dedent(
        """\
        def noisy(loss):
            log.append(float(loss))
            return loss * 1.0
        def step(batch):
            opt.zero_grad()
            loss = noisy(net(batch).pow(2).mean())
            loss.backward()
            opt.step()
            return loss.detach()
        """
    )
    torch_before = torch_compat.registries_snapshot()
    run_compile_cell(ip, '--backend eager --disallow torch.sub --no-panel --run "step(data)"', body)
    held = torch_compat.registries_snapshot()
    session = nbcompile.last()
    report = session.report
    rng_after_cell = torch.get_rng_state()
    frames = report.frame_count
    disable = _fix(report, "disable", "noisy")
    assert disable.verified is True and disable.effect.endswith("check ok"), disable.effect
    # the trials ran on copies: one optimizer step and one log entry, from the cell's own run
    assert len(ip.user_ns["log"]) == 1
    twin = ip.user_ns["twin"]
    torch.optim.SGD(twin.parameters(), lr=0.1).zero_grad()
    twin(ip.user_ns["data"]).pow(2).mean().backward()
    with torch.no_grad():
        for p in twin.parameters():
            p -= 0.1 * p.grad
    torch.testing.assert_close(ip.user_ns["net"].weight.detach(), twin.weight.detach())
    assert session.toggles["noisy"] == "compile" and session.toggles["torch.sub"] == "disallow_in_graph"
    session.verify_fixes()  # again, on demand: from the trial cache, nothing repeated
    assert len(ip.user_ns["log"]) == 1 and report.frame_count == frames
    assert torch.equal(torch.get_rng_state(), rng_after_cell)
    assert torch_compat.registries_snapshot() == held  # the trials' registrations were undone
    ip.run_line_magic("nbcompile", "reset")
    assert torch_compat.registries_snapshot() == torch_before


def test_a_fix_that_fails_to_compile_is_tried_and_offered_last(ip):
    body = textwrap.dedent(
        """\
        import torch
        def scale(x):
            torch._dynamo.graph_break()
            if type(x).__name__ == "FakeTensor":
                raise ValueError("boom")
            return x * 3
        def model(x):
            return scale(x.sin()) + 1
        """
    )
    run_compile_cell(ip, '--backend eager --no-panel --run "model(torch.ones(3))"', body)
    report = nbcompile.last().report
    allow = _fix(report, "allow_in_graph", "scale")
    assert allow.verified is False and allow.effect.startswith("fails to compile") and "boom" in allow.effect
    assert report.breaks[0].fixes[0].verified is True and report.breaks[0].fixes[-1] is allow
    assert report.errors == [] and nbcompile.last().toggles["scale"] == "compile"  # the failure was the trial's


def test_without_a_run_expression_nothing_is_claimed(ip):
    run_compile_cell(ip, "--backend eager --no-panel", GRAPH_BREAK_HELPER_CELL)
    ip.run_cell("f(torch.ones(3))")
    report = nbcompile.last().report
    fixes = [f for b in report.breaks for f in b.fixes if f.toggles]
    assert fixes and all(f.verified is None for f in fixes)
    nbcompile.last().verify_fixes()
    assert all("no --run expression" in f.effect for f in fixes)
    assert all("goes away" not in f.why for f in fixes)  # no unproven promise in the text


def test_inspect_proves_its_suggestions_too():
    ns: dict = {}
    exec(CLAMP_CELL, ns)
    report = nbcompile.inspect(ns["top"], torch.ones(3), backend="eager")
    fixes = report.breaks[0].fixes
    assert fixes[0].toggles == {"clamp": "disable"} and fixes[0].verified is True
    assert fixes[0].command == "toggles={'clamp': 'disable'}"
    allow = _fix(report, "allow_in_graph", "clamp")
    assert allow.verified is False and fixes.index(allow) == len(fixes) - 1
    # what the trial said is what applying it gives
    again = nbcompile.inspect(ns["top"], torch.ones(3), backend="eager", toggles={"clamp": "disable"})
    assert f"breaks {report.break_count} -> {again.break_count}" in fixes[0].effect
    data = report.to_json()
    assert data["breaks"][0]["fixes"][0]["verified"] is True and data["breaks"][0]["fixes"][0]["effect"]


def test_an_inductor_session_tries_fixes_with_aot_eager():
    assert trial.trial_backend("inductor") == "aot_eager" and trial.trial_backend("eager") == "eager"


def test_the_budget_leaves_the_rest_untried(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(3))"', GRAPH_BREAK_HELPER_CELL)
    session = nbcompile.last()
    session._trials.clear()
    for fix in (f for b in session.report.breaks for f in b.fixes):
        fix.verified, fix.effect = None, ""
    session.verify_fixes(budget_s=0)
    fixes = [f for b in session.report.breaks for f in b.fixes if f.toggles]
    assert all(f.verified is None and "budget" in f.effect for f in fixes)


def test_a_toggle_that_changes_nothing_is_never_applied_silently(ip, capsys):
    ip.run_cell("import torch\nx = torch.randn(3, 4)")
    run_compile_cell(ip, '--backend eager --no-panel --run "model(x)"', MODULE_CELL)
    capsys.readouterr()
    ip.run_cell("%nbcompile set TinyMLP.forward allow_in_graph")
    said = capsys.readouterr().out
    assert "TinyMLP.forward -> allow_in_graph: breaks 1 -> 1, graphs 2 -> 2 (it removed no break" in said
    assert "the allow_in_graph lint warns" in said
    ip.run_cell("%nbcompile set TinyMLP.forward disable")
    said = capsys.readouterr().out
    assert "graphs 2 -> 0 (nothing is compiled any more)" in said


def test_the_panel_says_what_a_toggle_changed(ip):
    ip.run_cell("import torch\nx = torch.randn(3, 4)")
    run_compile_cell(ip, '--backend eager --no-panel --run "model(x)"', MODULE_CELL)
    panel = nbcompile.last().panel()
    panel.function_rows["TinyMLP.forward"].value = "allow_in_graph"
    assert "TinyMLP.forward -&gt; allow_in_graph: breaks 1 -&gt; 1, graphs 2 -&gt; 2 (it removed no break" \
        in panel.status.value
    panel.function_rows["TinyMLP.forward"].value = "compile"
    assert "TinyMLP.forward -&gt; compile: breaks 1 -&gt; 1" in panel.status.value  # going back: no warning
    assert "removed no break" not in panel.status.value
