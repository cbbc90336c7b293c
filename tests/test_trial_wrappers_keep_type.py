"""A recompile fix's trial (a dimension marked, a number held as a tensor) calls a module entry through a
wrapper: the module keeps its own type and identity (Dynamo unwraps an ``OptimizedModule`` called from compiled
code only when its type is exactly that; a subclass was traced, and broke in ``Module.train``)."""

from __future__ import annotations

import torch
from torch._dynamo.utils import counters

from nbcompile.engine import trial


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = 2.0

    def forward(self, x):
        return x.cos() * self.scale


def _frames() -> int:
    return sum(counters["frames"].values())


def test_a_marked_module_keeps_its_type_and_the_mark_serves():
    torch._dynamo.reset()
    net = Net()
    compiled = torch.compile(net, backend="eager")
    kind = type(compiled)
    marked = trial.marking(compiled, net, {"_mark": ("forward", "x", 0, "maybe_mark_dynamic")})
    assert marked is compiled and type(marked) is kind
    marked(torch.ones(3))
    before = _frames()
    assert torch.equal(marked(torch.ones(5)), torch.ones(5).cos() * 2)
    assert _frames() == before  # the first call's mark made dimension 0 dynamic: a new size compiles nothing


def test_a_held_number_keeps_the_module_and_is_put_back():
    torch._dynamo.reset()
    net = Net()
    compiled = torch.compile(net, backend="eager")
    held = trial.marking(compiled, net, {"_as_tensor": ("forward", "self.scale")})
    assert held is compiled and type(held) is type(compiled)
    assert torch.equal(held(torch.ones(2)), torch.ones(2).cos() * 2)
    assert net.scale == 2.0 and type(net.scale) is float


def test_a_wrapped_module_called_from_compiled_code_adds_no_break():
    torch._dynamo.reset()
    net = Net()
    compiled = torch.compile(net, backend="eager")
    marked = trial.marking(compiled, net, {"_mark": ("forward", "x", 0, "maybe_mark_dynamic")})

    def step(x):
        marked.train()
        return marked(x).sin()

    explained = torch._dynamo.explain(step)(torch.ones(4))
    assert explained.graph_break_count == 0, [b.reason for b in explained.break_reasons]


MODULE_CELL = """\
import torch
class Net(torch.nn.Module):
    def forward(self, x):
        return x.sin() * 2
model = Net()
"""


def test_a_module_entrys_recompile_gets_its_mark_proven(ip):
    """The trial marks the dimension on the module's forward's own parameter (a module's signature is
    ``(*args, **kwargs)``: the mark was never applied, and the fix was never proven)."""
    import nbcompile

    from nbhelpers import run_compile_cell

    run_compile_cell(ip, '--backend eager --no-panel --entry model --run "[model(torch.ones(n)) for n in (3, 5, 7)]"',
                     MODULE_CELL)
    session = nbcompile.last()
    fixes = [f for r in session.report.recompiles for f in r.fixes if f.action is not None and f.action.kind == "mark"]
    assert fixes, [f.why for r in session.report.recompiles for f in r.fixes]
    assert any(f.verified is True for f in fixes), [(f.why, f.verified, f.effect) for f in fixes]
