"""The house's seams, checked as behaviour: one redraw per click, a trial that never touches the
live session's engine, the engine handed a Workload (never the session), one compile recipe."""

from __future__ import annotations

import ast
import pathlib

import torch

import nbcompile
from nbcompile.engine.toggles import REGISTRY, Toggles

from nbhelpers import PRINTING_HELPER_CELL, parse_file, run_compile_cell

PACKAGE = pathlib.Path(nbcompile.__file__).parent

CELL = PRINTING_HELPER_CELL
LINE = '--backend eager --no-dynamic --no-panel --run "caller(torch.ones(3))"'


def _panel(ip):
    run_compile_cell(ip, LINE, CELL)
    return nbcompile.last(), nbcompile.last().panel()


def test_a_toggle_click_redraws_the_panel_once(ip):
    session, panel = _panel(ip)
    before = panel.redraws
    panel.function_rows["helper"].value = "disable"
    assert session.toggles["helper"] == "disable" and session.report.break_count == 1
    assert panel.redraws - before == 1
    before = panel.redraws
    panel.op_rows["torch.sub"].value = "disallow_in_graph"
    assert session.toggles["torch.sub"] == "disallow_in_graph"
    assert panel.redraws - before == 1


def test_an_option_click_and_a_failed_click_redraw_once(ip):
    session, panel = _panel(ip)
    before = panel.redraws
    panel.fullgraph.value = True  # a break under fullgraph: refused, rolled back, one redraw
    assert panel.fullgraph.value is False and session.options.fullgraph is False
    assert panel.last_error and panel.redraws - before == 1
    before = panel.redraws
    panel.dynamic.value = panel.dynamic.options[0]
    assert panel.redraws - before == 1


def test_a_trial_never_touches_the_live_engine(ip):
    session, _ = _panel(ip)
    session.set("torch.sub", "disallow_in_graph")
    held = REGISTRY.held()
    applied: list[tuple[str, str]] = []
    original_apply = Toggles.apply

    def spy(engine, name, mode):
        if engine is session.engine:
            applied.append((name, mode))
        return original_apply(engine, name, mode)

    Toggles.apply = spy
    try:
        spec = session.workload.spec(session.workload.run_code)
        from nbcompile.engine import trial

        outcome = trial.run(spec, {"helper": "disable"})  # torch.sub back at compile in the trial
    finally:
        Toggles.apply = original_apply
    assert outcome.error is None and outcome.breaks < session.report.break_count
    assert applied == []  # the live engine was never asked to change
    assert session.toggles["torch.sub"] == "disallow_in_graph" and REGISTRY.held() == held
    assert id(torch.sub) in torch._dynamo.trace_rules._disallowed_callable_ids  # lent back after the trial


def test_the_engine_never_names_the_session():
    """No function of the engine takes a session; it is handed a Workload (or plain data)."""
    offenders = []
    for path in sorted((PACKAGE / "engine").glob("*.py")):
        tree = parse_file(path)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in [*node.args.args, *node.args.kwonlyargs]]
                if "session" in names:
                    offenders.append(f"{path.name}:{node.name}")
    assert offenders == []


def test_one_recipe_compiles_a_fresh_copy():
    """``torch.compile(...)`` is called in one place of the package (engine/compiler.py)."""
    callers = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(parse_file(path)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compile" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch":
                callers.add(str(path.relative_to(PACKAGE)))
    assert callers == {"engine/compiler.py"}
