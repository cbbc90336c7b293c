"""Toggles apply and undo exactly: graphs, registries and other functions' code."""

from __future__ import annotations

import pytest
import torch
from IPython.core.error import UsageError

import nbcompile
from nbcompile.core import torch_compat

from nbhelpers import ADD_SUB_ADD_CELL, HELPER_CELL, run_compile_cell


def seed_fn(a):
    x = torch.add(a, 1)
    x = torch.sub(x, 1)
    x = torch.add(x, 1)
    return x


def test_disallow_torch_sub_splits_and_round_trips_registries(ip):
    before = torch_compat.registries_snapshot()
    run_compile_cell(ip, '--backend eager --no-panel --run "fn(torch.ones(3))"', ADD_SUB_ADD_CELL)
    session = nbcompile.last()
    assert session.report.graph_count == 1
    session.set("torch.sub", "disallow_in_graph")
    assert session.report.graph_count == 2
    assert [g.ops for g in session.report.graphs] == [["add"], ["add"]]
    assert session.toggles["torch.sub"] == "disallow_in_graph"
    session.set("torch.sub", "compile")
    assert [g.ops for g in session.report.graphs] == [["add", "sub", "add"]]
    assert torch_compat.registries_snapshot() == before


def test_allow_in_graph_round_trip_leaves_no_registration(ip):
    before = torch_compat.registries_snapshot()
    run_compile_cell(ip, '--backend eager --no-panel --run "caller(torch.ones(3))"', HELPER_CELL)
    session = nbcompile.last()
    graphs = [g.ops for g in session.report.graphs]
    session.set("helper", "allow_in_graph")
    assert [g.ops for g in session.report.graphs] == [["sin", "helper", "add"]]
    assert torch_compat.registries_snapshot() != before
    session.set("helper", "compile")
    assert [g.ops for g in session.report.graphs] == graphs
    assert torch_compat.registries_snapshot() == before


def test_disable_via_the_cell_line_and_reset_undoes_it(ip):
    run_compile_cell(ip, '--backend eager --disable helper --no-panel --run "caller(torch.ones(3))"', HELPER_CELL)
    session = nbcompile.last()
    assert session.toggles["helper"] == "disable"
    assert session.report.break_count >= 1
    assert all("cos" not in g.ops for g in session.report.graphs)
    original = session.workload.tracked["helper"]
    assert ip.user_ns["helper"] is not original
    ip.run_line_magic("nbcompile", "reset")
    assert ip.user_ns["helper"] is original


def test_other_compiled_functions_keep_their_code(ip):
    other = torch.compile(seed_fn, backend="eager")
    other(torch.ones(2))
    entries = [e.compile_id for e in torch._dynamo.eval_frame._debug_get_cache_entry_list(seed_fn.__code__)]
    run_compile_cell(ip, '--backend eager --no-panel --run "caller(torch.ones(3))"', HELPER_CELL)
    nbcompile.last().set("helper", "disable")
    nbcompile.last().set("helper", "compile")
    after = [e.compile_id for e in torch._dynamo.eval_frame._debug_get_cache_entry_list(seed_fn.__code__)]
    assert after == entries


def test_bad_toggles_are_one_line_errors_and_change_nothing(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "caller(torch.ones(3))"', HELPER_CELL)
    session = nbcompile.last()
    report = session.report
    for line, words in [
        ("set nope disable", ["nope", "helper", "caller"]),
        ("set helper sideways", ["sideways", "compile", "disable", "allow_in_graph"]),
        ("set helper disallow_in_graph", ["disable"]),
        ("set torch.nosuch disallow_in_graph", ["torch.nosuch"]),
        ("set torch.sub disable", ["disallow_in_graph"]),
    ]:
        with pytest.raises(UsageError) as info:
            ip.run_line_magic("nbcompile", line)
        assert "\n" not in str(info.value)
        assert all(w in str(info.value) for w in words), (line, str(info.value))
    assert session.report is report and set(session.toggles.values()) == {"compile"}


def test_a_toggle_that_fails_to_compile_keeps_the_previous_state(ip):
    body = "import torch\ndef noisy(x):\n    print('x')\n    return x + 1\ndef top(x):\n    return noisy(x) * 2\n"
    run_compile_cell(ip, '--backend eager --fullgraph --allow noisy --no-panel --run "top(torch.ones(2))"', body)
    session = nbcompile.last()
    assert session.report.graph_count == 1 and session.report.graphs[0].ops == ["noisy", "mul"]
    report = session.report
    with pytest.raises(nbcompile.NbcompileError) as info:
        session.set("noisy", "compile")  # fullgraph cannot trace the print
    assert "kept noisy -> allow_in_graph" in str(info.value) and "\n" not in str(info.value)
    assert session.toggles["noisy"] == "allow_in_graph" and session.report is report
    assert torch.equal(session.run(), torch.full((2,), 4.0))


def test_inspect_toggles_by_object_and_name():
    from oracle_cases import _inner, nested

    before = torch_compat.registries_snapshot()
    plain = nbcompile.inspect(nested, torch.ones(2), backend="eager")
    disabled = nbcompile.inspect(nested, torch.ones(2), backend="eager", toggles={_inner: "disable"})
    by_name = nbcompile.inspect(nested, torch.ones(2), backend="eager", toggles={"_inner": "disable"})
    assert plain.break_count == 2
    assert [g.ops for g in disabled.graphs] == [g.ops for g in by_name.graphs] == [["add"], ["mul"]]
    import oracle_cases

    assert oracle_cases._inner is _inner  # the global is given back
    assert torch_compat.registries_snapshot() == before


def test_set_takes_objects_as_well_as_names(ip):
    before = torch_compat.registries_snapshot()
    run_compile_cell(ip, '--backend eager --no-panel --run "fn(torch.ones(3))"', ADD_SUB_ADD_CELL)
    session = nbcompile.last()
    session.set(torch.sub, "disallow_in_graph")
    assert session.toggles == {"fn": "compile", "torch.sub": "disallow_in_graph"}
    session.set(torch.sub, "compile")
    assert torch_compat.registries_snapshot() == before
    assert nbcompile.core.names.torch_name(torch.nn.functional.gelu) == "torch.nn.functional.gelu"
    with pytest.raises(nbcompile.NbcompileError, match="public dotted name"):
        session.set(object(), "disallow_in_graph")
