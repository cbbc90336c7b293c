"""Which code and modules are the user's: a cell's code or a file of theirs (``user_code``, ``user_file``:
not the standard library's, an installed package's or torch's); the user's modules loaded now
(``user_modules``: not nbcompile's own, not ``__main__``), those their code built at run time included
(``made_at_run_time``); and the modules a function imports inside itself (``imported_modules``,
``import_names``).

What a run reaches (``state``), what an audit watches (``check``) and what a traced-once function reads
(``frozen``) all ask here where the user's code ends.
"""

from __future__ import annotations

import collections
import dis
import functools
import os
import sys
import tempfile
import types
from collections.abc import Iterable
from typing import Any

import torch

from ..core import torch_compat
from ..core.paths import installed_file

_OWN_PACKAGE = __name__.split(".", 1)[0]


def _user_module(module: types.ModuleType) -> bool:
    """A module of the user's (not the standard library, not an installed package): one loaded from a
    file outside them, or one the user's code built (``types.ModuleType(...)`` put in ``sys.modules``)."""
    name = str(getattr(module, "__name__", ""))
    if name.startswith("torch"):
        return False
    path = getattr(module, "__file__", None)
    if path:
        return not installed_file(str(path))
    return made_at_run_time(module)


def user_code(code: types.CodeType) -> bool:
    """Code the user wrote (a cell, a file of theirs), not the standard library's or an installed package's."""
    return user_file(code.co_filename)


#: Code with no file of the user's behind it: the standard library's frozen modules (``<frozen posixpath>``), the
#: code torch.fx generates (``<eval_with_key>.3``).
_NOT_USERS = ("<frozen ", "<eval_with_key>")


def user_file(filename: str) -> bool:
    """A file of the user's (a cell's, a module of theirs), not the standard library's or an installed package's."""
    return not filename.startswith(os.path.dirname(torch.__file__)) and not filename.startswith(_NOT_USERS) \
        and not installed_file(filename)


def made_at_run_time(module: types.ModuleType) -> bool:
    """A module with no file that no import system made: not a builtin, frozen or extension module, not a
    namespace package, not a part of an installed package (``six.moves``, ``pyexpat.errors``)."""
    name = str(getattr(module, "__name__", ""))
    if (getattr(module, "__file__", None) or getattr(module, "__spec__", None) is not None
            or getattr(module, "__path__", None) is not None or name in sys.builtin_module_names
            or name in ("__main__", "__mp_main__")  # the notebook's own namespace (IPython's user module)
            or name.startswith(("torch", "_cython", "cython_runtime")) or name.split(".", 1)[0] == _OWN_PACKAGE):
        return False
    top = sys.modules.get(name.split(".", 1)[0])
    return top is None or top is module or (isinstance(top, types.ModuleType) and _user_module(top))


def user_modules(exclude: Iterable[dict[str, Any]] = ()) -> list[types.ModuleType]:
    """Every user module loaded now (``sys.modules``), however a run reaches it (``import``,
    ``importlib.import_module``, ``sys.modules[...]``, ``__import__``): what an audit watches besides
    the copies. Not nbcompile's own modules, not ``__main__``, not a module whose namespace is one of
    ``exclude`` (the notebook's, whose names the copies hold)."""
    skip = {id(space) for space in exclude}
    generated = (torch_compat.compile_cache_dir(), os.path.join(tempfile.gettempdir(), "torchinductor_"),
                 os.path.join(os.path.expanduser("~"), ".triton"))
    if _JUDGED_UNDER[0] != generated:  # torch's cache directory moved: every module is judged again
        _JUDGED.clear()
        _JUDGED_UNDER[0] = generated
    found = []
    for name, module in list(sys.modules.items()):
        judged = _JUDGED.get(name)
        if judged is not None and judged[0] is module:  # a module with a file, judged once (every run asks)
            mine = judged[1]
        else:
            mine = _is_user_module(name, module, generated)
            if getattr(module, "__file__", None):  # one without: whether it is the user's depends on its package
                _JUDGED[name] = (module, mine)
        if mine and id(vars(module)) not in skip:
            found.append(module)
    return found


#: (how many modules were loaded, the ids of their module-level containers), for ``torch_owned``.
_TORCH_OWNED: list[Any] = [-1, frozenset()]


def torch_owned(value: Any) -> bool:
    """Whether ``value`` is a container torch keeps at a module's top level (``torch._dynamo.utils.counters``,
    a registry): compiling changes it by design, so a user's module or notebook that imports it by name does
    not make a run's changes to it the run's effects (an audit neither names nor puts it back)."""
    if not isinstance(value, (dict, list, set, collections.deque)):
        return False
    if _TORCH_OWNED[0] != len(sys.modules):  # every audit asks for each name: the scan runs once per import
        modules = [m for n, m in list(sys.modules.items())
                   if (n == "torch" or n.startswith("torch.")) and m is not None]
        ids: set[int] = set()
        for module in modules:
            space = getattr(module, "__dict__", None)
            if isinstance(space, dict):
                ids.update(id(v) for v in list(space.values())
                           if isinstance(v, (dict, list, set, collections.deque)))
        _TORCH_OWNED[:] = [len(sys.modules), frozenset(ids)]
    return id(value) in _TORCH_OWNED[1]


#: name -> (the module, whether it is the user's), for ``user_modules``, under the paths of ``_JUDGED_UNDER``.
_JUDGED: dict[str, tuple[Any, bool]] = {}
_JUDGED_UNDER: list[tuple[str, ...]] = [()]


def _is_user_module(name: str, module: Any, generated: tuple[str, ...]) -> bool:
    path = str(getattr(module, "__file__", None) or "")
    return (isinstance(module, types.ModuleType) and "__main__" not in (name, module.__name__)
            and name.split(".", 1)[0] != _OWN_PACKAGE
            and (path.endswith(".py") or made_at_run_time(module))
            and not path.startswith(generated)  # not torch's generated kernels
            and _user_module(module))


def imported_modules(code: types.CodeType) -> list[types.ModuleType]:
    """The modules ``code`` (nested code included) imports inside itself (``import metrics``,
    ``from pkg import mod``), as they are in ``sys.modules`` now: the code's ``IMPORT_NAME``s."""
    found: list[types.ModuleType] = []
    for name in _import_names(code):
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            module = sys.modules.get(".".join(parts[:i]))
            if isinstance(module, types.ModuleType) and module not in found:
                found.append(module)
    return found


@functools.lru_cache(maxsize=4096)
def _import_names(code: types.CodeType) -> tuple[str, ...]:
    """The module names ``code`` (nested code included) imports inside itself, in order (read once per
    code: every run on copies asks again)."""
    return tuple(ins.argval for each in torch_compat.iter_code_objects(code) for ins in dis.get_instructions(each)
                 if ins.opname == "IMPORT_NAME" and isinstance(ins.argval, str) and ins.argval)


def import_names(code: types.CodeType) -> frozenset[str]:
    """The absolute module names ``code`` (nested code included) imports inside itself."""
    return frozenset(_import_names(code))
