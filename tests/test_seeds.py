"""Scenarios of the seed documents and the everyday causes of graph breaks and recompiles.

Each runs real Dynamo with backend eager (Dynamo's view only).
"""

from __future__ import annotations

import textwrap

import torch

import nbcompile

from nbhelpers import MY_CUSTOM_FUNCTION_CELL, run_compile_cell

# --- seed 001/002/004: fine-grained tracing APIs ------------------------------------

def forced_break(x):
    x = x + 1
    torch._dynamo.graph_break()
    return x * 2


def compiling_branch(x):
    if torch.compiler.is_compiling():
        return x + 1
    return x - 1


def dynamo_compiling_branch(x):
    if torch.compiler.is_dynamo_compiling():
        return x.sin()
    return x.cos()


def test_graph_break_splits_into_two_graphs_at_its_line():
    report = nbcompile.inspect(forced_break, torch.ones(3), backend="eager")
    assert report.graph_count == 2 and report.break_count == 1
    assert [g.ops for g in report.graphs] == [["add"], ["mul"]]
    brk = report.breaks[0]
    assert brk.lineno == forced_break.__code__.co_firstlineno + 2
    assert brk.source_line == "torch._dynamo.graph_break()"
    assert "graph_break" in brk.gb_type


def test_is_compiling_takes_the_compiled_branch_without_a_break():
    report = nbcompile.inspect(compiling_branch, torch.ones(3), backend="eager")
    assert report.break_count == 0 and [g.ops for g in report.graphs] == [["add"]]
    assert torch.equal(report.result, torch.full((3,), 2.0))
    assert torch.equal(compiling_branch(torch.ones(3)), torch.zeros(3))  # eager takes the other one


def test_is_dynamo_compiling_takes_the_traced_branch():
    report = nbcompile.inspect(dynamo_compiling_branch, torch.ones(3), backend="eager")
    assert [g.ops for g in report.graphs] == [["sin"]]
    assert torch.allclose(report.result, torch.ones(3).sin())


def test_mark_dynamic_avoids_the_recompile_on_a_new_size(ip):
    body = "import torch\ndef scale(x):\n    return x * 3\n"
    run_compile_cell(ip, "--backend eager --no-panel", body)
    ip.run_cell("a = torch.ones(4); torch._dynamo.mark_dynamic(a, 0); scale(a)")
    ip.run_cell("b = torch.ones(7); torch._dynamo.mark_dynamic(b, 0); scale(b)")
    report = nbcompile.last().report
    assert report.graph_count == 1 and report.recompile_count == 0


def test_mark_static_forces_a_recompile_under_dynamic(ip):
    body = "import torch\ndef scale(x):\n    return x * 3\n"
    run_compile_cell(ip, "--backend eager --dynamic --no-panel", body)
    ip.run_cell("a = torch.ones(4); torch._dynamo.mark_static(a, 0); scale(a)")
    ip.run_cell("b = torch.ones(7); torch._dynamo.mark_static(b, 0); scale(b)")
    static = nbcompile.last().report
    assert static.recompile_count == 1
    assert "size mismatch" in static.recompiles[0].reason or "7" in static.recompiles[0].reason
    ip.run_line_magic("nbcompile", "reset")

    run_compile_cell(ip, "--backend eager --dynamic --no-panel", body)
    ip.run_cell("scale(torch.ones(4)); scale(torch.ones(7))")
    assert nbcompile.last().report.recompile_count == 0  # dynamic=True alone: one graph for both


# --- everyday breaks ----------------------------------------------------------------------

def data_dependent(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


def uses_item(x):
    return x * x.sum().item()


def test_data_dependent_branch_breaks_at_the_if():
    report = nbcompile.inspect(data_dependent, torch.ones(3), backend="eager")
    assert report.break_count == 1
    assert report.breaks[0].source_line == "if x.sum() > 0:"
    assert "Data-dependent" in report.breaks[0].gb_type
    assert report.graphs[0].ops == ["sum", "gt"]


def test_item_breaks_and_hints_at_capture_scalar_outputs():
    report = nbcompile.inspect(uses_item, torch.ones(3), backend="eager")
    assert report.break_count == 1
    brk = report.breaks[0]
    assert "item()" in brk.gb_type
    assert brk.source_line == "return x * x.sum().item()"
    assert any("capture_scalar_outputs" in h for h in brk.hints) or "capture_scalar_outputs" in brk.gb_type


def test_print_in_a_nested_call_is_reported_in_the_helper(ip):
    body = textwrap.dedent(
        """\
        import torch
        def helper(x):
            print("inside helper")
            return x * 2
        def outer(x):
            y = x.sin()
            return helper(y).cos()
        """
    )
    run_compile_cell(ip, '--backend eager --no-panel --run "outer(torch.ones(3))"', body)
    report = nbcompile.last().report
    assert nbcompile.last().entries == ["outer"]
    assert report.break_count >= 1
    assert {b.function for b in report.breaks} == {"helper"}
    assert {b.cell_line for b in report.breaks} == {4}
    ops = [op for g in report.graphs for op in g.ops]
    assert ops.count("sin") == 1 and ops.count("mul") == 1 and ops.count("cos") == 1


def test_recompile_on_a_global_change_names_the_global(ip):
    body = "import torch\nSCALE = 2\ndef times(x):\n    return x * SCALE\n"
    run_compile_cell(ip, '--backend eager --no-panel --run "times(torch.ones(3))"', body)
    ip.run_cell("SCALE = 5\nout = times(torch.ones(3))")
    report = nbcompile.last().report
    assert report.recompile_count == 1
    assert "SCALE" in report.recompiles[0].reason
    assert torch.equal(ip.user_ns["out"], torch.full((3,), 5.0))


def test_recompile_on_a_shape_change_with_no_dynamic(ip):
    body = "import torch\ndef g(x):\n    return x * 2\n"
    run_compile_cell(ip, '--backend eager --no-dynamic --no-panel --run "g(torch.ones(3))"', body)
    ip.run_cell("g(torch.ones(5))")
    report = nbcompile.last().report
    assert report.recompile_count == 1 and report.recompiles[0].function == "g"
    assert "size mismatch" in report.recompiles[0].reason
    assert len(report.frames) == 2 and report.frames[1].compile_id.endswith("/1")


def test_guards_are_readable():
    report = nbcompile.inspect(data_dependent, torch.ones(3), backend="eager")
    frame = report.frames[0]
    assert frame.guard_count > 0
    assert any(g.startswith("TENSOR_MATCH") and "L['x']" in g for g in frame.guards)
    assert all("#" not in g for g in frame.guards)


# --- seed toggles (001/004: disable on a call tree; 000: allow_in_graph) -----------------

CALL_TREE = textwrap.dedent(
    """\
    import torch
    def aa_fn(x):
        return x.sin()
    def ab_fn(x):
        return x.cos()
    def a_fn(x):
        return aa_fn(x) + ab_fn(x)
    def b_fn(x):
        return x.exp()
    def fn(x):
        return a_fn(x) * b_fn(x)
    """
)


def test_disable_on_a_fn_takes_its_whole_call_tree_out_of_the_graphs(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "fn(torch.ones(3))"', CALL_TREE)
    session = nbcompile.last()
    assert session.entries == ["fn"]
    ops = [op for g in session.report.graphs for op in g.ops]
    assert sorted(ops) == ["add", "cos", "exp", "mul", "sin"]
    session.set("a_fn", "disable")
    ops = [op for g in session.report.graphs for op in g.ops]
    assert "sin" not in ops and "cos" not in ops and "add" not in ops  # a_fn and its callees run eagerly
    assert "exp" in ops and "mul" in ops
    assert session.report.break_count == 1 and "disable" in session.report.breaks[0].gb_type
    assert session.report.check.ok
    session.set("a_fn", "compile")
    assert sorted(op for g in session.report.graphs for op in g.ops) == ["add", "cos", "exp", "mul", "sin"]


def test_allow_in_graph_my_custom_function_with_a_graph_break_gives_one_graph(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "fn(torch.ones(3))"', MY_CUSTOM_FUNCTION_CELL)
    session = nbcompile.last()
    assert session.report.graph_count == 3
    assert [g.ops for g in session.report.graphs] == [["add"], ["mul"], ["add"]]
    session.set("my_custom_function", "allow_in_graph")
    assert session.report.graph_count == 1 and session.report.break_count == 0
    assert session.report.graphs[0].ops == ["add", "my_custom_function", "add"]
    assert session.report.check.ok and torch.equal(session.report.result, torch.full((3,), 5.0))
