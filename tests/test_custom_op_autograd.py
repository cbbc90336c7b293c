"""The ``custom_op`` mode trains (issue 23, point 3): the operator's backward is torch.func.vjp of the
original function, registered with ``register_autograd``, checked by opcheck with inputs requiring grad
and against eager autograd's gradient on the first call; a function vjp cannot differentiate is refused
when the run takes a gradient through it, and the exported code registers the same backward."""

from __future__ import annotations

import textwrap

import pytest
import torch

import nbcompile
from nbcompile.engine import custom_ops
from nbcompile.engine.toggles import available_function_modes

from nbhelpers import run_compile_cell

pytestmark = pytest.mark.skipif("custom_op" not in available_function_modes(),
                                reason=f"torch {torch.__version__} has no torch.library.custom_op/opcheck")

TRAINING_CELL = """\
import torch
def helper(x):
    print("helper runs")
    return x.sin() * 2
def step(w, x):
    return helper(w * x).cos()
def train(w, x):
    w.grad = None
    loss = step(w, x).sum()
    loss.backward()
    return w.grad
w = torch.linspace(-1.0, 1.0, 6).requires_grad_()
x = torch.linspace(0.5, 2.0, 6)
"""


def _session(ip, body: str, run: str, entry: str, backend: str = "aot_eager"):
    result = run_compile_cell(ip, f'--backend {backend} --no-panel --entry {entry} --run "{run}"',
                              textwrap.dedent(body))
    assert result.error_in_exec is None, result.error_in_exec
    return nbcompile.last()


def _eager_grad(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    w = w.detach().clone().requires_grad_()
    ((w * x).sin() * 2).cos().sum().backward()
    assert w.grad is not None
    return w.grad


def test_a_training_step_through_a_custom_op_gets_the_eager_gradient(ip):
    session = _session(ip, TRAINING_CELL, "train(w, x)", "step")
    session.set("helper", "custom_op")
    assert session.toggles["helper"] == "custom_op"
    report = session.report
    assert report.check is not None and report.check.ok, report.check
    w, x = ip.user_ns["w"], ip.user_ns["x"]
    got = ip.user_ns["train"](w, x)
    assert got is not None
    assert torch.allclose(got, _eager_grad(w, x), rtol=1e-5, atol=1e-6)
    code = session.export()
    assert "register_autograd" in code and "torch.func.vjp" in code


def test_a_run_without_grad_then_a_backward_after_the_toggle(ip):
    session = _session(ip, """\
        import torch
        def helper(x):
            return x.sin() * 2
        def step(w, x):
            return helper(w * x).cos()
        w = torch.linspace(-1.0, 1.0, 6)
        x = torch.linspace(0.5, 2.0, 6)
        """, "step(w, x)", "step")
    session.set("helper", "custom_op")
    assert session.toggles["helper"] == "custom_op"
    ip.run_cell("w.requires_grad_()\nstep(w, x).sum().backward()")
    w, x = ip.user_ns["w"], ip.user_ns["x"]
    assert w.grad is not None
    assert torch.allclose(w.grad, _eager_grad(w, x), rtol=1e-5, atol=1e-6)


NUMPY_BODY = """\
import torch
def helper(x):
    scale = float(x.detach().numpy().sum())   # numpy: torch.func.vjp cannot see through it
    return x.sin() * scale
def step(w, x):
    return helper(w * x).cos()
def train(w, x):
    w.grad = None
    step(w, x).sum().backward()
    return w.grad
w = torch.linspace(-1.0, 1.0, 6).requires_grad_()
x = torch.linspace(0.5, 2.0, 6)
"""


def test_a_function_vjp_cannot_differentiate_is_refused_when_the_run_takes_its_gradient(ip):
    session = _session(ip, NUMPY_BODY, "train(w, x)", "step")
    with pytest.raises(nbcompile.NbcompileError, match=r"custom_op\(helper\): a call of the --run takes a "
                                                       r"gradient through it.*torch\.func\.vjp of helper raises") \
            as caught:
        session.set("helper", "custom_op")
    assert "\n" not in str(caught.value)
    assert session.toggles["helper"] == "compile"
    w, x = ip.user_ns["w"], ip.user_ns["x"]
    assert ip.user_ns["train"](w, x) is not None  # the session's previous state trains as before


def test_without_a_gradient_in_the_run_such_a_function_stays_usable_and_its_backward_says_why(ip):
    session = _session(ip, NUMPY_BODY, "step(w.detach(), x)", "step")
    session.set("helper", "custom_op")
    assert session.toggles["helper"] == "custom_op"
    assert "register_autograd" not in session.export()
    w, x = ip.user_ns["w"], ip.user_ns["x"]
    with torch.no_grad():
        assert ip.user_ns["step"](w, x).shape == (6,)
    with pytest.raises(RuntimeError, match=r"custom_op\(helper\): its backward, torch\.func\.vjp"):
        ip.user_ns["step"](w, x).sum().backward()


# -- the checks catch a wrong backward ---------------------------------------------------------------


def _sample(fn, *args):
    result = fn(*args)
    plain = custom_ops.clone_tree(args)
    return custom_ops.Sample(plain, {}, custom_ops.clone_tree(result), (),
                             (custom_ops.Call.of(args, {}, result),))


def helper(x, k=2):
    return x.sin() * k


def test_a_backward_of_wrong_values_is_refused_against_eager_autograd():
    sample = _sample(helper, torch.linspace(-1.0, 1.0, 5))
    spec = custom_ops.spec_of("helper", helper, sample)
    with pytest.raises(nbcompile.NbcompileError, match=r"gives a gradient of x that differs from eager autograd's"):
        custom_ops.build(spec, helper, sample, vjp_of=lambda x, k=2: x.sin() * 3)
    op, release = custom_ops.build(spec, helper, sample)  # the right one is kept
    x = torch.linspace(-1.0, 1.0, 5).requires_grad_()
    op(x, 3).sum().backward()
    assert torch.allclose(x.grad, 3 * x.detach().cos())
    release()


def test_opcheck_refuses_a_backward_of_the_wrong_shape():
    sample = _sample(helper, torch.linspace(-1.0, 1.0, 5))
    spec = custom_ops.spec_of("helper", helper, sample)
    with pytest.raises(nbcompile.NbcompileError, match=r"torch\.library\.opcheck refused it"):
        custom_ops.build(spec, helper, sample, vjp_of=lambda x, k=2: x.sum())


def test_tuple_and_integer_outputs_and_lists_of_tensors_get_their_gradients():
    def two(xs, y):
        return xs[0] * y, y.argmax(), (xs[1] * y).exp()
    sample = _sample(two, [torch.rand(4), torch.rand(4)], torch.rand(4))
    spec = custom_ops.spec_of("two", two, sample)
    op, release = custom_ops.build(spec, two, sample)
    a, b, y = (torch.rand(4, requires_grad=True) for _ in range(3))
    first, _, third = op([a, b], y)
    (first.sum() + third.sum()).backward()
    assert torch.allclose(a.grad, y.detach())
    assert torch.allclose(b.grad, (y * (b * y).exp()).detach())
    assert torch.allclose(y.grad, (a + b * (b * y).exp()).detach())
    release()


def test_the_exported_operator_trains_too():
    sample = _sample(helper, torch.linspace(-1.0, 1.0, 5))
    spec = custom_ops.spec_of("helper", helper, sample)
    namespace = {"torch": torch, "helper": helper}
    exec(custom_ops.export_code(spec), namespace)  # noqa: S102  # the code a user pastes
    x = torch.linspace(-1.0, 1.0, 5).requires_grad_()
    compiled = torch.compile(lambda t: namespace["helper"](t, 3).cos().sum(), backend="aot_eager", fullgraph=True)
    compiled(x).backward()
    assert torch.allclose(x.grad, -(3 * x.detach().sin()).sin() * 3 * x.detach().cos(), rtol=1e-5, atol=1e-6)
