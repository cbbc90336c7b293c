"""Capture: torch's structured trace, typed at the edge and routed to the recordings that own the code
(the hub), guards read into what the user wrote, and a cell's source.

Its names load when first used: reading a trace log (``logs``, ``records``, ``divergence``) needs no torch."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import guards
    from .compilation import cudagraph_fallback
    from .hub import HUB, Hub, Recording, RecordingBackend

__all__ = ["HUB", "Hub", "Recording", "RecordingBackend", "cudagraph_fallback", "guards"]

_EXPORTS = {"HUB": ".hub", "Hub": ".hub", "Recording": ".hub", "RecordingBackend": ".hub",
            "cudagraph_fallback": ".compilation"}


def __getattr__(name: str) -> Any:
    if name == "guards":
        return importlib.import_module(".guards", __name__)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
