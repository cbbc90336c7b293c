"""The state a run reaches, copied so that a second run (the eager check, a benchmark) repeats nothing.

``Replay.capture`` finds the objects an expression can touch: the names its
code loads, followed through the code of the functions and classes defined in
the same namespace, plus the call's own arguments. Tensors, ``nn.Module``s
(with their ``.grad``), optimizers (with their state), lists, dicts and plain
objects among them are deep-copied together, so aliasing survives (an
optimizer's parameters are the copied model's). ``swapped()`` binds the
copies in place of the real objects for the duration of the second run; the
user's objects see exactly one run. What cannot be copied within the budget
is said in ``refused``, and nothing is run twice.

Names the code never mentions are never copied: an unrelated 200 MB tensor
costs nothing.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import types
from typing import Any, Iterable, Iterator, Optional

import torch

from . import torch_compat

#: The most bytes of tensor state copied to replay a run.
MAX_COPY_BYTES = 256 * 2**20
_WALK_DEPTH = 8
_SKIP_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit", "open"})
_ATOMIC = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
           str, bytes, int, float, complex, bool, type(None), range, types.CodeType)


def _codes(obj: Any) -> Iterator[types.CodeType]:
    code = getattr(obj, "__code__", None)
    if isinstance(code, types.CodeType):
        yield from torch_compat.iter_code_objects(code)


def reached_names(namespace: dict[str, Any], code: Optional[types.CodeType], functions: Iterable[Any] = ()) -> list[str]:
    """Data names of ``namespace`` that ``code`` and ``functions`` can read, followed through the
    functions and classes defined in that namespace (their code's global names)."""
    pending: list[str] = []
    seen_codes: set[types.CodeType] = set()

    def add_code(c: types.CodeType) -> None:
        for each in torch_compat.iter_code_objects(c):
            if each not in seen_codes:
                seen_codes.add(each)
                pending.extend(each.co_names)

    def add_object(obj: Any) -> None:
        obj = torch_compat.unwrap_compiled(obj)
        obj = getattr(obj, "__wrapped__", obj)
        if isinstance(obj, torch.nn.Module):
            obj = type(obj)
        if isinstance(obj, type):
            for member in vars(obj).values():
                member = getattr(member, "__func__", member)
                for c in _codes(member):
                    add_code(c)
            return
        for c in _codes(getattr(obj, "__func__", obj)):
            add_code(c)

    if code is not None:
        add_code(code)
    for fn in functions:
        add_object(fn)
    roots: list[str] = []
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen or name not in namespace or name.startswith("_") or name in _SKIP_NAMES:
            continue
        seen.add(name)
        value = namespace[name]
        if isinstance(value, types.ModuleType):
            continue
        if isinstance(value, (types.FunctionType, type)) or torch_compat.unwrap_compiled(value) is not value:
            if getattr(torch_compat.unwrap_compiled(value), "__globals__", namespace) is namespace or isinstance(value, type):
                add_object(value)
            plain = torch_compat.unwrap_compiled(value)
            if isinstance(plain, torch.nn.Module):
                roots.append(name)
            continue
        if callable(value) and not _is_data(value):
            continue
        roots.append(name)
    return sorted(roots)


def _is_data(value: Any) -> bool:
    return isinstance(value, (torch.Tensor, torch.nn.Module, torch.optim.Optimizer, list, dict, set, tuple)) \
        or dataclasses.is_dataclass(value) or hasattr(value, "__dict__")


def _walk(value: Any, found: dict[int, tuple[Any, str]], label: str, depth: int = 0) -> None:
    """Every object (tensors and their grads included) reachable from ``value``: id -> (object, path)."""
    if depth > _WALK_DEPTH or id(value) in found or isinstance(value, _ATOMIC):
        return
    found[id(value)] = (value, label)
    if isinstance(value, torch.Tensor):
        return
    if isinstance(value, torch.nn.Module):
        for name, t in [*value.named_parameters(), *value.named_buffers()]:
            _walk(t, found, f"{label}.{name}", depth + 1)
        return
    if isinstance(value, torch.optim.Optimizer):
        for group in value.param_groups:
            for i, p in enumerate(group["params"]):
                _walk(p, found, f"{label} parameter {i}", depth + 1)
        for i, per_param in enumerate(value.state.values()):
            _walk(per_param, found, f"{label}.state[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        items: Iterable[tuple[str, Any]] = ((f"{label}[{k!r}]", v) for k, v in list(value.items()))
    elif isinstance(value, (list, tuple)):
        items = ((f"{label}[{i}]", v) for i, v in enumerate(value))
    elif isinstance(value, (set, frozenset)):
        items = ((label, v) for v in value)
    else:
        items = ((f"{label}.{k}", v) for k, v in list(getattr(value, "__dict__", {}).items()))
    for path, item in list(items):
        _walk(item, found, path, depth + 1)


def _nbytes(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().nbytes() if t.layout == torch.strided else t.numel() * t.element_size()
    except (RuntimeError, NotImplementedError):
        return t.numel() * t.element_size()


class Replay:
    """Copies of the state a run reaches, taken before it, to run a second time on."""

    def __init__(self, namespace: Optional[dict[str, Any]], reals: dict[str, Any], copies: dict[str, Any],
                 extra_copy: Any, refused: Optional[str]) -> None:
        self.namespace = namespace
        #: name -> the real object that was copied; name -> its copy
        self.reals = reals
        self.copies = copies
        self.extra_copy = extra_copy
        #: Why the run cannot be replayed (nothing was copied), or None.
        self.refused = refused
        #: id(real) -> copy, for every object copied (tensors, modules, optimizers...)
        self.memo: dict[int, Any] = {}
        #: (real tensor, its copy, real version at capture, copy version at capture)
        self.pairs: list[tuple[torch.Tensor, torch.Tensor, int, int]] = []
        #: id(real object) -> where it was found ("model.fc.weight"), for messages
        self.labels: dict[int, str] = {}
        #: Optimizers among the copied objects: (label, real, copy)
        self.optimizers: list[tuple[str, Any, Any]] = []

    @classmethod
    def capture(cls, namespace: Optional[dict[str, Any]], roots: dict[str, Any], extra: Any = None,
                budget: int = MAX_COPY_BYTES) -> "Replay":
        """Copy the ``roots`` (name -> real object) and ``extra`` (a call's arguments) in one deep copy."""
        found: dict[int, tuple[Any, str]] = {}
        for name, value in roots.items():
            _walk(value, found, name)
        _walk(extra, found, "argument")
        tensors = [t for t, _ in found.values() if isinstance(t, torch.Tensor)]
        tensors += [t.grad for t in tensors if t.grad is not None]
        size = sum(_nbytes(t) for t in tensors)
        if size > budget:
            what = ", ".join(list(roots)[:3]) or "the arguments"
            return cls(namespace, {}, {}, None, (
                f"not compared: the run reaches {size / 2**20:.0f} MiB of tensors ({what}), more than the "
                f"{budget >> 20} MiB nbcompile copies to run it again without touching yours"))
        memo: dict[int, Any] = {}
        for t in tensors:
            if t.requires_grad and not t.is_leaf:  # deepcopy refuses non-leaf tensors; a detached copy will do
                memo[id(t)] = t.detach().clone().requires_grad_(True)
        try:
            copied = copy.deepcopy((roots, extra), memo)
        except Exception as exc:  # a lock, a file, a generator: say so, repeat nothing
            return cls(namespace, {}, {}, None, (
                f"not compared: {_uncopyable(roots)} cannot be copied ({type(exc).__name__}: "
                f"{(str(exc).splitlines() or [''])[0][:80]}), so the eager run could not be kept off your objects"))
        replay = cls(namespace, dict(roots), copied[0], copied[1], None)
        replay.memo = memo
        replay.labels = {k: label for k, (_, label) in found.items()}
        replay.optimizers = [(label, o, memo[id(o)]) for o, label in found.values()
                             if isinstance(o, torch.optim.Optimizer) and id(o) in memo]
        grad_ids = {id(t.grad) for t in tensors if t.grad is not None}
        for t in tensors:
            if id(t) in grad_ids:
                continue  # a grad: compared with its tensor
            c = memo.get(id(t))
            if isinstance(c, torch.Tensor) and c is not t:
                if t.grad is not None and c.grad is None and c.is_leaf:
                    c.grad = t.grad.detach().clone()  # Parameter's deepcopy drops .grad
                replay.pairs.append((t, c, torch_compat.tensor_version(t), torch_compat.tensor_version(c)))
        return replay

    @contextlib.contextmanager
    def swapped(self, also: Optional[dict[str, Any]] = None) -> Iterator[Any]:
        """The copies (and ``also``: name -> object) bound in the namespace for the duration; yields the
        copy of ``extra``. Each name gets back what it held, unless the run itself rebound it."""
        ns = self.namespace
        put: dict[str, Any] = {**(also or {}), **self.copies}
        saved: list[tuple[str, Any]] = []
        try:
            if ns is not None:
                for name, value in put.items():
                    saved.append((name, ns.get(name, _ABSENT)))
                    ns[name] = value
            yield self.extra_copy
        finally:
            if ns is not None:
                for name, before in reversed(saved):
                    if ns.get(name, _ABSENT) is put[name]:
                        if before is _ABSENT:
                            ns.pop(name, None)
                        else:
                            ns[name] = before

    def counterpart(self, obj: Any) -> Any:
        """The copy of a real object (itself if it was not copied)."""
        return self.memo.get(id(obj), obj)

    def changed_pairs(self) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
        """(label, real, copy) for tensors that either run changed in place, or that have grads."""
        out = []
        for real, twin, v_real, v_copy in self.pairs:
            moved = torch_compat.tensor_version(real) != v_real or torch_compat.tensor_version(twin) != v_copy
            if moved or real.grad is not None or twin.grad is not None:
                out.append((self.labels.get(id(real), "a tensor"), real, twin))
        return out


_ABSENT = object()


def _uncopyable(roots: dict[str, Any]) -> str:
    for name, value in roots.items():
        try:
            copy.deepcopy(value)
        except Exception:
            return f"`{name}`"
    return "an argument of the call"
