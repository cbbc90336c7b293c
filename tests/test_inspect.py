"""nbcompile.inspect leaves torch as it found it and sees every compile afresh."""

from __future__ import annotations

import logging

import pytest
import torch

import nbcompile
from nbcompile.capture import HUB


def add_sub_add(a):
    x = torch.add(a, 1)
    x = torch.sub(x, 1)
    x = torch.add(x, 1)
    return x


def helper_with_print(x):
    print("helper")
    return x * 2


def calls_helper(x):
    return helper_with_print(x.sin()).cos()


def user_compiled(x):
    return x.exp() - 1


def test_repeated_inspects_see_the_same_graphs():
    reports = [nbcompile.inspect(calls_helper, torch.ones(3), backend="eager") for _ in range(3)]
    shapes = {(r.graph_count, r.break_count, tuple(tuple(g.ops) for g in r.graphs)) for r in reports}
    assert len(shapes) == 1
    graph_count, break_count, _ = shapes.pop()
    assert graph_count == 3 and break_count == 2  # Dynamo reports the helper's print in both frames


def test_more_inspects_than_the_recompile_limit_still_compile():
    limit = torch._dynamo.config.recompile_limit
    for _ in range(limit + 2):
        report = nbcompile.inspect(add_sub_add, torch.ones(2), backend="eager")
    assert report.graph_count == 1 and report.recompile_count == 0


def test_other_functions_compiled_code_is_kept():
    compiled = torch.compile(user_compiled, backend="eager")
    compiled(torch.ones(3))
    entries = torch._dynamo.eval_frame._debug_get_cache_entry_list(user_compiled.__code__)
    assert len(entries) == 1
    nbcompile.inspect(user_compiled, torch.ones(3), backend="eager")
    nbcompile.inspect(add_sub_add, torch.ones(3), backend="eager")
    after = torch._dynamo.eval_frame._debug_get_cache_entry_list(user_compiled.__code__)
    assert [e.compile_id for e in after] == [e.compile_id for e in entries]


def test_handler_is_installed_only_while_needed():
    trace = logging.getLogger("torch.__trace")
    assert HUB._handler not in trace.handlers
    seen = []

    def probe(x):
        seen.append(HUB._handler in trace.handlers)
        return x

    nbcompile.inspect(torch.compiler.disable(probe), torch.ones(1), backend="eager", check=False)
    assert seen == [True]
    assert HUB._handler not in trace.handlers


def test_handler_is_removed_when_the_call_raises():
    def fails(x):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        nbcompile.inspect(fails, torch.ones(1), backend="eager")
    assert not HUB.installed


def test_unknown_backend_is_one_line_that_lists_valid():
    with pytest.raises(nbcompile.NbcompileError) as info:
        nbcompile.inspect(add_sub_add, torch.ones(1), backend="nope")
    assert "\n" not in str(info.value) and "eager" in str(info.value)


def test_compile_times_and_frames_are_recorded():
    report = nbcompile.inspect(add_sub_add, torch.ones(2), backend="aot_eager")
    assert len(report.frames) == 1
    assert report.frames[0].compile_time_s > 0
    assert report.compile_time_s == pytest.approx(report.frames[0].compile_time_s)
    assert report.graphs[0].op_count == 3


def test_nn_module_and_bound_method():
    lin = torch.nn.Linear(3, 2)
    report = nbcompile.inspect(lin, torch.ones(1, 3), backend="eager")
    assert report.graph_count == 1 and report.graphs[0].ops == ["linear"]

    class Holder:
        def go(self, x):
            return x.relu() + 1

    report = nbcompile.inspect(Holder().go, torch.ones(2), backend="eager")
    assert report.graphs[0].ops == ["relu", "add"]


def test_fullgraph_error_propagates():
    with pytest.raises(Exception) as info:
        nbcompile.inspect(calls_helper, torch.ones(3), backend="eager", fullgraph=True)
    assert "print" in str(info.value)
    assert not HUB.installed
