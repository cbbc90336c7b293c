"""Accept gives what the search promised (issue 34, point 5): the cell ``Session.accept`` puts in the next
input, run as is in a fresh shell, has the breaks and graphs the fix search reported for the configuration
that needs it: no break inside nbcompile's own code (a config is applied around the call, outside the
compiled region), no compile error, no new break in ``Module.train``; its ``%%compile`` line carries what the
configuration sets (a tracked library function with its ``--track``), and says in the cell what no flag can
carry. Real IPython shells (the test shell, then a fresh interpreter), real Dynamo, backend eager."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import nbcompile
from nbcompile.core.options import CellOptions
from nbcompile.facades.rewrites import CellRewrites, accepted_line
from nbcompile.magics import parse_cell_line
from nbcompile.model.fixsearch import FixSearch, Trial
from nbcompile.model.report import Rewrite

from nbhelpers import run_compile_cell

SETUP = textwrap.dedent("""\
    import torch
    from torch import nn
    torch.manual_seed(0)
    xb = torch.randn(4, 8)
    """)
#: A training cell: a model whose forward reads a scalar (``.item()``: capture_scalar_outputs) and branches
#: on a tensor (the where rewrite), an optimizer, and a step that calls ``model.train()`` and steps.
TRAINING_CELL = textwrap.dedent("""\
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            h = self.fc(x)  # the layer
            s = h.abs().max().item()
            if h.sum() > 0:
                y = h * 2
            else:
                y = h - 1
            return (y / s).sum()

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step():
        # one step of training
        model.train()
        opt.zero_grad()

        loss = model(xb)
        loss.backward()
        opt.step()
        return loss.detach()
    """)

#: Run in a fresh interpreter: the set-up cell, then the accepted cell as is; what its session reports.
FRESH = textwrap.dedent("""\
    import json, sys
    from IPython.testing.globalipapp import get_ipython
    setup, cell = json.loads(sys.stdin.read())
    ip = get_ipython()
    sys.modules["__main__"] = ip.user_module  # as in a kernel: the notebook's namespace is __main__
    ip.run_line_magic("load_ext", "nbcompile")
    import nbcompile
    from nbcompile.model.render import compile_errors
    assert ip.run_cell(setup).success
    ran = ip.run_cell(cell)
    session = nbcompile.last()
    report = session.report
    print("JSON" + json.dumps({
        "ok": ran.success, "error": repr(ran.error_in_exec) if ran.error_in_exec else "",
        "graphs": report.graph_count, "breaks": report.break_count,
        "sites": [[b.filename, b.lineno, b.function] for b in report.breaks],
        "errors": [f"{e.fail_type}: {e.message}" for e in compile_errors(report)],
        "check": None if report.check is None else report.check.ok,
        "toggles": {n: m for n, m in session.toggles.items() if m != "compile"},
    }))
    """)


def _fresh(setup: str, cell: str, path: str | None = None) -> dict:
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env.get("PYTHONPATH", "")) if p)
    done = subprocess.run([sys.executable, "-c", FRESH], input=json.dumps([setup, cell]), capture_output=True,
                          text=True, timeout=600, env=env)
    line = next((piece for piece in done.stdout.splitlines() if piece.startswith("JSON")), None)
    assert line is not None, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    return json.loads(line[4:])


def _searched_and_accepted(ip, line: str, cell: str, setup: str = SETUP):
    assert ip.run_cell(setup).success
    run = run_compile_cell(ip, line, cell)
    assert run.success, run.error_in_exec
    session = nbcompile.last()
    result = session.fix(budget_s=600)
    best = result.best
    assert best is not None and best.rewrites and best.check_ok, result  # a choice the user must accept
    text = ""
    for rewrite in best.rewrites:
        text = session.accept(rewrite)
    return best, text


def _as_promised(best, fresh: dict) -> None:
    assert fresh["ok"], fresh["error"]
    assert not fresh["errors"], fresh["errors"]  # no compile error
    mine = [s for s in fresh["sites"] if f"{os.sep}nbcompile{os.sep}" in s[0]]
    assert not mine, mine  # no break inside nbcompile's own code (a config patch traced, a wrapper)
    train = [s for s in fresh["sites"] if s[0].endswith(os.path.join("nn", "modules", "module.py"))
             and s[2] == "train"]
    assert not train, train  # model.train() gains no break
    assert (fresh["breaks"], fresh["graphs"]) == (best.breaks, best.graphs), (fresh, best.describe(), best.sites)
    assert fresh["check"] is True


def test_a_training_cell_s_accepted_cell_gives_the_search_s_breaks_in_a_fresh_shell(ip):
    best, text = _searched_and_accepted(
        ip, '--backend eager --no-panel --entry train_step --run "train_step()"', TRAINING_CELL)
    assert "capture_scalar_outputs" in best.options.get("_config", {}), best.describe()
    head, body = text.split("\n", 1)
    assert "--dynamo-config capture_scalar_outputs=True" in head and "torch.where(" in body
    assert "# one step of training" in body and "# the layer" in body  # the user's comments, kept
    _as_promised(best, _fresh(SETUP, text))


def test_a_module_entry_called_from_a_compiled_step_gains_no_break_in_module_train(ip):
    best, text = _searched_and_accepted(
        ip, '--backend eager --no-panel --entry model,train_step --run "train_step()"', TRAINING_CELL)
    _as_promised(best, _fresh(SETUP, text))


def test_the_export_of_a_config_session_sets_it_before_the_compile_never_inside_traced_code(ip, tmp_path):
    cell = "net = nn.Linear(3, 3)\ndef step(x):\n    y = net(x)\n    return y * y.sum().item()\n"
    assert ip.run_cell(SETUP).success
    assert run_compile_cell(ip, '--backend eager --no-panel --entry step --run "step(torch.ones(2, 3))" '
                                '--dynamo-config capture_scalar_outputs=True', cell).success
    session = nbcompile.last()
    code = session.export()
    lines = code.splitlines()
    setting = lines.index("torch._dynamo.config.capture_scalar_outputs = True")
    assert setting < next(i for i, line in enumerate(lines) if "torch.compile(" in line)
    assert "config.patch" not in code and not any(line.startswith((" ", "\t", "@")) for line in lines)
    program = SETUP + cell + code + textwrap.dedent("""\
        import json
        counts = {"graphs": 0}
        def backend(gm, _inputs):
            counts["graphs"] += 1
            return gm.forward
        import torch._dynamo.utils as dynamo_utils
        step = torch.compile(step._torchdynamo_orig_callable, backend=backend)
        step(torch.ones(2, 3))
        print(json.dumps([counts["graphs"], sum(dynamo_utils.counters["graph_break"].values())]))
        """)
    path = tmp_path / "exported.py"
    path.write_text(program)
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [session.report.graph_count,
                                                                  session.report.break_count]


# -- the %%compile line of the accepted cell ---------------------------------------------------------------

REWRITE = Rewrite(4, "    if h.sum() > 0:", "    y = torch.where(...)", "where", "helper")


def _best(toggles: dict[str, str], **options) -> Trial:
    return Trial(toggles, 0, 0, True, options={**options, "_rewrites": (REWRITE,)}, graphs=1)


def test_a_library_function_the_choice_toggles_is_tracked_on_the_accepted_line():
    """A toggle of a library function the search tracked (``module:Class.method``) is said with its
    ``--track``: without it the accepted cell fails ("not a function nbcompile can track")."""
    line = accepted_line(REWRITE, '--backend eager --entry f --run "f(x)"',
                         _best({"nbacclib:pick": "disable", "helper": "compile"}), CellOptions())
    flags = line.removeprefix("%%compile ")
    assert "--track nbacclib:pick" in flags and "--disable nbacclib:pick" in flags, line
    options = parse_cell_line(flags)
    assert options.track == ["nbacclib:pick"] and options.disable == ["nbacclib:pick"]


def test_a_tracked_library_function_is_not_tracked_twice():
    line = accepted_line(REWRITE, '--backend eager --entry f --track nbacclib:pick --run "f(x)"',
                         _best({"nbacclib:pick": "disable"}), CellOptions(track=["nbacclib:pick"]))
    assert line.count("--track nbacclib:pick") == 1 and "--disable nbacclib:pick" in line


def test_the_accepted_library_toggle_runs_in_a_fresh_shell(ip, make_module, tmp_path):
    make_module("nbacclib", "import torch\ndef pick(h):\n    torch._dynamo.graph_break()\n    return h * 2\n")
    cell = "import nbacclib\ndef f(x):\n    return nbacclib.pick(x.sin()).cos()\n"
    line = accepted_line(REWRITE, '--backend eager --no-panel --entry f --run "f(xb)"',
                         _best({"nbacclib:pick": "disable"}), CellOptions())
    fresh = _fresh(SETUP, line + "\n" + cell, path=str(tmp_path))
    assert fresh["ok"] and not fresh["errors"], fresh
    assert fresh["toggles"] == {"nbacclib:pick": "disable"}, fresh


def test_what_no_flag_can_say_is_said_in_the_accepted_cell(ip):
    """``custom_op`` and ``nonstrict_trace`` have no ``%%compile`` flag: the accepted cell says, in a comment
    at its end, the ``%nbcompile set`` lines that complete the configuration, never leaves them out unsaid."""
    cell = textwrap.dedent("""\
        import torch
        def scale(h):
            return h * 2
        def helper(h):
            if h.sum() > 0:
                y = h * 2
            else:
                y = h - 1
            return y
        def f(x):
            return scale(helper(x.sin())).cos()
        x = torch.randn(8, generator=torch.Generator().manual_seed(0))
        """)
    assert run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(x)"', cell).success
    session = nbcompile.last()
    rewrite = next(r for r in CellRewrites(session.workload, session.report).proposals if r.rule == "where")
    # a search's record whose choice needs the rewrite and a custom_op toggle (as the search writes it)
    session.last_fix = FixSearch(best=Trial({"scale": "custom_op", "helper": "compile"}, 0, 0, True,
                                            options={"_rewrites": (rewrite,)}, graphs=1))
    text = session.accept(rewrite)
    assert text.rstrip().endswith("%nbcompile set scale custom_op"), text
    assert "no %%compile flag" in text.rstrip().splitlines()[-1]
