"""Issue 22 tour, the counts: graph splits agree with ``torch._dynamo.explain`` on the same code, cause counts
add up to the break events and say where their count comes from, a compile id says what it counts, and a
recompile made by the session's own ``--run`` gets its fixes really tried (points 3, 7 and 13).

``torch._dynamo.explain`` resets all of Dynamo, so it runs in a subprocess of its own (once for every
workload of this file); nbcompile runs the same cells in the test's IPython shell."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import nbcompile
from nbcompile.engine import trial
from nbcompile.model.report import Cause, Frame, Graph, GraphBreak, Report, compile_id_text, group_causes

from nbhelpers import ADAMW_CELL, run_compile_cell

SGD_CELL = ADAMW_CELL.replace("torch.optim.AdamW(net.parameters(), lr=1e-3)",
                              "torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9)")

#: A training loop over batches in one entry (Dynamo cannot resume inside the loop: the frame runs eagerly
#: and the model's forward and the optimizer's step compile as frames of their own).
LOOP_CELL = """\
import torch
from torch import nn
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(net.parameters(), lr=1e-2)
batches = [torch.randn(8, 16) for _ in range(3)]
def train_epoch():
    total = 0.0
    for x in batches:
        opt.zero_grad()
        loss = ((net(x) - 1.0) ** 2).mean()
        loss.backward()
        opt.step()
        total += loss.item()
    return total
"""

#: Two breaks in a helper the entry calls: 3 graphs in one call, 2 splits.
TWO_BREAKS_CELL = """\
import torch
def helper(x):
    x = x + 1
    torch._dynamo.graph_break()
    x = x * 2
    torch._dynamo.graph_break()
    return x - 1
def f(x):
    return helper(x.sin()).cos()
a = torch.randn(4)
"""

#: ``%%compile --entry net`` on a module whose forward breaks.
MODULE_CELL = """\
import torch
from torch import nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 2)
    def forward(self, x):
        h = self.a(x).relu()
        torch._dynamo.graph_break()
        return self.b(h)
net = Net()
X = torch.randn(3, 8)
"""

#: One function, a break in it, called with two shapes: the second call recompiles it (and its resume code).
SHAPES_CELL = """\
import torch
def f(x):
    y = x.sin()
    torch._dynamo.graph_break()
    return y.cos()
a = torch.randn(4)
b = torch.randn(6)
"""

#: name -> (cell body, %%compile options, --run expression, explain's calls: (function, args) each)
WORKLOADS = {
    "adamw": (ADAMW_CELL, "", "train_step()", [("train_step", "()")]),
    "sgd": (SGD_CELL, "", "train_step()", [("train_step", "()")]),
    "loop": (LOOP_CELL, "", "train_epoch()", [("train_epoch", "()")]),
    "two_breaks": (TWO_BREAKS_CELL, "", "f(a)", [("f", "(a,)")]),
    "module": (MODULE_CELL, "--entry net", "net(X)", [("net", "(X,)")]),
    "shapes": (SHAPES_CELL, "", "f(a).sum() + f(b).sum()", [("f", "(a,)"), ("f", "(b,)")]),
}

_EXPLAIN = textwrap.dedent("""\
    import json, sys, torch
    out = {}
    for name, (body, calls) in json.loads(sys.stdin.read()).items():
        space = {"__name__": "__main__"}
        exec(compile(body, "<cell " + name + ">", "exec"), space)
        graphs = splits = 0
        for fn, args in calls:  # explain resets Dynamo and calls once: a call of its own for each
            e = torch._dynamo.explain(eval(fn, space))(*eval(args, space))
            graphs += e.graph_count
            splits += e.graph_break_count
        out[name] = {"graphs": graphs, "splits": splits}
    print("JSON" + json.dumps(out))
    """)


@pytest.fixture(scope="module")
def explained() -> dict[str, dict[str, int]]:
    """``torch._dynamo.explain`` on every workload, in a fresh process."""
    given = {name: (body, calls) for name, (body, _, _, calls) in WORKLOADS.items()}
    done = subprocess.run([sys.executable, "-c", _EXPLAIN], input=json.dumps(given), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(piece for piece in done.stdout.splitlines() if piece.startswith("JSON"))
    return json.loads(line[4:])


def _session_report(ip, name: str) -> Report:
    body, options, run, _ = WORKLOADS[name]
    result = run_compile_cell(ip, f'--backend eager --no-panel {options} --run "{run}"', body)
    assert result.success, result.error_in_exec
    return nbcompile.last().report


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_splits_agree_with_explain_and_causes_add_up_to_the_break_events(ip, explained, name):
    report = _session_report(ip, name)
    assert report.splits == explained[name]["splits"], (name, report.splits, explained[name],
                                                        [(f.compile_id, f.function) for f in report.frames])
    assert report.break_count == len(report.breaks)
    assert sum(c.count for c in report.causes) == len(report.breaks)
    assert report.to_json()["splits"] == report.splits


def test_splits_stay_the_same_when_the_cell_runs_again(ip, explained):
    """A second run of a cell compiles new code (new frame ids) while the optimizer's frames keep their
    older, lower ids: the splits are still explain's."""
    _session_report(ip, "adamw")
    again = _session_report(ip, "sgd")
    assert again.splits == explained["sgd"]["splits"]
    assert again.splits == _session_report(ip, "sgd").splits


def test_the_entry_is_the_report_s_first_frame_not_the_lowest_frame_id():
    """A cell run again: its step (new code, frame 7) recompiles once, while the optimizer's wrapper keeps
    frame 2 from the first run. Two calls of the entry, four graphs: two splits, as explain says per call."""
    frames = [Frame("7/0", "train_step", [], 0, 0.0), Frame("2/0", "wrapper", [], 0, 0.0),
              Frame("3/0", "step", [], 0, 0.0), Frame("7/1", "train_step", [], 0, 0.0)]
    graphs = [Graph(f.compile_id, 1, ["add"], f.function) for f in frames]
    assert Report(frames=frames, graphs=graphs).splits == 2


# -- point 13: the counts say where they come from ------------------------------------------------------

def _brk(compile_id: str, line: int = 5) -> GraphBreak:
    return GraphBreak("f", "<ipython-input-1>", line, line, "print(x)", "r", "print", None, "", [], None,
                      compile_id=compile_id)


def test_a_cause_counted_twice_says_why_in_its_own_text():
    causes = group_causes([_brk("0/0"), _brk("0/1"), _brk("0/1", line=7)])
    twice = next(c for c in causes if c.lineno == 5)
    assert twice.count == 2 and twice.compile_ids == ["0/0", "0/1"]
    assert twice.count_text.startswith("x2: 2 break events at this line")
    assert "2 compiles" in twice.count_text and "0/0, 0/1" in twice.count_text
    once = next(c for c in causes if c.lineno == 7)
    assert once.count_text.startswith("x1: 1 break event at this line")
    report = Report()
    for brk in (_brk("0/0"), _brk("0/1"), _brk("0/1")):  # two events in one compile: the line ran twice
        report.add("breaks", brk)
    (cause,) = report.causes
    assert cause.count == 3 and cause.compile_ids == ["0/0", "0/1"]
    assert cause.count_text.startswith("x3: 3 break events at this line") and "more than once" in cause.count_text
    assert report.to_json()["causes"][0]["count_text"] == cause.count_text
    assert Cause.of(_brk("2/0")).count_text.startswith("x1:")


def test_a_cause_counted_twice_in_a_real_cell_says_called_twice(ip):
    report = _session_report(ip, "shapes")
    cause = next(c for c in report.causes if c.count == 2)
    assert "x2: 2 break events at this line" in cause.count_text and "2 compiles" in cause.count_text


def test_a_compile_id_says_what_it_counts_beside_the_recompile_count(ip):
    """torch numbers every compile of a code in the process (trials, earlier reports, other sessions): a
    report's compile 4/6 may come with 0 recompiles in it (the tour's puzzle); its text says so, with the
    report's own count."""
    text = compile_id_text("4/6", Report())
    assert text.startswith("compile id 4/6: ") and "frame 4" in text and "compile 7 in this Python process" in text
    assert "the 6 before it" in text and "not recompiles of this report" in text
    assert text.endswith("0 recompiles in this report")
    report = _session_report(ip, "shapes")
    recompile = report.recompiles[0]
    assert compile_id_text(recompile.compile_id, report).endswith(f"{report.recompile_count} recompiles in this report")
    assert "compile 1 in" in compile_id_text(report.frames[0].compile_id) or report.frames[0].compile_id[-2:] != "/0"


# -- point 2: a recompile made by --run itself has its fixes really tried ---------------------------------

#: A training loop over batches of two sizes, in the --run expression: its second size recompiles the step.
BATCHES_CELL = """\
import torch
from torch import nn
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(net.parameters(), lr=1e-2)
batches = [torch.randn(8, 16), torch.randn(8, 16), torch.randn(5, 16)]
def train_step(x):
    loss = ((net(x) - 1.0) ** 2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()
"""


def test_a_recompile_made_by_the_run_itself_has_its_fixes_tried(ip):
    run_compile_cell(ip, '--backend aot_eager --no-panel --run "[train_step(b) for b in batches]"', BATCHES_CELL)
    session = nbcompile.last()
    session.verify_fixes()
    (recompile,) = session.report.recompiles
    assert recompile.function == "train_step" and recompile.fixes
    effects = [fix.effect for fix in recompile.fixes]
    assert not any("later" in effect for effect in effects), effects
    proven = [fix for fix in recompile.fixes if fix.verified]
    assert proven and "recompiles 1 -> 0" in proven[0].effect and "check ok" in proven[0].effect, effects
    # a later cell's recompile is the one said to come from a later cell
    ip.run_cell("train_step(torch.randn(2, 3, 16))")
    later = [r for r in session.report.recompiles if r is not recompile]
    assert later and all(f.effect == trial.LATER_CELL for r in later for f in r.fixes if f.action is not None)
    assert all("later" not in f.effect for f in recompile.fixes)


def test_the_baseline_calls_the_run_again_until_the_recompile_shows(ip):
    """A recompile the session's second run made (a global counter the step reads): the trial's baseline
    calls --run again until it recompiles, and each fix's trial as many times."""
    body = ("import torch\nSTEP = 0\ndef step(x):\n    global STEP\n    STEP += 1\n"
            "    return x * STEP\nx0 = torch.randn(4)\n")
    run_compile_cell(ip, '--backend eager --no-dynamic --no-panel --run "step(x0)"', body)
    session = nbcompile.last()
    session.run()  # the session's second run: STEP changed, the step recompiles
    assert session.report.recompile_count >= 1
    session.verify_fixes()
    fixes = [f for r in session.report.recompiles for f in r.fixes if f.action is not None]
    assert fixes and not any("later" in f.effect or "does not recompile" in f.effect for f in fixes), \
        [f.effect for f in fixes]
    assert any("recompiles" in f.effect and "calls of --run" in f.effect for f in fixes), [f.effect for f in fixes]
