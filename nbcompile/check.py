"""The eager check: compare a compiled run with an eager run of the original code.

``allow_in_graph`` and friends can change results silently (seed 003: an
``allow_in_graph(torch.vmap(torch.sum))`` made outside the compiled function
returns a scalar under backend ``eager``). The check runs the same expression
again with the original functions and every compiled callable forced eager,
from the same random-number state and the same tensor state, and compares:

- the values, leaf by leaf through tuples, lists, dicts and dataclasses, with
  ``torch.testing.assert_close`` and the dtype-aware tolerances below;
- the tensors the run changed in place (top-level tensors and nn.Module
  state), so a lost or doubled mutation is caught too.

Afterwards the tensor state and the random-number state are those of the
compiled run alone, and what the eager run printed is not shown: the user
sees one run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import random
from typing import Any, Callable, Iterable, Optional

import torch

from . import torch_compat
from .report import Check

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
#: The most bytes of tensor state the check copies to replay a run that mutates it.
MAX_SNAPSHOT_BYTES = 256 * 2**20
#: Ops whose values come from a random-number generator that Inductor does not share with eager.
RANDOM_OPS = frozenset({
    "dropout", "dropout_", "rand", "randn", "randint", "rand_like", "randn_like", "randint_like",
    "randperm", "bernoulli", "bernoulli_", "normal", "normal_", "uniform_", "multinomial",
    "alpha_dropout", "feature_alpha_dropout", "rrelu",
})
_MAX_PROBLEMS = 3


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return TOLERANCES.get(dtype, (0.0, 0.0))


# --- comparing two values ------------------------------------------------------------

@dataclasses.dataclass
class Comparison:
    problems: list[str] = dataclasses.field(default_factory=list)
    diffs: list[float] = dataclasses.field(default_factory=list)
    compared: int = 0

    @property
    def max_abs_diff(self) -> Optional[float]:
        return max(self.diffs) if self.diffs else None


def compare(compiled: Any, eager: Any, path: str = "result", into: Optional[Comparison] = None) -> Comparison:
    """Compare two run values leaf by leaf; problems name the path (``result[1]['y']``)."""
    out = into if into is not None else Comparison()
    _compare(compiled, eager, path, out)
    return out


def _compare(a: Any, b: Any, path: str, out: Comparison) -> None:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        _compare_tensors(a, b, path, out)
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            out.problems.append(f"{path}: compiled gives {_kind(a)}, eager gives {_kind(b)}")
            return
        for i, (x, y) in enumerate(zip(a, b)):
            _compare(x, y, f"{path}[{i}]", out)
    elif isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            out.problems.append(f"{path}: compiled has keys {list(a)!r}, eager has {list(b)!r}")
            return
        for key in a:
            _compare(a[key], b[key], f"{path}[{key!r}]", out)
    elif dataclasses.is_dataclass(a) and not isinstance(a, type) and type(a) is type(b):
        for f in dataclasses.fields(a):
            _compare(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}", out)
    elif isinstance(a, (int, float, complex)) and isinstance(b, (int, float, complex)):
        _compare_numbers(a, b, path, out)
    else:
        try:
            equal = bool(a == b)
        except Exception:  # an object without a usable ==: identity is all we can say
            equal = a is b
        if not equal:
            out.problems.append(f"{path}: compiled gives {_short(a)}, eager gives {_short(b)}")
        out.compared += 1


def _compare_numbers(a: Any, b: Any, path: str, out: Comparison) -> None:
    out.compared += 1
    if isinstance(a, bool) or isinstance(b, bool) or (isinstance(a, int) and isinstance(b, int)):
        if a != b:
            out.problems.append(f"{path}: compiled gives {a!r}, eager gives {b!r}")
        return
    if (isinstance(a, float) and math.isnan(a)) and (isinstance(b, float) and math.isnan(b)):
        return
    diff = abs(a - b)
    if not math.isnan(diff):
        out.diffs.append(float(diff))
    rtol, atol = PYTHON_FLOAT_TOLERANCE
    if not diff <= atol + rtol * abs(b):
        out.problems.append(f"{path}: compiled gives {a!r}, eager gives {b!r} (abs diff {diff:.3g})")


def _compare_tensors(a: Any, b: Any, path: str, out: Comparison) -> None:
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
    if a.numel():
        wide = torch.complex128 if a.is_complex() else torch.float64
        x, y = a.to(wide), b.to(wide)
        both_nan = torch.isnan(x) & torch.isnan(y)
        same_inf = torch.isinf(x) & (x == y)
        delta = torch.where(both_nan | same_inf, torch.zeros((), dtype=torch.float64, device=x.device), (x - y).abs())
        out.diffs.append(float(torch.nan_to_num(delta, nan=math.inf).max()))
    rtol, atol = tolerance(a.dtype)
    try:
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as exc:
        out.problems.append(f"{path}: {_one_line(str(exc))}")


def _one_line(message: str) -> str:
    """assert_close's message, which spans lines, as one line."""
    lines = [l.strip() for l in message.splitlines() if l.strip()]
    keep = [l for l in lines if l.startswith(("Mismatched elements", "Greatest absolute difference"))]
    return "; ".join(keep) if keep else (lines[0] if lines else "values differ")


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    return _short(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- the state a run may change ----------------------------------------------------------

def _tensors_of(label: str, value: Any) -> Iterable[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        yield label, value
    elif isinstance(value, torch.nn.Module):
        for name, t in value.state_dict(keep_vars=True).items():
            if isinstance(t, torch.Tensor):
                yield f"{label}.{name}", t
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if isinstance(item, torch.Tensor):
                yield f"{label}[{i}]", item
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, torch.Tensor):
                yield f"{label}[{key!r}]", item


class StateSnapshot:
    """The tensors a run could change in place, with copies to replay from.

    Version counters say which tensors a run touched; copies (kept when
    the state is at most MAX_SNAPSHOT_BYTES) let the eager run start from
    the same values and the compiled run's values be put back after.
    """

    def __init__(self, roots: Iterable[tuple[str, Any]], budget: int = MAX_SNAPSHOT_BYTES) -> None:
        seen: set[int] = set()
        self.labels: list[str] = []
        self.tensors: list[torch.Tensor] = []
        for label, value in roots:
            for name, t in _tensors_of(label, value):
                if id(t) not in seen:
                    seen.add(id(t))
                    self.labels.append(name)
                    self.tensors.append(t)
        size = sum(t.numel() * t.element_size() for t in self.tensors)
        self.copies: Optional[list[torch.Tensor]] = (
            [t.detach().clone() for t in self.tensors] if size <= budget else None
        )
        self.versions = self._versions()

    @classmethod
    def of_namespace(cls, namespace: dict[str, Any]) -> "StateSnapshot":
        """Public top-level names (not IPython's ``_``, ``_1``, ``Out``) holding tensors or modules."""
        return cls((n, v) for n, v in list(namespace.items()) if not n.startswith("_") and n not in ("Out", "In"))

    def _versions(self) -> list[int]:
        return [torch_compat.tensor_version(t) for t in self.tensors]

    def changed(self) -> list[int]:
        """Indexes of the tensors changed in place since the last ``mark``."""
        now = self._versions()
        return [i for i, (v, w) in enumerate(zip(self.versions, now)) if v != w]

    def mark(self) -> None:
        self.versions = self._versions()

    def values(self, indexes: list[int]) -> list[torch.Tensor]:
        return [self.tensors[i].detach().clone() for i in indexes]

    def put(self, indexes: list[int], values: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for i, value in zip(indexes, values):
                self.tensors[i].copy_(value)

    def rewind(self, indexes: list[int]) -> None:
        assert self.copies is not None
        self.put(indexes, [self.copies[i] for i in indexes])


class RngState:
    """torch's (CPU and CUDA), Python's and NumPy's random-number state."""

    def __init__(self) -> None:
        self.torch = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        self.python = random.getstate()
        self.numpy = None
        try:
            import numpy

            self.numpy = numpy.random.get_state()
        except ImportError:  # pragma: no cover
            pass

    def restore(self) -> None:
        torch.set_rng_state(self.torch)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        random.setstate(self.python)
        if self.numpy is not None:
            import numpy

            numpy.random.set_state(self.numpy)


# --- the check ---------------------------------------------------------------------------

def against_eager(
    result: Any,
    run_eager: Callable[[], Any],
    state: StateSnapshot,
    rng_before: RngState,
    *,
    random_ops: Iterable[str] = (),
    backend: str = "",
) -> Check:
    """Run ``run_eager`` from the state the compiled run started in; compare; put the compiled state back.

    ``state`` was taken (and ``rng_before`` saved) just before the compiled
    run produced ``result``.
    """
    touched = state.changed()
    if touched and state.copies is None:
        names = ", ".join(state.labels[i] for i in touched[:3])
        return Check(True, None, f"not checked: the run changed {names} in place and the state is larger "
                                 f"than {MAX_SNAPSHOT_BYTES >> 20} MiB to replay", compared=False)
    compiled_after = state.values(touched)
    state.rewind(touched)
    rng_after = RngState()
    rng_before.restore()
    state.mark()
    try:
        with contextlib.redirect_stdout(io.StringIO()), torch_compat.force_eager():
            expected = run_eager()
    except Exception as exc:
        eager_touched = state.changed()
        return _finish(state, touched, eager_touched, compiled_after, rng_after, Check(
            False, None, f"the eager reference run raised {type(exc).__name__}: {_one_line(str(exc))}"))
    eager_touched = state.changed()
    comparison = compare(result, expected)
    for i in sorted(set(touched) | set(eager_touched)):
        after = compiled_after[touched.index(i)] if i in touched else state.copies[i]
        compare(after, state.tensors[i], f"{state.labels[i]} (changed in place)", comparison)
    return _finish(state, touched, eager_touched, compiled_after, rng_after, _verdict(comparison, random_ops, backend))


def _finish(state: StateSnapshot, touched: list[int], eager_touched: list[int], compiled_after: list[torch.Tensor],
            rng_after: RngState, check: Check) -> Check:
    """Leave the tensors and the generators as the compiled run left them."""
    only_eager = [i for i in eager_touched if i not in touched]
    state.rewind(only_eager)
    state.put(touched, compiled_after)
    state.mark()
    rng_after.restore()
    return check


def _verdict(comparison: Comparison, random_ops: Iterable[str], backend: str) -> Check:
    diff = comparison.max_abs_diff
    diff_text = f"max abs diff {diff:.3g}" if diff is not None else "no floating-point values"
    if not comparison.problems:
        return Check(True, diff, f"matches eager ({comparison.compared} values compared, {diff_text})")
    shown = comparison.problems[:_MAX_PROBLEMS]
    more = len(comparison.problems) - len(shown)
    message = "differs from eager: " + "; ".join(shown) + (f"; and {more} more" if more else "")
    if diff is not None:
        message += f" ({diff_text})"
    randoms = sorted(set(random_ops) & RANDOM_OPS)
    if randoms and backend == "inductor":
        message += (f". The graphs draw random numbers ({', '.join(randoms)}) and Inductor's generator differs "
                    "from eager's: set torch._inductor.config.fallback_random = True to compare")
    return Check(False, diff, message)
