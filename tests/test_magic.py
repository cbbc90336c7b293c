"""`%%compile` and `%nbcompile` in a real IPython shell (backend eager: Dynamo's view)."""

from __future__ import annotations

import inspect
import logging
import textwrap

import pytest
import torch
from IPython.core.error import UsageError

import nbcompile
from nbcompile.capture import HUB
from nbcompile.magics import parse_cell_line

from nbhelpers import run_compile_cell

BREAK_CELL = textwrap.dedent(
    """\
    import torch
    def f(x):
        y = x.sin()
        print("break here")
        return y.cos()
    """
)


def test_cell_line_and_source_line_of_a_break(ip):
    result = run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(3))"', BREAK_CELL)
    assert result.success, result.error_in_exec
    report = nbcompile.last().report
    assert report.break_count == 1 and report.graph_count == 2
    brk = report.breaks[0]
    assert brk.cell_line == 5  # the %%compile line is line 1
    assert brk.source_line == 'print("break here")'
    assert brk.function == "f"
    assert brk.filename.startswith("<ipython-input-")
    assert brk.gb_id and brk.gb_id.startswith("GB")
    assert brk.doc_url.startswith("https://")
    assert torch.allclose(result.result, torch.ones(3).sin().cos())


def test_entry_is_rebound_to_compiled_and_source_is_inspectable(ip):
    run_compile_cell(ip, "--backend eager --no-panel", BREAK_CELL)
    session = nbcompile.last()
    assert session.entries == ["f"]
    f = ip.user_ns["f"]
    assert f is not session.workload.tracked["f"]
    assert hasattr(f, "_torchdynamo_orig_callable")
    assert "print(\"break here\")" in inspect.getsource(session.workload.tracked["f"])


def test_traceback_points_at_the_cell_lines(ip):
    body = "import torch\ndef boom(x):\n    y = x + 1\n    raise ValueError('bad')\n"
    run_compile_cell(ip, "--backend eager --no-panel", body)
    original = nbcompile.last().workload.tracked["boom"]
    with pytest.raises(ValueError) as info:
        original(torch.ones(1))
    frame = info.traceback[-1]
    assert frame.lineno + 1 == 5  # pytest's lineno is 0-based; cell line 5 holds the raise
    assert "raise ValueError" in str(frame.statement)


def test_body_that_raises_creates_no_session(ip):
    before = nbcompile.last()
    result = run_compile_cell(ip, "--backend eager --no-panel",
                              "def h(x):\n    return x\nraise RuntimeError('in body')\n")
    assert isinstance(result.error_in_exec, RuntimeError)
    assert nbcompile.last() is before
    assert not hasattr(ip.user_ns["h"], "_torchdynamo_orig_callable")  # defined like a normal cell, not compiled


def test_syntax_error_is_python_s_and_creates_no_session(ip):
    before = nbcompile.sessions()
    with pytest.raises(SyntaxError) as info:
        ip.run_cell_magic("compile", "--backend eager --no-panel", "def broken(x)\n    return x\n")
    assert info.value.lineno == 2  # cell line of the def
    assert nbcompile.sessions() == before


def test_unknown_backend_lists_valid_ones_and_leaves_namespace(ip):
    ip.user_ns.pop("untouched", None)
    with pytest.raises(UsageError) as info:
        ip.run_cell_magic("compile", "--backend nosuch --no-panel", "def untouched(x):\n    return x\n")
    message = str(info.value)
    assert "nosuch" in message and "eager" in message and "inductor" in message and "aot_eager" in message
    assert "\n" not in message
    assert "untouched" not in ip.user_ns


def test_every_option_is_parsed():
    opts = parse_cell_line(
        "--backend aot_eager --mode max-autotune --fullgraph --no-dynamic --entry a,b --entry c "
        "--disable d --allow e,f --disallow torch.sub --run 'a(torch.ones(2))' --bench --no-check --no-panel"
    )
    assert (opts.backend, opts.mode, opts.fullgraph, opts.dynamic) == ("aot_eager", "max-autotune", True, False)
    assert opts.entries == ["a", "b", "c"]
    assert (opts.disable, opts.allow, opts.disallow) == (["d"], ["e", "f"], ["torch.sub"])
    assert opts.run == "a(torch.ones(2))" and opts.bench and not opts.check and not opts.panel
    assert parse_cell_line("--dynamic").dynamic is True
    assert parse_cell_line("").dynamic is None and parse_cell_line("").check


@pytest.mark.parametrize("line", ["--mode fast", "--dynamic --no-dynamic", "--frobnicate"])
def test_bad_options_give_one_line_usage_error(line):
    with pytest.raises(UsageError) as info:
        parse_cell_line(line)
    assert "\n" not in str(info.value)


def test_mode_and_fullgraph_reach_torch_compile(ip):
    body = "import torch\ndef fg(x):\n    y = x.sin()\n    print('no')\n    return y\n"
    run_compile_cell(ip, "--backend eager --fullgraph --no-panel", body)
    with pytest.raises(Exception) as info:
        ip.user_ns["fg"](torch.ones(2))
    assert "print" in str(info.value) or "graph break" in str(info.value).lower()


def test_entries_are_the_roots_of_the_call_graph(ip):
    body = textwrap.dedent(
        """\
        import torch
        def leaf(x):
            return x.cos()
        def middle(x):
            return leaf(x) * 2
        def top(x):
            return middle(x.sin()) + 1
        def other(x):
            return torch.vmap(leaf)(x)
        """
    )
    run_compile_cell(ip, "--backend eager --no-panel", body)
    session = nbcompile.last()
    assert session.functions == ["leaf", "middle", "top", "other"]
    assert session.entries == ["top", "other"]
    out = ip.user_ns["top"](torch.ones(3))
    assert session.report.graph_count == 1 and session.report.break_count == 0
    assert session.report.graphs[0].ops == ["sin", "cos", "mul", "add"]
    assert torch.allclose(out, (torch.ones(3).sin().cos() * 2) + 1)


def test_entry_option_and_unknown_entry(ip):
    body = "import torch\ndef a(x):\n    return x + 1\ndef b(x):\n    return a(x) * 3\n"
    run_compile_cell(ip, "--backend eager --no-panel --entry a", body)
    assert nbcompile.last().entries == ["a"]
    with pytest.raises(UsageError) as info:
        ip.run_cell_magic("compile", "--backend eager --no-panel --entry nope", body)
    assert "nope" in str(info.value) and "a" in str(info.value)


def test_nn_module_methods_are_tracked_and_instance_is_the_entry(ip):
    body = textwrap.dedent(
        """\
        import torch
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 4)
            def helper(self, x):
                return torch.relu(x)
            def forward(self, x):
                return self.helper(self.lin(x))
        net = Net()
        """
    )
    run_compile_cell(ip, '--backend eager --no-panel --run "net(torch.ones(2, 4))"', body)
    session = nbcompile.last()
    assert {"Net.__init__", "Net.helper", "Net.forward"} <= set(session.functions)
    assert session.entries == ["net"]
    assert isinstance(ip.user_ns["net"], torch._dynamo.eval_frame.OptimizedModule)
    assert session.report.graph_count == 1
    assert session.report.graphs[0].ops == ["linear", "relu"]


def test_module_class_without_instance_compiles_forward_on_the_class(ip):
    body = textwrap.dedent(
        """\
        import torch
        class Twice(torch.nn.Module):
            def forward(self, x):
                return x * 2
        """
    )
    run_compile_cell(ip, "--backend eager --no-panel", body)
    session = nbcompile.last()
    assert session.entries == ["Twice.forward"]
    ip.run_cell("out = Twice()(torch.ones(3))")
    assert session.report.graph_count == 1 and session.report.graphs[0].ops == ["mul"]


def test_calls_from_another_cell_are_captured(ip):
    body = "import torch\ndef g(x):\n    return x * 2\n"
    run_compile_cell(ip, "--backend eager --no-dynamic --no-panel", body)
    session = nbcompile.last()
    assert session.report.graph_count == 0  # nothing ran yet
    ip.run_cell("g(torch.ones(3))")
    ip.run_cell("g(torch.ones(5))")
    assert session.report.graph_count == 2
    assert session.report.recompile_count == 1
    assert "size mismatch" in session.report.recompiles[0].reason


def test_status_and_report_line_magics(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(3))"', BREAK_CELL)
    table = ip.run_line_magic("nbcompile", "status")
    text = repr(table)
    assert text.splitlines()[0].split() == ["function", "toggle", "entry", "frames", "graphs", "breaks", "recompiles"]
    row = text.splitlines()[1].split()
    assert row[:3] == ["f", "compile", "yes"] and row[4] == "2" and row[5] == "1"
    assert ip.run_line_magic("nbcompile", "report") is nbcompile.last().report
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("nbcompile", "frobnicate")
    assert "status" in str(info.value) and "reset" in str(info.value)


def test_reset_restores_functions_and_handler(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(3))"', BREAK_CELL)
    session = nbcompile.last()
    original = session.workload.tracked["f"]
    # where torch has no cache regions (torch_compat.CONFIG_COPIES), the compiled code sits on the copies' codes
    codes = [original.__code__, *session.workload.copy_codes()]
    assert HUB.installed
    assert any(torch._dynamo.eval_frame._debug_get_cache_entry_list(code) for code in codes)
    ip.run_line_magic("nbcompile", "reset")
    assert ip.user_ns["f"] is original
    assert not HUB.installed
    assert nbcompile.sessions() == [] and nbcompile.last() is None
    assert [torch._dynamo.eval_frame._debug_get_cache_entry_list(code) for code in codes] == [[]] * len(codes)
    assert HUB._handler not in logging.getLogger("torch.__trace").handlers


def test_run_value_is_the_cell_value(ip):
    result = run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.zeros(2)).sum().item()"', BREAK_CELL)
    assert result.result == pytest.approx(2.0)
    assert nbcompile.last().report.result == pytest.approx(2.0)


def test_plain_ipython_cell_function_gets_its_cell_line(ip):
    ip.run_cell("import torch\ndef plain(x):\n    y = x + 1\n    print('p')\n    return y\n")
    report = nbcompile.inspect(ip.user_ns["plain"], torch.ones(2), backend="eager")
    assert report.breaks[0].cell_line == 4
    assert report.breaks[0].filename.startswith("<ipython-input-")


def test_report_for_one_function(ip):
    from nbhelpers import run_compile_cell

    body = ("import torch\ndef helper(x):\n    print('h')\n    return x * 2\n"
            "def outer(x):\n    return helper(x.sin()).cos()\n")
    run_compile_cell(ip, '--backend eager --no-panel --run "outer(torch.ones(3))"', body)
    whole = ip.run_line_magic("nbcompile", "report")
    part = ip.run_line_magic("nbcompile", "report helper")
    assert part.break_count == whole.break_count == 2 and part.title.endswith("[helper]")
    assert {f.function for f in part.frames} <= {f.function for f in whole.frames}
    assert all(g.function == "helper" or g.function.startswith("torch_dynamo_resume_in_helper") for g in part.graphs)
    assert ip.run_line_magic("nbcompile", "report outer").break_count == 0
    with pytest.raises(UsageError, match="valid: helper, outer"):
        ip.run_line_magic("nbcompile", "report nope")
