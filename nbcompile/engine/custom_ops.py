"""The ``custom_op`` mode: a tracked function wrapped as a ``torch.library.custom_op``.

PyTorch's documentation calls ``allow_in_graph`` a footgun and recommends custom operators: an
operator is opaque to Dynamo (one node in the graph, no break) and correct by construction, as long as
its schema and its fake (shape) implementation are right. nbcompile derives both from the calls the
session's ``--run`` expression makes (run eagerly, on copies), so every call that worked before the
toggle works after it:

- the schema: each parameter's annotation when it names an operator type (``torch.Tensor``, ``int``,
  ``float``, ``bool``, ``int | float``, ``Optional[...]``, lists), else the types of the values every
  recorded call passed (and the default): Python numbers widen to ``Scalar`` (an int stays an int, a
  float a float), ``None`` among tensors or numbers makes the type optional. The schema is proved on
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

import ast
import collections.abc
import dataclasses
import inspect as _inspect
import itertools
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from ..core import torch_compat
from ..core.errors import NbcompileError
from . import check as check_ops

_COUNTER = itertools.count()
#: The library name the exported code registers its operators under.
EXPORT_NAMESPACE = "notebook"
#: The distinct calls (by argument kinds, shapes and numbers) a sample run keeps to prove the spec on.
MAX_CALLS = 64
_EMPTY = _inspect.Parameter.empty


@dataclass(frozen=True)
class Call:
    """One call of the function in the run: its arguments and result, tensors as meta tensors (shape
    and dtype, no data)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    result: Any

    @classmethod
    def of(cls, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Call:
        """The call as meta tensors; an argument that required grad (with grad enabled: the call was part
        of a backward) still requires it."""
        grad = torch.is_grad_enabled()

        def meta(t: Any) -> Any:
            if not isinstance(t, torch.Tensor):
                return t
            return t.detach().to("meta").requires_grad_(grad and t.requires_grad)
        meta_args, meta_kwargs = pytree.tree_map(meta, (args, kwargs))
        return cls(meta_args, meta_kwargs, meta_tree(result))

    def needs_grad(self) -> bool:
        """Whether an argument of the call required grad (its gradient was wanted)."""
        leaves = pytree.tree_leaves((self.args, self.kwargs))
        return any(isinstance(t, torch.Tensor) and t.requires_grad for t in leaves)


def meta_tree(value: Any) -> Any:
    """``value`` with each tensor replaced by a meta tensor of its shape, strides and dtype."""
    def meta(t: Any) -> Any:
        return t.detach().to("meta") if isinstance(t, torch.Tensor) else t
    return pytree.tree_map(meta, value)


def call_key(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> str:
    """What tells two calls apart for the spec: the structure, each tensor's shape and dtype, each
    number's value (an int can decide a shape)."""
    leaves, tree = pytree.tree_flatten((args, kwargs, result))

    def leaf(v: Any) -> str:
        if isinstance(v, torch.Tensor):
            return f"T{tuple(v.shape)}{v.dtype}{v.device}"
        if v is None or isinstance(v, (bool, int, float, str)):
            return f"{type(v).__name__}:{v!r}"
        return f"{type(v).__name__}@{id(v)}"
    return f"{tree}|{'|'.join(leaf(v) for v in leaves)}"


@dataclass(frozen=True)
class Sample:
    """The first eager call of the function: its arguments (cloned before the call) and its result; and
    what every call of the run showed."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    result: Any
    #: Parameters whose tensors a call changed in place.
    mutated: tuple[str, ...] = ()
    #: Every distinct call of the run (the first included), up to ``MAX_CALLS``; empty: the first only.
    calls: tuple[Call, ...] = ()
    #: Calls seen once ``MAX_CALLS`` distinct ones were kept, of kinds not among them (not proved on).
    unproved: int = 0

    def all_calls(self) -> tuple[Call, ...]:
        return self.calls or (Call.of(self.args, self.kwargs, self.result),)


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
    #: param -> its default as Python source (numbers, bools, None), for the exported ``def``.
    defaults: tuple[tuple[str, str], ...] = ()
    #: Why torch.func.vjp of the function fails (then its backward raises); empty: the backward works.
    no_backward: str = ""


def clone_tree(value: Any) -> Any:
    """A copy of the tensors in ``value`` (nothing the call does later reaches the sample)."""
    def clone(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            return t.detach().clone().requires_grad_(t.requires_grad)
        return t
    return pytree.tree_map(clone, value)


# -- the schema --------------------------------------------------------------------------------------

#: A value's kind, as the schema sees it, and how a message names it.
_KIND_WORDS = {"tensor": "a tensor", "none": "None", "bool": "a bool", "int": "an int", "float": "a float",
               "tensors": "a list of tensors", "ints": "a list of ints", "floats": "a list of floats",
               "empty": "an empty list"}
_LISTS = {"tensors": "Tensor[]", "ints": "SymInt[]"}


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "tensor"
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, (list, tuple)):
        if not value:
            return "empty"
        if all(isinstance(v, torch.Tensor) for v in value):
            return "tensors"
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return "ints"
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return "floats"
        return f"{type(value).__name__} of {', '.join(sorted({type(v).__name__ for v in value}))}"
    return type(value).__name__


def _observed(kinds: set[str], param: str, name: str, notes: list[str]) -> str:
    """The schema type that admits every kind of value ``param`` took; refused when none does."""
    odd = sorted(k for k in kinds if k not in _KIND_WORDS)
    if odd:
        raise NbcompileError(f"custom_op({name}): its argument {param} is a {odd[0]}; an operator takes tensors, "
                             "ints, floats, bools and lists of tensors or numbers; use allow_in_graph or disable")
    optional = "?" if "none" in kinds else ""
    rest = kinds - {"none"}
    if "empty" in rest and rest & {"tensors", "ints", "floats"}:
        rest.discard("empty")  # an empty list fits the list the other calls passed
    if rest == {"empty"}:
        raise NbcompileError(f"custom_op({name}): not judged, because {param} was an empty list in every call of the "
                             f"--run; annotate it ({param}: list[torch.Tensor], list[int] or list[float])")
    if not rest:
        notes.append(f"{param} was None in every call, taken as an optional tensor (annotate it to say otherwise)")
        return "Tensor?"
    if rest == {"tensor"}:
        return "Tensor" + optional
    if rest == {"bool"}:
        return "bool" + optional
    if rest <= {"int", "float", "bool"}:
        return "Scalar" + optional  # a Scalar keeps an int an int and a float a float
    if len(rest) == 1 and next(iter(rest)) in _LISTS:
        return _LISTS[next(iter(rest))] + optional
    if rest <= {"ints", "floats"}:
        return "float[]" + optional
    first, second = sorted(rest)[:2]
    raise NbcompileError(f"custom_op({name}): its argument {param} is sometimes {_KIND_WORDS[first]} and sometimes "
                         f"{_KIND_WORDS[second]} in the calls of the --run; an operator's argument has one type: "
                         "use allow_in_graph or disable")


def _hint(fn: Callable[..., Any], param: _inspect.Parameter) -> Any:
    """The parameter's annotation, evaluated where the function was defined (``_EMPTY``: none, or one that
    cannot be evaluated: then the calls decide)."""
    if param.annotation is _EMPTY:
        return _EMPTY
    holder = types.SimpleNamespace(__annotations__={param.name: param.annotation},
                                   __globals__=getattr(fn, "__globals__", {}))
    try:
        return typing.get_type_hints(holder)[param.name]
    except Exception:  # a name the annotation uses is not defined (yet): the calls decide
        return _EMPTY


_SCALARS: dict[Any, str] = {torch.Tensor: "Tensor", bool: "bool", int: "SymInt", float: "float"}


def _annotated(hint: Any) -> str | None:
    """The schema type an annotation names, or None when it names none an operator takes."""
    if hint in _SCALARS:
        return _SCALARS[hint]
    origin, members = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        kept = [m for m in members if m is not type(None)]
        optional = "?" if len(kept) < len(members) else ""
        if len(kept) > 1 and set(kept) <= {int, float, bool}:
            return "Scalar" + optional  # int | float: a Scalar keeps an int an int
        inner = _annotated(kept[0]) if len(kept) == 1 else None
        return None if inner is None or inner.endswith("?") else inner + optional
    if origin in (list, tuple, collections.abc.Sequence) and members:
        if origin is tuple and not (len(members) == 2 and members[1] is Ellipsis) and len(set(members)) != 1:
            return None
        element = _SCALARS.get(members[0])
        return None if element is None else element + "[]"
    return None


def _fits(value: Any, kind: str) -> bool:
    """Whether the operator's schema type ``kind`` admits ``value`` as the function received it."""
    if kind.endswith("?"):
        return value is None or _fits(value, kind[:-1])
    if kind.endswith("[]"):
        return isinstance(value, (list, tuple)) and all(_fits(v, kind[:-2]) for v in value)
    if kind == "Tensor":
        return isinstance(value, torch.Tensor)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "SymInt":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return kind == "Scalar" and isinstance(value, (int, float, bool))


def _schema_type(fn: Callable[..., Any], param: _inspect.Parameter, values: list[Any], name: str,
                 notes: list[str]) -> str:
    """``param``'s schema type: its annotation's when it names one (proved on ``values``), else the one
    type that admits every value it took."""
    hint = _hint(fn, param)
    kind = None if hint is _EMPTY else _annotated(hint)
    if kind is None:
        return _observed({_kind(v) for v in values}, param.name, name, notes)
    if param.default is None and not kind.endswith("?"):
        kind += "?"  # ``bias: float = None``: the default says it is optional
    for value in values:
        if not _fits(value, kind):
            said = param.annotation if isinstance(param.annotation, str) else getattr(hint, "__name__", str(hint))
            shown = f" ({value!r})" if isinstance(value, (int, float, bool)) or value is None else ""
            raise NbcompileError(f"custom_op({name}): {param.name} is annotated {said}, but a call of the --run "
                                 f"passes {_KIND_WORDS.get(_kind(value), _kind(value))}{shown}; an operator takes "
                                 "only what the annotation says: correct it, or use allow_in_graph or disable")
    return kind


def _outputs(result: Any, name: str) -> tuple[list[torch.Tensor], bool]:
    if isinstance(result, torch.Tensor):
        return [result], False
    if isinstance(result, tuple) and result and all(isinstance(r, torch.Tensor) for r in result):
        return list(result), True
    raise NbcompileError(f"custom_op({name}): it returns a {type(result).__name__}; an operator returns a tensor or "
                         "a tuple of tensors; use allow_in_graph or disable")


def _out_words(outputs: list[torch.Tensor], tuple_out: bool) -> str:
    return f"a tuple of {len(outputs)} tensors" if tuple_out else "a tensor"


def spec_of(name: str, fn: Callable[..., Any], sample: Sample) -> OpSpec:
    """The operator's schema, fake implementation and backward for ``fn``, from the calls of its sample
    run. The backward is torch.func.vjp of ``fn``, tried on the first call: when it fails, the operator
    is refused if a call of the run needed its gradient, else made without one (``no_backward``)."""
    spec = _forward_spec(name, fn, sample)
    try:
        positional, kwonly = _op_call(spec, fn, clone_tree(sample.args), clone_tree(sample.kwargs))
        outputs, _ = _outputs(sample.result, name)
        with check_ops.quiet():
            _op_vjp(fn, [torch.ones_like(o) for o in outputs], positional, kwonly)
        error = ""
    except Exception as exc:  # the refusal is raised outside: its cause is not the error the user reads
        error = f"{type(exc).__name__}: {check_ops.one_line(str(exc))[:160]}" if str(exc) else type(exc).__name__
    if error:
        if any(call.needs_grad() for call in sample.all_calls()):
            raise NbcompileError(f"custom_op({name}): a call of the --run takes a gradient through it, and its "
                                 f"backward cannot be derived: torch.func.vjp of {name} raises {error}; use "
                                 "allow_in_graph or disable") from None
        return dataclasses.replace(spec, no_backward=error, how=f"{spec.how}; no backward (torch.func.vjp of it "
                                   f"raises {error}): the --run takes no gradient through it")
    return dataclasses.replace(spec, how=f"{spec.how}; the backward is torch.func.vjp of the function, checked "
                                         "against eager autograd on the first call")


def _op_call(spec: OpSpec, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """A call of ``fn`` as the operator receives it: every positional parameter in order (defaults
    filled in), and the keyword-only ones."""
    bound = _inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return ([bound.arguments[p] for p in spec.params if p not in spec.kwonly],
            {p: bound.arguments[p] for p in spec.kwonly})


def _forward_spec(name: str, fn: Callable[..., Any], sample: Sample) -> OpSpec:
    """The operator's schema and fake implementation for ``fn``, from the calls of its sample run."""
    if sample.mutated:
        raise NbcompileError(f"custom_op({name}): it changes {', '.join(sample.mutated)} in place; an operator that "
                             "mutates needs mutates_args declared by hand; use disable")
    try:
        signature = _inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise NbcompileError(f"custom_op({name}): its signature cannot be read ({exc})") from None
    calls = sample.all_calls()
    bound_calls: list[dict[str, Any]] = []
    for call in (Call(sample.args, sample.kwargs, sample.result), *calls[1:]):
        try:
            bound = signature.bind(*call.args, **call.kwargs)
        except TypeError as exc:
            raise NbcompileError(f"custom_op({name}): its signature does not take a call of the --run ({exc})") \
                from None
        bound.apply_defaults()
        bound_calls.append(dict(bound.arguments))
    params: list[str] = []
    declared: list[str] = []
    notes: list[str] = []
    defaults: list[tuple[str, str]] = []
    star = False
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise NbcompileError(f"custom_op({name}): *{param.name} has no operator schema; name each argument")
        values = [arguments[param.name] for arguments in bound_calls]
        if param.default is not _EMPTY:
            values.append(param.default)  # a later call may leave it out
        text = f"{_schema_type(fn, param, values, name, notes)} {param.name}"
        if param.default is not _EMPTY:
            default = _schema_default(param.default, name, param.name)
            text += f"={default}"
            defaults.append((param.name, default))
        if param.kind == param.KEYWORD_ONLY and not star:
            declared.append("*")
            star = True
        params.append(param.name)
        declared.append(text)
    outputs, tuple_out = _outputs(sample.result, name)
    for call in calls[1:]:
        other, other_tuple = _outputs(call.result, name)
        if (other_tuple, len(other)) != (tuple_out, len(outputs)):
            raise NbcompileError(f"custom_op({name}): it returns {_out_words(outputs, tuple_out)} in one call of the "
                                 f"--run and {_out_words(other, other_tuple)} in another; an operator returns one "
                                 "kind; use allow_in_graph or disable")
    out_schema = "Tensor" if not tuple_out else "(" + ", ".join("Tensor" for _ in outputs) + ")"
    schema = "(" + ", ".join(declared) + ") -> " + out_schema
    kwonly = tuple(p.name for p in signature.parameters.values() if p.kind == p.KEYWORD_ONLY)
    proved = f"proved on {len(calls)} distinct call{'s' if len(calls) != 1 else ''} of the --run" + (
        f" ({sample.unproved} later call{'s' if sample.unproved != 1 else ''} not checked)" if sample.unproved else "")
    noted = "".join(f"; {note}" for note in notes)
    meta_error = _runs_on_meta(fn, calls)
    if meta_error is None:
        return OpSpec(name, tuple(params), schema, "itself", tuple_out=tuple_out,
                      how="the fake runs the function itself on fake tensors, with the call's numbers (it runs on "
                          f"meta tensors); {proved}{noted}", kwonly=kwonly, defaults=tuple(defaults))
    tensors = {p: v for p, v in bound_calls[0].items() if isinstance(v, torch.Tensor)}
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
    _like_on_calls(name, like, calls, bound_calls, meta_error)
    _probe_like(name, fn, signature, bound_calls[0], [p for p, _ in like], meta_error)
    return OpSpec(name, tuple(params), schema, "like", tuple(like), tuple_out,
                  how=f"the fake gives outputs shaped like {', '.join(p for p, _ in like)} (the function does not run "
                      f"on meta tensors: {meta_error}; checked on every call, and on probes with other values and "
                      f"other int and bool arguments); {proved}{noted}",
                  kwonly=kwonly, defaults=tuple(defaults))


def _schema_default(value: Any, name: str, param: str) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)) and repr(value) not in ("nan", "inf", "-inf"):
        return repr(value)
    raise NbcompileError(f"custom_op({name}): the default of {param} is {value!r}; an operator's defaults are finite "
                         "numbers, bools or None")


def _like_on_calls(name: str, like: list[tuple[str, str]], calls: tuple[Call, ...],
                   bound_calls: list[dict[str, Any]], meta_error: str) -> None:
    """The "shaped like an input" guess, held against every call of the run (shapes and dtypes)."""
    for call, arguments in zip(calls[1:], bound_calls[1:], strict=True):
        outputs, _ = _outputs(call.result, name)
        for out, (param, dtype) in zip(outputs, like, strict=False):
            value = arguments[param]
            if not isinstance(value, torch.Tensor) or value.shape != out.shape:
                got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise NbcompileError(
                    f"custom_op({name}): no fake implementation: a call of the --run gives an output of "
                    f"{tuple(out.shape)}, not the shape of {param} ({got}); write a register_fake by hand, or use "
                    f"disable (it does not run on meta tensors: {meta_error})")
            if str(out.dtype) != (dtype or str(value.dtype)):
                raise NbcompileError(
                    f"custom_op({name}): no fake implementation: its output's dtype follows neither {param} nor one "
                    f"dtype ({out.dtype} in a call of the --run); write a register_fake by hand, or use disable (it "
                    f"does not run on meta tensors: {meta_error})")


def _probe_like(name: str, fn: Callable[..., Any], signature: _inspect.Signature, arguments: dict[str, Any],
                like: list[str], meta_error: str) -> None:
    """The "shaped like an input" guess, tried on inputs of other values (negated, zeros, random of both
    signs) and on other int and bool arguments: an output whose shape follows the values (``x[x > 0]``)
    or an int (``x[:n]``) is refused, not guessed. An int the function raises on is a call that fails
    eagerly too: it proves nothing either way and is skipped."""
    tensors = {p: v for p, v in arguments.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    generator = torch.Generator().manual_seed(0)
    variants: list[tuple[str, dict[str, Any]]] = [
        ("", {p: -v for p, v in tensors.items()}),
        ("", {p: torch.zeros_like(v) for p, v in tensors.items()}),
        ("", {p: torch.randn(v.shape, generator=generator, dtype=v.dtype).to(v.device) * 3
              for p, v in tensors.items()}),
    ]
    for param, value in arguments.items():
        if isinstance(value, bool):
            variants.append((param, {param: not value}))
        elif isinstance(value, int):
            others = sorted({0, 1, value // 2, value - 1, value + 1} - {value})
            variants += [(param, {param: other}) for other in others]
    for number, variant in variants:
        values = {**arguments, **variant}
        call = _inspect.BoundArguments(signature, values)
        try:
            with torch.no_grad():
                result = fn(*call.args, **call.kwargs)
            outputs, _ = _outputs(result, name)
        except NbcompileError:
            raise
        except Exception as exc:
            if number:
                continue
            raise NbcompileError(f"custom_op({name}): no fake implementation: it does not run on meta tensors "
                                 f"({meta_error}), and on other values it raises {type(exc).__name__}; write a "
                                 "register_fake by hand, or use disable") from None
        for out, param in zip(outputs, like, strict=False):
            if out.shape == values[param].shape:
                continue
            if number:
                raise NbcompileError(
                    f"custom_op({name}): no fake implementation: its output's shape depends on its argument {number} "
                    f"({tuple(out.shape)} for {number}={variant[number]!r}, not the shape of {param}); write a "
                    f"register_fake by hand, or use disable (it does not run on meta tensors: {meta_error})")
            raise NbcompileError(
                f"custom_op({name}): no fake implementation: its output's shape depends on the values "
                f"({tuple(out.shape)} for an input of {tuple(values[param].shape)}), and it does not run on meta "
                f"tensors ({meta_error}); write a register_fake by hand, or use disable")


def _runs_on_meta(fn: Callable[..., Any], calls: tuple[Call, ...]) -> str | None:
    """None when ``fn`` on meta copies of each call's arguments gives outputs of that call's shapes and
    dtypes; else what went wrong."""
    for call in calls:
        try:
            with torch.no_grad():
                result = fn(*clone_tree(call.args), **clone_tree(call.kwargs))
            got, _ = _outputs(result, "")
            wanted, _ = _outputs(call.result, "")
        except Exception as exc:
            return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        if [(o.shape, o.dtype) for o in got] != [(o.shape, o.dtype) for o in wanted]:
            return "its outputs on meta tensors differ from the run's"
    return None


def _fresh(out: Any, inputs: tuple[Any, ...]) -> Any:
    """An operator returns new tensors: an output sharing memory with an input is copied."""
    ptrs = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor) and t.device.type != "meta"}
    if isinstance(out, tuple):
        return tuple(_fresh(o, inputs) for o in out)
    if isinstance(out, torch.Tensor) and out.device.type != "meta" and out.untyped_storage().data_ptr() in ptrs:
        return out.clone()
    return out


# -- the backward ------------------------------------------------------------------------------------
# The operator's gradient is torch.func.vjp of the original function, run by a second operator (opaque
# like the first: the function may read values, which no trace can follow). These three functions use
# torch only: the exported code carries them as they are, so the pasted operator trains too.


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


def backward_schema(spec: OpSpec) -> str:
    """The backward operator's schema: the gradient of each output, then the operator's own parameters;
    it returns the gradient of each input tensor."""
    declared = spec.schema[1:spec.schema.rindex(") -> ")]
    grads = next(n for n in ("grads", "grads_", "output_grads") if n not in spec.params)
    return f"(Tensor[] {grads}{', ' + declared if declared else ''}) -> Tensor[]"


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
        positional, kwonly = _op_call(spec, fn, args, kwargs)
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
            failed = f"{type(exc).__name__}: {check_ops.one_line(str(exc))[:160]}"
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


def export_namespace(spec: OpSpec) -> str:
    """The library name of an exported operator: ``notebook_<hash>``, from the operator's name and schema, so
    two cells' ``helper`` operators never replace one another in one process."""
    import hashlib

    return f"{EXPORT_NAMESPACE}_{hashlib.sha1(f'{spec.name}{spec.schema}'.encode()).hexdigest()[:8]}"


def export_code(spec: OpSpec) -> str:
    """Code that makes the same operator in the user's file, after the function's ``def``: the same
    parameters, defaults and keyword-only ones, so the function's calls run unchanged."""
    name = spec.name
    defaults = dict(spec.defaults)

    def declared(p: str) -> str:
        return f"{p}={defaults[p]}" if p in defaults else p

    positional = [p for p in spec.params if p not in spec.kwonly]
    params = ", ".join([declared(p) for p in positional] + (["*", *map(declared, spec.kwonly)] if spec.kwonly else []))
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
    if not spec.no_backward:
        lines += ["", ""] + _backward_code(spec, params, positional)
    return "\n".join(lines) + "\n"


def _backward_code(spec: OpSpec, params: str, positional: list[str]) -> list[str]:
    """The exported operator's backward: torch.func.vjp of the eager function, run by an operator of its
    own (the helpers are nbcompile's, as they run in the session)."""
    name = spec.name
    schema = backward_schema(spec)
    grads = schema[len("(Tensor[] "):].split(",", 1)[0].split(")", 1)[0]
    listed = f"[{', '.join(positional)}]"
    kwonly = "{" + ", ".join(f"{p!r}: {p}" for p in spec.kwonly) + "}"
    return [
        f"# {name}'s backward: torch.func.vjp of the eager function, an operator of its own (it may read values)",
        *_kit_source().splitlines(),
        "",
        "",
        f"@torch.library.custom_op({export_namespace(spec) + '::' + name + '_backward'!r}, mutates_args=(), "
        f"schema={schema!r})",
        f"def _{name}_backward({grads}, {params}):" if params else f"def _{name}_backward({grads}):",
        f"    return _op_vjp(_{name}_eager, {grads}, {listed}, {kwonly})",
        "",
        "",
        f"@_{name}_backward.register_fake",
        f"def _({grads}, {params}):" if params else f"def _({grads}):",
        f"    return [torch.empty_like(t) for t in _op_tensors({listed})]",
        "",
        "",
        f"_op_register_autograd({name}, _{name}_backward)",
    ]


def _kit_source() -> str:
    """The source of the backward's helpers, without annotations (the pasted code imports torch only)."""
    import textwrap

    texts = []
    for helper in (_op_tensors, _op_vjp, _op_register_autograd):
        tree = _Unannotate().visit(ast.parse(textwrap.dedent(_inspect.getsource(helper))))
        texts.append(ast.unparse(tree))
    return "\n\n\n".join(texts)


class _Unannotate(ast.NodeTransformer):
    """A function without its annotations: ``x: T = v`` becomes ``x = v``, ``def f(a: T) -> R`` ``def f(a)``
    (an annotation would need the names it uses)."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        node.returns = None
        arguments = node.args
        for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg):
            if arg is not None:
                arg.annotation = None
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> Any:
        if node.value is None:
            return None
        return ast.copy_location(ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno), node)
