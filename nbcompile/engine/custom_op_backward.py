"""The backward of a ``custom_op`` operator: torch.func.vjp of the original function, run by a second
operator and registered with ``register_autograd``.

The second operator is opaque like the first: the function may read values, which no trace can
follow.

The three ``_op_*`` helpers use torch only: the exported code carries their source as it is, under
these names (``custom_op_export``), so a pasted operator trains too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .custom_op_spec import OpSpec


def _op_tensors(args: tuple[Any, ...] | list[Any]) -> list[torch.Tensor]:
    """The tensors among an operator's positional arguments (in lists too), in order."""
    return [t for a in args for t in (a if isinstance(a, (list, tuple)) else (a,)) if isinstance(t, torch.Tensor)]


def _op_vjp(eager: Callable[..., Any], grads: list[torch.Tensor], args: tuple[Any, ...] | list[Any],
            kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The gradient of each tensor ``_op_tensors(args)`` lists (zeros for the integer ones), given the
    gradient of each output: torch.func.vjp of ``eager`` (the function runs again, eagerly)."""
    tensors = _op_tensors(args)
    wrt = [i for i, t in enumerate(tensors) if t.is_floating_point() or t.is_complex()]
    kept: list[bool] = []

    def run(*diff: torch.Tensor) -> tuple[torch.Tensor, ...]:
        swap = dict(zip(wrt, diff, strict=True))
        count = iter(range(len(tensors)))

        def put(v: Any) -> Any:
            return swap.get(next(count), v) if isinstance(v, torch.Tensor) else v
        values = [[put(t) for t in a] if isinstance(a, (list, tuple)) else put(a) for a in args]
        out = eager(*values, **kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        kept[:] = [o.is_floating_point() or o.is_complex() for o in outs]
        return tuple(o for o, keep in zip(outs, kept, strict=True) if keep)
    result = [torch.zeros_like(t) for t in tensors]
    if wrt:
        pullback = torch.func.vjp(run, *(tensors[i] for i in wrt))[1]
        if any(kept):
            got = pullback(tuple(g for g, keep in zip(grads, kept, strict=True) if keep))
            for i, g in zip(wrt, got, strict=True):
                if g is not None:
                    result[i] = g
    seen = {t.untyped_storage().data_ptr() for t in (*tensors, *grads)}
    fresh = []
    for r in result:  # an operator returns new tensors
        fresh.append(r.clone() if r.untyped_storage().data_ptr() in seen else r)
        seen.add(fresh[-1].untyped_storage().data_ptr())
    return fresh


def _op_register_autograd(op: Any, backward_op: Any) -> None:
    """``op``'s backward: ``backward_op(grads, *args, **kwonly)`` (the gradient of each of its input tensors,
    by _op_vjp), handed to autograd as one gradient per argument (None where none is wanted)."""
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any,
                      keyword_only_inputs: dict[str, Any] | None = None) -> None:
        ctx.save_for_backward(*_op_tensors(inputs))
        ctx.layout = [("t", None) if isinstance(a, torch.Tensor) else
                      ("l", len(a)) if isinstance(a, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in a)
                      else ("v", a) for a in inputs]
        ctx.kwonly = dict(keyword_only_inputs or {})
        ctx.outs = [(o.shape, o.dtype, o.device) for o in (output if isinstance(output, tuple) else (output,))]

    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:
        saved = iter(ctx.saved_tensors)
        args = [next(saved) if kind == "t" else [next(saved) for _ in range(v)] if kind == "l" else v
                for kind, v in ctx.layout]
        full = [torch.zeros(shape, dtype=dtype, device=device) if g is None else g
                for g, (shape, dtype, device) in zip(grads, ctx.outs, strict=True)]
        flat = iter(backward_op(full, *args, **ctx.kwonly))
        result: list[Any] = []
        for (kind, v), need in zip(ctx.layout, ctx.needs_input_grad, strict=False):
            if kind == "t":
                g = next(flat)
                result.append(g if need else None)
            elif kind == "l":
                gs = [next(flat) for _ in range(v)]
                needs = need if isinstance(need, (list, tuple)) else [need] * v
                result.append([g if n else None for g, n in zip(gs, needs, strict=True)])
            else:
                result.append(None)
        return tuple(result)
    op.register_autograd(backward, setup_context=setup_context)


def backward_schema(spec: OpSpec) -> str:
    """The backward operator's schema: the gradient of each output, then the operator's own parameters;
    it returns the gradient of each input tensor."""
    declared = spec.schema[1:spec.schema.rindex(") -> ")]
    grads = next(n for n in ("grads", "grads_", "output_grads") if n not in spec.params)
    return f"(Tensor[] {grads}{', ' + declared if declared else ''}) -> Tensor[]"
