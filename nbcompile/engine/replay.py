"""Copies of the state a run reaches, swapped in and out so that a second run (the eager check, a
benchmark) repeats nothing.

``Replay.capture`` copies what the slots ``state.reach`` found hold, plus the call's own arguments.
Tensors, ``nn.Module``s (with their ``.grad``), optimizers (with their state), lists, dicts and plain
objects among them are deep-copied together, so aliasing survives (an optimizer's parameters are the
copied model's); closures, bound methods and weak references the copies hold are rehomed to the copies
(``rehome_callables``). ``swapped()`` binds the copies in place of the real objects for the duration of
the second run (``swapping`` says one is under way); the user's objects see exactly one run.
``refresh`` makes the copies equal to the real objects again, in place; ``rewind`` puts back what they
held after ``capture``. What cannot be copied within the budget is said in ``refused``, and nothing is
run twice.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import enum
import logging
import threading
import types
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from ..core import torch_compat
from ..core.text import cut
from .state import _ABSENT, _ATOMIC, _WALK_DEPTH, ReadOnly, Slot, _marks, _walk

#: The most bytes of tensor state copied to replay a run.
MAX_COPY_BYTES = 256 * 2**20
#: What ``copy.deepcopy`` hands back as it is (``Replay.refresh`` expects the same object in the copies).
_DEEPCOPY_KEEPS = (*_ATOMIC, types.BuiltinMethodType, weakref.ref, property, enum.Enum, torch.dtype, torch.device,
                   torch.layout, torch.memory_format, type(Ellipsis), type(NotImplemented))
#: Locks a run reaches (a library's module-level cache lock: huggingface_hub's ``_IN_MEMORY_TREE_CACHE_LOCK``,
#: read by transformers 5.24 models' forward) cannot be deep-copied; they are shared with the copies, as another
#: thread would share them: acquired and released by the run, they are left as they were.
#: Only the raw locks: a ``Condition``, ``Semaphore`` or ``Event`` is copied around the same lock, with waiters,
#: a count or a flag of its own (a shared ``Event`` would let a copy's ``set()`` wake the user's ``wait()``).
_LOCKS = (type(threading.Lock()), type(threading.RLock()))
#: Floating-point dtypes the float64 reference widens.
_NARROW = (torch.float16, torch.bfloat16, torch.float32)


def _nbytes(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().nbytes() if t.layout == torch.strided else t.numel() * t.element_size()
    except (RuntimeError, NotImplementedError):
        return t.numel() * t.element_size()


#: How many swaps (``Replay.swapped``, ``Workload.scratch``) hold the user's names now: copies, originals or
#: scratch values are bound in their place. A change of a session must not start meanwhile (a kernel can
#: handle a widget's message from inside one): it would read them as redefined.
SWAPPED = [0]


def swapping() -> bool:
    """Whether the user's names hold swapped-in values now (``SWAPPED``)."""
    return SWAPPED[0] > 0


#: What ``copy.deepcopy`` hands back as it is although it can hold the real objects: a function's closure
#: (``LRScheduler`` patches ``optimizer.step`` with a closure over a weak reference to the real
#: optimizer), a method bound to a real object, a weak reference to one.
_REHOMED = (types.FunctionType, types.MethodType, types.BuiltinMethodType, weakref.ref)
_REHOME_DEPTH = 3


def _rehomed(value: Any, memo: dict[int, Any], keep_alive: list[Any], depth: int = 0) -> Any:
    """``value`` as the copies must hold it: a function whose closure reaches a copied object is made anew
    with cells that hold the copies, a method bound to a copied object is bound to its copy, a weak
    reference to a copied object refers to its copy; anything else is itself. The new object is kept in
    ``memo`` (the same twin on each refresh: compiled code guards on its identity) and the real one in
    ``keep_alive`` (no id in the memo is reused)."""
    twin = memo.get(id(value), _ABSENT)
    if twin is not _ABSENT:
        return twin
    if depth > _REHOME_DEPTH:
        return value
    made: Any = value
    if isinstance(value, weakref.ref) and type(value) is weakref.ref:
        target = value()
        if target is not None and id(target) in memo and memo[id(target)] is not target:
            made = weakref.ref(memo[id(target)])
    elif isinstance(value, types.MethodType):
        owner = value.__self__
        mapped_owner = memo.get(id(owner), owner)
        func = _rehomed(value.__func__, memo, keep_alive, depth + 1) \
            if isinstance(value.__func__, types.FunctionType) else value.__func__
        if mapped_owner is not owner or func is not value.__func__:
            made = types.MethodType(func, mapped_owner)
    elif isinstance(value, types.BuiltinMethodType):
        owner = getattr(value, "__self__", None)
        twin_owner = memo.get(id(owner), owner) if owner is not None and not isinstance(owner, types.ModuleType) \
            else owner
        if twin_owner is not owner:
            bound = getattr(twin_owner, value.__name__, None)
            if isinstance(bound, types.BuiltinMethodType):
                made = bound
    elif isinstance(value, types.FunctionType) and (value.__closure__ or value.__defaults__ or value.__kwdefaults__):
        def twin_of(inner: Any) -> Any:
            found = memo.get(id(inner), _ABSENT)
            if found is _ABSENT:
                found = _rehomed(inner, memo, keep_alive, depth + 1) if isinstance(inner, _REHOMED) else inner
            return found

        defaults = tuple(twin_of(d) for d in value.__defaults__) if value.__defaults__ else value.__defaults__
        kwdefaults = {k: twin_of(d) for k, d in value.__kwdefaults__.items()} if value.__kwdefaults__ else \
            value.__kwdefaults__
        changed = any(a is not b for a, b in zip(defaults or (), value.__defaults__ or (), strict=False)) or any(
            (kwdefaults or {})[k] is not d for k, d in (value.__kwdefaults__ or {}).items())
        contents = []
        for cell in value.__closure__ or ():
            try:
                inner = cell.cell_contents
            except ValueError:  # an empty cell (a name assigned later in the enclosing function)
                contents.append(cell)
                continue
            twin_inner = twin_of(inner)
            changed = changed or twin_inner is not inner
            contents.append(types.CellType(twin_inner))
        if changed:
            fresh = types.FunctionType(value.__code__, value.__globals__, value.__name__, defaults,
                                       tuple(contents) if value.__closure__ else None)
            fresh.__kwdefaults__ = kwdefaults
            fresh.__dict__.update(value.__dict__)  # __wrapped__, _wrapped_by_lr_sched, ...
            fresh.__qualname__, fresh.__module__ = value.__qualname__, value.__module__
            fresh.__doc__ = value.__doc__
            made = fresh
    if made is not value:
        memo[id(value)] = made
        keep_alive.append(value)
    return made


def rehome_callables(values: Iterable[Any], memo: dict[int, Any], keep_alive: list[Any]) -> None:
    """After a deep copy (``memo``: id(real) -> copy): every function, method or weak reference the copies
    hold in an object's ``__dict__`` or a container that reaches a real object is swapped for its twin
    (``_rehomed``), so a run on the copies cannot reach the user's objects through it (deepcopy hands
    functions back as they are)."""
    copied_ids = {id(c) for c in memo.values()}
    seen: set[int] = set()
    stack = [(v, 0) for v in values]
    while stack:
        value, depth = stack.pop()
        if id(value) in seen or depth > 4 * _WALK_DEPTH or isinstance(value, (*_ATOMIC, torch.Tensor)):
            continue
        seen.add(id(value))
        if isinstance(value, dict):
            space: Any = value
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, _REHOMED):
                    value[i] = _rehomed(item, memo, keep_alive)
                else:
                    stack.append((item, depth + 1))
            continue
        elif isinstance(value, (tuple, set, frozenset, collections.deque)):
            stack.extend((item, depth + 1) for item in value)
            continue
        else:
            space = getattr(value, "__dict__", None)
            if not isinstance(space, dict) or id(value) not in copied_ids:
                continue  # only the copies' own objects are rehomed (a shared one is not ours to change)
        for key, item in torch_compat.namespace_items(space):
            if isinstance(item, _REHOMED):
                twin = _rehomed(item, memo, keep_alive)
                if twin is not item:
                    space[key] = twin
            else:
                stack.append((item, depth + 1))


def _rehome_dropped(originals: Iterable[Any], memo: dict[int, Any], keep_alive: list[Any]) -> None:
    """What an object's own copy protocol left out of its copy and that reaches a copied object
    (``Optimizer.__getstate__`` drops the ``step`` an LR scheduler patched in, a closure over the optimizer):
    the copy gets its own twin, as a refresh would graft it, so the copy behaves as the original does."""
    for original in originals:
        twin = memo.get(id(original))
        space = getattr(original, "__dict__", None)
        twin_space = getattr(twin, "__dict__", None)
        if twin is None or twin is original or not isinstance(space, dict) or not isinstance(twin_space, dict):
            continue
        for key, value in torch_compat.namespace_items(space):
            if key not in twin_space and isinstance(value, _REHOMED):
                made = _rehomed(value, memo, keep_alive)
                if made is not value:
                    twin_space[key] = made
            elif isinstance(value, dict) and value and isinstance(twin_space.get(key), dict) \
                    and not twin_space[key] and all(isinstance(v, _REHOMED) for v in value.values()):
                # hooks the copy protocol made empty (``Optimizer.__setstate__``'s step hooks): the copy's own
                twin_space[key].update({k: _rehomed(v, memo, keep_alive) for k, v in value.items()})


#: Objects whose copy is themselves by design, and which hold where records go, not data (a ``Logger``
#: pickles as ``getLogger(name)``).
_SHARED_BY_DESIGN = (logging.Logger, logging.LoggerAdapter, logging.Handler, logging.Manager, *_LOCKS)


def _shared_with_copies(found: dict[int, tuple[Any, str]], copies: Any, allowed: set[int]) -> str | None:
    """The label of a mutable object of the user's that the copies hold as it is (a ``__deepcopy__`` that
    returns ``self``), or None: what a run on the copies changes there, it changes in the user's."""
    reached: set[int] = set()
    stack: list[tuple[Any, int]] = [(copies, 0)]
    while stack:  # what the copies hold, not looking into code (a function's or a wrapper's own attributes)
        value, depth = stack.pop()
        if id(value) in reached or depth > _WALK_DEPTH or callable(value) or \
                isinstance(value, (torch.Tensor, *_DEEPCOPY_KEEPS)):
            continue
        reached.add(id(value))
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in list(value.values()))
        elif isinstance(value, (list, tuple, set, frozenset, collections.deque)):
            stack.extend((v, depth + 1) for v in list(value))
        else:
            stack.extend((v, depth + 1) for v in list(getattr(value, "__dict__", {}).values()))
    for key, (value, label) in found.items():
        if key not in reached or key in allowed or callable(value) or \
                isinstance(value, (torch.Tensor, *_DEEPCOPY_KEEPS, *_SHARED_BY_DESIGN)):
            continue  # a callable (an lru_cache wrapper hands itself back by design) is code, not state
        if isinstance(value, (list, dict, set, bytearray, collections.deque)) or hasattr(value, "__dict__"):
            return label
    return None


class Replay:
    """Copies of the state a run reaches, taken before it, to run a second time on."""

    #: The fingerprint of the copies right after ``capture`` (unset on a refused replay).
    _marks: list[Any]
    #: The same of the user's objects the copies were made from (``reals_moved``).
    _real_marks: list[Any]

    def __init__(self, slots: dict[str, Slot], reals: dict[str, Any], copies: dict[str, Any],
                 extra_copy: Any, refused: str | None, modules: Iterable[types.ModuleType] = (),
                 imports: Iterable[str] = ()) -> None:
        #: label -> where the real object lives; label -> the real object copied; label -> its copy
        self.slots = slots
        self.reals = reals
        self.copies = copies
        self.extra_copy = extra_copy
        #: Why the run cannot be replayed (nothing was copied), or None.
        self.refused = refused
        #: The same reason without its lead ("not compared: "): a clause others put in their own words.
        self.refusal = refused
        #: id(real) -> copy, for every object copied (tensors, modules, optimizers...)
        self.memo: dict[int, Any] = {}
        #: (real tensor, its copy, real version at capture, copy version at capture)
        self.pairs: list[tuple[torch.Tensor, torch.Tensor, int, int]] = []
        #: id(real object) -> where it was found ("model.fc.weight"), for messages
        self.labels: dict[int, str] = {}
        #: Optimizers among the copied objects: (label, real, copy)
        self.optimizers: list[tuple[str, Any, Any]] = []
        #: After ``swapped``: (label, what the slot held before the swap, what the second run left in it)
        self.outcomes: list[tuple[str, Any, Any]] = []
        #: ``_slot_labels``: the slots it was made from, their number, slot -> label.
        self._labels_of: tuple[dict[str, Slot], int, dict[Slot, str]] | None = None
        #: The user's modules the run can reach (a global, an import inside a function): an audit watches
        #: their attributes (``check.no_outside_effects``), as the copies hold only those the code names.
        self.modules: list[types.ModuleType] = list(modules)
        #: Module names the run's functions import inside themselves (a first import runs a module's code).
        self.imports: set[str] = set(imports)
        #: The namespace the run evaluates in, when its caller knows it (the audit watches the names no copy
        #: holds: ``audit._Shallow``).
        self.namespace: dict[str, Any] | None = None
        #: What the copies' containers held right after ``capture`` (``rewind`` puts it back).
        self._contents: list[tuple[Any, Any]] = []
        #: The user's tensors shared with the copies, not copied (over the budget, the user's own run left
        #: them unwritten): (tensor, its marks: ``_marks``). ``shared_written`` audits them.
        self.shared: list[tuple[torch.Tensor, tuple[Any, ...]]] = []
        self._keep_alive: Any = []

    @classmethod
    def capture(cls, roots: dict[str, tuple[Slot, Any]], extra: Any = None,
                budget: int | None = None, *, modules: Iterable[types.ModuleType] = (),
                imports: Iterable[str] = (), read_only: ReadOnly | None = None) -> Replay:
        """Copy the ``roots`` (label -> (slot, the real object)) and ``extra`` (a call's arguments) in one
        deep copy; refuse (``refused``) what cannot be copied or replayed. ``modules``: the user's modules
        the run reaches (watched by the audit); ``imports``: the module names its functions import.
        ``read_only``: the tensors the user's own run of the same code left unwritten (``ReadOnly``); when the
        tensors reached are over the copy ``budget`` (default ``MAX_COPY_BYTES``), those are shared with
        the copies instead of copied (``shared``; ``shared_written`` audits them after a run), and only
        what that run wrote is copied."""
        budget = MAX_COPY_BYTES if budget is None else budget
        modules, imports = list(modules), set(imports)
        slots = {label: slot for label, (slot, _) in roots.items()}
        reals = {label: real for label, (_, real) in roots.items()}
        found: dict[int, tuple[Any, str]] = {}
        for label, value in reals.items():
            _walk(value, found, label)
        _walk(extra, found, "argument")
        tensors = [t for t, _ in found.values() if isinstance(t, torch.Tensor)]
        tensors += [t.grad for t in tensors if t.grad is not None]

        def refuse(why: str) -> Replay:
            refused = cls(slots, reals, {}, None, f"not compared: {why}", modules, imports)
            refused.refusal = why
            return refused

        size = sum(_nbytes(t) for t in tensors)
        memo: dict[int, Any] = {}
        shared: list[tuple[torch.Tensor, tuple[Any, ...]]] = []
        if size > budget:
            what = ", ".join(list(reals)[:3]) or "the arguments"
            if read_only is None:
                return refuse(f"the run reaches {size / 2**20:.0f} MiB of tensors ({what}), more than "
                              f"the {budget >> 20} MiB nbcompile copies to run it again without touching yours")
            grads = {id(t.grad) for t in tensors if t.grad is not None}
            for t in tensors:
                mark = read_only.holds(t) if id(t) not in grads else None
                if mark is not None:
                    memo[id(t)] = t  # deepcopy hands back the tensor itself: shared, not copied
                    shared.append((t, mark))
            if shared:
                memo[id(memo)] = [t for t, _ in shared]  # deepcopy's keep-alive list, as it makes it
            shared_grads = {id(t.grad) for t, _ in shared if t.grad is not None}
            copied_size = sum(_nbytes(t) for t in tensors if id(t) not in memo and id(t) not in shared_grads)
            if copied_size > budget:
                return refuse(f"the run reaches {size / 2**20:.0f} MiB of tensors ({what}) and "
                              f"{read_only.describe_written(copied_size)}, more than the {budget >> 20} MiB "
                              "nbcompile copies to run it again without touching yours")
        history = next((label for t, label in found.values()
                        if isinstance(t, torch.Tensor) and t.requires_grad and not t.is_leaf), None)
        if history is not None:
            return refuse(f"{history} carries autograd history (a tensor computed from tensors "
                          "that require grad), which cannot be copied to run again without touching yours")
        for value, _ in found.values():  # a lock guards, it holds no data: the copies take the same one
            if isinstance(value, _LOCKS):
                memo[id(value)] = value
        try:
            copied = copy.deepcopy((reals, extra), memo)
        except Exception as exc:  # a lock, a file, a generator: say so, repeat nothing
            return refuse(f"{_uncopyable(reals)} cannot be copied ({type(exc).__name__}: "
                          f"{cut((str(exc).splitlines() or [''])[0], 80)}), "
                          "so the eager run could not be kept off your objects")
        replay = cls(slots, reals, copied[0], copied[1], None, modules, imports)
        replay._keep_alive = memo.pop(id(memo), [])  # what deepcopy kept alive: no id in the memo is reused
        replay.memo = memo
        rehome_callables([*replay.copies.values(), replay.extra_copy], memo, replay._keep_alive)
        _rehome_dropped([real for real, _ in found.values()], memo, replay._keep_alive)
        kept_as_is = _shared_with_copies(found, (replay.copies, replay.extra_copy), {id(t) for t, _ in shared})
        if kept_as_is is not None:
            return refuse(f"{kept_as_is} is its own copy (its __deepcopy__ hands it back), so a second run would "
                          "change yours")
        for label, value in list(replay.copies.items()):  # a function the run names (its defaults, its closure)
            if isinstance(value, _REHOMED):
                replay.copies[label] = _rehomed(value, memo, replay._keep_alive)
        replay.shared = shared
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
        replay._marks = replay._fingerprint()
        replay._real_marks = replay._real_fingerprint()
        replay._contents = _containers([*replay.copies.values(), replay.extra_copy])
        return replay

    def rewind(self) -> None:
        """Put back what the copies held right after ``capture``: each slot its copy (a counter the run
        rebound), each list, dict and set among the copies its first contents (an append), the same
        objects, so compiled code guarding on them stays valid. Between timed runs: what a run appends
        never accumulates. Tensors changed in place (a training step) are left as they are."""
        for label, value in self.copies.items():
            slot = self.slots[label]
            if slot.get() is not value:
                slot.set(value)
        for container, contents in self._contents:
            if isinstance(container, list):
                if len(container) != len(contents) or any(a is not b for a, b in zip(container, contents,
                                                                                      strict=False)):
                    container[:] = contents
            elif isinstance(container, dict):
                if len(container) != len(contents) or any(container.get(k, _ABSENT) is not v
                                                          for k, v in contents.items()):
                    container.clear()
                    container.update(contents)
            elif isinstance(container, set) and container != contents:
                container.clear()
                container.update(contents)

    def refresh(self, reals: dict[str, Any]) -> str | None:
        """Make the copies equal again to the real objects as they are now (``reals``: label -> the real
        object, as ``capture`` was given), keeping every copy's identity: compiled code of runs on the copies
        guards on those identities (an optimizer's, a module's), so a toggle back runs it without compiling.
        Each tensor gets its real's values and grad in place; each container and object attribute the same
        contents as its real, through the copies; nothing the run added stays. Refused (the reason returned,
        the copies then unusable: capture anew) when the reals are other objects now, hold an object that
        was not copied (the user's run made it: an optimizer's first state), a tensor changed shape, dtype
        or device, or the copies share tensors with the user (over the copy budget). None: done."""
        if self.refused is not None:
            return self.refused
        if self.shared:
            return "the copies share tensors with your objects (the state is over the copy budget)"
        if set(reals) != set(self.reals) or any(reals[k] is not self.reals[k] for k in reals):
            return "the names the run reaches hold other objects now"
        memo = self.memo
        seen: set[int] = set()

        def mapped(value: Any) -> Any:
            if isinstance(value, _REHOMED):  # a closure, method or weak reference: the copies' own, when it
                return _rehomed(value, memo, self._keep_alive)  # reaches a real object (else itself)
            if isinstance(value, _DEEPCOPY_KEEPS):
                return value  # deepcopy hands these back as they are
            twin = memo.get(id(value), _ABSENT)
            if twin is _ABSENT and type(value) in (tuple, frozenset) and all(mapped(v) is v for v in value):
                return value  # immutable through and through: deepcopy hands it back
            return twin

        def graft(real: Any, twin: Any, where: str, depth: int = 0) -> str | None:
            if real is twin or id(real) in seen or isinstance(real, _ATOMIC):
                return None
            if depth > 4 * _WALK_DEPTH:
                return f"{where} is nested too deep to compare"
            seen.add(id(real))
            if isinstance(real, torch.Tensor):
                return _graft_tensor(real, twin, where)
            if isinstance(real, dict):
                return graft_items(list(real.items()), twin, where, depth, keyed=True)
            if isinstance(real, (list, set)):
                return graft_items([(None, v) for v in real], twin, where, depth, keyed=False)
            if isinstance(real, (tuple, frozenset)):
                for a, b in zip(real, twin, strict=False):
                    problem = graft_value(a, b, where, depth)
                    if problem:
                        return problem
                return None
            if isinstance(real, collections.deque) and isinstance(twin, collections.deque):
                return graft_items([(None, v) for v in real], twin, where, depth, keyed=False)
            state = getattr(real, "__dict__", None)
            if isinstance(state, dict) and isinstance(getattr(twin, "__dict__", None), dict) \
                    and _plain_class(type(real)):
                return graft_items(list(state.items()), twin.__dict__, where, depth, keyed=True)
            if isinstance(state, dict) and isinstance(getattr(twin, "__dict__", None), dict) \
                    and isinstance(real, (torch.nn.Module, torch.optim.Optimizer)):
                return graft_items(list(state.items()), twin.__dict__, where, depth, keyed=True)
            # state held outside a __dict__ (a generator's, a random.Random's, an array's): not refreshed in place
            return f"{where} ({type(real).__name__}) holds state nbcompile cannot refresh in place"

        def graft_value(real: Any, twin: Any, where: str, depth: int) -> str | None:
            expected = mapped(real)
            if expected is _ABSENT:
                return f"{where} holds a {type(real).__name__} made after the copies"
            if expected is not twin:
                return f"{where} holds other objects in the copies"
            return graft(real, twin, where, depth + 1)

        def graft_items(items: list[tuple[Any, Any]], twin: Any, where: str, depth: int, *, keyed: bool) -> str | None:
            contents: list[tuple[Any, Any]] = []
            olds = list(twin.items()) if isinstance(twin, dict) else list(twin) if isinstance(twin, list) else []
            for i, (key, value) in enumerate(items):
                label = (f"{where}[{key!r}]" if isinstance(key, (str, int)) else f"{where}[a {type(key).__name__}]") \
                    if keyed else where
                twin_key = mapped(key) if keyed else None
                twin_value = mapped(value)
                if twin_value is _ABSENT and twin_key is not _ABSENT:
                    # not copied by the deep copy (an object's __setstate__ made it: an optimizer's hook dicts),
                    # or made since on both sides (an optimizer's state, by each one's step): the copies' own
                    # object at the same place, when it is of the same kind, is given the real one's contents
                    here = twin.get(twin_key, _ABSENT) if isinstance(twin, dict) else \
                        olds[i] if isinstance(twin, list) and i < len(olds) else _ABSENT
                    if here is not _ABSENT and type(here) is type(value) and isinstance(value, (dict, list, set,
                                                                                                 torch.Tensor)):
                        twin_value = here
                if twin_key is _ABSENT or twin_value is _ABSENT:
                    return f"{label} holds a {type(value).__name__} made after the copies"
                problem = graft(value, twin_value, label, depth + 1)
                if problem:
                    return problem
                contents.append((twin_key, twin_value))
            if isinstance(twin, dict):
                if len(twin) != len(contents) or any(twin.get(k, _ABSENT) is not v for k, v in contents):
                    twin.clear()
                    twin.update(contents)
            elif isinstance(twin, list):
                if len(twin) != len(contents) or any(a is not b for a, (_, b) in zip(twin, contents, strict=False)):
                    twin[:] = [v for _, v in contents]
            elif isinstance(twin, set):
                wanted = {v for _, v in contents}
                if twin != wanted:
                    twin.clear()
                    twin.update(wanted)
            elif isinstance(twin, collections.deque):
                if len(twin) != len(contents) or any(a is not b for a, (_, b) in zip(twin, contents, strict=False)):
                    twin.clear()
                    twin.extend(v for _, v in contents)
            return None

        for label, real in self.reals.items():
            problem = graft_value(real, self.copies[label], label, 0) if label in self.copies else None
            if problem:
                return problem
            self.slots[label].get()  # the slot still reads (a deleted global raises here, refused below)
        self.pairs = [(t, c, torch_compat.tensor_version(t), torch_compat.tensor_version(c))
                      for t, c, _, _ in self.pairs]
        self.outcomes = []
        self._marks = self._fingerprint()
        self._real_marks = self._real_fingerprint()
        self._contents = _containers([*self.copies.values(), self.extra_copy])
        return None

    def _real_fingerprint(self) -> list[Any]:
        marks: list[Any] = []
        for real, _, _, _ in self.pairs:
            grad = real.grad
            marks.append((torch_compat.tensor_version(real), id(grad),
                          grad is not None and torch_compat.tensor_version(grad)))
        marks.extend(len(real.state) for _, real, _ in self.optimizers)
        return marks

    def reals_moved(self, since: list[Any] | None = None) -> str | None:
        """The first of the user's objects (by its label) that changed since the copies were made or
        refreshed (or since ``since``, a ``_real_fingerprint``): a run on the copies reached it through
        something the copies do not hold apart. None: none did (or nothing was recorded)."""
        before = since if since is not None else getattr(self, "_real_marks", None)
        if before is None:
            return None
        now = self._real_fingerprint()
        for i, (a, b) in enumerate(zip(before, now, strict=False)):
            if a != b:
                if i < len(self.pairs):
                    return self.labels.get(id(self.pairs[i][0]), "a tensor")
                return self.optimizers[i - len(self.pairs)][0]
        return None

    def restore_reals(self, pristine: Replay) -> list[str]:
        """Put the user's tensors that moved back to their values in ``pristine`` (a copy of the same state
        made before the run and not run on since), in place; returns the labels it could not put back."""
        lost: list[str] = []
        before, now = getattr(self, "_real_marks", []), self._real_fingerprint()
        with torch.no_grad():
            for i, (real, _, _, _) in enumerate(self.pairs):
                if i < len(before) and before[i] == now[i]:
                    continue
                twin = pristine.memo.get(id(real))
                label = self.labels.get(id(real), "a tensor")
                if not isinstance(twin, torch.Tensor) or twin is real or twin.shape != real.shape:
                    lost.append(label)
                    continue
                real.copy_(twin)
                real.grad = None if twin.grad is None else twin.grad.detach().clone()
        for label, real, _ in self.optimizers:
            twin = pristine.memo.get(id(real))
            if isinstance(twin, torch.optim.Optimizer) and twin is not real:
                try:
                    real.load_state_dict(twin.state_dict())
                except Exception:  # noqa: BLE001  a state the optimizer will not take back: say so
                    lost.append(label)
        return lost

    def _fingerprint(self) -> list[Any]:
        marks: list[Any] = []
        for _, twin, _, _ in self.pairs:
            grad = twin.grad
            marks.append((torch_compat.tensor_version(twin), id(grad),
                          grad is not None and torch_compat.tensor_version(grad)))
        for value in [*self.copies.values(), self.extra_copy]:
            marks.append(len(value) if isinstance(value, (list, dict, set)) else None)
        return marks

    def touched(self) -> bool:
        """Whether runs on the copies changed them (a training step, an append): their outputs then
        differ from run to run by design."""
        return self.refused is None and self._fingerprint() != getattr(self, "_marks", None)

    def widened(self, budget: int = MAX_COPY_BYTES) -> Replay:
        """A further copy of the copies (taken before any run used them), its floating-point tensors in
        float64: the state the float64 reference run gets. ``refused`` says why there is none (over the
        copy budget, tensors sharing storage, a layout that cannot be widened, a copy that failed); the
        memo still maps each real object (by id) to its float64 copy."""
        if self.refused is not None:
            return Replay(self.slots, self.reals, {}, None, self.refused, self.modules, self.imports)

        def refuse(why: str) -> Replay:
            return Replay(self.slots, self.reals, {}, None, why, self.modules, self.imports)

        found: dict[int, tuple[Any, str]] = {}
        for label, value in self.copies.items():
            _walk(value, found, label)
        _walk(self.extra_copy, found, "argument")
        tensors = [t for t, _ in found.values() if isinstance(t, torch.Tensor)]
        tensors += [t.grad for t in tensors if t.grad is not None]
        wide = sum(t.numel() * 8 if t.dtype in _NARROW else _nbytes(t) for t in tensors)
        if wide > budget:
            return refuse(f"a float64 copy of the state would take {wide / 2**20:.0f} MiB, more than the "
                          f"{budget >> 20} MiB nbcompile copies")
        storages: dict[tuple[str, int], int] = {}
        for t in tensors:
            if t.dtype not in _NARROW:
                continue
            if t.layout != torch.strided or t.is_sparse:
                return refuse(f"a tensor has layout {t.layout}, which a float64 copy does not keep")
            key = (str(t.device), t.untyped_storage().data_ptr())
            if key in storages and storages[key] != id(t):
                return refuse("two tensors share storage (views of one tensor), which a float64 copy would part")
            storages[key] = id(t)
        memo: dict[int, Any] = {id(v): v for v, _ in found.values() if isinstance(v, _LOCKS)}  # shared
        try:
            copies, extra = copy.deepcopy((self.copies, self.extra_copy), memo)
        except Exception as exc:
            return refuse(f"the copies could not be copied again ({type(exc).__name__})")
        keep_alive = memo.pop(id(memo), [])
        rehome_callables([copies, extra], memo, keep_alive)  # the copies' closures reach the float64 copies
        _rehome_dropped(list(self.memo.values()), memo, keep_alive)
        copies = {label: _rehomed(value, memo, keep_alive) if isinstance(value, _REHOMED) else value
                  for label, value in copies.items()}
        composed = {real: memo.get(id(c), c) for real, c in self.memo.items()}
        for c in list(self.memo.values()):
            twin = memo.get(id(c))
            if isinstance(c, torch.Tensor) and isinstance(twin, torch.Tensor) and c.grad is not None \
                    and twin.grad is None and twin.is_leaf:
                twin.grad = c.grad.detach().clone()  # Parameter's deepcopy drops .grad
        try:
            with torch.no_grad():
                for twin in [v for v in memo.values() if isinstance(v, torch.Tensor)]:
                    if twin.dtype not in _NARROW:
                        continue
                    grad = twin.grad
                    if grad is not None:
                        twin.grad = None
                    twin.data = twin.data.to(torch.float64)
                    if grad is not None:
                        twin.grad = grad.to(torch.float64)
        except (RuntimeError, TypeError) as exc:
            return refuse(f"a tensor could not be made float64 ({type(exc).__name__}: "
                          f"{cut((str(exc).splitlines() or [''])[0], 80)})")
        replay = Replay(self.slots, self.reals, copies, extra, None, self.modules, self.imports)
        replay.namespace = self.namespace
        replay._keep_alive = [self._keep_alive, keep_alive]
        replay.memo = composed
        replay.labels = dict(self.labels)
        replay.optimizers = [(label, real, composed[id(real)]) for label, real, _ in self.optimizers
                             if id(real) in composed]
        for real, _, v_real, _ in self.pairs:
            wide_twin = composed.get(id(real))
            if isinstance(wide_twin, torch.Tensor):
                replay.pairs.append((real, wide_twin, v_real, torch_compat.tensor_version(wide_twin)))
        replay._marks = replay._fingerprint()
        replay._contents = _containers([*replay.copies.values(), replay.extra_copy])
        return replay

    @contextlib.contextmanager
    def swapped(self, also: dict[Slot, Any] | None = None,
                override: dict[Slot, Any] | None = None) -> Iterator[Any]:
        """The copies (and ``also``: slot -> object) put in place of the real objects for the duration;
        yields the copy of ``extra``. ``override`` (slot -> object) wins over a copy (a module entry's copy
        compiled). Each slot gets back what it held, unless the run itself rebound it."""
        put: dict[Slot, Any] = {**(also or {}), **{self.slots[label]: c for label, c in self.copies.items()},
                                **(override or {})}
        saved: list[tuple[Slot, Any]] = []
        try:
            SWAPPED[0] += 1
            for slot, value in put.items():
                saved.append((slot, slot.get()))
                slot.set(value)
            yield self.extra_copy
        finally:
            labels = self._slot_labels()
            self.outcomes = [(labels[slot], before, slot.get()) for slot, before in saved if slot in labels]
            for slot, before in reversed(saved):
                slot.set(before)
            SWAPPED[0] -= 1

    def _slot_labels(self) -> dict[Slot, str]:
        """``slots`` the other way round, made once for the slots of the moment."""
        known = self._labels_of
        if known is None or known[0] is not self.slots or known[1] != len(self.slots):
            known = self._labels_of = (self.slots, len(self.slots),
                                       {slot: label for label, slot in self.slots.items()})
        return known[2]

    def shared_written(self) -> str | None:
        """The first shared tensor a run on the copies changed (in place, or its grad), by its label; None
        when they are all as they were. A run of the same code that the user's own run made read-only
        writes them only when it took another path: the caller refuses further runs."""
        for t, mark in self.shared:
            if _marks(t) != mark:
                return self.labels.get(id(t), "a tensor")
        return None

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


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement, not by C code
_OWN_STATE = ("__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__deepcopy__", "__slots__")


def _plain_class(cls: type) -> bool:
    """A class whose instances keep all their state in their ``__dict__``: written in Python all the way up,
    none of its classes copying or pickling itself its own way (a ``random.Random`` keeps its state in C)."""
    return all(klass is object or (klass.__flags__ & _HEAPTYPE and not any(n in vars(klass) for n in _OWN_STATE))
               for klass in cls.__mro__)


def _graft_tensor(real: torch.Tensor, twin: Any, where: str) -> str | None:
    """``twin`` given ``real``'s values and grad in place (``Replay.refresh``), or why it cannot be."""
    if not isinstance(twin, torch.Tensor):
        return f"{where} is not a tensor in the copies"
    if (real.shape, real.stride(), real.dtype, real.device, real.requires_grad, real.layout) != \
            (twin.shape, twin.stride(), twin.dtype, twin.device, twin.requires_grad, twin.layout):
        return f"{where} changed shape, dtype or device since the copies were made"
    if real.layout != torch.strided or real.is_quantized:
        return f"{where} has layout {real.layout}, which nbcompile does not refresh in place"
    with torch.no_grad():
        twin.detach().copy_(real.detach())
        grad = real.grad
        if grad is None:
            twin.grad = None
        elif twin.grad is not None and twin.grad.shape == grad.shape and twin.grad.dtype == grad.dtype:
            twin.grad.copy_(grad)
        else:
            twin.grad = grad.detach().clone()
    return None


def _containers(values: Iterable[Any]) -> list[tuple[Any, Any]]:
    """(container, a shallow copy of what it holds) for every list, dict and set reachable from
    ``values`` (through containers and plain objects, to the walk's depth)."""
    found: dict[int, tuple[Any, str]] = {}
    for value in values:
        _walk(value, found, "")
    out: list[tuple[Any, Any]] = []
    for obj, _ in found.values():
        if type(obj) in (list, set):
            out.append((obj, type(obj)(obj)))
        elif type(obj) is dict:
            out.append((obj, dict(obj)))
    return out


def _uncopyable(roots: dict[str, Any]) -> str:
    """The first root that cannot be deep-copied, by label."""
    for name, value in roots.items():
        try:
            copy.deepcopy(value)
        except Exception:
            return f"`{name}`"
    return "an argument of the call"
