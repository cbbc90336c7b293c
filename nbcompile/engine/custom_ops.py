"""The ``custom_op`` mode: a tracked function wrapped as a ``torch.library.custom_op``.

PyTorch's documentation calls ``allow_in_graph`` a footgun and recommends custom operators: an
operator is opaque to Dynamo (one node in the graph, no break) and correct by construction, as long as
its schema and its fake (shape) implementation are right. nbcompile derives both from one sample call
of the function (the session's ``--run`` expression, run eagerly on copies):

- the schema from the sample's argument and result types (tensors, ints, floats, bools, lists of
  tensors, optional tensors); anything else is refused with the reason;
- the fake implementation by running the function on meta tensors; when it cannot run there (it
  reads tensor values: ``.item()``, an ``if`` on a tensor), from the sample: each output shaped like
  the input it matched in shape and device. Neither: refused;
- then ``torch.library.opcheck`` on the sample; a failure refuses the mode with its first line.

Outputs that share memory with an input are copied (an operator returns new tensors); a function
that changes an argument in place is refused. The operator is taken out of the dispatcher when the
toggle changes or the session resets.
"""

from __future__ import annotations

import inspect as _inspect
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from ..core import torch_compat
from ..core.errors import NbcompileError

_COUNTER = itertools.count()
#: The library name the exported code registers its operators under.
EXPORT_NAMESPACE = "notebook"


@dataclass(frozen=True)
class Sample:
    """One eager call of the function: its arguments (cloned before the call) and its result."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    result: Any
    #: Parameters whose tensors the call changed in place.
    mutated: tuple[str, ...] = ()


@dataclass(frozen=True)
class OpSpec:
    """What an operator is made of; ``export_code`` writes it out for the user."""

    name: str
    params: tuple[str, ...]
    schema: str
    #: "itself": the function run on fake tensors; "like": outputs shaped like ``like`` (param, dtype).
    fake: str
    like: tuple[tuple[str, str], ...] = ()
    tuple_out: bool = False
    how: str = ""
    #: The parameters that are keyword-only (after ``*``).
    kwonly: tuple[str, ...] = ()


def clone_tree(value: Any) -> Any:
    """A copy of the tensors in ``value`` (nothing the call does later reaches the sample)."""
    def clone(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            return t.detach().clone().requires_grad_(t.requires_grad)
        return t
    return pytree.tree_map(clone, value)


def _type(value: Any, param: str, name: str) -> str:
    if isinstance(value, torch.Tensor):
        return "Tensor"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "SymInt"
    if isinstance(value, float):
        return "float"
    if value is None:
        return "Tensor?"
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return "Tensor[]"
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                          for v in value):
        return "SymInt[]"
    raise NbcompileError(f"custom_op({name}): its argument {param} is a {type(value).__name__}; an operator takes "
                         "tensors, ints, floats, bools and lists of tensors or ints; use allow_in_graph or disable")


def _outputs(result: Any, name: str) -> tuple[list[torch.Tensor], bool]:
    if isinstance(result, torch.Tensor):
        return [result], False
    if isinstance(result, tuple) and result and all(isinstance(r, torch.Tensor) for r in result):
        return list(result), True
    raise NbcompileError(f"custom_op({name}): it returns a {type(result).__name__}; an operator returns a tensor or "
                         "a tuple of tensors; use allow_in_graph or disable")


def spec_of(name: str, fn: Callable[..., Any], sample: Sample) -> OpSpec:
    """The operator's schema and fake implementation for ``fn``, from its sample call."""
    if sample.mutated:
        raise NbcompileError(f"custom_op({name}): it changes {', '.join(sample.mutated)} in place; an operator that "
                             "mutates needs mutates_args declared by hand; use disable")
    try:
        signature = _inspect.signature(fn)
        bound = signature.bind(*sample.args, **sample.kwargs)
    except (TypeError, ValueError) as exc:
        raise NbcompileError(f"custom_op({name}): its signature does not take the sample call ({exc})") from None
    bound.apply_defaults()
    params: list[str] = []
    declared: list[str] = []
    star = False
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise NbcompileError(f"custom_op({name}): *{param.name} has no operator schema; name each argument")
        value = bound.arguments.get(param.name, _inspect.Parameter.empty)
        if value is _inspect.Parameter.empty:
            raise NbcompileError(f"custom_op({name}): the sample call gave no {param.name}")
        kind = _type(value if param.default is _inspect.Parameter.empty or value is not None else param.default,
                     param.name, name)
        if isinstance(param.default, float) and kind == "SymInt":
            kind = "float"  # an int passed where the default is a float: the parameter takes floats
        text = f"{kind} {param.name}"
        if param.default is not _inspect.Parameter.empty:
            text += f"={_schema_default(param.default, name, param.name)}"
        if param.kind == param.KEYWORD_ONLY and not star:
            declared.append("*")
            star = True
        params.append(param.name)
        declared.append(text)
    outputs, tuple_out = _outputs(sample.result, name)
    out_schema = "Tensor" if not tuple_out else "(" + ", ".join("Tensor" for _ in outputs) + ")"
    schema = "(" + ", ".join(declared) + ") -> " + out_schema
    kwonly = tuple(p.name for p in signature.parameters.values() if p.kind == p.KEYWORD_ONLY)
    meta_error = _runs_on_meta(fn, sample, outputs)
    if meta_error is None:
        return OpSpec(name, tuple(params), schema, "itself", tuple_out=tuple_out,
                      how="the fake runs the function itself on fake tensors (it runs on meta tensors)", kwonly=kwonly)
    tensors = {p: v for p, v in bound.arguments.items() if isinstance(v, torch.Tensor)}
    like: list[tuple[str, str]] = []
    for out in outputs:
        match = next((p for p, v in tensors.items() if v.shape == out.shape and v.device == out.device), None)
        if match is None:
            raise NbcompileError(
                f"custom_op({name}): no fake implementation: its output {tuple(out.shape)} is shaped like none of its "
                f"inputs, and it does not run on meta tensors ({meta_error}); write a register_fake by hand, or "
                "use disable")
        # the input's dtype at call time when the sample kept it; else the one dtype the sample gave
        like.append((match, "" if out.dtype == tensors[match].dtype else str(out.dtype)))
    _probe_like(name, fn, bound.arguments, [p for p, _ in like], meta_error)
    return OpSpec(name, tuple(params), schema, "like", tuple(like), tuple_out,
                  how=f"the fake gives outputs shaped like {', '.join(p for p, _ in like)} (the function does not run "
                      f"on meta tensors: {meta_error}; checked on the sample and on probes with other values)",
                  kwonly=kwonly)


def _schema_default(value: Any, name: str, param: str) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)):
        return repr(value)
    raise NbcompileError(f"custom_op({name}): the default of {param} is a {type(value).__name__}; an operator's "
                         "defaults are numbers, bools or None")


def _probe_like(name: str, fn: Callable[..., Any], arguments: dict[str, Any], like: list[str],
                meta_error: str) -> None:
    """The "shaped like an input" guess, tried on inputs of other values (negated, zeros, random of both
    signs): an output whose shape follows the values (``x[x > 0]``) is refused, not guessed."""
    tensors = {p: v for p, v in arguments.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    generator = torch.Generator().manual_seed(0)
    variants = [
        {p: -v for p, v in tensors.items()},
        {p: torch.zeros_like(v) for p, v in tensors.items()},
        {p: torch.randn(v.shape, generator=generator, dtype=v.dtype).to(v.device) * 3 for p, v in tensors.items()},
    ]
    for variant in variants:
        values = {**arguments, **variant}
        try:
            with torch.no_grad():
                result = fn(**values)
            outputs, _ = _outputs(result, name)
        except NbcompileError:
            raise
        except Exception as exc:
            raise NbcompileError(f"custom_op({name}): no fake implementation: it does not run on meta tensors "
                                 f"({meta_error}), and on other values it raises {type(exc).__name__}; write a "
                                 "register_fake by hand, or use disable") from None
        for out, param in zip(outputs, like, strict=False):
            if out.shape != values[param].shape:
                raise NbcompileError(
                    f"custom_op({name}): no fake implementation: its output's shape depends on the values "
                    f"({tuple(out.shape)} for an input of {tuple(values[param].shape)}), and it does not run on meta "
                    f"tensors ({meta_error}); write a register_fake by hand, or use disable")


def _runs_on_meta(fn: Callable[..., Any], sample: Sample, outputs: list[torch.Tensor]) -> str | None:
    """None when ``fn`` on meta copies of the sample gives outputs of the sample's shapes and dtypes."""
    def meta(t: Any) -> Any:
        return t.detach().to("meta") if isinstance(t, torch.Tensor) else t
    try:
        with torch.no_grad():
            result = fn(*pytree.tree_map(meta, sample.args), **pytree.tree_map(meta, sample.kwargs))
        got, _ = _outputs(result, "")
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
    if [(o.shape, o.dtype) for o in got] != [(o.shape, o.dtype) for o in outputs]:
        return "its outputs on meta tensors differ from the sample's"
    return None


def _fresh(out: Any, inputs: tuple[Any, ...]) -> Any:
    """An operator returns new tensors: an output sharing memory with an input is copied."""
    ptrs = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor) and t.device.type != "meta"}
    if isinstance(out, tuple):
        return tuple(_fresh(o, inputs) for o in out)
    if isinstance(out, torch.Tensor) and out.device.type != "meta" and out.untyped_storage().data_ptr() in ptrs:
        return out.clone()
    return out


def build(spec: OpSpec, fn: Callable[..., Any], sample: Sample | None = None) -> tuple[Any, Callable[[], None]]:
    """The operator for ``spec`` under a fresh library name (each one its own), and its release; with
    ``sample``: checked by ``torch.library.opcheck`` first (a failure: refused, nothing left behind)."""
    qualname = f"nbcompile{next(_COUNTER)}::{spec.name.replace('.', '_')}"

    def impl(*args: Any, **kwargs: Any) -> Any:
        return _fresh(fn(*args, **kwargs), args + tuple(kwargs.values()))

    op = torch.library.custom_op(qualname, impl, mutates_args=(), schema=spec.schema)
    params = spec.params

    def fake(*args: Any, **kwargs: Any) -> Any:
        if spec.fake == "itself":
            out = fn(*args, **kwargs)
            return tuple(torch.empty_like(o) for o in out) if isinstance(out, tuple) else torch.empty_like(out)
        values = dict(zip(params, args, strict=False)) | kwargs
        outs = tuple(torch.empty_like(values[p], dtype=getattr(torch, dtype.removeprefix("torch.")) if dtype else None)
                     for p, dtype in spec.like)
        return outs if spec.tuple_out else outs[0]

    op.register_fake(fake)
    setattr(op, "_nbcompile_original", fn)  # noqa: B010  # the function behind it, for nbcompile's views and check

    def release() -> None:
        torch_compat.destroy_custom_op(op)

    if sample is not None:
        try:
            torch.library.opcheck(op, clone_tree(sample.args), clone_tree(sample.kwargs))
        except Exception as exc:
            release()
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            raise NbcompileError(f"custom_op({spec.name}): torch.library.opcheck refused it: {first}") from None
    return op, release


def export_namespace(spec: OpSpec) -> str:
    """The library name of an exported operator: ``notebook_<hash>``, from the operator's name and schema, so
    two cells' ``helper`` operators never replace one another in one process."""
    import hashlib

    return f"{EXPORT_NAMESPACE}_{hashlib.sha1(f'{spec.name}{spec.schema}'.encode()).hexdigest()[:8]}"


def export_code(spec: OpSpec) -> str:
    """Code that makes the same operator in the user's file, after the function's ``def``."""
    name = spec.name
    positional = [p for p in spec.params if p not in spec.kwonly]
    params = ", ".join(positional + (["*", *spec.kwonly] if spec.kwonly else []))
    call = ", ".join(positional + [f"{p}={p}" for p in spec.kwonly])
    args = ", ".join(spec.params)
    lines = [
        f"_{name}_eager = {name}",
        "",
        "",
        f"@torch.library.custom_op({export_namespace(spec) + '::' + name!r}, mutates_args=(), schema={spec.schema!r})",
        f"def {name}({params}):",
        f"    out = _{name}_eager({call})",
        "    # an operator returns new tensors: an output sharing an input's memory is copied",
        f"    shared = {{t.untyped_storage().data_ptr() for t in ({args},) if isinstance(t, torch.Tensor)}}",
    ]
    if spec.tuple_out:
        lines.append("    return tuple(o.clone() if o.untyped_storage().data_ptr() in shared else o for o in out)")
    else:
        lines.append("    return out.clone() if out.untyped_storage().data_ptr() in shared else out")
    lines += ["", "", f"@{name}.register_fake", f"def _({params}):"]
    if spec.fake == "itself":
        lines.append(f"    out = _{name}_eager({call})  # shapes only: it runs on fake tensors")
        lines.append("    return tuple(torch.empty_like(o) for o in out)" if spec.tuple_out
                     else "    return torch.empty_like(out)")
    else:
        outs = [f"torch.empty_like({p}, dtype={dtype})" if dtype else f"torch.empty_like({p})"
                for p, dtype in spec.like]
        lines.append(f"    return ({', '.join(outs)},)" if spec.tuple_out else f"    return {outs[0]}")
    return "\n".join(lines) + "\n"
