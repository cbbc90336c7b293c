"""What a run does to the world outside its copies happens once, in the user's own run, never again in the
check, a toggle's proof, a custom_op sample or the fix search (issue 21, point 3; the fourth adversarial
pass): the process's environment, files written by torch.save, a module reached through importlib, and
what a custom_op's fake prints at every compile."""

from __future__ import annotations

import contextlib
import os
import textwrap

import pytest
import torch

import nbcompile

from nbhelpers import run_compile_cell


def _session(ip, body: str, backend: str = "eager") -> object:
    result = run_compile_cell(ip, f'--backend {backend} --no-panel --entry f --run "f(x)"', textwrap.dedent(body))
    assert result.error_in_exec is None, result.error_in_exec
    return nbcompile.last()


def test_a_helper_that_counts_in_the_environment_counts_the_cells_run_only(ip, monkeypatch):
    monkeypatch.setenv("NBC_OUTSIDE_CALLS", "0")
    session = _session(ip, """\
        import torch, os
        def helper(x):
            os.environ["NBC_OUTSIDE_CALLS"] = str(int(os.environ["NBC_OUTSIDE_CALLS"]) + 1)
            torch._dynamo.graph_break()
            return x * 2
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """)
    assert os.environ["NBC_OUTSIDE_CALLS"] == "1"
    assert "os.environ['NBC_OUTSIDE_CALLS']" in session.report.check.message  # named, and put back
    result = session.fix(budget_s=15)
    assert os.environ["NBC_OUTSIDE_CALLS"] == "1", result  # before: thousands, from the search's timing
    assert "not tried" in str(result)


def test_a_new_environment_variable_set_by_a_run_on_copies_is_removed(ip, monkeypatch):
    monkeypatch.delenv("NBC_OUTSIDE_NEW", raising=False)
    ip.run_cell("import os")
    session = _session(ip, """\
        import torch, os
        def f(x):
            os.environ["NBC_OUTSIDE_NEW"] = "set"
            return x.sin()
        x = torch.ones(4)
        """)
    os.environ.pop("NBC_OUTSIDE_NEW")  # the user's run set it; the check's run on copies set it again
    session.set("f", "disable")
    assert "NBC_OUTSIDE_NEW" not in os.environ


def test_a_custom_op_sample_run_never_writes_a_module_no_copy_holds(ip, make_module):
    metrics = make_module("nbc_outside_metrics", "calls = 0\n")
    session = _session(ip, """\
        import torch, importlib
        def helper(x):
            m = importlib.import_module("nbc_outside_metrics")
            m.calls = m.calls + 1
            return x * 2
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """)
    assert metrics.calls == 1 and "nbc_outside_metrics.calls" in session.report.check.message
    with pytest.raises(Exception, match="nbc_outside_metrics.calls"):
        session.set("helper", "custom_op")
    assert metrics.calls == 1  # before: 12 (the sample, meta and probe runs and opcheck were not watched)
    assert session.toggles["helper"] == "compile"


def test_a_custom_op_fake_says_nothing_at_each_compile(ip, capsys):
    session = _session(ip, """\
        import torch
        def helper(x):
            print("in helper")
            return x * 2
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """, backend="aot_eager")
    session.set("helper", "custom_op")
    capsys.readouterr()
    ip.user_ns["f"](torch.ones(7))  # a new shape: compiled again, the fake runs helper on fake tensors
    assert capsys.readouterr().out.count("in helper") == 1  # the real call's print, once (before: 4)


def test_torch_save_in_a_helper_writes_the_cells_file_only(ip, tmp_path):
    session = _session(ip, f"""\
        import torch, os
        def helper(x):
            torch.save(x, os.path.join({str(tmp_path)!r}, "dump_%d.pt" % len(os.listdir({str(tmp_path)!r}))))
            torch._dynamo.graph_break()
            return x * 2
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """)
    assert len(list(tmp_path.glob("dump_*.pt"))) == 1
    assert "writes to a file" in session.report.check.message
    with contextlib.suppress(Exception):
        session.fix(budget_s=15)
    assert len(list(tmp_path.glob("dump_*.pt"))) == 1  # before: 7 after the cell, hundreds after a search
