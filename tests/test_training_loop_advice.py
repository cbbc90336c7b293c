"""Advice from the issue 22 user tour that could not or must not be followed (findings 3, 4 and 5).

- Finding 4: ``loss.backward()`` got the fix "Set torch._dynamo.trace_autograd_ops=True": that name does not exist
  (the flag is ``torch._dynamo.config.trace_autograd_ops``) and the real flag still leaves breaks. A config hint
  names the flag as the installed torch has it and stays torch's hint, marked untried, never a fix; backward gets
  advice that can be followed.
- Finding 5: ``allow_in_graph`` was offered on ``optimizer_step()`` (``opt.step(); opt.zero_grad()``) with "the
  allow_in_graph lint finds nothing against it". The lint flags calls that change an optimizer's, a module's or a
  tensor's state, so allow_in_graph is never offered on such a helper.
- Finding 3: a ``for`` loop over batches got torch's "Avoid calling the function `Optimizer.zero_grad`" as its fix.
  A break in a loop makes torch skip the whole frame: the advice is to compile the step, not the loop.
"""

from __future__ import annotations

import linecache

import torch

import nbcompile
from nbcompile.analysis.lint import lint_allow_in_graph
from nbcompile.analysis.suggest import Advisor, session_command
from nbcompile.model.report import GraphBreak

from nbhelpers import run_compile_cell

#: The tour's straight-line SGD step (cells/c2_sgd.py): zero_grad, forward, backward, step.
SGD_STEP_CELL = """\
import torch
from torch import nn
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.01)
X = torch.randn(64, 16); Y = torch.randn(64, 1)
def train_step():
    opt.zero_grad()
    loss = nn.functional.mse_loss(net(X), Y)
    loss.backward()
    opt.step()
    return loss.detach()
"""

#: The tour's cell after "put it in a helper of this cell and disable that helper" (cells/c9_helper.py).
HELPER_CELL = """\
import torch
from torch import nn
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
X = torch.randn(64, 16); Y = torch.randn(64, 1)
def optimizer_step():
    opt.step()
    opt.zero_grad()
def train_step():
    loss = nn.functional.mse_loss(net(X), Y)
    loss.backward()
    optimizer_step()
    return loss.detach()
"""

#: The tour's epoch over batches (cells/c10_batches.py): the most common training loop.
EPOCH_CELL = """\
import torch
from torch import nn
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.01)
data = torch.randn(100, 16); target = torch.randn(100, 1)
def loss_fn(xb, yb):
    return nn.functional.mse_loss(net(xb), yb)
def epoch():
    total = 0.0
    for i in range(0, 100, 32):
        opt.zero_grad()
        loss = loss_fn(data[i:i+32], target[i:i+32])
        loss.backward()
        opt.step()
        total += loss.detach()
    return total
"""


def _cell_line(body: str, text: str) -> int:
    """The cell line of ``text`` in ``body`` as the report counts it (the ``%%compile`` line is line 1)."""
    return next(i for i, line in enumerate(body.splitlines(), start=2) if line.strip() == text)


def _advisor(entries: list[str]) -> Advisor:
    return Advisor(tracked={}, toggles={}, entries=entries, command=session_command, lint=lambda _n: [],
                   disallowed={})


# --- finding 4: a config hint is checked against this torch and never a fix ---------------------------------

def test_a_config_hint_names_the_real_flag_stays_an_untried_hint_and_backward_gets_advice():
    assert hasattr(torch._dynamo.config, "trace_autograd_ops")  # the flag this torch has
    assert not hasattr(torch._dynamo, "trace_autograd_ops")  # the name torch 2.13's hint prints
    brk = GraphBreak(function="train_step", filename="<ipython-input-3-abc>", lineno=4, cell_line=5,
                     source_line="    loss.backward()", reason="r", gb_type="Unsupported Tensor.backward() call",
                     gb_id="GB0123", explanation="Dynamo currently does not support tracing `Tensor.backward()` "
                     "when trace_autograd_ops is off.", hints=["Set torch._dynamo.trace_autograd_ops=True"],
                     doc_url=None)
    fixes = _advisor(["train_step"])(brk)
    whys = [f.why for f in fixes]
    assert not any("trace_autograd_ops" in w for w in whys), whys  # untried: never a fix
    assert any(w.startswith("call `loss.backward()` outside the compiled function (line 5)") for w in whys), whys
    (hint,) = brk.hints
    assert hint.startswith("Set torch._dynamo.config.trace_autograd_ops=True"), hint
    assert "not tried" in hint and "torch._dynamo.trace_autograd_ops, which does not exist" in hint, hint

    missing = GraphBreak(function="f", filename="<ipython-input-3-abc>", lineno=2, cell_line=3,
                         source_line="    g(x)", reason="r", gb_type="Unsupported thing", gb_id=None,
                         explanation="e", hints=["Set torch._dynamo.config.no_such_flag_nbc = True"], doc_url=None)
    assert _advisor(["f"])(missing) == []
    assert "this torch has no torch._dynamo.config.no_such_flag_nbc" in missing.hints[0], missing.hints


def test_loss_backward_in_a_real_cell_is_never_fixed_by_a_flag_that_does_not_exist(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "train_step()"', SGD_STEP_CELL)
    report = nbcompile.last().report
    backward = [c for c in report.causes if "loss.backward()" in c.source_line]
    assert backward, [(c.source_line, c.gb_type) for c in report.causes]
    fixes = [f.why for c in backward for f in c.fixes]
    assert not any("trace_autograd_ops" in w for w in fixes), fixes
    line = _cell_line(SGD_STEP_CELL, "loss.backward()")
    assert any(f"call `loss.backward()` outside train_step (line {line})" in w for w in fixes), fixes
    hints = [h for c in backward for h in c.hints if "trace_autograd_ops" in h]
    assert all("torch._dynamo.config.trace_autograd_ops" in h and "not tried" in h for h in hints), hints


# --- finding 5: the lint reads state changes through methods; allow_in_graph is never offered on them -------

def _define(source: str, scope: dict[str, object]) -> object:
    """The one function ``source`` defines, in a copy of ``scope``, its source readable as a cell's is."""
    filename = f"<nbc-tour-lint-{abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(scope)
    exec(compile(source, filename, "exec"), namespace)
    return next(v for k, v in namespace.items() if k not in scope and k != "__builtins__")


def test_the_lint_flags_calls_that_change_an_optimizer_a_module_or_a_tensor():
    net = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    scope = {"opt": opt, "net": net, "sched": torch.optim.lr_scheduler.StepLR(opt, 1), "torch": torch}
    cases = {
        "def optimizer_step():\n    opt.step()\n    opt.zero_grad()\n": {"opt"},
        "def to_train():\n    net.train()\n": {"net"},
        "def keep(t):\n    net.register_buffer('b', t)\n    return t\n": {"net"},
        "def tick():\n    sched.step()\n": {"sched"},
        "def update(o):\n    o.step()\n": {"o"},
        "def grads(x):\n    loss = net(x).sum()\n    loss.backward()\n    return loss\n": {"loss"},
    }
    for source, flagged in cases.items():
        warnings = lint_allow_in_graph(_define(source, scope))
        assert flagged <= {w.variable for w in warnings if w.rule == "mutation"}, (source, warnings)
    reads = _define("def lr(x):\n    return x * opt.param_groups[0]['lr']\n", scope)  # reading changes nothing
    assert not [w for w in lint_allow_in_graph(reads) if w.rule == "mutation"]


def test_allow_in_graph_is_never_offered_on_a_helper_that_steps_the_global_optimizer(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "train_step()"', HELPER_CELL)
    ip.run_cell("%nbcompile set optimizer_step disable")
    report = nbcompile.last().report
    commands = [f.command for c in report.causes for f in c.fixes]
    assert "%nbcompile set optimizer_step compile" in commands, commands  # the toggle's own break is advised on
    assert not any("allow_in_graph" in c for c in commands), commands
    assert not any("finds nothing against it" in f.why for c in report.causes for f in c.fixes)


# --- finding 3: a break in a loop: compile the step, not the loop ---------------------------------------------

def test_a_break_in_a_training_loop_says_to_compile_the_step_not_torchs_avoid_calling(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "epoch()"', EPOCH_CELL)
    report = nbcompile.last().report
    zero = [c for c in report.causes if "opt.zero_grad()" in c.source_line]
    assert zero, [(c.source_line, c.gb_type) for c in report.causes]
    whys = [f.why for c in zero for f in c.fixes]
    assert not any("Avoid calling" in w for w in whys), whys
    loop = _cell_line(EPOCH_CELL, "for i in range(0, 100, 32):")
    assert whys and "epoch runs eagerly" in whys[0] and f"for loop (line {loop})" in whys[0], whys
    assert "Compile the step, not the loop" in whys[0], whys
    # the optimizer's own break, reached from the same loop: not "call opt.step() outside epoch"
    stepping = [f.why for c in report.causes for f in c.fixes if "call `opt.step()`" in f.why]
    assert stepping and not any("outside epoch" in w for w in stepping), stepping
    assert any(f"inside the for loop of epoch (line {loop})" in w for w in stepping), stepping


def test_torchs_avoid_calling_hint_is_not_a_fix_for_a_library_function():
    brk = GraphBreak(function="f", filename="<ipython-input-3-abc>", lineno=3, cell_line=4,
                     source_line="    thing.reset()", reason="r", gb_type="Attempted to inline function marked as "
                     "skipped", gb_id="GB0008", explanation="Dynamo developers have intentionally marked that the "
                     "function should not be traced.", hints=["Avoid calling the function `Optimizer.zero_grad`.",
                                                              "Please file an issue to PyTorch."], doc_url=None)
    assert not [f for f in _advisor(["f"])(brk) if "Avoid calling" in f.why]
