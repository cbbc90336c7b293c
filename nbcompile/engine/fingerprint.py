"""A deep fingerprint of state a run may change in place without rebinding it.

The module audit (``check.no_outside_effects``) watches the attributes of the user's modules that no
copy holds. A rebinding shows as a new object; a change in place (``m.stats["a"]["n"] += 1``,
``m.state.n += 1``, ``m.Counter.n += 1``, ``m.buf.add_(1)``, ``m.far[40] += 1``) does not. A
fingerprint taken before the run and compared after it sees both: containers item by item, instances,
and user classes through their ``__dict__``, functions through their defaults and closures, tensors by
their version counter (and their ``.grad``), numpy arrays and byte buffers by a checksum.

The walk is bounded (``MAX_NODES`` objects, ``MAX_BUFFER_BYTES`` of checksummed buffers); a fingerprint
that hit a bound is ``complete = False``, and the audit then refuses to vouch for that module rather
than guess. Every object the walk met is kept alive until the fingerprint is dropped, so an id cannot be
reused by a new object during the run.
"""

from __future__ import annotations

import argparse
import array
import collections
import itertools
import sys
import types
import zlib
from collections.abc import Hashable
from typing import Any

import torch

from ..core import torch_compat
from ..core.paths import installed_file

#: The most objects the audit walks in one module the run reaches (a global, an import in its code).
MAX_NODES = 200_000
#: The most bytes of numpy arrays and byte buffers it checksums there.
MAX_BUFFER_BYTES = 64 * 2**20
#: The same, for every other user module (one the run could reach only by ``importlib`` or ``sys.modules``):
#: watched as far as these go, so that a data set in a module the run never names costs little.
OTHER_NODES = 20_000
OTHER_BUFFER_BYTES = 8 * 2**20
#: A CPU tensor up to this size is fingerprinted by its contents too (a write through ``.data`` or ``.numpy()``
#: does not move its version counter).
SMALL_TENSOR_BYTES = 64 * 2**10
#: How deep the walk follows containers and attributes.
MAX_DEPTH = 24

_ATOMS = (type(None), bool, int, str, bytes, type(Ellipsis))
#: Objects of classes not the user's whose attributes are walked all the same: the state holders of torch
#: and the standard library's plain records.
_WALKED = (torch.nn.Module, torch.optim.Optimizer, types.SimpleNamespace, argparse.Namespace)


class Walk:
    """One audit's walk: its budget, the objects it met (kept alive) and whether it saw everything."""

    def __init__(self, max_nodes: int | None = None, max_bytes: int | None = None) -> None:
        self.nodes_left = MAX_NODES if max_nodes is None else max_nodes
        self.bytes_left = MAX_BUFFER_BYTES if max_bytes is None else max_bytes
        self.complete = True
        self._keep: list[Any] = []

    def of(self, value: Any, home: str | None = None) -> Hashable:
        """The fingerprint of ``value``: equal before and after a run exactly when the walk sees no change.
        ``home``: the module ``value`` is an attribute of; a function or class defined in another module
        is that module's to watch (an import of it here is only a name)."""
        if home is not None and isinstance(value, (type, types.FunctionType)) \
                and getattr(value, "__module__", home) != home:
            return ("imported", id(value))
        return self._of(value, 0, {})

    def _of(self, value: Any, depth: int, seen: dict[int, int]) -> Hashable:
        kind = type(value)
        if kind in _ATOMS:
            return (kind.__name__, value)
        if kind is float:
            return ("float", value.hex())
        if kind is complex:
            return ("complex", repr(value))
        if id(value) in seen:
            return ("seen", seen[id(value)])
        self.nodes_left -= 1
        if self.nodes_left < 0 or depth > MAX_DEPTH:
            self.complete = False
            return ("unseen",)
        seen[id(value)] = len(seen)
        self._keep.append(value)
        return (id(value), *self._inside(value, depth + 1, seen))

    def _inside(self, value: Any, depth: int, seen: dict[int, int]) -> tuple[Hashable, ...]:
        walk = self._of
        if isinstance(value, torch.Tensor):
            return self._tensor(value, depth, seen)
        if isinstance(value, types.ModuleType):
            return ("module",)  # audited as a module of its own, or not the user's
        extra = self._attributes(value, depth, seen) if isinstance(value, _PLAIN_CONTAINERS) \
            and type(value) not in _PLAIN_CONTAINERS else ()  # a dict subclass's own attributes
        if isinstance(value, (list, tuple, collections.deque)):
            return ("seq", *(walk(v, depth, seen) for v in value), *extra)
        if isinstance(value, dict):
            return ("map", *((walk(k, depth, seen), walk(v, depth, seen)) for k, v in list(value.items())), *extra)
        if isinstance(value, (set, frozenset)):
            return ("set", frozenset(walk(v, depth, seen) for v in value), *extra)
        if isinstance(value, (bytearray, memoryview, array.array)) or _is_ndarray(value):
            return ("buffer", *self._buffer(value))
        if isinstance(value, itertools.count):
            return ("count", repr(value))  # its next number shows only in its repr
        if isinstance(value, types.FunctionType):
            cells = tuple(_cell(c) for c in value.__closure__ or ())
            own = tuple((k, walk(v, depth, seen)) for k, v in list(vars(value).items())
                        if not k.startswith(("__", "_torchdynamo", "_dynamo")))
            return ("function", walk(value.__defaults__, depth, seen), walk(value.__kwdefaults__, depth, seen),
                    own, *(walk(c, depth, seen) for c in cells))
        if isinstance(value, types.MethodType):
            return ("method", walk(value.__func__, depth, seen), walk(value.__self__, depth, seen))
        if isinstance(value, type):
            if not _own_class(value):
                return ("class",)
            # its methods by name only: nbcompile's toggles install their wrappers there while a run binds them
            return ("class", *((k, ("code",) if _is_code(v) else walk(v, depth, seen))
                               for k, v in list(vars(value).items()) if not k.startswith("__")))
        if not isinstance(value, _WALKED) and not _own_class(type(value)) and not _plain_stdlib(type(value)):
            return ("library",)  # a library's object (a logger, a device): its registries are not the user's
        return ("object", *self._attributes(value, depth, seen))

    def _attributes(self, value: Any, depth: int, seen: dict[int, int]) -> tuple[Hashable, ...]:
        """An object's own attributes (its ``__dict__`` and slots): a dict subclass's too."""
        parts: list[Hashable] = []
        attrs = getattr(value, "__dict__", None)
        if isinstance(attrs, dict):
            parts.append(self._of(attrs, depth, seen))
        for name in _slots(type(value)):
            try:
                slot = getattr(value, name, None)
            except Exception:  # a slot whose descriptor raises: its contents cannot be seen
                self.complete = False
                continue
            parts.append((name, self._of(slot, depth, seen)))
        return tuple(parts)

    def _tensor(self, value: torch.Tensor, depth: int, seen: dict[int, int]) -> tuple[Hashable, ...]:
        try:
            version: Hashable = torch_compat.tensor_version(value)
        except RuntimeError:  # an inference tensor has no version counter: its contents then
            version = self._buffer_of_tensor(value)
        grad = value.grad if value.is_leaf else None
        contents: Hashable = None
        if value.device.type == "cpu" and value.numel() * value.element_size() <= SMALL_TENSOR_BYTES:
            contents = self._buffer_of_tensor(value)  # writes through .data or .numpy() keep the version
        return ("tensor", version, contents, self._of(grad, depth, seen) if grad is not None else None)

    def _buffer_of_tensor(self, value: torch.Tensor) -> Hashable:
        size = value.numel() * value.element_size()
        if value.device.type != "cpu" or size > self.bytes_left:
            self.complete = False
            return ("unseen",)
        self.bytes_left -= size
        try:
            data = value.detach().contiguous().view(-1).view(torch.uint8).numpy()
        except (RuntimeError, TypeError):  # sparse, quantized, a subclass: contents not readable as bytes
            self.complete = False
            return ("unseen",)
        return zlib.crc32(data.tobytes())

    def _buffer(self, value: Any) -> tuple[Hashable, ...]:
        try:
            view = memoryview(value)
        except (TypeError, ValueError):  # an object array: its items are objects, not bytes
            self.complete = False
            return ("unseen",)
        size = view.nbytes
        if size > self.bytes_left:
            self.complete = False
            return ("unseen",)
        self.bytes_left -= size
        if not view.c_contiguous:
            return (view.shape, zlib.crc32(view.tobytes()))
        return (view.shape, zlib.crc32(view.cast("B") if view.ndim else view.tobytes()))


_PLAIN_CONTAINERS = (list, tuple, dict, set, frozenset, collections.deque)
#: Standard-library modules whose objects hold the process's machinery, not the user's data.
_MACHINERY = frozenset({"logging", "threading", "asyncio", "socket", "ssl", "multiprocessing", "concurrent",
                        "subprocess", "selectors", "io", "_io", "weakref", "abc", "typing", "enum"})


def _plain_stdlib(cls: type) -> bool:
    """A class of the standard library written in Python whose objects hold data (``queue.Queue``,
    ``collections.Counter``, ``fractions.Fraction``), not machinery (loggers, threads, files)."""
    top = cls.__module__.split(".", 1)[0]
    return top in sys.stdlib_module_names and top not in _MACHINERY and hasattr(cls, "__dict__") \
        and bool(cls.__flags__ & (1 << 9))


def _is_code(value: Any) -> bool:
    return isinstance(value, (types.FunctionType, staticmethod, classmethod, property)) or (
        callable(value) and not isinstance(value, type) and hasattr(value, "__wrapped__"))


def _is_ndarray(value: Any) -> bool:
    return type(value).__module__ == "numpy" and type(value).__name__ == "ndarray"


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:
        return None


_OWN_PACKAGE = __name__.split(".", 1)[0]


def _own_class(cls: type) -> bool:
    """A class the user defined in Python (in a notebook or a module of theirs; not torch's, not an
    installed package's, not the standard library's): its attributes, and its instances', can be state."""
    if not cls.__flags__ & (1 << 9) or cls.__module__.startswith("torch"):  # Py_TPFLAGS_HEAPTYPE
        return False
    if cls.__module__ == "__main__":
        return True
    if cls.__module__.split(".", 1)[0] == _OWN_PACKAGE:  # nbcompile's own bookkeeping, never the run's
        return False
    home = sys.modules.get(cls.__module__)
    path = str(getattr(home, "__file__", None) or "")
    return home is not None and (not path or not installed_file(path))


def _slots(cls: type) -> list[str]:
    names: list[str] = []
    for klass in cls.__mro__:
        slots = vars(klass).get("__slots__", ())
        for name in [slots] if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and name not in names:
                names.append(name)
    return names
