"""What a ``custom_op`` operator is made of (``OpSpec``: its schema and fake implementation), derived
from the calls of the session's ``--run`` (``Call``, ``Sample``) and proved on each of them.

The calls are recorded as meta tensors; ``forward_spec`` proves the spec on every recorded call and
on probes with other values.

The schema takes each parameter's annotation when it names an operator type, else the one type that
admits every value the calls passed; the fake runs the function itself on fake tensors when it runs on
meta tensors, else gives outputs shaped like the input each matched. What cannot be derived is refused
with the reason (``NbcompileError``), never guessed.
"""

from __future__ import annotations

import collections.abc
import inspect as _inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from ..core.errors import NbcompileError

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
    if not rest:  # a later call may pass a tensor or a number, and an operator's argument takes one of them
        raise NbcompileError(f"custom_op({name}): not judged, because {param} was None in every call of the --run; "
                             f"annotate it ({param}: float | None = None, or torch.Tensor | None)")
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


def tensor_outputs(result: Any, name: str) -> tuple[list[torch.Tensor], bool]:
    if isinstance(result, torch.Tensor):
        return [result], False
    if isinstance(result, tuple) and result and all(isinstance(r, torch.Tensor) for r in result):
        return list(result), True
    raise NbcompileError(f"custom_op({name}): it returns a {type(result).__name__}; an operator returns a tensor or "
                         "a tuple of tensors; use allow_in_graph or disable")


def _out_words(outputs: list[torch.Tensor], tuple_out: bool) -> str:
    return f"a tuple of {len(outputs)} tensors" if tuple_out else "a tensor"


def op_call(spec: OpSpec, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """A call of ``fn`` as the operator receives it: every positional parameter in order (defaults
    filled in), and the keyword-only ones."""
    bound = _inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return ([bound.arguments[p] for p in spec.params if p not in spec.kwonly],
            {p: bound.arguments[p] for p in spec.kwonly})


def forward_spec(name: str, fn: Callable[..., Any], sample: Sample) -> OpSpec:
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
    outputs, tuple_out = tensor_outputs(sample.result, name)
    for call in calls[1:]:
        other, other_tuple = tensor_outputs(call.result, name)
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
        outputs, _ = tensor_outputs(call.result, name)
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
            outputs, _ = tensor_outputs(result, name)
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
            got, _ = tensor_outputs(result, "")
            wanted, _ = tensor_outputs(call.result, "")
        except Exception as exc:
            return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        if [(o.shape, o.dtype) for o in got] != [(o.shape, o.dtype) for o in wanted]:
            return "its outputs on meta tensors differ from the run's"
    return None
