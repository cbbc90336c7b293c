"""Fix it for me: ``Session.fix`` / ``%nbcompile fix`` search the toggles and dynamism for the fewest
breaks, then recompiles, then time, gated by the check; the ``custom_op`` mode; budget, stop, and
torch's state after ``reset``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import nbcompile
from nbcompile.core import torch_compat
from nbcompile.engine import search as search_ops
from nbcompile.engine.toggles import available_function_modes

from nbhelpers import run_compile_cell

pytestmark = pytest.mark.skipif("custom_op" not in available_function_modes(),
                                reason=f"torch {torch.__version__} has no torch.library.custom_op/opcheck")

#: A data-dependent helper (a break: .item()) and a counter whose global the check sees: allow_in_graph
#: or nonstrict_trace on the counter run its Python once, at trace time, and fail the check.
CELL = textwrap.dedent(
    """\
    import torch
    CALLS = [0]
    def helper(x):
        s = x.sum().item()
        return x * (2.0 if s > 0 else 3.0)
    def counter(x):
        CALLS[0] += 1
        return x + CALLS[0]
    def f(x):
        return counter(helper(x.sin())).cos()
    xs = [torch.randn(4, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    """
)
LINE = '--backend eager --no-panel --entry f --run "[f(x) for x in xs]"'


def _trial(result, **toggles):
    wanted = {**{n: "compile" for n in ("helper", "counter", "f")}, **toggles}
    return next(t for t in result.trials if {n: t.toggles.get(n, "compile") for n in wanted} == wanted
                and not t.options)


def test_the_search_finds_zero_breaks_past_a_failed_compile_and_a_failed_check(ip):
    run_compile_cell(ip, LINE + " --fullgraph", CELL)  # fullgraph: every break is a compile error
    session = nbcompile.last()
    result = session.fix(budget_s=600)
    assert result.start.error is not None and result.start.error.startswith("fails to compile")
    failed_compile = _trial(result, helper="disable")  # calling a disabled function breaks the graph
    assert failed_compile.error.startswith("fails to compile") and failed_compile.rejected
    # allow_in_graph on the counter would fail the check; the lint (a mutation of a global) rules it out first,
    # without spending a run on it
    failed_check = _trial(result, helper="custom_op", counter="allow_in_graph")
    assert failed_check.status() == "ruled out" and failed_check.seconds == 0.0
    assert failed_check.breaks is None and "mutation" in failed_check.rejected
    best = result.best
    assert best.toggles["helper"] == "custom_op" and best.breaks == 0 and best.check_ok
    assert best is not failed_check and all(t.admissible for t in [best])
    # applied: the session now runs that configuration, and its own check agrees
    assert result.applied and session.toggles["helper"] == "custom_op"
    report = session.report
    assert report.break_count == 0 and report.graph_count >= 1 and report.check.ok and report.check.compared
    assert not report.errors
    # every trial is kept, and the chart marks them
    figure = result.figure()
    names = [trace.name for trace in figure.data]
    assert "chosen" in names and "rejected (check, lint, nothing compiled)" in names
    assert "failed to run" in names
    assert "breaks" in repr(result) and "chosen: " in repr(result)


def test_the_magic_runs_the_search_and_reports_it(ip):
    run_compile_cell(ip, LINE, CELL)
    before = nbcompile.last().report.break_count
    assert before == 2
    result = ip.run_line_magic("nbcompile", "fix --budget 600")
    assert isinstance(result, search_ops.FixSearch) and result.best.breaks == 0
    assert nbcompile.last().report.break_count == 0
    with pytest.raises(Exception, match="--budget takes seconds"):
        ip.run_line_magic("nbcompile", "fix --budget soon")


def test_budget_and_stop_are_honoured(ip):
    run_compile_cell(ip, LINE, CELL)
    session = nbcompile.last()
    result = session.fix(budget_s=0.01)  # the start alone outlasts it
    assert result.state == "budget" and len(result.trials) == 1 and not result.applied
    assert session.toggles["helper"] == "compile"

    seen = []

    def stop_after_three(search):
        seen.append(len(search.trials))
        if len(search.trials) == 3:
            search.stop()

    result = search_ops.Searcher(session.workload, 60, progress=stop_after_three, report=session.report).run()
    # no trial starts after the stop: those already running side by side with the third (forked) still end
    most = 3 + search_ops.forked.at_once() - 1
    assert result.state == "stopped" and 3 <= len(result.trials) <= most and seen[:3] == [1, 2, 3], seen
    assert result.best is not None  # the best found so far is kept


def test_a_search_leaves_torch_as_it_was_after_reset(ip):
    registries = torch_compat.registries_snapshot()
    config = dict(torch._dynamo.config.get_config_copy())
    run_compile_cell(ip, LINE, CELL)
    session = nbcompile.last()
    result = session.fix(budget_s=600)
    assert result.applied
    op_libs = [name for name in dir(torch.ops) if name.startswith("nbcompile")]
    ip.run_line_magic("nbcompile", "reset")
    assert torch_compat.registries_snapshot() == registries
    assert dict(torch._dynamo.config.get_config_copy()) == config
    assert op_libs
    for lib in op_libs:  # every operator nbcompile made is gone from the dispatcher
        with pytest.raises(RuntimeError, match="does not exist"):
            torch._C._dispatch_has_kernel_for_dispatch_key(f"{lib}::helper", "CPU")
    assert ip.user_ns["helper"].__name__ == "helper" and not isinstance(ip.user_ns["helper"], torch.nn.Module)
    assert type(ip.user_ns["helper"]).__name__ == "function"


def test_custom_op_round_trips_through_export_in_a_fresh_interpreter(ip, tmp_path):
    run_compile_cell(ip, LINE, CELL)
    session = nbcompile.last()
    session.set("helper", "custom_op")
    assert session.report.break_count == 0 and session.report.check.ok
    for style in ("calls", "decorators"):
        code = session.export(style=style)
        assert re.search(r"torch\.library\.custom_op\('notebook_[0-9a-f]{8}::helper'", code) and "register_fake" in code
        program = (CELL + code if style == "calls" else code) + textwrap.dedent(
            """
            import json
            from torch._dynamo.testing import CompileCounter
            counter_backend = CompileCounter()
            g = torch.compile(f._torchdynamo_orig_callable, backend=counter_backend, fullgraph=False)
            CALLS[0] = 0
            out = [g(x) for x in xs]
            CALLS[0] = 0
            eager = [f._torchdynamo_orig_callable(x) for x in xs]
            breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
            print(json.dumps({"same": all(torch.allclose(a, b) for a, b in zip(out, eager)), "breaks": breaks}))
            """)
        path = tmp_path / f"exported_{style}.py"
        path.write_text(program)
        done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result == {"same": True, "breaks": session.report.break_count}, (style, result)


def test_custom_op_refuses_what_it_cannot_be_with_the_reason(ip):
    body = textwrap.dedent(
        """\
        import torch
        def grow(x):
            return torch.cat([x, x[x > 0]])   # output size depends on the data
        def shout(x, name):
            return x * len(name)
        def f(x):
            return grow(x) + 1, shout(x, "ab")
        """
    )
    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(torch.randn(4))"', body)
    session = nbcompile.last()
    with pytest.raises(nbcompile.NbcompileError, match="no fake implementation: its output"):
        session.set("grow", "custom_op")
    with pytest.raises(nbcompile.NbcompileError, match="its argument name is a str"):
        session.set("shout", "custom_op")
    assert session.toggles["grow"] == "compile" and session.toggles["shout"] == "compile"


def test_the_fix_tab_shows_progress_and_the_trials_chart(ip):
    run_compile_cell(ip, LINE, CELL)
    session = nbcompile.last()
    panel = session.panel()
    seen = []
    show = panel.show_fix

    def watch(result):
        show(result)
        seen.append((len(result.trials), panel.fix_progress.value, panel.fix_stop.disabled,
                     panel.function_rows["helper"].disabled))

    panel.show_fix = watch
    panel.fix_budget.value = 600
    panel.start_fix()  # no event loop here: it runs to the end
    counts = [n for n, _, _, _ in seen]
    assert counts[0] == 1 and counts == sorted(counts) and counts[-1] >= 8
    assert all(not stop_off and rows_off for _, _, stop_off, rows_off in seen[:-1])  # while searching
    assert panel.fix_progress.value == 1.0 and not panel.fix_button.disabled and panel.fix_stop.disabled
    assert "trials; best so far: 0 breaks" in panel.fix_label.value
    (output,) = panel.fix_output.outputs
    figure = output["data"]["application/vnd.plotly.v1+json"]
    assert any(trace["name"] == "chosen" for trace in figure["data"])
    assert "<table>" in panel.fix_html.value and session.last_fix.applied
    assert panel.function_rows["helper"].value == "custom_op"  # the panel follows the applied configuration


@pytest.mark.kernel
def test_the_stop_button_is_heard_between_trials_in_a_kernel():
    pytest.importorskip("ipykernel")
    from nbhelpers import real_kernel, run_in_kernel

    with real_kernel() as (_, kc):
        _, _, reply = run_in_kernel(kc, "%load_ext nbcompile")
        assert reply["status"] == "ok"
        _, _, reply = run_in_kernel(kc, f"%%compile {LINE}\n{CELL}")
        assert reply["status"] == "ok", reply
        # the click handler returns at once: one trial per event-loop turn
        out, _, reply = run_in_kernel(kc, "import nbcompile\np = nbcompile.last().panel()\np.fix_budget.value = 600\n"
                                          "p.start_fix()\nprint(p.fix_running is not None)")
        assert reply["status"] == "ok" and "".join(out).strip() == "True"
        out, _, _ = run_in_kernel(kc, "print(len(p.fix_running.trials) if p.fix_running else -1)\np.stop_fix()")
        ran = int("".join(out).strip())
        assert ran >= 1
        code = ("import time\nfor _ in range(600):\n    if p.fix_running is None: break\n    time.sleep(0.05)\n"
                "print(p.session.last_fix.state if p.fix_running is None else 'running')")
        out, _, _ = run_in_kernel(kc, code)
        # a cell that sleeps blocks the loop: poll from separate cells instead
        state = "".join(out).strip()
        for _ in range(100):
            if state != "running":
                break
            out, _, _ = run_in_kernel(kc, "print(p.session.last_fix.state if p.fix_running is None else 'running')")
            state = "".join(out).strip()
        assert state == "stopped"
        out, _, _ = run_in_kernel(kc, "print(len(p.session.last_fix.trials), p.session.last_fix.best is not None)")
        trials, kept = "".join(out).split()
        assert int(trials) < 26 and kept == "True"  # stopped well short of the full search; the best kept


FAKELIB = textwrap.dedent(
    """\
    import torch
    def noisy(x):
        a = x.sum().item()
        b = x.mean().item()
        return x * (a + b)
    class Block(torch.nn.Module):
        def forward(self, x):
            return noisy(x.sin()).cos()
    """
)
LIB_CELL = "import torch\nimport nbfakelib\nmodel = nbfakelib.Block()\nx = torch.randn(4)\n"


@pytest.fixture
def fakelib(tmp_path, monkeypatch):
    (tmp_path / "nbfakelib.py").write_text(FAKELIB)
    monkeypatch.syspath_prepend(str(tmp_path))
    import nbfakelib

    yield nbfakelib
    sys.modules.pop("nbfakelib", None)


def test_the_search_reaches_breaks_in_library_code(ip, fakelib):
    original = fakelib.noisy
    # the configs the session pins are not searched: toggles of the library function must do it here
    run_compile_cell(ip, '--backend eager --no-panel --entry model --run "model(x)" --dynamo-config '
                         'capture_scalar_outputs=False --dynamo-config nested_graph_breaks=False', LIB_CELL)
    session = nbcompile.last()
    before = session.report.break_count
    assert before >= 2
    result = session.fix(budget_s=600)
    assert not any("_config" in t.options for t in result.trials)
    assert result.tracked == ["nbfakelib:noisy"]
    assert result.best.toggles.get("nbfakelib:noisy") == "disable" and result.best.breaks < before
    assert session.report.break_count == result.best.breaks and session.report.check.ok
    assert fakelib.noisy is not original  # the module's attribute, rebound while the session holds it
    code = session.export()
    assert "import nbfakelib" in code and "nbfakelib.noisy = torch.compiler.disable(nbfakelib.noisy)" in code
    ip.run_line_magic("nbcompile", "reset")
    assert fakelib.noisy is original


def test_a_config_fix_reaches_every_item_break_in_library_code_at_once(ip, fakelib):
    run_compile_cell(ip, '--backend eager --no-panel --entry model --run "model(x)"', LIB_CELL)
    session = nbcompile.last()
    assert session.report.break_count >= 2
    result = session.fix(budget_s=600)
    assert result.best.breaks == 0 and result.best.options["_config"] == {"capture_scalar_outputs": True}
    assert result.best.toggles.get("nbfakelib:noisy", "compile") == "compile"  # the fewest changes won
    assert session.report.break_count == 0 and session.report.check.ok
    assert torch._dynamo.config.capture_scalar_outputs is False


def test_track_names_a_library_function_and_gives_it_back(ip, fakelib):
    original = fakelib.noisy
    run_compile_cell(ip, '--backend eager --no-panel --entry model --track nbfakelib:noisy '
                         '--disable nbfakelib:noisy --run "model(x)"', LIB_CELL)
    session = nbcompile.last()
    assert session.toggles["nbfakelib:noisy"] == "disable" and fakelib.noisy is not original
    session.untrack("nbfakelib:noisy")
    assert fakelib.noisy is original and "nbfakelib:noisy" not in session.functions
    with pytest.raises(nbcompile.NbcompileError, match="module:function or module:Class.method"):
        session.track("nbfakelib.noisy.too.deep")
    with pytest.raises(nbcompile.NbcompileError, match="not a Python function"):
        session.track("nbfakelib:torch")
    with pytest.raises(nbcompile.NbcompileError, match="custom_op is for the cell's own functions"):
        session.track("nbfakelib:noisy")
        session.set("nbfakelib:noisy", "custom_op")
    assert session.toggles["nbfakelib:noisy"] == "compile"


def test_a_configuration_much_slower_than_the_start_is_not_chosen(ip):
    run_compile_cell(ip, LINE, CELL)
    session = nbcompile.last()
    searcher = search_ops.Searcher(session.workload, 60, report=session.report)
    result = searcher.run()
    best, start = result.best, result.start
    assert best.breaks == 0 and start.breaks == 2
    start.median_s, best.median_s = 0.001, 0.01  # as if the bench had measured the chosen one 10x slower
    start.min_s, start.max_s, best.min_s, best.max_s = 0.0009, 0.0011, 0.009, 0.011  # beyond the spread
    assert searcher._reject_slower([best], start)
    assert best.rejected.startswith("10.0x slower than the start") and result.best is not best
    assert result.best is None or result.best.admissible


def _session(ip, body: str, run: str, entry: str = "f"):
    run_compile_cell(ip, f'--backend eager --no-panel --entry {entry} --run "{run}"', textwrap.dedent(body))
    return nbcompile.last()


def test_custom_op_refuses_a_shape_that_follows_the_values_even_when_the_sample_hides_it(ip):
    session = _session(ip, """\
        import torch
        def helper(x):
            return x[x > 0]
        def f(x):
            return x * helper(x).shape[0]
        xs = torch.rand(1000) + 0.1   # every sample value positive: the output looks shaped like x
        """, "f(xs)")
    with pytest.raises(nbcompile.NbcompileError, match="its output's shape depends on the values"):
        session.set("helper", "custom_op")
    result = session.fix(budget_s=600)
    assert all(t.toggles.get("helper") != "custom_op" or t.rejected for t in result.trials)


def test_custom_op_follows_the_input_dtype_defaults_and_keywords_and_leaves_the_state_alone(ip):
    session = _session(ip, """\
        import torch
        LOG = []
        def helper(x, scale=2.0, *, bias=1):
            LOG.append(1)
            s = x.sum().item()
            return x * scale + bias if s > 0 else x - bias
        def f(x):
            return helper(x.sin(), bias=3).cos()
        x = torch.ones(4)
        """, "f(x)")
    logged = len(ip.user_ns["LOG"])
    session.set("helper", "custom_op")
    assert len(ip.user_ns["LOG"]) == logged  # the re-run, the sample, probes and opcheck all ran on copies
    assert session.report.break_count == 0 and session.report.check.ok
    helper, f = ip.user_ns["helper"], ip.user_ns["f"]
    x64 = torch.ones(4, dtype=torch.float64)
    assert f(x64).dtype == torch.float64  # the fake takes the dtype from the input at call time
    assert torch.allclose(helper(torch.ones(2), 2.5), torch.full((2,), 3.5))  # defaults and a float scale
    code = session.export()
    assert "schema='(Tensor x, Scalar scale=2.0, *, Scalar bias=1) -> Tensor'" in code  # numbers widen to Scalar


def test_bad_budgets_are_refused_with_one_line(ip):
    run_compile_cell(ip, LINE, CELL)
    session = nbcompile.last()
    for budget in (float("nan"), "5", -1, 0, float("inf")):
        with pytest.raises(nbcompile.NbcompileError, match="budget must be a positive number of seconds"):
            session.fix(budget_s=budget)
    ip.run_line_magic("nbcompile", "fix --budget=1")  # the = form too


def test_the_users_prints_do_not_flood_the_cell(ip, capsys):
    session = _session(ip, """\
        import torch
        def helper(x):
            print("hi from helper")
            return x * 2
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """, "f(x)")
    capsys.readouterr()
    session.fix(budget_s=600)
    out = capsys.readouterr().out
    assert out.count("hi from helper") <= 2, out.count("hi from helper")  # the applied configuration's re-run


def test_the_breaks_torch_makes_on_purpose_are_said_to_be_so(ip):
    """A training step: .backward(), the optimizer's own graph_break() calls and zero_grad (marked not to be
    traced) are torch's design, not something to move into a helper."""
    run_compile_cell(ip, '--backend eager --no-panel --entry step --run "step()"', textwrap.dedent("""\
        import torch
        torch.manual_seed(0)
        net = torch.nn.Linear(4, 2)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        x = torch.randn(3, 4)
        def step():
            loss = net(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss.detach()
        """))
    session = nbcompile.last()
    result = session.fix(budget_s=600)
    left = "\n".join(result.unremovable)
    assert "at .backward() by design" in left, left
    assert "torch/optim/optimizer.py: the optimizer's step compiles as a graph of its own" in left, left
    assert "torch marks Optimizer.zero_grad not to be traced, on purpose" in left, left
    assert "move the line into a helper" not in left, left


def test_a_break_of_the_first_call_only_is_explained_not_searched(ip):
    """One-time work of the first call (a library installing its hooks once): the session's run breaks there,
    a run on copies of the state it left does not; the search says so rather than leaving it unexplained."""
    cell = textwrap.dedent("""\
        import torch
        INSTALLED = []
        def setup(x):
            if not INSTALLED:
                print("installing once")
                INSTALLED.append(True)
            return x
        def f(x):
            return setup(x.sin()).cos()
        x = torch.randn(4)
        """)
    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(x)"', cell)
    session = nbcompile.last()
    assert session.report.break_count >= 1
    result = session.fix(budget_s=600)
    assert result.start is not None and result.start.tried and result.start.breaks == 0, result.start
    assert result.unremovable and all("first run only" in why for why in result.unremovable), result.unremovable
    assert any("cell line 6" in why for why in result.unremovable), result.unremovable  # the %%compile line is 1
