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

The user's objects see one run, the compiled one; what the eager run printed
is not shown.
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import inspect
import io
import math
import os
import random
import sys
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..core import torch_compat
from ..model.report import Check
from .state import Replay

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

    @property
    def max_abs_diff(self) -> float | None:
        return max(self.diffs) if self.diffs else None


def compare(compiled: Any, eager: Any, path: str = "result", into: Comparison | None = None) -> Comparison:
    """Compare two run values leaf by leaf; problems name the path (``result[1]['y']``)."""
    out = into if into is not None else Comparison()
    _compare(compiled, eager, path, out)
    return out


def _compare(a: Any, b: Any, path: str, out: Comparison, depth: int = 0) -> None:
    if depth > 12:
        return
    a, b = torch_compat.unwrap_compiled(a), torch_compat.unwrap_compiled(b)  # a module entry returned as is
    if _is_numpy(a) or _is_numpy(b):
        a, b = _from_numpy(a), _from_numpy(b)
    if isinstance(a, collections.abc.Iterator) or isinstance(b, collections.abc.Iterator):
        out.skipped.append(f"{path} (an iterator: comparing would consume it)")
        return
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        _compare_tensors(a, b, path, out)
        return
    if a is None or b is None or isinstance(a, (str, bytes, bool)) or isinstance(b, (str, bytes, bool)):
        _compare_plain(a, b, path, out)
        return
    if isinstance(a, (int, float, complex)) and isinstance(b, (int, float, complex)):
        _compare_numbers(a, b, path, out)
        return
    key = (id(a), id(b))
    if key in out.seen:  # cycles, and objects reached twice
        return
    out.seen.add(key)
    if type(a) is not type(b):
        out.problems.append(f"{path}: compiled gives {_kind(a)}, eager gives {_kind(b)}")
        return
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            out.problems.append(f"{path}: compiled gives {_kind(a)}, eager gives {_kind(b)}")
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _compare(x, y, f"{path}[{i}]", out, depth + 1)
    elif isinstance(a, dict):
        if not _same_keys(a, b, out):
            out.problems.append(f"{path}: compiled has keys {_short(list(a))}, eager has {_short(list(b))}")
            return
        for (key_a, x), y in zip(a.items(), b.values(), strict=True):
            _compare(x, y, f"{path}[{_short(key_a)}]", out, depth + 1)
    elif isinstance(a, (set, frozenset)):
        _compare_plain(a, b, path, out)
    elif isinstance(a, torch.nn.Module):
        _compare_named(dict(a.named_parameters()), dict(b.named_parameters()), path, out, depth)
        _compare_named(dict(a.named_buffers()), dict(b.named_buffers()), path, out, depth)
        for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=False):
            if p.grad is not None or q.grad is not None:
                _compare(p.grad, q.grad, f"{path}.{name}.grad", out, depth + 1)
        if a.training != b.training:
            out.problems.append(f"{path}.training: compiled gives {a.training}, eager gives {b.training}")
    elif isinstance(a, torch.optim.Optimizer):
        _compare(a.state_dict()["state"], b.state_dict()["state"], f"{path}.state", out, depth + 1)
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            _compare(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}", out, depth + 1)
    elif out.pairs.get(id(a)) is b or a is b:
        _compare_contents(a, b, path, out, depth)
    elif _has_own_eq(a):
        _compare_plain(a, b, path, out)
    else:  # no == of its own (DynamicCache, small classes holding tensors): what is inside
        _compare_contents(a, b, path, out, depth)


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


def _compare_named(a: dict[str, Any], b: dict[str, Any], path: str, out: Comparison, depth: int) -> None:
    if list(a) != list(b):
        out.problems.append(f"{path}: compiled has {_short(list(a))}, eager has {_short(list(b))}")
        return
    for name in a:
        _compare(a[name], b[name], f"{path}.{name}", out, depth + 1)


def _compare_contents(a: Any, b: Any, path: str, out: Comparison, depth: int) -> None:
    state_a, state_b = _contents(a), _contents(b)
    if state_a is None or state_b is None:
        if a is not b and out.pairs.get(id(a)) is not b:
            out.skipped.append(path)
        return
    if list(state_a) != list(state_b):
        out.problems.append(
            f"{path}: compiled has attributes {_short(list(state_a))}, eager has {_short(list(state_b))}"
        )
        return
    for name in state_a:
        _compare(state_a[name], state_b[name], f"{path}.{name}", out, depth + 1)


def _contents(value: Any) -> dict[str, Any] | None:
    """What an object holds, for objects compared by content (``__dict__`` or ``__slots__``)."""
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return {k: v for k, v in vars(value).items() if not callable(v) or isinstance(v, torch.nn.Module)}
    slots = [s for cls in type(value).__mro__ for s in getattr(cls, "__slots__", ())]
    if slots:
        return {s: getattr(value, s) for s in slots if hasattr(value, s)}
    return None


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
        out.problems.append(f"{path}: {one_line(str(exc))}")


def one_line(message: str) -> str:
    """assert_close's message, which spans lines, as one line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    keep = [line for line in lines if line.startswith(("Mismatched elements", "Greatest absolute difference"))]
    return "; ".join(keep) if keep else (lines[0] if lines else "values differ")


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    return _short(value)


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


# --- the random-number state ----------------------------------------------------------------

class RngState:
    """torch's (CPU and CUDA), Python's and NumPy's random-number state."""

    def __init__(self) -> None:
        self.torch = torch.get_rng_state()
        cuda_started = torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        self.cuda = torch.cuda.get_rng_state_all() if cuda_started else None
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
    run_eager: Callable[[Any], Any],
    replay: Replay,
    rng_before: RngState,
    *,
    bind: dict[Any, Any] | None = None,
    random_ops: Iterable[str] = (),
    backend: str = "",
) -> Check:
    """Run ``run_eager`` on the copies ``replay`` took before the compiled run, and compare.

    The eager run sees the copies (and ``bind``: names -> the original
    functions, by slot) in place of the real objects and gets the copy of the call's
    arguments; it starts from the random-number state the compiled run
    started from. The user's objects, and the generators afterwards, are as
    the compiled run left them: nothing the user sees runs twice.
    """
    if replay.refused is not None:
        return Check(True, None, replay.refused, compared=False)
    rng_after = RngState()
    rng_before.restore()
    try:
        with quiet(), torch_compat.force_eager(), replay.swapped(bind) as extra, no_outside_effects(watch=replay):
            expected = run_eager(extra)
    except OutsideEffect as exc:
        where = " outside Python" if exc.outside else ""
        return Check(True, None, f"not compared: the run {exc}{where}, which the check will not do a "
                                 "second time", compared=False)
    except Exception as exc:
        return Check(False, None, f"the eager reference run raised {type(exc).__name__}: {one_line(str(exc))}")
    finally:
        rng_after.restore()
    comparison = Comparison(pairs=replay.memo)
    compare(result, expected, into=comparison)
    for label, real, twin in replay.changed_pairs():
        compare(real, twin, f"{label} (changed in place)", comparison)
        if real.grad is not None or twin.grad is not None:
            compare(real.grad, twin.grad, f"{label}.grad", comparison)
    for label, real, twin in replay.optimizers:
        compare(real.state_dict()["state"], twin.state_dict()["state"], f"{label} state", comparison)
    for label, compiled_left, eager_left in replay.outcomes:
        compiled_left = torch_compat.unwrap_compiled(compiled_left)  # a module entry: its compiled wrapper
        if compiled_left is replay.reals.get(label) and isinstance(compiled_left, (torch.Tensor, torch.nn.Module,
                                                                                    torch.optim.Optimizer)):
            continue  # compared tensor by tensor above, skipping what neither run touched
        compare(compiled_left, eager_left, f"{label} (after the run)", comparison)
    return verdict(comparison, random_ops, backend)


def nothing_compiled(why: str) -> Check:
    """A run in which no compiled code ran: eager against eager says nothing."""
    return Check(True, None, f"not compared: nothing was compiled in this run: {why}", compared=False)


@contextlib.contextmanager
def quiet() -> Any:
    """What the eager run prints or logs is not shown: the user sees one run."""
    import logging

    before = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(before)


class OutsideEffect(Exception):
    """The run tried to change something outside the process's Python objects (``outside``), or a
    module attribute that none of its copies holds."""

    def __init__(self, what: str, *, outside: bool = True) -> None:
        super().__init__(what)
        self.outside = outside


_GUARD = threading.local()
_HOOKED = False
#: Audit events that reach outside Python objects (files, processes, the network).
_OUTSIDE = {"os.remove": "removes a file", "os.rename": "renames a file", "os.rmdir": "removes a directory",
            "os.mkdir": "makes a directory", "os.system": "runs a shell command",
            "subprocess.Popen": "starts a process",
            "socket.connect": "opens a connection", "socket.sendto": "sends over the network",
            "shutil.rmtree": "removes a directory", "os.truncate": "truncates a file"}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not getattr(_GUARD, "on", False):
        return
    what = None
    if event == "open" and len(args) >= 2 and isinstance(args[1], str) and any(c in args[1] for c in "wax+"):
        what = f"writes to a file ({args[0]!s:.60})"
    elif (event == "open" and len(args) >= 3 and isinstance(args[2], int) and args[1] is None
          and args[2] & (os.O_WRONLY | os.O_RDWR)):
        what = f"writes to a file ({args[0]!s:.60})"
    elif event in _OUTSIDE:
        what = _OUTSIDE[event]
    if what is None or (getattr(_GUARD, "compiler_may", False) and _compiling()):
        return
    _GUARD.on = False
    raise OutsideEffect(what)


def _compiling() -> bool:
    """Whether the current call comes from torch.compile compiling a frame (its caches, its workers),
    not from the user's code running."""
    here = inspect.currentframe()
    frame: types.FrameType | None = here.f_back.f_back if here is not None and here.f_back is not None else None
    while frame is not None:
        if frame.f_code.co_filename.endswith(_CONVERT_FRAME):
            return True
        frame = frame.f_back
    return False


_CONVERT_FRAME = os.path.join("_dynamo", "convert_frame.py")


@contextlib.contextmanager
def no_outside_effects(compiler_may: bool = False, watch: Replay | None = None) -> Any:
    """The eager run may not write files, start processes or use the network: an audit hook stops the
    first attempt (before it happens), and the check says it could not compare. ``compiler_may``: a
    compiled run, in which torch.compile itself may write its caches while it compiles.

    ``watch``: the copies the run was given. The attributes of the user's modules it reaches (a global,
    an import inside a function) are watched too: an attribute the run rebinds that no copy holds is
    put back, a container no copy holds that it changes in place is named, a user module it imports
    for the first time is named, and ``OutsideEffect`` says so when the run ends."""
    global _HOOKED
    if not _HOOKED:
        sys.addaudithook(_audit)  # process-wide and permanent: it does nothing unless a check is running
        _HOOKED = True
    modules = _ModuleAudit(watch) if watch is not None and watch.refused is None else None
    _GUARD.on, _GUARD.compiler_may = True, compiler_may
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        _GUARD.on, _GUARD.compiler_may = False, False
        if modules is not None:
            effect = modules.settle()
            if effect and not failed:
                raise OutsideEffect(effect, outside=False)


class _ModuleAudit:
    """The attributes of the user's modules a run can reach, before it: what it changes that is not one
    of its copies is put back (a rebinding) or named (a change in place, a first import)."""

    def __init__(self, replay: Replay) -> None:
        held = {(id(slot.owner), slot.key) for slot in replay.slots.values()}
        self.before: list[tuple[types.ModuleType, dict[str, Any], dict[str, Any]]] = []
        for module in replay.modules:
            space = vars(module)
            watched = {k: v for k, v in space.items() if not k.startswith("__") and (id(space), k) not in held}
            self.before.append((module, watched, {k: _shape(v) for k, v in watched.items()}))
        self.held = held
        self.imports = {name for name in replay.imports if name not in sys.modules}

    def settle(self) -> str:
        effects: list[str] = []
        for module, watched, shapes in self.before:
            space = vars(module)
            for key in [k for k in space if not k.startswith("__") and k not in watched
                        and (id(space), k) not in self.held and not isinstance(space[k], types.ModuleType)]:
                del space[key]
                effects.append(f"sets {module.__name__}.{key}")
            for key, value in watched.items():
                now = space.get(key, _GONE)
                if now is not value and callable(value) and callable(now):
                    continue  # a function rebound to a wrapper: nbcompile's own toggles (given back by them)
                if now is not value:
                    space[key] = value
                    effects.append(f"sets {module.__name__}.{key}")
                elif _shape(value) != shapes[key]:
                    effects.append(f"changes {module.__name__}.{key} in place")
        for name in sorted(self.imports):
            imported = sys.modules.get(name)
            if imported is not None and _user_file(imported):
                effects.append(f"imports {name} for the first time (its code ran)")
        if not effects:
            return ""
        more = f" and {len(effects) - 2} more" if len(effects) > 2 else ""
        return ", ".join(effects[:2]) + more + " (no copy of it was made; what it rebound was put back)"


_GONE = object()


def _shape(value: Any) -> Any:
    """A cheap fingerprint of a container's contents (its length and its first items' identities)."""
    if type(value) in (list, tuple):
        return (len(value), tuple(id(v) for v in value[:32]))
    if type(value) is dict:
        return (len(value), tuple(id(v) for v in list(value.values())[:32]))
    if type(value) in (set, frozenset, bytearray):
        return len(value)
    return None


def _user_file(module: types.ModuleType) -> bool:
    path = str(getattr(module, "__file__", "") or "")
    return bool(path) and not path.startswith(tuple({sys.prefix, sys.base_prefix, sys.exec_prefix}))


def verdict(comparison: Comparison, random_ops: Iterable[str], backend: str) -> Check:
    diff = comparison.max_abs_diff
    diff_text = f"max abs diff {diff:.3g}" if diff is not None else "no floating-point values"
    if not comparison.problems:
        skipped = ""
        if comparison.skipped:
            others = f" and {len(comparison.skipped) - 2} more" if len(comparison.skipped) > 2 else ""
            skipped = f"; not compared: {', '.join(comparison.skipped[:2])}{others} (no way to compare)"
        if not comparison.compared and comparison.skipped:
            return Check(True, None, f"not compared: nothing in the result can be compared{skipped}", compared=False)
        return Check(True, diff, f"matches eager ({comparison.compared} values compared, {diff_text}){skipped}")
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
