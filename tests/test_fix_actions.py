"""Structured fixes: each ``Fix`` carries the change it makes as data (``Fix.action``: a toggle, a
config value, a dimension mark, a number held as a tensor, ...) beside the text it shows; trials run
the action, and the text is never read back.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap

import jsonschema
import torch

import nbcompile
from nbcompile.capture import cudagraph_fallback, guards
from nbcompile.engine import search as search_ops
from nbcompile.model.report import SCHEMA_PATH, Fix, FixAction, GuardChange

from nbhelpers import CLAMP_CELL, GRAPH_BREAK_HELPER_CELL, run_compile_cell

SHAPES = "import torch\ndef f(x):\n    return x.sin() * 2\n"
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


def _actions(fixes: list[Fix]) -> dict[str, FixAction | None]:
    return {f.command or f.why: f.action for f in fixes}


def _mark(how: str, param: str = "x", dim: int = 0) -> FixAction:
    return FixAction("mark", mark=how, param=param, dim=dim)  # type: ignore[arg-type]


# --- each producer gives its action ------------------------------------------------------------

def test_a_changing_size_gets_dynamic_and_mark_actions():
    fixes = guards.recompile_fixes([GuardChange("x.shape[0]", "3", "5")])
    assert [(f.command, f.action) for f in fixes] == [
        ("--dynamic", FixAction("dynamic")),
        ("torch._dynamo.maybe_mark_dynamic(x, 0)", _mark("maybe_mark_dynamic")),
    ]
    specialised = guards.recompile_fixes([GuardChange("x.shape[1]", ">= 2", "1")])
    assert [f.action for f in specialised] == [
        FixAction("dynamic"), _mark("maybe_mark_dynamic", dim=1), _mark("mark_unbacked", dim=1),
        _mark("mark_static", dim=1)]
    assert specialised[2].command == "torch._dynamo.decorators.mark_unbacked(x, 1)"


def test_numbers_get_as_tensor_and_config_actions_and_advice_gets_none():
    (held,) = guards.recompile_fixes([GuardChange("SCALE", "2.0", "3.0")], {"SCALE"})
    assert held.command == "SCALE = torch.tensor(SCALE)" and held.action == FixAction("as_tensor", subject="SCALE")
    (advice,) = guards.recompile_fixes([GuardChange("MODE", "'a'", "'b'")], {"MODE"})
    assert advice.command == "" and "pass it as an argument" in advice.why and advice.action is None
    attribute = guards.recompile_fixes([GuardChange("self.k", "1", "2")])
    assert [f.action for f in attribute] == [
        FixAction("config", config="allow_unspec_int_on_nn_module", value=True),
        FixAction("as_tensor", subject="self.k"), None]
    (training,) = guards.recompile_fixes([GuardChange("self.drop.training", "True", "False")])
    assert training.action is None and training.toggles == {}


def test_a_recompile_limit_fallback_gets_a_config_action():
    fixes = guards.limit_fixes([GuardChange("x.shape[0]", "4", "5")])
    assert [f.action for f in fixes] == [_mark("maybe_mark_dynamic"), FixAction("dynamic"),
                                         FixAction("config", config="recompile_limit", value=16)]
    assert fixes[-1].command == "torch._dynamo.config.recompile_limit = 16"


def test_cudagraph_fallbacks_are_advice_with_no_action():
    fallback = cudagraph_fallback("step", "skipping cudagraphs due to mutated inputs (1 instances). Found from :")
    assert fallback.fixes and all(f.action is None for f in fallback.fixes)


def test_a_break_in_a_helper_gets_toggle_actions():
    ns: dict = {}
    exec(CLAMP_CELL, ns)
    report = nbcompile.inspect(ns["top"], torch.ones(3), backend="eager")
    toggles = [f for f in report.breaks[0].fixes if f.command]
    assert {f.command: f.action for f in toggles} == {
        "toggles={'clamp': 'disable'}": FixAction("toggle", toggles={"clamp": "disable"}),
        "toggles={'clamp': 'allow_in_graph'}": FixAction("toggle", toggles={"clamp": "allow_in_graph"}),
    }
    assert all(f.toggles == f.action.toggles for f in toggles if f.action is not None)
    assert all(f.action is None for f in report.breaks[0].fixes if not f.command)  # advice


def test_a_session_shape_recompile_gets_mark_and_dynamic_actions_in_its_json(ip):
    run_compile_cell(ip, '--backend eager --no-dynamic --no-panel --run "[f(torch.ones(n)) for n in (3, 5, 7)]"',
                     SHAPES)
    report = nbcompile.last().report
    actions = _actions(report.recompiles[0].fixes)
    assert actions["--dynamic"] == FixAction("dynamic")
    assert actions["torch._dynamo.maybe_mark_dynamic(x, 0)"] == _mark("maybe_mark_dynamic")
    data = report.to_json()
    jsonschema.validate(data, json.loads(SCHEMA_PATH.read_text()))
    shown = {f["command"]: f["action"] for f in data["recompiles"][0]["fixes"]}
    assert shown["torch._dynamo.maybe_mark_dynamic(x, 0)"] == {
        **dataclasses.asdict(FixAction("mark")), "mark": "maybe_mark_dynamic", "param": "x", "dim": 0}


def test_a_session_global_recompile_gets_an_as_tensor_action(ip):
    run_compile_cell(ip, '--backend eager --no-panel --entry scaled --run "train()"', SCHEDULE)
    (fix,) = nbcompile.last().report.recompiles[0].fixes
    assert fix.action == FixAction("as_tensor", subject="SCALE") and fix.verified is True


# --- trials run the action, never the text ------------------------------------------------------

def _proofs(fixes: list[Fix]) -> dict[int, tuple[bool | None, str]]:
    return {id(f): (f.verified, f.effect) for f in fixes}


def _garble(session, fixes: list[Fix]) -> None:
    """Forget the proofs and make every fix's text meaningless."""
    session._trials.clear()
    for i, fix in enumerate(fixes):
        fix.verified, fix.effect, fix.command = None, "", f"garbage {i} (" if fix.command else ""


def test_recompile_trials_read_the_action_not_the_command(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "[f(torch.ones(n)) for n in (3, 5, 1)]"', SHAPES)
    session = nbcompile.last()
    fixes = [f for r in session.report.recompiles for f in r.fixes]
    assert {f.action.kind for f in fixes if f.action is not None} == {"dynamic", "mark"}
    before = _proofs(fixes)
    assert any(verified is not None for verified, _ in before.values())
    _garble(session, fixes)
    session.verify_fixes()
    assert _proofs(fixes) == before


def test_limit_and_config_trials_read_the_action(ip):
    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = 3
    try:
        run_compile_cell(ip, '--backend eager --no-dynamic --no-panel --run "[f(torch.ones(n)) for n in range(2, 8)]"',
                         "import torch\ndef f(x):\n    return x.cos()\n")
        session = nbcompile.last()
        (fallback,) = session.report.fallbacks
        before = _proofs(fallback.fixes)
        raised = next(f for f in fallback.fixes if f.action == FixAction("config", config="recompile_limit", value=16))
        assert raised.verified is True
        _garble(session, fallback.fixes)
        session.verify_fixes()
    finally:
        torch._dynamo.config.recompile_limit = limit
    assert _proofs(fallback.fixes) == before
    assert torch._dynamo.config.recompile_limit == limit


def test_toggle_trials_and_search_seeds_read_the_action_not_the_command(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(3))"', GRAPH_BREAK_HELPER_CELL)
    session = nbcompile.last()
    fixes = [f for b in session.report.breaks for f in b.fixes]
    toggles = [f for f in fixes if f.action is not None]
    assert toggles and all(f.action.kind == "toggle" and f.toggles for f in toggles)
    before = _proofs(fixes)
    assert any(f.verified is True for f in toggles)
    _garble(session, fixes)
    session.verify_fixes()
    assert _proofs(fixes) == before
    seeds = search_ops.Searcher(session.workload, 60, report=session.report)._seeds()
    toggle_seeds = [s[0] for s in seeds if not s[1]]  # config values and rewrites seed with the start's toggles
    wanted = [{**session.toggles, **f.toggles} for f in toggles if f.verified is not False]
    assert toggle_seeds == [t for i, t in enumerate(wanted) if t not in wanted[:i]]  # each remedy once
    assert all(s[0] == session.toggles for s in seeds if s[1])


def test_a_fix_with_text_but_no_action_is_never_tried(ip):
    run_compile_cell(ip, '--backend eager --no-dynamic --no-panel --run "[f(torch.ones(n)) for n in (3, 5, 7)]"',
                     SHAPES)
    session = nbcompile.last()
    recompile = session.report.recompiles[0]
    lookalike = Fix("--dynamic", "text only: no action")
    recompile.fixes.append(lookalike)
    dynamic = next(f for f in recompile.fixes if f.action == FixAction("dynamic"))
    session._trials.clear()
    dynamic.verified, dynamic.effect = None, ""
    session.verify_fixes()
    assert dynamic.verified is True
    assert lookalike.verified is None and lookalike.effect == ""
