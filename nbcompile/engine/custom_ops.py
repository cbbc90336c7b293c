"""The ``custom_op`` mode: a tracked function wrapped as a ``torch.library.custom_op``.

PyTorch's documentation calls ``allow_in_graph`` a footgun and recommends custom operators: an
operator is opaque to Dynamo (one node in the graph, no break) and correct by construction, as long as
its schema and its fake (shape) implementation are right. nbcompile derives both from the calls the
session's ``--run`` expression makes (run eagerly, on copies), so every call that worked before the
toggle works after it:

- the schema: each parameter's annotation when it names an operator type (``torch.Tensor``, ``int``,
  ``float``, ``bool``, ``int | float``, ``Optional[...]``, lists), else the types of the values every
  recorded call passed (and the default): Python numbers widen to ``Scalar`` (an int stays an int, a
  float a float), ``None`` among tensors or numbers makes the type optional (``float?`` beside floats);
  an argument that was ``None`` in every call is not judged (a later call may pass a tensor or a number):
  refused, asking for an annotation. The schema is proved on
  every recorded call; an argument of two kinds (a tensor in one call, a list in another), or a call
  an annotation does not admit, is refused with the reason;
- the fake implementation: the function itself, run on fake tensors with the call's ints, when it
  runs on meta tensors for every recorded call; else (it reads tensor values: ``.item()``, an ``if``
  on a tensor) each output shaped like the input it matched, checked on every recorded call and on
  probes with other tensor values and other int and bool arguments: an output whose shape follows
  the values or an int argument is refused, not guessed;
- the backward: torch.func.vjp of the function (run again, eagerly, by a second operator: opaque
  like the first, so a function that reads values still differentiates), registered with
  ``register_autograd``. It is tried on the first call: when vjp fails (``.numpy()``, an op functorch
  does not support), the operator is refused if a call of the run took a gradient through the
  function, else made without one (its backward raises, saying why);
- then ``torch.library.opcheck`` on the first call, its floating inputs requiring grad when the
  operator has a backward (a copy of them when the call took no gradient), and the gradient of that
  call (a seeded random gradient of each output) held against eager autograd's through the original
  function; a failure refuses the mode with its first line.

Outputs that share memory with an input are copied (an operator returns new tensors); a function
that changes an argument in place is refused. The operator is taken out of the dispatcher when the
toggle changes or the session resets. The exported code keeps the function's defaults and keyword-only
parameters, so the original calls run unchanged, and registers the same backward, so it trains too.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from ..core import torch_compat
from ..core.errors import NbcompileError
from ..core.text import cut
from . import check as check_ops
from .custom_op_backward import _op_register_autograd, _op_tensors, _op_vjp, backward_schema
from .custom_op_export import export_code as export_code
from .custom_op_spec import MAX_CALLS as MAX_CALLS
from .custom_op_spec import Call as Call
from .custom_op_spec import OpSpec as OpSpec
from .custom_op_spec import Sample as Sample
from .custom_op_spec import call_key as call_key
from .custom_op_spec import clone_tree as clone_tree
from .custom_op_spec import forward_spec, op_call, tensor_outputs

_COUNTER = itertools.count()


def spec_of(name: str, fn: Callable[..., Any], sample: Sample) -> OpSpec:
    """The operator's schema, fake implementation and backward for ``fn``, from the calls of its sample
    run. The backward is torch.func.vjp of ``fn``, tried on the first call: when it fails, the operator
    is refused if a call of the run needed its gradient, else made without one (``no_backward``)."""
    spec = forward_spec(name, fn, sample)
    try:
        positional, kwonly = op_call(spec, fn, clone_tree(sample.args), clone_tree(sample.kwargs))
        outputs, _ = tensor_outputs(sample.result, name)
        with check_ops.quiet():
            _op_vjp(fn, [torch.ones_like(o) for o in outputs], positional, kwonly)
        error = ""
    except Exception as exc:  # the refusal is raised outside: its cause is not the error the user reads
        error = f"{type(exc).__name__}: {cut(check_ops.one_line(str(exc)), 160)}" if str(exc) else type(exc).__name__
    if error:
        if any(call.needs_grad() for call in sample.all_calls()):
            raise NbcompileError(f"custom_op({name}): a call of the --run takes a gradient through it, and its "
                                 f"backward cannot be derived: torch.func.vjp of {name} raises {error}; use "
                                 "allow_in_graph or disable") from None
        return dataclasses.replace(spec, no_backward=error, how=f"{spec.how}; no backward (torch.func.vjp of it "
                                   f"raises {error}): the --run takes no gradient through it")
    return dataclasses.replace(spec, how=f"{spec.how}; the backward is torch.func.vjp of the function, checked "
                                         "against eager autograd on the first call")


def _fresh(out: Any, inputs: tuple[Any, ...]) -> Any:
    """An operator returns new tensors: an output sharing memory with an input is copied."""
    ptrs = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor) and t.device.type != "meta"}
    if isinstance(out, tuple):
        return tuple(_fresh(o, inputs) for o in out)
    if isinstance(out, torch.Tensor) and out.device.type != "meta" and out.untyped_storage().data_ptr() in ptrs:
        return out.clone()
    return out



def build(spec: OpSpec, fn: Callable[..., Any], sample: Sample | None = None, *,
          vjp_of: Callable[..., Any] | None = None) -> tuple[Any, Callable[[], None]]:
    """The operator for ``spec`` under a fresh library name (each one its own), with its backward (an
    operator of its own running torch.func.vjp of ``vjp_of``, by default ``fn``), and its release; with
    ``sample``: checked first (a failure: refused, nothing left behind) by ``torch.library.opcheck`` on
    the first call (its inputs requiring grad, when the operator has a backward) and by the gradient of
    that call held against eager autograd's."""
    namespace = f"nbcompile{next(_COUNTER)}"
    qualname = f"{namespace}::{spec.name.replace('.', '_')}"

    def impl(*args: Any, **kwargs: Any) -> Any:
        return _fresh(fn(*args, **kwargs), args + tuple(kwargs.values()))

    op = torch.library.custom_op(qualname, impl, mutates_args=(), schema=spec.schema)
    params = spec.params

    def fake(*args: Any, **kwargs: Any) -> Any:
        if spec.fake == "itself":
            with check_ops.quiet():  # it runs at every trace: what it prints or logs is the real call's to say, once
                out = fn(*args, **kwargs)
            return tuple(torch.empty_like(o) for o in out) if isinstance(out, tuple) else torch.empty_like(out)
        values = dict(zip(params, args, strict=False)) | kwargs
        outs = tuple(torch.empty_like(values[p], dtype=getattr(torch, dtype.removeprefix("torch.")) if dtype else None)
                     for p, dtype in spec.like)
        return outs if spec.tuple_out else outs[0]

    op.register_fake(fake)
    setattr(op, "_nbcompile_original", fn)  # noqa: B010  # the function behind it, for nbcompile's views and check
    differentiate = fn if vjp_of is None else vjp_of

    def backward_impl(grads: list[torch.Tensor], *args: Any, **kwargs: Any) -> list[torch.Tensor]:
        try:
            with check_ops.quiet():  # the function runs again: the user saw its forward say what it says
                return _op_vjp(differentiate, list(grads), args, kwargs)
        except Exception as exc:
            raise RuntimeError(f"custom_op({spec.name}): its backward, torch.func.vjp of the original function, "
                               f"raised {type(exc).__name__}: {check_ops.one_line(str(exc))}") from None

    backward_op = torch.library.custom_op(f"{qualname}_backward", backward_impl, mutates_args=(),
                                          schema=backward_schema(spec))
    backward_op.register_fake(lambda grads, *args, **kwargs: [torch.empty_like(t) for t in _op_tensors(args)])
    _op_register_autograd(op, backward_op)

    def release() -> None:
        torch_compat.destroy_custom_op(op)
        torch_compat.destroy_custom_op(backward_op)

    if sample is not None:
        try:
            _check(spec, op, fn, sample)
        except BaseException:
            release()
            raise
    return op, release


def _check(spec: OpSpec, op: Any, fn: Callable[..., Any], sample: Sample) -> None:
    """opcheck on the first call, and its gradient against eager autograd's (NbcompileError: refused)."""
    args, kwargs = clone_tree(sample.args), clone_tree(sample.kwargs)
    leaves = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    if spec.no_backward:  # the run takes no gradient through it: the backward is not checked
        for t in leaves:
            t.requires_grad_(False)
    elif not any(t.requires_grad for t in leaves):  # the call took no gradient: check the backward on a copy that does
        for t in leaves:
            t.requires_grad_(t.is_floating_point() or t.is_complex())
    try:
        torch.library.opcheck(op, args, kwargs)
        first = ""
    except Exception as exc:  # the refusal is raised outside: its cause is not the error the user reads
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    if first:
        raise NbcompileError(f"custom_op({spec.name}): torch.library.opcheck refused it: {first}")
    if not spec.no_backward:
        _check_gradient(spec, op, fn, sample)


def _check_gradient(spec: OpSpec, op: Any, fn: Callable[..., Any], sample: Sample) -> None:
    """The operator's gradient on the first call (every floating input requiring grad, a seeded random
    gradient of each output) held against eager autograd's through the original function: a difference
    beyond the dtype's tolerance refuses the operator. Where eager autograd itself fails, nothing is
    compared (there is no eager gradient to keep)."""
    generator = torch.Generator().manual_seed(0)
    runs = []
    for call in (op, fn):
        args, kwargs = clone_tree(sample.args), clone_tree(sample.kwargs)
        positional, kwonly = op_call(spec, fn, args, kwargs)
        names = [p for p, a in zip([p for p in spec.params if p not in spec.kwonly], positional, strict=True)
                 for t in (a if isinstance(a, (list, tuple)) else (a,)) if isinstance(t, torch.Tensor)]
        swap: dict[int, torch.Tensor] = {}
        wrt: list[tuple[str, torch.Tensor]] = []
        for name, t in zip(names, _op_tensors(positional), strict=True):
            if t.is_floating_point() or t.is_complex():
                swap[id(t)] = t.detach().requires_grad_()
                wrt.append((name, swap[id(t)]))
        values = [[swap.get(id(t), t) for t in a] if isinstance(a, (list, tuple)) else swap.get(id(a), a)
                  for a in positional]
        runs.append((call, values, kwonly, wrt))
    if not runs[0][3]:
        return
    grads: list[list[torch.Tensor | None]] = []
    cotangents: list[torch.Tensor] = []
    for index, (call, values, kwonly, wrt) in enumerate(runs):
        failed = ""
        try:
            with torch.enable_grad():
                out = call(*values, **kwonly)
            outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o.is_floating_point() or o.is_complex()]
            if index == 0:
                cotangents = [torch.randn(o.shape, generator=generator, dtype=o.dtype).to(o.device) for o in outs]
            pairs = [(o, c) for o, c in zip(outs, cotangents, strict=True) if o.requires_grad]
            got = torch.autograd.grad([o for o, _ in pairs], [w for _, w in wrt], [c for _, c in pairs],
                                      allow_unused=True) if pairs else (None,) * len(wrt)
        except Exception as exc:
            failed = f"{type(exc).__name__}: {cut(check_ops.one_line(str(exc)), 160)}"
        if failed and index == 1:
            return  # eager autograd fails: no gradient to hold the operator's against
        if failed:
            raise NbcompileError(f"custom_op({spec.name}): its backward fails on the first call of the --run: "
                                 f"{failed}")
        grads.append(list(got))
    for (name, w), mine, eager in zip(runs[0][3], grads[0], grads[1], strict=True):
        mine = torch.zeros_like(w) if mine is None else mine.detach()
        eager = torch.zeros_like(w) if eager is None else eager.detach()
        rtol, atol = check_ops.tolerance(w.dtype)
        close = mine.shape == eager.shape and bool(torch.isclose(mine, eager, rtol=rtol, atol=atol,
                                                                 equal_nan=True).all())
        if not close:
            worst = (mine - eager).abs().max().item() if mine.shape == eager.shape else float("nan")
            raise NbcompileError(
                f"custom_op({spec.name}): its backward (torch.func.vjp of {spec.name}, run again) gives a gradient "
                f"of {name} that differs from eager autograd's on the first call of the --run (max difference "
                f"{worst:.3g}; does it draw random numbers?); use allow_in_graph or disable")
