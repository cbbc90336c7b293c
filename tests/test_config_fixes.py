"""Config fixes (issue 23, point 1): ``%%compile --dynamo-config NAME=VALUE``, ``Session.configure(
dynamo_config=...)``, applied around the session's own compiles only and restored exactly, tried by the
fix search, and written by the export as code. Real IPython shell, backend eager (Dynamo's view)."""

from __future__ import annotations

import warnings

import pytest
import torch
from IPython.core.error import UsageError

import nbcompile
from nbcompile.core import dynconfig
from nbcompile.core.errors import NbcompileError
from nbcompile.magics import parse_cell_line

from nbhelpers import ITEM_PRINT_CELL, run_compile_cell


def _config_now() -> tuple[bool, set, bool]:
    config = torch._dynamo.config
    return config.capture_scalar_outputs, set(config.reorderable_logging_functions), config.nested_graph_breaks


def test_the_line_parses_literals_and_sets_of_functions_and_refuses_the_rest():
    opts = parse_cell_line("--backend eager --dynamo-config capture_scalar_outputs=True "
                           "--dynamo-config reorderable_logging_functions=print,warnings.warn")
    assert opts.dynamo_config == {"capture_scalar_outputs": True,
                                  "reorderable_logging_functions": frozenset({print, warnings.warn})}
    for line, said in [("--dynamo-config no_such_config=1", "valid"),
                       ("--dynamo-config capture_scalar_outputs=1", "True or False"),
                       ("--dynamo-config capture_scalar_outputs", "NAME=VALUE"),
                       ("--dynamo-config reorderable_logging_functions=not_a_name", "not a name"),
                       ("--dynamo-config recompile_limit=x", "literal")]:
        with pytest.raises(UsageError) as info:
            parse_cell_line(line)
        assert said in str(info.value) and "\n" not in str(info.value)


def test_a_cell_config_reaches_its_own_compiles_only_and_is_restored(ip):
    before = _config_now()
    result = run_compile_cell(ip, '--backend eager --no-panel --dynamo-config capture_scalar_outputs=True '
                                  '--dynamo-config reorderable_logging_functions=print --run "f(x)"', ITEM_PRINT_CELL)
    assert result.success, result.error_in_exec
    session = nbcompile.last()
    assert session.report.break_count == 0 and session.report.graph_count == 1
    assert session.report.dynamo_config == {"capture_scalar_outputs": "True",
                                            "reorderable_logging_functions": "{print}"}
    assert "capture_scalar_outputs=True" in str(session.report)
    assert _config_now() == before  # nothing left set between calls
    # a function compiled outside the session, called after it, still breaks at .item(): the config was not global
    def other(x):
        return x * x.sum().item()
    explained = torch._dynamo.explain(other)(torch.ones(3))
    assert explained.graph_break_count == 1
    # the session's own later calls (another cell) still get it: a new input shape recompiles with it
    ip.run_cell("out = f(torch.randn(5))")
    assert session.report.break_count == 0
    assert _config_now() == before


def test_the_users_own_registrations_are_kept_and_added_to(ip):
    def mine(*args):
        return None
    torch._dynamo.config.reorderable_logging_functions.add(mine)
    try:
        seen = []
        with dynconfig.applied({"reorderable_logging_functions": frozenset({print})}):
            seen = set(torch._dynamo.config.reorderable_logging_functions)
        assert seen == {mine, print}
        assert torch._dynamo.config.reorderable_logging_functions == {mine}
    finally:
        torch._dynamo.config.reorderable_logging_functions.discard(mine)


def test_configure_sets_and_clears_and_a_bad_value_keeps_the_previous(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "f(x)"', ITEM_PRINT_CELL)
    session = nbcompile.last()
    assert session.report.break_count == 3
    session.configure(dynamo_config={"capture_scalar_outputs": True})
    assert session.report.break_count == 1 and session.options.dynamo_config == {"capture_scalar_outputs": True}
    with pytest.raises(NbcompileError) as info:
        session.configure(dynamo_config={"capture_scalar_outputs": "yes"})
    assert "True or False" in str(info.value)
    assert session.options.dynamo_config == {"capture_scalar_outputs": True} and session.report.break_count == 1
    session.configure(dynamo_config={})
    assert session.report.break_count == 3
    assert _config_now()[0] is False


def test_the_search_finds_the_config_fixes_and_the_export_writes_them(ip):
    before = _config_now()
    run_compile_cell(ip, '--backend eager --no-panel --run "f(x)"', ITEM_PRINT_CELL)
    session = nbcompile.last()
    assert session.report.break_count == 3
    result = session.fix(budget_s=600)
    assert result.best is not None and result.best.breaks == 0 and result.best.check_ok, result
    assert result.best.options["_config"]["capture_scalar_outputs"] is True
    assert print in result.best.options["_config"]["reorderable_logging_functions"]
    assert "capture_scalar_outputs=True" in result.best.describe()
    assert session.report.break_count == 0 and result.applied
    assert _config_now() == before
    code = session.export()
    assert "torch._dynamo.config.capture_scalar_outputs = True" in code
    assert "torch._dynamo.config.reorderable_logging_functions |= {print}" in code
    # the exported lines, run in a fresh namespace with the cell, give the session's graphs
    namespace: dict = {}
    exec(compile(ITEM_PRINT_CELL, "<cell>", "exec"), namespace)
    saved = (torch._dynamo.config.capture_scalar_outputs, set(torch._dynamo.config.reorderable_logging_functions),
             torch._dynamo.config.nested_graph_breaks, torch._dynamo.config.capture_dynamic_output_shape_ops)
    try:
        exec(compile(code.replace("backend='eager'", "backend='eager'"), "<export>", "exec"), namespace)
        explained = torch._dynamo.explain(namespace["f"]._torchdynamo_orig_callable)(namespace["x"])
        assert explained.graph_break_count == 0
    finally:
        torch._dynamo.config.capture_scalar_outputs = saved[0]
        torch._dynamo.config.reorderable_logging_functions = saved[1]
        torch._dynamo.config.nested_graph_breaks = saved[2]
        torch._dynamo.config.capture_dynamic_output_shape_ops = saved[3]
