"""Advice and trials on the function that holds a break (issue 21, point 2/6 of the adversarial pass; issue 22's
advice leftovers from the JupyterLab tour of a training cell).

- A helper made by a factory (``helper = make(CFG)``) is tracked and toggled itself: the break's fixes, the
  trials and the search name ``helper``, never the factory ``make`` that ``f`` does not call; a function the
  cell makes that no name holds is said to be out of reach; the search never says a mode failed that never ran.
- A break inside ``torch.optim`` is named after what the user called (``AdamW.step``), not torch's wrapper
  ``_use_grad``.
- Hints that ask to report to PyTorch are not advice; ``capture_scalar_outputs`` is offered only where it can
  remove the break (not for a ``.item()`` that goes to ``print``).
- A toggle of a library function says it is unproven until a trial proved it.
"""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch

import nbcompile
from nbcompile.analysis.lint import lint_allow_in_graph
from nbcompile.analysis.suggest import Advisor, session_command
from nbcompile.model.render import fix_line, to_text
from nbcompile.model.report import GraphBreak
from nbcompile.views.status import status_table

from nbhelpers import run_compile_cell

#: The adversarial pass's cell: f calls the closure `helper` that `make` returned; the break is inside it.
FACTORY_CELL = """\
import torch
CFG = {'scale': 2.0}
def make(cfg):
    def helper(x):
        torch._dynamo.graph_break()
        return x * cfg['scale']
    return helper
helper = make(CFG)
def f(x):
    return helper(x.sin()).cos()
x = torch.randn(4)
"""
FACTORY_LINE = '--backend aot_eager --no-panel --entry f --run "f(x)"'


def _commands(report):
    return [f.command for b in report.breaks for f in b.fixes if f.command]


def test_a_helper_made_by_a_factory_is_tracked_and_its_break_advises_and_proves_the_helper(ip):
    run_compile_cell(ip, FACTORY_LINE, FACTORY_CELL)
    session = nbcompile.last()
    assert "helper" in session.toggles and "make" in session.toggles
    session.verify_fixes()
    (brk, *_rest) = session.report.breaks
    assert brk.cell_line == 6
    commands = _commands(session.report)
    assert "%nbcompile set helper disable" in commands, commands
    assert not any(" make " in c for c in commands), commands
    assert brk.fixes[0].command == "%nbcompile set helper disable", brk.fixes  # allow_in_graph would freeze cfg
    proven = {tuple(f.toggles.items()) for f in brk.fixes if f.verified}
    assert (("helper", "disable"),) in proven, [(f.command, f.verified, f.effect) for f in brk.fixes]
    # the toggle itself reaches the call f makes: fewer breaks on the session's own re-run
    before = session.report.break_count
    session.set("helper", "disable")
    assert session.report.break_count < before


def test_the_search_toggles_the_closure_never_freezes_its_dict_and_never_claims_untried_modes_failed(ip):
    run_compile_cell(ip, FACTORY_LINE, FACTORY_CELL)
    session = nbcompile.last()
    result = session.fix(budget_s=600)
    assert result.best is not None and result.best.toggles.get("helper", "compile") != "compile", result.best
    # allow_in_graph would read cfg['scale'] once, at trace time: the dict the closure holds is the global CFG
    assert result.best.toggles["helper"] not in ("allow_in_graph", "nonstrict_trace"), result.best.toggles
    tried = [t for t in result.trials if t.toggles.get("helper") == "allow_in_graph"]
    assert tried and all("captured-state" in t.rejected or "stale: with cfg" in t.rejected
                         for t in tried if t.breaks is not None), [(t.toggles, t.rejected) for t in tried]
    assert result.best.breaks is not None and result.start is not None and result.best.breaks < result.start.breaks
    assert not any("no mode of" in u for u in result.unremovable), result.unremovable
    ns = ip.user_ns
    ns["CFG"]["scale"] = 5.0  # the chosen configuration follows the user's change
    x = ns["x"]
    torch.testing.assert_close(ns["f"](x), (x.sin() * 5.0).cos())


def test_the_lint_warns_of_a_dict_a_closure_holds_not_of_a_number():
    def make(cfg, k):
        def helper(x):
            return x * cfg["scale"] * k
        return helper

    rules = {(w.rule, w.variable) for w in lint_allow_in_graph(make({"scale": 2.0}, 3.0), "helper")}
    assert ("captured-state", "cfg") in rules and not any(v == "k" for _, v in rules), rules


def test_closures_of_one_factory_under_two_names_advise_the_one_called(ip):
    body = FACTORY_CELL.replace("helper = make(CFG)\n", "h1 = make(CFG)\nh2 = make({'scale': 3.0})\n") \
        .replace("return helper(x.sin())", "return h2(x.sin())")
    run_compile_cell(ip, FACTORY_LINE, body)
    session = nbcompile.last()
    assert {"h1", "h2"} <= set(session.toggles)
    commands = _commands(session.report)
    assert "%nbcompile set h2 disable" in commands and not any("h1" in c for c in commands), commands


def test_a_function_the_cell_makes_that_no_name_holds_is_said_to_be_out_of_reach(ip):
    body = FACTORY_CELL.replace("helper = make(CFG)\n", "HELPERS = {'a': make(CFG)}\n") \
        .replace("return helper(x.sin())", "return HELPERS['a'](x.sin())")
    run_compile_cell(ip, FACTORY_LINE, body)
    session = nbcompile.last()
    report = session.report
    assert not any("make" in c for c in _commands(report)), _commands(report)
    whys = [f.why for b in report.breaks for f in b.fixes]
    assert any("make.<locals>.helper" in w and "cannot toggle it" in w for w in whys), whys
    result = session.fix(budget_s=600)
    assert result.unremovable and all("no name of the cell" in u for u in result.unremovable), result.unremovable


def test_the_search_never_says_a_mode_failed_for_a_break_in_an_entry_it_does_not_toggle(ip):
    body = textwrap.dedent("""\
        import torch
        def helper(x):
            return x * 2
        def f(x):
            y = helper(x.sin())
            torch._dynamo.graph_break()
            return y.cos()
        x = torch.randn(4)
        """)
    run_compile_cell(ip, FACTORY_LINE, body)
    result = nbcompile.last().fix(budget_s=600)
    assert result.state == "done" and result.unremovable, (result.state, result.unremovable)
    (left,) = result.unremovable
    assert "cell line 7" in left and "an entry" in left and "no mode of" not in left, left


def test_a_nested_def_its_encloser_calls_is_still_advised_on_the_encloser(ip):
    body = textwrap.dedent("""\
        import torch
        def g(x):
            def inner(y):
                torch._dynamo.graph_break()
                return y * 2
            return inner(x) + 1
        def f(x):
            return g(x.sin()).cos()
        x = torch.randn(4)
        """)
    run_compile_cell(ip, FACTORY_LINE, body)
    commands = _commands(nbcompile.last().report)
    assert "%nbcompile set g disable" in commands, commands


def test_the_calls_export_of_a_closure_toggle_runs_in_a_fresh_namespace(ip):
    run_compile_cell(ip, FACTORY_LINE, FACTORY_CELL)
    session = nbcompile.last()
    session.set("helper", "disable")
    snippet = session.export()
    assert "helper = torch.compiler.disable(helper)" in snippet, snippet
    fresh: dict = {}
    exec(FACTORY_CELL, fresh)
    exec(snippet, fresh)
    x = fresh["x"]
    torch.testing.assert_close(fresh["f"](x), (x.sin() * 2.0).cos())


# --- issue 22: the training cell's advice -----------------------------------------------------------------

TRAIN_CELL = """\
import torch
net = torch.nn.Linear(4, 1)
opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
X = torch.randn(8, 4)
def log_loss(loss):
    print(f"loss {loss.item():.4f}")   # .item() and print: graph breaks
def scale(loss):
    return loss * loss.item()
def train_step():
    opt.zero_grad()
    loss = scale(net(X).pow(2).mean())
    log_loss(loss)
    loss.backward()
    opt.step()
    return loss.detach()
"""


def test_a_break_inside_the_optimizer_is_named_after_what_the_user_called(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "train_step()"', TRAIN_CELL)
    report = nbcompile.last().report
    inside = [b for b in report.breaks if b.filename.endswith("torch/optim/optimizer.py")]
    assert inside, [(b.function, b.filename) for b in report.breaks]
    whys = [f.why for b in inside for f in b.fixes]
    assert any("inside AdamW.step" in w and "call `opt.step()` (line 15) outside train_step" in w for w in whys), whys
    assert not any("in _use_grad)" in w for w in whys), whys  # torch's wrapper only as such, never as the name
    status = repr(status_table(nbcompile.last()))  # %nbcompile status names the file, the wrapper only beside it
    assert "break at torch/optim/optimizer.py:" in status and "break at _use_grad" not in status, status


def test_capture_scalar_outputs_is_offered_only_where_it_can_remove_the_break(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "train_step()"', TRAIN_CELL)
    report = nbcompile.last().report
    by_line = {b.cell_line: b for b in report.breaks}
    printed, scaled = by_line[7], by_line[9]  # print(f"... {loss.item()}") and loss * loss.item()
    offered = [h for h in printed.hints if "capture_scalar_outputs" in h] + [
        f.why for f in printed.fixes if "capture_scalar_outputs = True" in f.why and "would not" not in f.why]
    assert not offered, (printed.hints, [f.why for f in printed.fixes])
    assert any("would not remove this break" in f.why for f in printed.fixes)
    assert any("capture_scalar_outputs = True" in f.why for f in scaled.fixes), [f.why for f in scaled.fixes]
    gutter = printed.hints[:2]  # what the JupyterLab gutter shows
    assert not any("capture_scalar_outputs" in h for h in gutter)


def _cell_break(hints: list[str], gb_type: str = "Unsupported context manager") -> GraphBreak:
    return GraphBreak(function="f", filename="<ipython-input-9-abc>", lineno=3, cell_line=3,
                      source_line="with Thing():", reason="r", gb_type=gb_type, gb_id=None,
                      explanation="e", hints=list(hints), doc_url=None)


def _advisor() -> Advisor:
    return Advisor(tracked={}, toggles={}, entries=["f"], command=session_command, lint=lambda _n: [],
                   disallowed={})


def test_hints_that_ask_to_report_to_pytorch_are_not_fixes_and_come_last():
    brk = _cell_break(["It may be possible to write Dynamo tracing rules for this code. Please report an issue to "
                       "PyTorch if you encounter this graph break often.",
                       "Construct the object _outside_ the `torch.compile` region, or submit an issue to GitHub."])
    fixes = _advisor()(brk)
    assert [f.why for f in fixes] == ["Construct the object _outside_ the `torch.compile` region."], fixes
    assert brk.hints[0].startswith("Construct the object"), brk.hints  # the gutter shows the first hints
    for only_report in (["Please open an issue."], ["This is likely to be a Dynamo bug. Please report an issue to "
                                                    "PyTorch."], ["Please file an issue to PyTorch."]):
        assert _advisor()(_cell_break(only_report)) == [], only_report


# --- a library function's toggle: unproven until a trial proves it ----------------------------------------

LIBRARY = """\
import torch
def noisy(x):
    y = x * 2
    torch._dynamo.graph_break()
    return y + 1
"""


@pytest.fixture()
def installed_lib(tmp_path):
    """A pure-Python library under a ``site-packages`` directory: installed code as nbcompile reads it."""
    root = tmp_path / "site-packages"
    root.mkdir()
    (root / "nbc_fake_lib.py").write_text(LIBRARY)
    sys.path.insert(0, str(root))
    yield "nbc_fake_lib"
    sys.path.remove(str(root))
    sys.modules.pop("nbc_fake_lib", None)


LIB_CELL = """\
import torch
import nbc_fake_lib
def f(x):
    return nbc_fake_lib.noisy(x.sin()).cos()
x = torch.randn(4)
"""


def test_a_library_toggle_is_unproven_until_a_trial_proves_it(ip, installed_lib):
    run_compile_cell(ip, '--backend aot_eager --no-panel --run "f(x)"', LIB_CELL)
    session = nbcompile.last()
    session.verify_fixes()
    (brk, *_rest) = [b for b in session.report.breaks if b.filename.endswith("nbc_fake_lib.py")]
    advice = next(f for f in brk.fixes if "--track nbc_fake_lib:noisy" in f.why)
    assert advice.verified is None and advice.effect.startswith("unproven"), (advice.verified, advice.effect)
    assert "unproven" in fix_line(advice) and "proves it" not in advice.why
    assert "unproven" in to_text(session.report)
    session.reset()

    # tracked: the same advice is a toggle a trial can try, and it says what the trial showed
    run_compile_cell(ip, '--backend aot_eager --no-panel --track nbc_fake_lib:noisy --run "f(x)"', LIB_CELL)
    session = nbcompile.last()
    (brk, *_rest) = [b for b in session.report.breaks if b.filename.endswith("nbc_fake_lib.py")]
    toggle = next(f for f in brk.fixes if f.toggles == {"nbc_fake_lib:noisy": "disable"})
    assert toggle.command == "%nbcompile set nbc_fake_lib:noisy disable"
    session.verify_fixes()  # the session proves its fixes after the run: the effect says what the trial showed
    assert toggle.verified is True and "breaks" in toggle.effect, (toggle.verified, toggle.effect)
    assert fix_line(toggle).endswith(f"[proven: {toggle.effect}]")


def test_a_flag_names_the_closure_a_cell_assigns(ip):
    run_compile_cell(ip, f"{FACTORY_LINE} --disable helper", FACTORY_CELL)
    session = nbcompile.last()
    assert session.toggles["helper"] == "disable"
    assert session.report.break_count == 1  # the call to the disabled helper, in place of the two inside it
