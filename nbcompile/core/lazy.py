"""Modules loaded at their first use: what reads a trace log from disk never loads torch (issue 37).

Not ``importlib.util.LazyLoader``: its module sits in ``sys.modules`` half-made, and code that walks
``sys.modules`` (torch's own import does) would run it in the middle of torch's import."""

from __future__ import annotations

import importlib
from typing import Any


class Deferred:
    """Stands in for module ``name`` under the global ``alias`` of ``namespace`` (a module's ``globals()``):
    the first attribute read imports it and binds ``alias`` to the module itself, so later reads are plain."""

    def __init__(self, name: str, namespace: dict[str, Any], alias: str) -> None:
        self._name, self._namespace, self._alias = name, namespace, alias

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self._name)
        if self._namespace.get(self._alias) is self:
            self._namespace[self._alias] = module
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, loaded at its first use>"


def lazy_module(name: str, namespace: dict[str, Any], alias: str) -> Any:
    """Module ``name`` where it is loaded already, else a ``Deferred`` for it."""
    import sys

    return sys.modules.get(name) or Deferred(name, namespace, alias)
