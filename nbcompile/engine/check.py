"""The eager check: compare a compiled run with an eager run of the original code.

``allow_in_graph`` and friends can change results silently (seed 003: an
``allow_in_graph(torch.vmap(torch.sum))`` made outside the compiled function
returns a scalar under backend ``eager``). The check runs the same expression
again with the original functions and every compiled callable forced eager,
on copies of the state the expression reaches (``state.Replay``: tensors,
modules with their grads, optimizers with their state, lists), from the same
random-number state, and compares:

- the values, leaf by leaf through tuples, lists, dicts, dataclasses, modules,
  optimizers and plain objects, with ``torch.testing.assert_close`` and the
  dtype-aware tolerances below;
- what the two runs left in the state they reached (tensors changed in place,
  grads, optimizer state, list contents), so a lost or doubled mutation is
  caught too.

Differences are judged as PyTorch's accuracy harness judges them
(``torch._dynamo.utils.same`` with ``fp64_ref``): the eager reference runs a
second time on a float64 copy of the state (``Replay.widened``; float32 values
met inside the run are widened where they meet float64 ones), and a value
that is not within the dtype tolerances of eager's is wrong only when its
error against the float64 reference is clearly larger than eager float32's
own (RMSE, the harness's multiplier, cosine similarity for large tensors).
Where the float64 run cannot be made (over the copy budget, views, code that
insists on its dtype), the dtype tolerances judge alone (``rule="tolerance"``)
and the message says why. Trials and the session judge with ``judge``.

The user's objects see one run, the compiled one; what the eager run printed
is not shown, and what it may not do (write files, reach what no copy holds) is
stopped or named by the run audit (``audit``). A ``Check`` says what it found as
data (``kind``, ``rule``: ``model.status``); its ``message`` only shows it.
"""

from __future__ import annotations

import cmath
import collections.abc
import dataclasses
import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..core import torch_compat
from ..core.text import cut
from ..model.report import Check
from ..model.status import CheckKind, CheckRule
from .audit import OutsideEffect as OutsideEffect
from .audit import no_outside_effects as no_outside_effects
from .replay import Replay
from .runstate import RngState as RngState
from .runstate import quiet as quiet

#: (rtol, atol) by dtype: assert_close's documented defaults. Integers, bools: exact.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex32: (1e-3, 1e-5),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}
#: Python floats mostly come from float32 tensors (``.item()``): compared like float32.
PYTHON_FLOAT_TOLERANCE = TOLERANCES[torch.float32]
#: Ops whose values come from a random-number generator that Inductor does not share with eager.
RANDOM_OPS = frozenset({
    "dropout", "dropout_", "rand", "randn", "randint", "rand_like", "randn_like", "randint_like",
    "randperm", "bernoulli", "bernoulli_", "normal", "normal_", "uniform_", "multinomial",
    "alpha_dropout", "feature_alpha_dropout", "rrelu",
})
_MAX_PROBLEMS = 3
#: The harness's ``tol`` (``same``'s default): a value passes when its RMSE against the float64 reference is
#: at most ``multiplier * eager's + FP64_TOL / 10``.
FP64_TOL = 1e-4
#: Tensors of at least this many elements are also judged by cosine similarity against the reference.
COSINE_NUMEL = 1 << 16
COSINE_MIN = 0.99
_NARROW = (torch.float16, torch.bfloat16, torch.float32)
#: No reference for this value (the float64 run did not run, or has nothing at that place).
_NOREF: Any = object()


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return TOLERANCES.get(dtype, (0.0, 0.0))


# --- comparing two values ------------------------------------------------------------

@dataclasses.dataclass
class Comparison:
    problems: list[str] = dataclasses.field(default_factory=list)
    diffs: list[float] = dataclasses.field(default_factory=list)
    compared: int = 0
    #: Values that have no comparison (no ``==``, nothing inside to compare), by path.
    skipped: list[str] = dataclasses.field(default_factory=list)
    #: id(real object) -> its copy: a real object and its copy count as the same object.
    pairs: dict[int, Any] = dataclasses.field(default_factory=dict, repr=False)
    seen: set[tuple[int, int]] = dataclasses.field(default_factory=set, repr=False)
    #: The pairs in ``seen``, held: a temporary (a state dict, an object's contents) freed mid-walk would
    #: hand its id to another object, which would then be taken as already compared.
    held: list[tuple[Any, Any]] = dataclasses.field(default_factory=list, repr=False)
    #: Why no float64 reference judged ("" when one did): the rule is then the dtype tolerances.
    fp64_reason: str = "no float64 reference was run"
    #: Values judged against the float64 reference: (path, compiled error, eager error, allowed error).
    errors: list[tuple[str, float, float, float]] = dataclasses.field(default_factory=list)
    #: Floating-point values the float64 run had no counterpart for (judged by the dtype tolerances).
    unreferenced: int = 0

    @property
    def max_abs_diff(self) -> float | None:
        return max(self.diffs) if self.diffs else None


def compare(compiled: Any, eager: Any, path: str = "result", into: Comparison | None = None,
            reference: Any = _NOREF) -> Comparison:
    """Compare two run values leaf by leaf; problems name the path (``result[1]['y']``). ``reference``: the
    float64 run's value at the same place, walked alongside (floating-point leaves are judged against it)."""
    out = into if into is not None else Comparison()
    _compare(compiled, eager, path, out, ref=reference)
    return out


def _child(ref: Any, get: Callable[[Any], Any]) -> Any:
    if ref is _NOREF:
        return _NOREF
    try:
        return get(ref)
    except Exception:  # the float64 run left something else there
        return _NOREF


def _item(ref: Any, key: Any) -> Any:
    try:
        return ref[key] if ref is not _NOREF else _NOREF
    except Exception:
        return _NOREF


def _attr(ref: Any, name: str) -> Any:
    return getattr(ref, name, _NOREF) if ref is not _NOREF else _NOREF


def _grad(ref: Any) -> Any:
    grad = getattr(ref, "grad", None)
    return grad if grad is not None else _NOREF


def _compare(a: Any, b: Any, path: str, out: Comparison, depth: int = 0, ref: Any = _NOREF) -> None:
    if depth > 12:
        return
    a, b = torch_compat.unwrap_compiled(a), torch_compat.unwrap_compiled(b)  # a module entry returned as is
    if ref is not _NOREF:
        ref = torch_compat.unwrap_compiled(ref)
    if _is_numpy(a) or _is_numpy(b):
        a, b = _from_numpy(a), _from_numpy(b)
        ref = _from_numpy(ref) if ref is not _NOREF else ref
    if isinstance(a, collections.abc.Iterator) or isinstance(b, collections.abc.Iterator):
        out.skipped.append(f"{path} (an iterator: comparing would consume it)")
        return
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        _compare_tensors(a, b, path, out, ref)
        return
    if a is None or b is None or isinstance(a, (str, bytes, bool)) or isinstance(b, (str, bytes, bool)):
        _compare_plain(a, b, path, out)
        return
    if isinstance(a, (int, float, complex)) and isinstance(b, (int, float, complex)):
        _compare_numbers(a, b, path, out, ref)
        return
    key = (id(a), id(b))
    if key in out.seen:  # cycles, and objects reached twice
        return
    out.seen.add(key)
    out.held.append((a, b))
    if type(a) is not type(b):
        if _same_class_name(a, b):  # a class defined again (its cell run twice): one name, judged by contents
            _compare_contents(a, b, path, out, depth, ref)
        else:
            out.problems.append(f"{path}: compiled gives {_kind(a, b)}, eager gives {_kind(b, a)}")
        return
    if isinstance(a, (list, tuple, collections.deque)):
        if len(a) != len(b):
            out.problems.append(f"{path}: compiled gives {_kind(a)}, eager gives {_kind(b)}")
            return
        same_len = isinstance(ref, (list, tuple)) and len(ref) == len(a)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _compare(x, y, f"{path}[{i}]", out, depth + 1, ref[i] if same_len else _NOREF)
    elif isinstance(a, dict):
        if not _same_keys(a, b, out):
            out.problems.append(f"{path}: compiled has keys {_short(list(a))}, eager has {_short(list(b))}")
            return
        refs = list(ref.values()) if isinstance(ref, dict) and len(ref) == len(a) else [_NOREF] * len(a)
        for (key_a, x), y, r in zip(a.items(), b.values(), refs, strict=True):
            _compare(x, y, f"{path}[{_short(key_a)}]", out, depth + 1, r)
    elif isinstance(a, (set, frozenset)):
        _compare_plain(a, b, path, out)
    elif isinstance(a, torch.nn.Module):
        ref_params = _child(ref, lambda r: dict(r.named_parameters()) if isinstance(r, torch.nn.Module) else _NOREF)
        ref_buffers = _child(ref, lambda r: dict(r.named_buffers()) if isinstance(r, torch.nn.Module) else _NOREF)
        _compare_named(dict(a.named_parameters()), dict(b.named_parameters()), path, out, depth, ref_params)
        _compare_named(dict(a.named_buffers()), dict(b.named_buffers()), path, out, depth, ref_buffers)
        for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=False):
            if p.grad is not None or q.grad is not None:
                r = _child(_item(ref_params, name), _grad)
                _compare(p.grad, q.grad, f"{path}.{name}.grad", out, depth + 1, r)
        if a.training != b.training:
            out.problems.append(f"{path}.training: compiled gives {a.training}, eager gives {b.training}")
        _compare_plain_attributes(a, b, path, out, depth, ref)
    elif isinstance(a, torch.optim.Optimizer):
        _compare(a.state_dict()["state"], b.state_dict()["state"], f"{path}.state", out, depth + 1,
                 _child(ref, lambda r: r.state_dict()["state"]))
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            _compare(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}", out, depth + 1,
                     _attr(ref, f.name))
    elif out.pairs.get(id(a)) is b or a is b or not _has_own_eq(a) or _holds_tensors(a):
        # no == of its own (DynamicCache, small classes holding tensors), or one that cannot judge tensors
        # (identity, repr, or tensor == tensor, ambiguous or exact): the tensors inside, leaf by leaf
        _compare_contents(a, b, path, out, depth, ref)
    else:
        _compare_plain(a, b, path, out)


def _same_keys(a: dict[Any, Any], b: dict[Any, Any], out: Comparison) -> bool:
    if len(a) != len(b):
        return False
    for ka, kb in zip(a, b, strict=True):
        if ka is kb or out.pairs.get(id(ka)) is kb:
            continue
        try:
            if not bool(ka == kb):
                return False
        except Exception:
            return False
    return True


def _compare_named(a: dict[str, Any], b: dict[str, Any], path: str, out: Comparison, depth: int,
                   ref: Any = _NOREF) -> None:
    if list(a) != list(b):
        out.problems.append(f"{path}: compiled has {_short(list(a))}, eager has {_short(list(b))}")
        return
    for name in a:
        _compare(a[name], b[name], f"{path}.{name}", out, depth + 1, _item(ref, name))


def _compare_contents(a: Any, b: Any, path: str, out: Comparison, depth: int, ref: Any = _NOREF) -> None:
    state_a, state_b = _contents(a), _contents(b)
    if state_a is None or state_b is None:
        if a is not b and out.pairs.get(id(a)) is not b:
            out.skipped.append(path)
        return
    if set(state_a) != set(state_b):  # the same attributes set in another order are the same attributes
        out.problems.append(
            f"{path}: compiled has attributes {_short(list(state_a))}, eager has {_short(list(state_b))}"
        )
        return
    state_ref = _child(ref, _contents)
    for name in state_a:
        _compare(state_a[name], state_b[name], f"{path}.{name}", out, depth + 1,
                 _item(state_ref, name))


def _compare_plain_attributes(a: torch.nn.Module, b: torch.nn.Module, path: str, out: Comparison, depth: int,
                              ref: Any = _NOREF) -> None:
    """A module's tensors held as plain attributes, not registered (a cache that is an ``nn.Module``, as
    transformers' ``Cache`` was from 4.42 to 4.47, keeps its keys in lists): compared like its parameters."""
    mine, theirs = _plain_tensor_attributes(a), _plain_tensor_attributes(b)
    if not mine and not theirs:
        return
    if set(mine) != set(theirs):
        out.problems.append(
            f"{path}: compiled has attributes {_short(sorted(mine))}, eager has {_short(sorted(theirs))}"
        )
        return
    for name in mine:
        _compare(mine[name], theirs[name], f"{path}.{name}", out, depth + 1, _attr(ref, name))


def _plain_tensor_attributes(module: torch.nn.Module) -> dict[str, Any]:
    return {k: v for k, v in torch_compat.namespace_items(vars(module))
            if not k.startswith("_") and not isinstance(v, torch.nn.Module) and _holds_tensors(v)}


def _contents(value: Any) -> dict[str, Any] | None:
    """What an object holds, for objects compared by content: its ``__slots__`` (through the class's slot
    descriptors, so a property of the same name does not hide them) and its ``__dict__``."""
    if isinstance(value, type):
        return None
    state: dict[str, Any] = {}
    for cls in type(value).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            if name.startswith("__") and not name.endswith("__"):  # a private slot's descriptor is mangled
                name = f"_{cls.__name__.lstrip('_')}{name}"
            descriptor = cls.__dict__.get(name)
            try:
                item = descriptor.__get__(value, type(value)) if descriptor is not None else getattr(value, name)
            except Exception:  # a slot never set (AttributeError), or a property in its place that raised
                continue
            state.setdefault(name, item)
    try:
        attributes = vars(value)
    except TypeError:  # no __dict__: the slots alone
        attributes = None
    if isinstance(attributes, collections.abc.Mapping):
        state.update(attributes)
    elif not state:
        return None
    return {k: v for k, v in state.items() if not callable(v) or isinstance(v, torch.nn.Module)}


#: How far ``_holds_tensors`` looks: nesting depth, and items per container.
_HOLDS_DEPTH = 4
_HOLDS_ITEMS = 64


def _holds_tensors(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` holds a tensor (or a module) in its attributes, slots or containers, looked for a few
    levels down: such an object's own ``==`` cannot judge it (tensor ``==`` is elementwise)."""
    if isinstance(value, (torch.Tensor, torch.nn.Module)):
        return True
    if depth >= _HOLDS_DEPTH or value is None or isinstance(value, (str, bytes, bool, int, float, complex, type)):
        return False
    items: Iterable[Any]
    if isinstance(value, dict):
        items = value.values()
    elif isinstance(value, (list, tuple, collections.deque, set, frozenset)):
        items = value
    else:
        state = _contents(value)
        if not state:
            return False
        items = state.values()
    for i, item in enumerate(items):
        if i >= _HOLDS_ITEMS:
            break
        if _holds_tensors(item, depth + 1):
            return True
    return False


def _same_class_name(a: Any, b: Any) -> bool:
    ta, tb = type(a), type(b)
    return ta.__qualname__ == tb.__qualname__ and ta.__module__ == tb.__module__


def _has_own_eq(value: Any) -> bool:
    return type(value).__eq__ is not object.__eq__  # type: ignore[comparison-overlap]  # typeshed: two signatures


def _compare_plain(a: Any, b: Any, path: str, out: Comparison) -> None:
    try:
        equal = bool(a == b)
    except Exception:  # an == that cannot say (it returns a tensor, or raises)
        out.skipped.append(path)
        return
    if not equal:
        out.problems.append(f"{path}: compiled gives {_short(a)}, eager gives {_short(b)}")
    out.compared += 1


def _compare_numbers(a: Any, b: Any, path: str, out: Comparison, ref: Any = _NOREF) -> None:
    out.compared += 1
    if isinstance(a, bool) or isinstance(b, bool) or (isinstance(a, int) and isinstance(b, int)):
        if a != b:
            out.problems.append(f"{path}: compiled gives {a!r}, eager gives {b!r}")
        return
    if (isinstance(a, float) and math.isnan(a)) and (isinstance(b, float) and math.isnan(b)):
        return
    if isinstance(a, (int, float, complex)) and isinstance(b, (int, float, complex)) and \
            (cmath.isinf(a) or cmath.isinf(b)):
        # the same infinity agrees (inf - inf is nan, not a difference: NemotronH's config holds
        # time_step_limit=(0.0, inf), and every trial's check once FAILED on it); any other pair with an
        # infinity does not (inf and -inf were once "close": their difference is within a tolerance of inf)
        if a != b:
            out.problems.append(f"{path}: compiled gives {a!r}, eager gives {b!r}")
        return
    diff = abs(a - b)
    if not math.isnan(diff):
        out.diffs.append(float(diff))
    rtol, atol = PYTHON_FLOAT_TOLERANCE
    close = diff <= atol + rtol * abs(b)
    if isinstance(ref, (int, float)) and not isinstance(ref, bool) and isinstance(a, float) and isinstance(b, float):
        judged = _against_reference(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64),
                                    torch.tensor(float(ref), dtype=torch.float64), path, out, close)
        if judged is not None:
            if judged:
                out.problems.append(f"{path}: compiled gives {a!r}, eager gives {b!r}, float64 gives {ref!r} "
                                    f"({judged})")
            return
    elif out.fp64_reason == "" and isinstance(a, float):
        out.unreferenced += 1
    if not close:
        out.problems.append(f"{path}: compiled gives {a!r}, eager gives {b!r} (abs diff {diff:.3g})")


def _compare_tensors(a: Any, b: Any, path: str, out: Comparison, ref: Any = _NOREF) -> None:
    out.compared += 1
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        out.problems.append(f"{path}: compiled gives {_kind(a)}, eager gives {_kind(b)}")
        return
    if a.shape != b.shape:
        out.problems.append(f"{path}: shape {tuple(a.shape)} compiled, {tuple(b.shape)} eager")
        return
    if a.dtype != b.dtype:
        out.problems.append(f"{path}: dtype {a.dtype} compiled, {b.dtype} eager")
        return
    if a.device != b.device:
        out.problems.append(f"{path}: device {a.device} compiled, {b.device} eager")
        return
    a, b = a.detach(), b.detach()
    if a.is_sparse or a.layout != torch.strided:
        a, b = a.to_dense(), b.to_dense()
    referenced = (isinstance(ref, torch.Tensor) and ref.shape == a.shape and ref.is_floating_point()
                  and ref.layout == torch.strided)
    if _bitwise_equal(a, b):  # bit for bit (never with a NaN): what the steps below would find, without them
        if a.numel():
            out.diffs.append(0.0)
        if a.is_floating_point() and a.numel():
            if referenced:
                _identical_against_reference(a, ref.detach(), path, out)
            elif out.fp64_reason == "":
                out.unreferenced += 1
        return
    if a.numel():
        wide = torch.complex128 if a.is_complex() else torch.float64
        x, y = a.to(wide), b.to(wide)
        both_nan = torch.isnan(x) & torch.isnan(y)
        same_inf = torch.isinf(x) & (x == y)
        delta = torch.where(both_nan | same_inf, torch.zeros((), dtype=torch.float64, device=x.device), (x - y).abs())
        out.diffs.append(float(torch.nan_to_num(delta, nan=math.inf).max()))
    rtol, atol = tolerance(a.dtype)
    problem = ""
    try:
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as exc:
        problem = one_line(str(exc))
    if a.is_floating_point() and a.numel():
        if referenced:
            judged = _against_reference(a, b, ref.detach(), path, out, not problem)
            if judged is not None:
                if judged:
                    out.problems.append(f"{path}: {judged}; {problem}" if problem else f"{path}: {judged}")
                return
        elif out.fp64_reason == "":
            out.unreferenced += 1
    if problem:
        out.problems.append(f"{path}: {problem}")


def _rmse(ref: torch.Tensor, value: torch.Tensor) -> float:
    return float(torch.sqrt(torch.mean(torch.square(ref - value.to(torch.float64)))))


def _cosine(ref: torch.Tensor, value: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(ref.flatten(), value.flatten().to(torch.float64), dim=0,
                                                       eps=1e-6))


def multiplier(dtype: torch.dtype, numel: int) -> float:
    """The harness's multiplier on eager's error: 3 for half precision and small tensors (noise dominates
    them), else 2."""
    return 3.0 if dtype in (torch.float16, torch.bfloat16) or numel < 1000 else 2.0


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``torch.equal``; False where it has no kernel (``complex32`` on the CPU): the long way judges those."""
    try:
        return bool(torch.equal(a, b))
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def _identical_against_reference(a: torch.Tensor, ref: torch.Tensor, path: str, out: Comparison) -> None:
    """``_against_reference`` for a compiled value equal to eager's bit for bit: it passes, with one error
    for both (none where the reference has NaNs, as there)."""
    ref = ref.to(torch.float64)
    if bool(torch.isnan(ref).any()):
        return
    error = _rmse(ref, a)
    out.errors.append((path, error, error, multiplier(a.dtype, a.numel()) * error + FP64_TOL / 10))


def _against_reference(a: torch.Tensor, b: torch.Tensor, ref: torch.Tensor, path: str, out: Comparison,
                       close: bool) -> str | None:
    """Judge compiled ``a`` and eager ``b`` against the float64 reference ``ref``, as ``same(fp64_ref=...)``
    does: "" when ``a`` passes, a reason when it is wrong, None when the reference cannot judge (NaNs
    where the runs have none): then the dtype tolerances do."""
    ref = ref.to(torch.float64)
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    if bool(torch.isnan(ref).any()) and not bool(torch.isnan(b64).any()):
        return None
    nan_a, nan_b = torch.isnan(a64), torch.isnan(b64)
    if bool((nan_a != nan_b).any()):
        return "" if close else "NaN where eager has none" if bool((nan_a & ~nan_b).any()) else None
    keep = ~nan_a
    if not bool(keep.any()):
        return ""
    ref, a64, b64 = ref[keep], a64[keep], b64[keep]
    res_err, ref_err = _rmse(ref, a64), _rmse(ref, b64)
    allowed = multiplier(a.dtype, a.numel()) * ref_err + FP64_TOL / 10
    out.errors.append((path, res_err, ref_err, allowed))
    if close:
        return ""
    if not res_err <= allowed:
        return (f"compiled error {res_err:.3g} against the float64 reference, eager error {ref_err:.3g} "
                f"(up to {allowed:.3g} allowed)")
    if a.numel() >= COSINE_NUMEL:
        cos_a, cos_b = _cosine(ref, a64), _cosine(ref, b64)
        if cos_a < COSINE_MIN <= cos_b:
            return f"cosine similarity to the float64 reference {cos_a:.4f}, eager's {cos_b:.4f}"
    return ""


def one_line(message: str) -> str:
    """assert_close's message, which spans lines, as one line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    keep = [line for line in lines if line.startswith(("Mismatched elements", "Greatest absolute difference"))]
    return "; ".join(keep) if keep else (lines[0] if lines else "values differ")


def _kind(value: Any, other: Any = _NOREF) -> str:
    """``value`` as a mismatch names it; by its class's full name where it reads as ``other`` does."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    text = _short(value)
    if other is not _NOREF and text == _short(other) and type(value) is not type(other):
        return f"{text} (a {type(value).__module__}.{type(value).__qualname__})"
    return text


def _is_numpy(value: Any) -> bool:
    return type(value).__module__ == "numpy" and hasattr(value, "dtype")


def _from_numpy(value: Any) -> Any:
    if not _is_numpy(value):
        return value
    try:
        return torch.as_tensor(value)
    except (TypeError, RuntimeError):  # object arrays, strings: compared with ==
        return value


def _short(value: Any) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


# --- the check ---------------------------------------------------------------------------

def against_eager(
    result: Any,
    run_eager: Callable[[Any], Any],
    replay: Replay,
    rng_before: RngState,
    *,
    bind: dict[Any, Any] | None = None,
    random_ops: Iterable[str] = (),
    backend: str = "",
) -> Check:
    """Run ``run_eager`` on the copies ``replay`` took before the compiled run (which ran on the user's
    objects), and judge (``judge``)."""
    return judge(result, replay, run_eager, rng_before, bind=bind, random_ops=random_ops, backend=backend)


def judge(
    result: Any,
    eager_copy: Replay,
    run_eager: Callable[[Any], Any],
    rng_before: RngState,
    *,
    compiled: Replay | None = None,
    bind: dict[Any, Any] | None = None,
    random_ops: Iterable[str] = (),
    backend: str = "",
) -> Check:
    """The one judgement of a compiled run (the session's and every trial's).

    ``run_eager`` runs on ``eager_copy`` (copies taken before the compiled run, not used since), with
    ``bind`` (slot -> the original function) in place of what the session rebound, and again on a float64
    copy of them (``Replay.widened``), both from the random-number state ``rng_before``. The compiled run
    ran on the user's objects, or on ``compiled`` (copies of its own). ``result`` and what each run left
    in the state it reached are compared. The generators are left as they were when this was called.
    """
    if eager_copy.refused is not None:
        return Check(True, None, eager_copy.refused, compared=False)
    wide = eager_copy.widened()  # before the eager run changes the copies it is made from
    rng_after = RngState()
    rng_before.restore()
    try:
        with quiet(), torch_compat.force_eager(), eager_copy.swapped(bind) as extra, \
                no_outside_effects(watch=eager_copy):
            expected = run_eager(extra)
    except OutsideEffect as exc:
        rng_after.restore()
        effect = f"the run {exc}{' outside Python' if exc.outside else ''}"
        return _found(Check(True, None, f"not compared: {effect}, which the check will not do a second time",
                            compared=False), CheckKind.OUTSIDE_EFFECT, effect)
    except Exception as exc:
        rng_after.restore()
        return _found(Check(False, None, f"the eager reference run raised {type(exc).__name__}: "
                            f"{one_line(str(exc))}"), CheckKind.EAGER_RAISED)
    reference, why = _reference(wide, run_eager, rng_before, bind)
    rng_after.restore()
    if compiled is None:
        pairs: dict[int, Any] = dict(eager_copy.memo)
    else:  # the two copies were taken from the same objects: copy A's object and copy B's are one object
        pairs = {id(a): eager_copy.memo[real] for real, a in compiled.memo.items() if real in eager_copy.memo}
    comparison = Comparison(pairs=pairs, fp64_reason=why)
    compare(result, expected, into=comparison, reference=reference)
    wide_of = wide.memo if not why else {}
    for label, mine, theirs, real in _changed(compiled, eager_copy):
        twin = wide_of.get(id(real), _NOREF)
        compare(mine, theirs, f"{label} (changed in place)", comparison, reference=twin)
        if mine.grad is not None or theirs.grad is not None:
            twin_grad = twin.grad if isinstance(twin, torch.Tensor) and twin.grad is not None else _NOREF
            compare(mine.grad, theirs.grad, f"{label}.grad", comparison, reference=twin_grad)
    for label, real, theirs in eager_copy.optimizers:
        mine_opt = real if compiled is None else compiled.memo.get(id(real))
        if mine_opt is None:
            continue
        twin_opt = wide_of.get(id(real))
        compare(mine_opt.state_dict()["state"], theirs.state_dict()["state"], f"{label} state", comparison,
                reference=twin_opt.state_dict()["state"] if twin_opt is not None else _NOREF)
    wide_left = {label: value for label, _, value in wide.outcomes} if not why else {}
    eager_left = {label: value for label, _, value in eager_copy.outcomes}
    compiled_left = eager_copy.outcomes if compiled is None else compiled.outcomes
    for label, before, after in compiled_left:
        mine = torch_compat.unwrap_compiled(before if compiled is None else after)  # a module entry: its wrapper
        if label not in eager_left:
            continue
        if compiled is None and mine is eager_copy.reals.get(label) and isinstance(
                mine, (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)):
            continue  # compared tensor by tensor above, skipping what neither run touched
        if compiled is not None and isinstance(mine, (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)):
            continue
        compare(_state_of(mine), _state_of(eager_left[label]), f"{label} (after the run)", comparison,
                reference=_state_of(wide_left.get(label, _NOREF)))
    return verdict(comparison, random_ops, backend)


def _state_of(obj: Any) -> Any:
    """What an object with a ``state_dict`` holds, by it (a ``GradScaler``'s copy protocol keeps its scale in
    ``_init_scale`` and drops the tensor; an LR scheduler's lambdas are not state): its attributes otherwise."""
    state_dict = getattr(obj, "state_dict", None)
    if not callable(state_dict) or isinstance(obj, (torch.Tensor, torch.nn.Module, torch.optim.Optimizer, type)):
        return obj
    try:
        return state_dict()
    except Exception:  # noqa: BLE001  a state_dict that needs what the run did not set up: the attributes
        return obj


def _found(check: Check, kind: CheckKind, effect: str = "") -> Check:
    """``check``, saying what it found beyond ``ok`` and ``compared`` (``Check.kind``)."""
    check.found, check.effect = kind, effect
    return check


def _changed(compiled: Replay | None, eager_copy: Replay) -> list[tuple[str, torch.Tensor, torch.Tensor, Any]]:
    """(label, the compiled run's tensor, the eager run's, the real one) for tensors either run changed
    in place, or that have grads."""
    if compiled is None:
        return [(label, real, twin, real) for label, real, twin in eager_copy.changed_pairs()]
    theirs = {id(real): (twin, v) for real, twin, _, v in eager_copy.pairs}
    out = []
    for real, mine, _, v_mine in compiled.pairs:
        if id(real) not in theirs:
            continue
        twin, v_twin = theirs[id(real)]
        moved = (torch_compat.tensor_version(mine) != v_mine or torch_compat.tensor_version(twin) != v_twin)
        if moved or mine.grad is not None or twin.grad is not None:
            out.append((compiled.labels.get(id(real), "a tensor"), mine, twin, real))
    return out


class _Widen(TorchFunctionMode):
    """The float64 reference run: where an op meets float64 and narrower floating-point tensors (a
    float32 batch made inside the run, fed to the widened model), the narrower ones are widened, so
    code written for one dtype runs. In-place ops, ``out=`` and attribute access are left as they are."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if not (name.endswith("_") and not name.endswith("__")) and "out" not in kwargs and not (
                name in ("__get__", "__set__", "__setitem__", "__delitem__") or name.startswith("__i")):
            tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
            dtypes = {t.dtype for t in tensors}
            if torch.float64 in dtypes and dtypes & set(_NARROW):
                args = tuple(_wide(t) for t in args)
                kwargs = {k: _wide(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def _wide(value: Any) -> Any:
    return value.to(torch.float64) if isinstance(value, torch.Tensor) and value.dtype in _NARROW else value


def _reference(wide: Replay, run_eager: Callable[[Any], Any], rng_before: RngState,
               bind: dict[Any, Any] | None) -> tuple[Any, str]:
    """The eager run on the float64 copy ``wide``: (its value, "") or (nothing, why it could not run)."""
    if wide.refused is not None:
        return _NOREF, wide.refusal or wide.refused
    rng_before.restore()
    try:
        with quiet(), torch_compat.force_eager(), wide.swapped(bind) as extra, \
                no_outside_effects(watch=wide), _Widen():
            return run_eager(extra), ""
    except OutsideEffect as exc:
        return _NOREF, f"the float64 run {exc}"
    except Exception as exc:
        return _NOREF, f"the float64 run raised {type(exc).__name__}: {cut(one_line(str(exc)), 120)}"


def nothing_compiled(why: str) -> Check:
    """A run in which no compiled code ran: eager against eager says nothing."""
    return Check(True, None, f"not compared: nothing was compiled in this run: {why}", compared=False)


def effect_seen(check: Check | None) -> str | None:
    """What the session's check saw the run do outside its copies ("the run changes m.stats in place ..."),
    or None: once seen, a trial would only do it again."""
    if check is None or check.kind != CheckKind.OUTSIDE_EFFECT:  # not compared for another reason (over the budget)
        return None
    return check.effect


def verdict(comparison: Comparison, random_ops: Iterable[str], backend: str) -> Check:
    diff = comparison.max_abs_diff
    diff_text = f"max abs diff {diff:.3g}" if diff is not None else "no floating-point values"
    if comparison.problems and diff == 0:  # what differs is not a floating-point value: say so, not "diff 0"
        diff_text = "the floating-point values agree"
    rule = CheckRule.TOLERANCE if comparison.fp64_reason else CheckRule.FP64
    worst = max(comparison.errors, key=lambda e: e[1] / e[3] if e[3] > 0 else math.inf, default=None)
    compiled_error = worst[1] if worst is not None and rule is CheckRule.FP64 else None
    eager_error = worst[2] if worst is not None and rule is CheckRule.FP64 else None
    if rule is CheckRule.FP64:
        figures = ""
        if worst is not None:
            ratio = f"{worst[1] / worst[2]:.3g}" if worst[2] > 0 else ("1" if worst[1] == 0 else "inf")
            figures = f"compiled error {worst[1]:.3g}, eager error {worst[2]:.3g}, ratio {ratio}; "
        tolerated = (f"; {comparison.unreferenced} value(s) without a float64 counterpart judged by dtype "
                     "tolerances" if comparison.unreferenced else "")
        how = f" (against a float64 reference: {figures}{diff_text}{tolerated})"
    else:
        how = f" ({diff_text}; judged by dtype tolerances: {comparison.fp64_reason})"
    if not comparison.problems:
        skipped = ""
        if comparison.skipped:
            others = f" and {len(comparison.skipped) - 2} more" if len(comparison.skipped) > 2 else ""
            skipped = f"; not compared: {', '.join(comparison.skipped[:2])}{others} (no way to compare)"
        if not comparison.compared and comparison.skipped:
            return Check(True, None, f"not compared: nothing in the result can be compared{skipped}", compared=False)
        return Check(True, diff, f"matches eager ({comparison.compared} values compared){how}{skipped}", rule=rule,
                     compiled_error=compiled_error, eager_error=eager_error)
    shown = comparison.problems[:_MAX_PROBLEMS]
    more = len(comparison.problems) - len(shown)
    message = "differs from eager: " + "; ".join(shown) + (f"; and {more} more" if more else "") + how
    randoms = sorted(set(random_ops) & RANDOM_OPS)
    if randoms and backend == "inductor" and not torch_compat.inductor_fallback_random():
        # not judged: the values differ by design, whatever Inductor did with the rest
        return Check(True, None, f"not compared: the graphs draw random numbers ({', '.join(randoms)}) and Inductor's "
                     "generator differs from eager's, so their values differ by design (the Fix tab's trials "
                     "compare under aot_eager, whose random numbers match eager's); to compare here, set "
                     "torch._inductor.config.fallback_random = True", compared=False, rule=rule)
    return Check(False, diff, message, rule=rule, compiled_error=compiled_error, eager_error=eager_error)
