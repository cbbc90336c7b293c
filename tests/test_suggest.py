"""Per-break suggestions: each suggested `%nbcompile set` line, run as is, removes or moves the break."""

from __future__ import annotations

import torch

import nbcompile

from nbhelpers import ADD_SUB_ADD_CELL, CLAMP_CELL, MY_CUSTOM_FUNCTION_CELL, PRINT_IN_HELPER_CELL, run_compile_cell


def _commands(report):
    return [[f.command for f in b.fixes] for b in report.breaks]


def test_print_in_a_helper_suggests_disable_or_moving_the_print(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "outer(torch.ones(3))"', PRINT_IN_HELPER_CELL)
    report = nbcompile.last().report
    assert report.break_count == 2 and {b.cell_line for b in report.breaks} == {4}
    for brk in report.breaks:
        assert brk.fixes[0].command == "%nbcompile set helper disable"
        assert any(not f.command and 'move `print("inside helper")` out of helper (line 4)' in f.why for f in brk.fixes)
        assert all("allow_in_graph" not in f.command for f in brk.fixes)  # it would drop the print

    ip.run_cell(report.breaks[0].fixes[0].command)  # the exact line, as a user would paste it
    after = nbcompile.last().report
    assert nbcompile.last().toggles["helper"] == "disable"
    assert after.break_count == 1 and "mul" not in [op for g in after.graphs for op in g.ops]
    assert _commands(after)[0][0] == "%nbcompile set helper compile"  # the way back


def test_graph_break_in_a_helper_suggests_allow_in_graph_with_a_clean_lint(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "fn(torch.ones(3))"', MY_CUSTOM_FUNCTION_CELL)
    report = nbcompile.last().report
    first = report.breaks[0].fixes[0]
    assert first.command == "%nbcompile set my_custom_function allow_in_graph"
    assert "lint finds nothing" in first.why and first.warnings == []
    assert any("remove the torch._dynamo.graph_break() call (line 4)" in f.why for f in report.breaks[0].fixes)
    status = repr(ip.run_line_magic("nbcompile", "status"))
    assert ("break at line 4 (Call to `torch._dynamo.graph_break()`): "
            "%nbcompile set my_custom_function allow_in_graph") in status

    ip.run_cell(first.command)
    assert nbcompile.last().report.break_count == 0


def test_data_dependent_helper_puts_disable_first_and_shows_the_lint(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "top(torch.ones(3))"', CLAMP_CELL)
    fixes = nbcompile.last().report.breaks[0].fixes
    assert fixes[0].command == "%nbcompile set clamp disable"
    assert fixes[0].verified is True and fixes[0].effect == "breaks 2 -> 1, graphs 4 -> 2, check ok"
    assert any("torch.where or torch.cond" in f.why for f in fixes)
    # allow_in_graph was tried and did not help: it is offered last, with what the trial showed
    allow = fixes[-1]
    assert allow.command == "%nbcompile set clamp allow_in_graph" and allow.warnings == ["data-dependent: x (line 4)"]
    assert allow.verified is False and allow.effect.startswith("breaks 2 -> 2")
    ip.run_cell(allow.command)  # and it truly does not help: the trial told the truth
    assert nbcompile.last().report.break_count == 2
    ip.run_cell("%nbcompile set clamp compile")
    ip.run_cell(fixes[0].command)
    assert (nbcompile.last().report.break_count, nbcompile.last().report.graph_count) == (1, 2)


def test_a_break_this_session_made_suggests_undoing_the_toggle(ip):
    run_compile_cell(ip, '--backend eager --disallow torch.sub --no-panel --run "fn(torch.ones(3))"', ADD_SUB_ADD_CELL)
    report = nbcompile.last().report
    assert report.graph_count == 2
    assert _commands(report) == [["%nbcompile set torch.sub compile"]]
    ip.run_cell(report.breaks[0].fixes[0].command)
    assert nbcompile.last().report.graph_count == 1


def test_a_print_in_the_entry_suggests_a_code_change(ip):
    body = "import torch\ndef f(x):\n    print('hi')\n    return x + 1\n"
    run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(2))"', body)
    fix = nbcompile.last().report.breaks[0].fixes[0]
    assert fix.command == "" and "move `print('hi')` out of f (line 4), or into a helper you then disable" in fix.why


def test_fixes_show_in_text_and_html(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "outer(torch.ones(3))"', PRINT_IN_HELPER_CELL)
    bundle = nbcompile.last().report._repr_mimebundle_()
    assert "fix: %nbcompile set helper disable" in bundle["text/plain"]
    assert "<code>%nbcompile set helper disable</code>" in bundle["text/html"]
    fix = bundle["application/vnd.nbcompile.report+json"]["breaks"][0]["fixes"][0]
    assert fix["command"] == "%nbcompile set helper disable"


def _helper(x):
    torch._dynamo.graph_break()
    return x + 1


def _entry(x):
    return _helper(x) * 2


def test_inspect_suggests_toggles_in_its_own_syntax():
    report = nbcompile.inspect(_entry, torch.ones(2), backend="eager")
    command = report.breaks[0].fixes[0].command
    assert command == "toggles={'_helper': 'allow_in_graph'}"
    fixed = nbcompile.inspect(_entry, torch.ones(2), backend="eager", toggles={"_helper": "allow_in_graph"})
    assert fixed.break_count == 0 and fixed.check.ok
