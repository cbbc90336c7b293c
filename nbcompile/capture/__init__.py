"""Capture: torch's structured trace, typed at the edge and routed to the recordings that own the code
(the hub), guards read into what the user wrote, and a cell's source."""

from __future__ import annotations

from . import guards
from .compilation import cudagraph_fallback
from .hub import HUB, Hub, Recording, RecordingBackend

__all__ = ["HUB", "Hub", "Recording", "RecordingBackend", "cudagraph_fallback", "guards"]
