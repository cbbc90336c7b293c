"""The recompile doctor, part one: each recompile says what changed, with both values, as the user
writes it, and where the name comes from in the cell; a frame past recompile_limit is a fallback.

Each scenario compiles in a `%%compile` cell and recompiles from a later cell, as in a notebook.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

import nbcompile
from nbcompile.capture import guards
from nbcompile.core import torch_compat

from nbhelpers import GRAPH_BREAK_HELPER_CELL, run_compile_cell

CELL = textwrap.dedent(
    """\
    import torch
    SCALE = 2.0
    class Cfg:
        pass
    class Other:
        pass
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.drop = torch.nn.Dropout(0.5)
            self.k = 1
        def forward(self, x):
            return self.drop(self.lin(x)) * self.k
    def f(x):
        return x.sin() * 2
    def scaled(x):
        return x * SCALE
    def times(x, n):
        return x * n
    def typed(x, cfg):
        return x + (1 if isinstance(cfg, Cfg) else 2)
    def total(xs):
        return sum(x.sin() for x in xs)
    def pick(x, cfg):
        return x * cfg["a"]
    net = Net()
    """
)
#: cell lines (the magic line is line 1)
LINE = {"SCALE": 3, "self.k": 13, "f": 16, "scaled": 18, "times": 20, "typed": 22, "total": 24, "pick": 26}


@pytest.fixture
def cell(ip):
    run_compile_cell(ip, "--backend eager --no-panel --entry f,scaled,times,typed,total,pick,net", CELL)
    return ip


def _changes(ip, code: str, function: str):
    ip.run_cell(code)
    report = nbcompile.last().report
    recompiles = [r for r in report.recompiles if r.function == function]
    assert recompiles, (report.summary(), [r.reason for r in report.recompiles])
    return recompiles[-1], [(c.subject, c.before, c.after) for c in recompiles[-1].changes]


def test_tensor_size_with_both_values_and_the_parameter_line(cell):
    rec, changes = _changes(cell, "f(torch.ones(3)); f(torch.ones(5))", "f")
    assert changes == [("x.shape[0]", "3", "5")]
    assert rec.cell_line == LINE["f"]
    assert "x.shape[0]: 3 -> 5" in str(nbcompile.last().report)


def test_dynamic_shape_guard_and_specialisation_to_one(cell):
    _, changes = _changes(cell, "[f(torch.ones(n)) for n in (3, 5, 1)]", "f")
    assert ("x.shape[0]", ">= 2", "1") in changes  # the dynamic graph covers sizes >= 2; 1 is specialised


def test_dtype_and_requires_grad(cell):
    _, changes = _changes(cell, "f(torch.ones(3)); f(torch.ones(3, dtype=torch.float64))", "f")
    assert changes[0] == ("x.dtype", "torch.float32", "torch.float64")
    nbcompile.last().set("f", "compile")  # a fresh cache
    _, changes = _changes(cell, "f(torch.ones(3)); f(torch.ones(3, requires_grad=True))", "f")
    assert changes[0] == ("x.requires_grad", "False", "True")


def test_stride_with_static_shapes(ip):
    run_compile_cell(ip, "--backend eager --no-dynamic --no-panel", "import torch\ndef f(x):\n    return x.sin()\n")
    _, changes = _changes(ip, "f(torch.ones(4, 4)); f(torch.ones(4, 4).t())", "f")
    assert changes[0] == ("x.stride()[0]", "4", "1")


def test_python_scalars_and_globals_with_the_line_they_come_from(cell):
    rec, changes = _changes(cell, "times(torch.ones(3), 2); times(torch.ones(3), 3)", "times")
    assert changes == [("n", "2", "3")] and rec.cell_line == LINE["times"]
    rec, changes = _changes(cell, "scaled(torch.ones(3)); SCALE = 3.0; scaled(torch.ones(3))", "scaled")
    assert changes == [("SCALE", "2.0", "3.0")] and rec.cell_line == LINE["SCALE"]


def test_type_changes_name_the_types_never_their_ids(cell):
    _, changes = _changes(cell, "typed(torch.ones(3), Cfg()); typed(torch.ones(3), Other())", "typed")
    assert changes == [("type(cfg)", "Cfg", "Other")]


def test_module_attributes_and_training_mode(cell):
    rec, changes = _changes(cell, "net(torch.ones(2, 4)); net.k = 2; net(torch.ones(2, 4))", "forward")
    assert changes == [("self.k", "1", "2")] and rec.cell_line == LINE["self.k"]
    _, changes = _changes(cell, "net.eval(); net(torch.ones(2, 4))", "forward")
    assert ("self.drop.training", "True", "False") in changes


def test_list_lengths_and_dict_items(cell):
    _, changes = _changes(cell, "total([torch.ones(3)] * 2); total([torch.ones(3)] * 3)", "total")
    assert changes == [("len(xs)", "2", "3")]
    _, changes = _changes(cell, "pick(torch.ones(3), {'a': 1}); pick(torch.ones(3), {'a': 2})", "pick")
    assert changes == [("cfg['a']", "1", "2")]


def test_device_changes():
    if not torch.cuda.is_available():
        pytest.skip("needs a second device (CUDA) to move a tensor to")
    change = guards.change_of("tensor 'x' device mismatch. expected cpu, actual cuda:0", lambda _n: guards.MISSING)
    assert change is not None and (change.subject, change.before, change.after) == ("x.device", "cpu", "cuda:0")


def test_the_recompile_limit_is_a_fallback_with_its_fix(ip):
    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = 3
    try:
        run_compile_cell(ip, "--backend eager --no-dynamic --no-panel", "import torch\ndef f(x):\n    return x.cos()\n")
        ip.run_cell("for n in range(2, 8):\n    f(torch.ones(n))")
    finally:
        torch._dynamo.config.recompile_limit = limit
    report = nbcompile.last().report
    (fallback,) = report.fallbacks
    assert fallback.kind == "recompile_limit" and fallback.function == "f"
    assert "hit recompile_limit (3)" in fallback.reason and "x.shape[0]: 4 -> 5" in fallback.reason
    assert fallback.fixes[0].command == "torch._dynamo.maybe_mark_dynamic(x, 0)"
    assert report.recompile_count == 2 and report.graph_count == 3  # the failed attempt compiled nothing
    assert "1 FALLBACK to eager" in report.summary()
    assert "recompile_limit" in report._repr_mimebundle_()["text/html"]
    assert "recompile_limit" in nbcompile.last().panel().status.value
    data = report.to_json()
    assert data["fallbacks"][0]["kind"] == "recompile_limit" and data["recompiles"][0]["changes"]


def test_values_are_read_without_running_user_code():
    class Sneaky:
        ran = False

        @property
        def k(self):
            Sneaky.ran = True
            return 1

    lookup = guards.frame_lookup({"obj": Sneaky()}, {})
    change = guards.change_of("obj.k == 1", lookup)
    assert change is not None and change.after == "?" and not Sneaky.ran


def test_a_report_diff_after_a_toggle(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(3))"', GRAPH_BREAK_HELPER_CELL)
    session = nbcompile.last()
    before = session.report
    session.set("helper", "disable")
    diff = before.diff(session.report)
    assert diff.counts["break"][0] > diff.counts["break"][1] and diff.counts["graph"] == (3, 2)
    added, removed = diff.breaks
    assert any("Call to `torch._dynamo.graph_break()`" in b for b in removed)
    assert any("helper" in g and "mul" in g for g in diff.graphs[1])  # helper's graph is gone
    assert diff.summary().startswith("graphs 3 -> 2, breaks") and diff.changed
    assert not before.diff(before).changed and before.diff(before).summary() == "nothing changed"
    assert "speedup 1.50x -> 2.00x" in before.diff(session.report, speed=(1.5, 2.0)).summary()
    panel = session.panel()
    panel.function_rows["helper"].value = "compile"
    assert "what changed" in panel.status.value and "+ graph helper" in panel.status.value
    panel.fullgraph.value = False  # unchanged value: no event
    panel.dynamic.value = "True"
    assert "dynamic=True" in panel.status.value


def test_guard_cost_on_a_module_with_fifty_parameters(ip):
    body = textwrap.dedent(
        """\
        import torch
        class Deep(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(25))
            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x
        deep = Deep()
        """
    )
    run_compile_cell(ip, '--backend eager --no-panel --entry deep --run "deep(torch.randn(2, 8))"', body)
    session = nbcompile.last()
    (frame,) = session.report.frames
    assert sum(p.numel() > 0 for p in session.namespace["deep"].parameters()) == 50
    assert frame.guard_count > 50 and frame.guard_check_us is not None and frame.guard_latency_us is not None
    assert 0 < frame.guard_check_us < 10_000  # timed: warm checks of real guards take microseconds
    from nbcompile.model.render import guard_cost_text

    text = guard_cost_text(frame, call_s=frame.guard_check_us * 1e-6 * 5)  # a call 5x the guard check
    assert "20% of the call (over 10%" in text and "mostly " in text
    assert "guards checked in" in guard_cost_text(frame) and "of the call" not in guard_cost_text(frame)
    panel = session.panel()
    assert "guards checked in" in panel.guards_html.value
    assert "guard cost" in session.report._repr_mimebundle_()["text/html"]


def test_a_shape_recompile_gets_a_proven_fix(ip):
    run_compile_cell(ip, '--backend eager --no-dynamic --no-panel --run "[f(torch.ones(n)) for n in (3, 5, 7)]"',
                     "import torch\ndef f(x):\n    return x.sin() * 2\n")
    report = nbcompile.last().report
    assert report.recompile_count == 2
    fix = report.recompiles[0].fixes[0]
    assert fix.command == "--dynamic" and fix.verified is True
    assert fix.effect == "recompiles 2 -> 0, graphs 3 -> 1, check ok"
    mark = next(f for f in report.recompiles[0].fixes if f.command == "torch._dynamo.maybe_mark_dynamic(x, 0)")
    assert mark.verified is True and mark.effect == "recompiles 2 -> 0, graphs 3 -> 1, check ok"
    assert "proven: recompiles 2 -> 0" in str(report)
    nbcompile.last().configure(dynamic=True)
    assert nbcompile.last().report.recompile_count == 0  # what the trial said


def test_a_global_recompile_from_a_later_cell_says_why_it_was_not_tried(cell):
    rec, _ = _changes(cell, "scaled(torch.ones(3)); SCALE = 3.0; scaled(torch.ones(3))", "scaled")
    (fix,) = rec.fixes
    assert fix.command == "SCALE = torch.tensor(SCALE)" and "0-dim tensor is data, not a guard" in fix.why
    assert fix.verified is None and fix.effect.startswith("not tried")


def test_a_parameter_number_is_not_offered_the_global_fix(cell):
    rec, _ = _changes(cell, "times(torch.ones(3), 2); times(torch.ones(3), 3)", "times")
    assert not any("torch.tensor" in f.command for f in rec.fixes)


SCHEDULE = textwrap.dedent(
    """\
    import torch
    SCALE = 1
    def scaled(x):
        return x * SCALE
    def train():
        global SCALE
        out = []
        for step in range(4):
            SCALE = 1 + step
            out.append(scaled(torch.ones(3)))
        return out
    """
)


def test_a_global_recompile_gets_a_proven_fix(ip):
    run_compile_cell(ip, '--backend eager --no-panel --entry scaled --run "train()"', SCHEDULE)
    report = nbcompile.last().report
    assert report.recompile_count == 3 and report.recompiles[0].changes[0].subject == "SCALE"
    (fix,) = report.recompiles[0].fixes
    assert fix.command == "SCALE = torch.tensor(SCALE)"
    assert fix.verified is True and fix.effect == "recompiles 3 -> 0, graphs 4 -> 1, check ok"
    assert ip.user_ns["SCALE"] == 4 and type(ip.user_ns["SCALE"]) is int  # the trial gave the int back
    # what the trial claims, as the user would write it
    ip.run_cell("train_scaled = []\nfor step in range(4):\n    SCALE = torch.tensor(1 + step)\n"
                "    train_scaled.append(scaled(torch.ones(3)))")
    report = nbcompile.last().report  # one compile for the tensor, then none for its four values
    assert report.recompile_count == 4 and report.recompiles[-1].changes[0].after.startswith("Tensor")


def test_a_global_used_in_an_if_is_tried_and_refused(ip):
    body = SCHEDULE.replace("x * SCALE", "x * 2 if SCALE > 2 else x - 1")
    run_compile_cell(ip, '--backend eager --no-panel --entry scaled --run "train()"', body)
    fix = nbcompile.last().report.recompiles[0].fixes[0]
    assert fix.command == "SCALE = torch.tensor(SCALE)" and fix.verified is False, fix.effect
    assert "breaks 0 -> " in fix.effect  # the tensor in the `if` breaks the graph


def test_a_module_int_attribute_recompile_gets_proven_fixes(ip):
    body = textwrap.dedent(
        """\
        import torch
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.k = 1
            def forward(self, x):
                return x * self.k
        net = Net()
        def sweep():
            out = []
            for k in (1, 2, 3, 4):
                net.k = k
                out.append(net(torch.ones(3)))
            return out
        """
    )
    run_compile_cell(ip, '--backend eager --no-panel --entry net --run "sweep()"', body)
    report = nbcompile.last().report
    assert report.recompile_count == 3 and report.recompiles[0].changes[0].subject == "self.k"
    fixes = {f.command: f for f in report.recompiles[0].fixes}
    flag = fixes["torch._dynamo.config.allow_unspec_int_on_nn_module = True"]
    assert flag.verified is True and flag.effect.startswith("recompiles 3 -> 0,"), flag.effect
    held = fixes["self.k = torch.tensor(self.k)"]
    assert held.verified is True and held.effect.startswith("recompiles 3 -> 0,"), held.effect
    assert ip.user_ns["net"].k == 4 and not torch._dynamo.config.allow_unspec_int_on_nn_module


def test_mark_static_is_tried_and_said_not_to_help(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "[f(torch.ones(n)) for n in (3, 5, 1)]"',
                     "import torch\ndef f(x):\n    return x.sin() * 2\n")
    report = nbcompile.last().report
    fixes = {f.command: f for r in report.recompiles for f in r.fixes}
    static = fixes["torch._dynamo.mark_static(x, 0)"]
    assert static.verified is False and "recompiles" in static.effect
    unbacked = fixes["torch._dynamo.decorators.mark_unbacked(x, 0)"]
    assert unbacked.verified is not None, unbacked.effect  # tried


def test_half_the_recompile_limit_is_warned_before_the_fallback(ip):
    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = 6
    try:
        run_compile_cell(ip, "--backend eager --no-dynamic --no-panel", "import torch\ndef f(x):\n    return x.tan()\n")
        ip.run_cell("for n in range(2, 4):\n    f(torch.ones(n))")
        assert "cache entries" not in str(nbcompile.last().report)  # 2 of 6
        ip.run_cell("f(torch.ones(4))")
        report = nbcompile.last().report
        assert "f has 3 of 6 cache entries (recompile_limit): at 6 it runs eagerly" in str(report)
        assert "3 of 6 cache entries" in nbcompile.last().panel().status.value
    finally:
        torch._dynamo.config.recompile_limit = limit


def test_the_recompiles_tab_is_a_timeline_with_the_limit(ip):
    import plotly.graph_objects as go

    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = 3
    try:
        run_compile_cell(ip, "--backend eager --no-dynamic --no-panel", "import torch\ndef f(x):\n    return x.exp()\n")
        ip.run_cell("for n in range(2, 7):\n    f(torch.ones(n))")
        panel = nbcompile.last().panel()
        figure = go.Figure(panel.timeline_dict)  # validated by plotly
    finally:
        torch._dynamo.config.recompile_limit = limit
    (line, fallback) = figure.data
    assert list(line.x) == [0, 1, 2] and set(line.y) == {"f"} and line.name == "f: 3/3 cache entries"
    assert line.text[1].endswith("x.shape[0]: 2 -> 3") and "first compile" in line.text[0]
    assert fallback.name == "f: recompile_limit" and fallback.marker.symbol == "x"
    (output,) = panel.timeline_output.outputs
    assert "text/html" in output["data"]  # what an exported page draws


def test_cudagraph_skips_read_as_fallbacks_with_their_fix():
    from nbcompile.capture import cudagraph_fallback

    fallback = cudagraph_fallback("step", "skipping cudagraphs due to mutated inputs (1 instances). Found from :")
    assert fallback.kind == "cudagraph_skip" and "mutated inputs" in fallback.reason
    assert "in place" in fallback.fixes[0].why


@pytest.mark.gpu
@pytest.mark.slow
def test_reduce_overhead_with_an_input_mutation_is_a_cudagraph_fallback(ip):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA (reduce-overhead records CUDA graphs)")
    body = "import torch\ndef step(x):\n    x.add_(1)\n    return x * 2\n"
    run_compile_cell(ip, '--mode reduce-overhead --no-panel --run "step(torch.ones(8, device=\'cuda\'))"', body)
    (fallback,) = [f for f in nbcompile.last().report.fallbacks if f.kind == "cudagraph_skip"]
    assert "mutat" in fallback.reason


def test_the_guards_tab_highlights_the_guard_that_failed(cell):
    _changes(cell, "scaled(torch.ones(3)); SCALE = 3.0; scaled(torch.ones(3))", "scaled")
    panel = nbcompile.last().panel()
    marked = re.findall(r"<mark[^>]*>(.*?)</mark>", panel.guards_html.value)
    assert marked and all("SCALE" in m for m in marked)


def test_an_object_identity_change_names_the_new_objects_type(ip):
    body = "import torch\ndef apply(x, fn):\n    return fn(x) + 1\n"
    run_compile_cell(ip, "--backend eager --no-panel", body)
    _, changes = _changes(ip, "apply(torch.ones(3), torch.sin); apply(torch.ones(3), torch.cos)", "apply")
    assert changes[0][0] == "fn" and changes[0][1] == "the object compiled for"
    assert changes[0][2] == "another builtin_function_or_method"


def test_the_recompile_limit_fallback_fixes_are_tried(ip):
    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = 3
    try:
        run_compile_cell(ip, '--backend eager --no-dynamic --no-panel --run "[f(torch.ones(n)) for n in range(2, 8)]"',
                         "import torch\ndef f(x):\n    return x.cos()\n")
        (fallback,) = nbcompile.last().report.fallbacks
    finally:
        torch._dynamo.config.recompile_limit = limit
    fixes = {f.command: f for f in fallback.fixes}
    mark = fixes["torch._dynamo.maybe_mark_dynamic(x, 0)"]
    assert mark.verified is True and mark.effect.startswith("fallbacks 1 -> 0, recompiles 2 -> 0"), mark.effect
    raised = fixes["torch._dynamo.config.recompile_limit = 16"]
    assert raised.verified is True and raised.effect.startswith("fallbacks 1 -> 0, recompiles 2 -> 5"), raised.effect
    assert torch._dynamo.config.recompile_limit == limit  # the trial's config patch is undone
    assert fallback.fixes[0].verified is True


def test_a_compile_error_dynamo_swallows_is_a_fallback(ip):
    body = "import torch\ndef f(x):\n    return x.sin() + 1\n"

    def failing(gm, example_inputs):
        raise RuntimeError("backend refuses")

    suppress = torch._dynamo.config.suppress_errors
    torch._dynamo.config.suppress_errors = True
    try:
        from nbcompile.capture import HUB, Recording, RecordingBackend
        from nbcompile.model.report import Report

        ns: dict = {}
        exec(body, ns)
        rec = Recording(Report())
        HUB.acquire()
        try:
            backend = RecordingBackend("eager", None, None, rec)
            backend.inner = failing
            with HUB.active(rec):
                out = torch.compile(ns["f"], backend=backend)(torch.ones(3))
        finally:
            HUB.release()
    finally:
        torch._dynamo.config.suppress_errors = suppress
        # torch 2.11 runs the exec'd f (no source file) through torch's shared wrapper frame, which the failure
        # marks skipped for the process: a later torch.compile of a torch module (a Linear) would compile nothing
        if torch_compat.WRAPPER_CODE is not None:
            torch_compat.drop_compiled_code(torch_compat.WRAPPER_CODE)
    assert torch.equal(out, torch.ones(3).sin() + 1)  # it ran, eagerly
    (fallback,) = rec.report.fallbacks
    assert fallback.kind == "compile_error" and "runs eagerly" in fallback.reason
